"""The Yosys side of synthesis, run in child processes (``python -m flow.synth --plan|--worker job.json``):
the plan (every module with a size estimate, for the partition) and the mapping of one part onto Nangate45.

Yosys runs in child processes so that a large design's memory is returned to the system when they end, and a
Yosys ``ERROR`` (which exits the process) cannot take the caller down. This file's text is part of every
part's cache digest (flow/synth/cache.py): a change to the script here maps every part again.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from flow.cli import die_with_parent
from flow.synth.spec import MACROS, progress
from pdk_config.nangate45 import BUFFER, TIE_HI, TIE_LO

FA_MAP = Path(__file__).resolve().parent.parent / "techmap" / "fa_map.v"
# `--full-adders`: synth's `fine` steps with maccmap's full adders put on FA_X1 / HA_X1 cells
# (flow/techmap/fa_map.v). Measured on msh_chip_top: 30 % fewer cells (1.06M), mapping in 9 instead of
# 14 min, but 9 % more logic area, and the slow corner misses 10 ns before placement (-2.8 ns): ABC
# sizes and buffers only its own gates, so a partial-product net fanning out to many FA_X1 inputs
# (sign extension) stays on one X1 driver. Off by default.
FULL_ADDER_STEPS = ["opt -fast -full", "memory_map", "opt -full", "maccmap", f"techmap -map {FA_MAP}", "techmap",
                    "opt -fast", "hierarchy -check", "check"]
# ABC's mapping straight from the structural hash (`&nf`, delay-oriented, no `&fraig`/`scorr`/`dc2`/`&dch`
# restructuring: on this 2-core machine those took over 15 min per 600k-gate module of the chip, `&nf` alone
# about 2 min), then timing-driven buffering and gate sizing (as ORFS does): without them a pipeline-enable net
# drives thousands of gates from one X1 cell, and the wire-load timing of such a net is meaningless. {D} is
# Multipliers whose operands are both at least BOOTH_MIN_BITS wide become radix-4 Booth partial products
# (half the rows) once their widths are reduced; narrower ones stay arrays. Mapped with this flow's ABC
# script (Nangate45 typical, registered signed operands): 33 x 25 -18 %, 16 x 16 -31 %, 12 x 12 -26 %,
# 10 x 16 -14 %, 9 x 18 -2 %, but 8 x 16 +4 %, 6 x 16 +8 %, 4 x 16 +23 % (the MAC lanes' INT4 products).
BOOTH_MIN_BITS = 9
BOOTH_STEPS = ["opt_expr", "opt_clean", "opt -nodffe -nosdff", "wreduce", "peepopt", "opt_clean",
               f"booth t:$mul r:A_WIDTH>={BOOTH_MIN_BITS} %i r:B_WIDTH>={BOOTH_MIN_BITS} %i"]
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
        ("generic synthesis (proc, opt, booth, memory -nomap, alumacc)",
         [f"hierarchy -top {top}", "proc -norom", *BOOTH_STEPS, f"synth -top {top}{flat} -run :fine"]),
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



def main(mode: str, job_path: Path) -> int:
    """The child's entry point: ``mode`` "plan" or "part"."""
    die_with_parent()
    return (plan_worker if mode == "plan" else worker)(job_path)
