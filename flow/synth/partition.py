"""How the design is cut into parts that Yosys processes map side by side."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    """A piece of the design that one Yosys process maps: module ``top`` and everything below it, with the
    ``blackbox`` modules (the tops of the other parts) left as black boxes."""
    top: str
    blackbox: tuple[str, ...]
    weight: int


def _reach(plan: dict[str, dict], m: str, stop: frozenset[str] = frozenset()) -> set[str]:
    seen, todo = set(), [m]
    while todo:
        x = todo.pop()
        if x not in seen and x not in stop:
            seen.add(x)
            todo += plan[x]["subs"]
    return seen


def partition(plan: dict[str, dict], top: str) -> list[Part]:
    """Cuts the design into parts, largest first (the order the Yosys processes take them in): each engine (a
    child of the top, or of the one instance that wraps them all, as in the area breakdown) with everything
    below it, and the rest of the design with those engines as black boxes. A part is cached by its own
    Verilog (flow/synth/cache.py), so an edit maps only the engine it touches; the cut does not depend on
    ``--jobs``, so neither do the parts' digests. Modules are mapped one by one (no ``flatten``), so the
    logic does not depend on the cut (Yosys' generated names may, and with them the order of ABC's input). An
    engine that shares a module with another part stays in the rest (no module is mapped twice)."""
    def reach(m: str, stop: frozenset[str] = frozenset()) -> set[str]:
        return _reach(plan, m, stop)

    def work(mods: set[str]) -> int:
        return sum(plan[x]["weight"] for x in mods)

    parent = top
    while plan[parent]["instances"] == 1:
        parent = plan[parent]["subs"][0]
    split: list[str] = []
    claimed: set[str] = set()
    for s in sorted(plan[parent]["subs"], key=lambda s: (-work(reach(s)), s)):
        if s != top and not reach(s) & claimed:
            split.append(s)
            claimed |= reach(s)
    while split and (shared := [s for s in split if reach(s) & reach(top, frozenset(split))]):
        split = [s for s in split if s not in shared]
    parts = [Part(s, (), work(reach(s))) for s in split]
    parts.append(Part(top, tuple(split), work(reach(top, frozenset(split)))))
    return sorted(parts, key=lambda p: -p.weight)


def whole(plan: dict[str, dict], top: str) -> list[Part]:
    """The design as one part (``--flatten``)."""
    return [Part(top, (), sum(plan[x]["weight"] for x in _reach(plan, top)))]
