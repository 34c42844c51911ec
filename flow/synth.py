"""Logic synthesis of the emitted RTL onto Nangate45 with pyosys (native Yosys as a Python module).

    python -m flow.synth --rtl build/rtl [--out build/synth] [--top NAME] [--flatten] [--jobs N]

Reads ``config.json`` and the file list that ``python -m rtl_gen`` wrote into the RTL folder, and maps
the design to the Nangate45 typical-corner liberty. ``msh_sram`` / ``msh_rom`` are black boxes (the
environment supplies them, SPEC_NANO_KPU.md section 5); every other inferred memory is an error.

Hierarchy: the design is synthesised hierarchically (no ``flatten``), so each Verilog module is
mapped on its own and ``stat`` reports its cells. The breakdown in ``synth.json`` is computed from
that: per module its own cells and area, per instance path the area including everything below it
("engines" = the top module's direct children, or those of the single instance that wraps them all). ``--flatten`` maps the design as one module, as the
benchmark does; it optimises across module boundaries but leaves only the top in the breakdown.

Parallel parts: Yosys is single-threaded, so the design is cut into parts (``partition``: the big engines,
each with everything below it, and the rest of the design with those engines as black boxes) that
``--jobs`` Yosys processes map side by side. Modules are mapped one by one either way, so ``--jobs`` changes no
logic: only Yosys' generated names differ, and with them the order of ABC's input, which moved 13 of the
chip's 1.52M cells (0.008 % of its area); ``--flatten`` is one part. On this 2-core machine the 1.35M-cell
chip maps in 5.0 min in two processes (4 parts: kda, mac, mla, the rest).

Yosys runs in child processes (``--plan``, ``--worker``): a large design's memory is returned to the system
when they end, and a Yosys ``ERROR`` (which exits the process) cannot take the caller down. All outputs
are written into ``<out>.tmp`` and replace ``<out>`` only when everything succeeded. A result made
from the same inputs (Verilog, liberty, options, Yosys/ABC scripts, digested into ``inputs_sha256``)
is reused: ``make sta`` / ``make place`` after ``make synth`` do not map the chip a second time.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flow.cli import die_with_parent, job_count, publish, report_stage
from pdk_config import PdkError, find_pdk
from pdk_config.nangate45 import BUFFER, DONT_USE, TIE_HI, TIE_LO

REPO = Path(__file__).resolve().parent.parent
MACROS = ("msh_sram", "msh_rom")
FA_MAP = Path(__file__).resolve().parent / "techmap" / "fa_map.v"
RESULT_SCHEMA = "nano-k3/synth/3"      # the layout of synth.json: change it when that changes
# `--full-adders`: synth's `fine` steps with maccmap's full adders put on FA_X1 / HA_X1 cells
# (flow/techmap/fa_map.v). Measured on msh_chip_top: 30 % fewer cells (1.06M), mapping in 9 instead of
# 14 min, but 9 % more logic area, and the slow corner misses 10 ns before placement (-2.8 ns): ABC
# sizes and buffers only its own gates, so a partial-product net fanning out to many FA_X1 inputs
# (sign extension) stays on one X1 driver. Off by default.
FULL_ADDER_STEPS = ["opt -fast -full", "memory_map", "opt -full", "maccmap", f"techmap -map {FA_MAP}", "techmap",
                    "opt -fast", "hierarchy -check", "check"]
# Price of on-chip storage (SPEC_NANO_KPU.md section 5): bits / 2^20 x 1e6 um^2.
UM2_PER_MIBIT = 1_000_000.0
AREA_BUDGET_UM2 = 4_000_000.0         # SPEC section 9: 4.0 mm^2, logic + macros
SRAM_BUDGET_BITS = 4 * 2**20 * 8      # SPEC section 9: 4 MiB of msh_sram + msh_rom
CORNER = "typical"                    # SPEC section 9: area is measured at the typical corner

# Port lists of SPEC section 5; only directions and widths matter to synthesis.
MACRO_STUBS = """\
(* blackbox *)
module msh_sram #(parameter DEPTH = 16, parameter WIDTH = 8, parameter ADDRW = $clog2(DEPTH)) (
    input clk, input we, input [ADDRW-1:0] waddr, input [WIDTH-1:0] wdata, input [WIDTH/8-1:0] wstrb,
    input re, input [ADDRW-1:0] raddr, output [WIDTH-1:0] rdata);
endmodule

(* blackbox *)
module msh_rom #(parameter DEPTH = 16, parameter WIDTH = 8, parameter ADDRW = $clog2(DEPTH),
                 parameter INIT_FILE = "") (
    input [ADDRW-1:0] raddr1, output [WIDTH-1:0] rdata1, input [ADDRW-1:0] raddr2, output [WIDTH-1:0] rdata2);
endmodule
"""


# ABC's mapping straight from the structural hash (`&nf`, delay-oriented, no `&fraig`/`scorr`/`dc2`/`&dch`
# restructuring: on this 2-core machine those took over 15 min per 600k-gate module of the chip, `&nf` alone
# about 2 min), then timing-driven buffering and gate sizing (as ORFS does): without them a pipeline-enable net
# drives thousands of gates from one X1 cell, and the wire-load timing of such a net is meaningless. {D} is
# ABC's delay target, filled in by Yosys.
ABC_SCRIPT = """\
strash; &get -n; &nf {D}; &put
buffer -p -N 16
upsize {D}
dnsize {D}
stime -p
"""
# Boundary conditions ABC's sizing sees (the same as flow/sta.py's constraints).
ABC_CONSTR = "set_driving_cell BUF_X2\nset_load 3.0\n"


class SynthError(RuntimeError):
    """Synthesis could not run or its result breaks a rule; the message says which and where."""


def progress(msg: str) -> None:
    print(f"[synth] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- inputs

def rtl_clock_ns(config: dict, where: Path | str) -> float:
    """The clock period the RTL was generated for: ``params.clock_ns`` of its config.json (``where``),
    written by rtl_gen from hw.params.ChipParams. ABC's delay target and every later stage's default
    ``--period`` (synth.json keeps the config under ``rtl.config``)."""
    params = config.get("params")
    clock = params.get("clock_ns") if isinstance(params, dict) else None
    if isinstance(clock, bool) or not isinstance(clock, (int, float)) or not clock > 0:
        raise SynthError(f"{where} has no positive params.clock_ns (rtl_gen writes it from hw.params.ChipParams), "
                         f"got {clock!r}")
    return float(clock)


def design_period_ns(period_ns: float | None, synth_result: dict, error: type[Exception]) -> float:
    """``period_ns`` (a stage's ``--period``) if given, else the clock of the RTL ``synth_result`` (synth.json)
    was synthesised from; a missing clock raises ``error``."""
    if period_ns is not None:
        return period_ns
    rtl = synth_result["rtl"]
    try:
        return rtl_clock_ns(rtl["config"], Path(rtl["dir"]) / "config.json")
    except SynthError as e:
        raise error(f"{e}; pass --period") from None


@dataclass(frozen=True)
class RtlInput:
    rtl_dir: Path
    top: str
    config: dict
    config_sha256: str
    filelist: Path
    files: tuple[Path, ...]
    include_dirs: tuple[Path, ...]
    defines: tuple[str, ...]


def _pick_filelist(rtl_dir: Path, config: dict) -> Path:
    files = config.get("files") if isinstance(config.get("files"), dict) else {}
    named = [n for n in (files.get("filelist"), config.get("filelist")) if n]
    named += [config[k] + ".f" for k in ("block", "top") if config.get(k)]
    for name in named:
        if (rtl_dir / name).is_file():
            return rtl_dir / name
    found = sorted(rtl_dir.glob("*.f"))
    if len(found) == 1:
        return found[0]
    raise SynthError(f"no file list in {rtl_dir}: looked for {named or '<block>.f / <top>.f'}; "
                     f"*.f files there: {[p.name for p in found]}")


def _resolve(entry: str, base: Path, line_no: int, filelist: Path) -> Path:
    """An entry relative to the list's folder or the working directory; ``rtl/<x>`` (rtl_gen's lists name
    the files as seen from the RTL folder's parent, SPEC §1) is ``<x>`` in the list's folder."""
    from rtl_gen.emit import filelist_entry
    for cand in (filelist_entry(entry, base), base / entry, Path(entry)):
        if cand.exists():
            return cand.resolve()
    raise SynthError(f"{filelist}:{line_no}: {entry!r} not found (relative to {base} or {Path.cwd()})")


def read_filelist(filelist: Path) -> tuple[list[Path], list[Path], list[str]]:
    """(Verilog files, include dirs, defines) of a Verilator-style file list."""
    files, incdirs, defines = [], [], []
    base = filelist.parent
    for n, raw in enumerate(filelist.read_text().splitlines(), 1):
        line = raw.split("//")[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("+incdir+"):
            incdirs += [_resolve(d, base, n, filelist) for d in line[len("+incdir+"):].split("+") if d]
        elif line.startswith("+define+"):
            defines += [d for d in line[len("+define+"):].split("+") if d]
        elif line.startswith(("-", "+")):
            raise SynthError(f"{filelist}:{n}: option {line!r} is not understood (only files, +incdir+, +define+)")
        else:
            files.append(_resolve(line, base, n, filelist))
    if not files:
        raise SynthError(f"{filelist} names no Verilog file")
    return files, incdirs, defines


def load_rtl(rtl_dir: Path, top: str | None = None) -> RtlInput:
    cfg_path = rtl_dir / "config.json"
    if not cfg_path.is_file():
        raise SynthError(f"{cfg_path} not found: run `python -m rtl_gen --out {rtl_dir}` (make rtl) first")
    raw = cfg_path.read_bytes()
    config = json.loads(raw)
    top = top or config.get("top") or config.get("block")
    if not top:
        raise SynthError(f"{cfg_path} names no 'top' (nor 'block'); pass --top")
    filelist = _pick_filelist(rtl_dir, config)
    files, incdirs, defines = read_filelist(filelist)
    return RtlInput(rtl_dir, top, config, hashlib.sha256(raw).hexdigest(), filelist,
                    tuple(files), tuple(incdirs), tuple(defines))


def abc_period_ps(rtl: RtlInput) -> int:
    """ABC's delay target (-D): the RTL's clock (``rtl_clock_ns``) in ps."""
    return round(1000 * rtl_clock_ns(rtl.config, rtl.rtl_dir / "config.json"))


def liberty_areas(liberty: Path) -> dict[str, float]:
    """Cell name -> area (um^2) of a plain liberty file."""
    text = liberty.read_text()
    out = {}
    for m in re.finditer(r'\bcell\s*\(\s*"?([\w$]+)"?\s*\)\s*\{', text):
        a = re.compile(r"\barea\s*:\s*([0-9.eE+-]+)").search(text, m.end(), m.end() + 2000)
        if a:
            out[m.group(1)] = float(a.group(1))
    return out


# ---------------------------------------------------------------------------------------------- worker

def _script_steps(job: dict, part_out: str = "<part>") -> list[tuple[str, list[str]]]:
    """The Yosys commands of one part; ``job["out"]`` holds the ABC script and constraints, ``part_out``
    receives the part's statistics."""
    lib = job["liberty"]
    dont_use = " ".join(f"-dont_use {c}" for c in job["dont_use"])
    top = job["top"]
    flat = " -flatten" if job["flatten"] else ""
    return [
        # `proc -norom` first: a case statement over constants stays logic, as the RTL wrote it; left to
        # synth's own proc it would become a $mem ROM, indistinguishable from an inferred array below.
        ("generic synthesis (proc, opt, memory -nomap, alumacc)",
         [f"hierarchy -top {top}", "proc -norom", f"synth -top {top}{flat} -run :fine"]),
        ("check for inferred memories", ["<memory-check>"]),
        ("fine synthesis (techmap to gates)", FULL_ADDER_STEPS if job["full_adders"]
         else [f"synth -top {top}{flat} -run fine:check -noabc"]),
        ("map flip-flops (dfflibmap)", [f"dfflibmap -liberty {lib} {dont_use}", "opt -purge"]),
        ("map logic (abc)", [f"abc -liberty {lib} {dont_use} -D {job['abc_period_ps']} -constr {job['out']}/abc.constr "
                             f"-script {job['out']}/abc.script", "opt_clean"]),
        ("tie cells, buffers, clean", [
            f"hilomap -singleton -hicell {TIE_HI[0]} {TIE_HI[1]} -locell {TIE_LO[0]} {TIE_LO[1]}",
            f"insbuf -buf {BUFFER[0]} {BUFFER[1]} {BUFFER[2]}",
            "opt_clean -purge", "check -assert"]),
        ("statistics", [f"tee -q -o {part_out}/stat.txt stat -liberty {lib}"]),
    ]


def _id(x) -> str:
    s = x.str()
    return s[1:] if s.startswith("\\") else s


def _param(cell, name: str) -> int:
    for k, v in cell.parameters.items():
        if k.str() == "\\" + name:
            return v.as_int()
    return 0


def _inferred_memories(ys, design) -> list[dict]:
    out = []
    for mod in design.modules_.values():
        for mem in mod.memories.values():     # memories not yet collected into a $mem cell
            out.append({"module": _id(mod.name), "memory": _id(mem.name), "src": mem.get_src_attribute(),
                        "width": mem.width, "depth": mem.size})
        for cell in mod.cells_.values():
            if cell.type.str() in ("$mem", "$mem_v2"):
                p = {k.str(): v for k, v in cell.parameters.items()}
                out.append({"module": _id(mod.name), "memory": p["\\MEMID"].decode_string().lstrip("\\"),
                            "src": cell.get_src_attribute(), "width": p["\\WIDTH"].as_int(),
                            "depth": p["\\SIZE"].as_int()})
    return out


def _design_summary(design, external: list[str]) -> dict:
    """Per module: own cell types, submodule instances and macro instances (with parameters). Instances of
    ``external`` modules (black boxes here, mapped by another part) count as submodules."""
    mods = {_id(m.name): m for m in design.modules_.values() if not m.get_blackbox_attribute()}
    summary = {}
    for name, mod in mods.items():
        cells, subs, macros, unmapped = {}, [], [], {}
        for cell in mod.cells_.values():
            ctype = _id(cell.type)
            if ctype in MACROS:
                p = {_id(k): v for k, v in cell.parameters.items()}
                macros.append({"instance": _id(cell.name), "type": ctype,
                               "params": {k: (v.as_int() if k != "INIT_FILE" else v.decode_string())
                                          for k, v in p.items()}})
            elif ctype in mods or ctype in external:
                subs.append({"instance": _id(cell.name), "module": ctype})
            elif ctype.startswith("$"):
                unmapped[ctype] = unmapped.get(ctype, 0) + 1
            else:
                cells[ctype] = cells.get(ctype, 0) + 1
        summary[name] = {"cells": cells, "submodules": subs, "macros": macros, "unmapped": unmapped}
    return summary


def _read_design(ys, job: dict, top: str, blackbox: list[str]):
    design = ys.Design()
    read_opts = " ".join([f"-I{d}" for d in job["include_dirs"]] + [f"-D{d}" for d in job["defines"]])
    for f in job["files"]:
        ys.run_pass(f"read_verilog {read_opts} {f}", design)
    redefined = [m for m in MACROS if design.module(ys.IdString("\\" + m)) is not None]
    if redefined:
        progress(f"warning: the RTL defines {redefined}; replaced by black boxes (SPEC section 5)")
    ys.run_pass(f"read_verilog -lib -overwrite {job['macro_stubs']}", design)
    # The cells as black boxes, so that `check` knows their pin directions.
    ys.run_pass(f"read_liberty -lib {job['liberty']}", design)
    if blackbox:
        ys.run_pass("blackbox " + " ".join(blackbox), design)
    ys.run_pass(f"hierarchy -check -top {top}", design)
    return design


def plan_worker(job_path: Path) -> int:
    """Child process: every module of the design before synthesis, with a size estimate (a multiplier by the
    product of its operand widths, any other cell by its output width, a process as 1), its submodules and
    the number of submodule instances."""
    from pyosys import libyosys as ys

    job = json.loads(job_path.read_text())
    design = _read_design(ys, job, job["top"], [])
    mods = {_id(m.name): m for m in design.modules_.values() if not m.get_blackbox_attribute()}
    plan = {}
    for name, mod in mods.items():
        weight, subs, n_inst = len(mod.processes), set(), 0
        for cell in mod.cells_.values():
            ctype = _id(cell.type)
            if ctype in mods:
                subs.add(ctype)
                n_inst += 1
            elif cell.type.str() == "$mul":
                weight += _param(cell, "A_WIDTH") * _param(cell, "B_WIDTH")
            else:
                weight += max(_param(cell, "Y_WIDTH"), _param(cell, "WIDTH"), 1)
        plan[name] = {"weight": weight, "subs": sorted(subs), "instances": n_inst}
    (Path(job["part_out"]) / "plan.json").write_text(json.dumps(plan, indent=1))
    return 0


def worker(job_path: Path) -> int:
    """Child process mapping one part (flow.synth.Part) of the design; Yosys' log goes to stdout (a file),
    progress to stderr."""
    from pyosys import libyosys as ys

    job = json.loads(job_path.read_text())
    out, label = Path(job["part_out"]), job["label"]
    t0 = time.monotonic()
    progress(f"{label}reading {len(job['files'])} Verilog file(s)")
    design = _read_design(ys, job, job["top"], job["blackbox"])
    steps = _script_steps(job, job["part_out"])
    for k, (title, cmds) in enumerate(steps, 1):
        progress(f"{label}{title} ... (step {k} of {len(steps)}, {time.monotonic() - t0:.1f} s)")
        for cmd in cmds:
            if cmd == "<memory-check>":
                mems = _inferred_memories(ys, design)
                if mems:
                    (out / "error.json").write_text(json.dumps({"inferred_memories": mems}, indent=1))
                    return 3
                continue
            ys.run_pass(cmd, design)
    summary = _design_summary(design, job["blackbox"])
    (out / "design.json").write_text(json.dumps(summary, indent=1))
    unmapped = {f"{m}:{t}": n for m, s in summary.items() for t, n in s["unmapped"].items()}
    if unmapped:
        (out / "error.json").write_text(json.dumps({"unmapped_cells": unmapped}, indent=1))
        return 4
    progress(f"{label}writing netlist ({time.monotonic() - t0:.1f} s)")
    # Yosys' private names ($abc$123$...) become _N_, as write_verilog would print them, so that the Verilog and
    # the RTLIL netlists name every object alike.
    ys.run_pass("rename -enumerate", design)
    # OpenSTA's Verilog reader rejects `wire signed`; a gate netlist's wires carry no sign that matters.
    for module in design.modules_.values():
        for wire in module.wires_.values():
            wire.is_signed = False
    ys.run_pass(f"write_verilog -noattr -noexpr -nohex -nodec {out / 'netlist.v'}", design)
    variants = _sta_macro_types(ys, design)
    ys.run_pass(f"write_verilog -noattr -noexpr -nohex -nodec {out / 'sta.v'}", design)
    (out / "macro_types.json").write_text(json.dumps(sorted(variants)))
    # The same netlist as RTLIL, which Yosys reads back 6x faster than Verilog (flow/place.py flattens it): only
    # this part's modules (no black boxes, which another part or the liberty defines), without attributes.
    ys.run_pass("delete =A:blackbox", design)
    ys.run_pass("setattr -unset src", design)
    ys.run_pass("setattr -mod -unset src -unset top", design)
    ys.run_pass(f"write_rtlil {out / 'sta.il'}", design)
    progress(f"{label}done ({time.monotonic() - t0:.1f} s)")
    return 0


def _macro_module(mtype: str, depth: int, width: int) -> str:
    addrw = max(1, (depth - 1).bit_length())
    if mtype == "msh_sram":
        ports = (f"input clk, input we, input [{addrw - 1}:0] waddr, input [{width - 1}:0] wdata, "
                 f"input [{width // 8 - 1}:0] wstrb, input re, input [{addrw - 1}:0] raddr, "
                 f"output [{width - 1}:0] rdata")
    else:
        ports = (f"input [{addrw - 1}:0] raddr1, output [{width - 1}:0] rdata1, "
                 f"input [{addrw - 1}:0] raddr2, output [{width - 1}:0] rdata2")
    return f"module {mtype}_{depth}x{width} ({ports});\nendmodule\n"


def _sta_macro_types(ys, design) -> set[tuple[str, int, int]]:
    """Prepares the netlist for OpenSTA 2.0, whose Verilog reader knows no parameters: every macro instance
    becomes an instance of an empty module named after its size (``msh_sram_64x32``), appended to the STA
    netlist by ``_merge_parts``. The empty module cuts the paths at the macro pins (SPEC section 5: macro
    read paths are cut). Returns the (type, depth, width) variants used."""
    variants = set()
    for mod in design.modules_.values():
        for cell in mod.cells_.values():
            ctype = _id(cell.type)
            if ctype in MACROS:
                p = {_id(k): v for k, v in cell.parameters.items()}
                depth, width = p["DEPTH"].as_int(), p["WIDTH"].as_int()
                variants.add((ctype, depth, width))
                cell.type = ys.IdString(f"\\{ctype}_{depth}x{width}")
                for k in list(cell.parameters.keys()):
                    cell.unsetParam(k)
    return variants


# ---------------------------------------------------------------------------------------------- parts

@dataclass(frozen=True)
class Part:
    """A piece of the design that one Yosys process maps: module ``top`` and everything below it, with the
    ``blackbox`` modules (the tops of the other parts) left as black boxes."""
    top: str
    blackbox: tuple[str, ...]
    weight: int


def partition(plan: dict[str, dict], top: str, jobs: int) -> list[Part]:
    """Splits the design for ``jobs`` parallel Yosys processes, largest part first. A part is an engine (a
    child of the top, or of the one instance that wraps them all, as in the area breakdown) whose size
    estimate is at least 1/(4·jobs) of the design's; the rest of the design is one more part. Modules are
    mapped one by one (no ``flatten``), so the netlist is the same as from one process. A subtree that
    shares a module with the rest stays in the rest (no module is mapped twice)."""
    def reach(m: str, stop: frozenset[str] = frozenset()) -> set[str]:
        seen, todo = set(), [m]
        while todo:
            x = todo.pop()
            if x not in seen and x not in stop:
                seen.add(x)
                todo += plan[x]["subs"]
        return seen

    def work(mods: set[str]) -> int:
        return sum(plan[x]["weight"] for x in mods)

    total = work(reach(top))
    parent = top
    while plan[parent]["instances"] == 1:
        parent = plan[parent]["subs"][0]
    split: list[str] = []
    if jobs > 1:
        claimed: set[str] = set()
        for s in sorted(plan[parent]["subs"], key=lambda s: -work(reach(s))):
            if work(reach(s)) >= total / (4 * jobs) and not reach(s) & claimed:
                split.append(s)
                claimed |= reach(s)
        while split and (shared := [s for s in split if reach(s) & reach(top, frozenset(split))]):
            split = [s for s in split if s not in shared]
    parts = [Part(s, (), work(reach(s))) for s in split]
    parts.append(Part(top, tuple(split), work(reach(top, frozenset(split)))))
    return sorted(parts, key=lambda p: -p.weight)


# ---------------------------------------------------------------------------------------------- results

def _bits(macro: dict, where: str) -> tuple[int, int]:
    p = macro["params"]
    if "DEPTH" not in p or "WIDTH" not in p:
        raise SynthError(f"{macro['type']} instance {where} does not set DEPTH and WIDTH (SPEC section 5): {p}")
    return p["DEPTH"], p["WIDTH"]


def _walk(summary: dict, areas: dict[str, float], top: str):
    """Per module own area/cells and the instance tree with area including submodules."""
    own = {m: {"area_um2": sum(areas.get(c, 0.0) * n for c, n in s["cells"].items()),
               "cells": sum(s["cells"].values())} for m, s in summary.items()}
    unknown = sorted({c for s in summary.values() for c in s["cells"] if c not in areas})
    if unknown:
        raise SynthError(f"cells without a liberty area: {unknown}")
    memo: dict[str, tuple[float, int]] = {}

    def total(m: str) -> tuple[float, int]:
        if m not in memo:
            a, c = own[m]["area_um2"], own[m]["cells"]
            for sub in summary[m]["submodules"]:
                sa, sc = total(sub["module"])
                a, c = a + sa, c + sc
            memo[m] = (a, c)
        return memo[m]

    instances, macros, counts = [], [], {m: 0 for m in summary}

    def visit(m: str, path: str, depth: int) -> None:
        counts[m] += 1
        a, c = total(m)
        instances.append({"path": path, "module": m, "depth": depth, "area_um2": round(a, 3), "cells": c})
        for mac in summary[m]["macros"]:
            where = f"{path}.{mac['instance']}"
            depth_, width = _bits(mac, where)
            bits = depth_ * width
            macros.append({"path": where, "type": mac["type"], "depth": depth_, "width": width, "bits": bits,
                           "area_um2": round(bits / 2**20 * UM2_PER_MIBIT, 3),
                           **({"init_file": mac["params"]["INIT_FILE"]} if "INIT_FILE" in mac["params"] else {})})
        for sub in summary[m]["submodules"]:
            visit(sub["module"], f"{path}.{sub['instance']}", depth + 1)

    visit(top, top, 0)
    modules = {m: {"instances": counts[m], "own_area_um2": round(own[m]["area_um2"], 3),
                   "own_cells": own[m]["cells"], "area_per_instance_um2": round(total(m)[0], 3),
                   "cells_per_instance": total(m)[1]}
               for m in summary if counts[m]}
    return modules, instances, macros


def _chip_area(stat_txt: str, top: str) -> float | None:
    """The "Chip area" line of `stat -liberty`: the hierarchy total when there is one, else the module's."""
    for kind in ("top module", "module"):
        m = re.search(f"Chip area for {kind} '\\\\?{re.escape(top)}':" + r"\s*([0-9.]+)", stat_txt)
        if m:
            return float(m.group(1))
    return None


def _versions() -> dict:
    v = {"python": sys.version.split()[0]}
    for dist in ("pyosys",):
        try:
            v[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            v[dist] = None
    return v


def build_result(rtl: RtlInput, stage: Path, liberty: Path, pdk, flatten: bool, full_adders: bool,
                 runtime_s: float, part_chip_areas: dict[str, float | None]) -> dict:
    """synth.json's content; Yosys' own "Chip area" is each part's, times the instances of its top."""
    summary = json.loads((stage / "design.json").read_text())
    areas = liberty_areas(liberty)
    modules, instances, macros = _walk(summary, areas, rtl.top)
    chip_area = (None if None in part_chip_areas.values()
                 else sum(a * modules[t]["instances"] for t, a in part_chip_areas.items()))
    log = (stage / "yosys.log").read_text(errors="replace")
    yosys_version = next((ln.strip() for ln in log.splitlines() if ln.strip().startswith("Yosys 0")), None)
    abc_delays = [float(x) for x in re.findall(r"ABC: WireLoad.*Delay =\s*([0-9.]+) ps", log)]
    cell_types: dict[str, int] = {}
    for inst in instances:
        for c, n in summary[inst["module"]]["cells"].items():
            cell_types[c] = cell_types.get(c, 0) + n
    logic_area = sum(areas[c] * n for c, n in cell_types.items())
    seq_area = sum(areas[c] * n for c, n in cell_types.items() if re.match(r"(S?DFF|DLH|DLL)", c))
    macro_bits = sum(m["bits"] for m in macros)
    macro_area = sum(m["area_um2"] for m in macros)
    total = logic_area + macro_area
    # The engines: the children of the top, or of the one instance that wraps them all (msh_chip_top.core).
    parent, depth = instances[0], 1
    while len(kids := [i for i in instances if i["depth"] == depth and i["path"].startswith(parent["path"] + ".")]) == 1:
        parent, depth = kids[0], depth + 1
    engines = [{"name": i["path"].split(".", 1)[1], "module": i["module"], "area_um2": i["area_um2"],
                "cells": i["cells"]} for i in kids]
    glue = modules[parent["module"]]
    engines.append({"name": "(top-level logic)" if depth == 1 else f"({parent['path'].split('.', 1)[1]} own logic)",
                    "module": parent["module"], "area_um2": glue["own_area_um2"], "cells": glue["own_cells"]})
    engines.sort(key=lambda e: -e["area_um2"])
    return {
        "schema": RESULT_SCHEMA,
        "top": rtl.top,
        "rtl": {"dir": str(rtl.rtl_dir), "config_sha256": rtl.config_sha256, "filelist": str(rtl.filelist),
                "files": [str(f) for f in rtl.files], "config": rtl.config},
        "pdk": {"root": str(pdk.root), "found_by": pdk.found_by, "corner": CORNER, "liberty": str(liberty),
                "dont_use": list(DONT_USE)},
        "options": {"flatten": flatten, "full_adders": full_adders, "abc_delay_target_ps": abc_period_ps(rtl),
                    "hierarchy": "flat" if flatten
                    else "hierarchical: each module mapped on its own; breakdown by module and instance path"},
        "area": {
            "logic_um2": round(logic_area, 3),
            "sequential_um2": round(seq_area, 3),
            "yosys_chip_area_um2": None if chip_area is None else round(chip_area, 6),
            "macro_um2": round(macro_area, 3),
            "total_um2": round(total, 3),
            "budget_um2": AREA_BUDGET_UM2,
            "budget_used": round(total / AREA_BUDGET_UM2, 6),
            "within_budget": total <= AREA_BUDGET_UM2,
        },
        "abc": {"delay_ps": max(abc_delays, default=None), "delay_ps_per_run": abc_delays,
                "note": "ABC's own pre-layout estimate (stime -p, no wire load), one run per module"},
        "cells": {"count": sum(cell_types.values()), "by_type": dict(sorted(cell_types.items()))},
        "macros": {"count": len(macros), "bits": macro_bits, "area_um2": round(macro_area, 3),
                   "budget_bits": SRAM_BUDGET_BITS, "within_budget": macro_bits <= SRAM_BUDGET_BITS,
                   "price": "bits / 2^20 x 1e6 um^2 (SPEC section 5)", "instances": macros},
        "hierarchy": {"engines": engines, "modules": modules, "instances": instances},
        "runtime_s": round(runtime_s, 2),
        "finished_unix": round(time.time(), 1),      # with runtime_s: when it ran (flow/report.py's flow runtime)
        "versions": {**_versions(), "yosys": yosys_version, "abc": "yosys-abc bundled with pyosys"},
        "files": {"netlist": f"{rtl.top}.v", "sta_netlist": f"{rtl.top}.sta.v",
                  "sta_rtlil": f"{rtl.top}.sta.il", "macro_modules": f"{rtl.top}.macros.v", "log": "yosys.log",
                  "stat": "stat.txt", "summary": "synth.txt"},
        "metrics": {
            "synth__design__instance__area__stdcell": round(logic_area, 3),
            "synth__design__instance__area__macros": round(macro_area, 3),
            "synth__design__instance__area": round(total, 3),
            "synth__design__instance__count__stdcell": sum(cell_types.values()),
            "synth__design__instance__count__macros": len(macros),
            "synth__design__memory__bits": macro_bits,
        },
    }


def summary_text(r: dict) -> str:
    a, c, m = r["area"], r["cells"], r["macros"]
    lines = [
        f"synthesis of {r['top']} on Nangate45 ({r['pdk']['corner']}), {r['options']['hierarchy']}",
        f"  logic area     {a['logic_um2']:>14,.1f} um2   (Yosys 'Chip area': {a['yosys_chip_area_um2']})",
        f"  macro area     {a['macro_um2']:>14,.1f} um2   ({m['count']} macros, {m['bits']:,} bits, {m['price']})",
        f"  total area     {a['total_um2']:>14,.1f} um2   = {100 * a['budget_used']:.2f} % of the "
        f"{a['budget_um2'] / 1e6:.1f} mm2 budget ({'within' if a['within_budget'] else 'OVER'})",
        f"  cells          {c['count']:>14,}",
        f"  ABC delay      {r['abc']['delay_ps']!s:>14} ps  (ABC's pre-layout estimate, worst module)",
        f"  runtime        {r['runtime_s']:>14.1f} s   ({len(r['parts'])} part(s), {r['options']['jobs']} "
        f"Yosys process(es) at a time)",
        "", "by engine (top-level instances):",
    ]
    lines += [f"  {e['name']:<32} {e['module']:<28} {e['area_um2']:>12,.1f} um2 {e['cells']:>9,} cells"
              for e in r["hierarchy"]["engines"]]
    lines += ["", "macros:"] + [f"  {x['path']:<40} {x['type']:<9} {x['depth']:>6} x {x['width']:<4} "
                                f"{x['bits']:>10,} bits {x['area_um2']:>12,.1f} um2" for x in m["instances"]]
    top_types = sorted(c["by_type"].items(), key=lambda kv: -kv[1])[:15]
    lines += ["", "most used cells:"] + [f"  {t:<14} {n:>9,}" for t, n in top_types]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- driver

def _log_errors(log: Path) -> str:
    if not log.exists():
        return "(no log)"
    lines = log.read_text(errors="replace").splitlines()
    errs = [ln for ln in lines if ln.startswith("ERROR")]
    return "\n".join(errs or lines[-15:])


NETLIST_WRITER = 2          # how the worker writes its netlists (2: wires unsigned); part of the inputs' digest


def _inputs_key(job: dict, rtl: RtlInput, liberty: Path) -> str:
    """A digest of everything the netlist and its report depend on: the Verilog, the liberty, the options,
    the Yosys and ABC scripts, the Yosys (pyosys) version and the result schema."""
    script = [(title, [c.replace(job["out"], "<out>") for c in cmds]) for title, cmds in _script_steps(job)]
    h = hashlib.sha256(json.dumps([RESULT_SCHEMA, NETLIST_WRITER, {k: v for k, v in job.items() if k != "out"},
                                   script, ABC_SCRIPT, ABC_CONSTR, MACRO_STUBS, _versions()["pyosys"]],
                                  sort_keys=True).encode())
    for f in (*rtl.files, liberty, FA_MAP):
        h.update(f.read_bytes())
    return h.hexdigest()


def _up_to_date(out: Path, key: str) -> dict | None:
    """The previous result in ``out`` when it was made from the same inputs and its files are all there."""
    try:
        prev = json.loads((out / "synth.json").read_text())
    except (OSError, ValueError):
        return None
    if prev.get("inputs_sha256") != key:
        return None
    if not all((out / f).is_file() for f in prev.get("files", {}).values() if isinstance(f, str)):
        return None
    return prev


def _child(mode: str, job: dict, stage: Path, log: Path) -> subprocess.Popen:
    (stage / "job.json").write_text(json.dumps(job, indent=1))
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-m", "flow.synth", mode, str(stage / "job.json")], stdout=f, cwd=REPO)


def _part_error(part_dir: Path, code: int) -> SynthError:
    err_json = part_dir / "error.json"
    detail = json.loads(err_json.read_text()) if err_json.exists() else {}
    if "inferred_memories" in detail:
        names = "; ".join(f"{m['module']}.{m['memory']} ({m['depth']} x {m['width']} bits, {m['src']})"
                          for m in detail["inferred_memories"])
        return SynthError(f"inferred memory survives synthesis: {names}. Every on-chip array must be an "
                          "msh_sram / msh_rom instance (SPEC_NANO_KPU.md section 5).")
    if "unmapped_cells" in detail:
        return SynthError(f"cells left unmapped to Nangate45: {detail['unmapped_cells']} (see {part_dir}/yosys.log)")
    return SynthError(f"Yosys failed (exit {code}); log {part_dir / 'yosys.log'}:\n" + _log_errors(part_dir / "yosys.log"))


def _plan(job: dict, stage: Path) -> dict:
    d = stage / "plan"
    d.mkdir()
    proc = _child("--plan", {**job, "part_out": str(d.resolve()), "macro_stubs": str((stage / "macro_stubs.v").resolve())},
                  d, d / "yosys.log")
    if proc.wait() != 0:
        raise _part_error(d, proc.returncode)
    return json.loads((d / "plan.json").read_text())


def _run_parts(job: dict, parts: list[Part], stage: Path, jobs: int) -> list[float]:
    """Maps the parts, ``jobs`` Yosys processes at a time, largest first; returns each part's runtime."""
    dirs = [stage / "parts" / str(i) for i in range(len(parts))]
    runtime = [0.0] * len(parts)
    todo, running = list(range(len(parts))), {}
    try:
        while todo or running:
            while todo and len(running) < jobs:
                i = todo.pop(0)
                dirs[i].mkdir(parents=True)
                label = f"{parts[i].top}: " if len(parts) > 1 else ""
                pj = {**job, "top": parts[i].top, "blackbox": list(parts[i].blackbox), "label": label,
                      "part_out": str(dirs[i].resolve()), "macro_stubs": str((stage / "macro_stubs.v").resolve())}
                running[i] = (_child("--worker", pj, dirs[i], dirs[i] / "yosys.log"), time.monotonic())
            time.sleep(0.5)
            for i, (proc, t) in list(running.items()):
                if proc.poll() is not None:
                    del running[i]
                    runtime[i] = time.monotonic() - t
                    if proc.returncode != 0:
                        raise _part_error(dirs[i], proc.returncode)
                    if len(parts) > 1:
                        done = len(parts) - len(todo) - len(running)
                        progress(f"{parts[i].top}: mapped in {runtime[i]:.0f} s ({done} of {len(parts)} parts)")
    finally:
        for proc, _ in running.values():
            proc.kill()
            proc.wait()
    return runtime


def _merge_parts(stage: Path, top: str, parts: list[Part]) -> dict[str, float | None]:
    """One netlist, STA netlist (and its macros' empty modules alone), summary, stat and log from the parts; returns Yosys' "Chip area" of each
    part's top (one instance of it, the other parts' tops counted as 0)."""
    dirs = [stage / "parts" / str(i) for i in range(len(parts))]
    summary: dict = {}
    variants: set[tuple[str, int, int]] = set()
    chip_areas: dict[str, float | None] = {}
    with open(stage / f"{top}.v", "w") as net, open(stage / f"{top}.sta.v", "w") as sta, \
            open(stage / f"{top}.sta.il", "w") as il, open(stage / "stat.txt", "w") as stat, \
            open(stage / "yosys.log", "w") as log:
        for part, d in zip(parts, dirs):
            for f, name in ((net, "netlist.v"), (sta, "sta.v"), (il, "sta.il"), (log, "yosys.log")):
                with open(d / name) as src:
                    shutil.copyfileobj(src, f)
            stat_txt = (d / "stat.txt").read_text()
            stat.write(f"=== part {part.top} ===\n{stat_txt}")
            chip_areas[part.top] = _chip_area(stat_txt, part.top)
            summary.update(json.loads((d / "design.json").read_text()))
            variants |= {tuple(v) for v in json.loads((d / "macro_types.json").read_text())}
        macro_modules = "\n// Macros as empty modules (cut at their pins); see flow/synth.py\n" + \
            "".join(_macro_module(*v) for v in sorted(variants))
        sta.write(macro_modules)
    (stage / f"{top}.macros.v").write_text(macro_modules)      # on their own for flow/place.py
    (stage / "design.json").write_text(json.dumps(summary, indent=1))
    return chip_areas


def synthesize(rtl_dir: Path, out: Path, top: str | None = None, flatten: bool = False, full_adders: bool = False,
               jobs: int | None = None, cache: Path = REPO / "build" / "pdk_cache") -> dict:
    try:
        jobs = job_count(jobs, "Yosys processes")
    except ValueError as e:
        raise SynthError(str(e)) from None
    try:
        pdk = find_pdk()
    except PdkError as e:
        raise SynthError(str(e)) from None
    rtl = load_rtl(Path(rtl_dir), top)
    liberty = pdk.plain_liberty(CORNER, cache).resolve()
    out = Path(out)
    stage = out.with_name(out.name + ".tmp")
    job = {"top": rtl.top, "files": [str(f) for f in rtl.files], "include_dirs": [str(d) for d in rtl.include_dirs],
           "defines": list(rtl.defines), "liberty": str(liberty), "dont_use": list(DONT_USE),
           "flatten": flatten, "full_adders": full_adders, "abc_period_ps": abc_period_ps(rtl),
           "out": str(stage.resolve())}
    key = _inputs_key(job, rtl, liberty)
    done = _up_to_date(out, key)
    if done is not None:
        progress(f"{rtl.top}: up to date ({out / 'synth.json'} has the same inputs: RTL, liberty, options, "
                 f"scripts); remove {out} to synthesize again")
        if done["rtl"]["config_sha256"] != rtl.config_sha256:
            # the same Verilog under a config.json that changed in what the netlist does not depend on (a
            # recorded parameter): the netlist stands, the record names the config it now belongs to
            done["rtl"] |= {"dir": str(rtl.rtl_dir), "config_sha256": rtl.config_sha256, "config": rtl.config}
            tmp = out / "synth.json.tmp"
            tmp.write_text(json.dumps(done, indent=1) + "\n")
            tmp.replace(out / "synth.json")
        return done
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    (stage / "macro_stubs.v").write_text(MACRO_STUBS)
    (stage / "abc.script").write_text(ABC_SCRIPT)
    (stage / "abc.constr").write_text(ABC_CONSTR)
    t0 = time.monotonic()
    parts = partition(_plan(job, stage), rtl.top, 1 if flatten else jobs)
    progress(f"{rtl.top}: {len(rtl.files)} file(s) from {rtl.filelist}; {len(parts)} part(s), "
             f"{min(jobs, len(parts))} Yosys process(es) at a time; log: {out / 'yosys.log'}")
    part_s = _run_parts(job, parts, stage, jobs)
    chip_areas = _merge_parts(stage, rtl.top, parts)
    runtime = time.monotonic() - t0
    result = build_result(rtl, stage, liberty, pdk, flatten, full_adders, runtime, chip_areas)
    result["parts"] = [{"top": p.top, "black_boxes": list(p.blackbox), "size_estimate": p.weight,
                        "runtime_s": round(t, 2)} for p, t in zip(parts, part_s)]
    result["options"]["jobs"] = jobs
    result["inputs_sha256"] = key
    (stage / "synth.json").write_text(json.dumps(result, indent=1) + "\n")
    (stage / "synth.txt").write_text(summary_text(result))
    (stage / "design.json").rename(stage / ".design.json")     # internal hand-over file, kept for debugging
    shutil.rmtree(stage / "parts")
    shutil.rmtree(stage / "plan")
    publish(stage, out)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.synth", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtl", type=Path, default=Path("build/rtl"), help="folder with config.json + file list")
    ap.add_argument("--out", type=Path, default=Path("build/synth"))
    ap.add_argument("--top", help="top module (default: 'top' of config.json)")
    ap.add_argument("--flatten", action="store_true", help="map the design flat (no per-module breakdown)")
    ap.add_argument("--full-adders", action="store_true",
                    help="adders of multipliers and sums on FA_X1/HA_X1: ~30%% fewer cells, ~9%% more area, "
                         "high-fanout nets ABC does not buffer (see FULL_ADDER_STEPS)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="Yosys processes at a time, each mapping a part of the design (default: the CPUs this "
                         "process may use). The chip needs about 17 GB in one process, less per part")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--plan", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker or args.plan:
        die_with_parent()
        return worker(args.worker) if args.worker else plan_worker(args.plan)
    return report_stage("flow.synth", SynthError, lambda: synthesize(args.rtl, args.out, args.top, args.flatten,
                                                                               args.full_adders, args.jobs),
                        summary_text, lambda r: [args.out / "synth.json", args.out / r["files"]["netlist"]])


if __name__ == "__main__":
    sys.exit(main())
