"""The storage macros as place and route implements them, for simulating the emitted chip.

Every other simulation uses the SPEC models ``verification/models/msh_sram.v`` and ``msh_rom.v``. Here
``physical_sources`` replaces them with what flow/orfs.py writes into the ORFS design (``msh_macros.v``,
flow/orfs_storage.py ``Storage.verilog``: each msh_sram shape a wrapper around fakeram45 macros, or
flip-flops where flow/macro_map.py finds them smaller; each msh_rom table a case statement) and a
behavioural model of every fakeram45 macro the wrappers use, generated from the PDK's liberty (checked
against its LEF) into the build folder. The storage instances and their parameters come from the emitted
Verilog itself (the msh_sram / msh_rom instances and the module hierarchy from the top), the same list
synth.json holds after synthesis.

The fakeram45 model is single-ported as the liberty describes it: one ``addr_in``, ``rd_out`` registered and
defined only in the cycle after a read (``ce_in && !we_in``; after a write or an idle cycle it is X), a write
(``ce_in && we_in``) stores the bits of ``wd_in`` where ``w_mask_in`` is 1. The wrappers give the write
priority and drop a read issued in the same cycle, printing an error each time (flow/orfs_storage.py
``SRAM_WRAPPER_NOTE``); ``scan_collisions`` counts those messages in a simulation log per storage instance,
and per run between the markers ``verification.chip_run`` logs around each run.
"""
from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from flow.cell_models import CellModelError, Group, parse_liberty
from flow.cli import publish
from flow.macro_map import MacroMapError, storage_lib
from flow.orfs_storage import COLLISION_TEXT, OrfsError, Storage, design_storage
from flow.synth import SynthError, load_rtl
from pdk_config import PdkError, find_pdk
from verification.chip_run import RUN_BOUNDARY
from verification.runner import REPO

MACROS_FILE, FAKERAM_FILE = "msh_macros.v", "fakeram45_models.v"
STORAGE_TYPES = ("msh_sram", "msh_rom")
# The pins of a fakeram45 macro (flow/orfs_storage.py sram_wrapper connects these): direction and width, where
# "addr" and "word" stand for the liberty memory group's address_width and word_width.
FAKERAM_PINS = {"clk": ("input", 1), "ce_in": ("input", 1), "we_in": ("input", 1), "addr_in": ("input", "addr"),
                "wd_in": ("input", "word"), "w_mask_in": ("input", "word"), "rd_out": ("output", "word")}

_IDENT = r"(?:\\\S+|[A-Za-z_][\w$]*)"
_MODULE = re.compile(rf"^\s*module\s+({_IDENT})(.*?)^\s*endmodule\b", re.M | re.S)
# An instance: type, optional #( .P(v), ... ) (values may hold one level of parentheses), name, "(".
_INSTANCE = re.compile(rf"^[ \t]*({_IDENT})(?:\s*#\s*\(((?:[^()]|\([^()]*\))*)\)\s*|\s+)({_IDENT})\s*\(", re.M)
_COMMENT = re.compile(r'("(?:[^"\\]|\\.)*")|//[^\n]*|/\*.*?\*/', re.S)
_PARAM = re.compile(r"\.(\w+)\s*\(\s*([^()]*?)\s*\)")
_SIZED = re.compile(r"(?:\d+)?'s?([dhbo])([0-9a-fA-F_]+)", re.I)
_RADIX = {"d": 10, "h": 16, "b": 2, "o": 8}
_COLLISION = re.compile(rf"ERROR: (\S+): msh_sram (\d+)x(\d+) {re.escape(COLLISION_TEXT)}")
_RUN_MARK = re.compile(rf"{RUN_BOUNDARY} (begin|end) (\S+)")
OUTSIDE_RUNS = "(outside any run)"


class PhysicalMacroError(RuntimeError):
    """The physical storage of an emitted chip cannot be generated; the message names the file or value."""


def _name(ident: str) -> str:
    return ident[1:] if ident.startswith("\\") else ident


def _param_value(text: str, where: str) -> int | str:
    """A Verilog parameter value as the emitter writes them: ``32'd64``, ``64``, ``"rtl/roms/x.hex"``."""
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if text.isdigit():
        return int(text)
    m = _SIZED.fullmatch(text)
    if m:
        return int(m[2].replace("_", ""), _RADIX[m[1].lower()])
    raise PhysicalMacroError(f"{where}: parameter value {text!r} is not a number or a string")


@dataclass(frozen=True)
class EmittedChip:
    top: str
    files: tuple[Path, ...]        # the file list's sources
    instances: tuple[dict, ...]    # storage instances: path, type, depth, width (and init_file of a ROM)


def read_emitted(rtl_dir: Path) -> EmittedChip:
    """The emitted RTL folder's top, files and every msh_sram / msh_rom reached from the top: its path
    (``msh_chip_top.core.kda.state_sram``, as synth.json names it), type, depth, width, a ROM's init_file."""
    try:
        rtl = load_rtl(rtl_dir)             # how flow/orfs.py reads an RTL folder
    except SynthError as e:
        raise PhysicalMacroError(str(e)) from None
    top, files = rtl.top, rtl.files
    modules: dict[str, list[tuple[str, str, str]]] = {}
    for f in files:
        text = _COMMENT.sub(lambda m: m[1] or " ", f.read_text())
        for m in _MODULE.finditer(text):
            modules[_name(m[1])] = [(_name(i[1]), _name(i[3]), i[2] or "") for i in _INSTANCE.finditer(m[2])]
    if top not in modules:
        raise PhysicalMacroError(f"top module {top!r} (config.json) is not defined in the file list of {rtl_dir}")
    defined = [t for t in STORAGE_TYPES if t in modules]
    if defined:
        raise PhysicalMacroError(f"the file list of {rtl_dir} defines {defined} itself; there is nothing to replace")
    found: list[dict] = []

    def visit(module: str, path: str) -> None:
        for kind, inst, params in modules[module]:
            where = f"{path}.{inst}"
            if kind in modules:
                visit(kind, where)
            elif kind in STORAGE_TYPES:
                p = {k: _param_value(v, where) for k, v in _PARAM.findall(params)}
                if not isinstance(p.get("DEPTH"), int) or not isinstance(p.get("WIDTH"), int):
                    raise PhysicalMacroError(f"{kind} {where} does not set DEPTH and WIDTH (SPEC section 5): {p}")
                found.append({"path": where, "type": kind, "depth": p["DEPTH"], "width": p["WIDTH"],
                              **({"init_file": p["INIT_FILE"]} if "INIT_FILE" in p else {})})

    visit(top, top)
    return EmittedChip(top, files, tuple(found))


# ---------------------------------------------------------------------------------------------- fakeram45

def _liberty_pins(cell: Group, types: dict[str, int]) -> dict[str, tuple[str, int]]:
    pins = {}
    for g in cell.groups:
        if g.kind == "pin":
            pins[g.args[0]] = (g.attrs.get("direction", "?"), 1)
        elif g.kind == "bus":
            bus_type = g.attrs.get("bus_type", "")
            if bus_type not in types:
                raise PhysicalMacroError(f"bus {g.args[0]} of {cell.args[0]}: bus_type {bus_type!r} is not defined")
            pins[g.args[0]] = (g.attrs.get("direction", "?"), types[bus_type])
    return pins


def _lef_pins(lef: Path) -> dict[str, int]:
    """Signal pins of a one-macro LEF and their widths (``PIN rd_out[3]`` counts towards rd_out)."""
    pins: dict[str, int] = {}
    for m in re.finditer(r"^\s*PIN\s+(\S+)(.*?)^\s*END\s+\1\s*$", lef.read_text(), re.M | re.S):
        if re.search(r"^\s*USE\s+(POWER|GROUND)\b", m[2], re.M):
            continue
        base = re.sub(r"\[\d+\]$", "", m[1])
        pins[base] = pins.get(base, 0) + 1
    return pins


def fakeram_model(lib: Path, lef: Path) -> str:
    """A behavioural Verilog model of the fakeram45 macro that ``lib`` describes (module docstring)."""
    try:
        library = parse_liberty(lib.read_text(errors="replace"))
    except (CellModelError, IndexError) as e:
        raise PhysicalMacroError(f"{lib}: not a readable liberty file ({e})") from None
    cells = library.sub("cell")
    if len(cells) != 1:
        raise PhysicalMacroError(f"{lib}: expected one fakeram45 cell, found {[c.args[0] for c in cells]}")
    cell, name = cells[0], cells[0].args[0]
    memory = cell.sub("memory")
    if len(memory) != 1 or memory[0].attrs.get("type") != "ram":
        raise PhysicalMacroError(f"{lib}: cell {name} has no memory() group of type ram")
    aw, ww = int(memory[0].attrs["address_width"]), int(memory[0].attrs["word_width"])
    m = re.fullmatch(r"fakeram45_(\d+)x(\d+)", name)
    if not m or int(m[2]) != ww or not 1 << (aw - 1) < int(m[1]) <= 1 << aw:
        raise PhysicalMacroError(f"{lib}: cell {name} does not match its memory group (address_width {aw}, "
                                 f"word_width {ww})")
    depth = int(m[1])
    expected = {p: (d, {"addr": aw, "word": ww}.get(w, w)) for p, (d, w) in FAKERAM_PINS.items()}
    pins = _liberty_pins(cell, {t.args[0]: int(t.attrs["bit_width"]) for t in library.sub("type")})
    if pins != expected:
        raise PhysicalMacroError(f"{lib}: {name} pins {pins} differ from the fakeram45 pins {expected}")
    lef_pins = _lef_pins(lef)
    if lef_pins != {p: w for p, (_, w) in expected.items()}:
        raise PhysicalMacroError(f"{lef}: {name} signal pins {lef_pins} differ from its liberty's {pins}")
    return "\n".join([
        f"// {name}: behavioural model generated by verification/physical_macros.py from {lib.name}",
        f"module {name} (",
        "    input  wire clk,",
        "    input  wire ce_in,",
        "    input  wire we_in,",
        f"    input  wire [{aw - 1}:0] addr_in,",
        f"    input  wire [{ww - 1}:0] wd_in,",
        f"    input  wire [{ww - 1}:0] w_mask_in,",
        f"    output reg  [{ww - 1}:0] rd_out",
        ");",
        f"    reg [{ww - 1}:0] mem [0:{depth - 1}];",
        "    always @(posedge clk) begin",
        "        if (ce_in && we_in) mem[addr_in] <= (wd_in & w_mask_in) | (mem[addr_in] & ~w_mask_in);",
        "        // the liberty defines rd_out only after a read (memory_read); X otherwise, so a wrapper that",
        "        // relied on it holding would read garbage",
        f"        rd_out <= (ce_in && !we_in) ? mem[addr_in] : {{{ww}{{1'bx}}}};",
        "    end",
        "endmodule", ""])


# ---------------------------------------------------------------------------------------------- sources

@dataclass(frozen=True)
class PhysicalMacros:
    """The simulation sources of an emitted chip with its physical storage, and what they implement."""
    chip: EmittedChip
    sources: tuple[Path, ...]      # the chip's file list, msh_macros.v, the fakeram45 models
    storage: Storage

    def as_dict(self) -> dict:
        return {"sources": [str(s) for s in self.sources], "fakerams": self.storage.fakerams,
                "mappings": [{k: v for k, v in m.as_dict().items() if k in ("path", "type", "depth", "width", "impl",
                                                                           "macro", "rows", "cols")}
                             for m in self.storage.mappings]}


def physical_sources(rtl_dir: Path, out: Path) -> PhysicalMacros:
    """Write ``<out>/msh_macros.v`` (flow/orfs_storage.py's storage for the chip in ``rtl_dir``) and
    ``<out>/fakeram45_models.v``; return the sources that replace the SPEC models in a simulation."""
    rtl_dir, out = Path(rtl_dir), Path(out).resolve()
    chip = read_emitted(rtl_dir)
    try:
        pdk = find_pdk()
        storage = design_storage(list(chip.instances), rtl_dir, storage_lib(pdk, REPO / "build" / "pdk_cache"))
    except (PdkError, MacroMapError, OrfsError) as e:
        raise PhysicalMacroError(str(e)) from None
    rams = {r.name: r for r in pdk.fakerams}
    models = [fakeram_model(rams[name].lib, rams[name].lef) for name in storage.fakerams]
    stage = out.with_name(out.name + ".tmp")       # both files appear together or not at all
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    (stage / MACROS_FILE).write_text(storage.verilog())
    (stage / FAKERAM_FILE).write_text("\n".join(["// fakeram45 models for simulation; not for the repository",
                                                 "/* verilator lint_off DECLFILENAME */", *models,
                                                 "/* verilator lint_on DECLFILENAME */", ""]))
    publish(stage, out)
    return PhysicalMacros(chip, (*chip.files, out / MACROS_FILE, out / FAKERAM_FILE), storage)


# ---------------------------------------------------------------------------------------------- collisions

def _instance_path(hier: str, top: str, depth: int, width: int) -> str:
    """``TOP.msh_chip_top.core.x_sram.g_64x16.u_mem`` (the wrapper's %m) -> ``msh_chip_top.core.x_sram``."""
    parts = hier.split(".")
    start = parts.index(top) if top in parts else 0
    tail = [f"g_{depth}x{width}", "u_mem"]
    end = -2 if parts[-2:] == tail else len(parts)
    return ".".join(parts[start:end])


def scan_collisions(log_text: str, top: str) -> dict[str, dict[str, int]]:
    """Collision messages in a simulation log: run name -> storage instance path -> count. Messages
    outside the RUN-BOUNDARY markers of any run count under ``OUTSIDE_RUNS``."""
    counts: dict[str, dict[str, int]] = {}
    run = OUTSIDE_RUNS
    for line in log_text.splitlines():
        mark = _RUN_MARK.search(line)
        if mark:
            run = mark[2] if mark[1] == "begin" else OUTSIDE_RUNS
            continue
        for m in _COLLISION.finditer(line):
            path = _instance_path(m[1], top, int(m[2]), int(m[3]))
            per_run = counts.setdefault(run, {})
            per_run[path] = per_run.get(path, 0) + 1
    return counts


def collision_check(counts: dict[str, int]) -> dict:
    """The run check ``macro_collisions`` (chip_tb check format) of one run's collisions per instance."""
    n = sum(counts.values())
    where = ", ".join(f"{path}: {c}" for path, c in sorted(counts.items()))
    return {"name": "macro_collisions", "passed": n == 0,
            "message": f"{n} cycles read and write one msh_sram, the fakeram45 wrappers drop those reads ({where})"
            if n else "no msh_sram read and write in one cycle"}
