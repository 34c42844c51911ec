"""Map each storage macro instance (SPEC_NANO_KPU.md section 5) onto the PDK's fakeram45 macros or flip-flops.

    python -m flow.macro_map [--synth build/synth]      # prints the mapping table of a synthesised design

An ``msh_sram`` of DEPTH x WIDTH becomes a grid of identical fakeram45 macros: ``rows`` macros stacked in
depth (the upper address bits select one through its chip enable; the read data is multiplexed) times
``cols`` macros side by side in width (the data bits split across them; every macro sees the address).
Of all the PDK's sizes, the one whose grid has the least area wins, each macro counted with a
``MACRO_KEEPOUT_UM`` keep-out ring (the channel the placer leaves around it, so eight small macros do not beat
two larger ones on paper); ties go to fewer macros, then to fewer wasted bits. Only grids of one macro size are considered: a mixed composition (say 64x32 plus
64x7 for 64x39) saves little in this library and would need a different wrapper per instance.

Small arrays become flip-flops instead: when ``flop_area_um2`` (DEPTH x WIDTH DFF_X1 with their write-enable
muxes, the read mux and the rdata register, areas from the liberty) is below the best grid's macro area
(LEF SIZE) plus ``wrapper_area_um2`` (the logic beside the macros), the array is cheaper as registers (2 x 512: 10,895 um2 of
cells against 16 fakeram45_32x32 = 12,712 um2 of macros + 3,278 um2 of wrapper). Both estimates agree with
Yosys + ABC on Nangate45 within 2 %; docs/macro_mapping.md tabulates where flip-flops win.

``msh_rom`` has no fakeram45 counterpart (the generator only makes RAMs), so a ROM maps to logic: a
constant table synthesised into gates. The mapping records it with no macros.

fakeram45 macros have one read/write port (``addr_in``, ``we_in``, ``ce_in``); ``msh_sram`` has a read
and a write port per cycle. The mapping prices bits and area; flow/orfs_storage.py's macro wrapper gives
the write priority and drops a read issued in the same cycle (docs/pnr.md); its flip-flop arrays have
both ports.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from flow.synth import liberty_areas
from pdk_config import find_pdk
from pdk_config.nangate45 import DFF, FakeRam, Pdk

REPO = Path(__file__).resolve().parent.parent
# More macros than this for one instance means the shape is out of this library's reach (a 4 MiB array
# would need 1000+ fakeram45_2048x39): better split the array in the RTL.
MAX_MACROS_PER_INSTANCE = 256
# Keep-out ring around every macro (um per side) in this repository's own floorplan and placer
# (flow/floorplan.py, flow/place_flat.py): no standard cell closer than this. ORFS leaves its own, wider
# halo (flow/orfs.py ORFS_MACRO_HALO_UM); the mapping's cost counts this one.
MACRO_KEEPOUT_UM = 2.0


class MacroMapError(ValueError):
    """A storage instance cannot be mapped; the message names the instance and its shape."""


@dataclass(frozen=True)
class MacroSize:
    """A fakeram45 macro: words x bits and its footprint (um) from the LEF."""
    depth: int
    width: int
    width_um: float
    height_um: float

    @property
    def name(self) -> str:
        return f"fakeram45_{self.depth}x{self.width}"

    @property
    def area_um2(self) -> float:
        return self.width_um * self.height_um

    @property
    def footprint_um2(self) -> float:
        """Area including the keep-out ring."""
        return (self.width_um + 2 * MACRO_KEEPOUT_UM) * (self.height_um + 2 * MACRO_KEEPOUT_UM)


# The cells a flip-flop msh_sram is made of: Nangate45 has no flip-flop with an enable, so every stored
# bit is a DFF_X1 and a MUX2_X1 that feeds its own value back while the bit is not written.
MUX2, AND2 = "MUX2_X1", "AND2_X1"
IMPLS = ("macros", "flops", "logic")


@dataclass(frozen=True)
class StorageLib:
    """What a mapping chooses from: the PDK's fakeram45 sizes and the liberty areas (um2) of the cells
    that flip-flop storage and the macro wrappers are built from."""
    macros: tuple[MacroSize, ...]
    dff_um2: float             # DFF_X1
    mux2_um2: float            # MUX2_X1
    and2_um2: float            # AND2_X1

    def __post_init__(self):
        bad = {k: v for k, v in (("dff_um2", self.dff_um2), ("mux2_um2", self.mux2_um2), ("and2_um2", self.and2_um2))
               if not v > 0}
        if bad:
            raise MacroMapError(f"cell areas must be positive: {bad}")


def storage_lib(pdk: Pdk, cache: Path) -> StorageLib:
    """The fakeram45 sizes from the LEF files and DFF_X1 / MUX2_X1 / AND2_X1 areas from the typical liberty."""
    lib = pdk.plain_liberty("typical", cache)
    areas = liberty_areas(lib)
    missing = [c for c in (DFF, MUX2, AND2) if c not in areas]
    if missing:
        raise MacroMapError(f"{lib} has no area for {missing}")
    return StorageLib(tuple(macro_sizes(pdk.fakerams)), areas[DFF], areas[MUX2], areas[AND2])


def flop_area_um2(depth: int, width: int, lib: StorageLib) -> float:
    """Cell area of ``depth`` x ``width`` as flip-flops (flow/orfs_storage.py ``sram_flops``): every bit a DFF_X1
    with its hold mux, a (depth - 1)-mux tree per data bit for the read, the registered rdata (a DFF_X1
    and a hold mux per bit: it keeps its value while re is low) and one AND2 per word and byte for the
    write enables (word select & wstrb)."""
    storage = depth * width * (lib.dff_um2 + lib.mux2_um2)
    read_mux = (depth - 1) * width * lib.mux2_um2
    rdata = width * (lib.dff_um2 + lib.mux2_um2)
    enables = depth * (width // 8) * lib.and2_um2
    return storage + read_mux + rdata + enables


def wrapper_area_um2(width: int, rows: int, lib: StorageLib) -> float:
    """Cell area beside a ``rows``-deep macro grid (flow/orfs_storage.py ``sram_wrapper``): the rdata hold register
    (a DFF_X1 and a mux per bit; the mux also selects rdata, ``rd_q ? word : hold_q``), the rows:1 read
    mux, and the read-valid and row-select flops."""
    return width * (lib.dff_um2 + lib.mux2_um2) + width * (rows - 1) * lib.mux2_um2 + 2 * lib.dff_um2


@dataclass(frozen=True)
class Mapping:
    """One instance's mapping. ``impl`` "macros": ``rows`` x ``cols`` copies of ``macro``; "flops": registers
    (``macro`` None; ``alternative`` names the macro grid that lost); "logic": a ROM as gates."""
    path: str
    kind: str                  # "msh_sram" or "msh_rom"
    depth: int
    width: int
    macro: MacroSize | None
    rows: int = 0              # macros stacked in depth
    cols: int = 0              # macros side by side in width
    note: str = ""
    impl: str = "macros"
    flop_um2: float = 0.0      # msh_sram: cell area as flip-flops (flop_area_um2)
    macro_option_um2: float = 0.0   # msh_sram: the best grid's macro area + its wrapper logic
    alternative: str = ""      # msh_sram as flops: the grid it would have been

    @property
    def count(self) -> int:
        return self.rows * self.cols

    @property
    def bits(self) -> int:
        return self.depth * self.width

    @property
    def macro_bits(self) -> int:
        return self.count * self.macro.depth * self.macro.width if self.macro else 0

    @property
    def wasted_bits(self) -> int:
        return self.macro_bits - self.bits if self.macro else 0

    @property
    def area_um2(self) -> float:
        return self.count * self.macro.area_um2 if self.macro else 0.0

    def as_dict(self) -> dict:
        return {"path": self.path, "type": self.kind, "depth": self.depth, "width": self.width, "bits": self.bits,
                "impl": self.impl, "macro": self.macro.name if self.macro else None, "rows": self.rows,
                "cols": self.cols, "count": self.count, "macro_bits": self.macro_bits, "wasted_bits": self.wasted_bits,
                "waste": round(self.wasted_bits / self.macro_bits, 4) if self.macro_bits else 0.0,
                "area_um2": round(self.area_um2, 3), "flop_um2": round(self.flop_um2, 3),
                "macro_option_um2": round(self.macro_option_um2, 3), "alternative": self.alternative,
                "note": self.note}


def lef_size(lef: Path) -> tuple[float, float]:
    """The SIZE line of a one-macro LEF, in um."""
    for line in lef.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["SIZE"] and len(parts) >= 4:
            return float(parts[1]), float(parts[3])
    raise MacroMapError(f"{lef} has no 'SIZE w BY h' line")


def macro_sizes(fakerams: tuple[FakeRam, ...]) -> list[MacroSize]:
    return [MacroSize(r.depth, r.width, *lef_size(r.lef)) for r in fakerams]


def best_grid(depth: int, width: int, sizes: tuple[MacroSize, ...]) -> tuple[MacroSize, int, int]:
    """(macro, rows, cols): the grid of one fakeram45 size with the least footprint that holds ``depth`` x ``width``."""
    cands = []
    for m in sizes:
        rows, cols = math.ceil(depth / m.depth), math.ceil(width / m.width)
        cands.append((rows * cols * m.footprint_um2, rows * cols, rows * cols * m.depth * m.width, m.name, m, rows, cols))
    *_, m, rows, cols = min(cands)
    return m, rows, cols


def map_sram(path: str, depth: int, width: int, lib: StorageLib) -> Mapping:
    """Flip-flops when they take less area than the best macro grid (with its wrapper), else that grid."""
    if depth < 1 or width < 8 or width % 8:
        raise MacroMapError(f"msh_sram {path}: DEPTH={depth}, WIDTH={width} is not a legal shape "
                            "(DEPTH >= 1, WIDTH a positive multiple of 8; SPEC section 5)")
    if not lib.macros:
        raise MacroMapError(f"msh_sram {path}: the PDK lists no fakeram45 macros (lef/fakeram45_*.lef with lib/*.lib)")
    m, rows, cols = best_grid(depth, width, lib.macros)
    flops = flop_area_um2(depth, width, lib)
    grid = rows * cols * m.area_um2 + wrapper_area_um2(width, rows, lib)
    if flops < grid:
        return Mapping(path, "msh_sram", depth, width, None, note=f"flip-flops: {flops:,.0f} um2 < "
                       f"{rows * cols} x {m.name} + wrapper {grid:,.0f} um2", impl="flops", flop_um2=flops,
                       macro_option_um2=grid, alternative=f"{rows * cols} x {m.name}")
    if rows * cols > MAX_MACROS_PER_INSTANCE:
        raise MacroMapError(f"msh_sram {path}: {depth} x {width} needs {rows * cols} x {m.name} at best "
                            f"(more than {MAX_MACROS_PER_INSTANCE}); split the array in the RTL")
    note = []
    if rows > 1:
        note.append(f"depth split over {rows} (chip enable from address bits, read mux)")
    if cols > 1:
        note.append(f"width split over {cols}")
    return Mapping(path, "msh_sram", depth, width, m, rows, cols, "; ".join(note) or "one macro",
                   flop_um2=flops, macro_option_um2=grid)


def map_instance(path: str, kind: str, depth: int, width: int, lib: StorageLib) -> Mapping:
    if kind == "msh_rom":
        if depth < 1 or width < 1:
            raise MacroMapError(f"msh_rom {path}: DEPTH={depth}, WIDTH={width} is not a legal shape")
        return Mapping(path, kind, depth, width, None, impl="logic",
                       note="ROM -> logic: fakeram45 has no ROM; the constant table is synthesised into gates")
    if kind == "msh_sram":
        return map_sram(path, depth, width, lib)
    raise MacroMapError(f"{path}: unknown storage type {kind!r} (expected msh_sram or msh_rom)")


def map_design(instances: list[dict], lib: StorageLib) -> list[Mapping]:
    """Mappings of synth.json's ``macros.instances`` (each with path, type, depth, width)."""
    return [map_instance(i["path"], i["type"], i["depth"], i["width"], lib) for i in instances]


def flop_depth_limit(width: int, lib: StorageLib, max_depth: int = 4096) -> int:
    """The largest DEPTH at which ``width``-bit words map to flip-flops (0: never), for the docs' table."""
    limit = 0
    for depth in range(1, max_depth + 1):
        if map_sram("limit", depth, width, lib).impl == "flops":
            limit = depth
        elif limit:
            break
    return limit


def table(mappings: list[Mapping]) -> str:
    head = f"{'instance':<36} {'shape':>11} {'macro':<20} {'grid':>6} {'waste':>7} {'area um2':>11}  note"
    lines = [head, "-" * len(head)]
    for m in mappings:
        d = m.as_dict()
        area = m.flop_um2 if m.impl == "flops" else m.area_um2
        lines.append(f"{m.path:<36} {f'{m.depth}x{m.width}':>11} {d['macro'] or f'({m.impl})':<20} "
                     f"{f'{m.rows}x{m.cols}' if m.macro else '-':>6} {100 * d['waste']:>6.1f}% "
                     f"{area:>11,.1f}  {m.note}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.macro_map", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, default=Path("build/synth"), help="folder with synth.json")
    ap.add_argument("--shape", nargs=2, type=int, metavar=("DEPTH", "WIDTH"), help="map one msh_sram shape instead")
    args = ap.parse_args(argv)
    try:
        lib = storage_lib(find_pdk(), REPO / "build" / "pdk_cache")
        if args.shape:
            insts = [{"path": "msh_sram", "type": "msh_sram", "depth": args.shape[0], "width": args.shape[1]}]
        else:
            sj = args.synth / "synth.json"
            if not sj.is_file():
                raise MacroMapError(f"{sj} not found: run `make synth` first")
            insts = json.loads(sj.read_text())["macros"]["instances"]
        print(table(map_design(insts, lib)), end="")
    except (MacroMapError, RuntimeError) as e:
        print(f"flow.macro_map: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
