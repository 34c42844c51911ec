"""The performance model on runs it was not fitted to: other chips, lane configurations, group sizes,
lengths and seeds (issue 16: within 2 % on each).

    held_out_runs() -> [HeldOut(chip, run), ...]      the set; ``bench`` measures it

perf/model.py's constants are the hardware's own (pipeline depths and state counts the RTL classes
name), except the empirical ones listed in ``perf.model.FITTED``, which were read off one run,
``FITTED_RUN`` (nano, group 128, 48 positions, the SPEC §8 seed). Every run here differs from it in at
least one of: chip preset, lane counts, group size, length, seed. The lane variants change the engines'
lanes only (the arithmetic stays the same, so every run is still checked bit for bit against the
fixed-point model): ``narrow`` takes the norm, element-wise and combine units down to one lane and
widens the mixer to four; ``wide`` widens the MAC array (4 weight-store banks), the norm and the
combine, and gives the element-wise unit and the mixer two lanes.

Each chip is emitted from its ``ChipParams`` (``rtl_gen.emit``) and simulated with the phase monitor;
``verification.perf_record`` keeps the measurement per RTL digest, so an unchanged RTL is not simulated
again.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from hw.params import ChipParams
from hw.params import preset as chip_preset
from nano_k3.config import preset
from verification.chip_run import run_length
from verification.chip_tb import PUBLIC_SEED, RunSpec

# tiny-preset lane variants: legal ChipParams values that rtl_gen emits and that simulate bit-exact. Not
# kda_lanes = 2: tiny's KDA beta segment has n = 1 element, which a 2-lane feed never finishes (the chip
# hangs at that op, though rtl_gen accepts the parameters).
LANE_VARIANTS: dict[str, dict[str, int]] = {
    "narrow": dict(ew_lanes=1, comb_lanes=1, norm_lanes=1, mix_lanes=4),
    "wide": dict(ew_lanes=2, comb_lanes=4, norm_lanes=8, mix_lanes=2, mac_banks=4),
}


def chip_for(name: str) -> ChipParams:
    """``preset`` or ``preset.variant`` (``LANE_VARIANTS``): the chip of a held-out run."""
    base, _, variant = name.partition(".")
    chip = chip_preset(base)
    if not variant:
        return chip
    if variant not in LANE_VARIANTS:
        raise ValueError(f"unknown lane variant {variant!r}; valid: {', '.join(sorted(LANE_VARIANTS))}")
    return dataclasses.replace(chip, **LANE_VARIANTS[variant])


@dataclass(frozen=True)
class HeldOut:
    chip: str                  # "nano", "tiny", "tiny.narrow", ...: ``chip_for``
    run: RunSpec

    @property
    def params(self) -> ChipParams:
        return chip_for(self.chip)


def _run(chip: str, public_len: int, group: int, seed: int, stretch: float = 1.0) -> HeldOut:
    base = chip.partition(".")[0]
    spec = RunSpec(seq_len=run_length(preset(base), public_len, stretch), group=group, config=base, seed=seed)
    name = spec.name.replace(base, chip, 1) + ("" if seed == PUBLIC_SEED else f"-seed{seed}")
    return HeldOut(chip, dataclasses.replace(spec, name=name))


# The run the empirical constants were read from (bench's throughput run).
FITTED_RUN = _run("nano", 48, 128, PUBLIC_SEED)


def held_out_runs() -> list[HeldOut]:
    """Nano: the other group, a stretched length, a short run, other seeds; tiny: both groups; two tiny lane
    variants: both groups each, other lengths and seeds."""
    return [_run("nano", 48, 64, PUBLIC_SEED, 4 / 3),
            _run("nano", 48, 128, 1, 4 / 3),
            _run("nano", 16, 64, 2),
            _run("tiny", 48, 128, 3),
            _run("tiny", 48, 64, 4, 4 / 3),
            _run("tiny.narrow", 48, 128, 5),
            _run("tiny.narrow", 48, 64, 6, 4 / 3),
            _run("tiny.wide", 48, 64, 7),
            _run("tiny.wide", 48, 128, 8, 4 / 3)]


def by_chip(runs: Sequence[HeldOut]) -> dict[str, list[HeldOut]]:
    out: dict[str, list[HeldOut]] = {}
    for h in runs:
        out.setdefault(h.chip, []).append(h)
    return out


def emit_chip(chip: str, out: Path) -> Path:
    """``chip`` emitted from the current sources into ``out``/<chip>/rtl: its RTL folder."""
    from rtl_gen import emit
    return emit("chip", Path(out) / chip / "rtl", chip_for(chip)).verilog.parent


def record(chip: str, runs: Sequence[HeldOut], out: Path) -> dict[str, dict]:
    """Run name -> the recorded phase-monitor run (``perf_record.recorded_runs``) of ``chip``'s RTL."""
    from verification.perf_record import recorded_runs
    return recorded_runs(emit_chip(chip, out), [h.run for h in runs])
