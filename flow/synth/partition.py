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


def partition(plan: dict[str, dict], top: str, jobs: int) -> list[Part]:
    """Splits the design for ``jobs`` parallel Yosys processes, largest part first. A part is an engine (a
    child of the top, or of the one instance that wraps them all, as in the area breakdown) whose size
    estimate is at least 1/(4·jobs) of the design's; the rest of the design is one more part. Modules are
    mapped one by one (no ``flatten``), so the netlist is the same as from one process. A subtree that
    shares a module with the rest stays in the rest (no module is mapped twice)."""
    def reach(m: str, stop: frozenset[str] = frozenset()) -> set[str]:
        seen, todo = set(), [m]
        while todo:
            x = todo.pop()
            if x not in seen and x not in stop:
                seen.add(x)
                todo += plan[x]["subs"]
        return seen

    def work(mods: set[str]) -> int:
        return sum(plan[x]["weight"] for x in mods)

    total = work(reach(top))
    parent = top
    while plan[parent]["instances"] == 1:
        parent = plan[parent]["subs"][0]
    split: list[str] = []
    if jobs > 1:
        claimed: set[str] = set()
        for s in sorted(plan[parent]["subs"], key=lambda s: -work(reach(s))):
            if work(reach(s)) >= total / (4 * jobs) and not reach(s) & claimed:
                split.append(s)
                claimed |= reach(s)
        while split and (shared := [s for s in split if reach(s) & reach(top, frozenset(split))]):
            split = [s for s in split if s not in shared]
    parts = [Part(s, (), work(reach(s))) for s in split]
    parts.append(Part(top, tuple(split), work(reach(top, frozenset(split)))))
    return sorted(parts, key=lambda p: -p.weight)
