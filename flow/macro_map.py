"""Map each storage macro instance (SPEC_NANO_KPU.md section 5) onto the PDK's fakeram45 macros.

    python -m flow.macro_map [--synth build/synth]      # prints the mapping table of a synthesised design

An ``msh_sram`` of DEPTH x WIDTH becomes a grid of identical fakeram45 macros: ``rows`` macros stacked in
depth (the upper address bits select one through its chip enable; the read data is multiplexed) times
``cols`` macros side by side in width (the data bits split across them; every macro sees the address).
Of all the PDK's sizes, the one whose grid has the least area wins, each macro counted with a
``MACRO_HALO_UM`` keep-out ring (the channel the placer leaves around it, so eight small macros do not beat
two larger ones on paper); ties go to fewer macros, then to fewer wasted bits. Only grids of one macro size are considered: a mixed composition (say 64x32 plus
64x7 for 64x39) saves little in this library and would need a different wrapper per instance.

``msh_rom`` has no fakeram45 counterpart (the generator only makes RAMs), so a ROM maps to logic: a
constant table synthesised into gates. The mapping records it with no macros.

fakeram45 macros have one read/write port (``addr_in``, ``we_in``, ``ce_in``); ``msh_sram`` has a read
and a write port per cycle. The mapping prices bits and area; a wrapper for the ORFS flow has to either
double-pump the macro or accept a stall when a read and a write meet (docs/macro_mapping.md).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from pdk_config import find_pdk
from pdk_config.nangate45 import FakeRam

# More macros than this for one instance means the shape is out of this library's reach (a 4 MiB array
# would need 1000+ fakeram45_2048x39): better split the array in the RTL.
MAX_MACROS_PER_INSTANCE = 256
# Keep-out ring around every macro (um per side): no standard cell closer than this (flow/place.py uses it too).
MACRO_HALO_UM = 2.0


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
        return (self.width_um + 2 * MACRO_HALO_UM) * (self.height_um + 2 * MACRO_HALO_UM)


@dataclass(frozen=True)
class Mapping:
    """One instance's mapping: ``rows`` x ``cols`` copies of ``macro`` (None: the instance becomes logic)."""
    path: str
    kind: str                  # "msh_sram" or "msh_rom"
    depth: int
    width: int
    macro: MacroSize | None
    rows: int = 0              # macros stacked in depth
    cols: int = 0              # macros side by side in width
    note: str = ""

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
                "macro": self.macro.name if self.macro else None, "rows": self.rows, "cols": self.cols,
                "count": self.count, "macro_bits": self.macro_bits, "wasted_bits": self.wasted_bits,
                "waste": round(self.wasted_bits / self.macro_bits, 4) if self.macro_bits else 0.0,
                "area_um2": round(self.area_um2, 3), "note": self.note}


def lef_size(lef: Path) -> tuple[float, float]:
    """The SIZE line of a one-macro LEF, in um."""
    for line in lef.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["SIZE"] and len(parts) >= 4:
            return float(parts[1]), float(parts[3])
    raise MacroMapError(f"{lef} has no 'SIZE w BY h' line")


def macro_sizes(fakerams: tuple[FakeRam, ...]) -> list[MacroSize]:
    return [MacroSize(r.depth, r.width, *lef_size(r.lef)) for r in fakerams]


def map_sram(path: str, depth: int, width: int, sizes: list[MacroSize]) -> Mapping:
    """The grid of one fakeram45 size with the least area that holds ``depth`` x ``width``."""
    if depth < 1 or width < 8 or width % 8:
        raise MacroMapError(f"msh_sram {path}: DEPTH={depth}, WIDTH={width} is not a legal shape "
                            "(DEPTH >= 1, WIDTH a positive multiple of 8; SPEC section 5)")
    if not sizes:
        raise MacroMapError(f"msh_sram {path}: the PDK lists no fakeram45 macros (lef/fakeram45_*.lef with lib/*.lib)")
    cands = []
    for m in sizes:
        rows, cols = math.ceil(depth / m.depth), math.ceil(width / m.width)
        cands.append((rows * cols * m.footprint_um2, rows * cols, rows * cols * m.depth * m.width, m.name, m, rows, cols))
    area, count, _, _, m, rows, cols = min(cands)
    if count > MAX_MACROS_PER_INSTANCE:
        raise MacroMapError(f"msh_sram {path}: {depth} x {width} needs {count} x {m.name} at best "
                            f"(more than {MAX_MACROS_PER_INSTANCE}); split the array in the RTL")
    note = []
    if rows > 1:
        note.append(f"depth split over {rows} (chip enable from address bits, read mux)")
    if cols > 1:
        note.append(f"width split over {cols}")
    return Mapping(path, "msh_sram", depth, width, m, rows, cols, "; ".join(note) or "one macro")


def map_instance(path: str, kind: str, depth: int, width: int, sizes: list[MacroSize]) -> Mapping:
    if kind == "msh_rom":
        if depth < 1 or width < 1:
            raise MacroMapError(f"msh_rom {path}: DEPTH={depth}, WIDTH={width} is not a legal shape")
        return Mapping(path, kind, depth, width, None,
                       note="ROM -> logic: fakeram45 has no ROM; the constant table is synthesised into gates")
    if kind == "msh_sram":
        return map_sram(path, depth, width, sizes)
    raise MacroMapError(f"{path}: unknown storage type {kind!r} (expected msh_sram or msh_rom)")


def map_design(instances: list[dict], sizes: list[MacroSize]) -> list[Mapping]:
    """Mappings of synth.json's ``macros.instances`` (each with path, type, depth, width)."""
    return [map_instance(i["path"], i["type"], i["depth"], i["width"], sizes) for i in instances]


def table(mappings: list[Mapping]) -> str:
    head = f"{'instance':<36} {'shape':>11} {'macro':<20} {'grid':>6} {'waste':>7} {'area um2':>11}  note"
    lines = [head, "-" * len(head)]
    for m in mappings:
        d = m.as_dict()
        lines.append(f"{m.path:<36} {f'{m.depth}x{m.width}':>11} {d['macro'] or '(logic)':<20} "
                     f"{f'{m.rows}x{m.cols}' if m.macro else '-':>6} {100 * d['waste']:>6.1f}% "
                     f"{m.area_um2:>11,.1f}  {m.note}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.macro_map", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, default=Path("build/synth"), help="folder with synth.json")
    ap.add_argument("--shape", nargs=2, type=int, metavar=("DEPTH", "WIDTH"), help="map one msh_sram shape instead")
    args = ap.parse_args(argv)
    try:
        sizes = macro_sizes(find_pdk().fakerams)
        if args.shape:
            insts = [{"path": "msh_sram", "type": "msh_sram", "depth": args.shape[0], "width": args.shape[1]}]
        else:
            sj = args.synth / "synth.json"
            if not sj.is_file():
                raise MacroMapError(f"{sj} not found: run `make synth` first")
            insts = json.loads(sj.read_text())["macros"]["instances"]
        print(table(map_design(insts, sizes)), end="")
    except (MacroMapError, RuntimeError) as e:
        print(f"flow.macro_map: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
