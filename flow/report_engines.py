"""Which engine each part of the synthesised design belongs to, for the report's area and placement figures.

The engines are synth.json's ``hierarchy.engines``: the top's children, or those of the one instance that
wraps them all (``msh_chip_top.core`` → ``core.mac``, ``core.kda``, ...). A path below one of them belongs
to it; a path below the wrapper but in no engine to the wrapper's own logic (synth's ``(core own logic)``
row); anything else (the top's own cells, placement's repair buffers) to ``OUTSIDE``.
"""
from __future__ import annotations

from dataclasses import dataclass

OUTSIDE = "(top level)"
SMALLEST_ROW_UM2 = 0.5        # a remainder of the logic area below this is rounding, not a row of its own


@dataclass(frozen=True)
class Engines:
    top: str
    names: tuple[str, ...]          # engine instance paths below the top, longest first ("core.mac")
    own: str                        # synth's row for the wrapper's own logic ("(core own logic)")
    wrapper: str                    # the wrapper's path below the top; "" when the engines are the top's children

    @classmethod
    def from_synth(cls, syn: dict) -> Engines:
        rows = syn["hierarchy"]["engines"]
        names = tuple(sorted((e["name"] for e in rows if not e["name"].startswith("(")), key=len, reverse=True))
        own = next((e["name"] for e in rows if e["name"].startswith("(")), OUTSIDE)
        return cls(syn["top"], names, own, names[0].rpartition(".")[0] if names else "")

    def of(self, path: str, sep: str = ".") -> str:
        """The engine of ``path`` below the top: ``core.mac.lane0.acc_sram`` (synthesis), or with ``sep="/"``
        a placed instance ``core/mac/lane0/_0644_`` (DEF)."""
        for name in self.names:
            if path.startswith(name.replace(".", sep) + sep):
                return name
        if self.wrapper and not path.startswith(self.wrapper.replace(".", sep) + sep):
            return OUTSIDE
        return self.own

    def of_macro(self, macro_path: str) -> str:
        """The engine of a synth.json macro instance (its path starts with the top's name)."""
        return self.of(macro_path.removeprefix(self.top + "."))


def engine_areas(syn: dict) -> list[dict]:
    """Per engine: standard-cell area and the SPEC §5 price of the msh_sram / msh_rom instances its
    hierarchy holds (µm²), largest first. Logic no engine row covers (the top's own cells when the engines
    sit under a wrapper) is one more row, so the rows add up to synth.json's totals."""
    eng = Engines.from_synth(syn)
    rows = {e["name"]: {"engine": e["name"], "module": e["module"], "logic_um2": e["area_um2"], "cells": e["cells"],
                        "sram_um2": 0.0, "rom_um2": 0.0, "macros": 0} for e in syn["hierarchy"]["engines"]}
    rest = syn["area"]["logic_um2"] - sum(r["logic_um2"] for r in rows.values())
    if rest > SMALLEST_ROW_UM2 and OUTSIDE not in rows:
        rows[OUTSIDE] = {"engine": OUTSIDE, "module": syn["top"], "logic_um2": rest, "cells": None,
                         "sram_um2": 0.0, "rom_um2": 0.0, "macros": 0}
    for m in syn["macros"]["instances"]:
        name = eng.of_macro(m["path"])
        row = rows.setdefault(name, {"engine": name, "module": None, "logic_um2": 0.0, "cells": None,
                                     "sram_um2": 0.0, "rom_um2": 0.0, "macros": 0})
        row["sram_um2" if m["type"] == "msh_sram" else "rom_um2"] += m["area_um2"]
        row["macros"] += 1
    return sorted(rows.values(), key=lambda r: -(r["logic_um2"] + r["sram_um2"] + r["rom_um2"]))
