"""Switching activity of a gate-level run: per cell pin, transitions per clock cycle, from Verilator toggle coverage.

A netlist built by ``verification.gatesim`` with ``TOGGLE_BUILD`` (``--coverage-toggle``) and run with
``TOGGLE_RUN`` (``--coverage-per-instance``) writes ``coverage.dat`` on exit: one counter per bit of every
signal of every module instance and direction (``A1:0->1``, ``A1:1->0``). The netlist's instances are the
cell models of ``flow.cell_models``, so each cell instance's pins are counted one by one: a pin's
transitions are the sum of its two directions. Counting inside the simulator scales with the netlist, not
with the run's length, which a VCD does not (its size grows with every change of every net).

The run's length is the clock port's rising edges at the top. Activity, as OpenSTA's ``set_power_activity``
takes it, is transitions per clock period (a clock is 2.0).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

TOGGLE_BUILD = ("--coverage-toggle",)
TOGGLE_RUN = ("--coverage-per-instance",)
COVERAGE_FILE = "coverage.dat"
_FIELD = re.compile("\x01([^\x02]+)\x02([^\x01]*)")
_POINT = re.compile(r"^C '(.*)' (\d+)$")
_BIT = re.compile(r"^(.*?)(?:\[\d+\])?:(0->1|1->0)$")
_MANGLED = re.compile(r"__0([0-9A-Fa-f]{2})")


class ActivityError(RuntimeError):
    """The coverage file is missing or does not describe the run; the message says what and how to fix it."""


@dataclass
class Activity:
    top: str
    cycles: int                                               # clock rising edges over the run
    pins: dict[str, dict[str, int]] = field(default_factory=dict)   # instance (a/b/c) -> pin -> transitions
    cell_type: dict[str, str] = field(default_factory=dict)         # instance -> cell (module) name
    ports: dict[str, int] = field(default_factory=dict)             # top port -> transitions (all bits)

    def rate(self, instance: str, pins: list[str]) -> float:
        """Mean transitions per clock cycle over ``pins`` of ``instance`` (e.g. a cell's outputs)."""
        counts = self.pins[instance]
        seen = [counts[p] for p in pins if p in counts]
        if not seen:
            raise ActivityError(f"instance {instance} ({self.cell_type.get(instance)}) has none of the pins "
                                f"{pins} in the coverage (it has {sorted(counts)})")
        return sum(seen) / len(seen) / self.cycles


def demangle(name: str) -> str:
    """A Verilator name as the netlist spells it: ``__0XX`` is the character of hex XX (``___05F`` -> ``__``).
    Hierarchy levels are split on ``.`` first (a ``.`` inside an escaped name is mangled, ``__02E``)."""
    return _MANGLED.sub(lambda m: chr(int(m[1], 16)), name)


def _fields(text: str) -> dict[str, str]:
    return dict(_FIELD.findall(text))


def read_coverage(path: Path, top: str, clock: str = "clk") -> Activity:
    """The per-pin transitions of every cell instance directly under ``top`` in a Verilator coverage file."""
    path = Path(path)
    if not path.is_file():
        raise ActivityError(f"{path} not found: the gate-level run must be built with {' '.join(TOGGLE_BUILD)} "
                            f"and run with {' '.join(TOGGLE_RUN)} (flow.power does both)")
    act = Activity(top, 0)
    prefix = top + "."
    aggregated = 0
    with open(path, errors="replace") as f:
        for line in f:
            m = _POINT.match(line.rstrip("\n"))
            if not m:
                continue
            kv = _fields(m[1])
            if kv.get("t") != "toggle":
                continue
            bit = _BIT.match(kv.get("o", ""))
            if not bit:
                continue
            hier, n = kv.get("h", ""), int(m[2])
            if hier == top:
                act.ports[bit[1]] = act.ports.get(bit[1], 0) + n
                if bit[1] == clock and bit[2] == "0->1":
                    act.cycles += n
            elif hier.startswith(prefix):
                inst = "/".join(demangle(part) for part in hier[len(prefix):].split("."))    # OpenSTA's divider
                if "*" in inst:
                    aggregated += 1
                    continue
                act.cell_type[inst] = kv.get("page", "").rpartition("/")[2]
                pins = act.pins.setdefault(inst, {})
                pins[bit[1]] = pins.get(bit[1], 0) + n
    if aggregated and not act.pins:
        raise ActivityError(f"{path} holds coverage summed over instances (names with '*'): run the simulation "
                            f"with {' '.join(TOGGLE_RUN)}")
    if act.cycles == 0:
        raise ActivityError(f"{path}: no rising edge of clock port {clock!r} of {top!r} was counted; is {top!r} "
                            f"the netlist's top and {clock!r} its clock?")
    return act
