"""What a sweep searches and builds: the DSE presets (``PRESETS``) over ``hw.params.sweep_space()``.

The legal values of every searched parameter are declared once, on its ``ChipParams`` field
(``hw.params.choice``); a preset only names the chip it starts from, which of those fields it searches, the
design each trial synthesises, and (for a quick sweep) a subset of a field's values.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hw.params import ChipParams, preset as chip_preset, sweep_space
from rtl_gen.emit import BLOCKS


@dataclass(frozen=True)
class DsePreset:
    """One sweep: chip preset ``chip``, the searched ``fields`` (all of ``sweep_space()`` when empty), the
    rtl_gen block each trial synthesises (``design``: "chip" prices the whole chip; another block prices
    that block alone, for a sweep that has to run in seconds) and ``subset``: fewer values of a field."""

    name: str
    chip: str
    design: str = "chip"
    fields: tuple[str, ...] = ()
    subset: dict[str, tuple[int, ...]] = field(default_factory=dict)
    doc: str = ""

    def __post_init__(self) -> None:
        chip_preset(self.chip)                       # raises, naming the valid presets
        if self.design not in BLOCKS:
            raise ValueError(f"design must be an rtl_gen block, one of {', '.join(sorted(BLOCKS))}; "
                             f"got {self.design!r}")
        known = sweep_space()
        for name in (*self.fields, *self.subset):
            if name not in known:
                raise ValueError(f"{name!r} is not a swept ChipParams field; valid: {', '.join(known)}")
        for name, values in self.subset.items():
            if not values or set(values) - set(known[name]):
                raise ValueError(f"subset of {name} must be some of {known[name]}, got {values!r}")

    @property
    def base(self) -> ChipParams:
        """The chip every trial changes: the preset's current chip."""
        return chip_preset(self.chip)

    def space(self) -> dict[str, tuple[int, ...]]:
        """field -> the values this sweep searches."""
        full = sweep_space()
        return {k: self.subset.get(k, v) for k, v in full.items() if not self.fields or k in self.fields}

    def current(self) -> dict[str, int]:
        """The current chip as a point of the space (the sweep's first trial, so the plot can mark it)."""
        return {k: getattr(self.base, k) for k in self.space()}

    def params(self, point: dict) -> ChipParams:
        """The ChipParams of a point; ValueError (naming the field and the legal values) for an illegal one."""
        space = self.space()
        unknown = sorted(set(point) - set(space))
        if unknown:
            raise ValueError(f"fields {unknown} are not searched by DSE preset {self.name!r}; it searches "
                             f"{', '.join(space)}")
        for k, v in point.items():
            if v not in space[k]:
                raise ValueError(f"{k}={v!r} is outside the space of DSE preset {self.name!r}: {space[k]}")
        return dataclasses.replace(self.base, **point)


PRESETS: dict[str, DsePreset] = {
    "nano": DsePreset("nano", chip="nano", doc="the nano chip, every swept field, whole-chip synthesis"),
    "tiny": DsePreset("tiny", chip="tiny", doc="the tiny chip, every swept field, whole-chip synthesis"),
    # make test's sweep: the ci model's cycles, but the area of the vector unit block alone (its engines map in
    # seconds; the whole ci chip takes ~10 minutes), over the two fields that block depends on
    "ci": DsePreset("ci", chip="ci", design="vector_unit", fields=("norm_lanes", "ew_lanes"),
                    subset={"norm_lanes": (1, 2)},
                    doc="ci model cycles, vector_unit block area only (norm_lanes 1-2, ew_lanes 1-4): seconds a trial"),
}


def dse_preset(name: str) -> DsePreset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown DSE preset {name!r}; valid: {', '.join(sorted(PRESETS))}") from None
