"""Touch-up of the final netlist when the sign-off STA finds it failing: cell sizes only.

Timing repair (flow/resize.py, flow/rebuffer.py) works on the netlist before the electrical repair that
follows it (flow/electrical.py rebuilds the nets that sizing and re-legalisation pushed over max
capacitance), and it sees the slow corner only. So the sign-off can fail where nothing looked: a rebuilt
net on a critical path gains a stage (the nano sign-off of 0c3c576: +0.001 ns after sizing, -0.053 ns
after that repair), and a pin can be over the typical or fast corner's max transition (0.199 / 0.146 ns)
while the slow corner's 0.5 ns holds. When the sign-off fails, this step reads the final netlist and SPEF
into one OpenSTA session at the slow corner (the caller's) and

1. up-sizes the driver of every net with a pin over its max transition at any corner (the sign-off STA's
   ``report_check_types`` files) or over its max capacitance (flow/design_rules.py): the smallest size of
   its ladder whose drive covers the overshoot with ``MARGIN`` to spare (transition and the capacitance
   a cell may drive both scale with its drive);
2. sizes the failing setup paths (flow/resize.py) with what is left of the time budget.

Only cell sizes change (``replace_cell``: same pins, the SPEF stays valid in the session); the caller
writes them into the netlist, re-legalises, writes the netlist, DEF and SPEF again and times it again.
A violation whose driver cannot be sized (an input port, a macro, the largest size) is counted, not hidden.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from flow.resize import ResizeResult, larger_sizes, measure, resize, swap
from flow.sta_session import StaSession

MARGIN = 1.15
# "core/mac/_38733_/A   0.15   0.19   -0.04 (VIOLATED)": pin, limit, transition, slack
_SLEW = re.compile(r"^(\S+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+) \(VIOLATED\)\s*$", re.M)


@dataclass
class TouchUp:
    sizing: ResizeResult = field(default_factory=ResizeResult)
    drivers_upsized: int = 0
    unsizable: list[str] = field(default_factory=list)       # violating nets' drivers that have no bigger size
    unmendable_pins: list[str] = field(default_factory=list)  # violating pins on those nets or on a port's
    wns_before_ns: float | None = None
    wns_after_ns: float | None = None

    def as_dict(self, areas: dict[str, float]) -> dict:
        return {"drivers_upsized": self.drivers_upsized, "unsizable_drivers": len(self.unsizable),
                "unsizable_examples": self.unsizable[:10], "unmendable_pins": self.unmendable_pins, "wns_before_ns": self.wns_before_ns,
                "wns_after_ns": self.wns_after_ns, "sizing": self.sizing.as_dict(areas), "margin": MARGIN}


def parse_slew(text: str) -> dict[str, float]:
    """Pin -> how far over its limit it is (transition / limit) in a ``report_check_types -max_transition``
    report."""
    return {m.group(1): float(m.group(3)) / float(m.group(2)) for m in _SLEW.finditer(text)
            if float(m.group(2)) > 0}


def overshoots(slew_files: list[Path], cap_violations: list[dict]) -> dict[str, float]:
    """Pin or port -> its worst ratio over a limit, over every corner's slew report and the capacitance
    violations (their driver pin, load over limit)."""
    out: dict[str, float] = {}
    for f in slew_files:
        if f.is_file():
            for pin, r in parse_slew(f.read_text()).items():
                out[pin] = max(out.get(pin, 0.0), r)
    for v in cap_violations:
        if v["driver"] != "port" and v["limit_ff"]:
            out[v["driver"]] = max(out.get(v["driver"], 0.0), v["load_ff"] / v["limit_ff"])
    return out


def _tcl_pin(name: str) -> str:
    inst, _, pin = name.rpartition("/")
    return "{" + (inst.replace("/", "\\/") + "/" + pin if inst else name) + "}"


def drivers(sta: StaSession, pins: list[str]) -> dict[str, tuple[str, str]]:
    """Pin or port -> (driver instance, its cell) of the net it is on. A net that an input port drives has
    no instance output: its pins are not in the answer."""
    out = {}
    for k in range(0, len(pins), 500):
        chunk = pins[k:k + 500]
        tcl = "\n".join(
            f"set o [get_pins -quiet {_tcl_pin(p)}]\n"                 # a port's net has the port's name
            f"if {{$o == \"\"}} {{ set n [get_nets -quiet {_tcl_pin(p)}] }} else {{ set n [get_nets -of_objects $o] }}\n"
            f"if {{$n != \"\"}} {{ foreach q [get_pins -of_objects $n] {{\n"
            f"  if {{[get_property $q direction] == \"output\"}} {{\n"
            f"    puts \"@@D {k + j} [get_full_name [get_cells -of_objects $q]] "
            f"[get_property [get_cells -of_objects $q] ref_name]\" }} }} }}"
            for j, p in enumerate(chunk))
        for line in sta.run(tcl).splitlines():
            if line.startswith("@@D "):
                _, idx, inst, cell = line.split(" ", 3)
                out[pins[int(idx)]] = (inst, cell.strip())
    return out


def stronger(cell: str, ratio: float, ladders: dict[str, list[int]]) -> str | None:
    """The smallest size of ``cell``'s function with ``ratio`` x ``MARGIN`` times its drive, else the
    largest bigger one; None when it has no bigger size."""
    ladder = larger_sizes(cell, ladders)
    if ladder is None:
        return None
    fam, n, up = ladder
    return f"{fam}_X{next((k for k in up if k >= n * ratio * MARGIN), up[-1])}"


def touch_up(sta: StaSession, ladders: dict[str, list[int]], over: dict[str, float], budget_s: float,
             progress=lambda msg: None) -> TouchUp:
    """Steps 1 and 2 of the module's docstring on the design loaded in ``sta``; ``over``: ``overshoots``."""
    t0 = time.monotonic()
    res = TouchUp()
    res.wns_before_ns = round(measure(sta)[0], 4)
    by_driver: dict[str, tuple[str, float]] = {}
    found = drivers(sta, sorted(over))
    for pin, (inst, cell) in found.items():
        ratio = max(over[pin], by_driver.get(inst, (cell, 0.0))[1])
        by_driver[inst] = (cell, ratio)
    changes = {}
    for inst, (cell, ratio) in sorted(by_driver.items()):
        new = stronger(cell, ratio, ladders)
        if new is None:
            res.unsizable.append(f"{inst} ({cell})")
        else:
            changes[inst] = new
    swap(sta, changes)
    res.drivers_upsized = len(changes)
    res.unmendable_pins = sorted(p for p in over if p not in found or found[p][0] not in changes)
    progress(f"touch-up: {len(over):,} pins over a transition or capacitance limit on {len(by_driver):,} nets; "
             f"{len(changes):,} drivers up-sized, {len(res.unsizable):,} cannot be")
    res.sizing = resize(sta, ladders, 0.0, max(0.0, budget_s - (time.monotonic() - t0)), progress)
    for inst, new in changes.items():                   # sizing may have taken a driver further
        res.sizing.original[inst] = by_driver[inst][0]
        res.sizing.replaced.setdefault(inst, new)
    res.wns_after_ns = round(measure(sta)[0], 4)
    return res
