"""Names that depend only on the module they are in, so that an engine's Verilog does not change when
another engine does.

Yosys numbers the objects its passes create with one counter for the whole design (``$procmux$6823_Y``,
``$auto$wreduce.cc:513:run$22251``), and Amaranth and ``lint_clean`` number generated names the same way
(``port$13997$92``, ``$lint$bool$17``, ``argmax$37``). Adding a lane to the residual mixer then renumbers the
names inside the norm unit, the MAC array and most other modules: their text changes although their logic
does not, and the synthesis part cache (flow/synth/cache.py, keyed by each part's text) maps them again.

``renumber`` replaces every ``$<digits>`` in a name by one ordinal per module: the names of a module that
share a base (the name with its ``$<digits>`` removed) are numbered 0, 1, ... in the order of their original
numbers, which is the order the module's own construction created them in. Module names are renumbered the
same way over the design, and instances follow their module's new name and port names. Only names change.
"""
from __future__ import annotations

import re
from collections import defaultdict

from pyosys import libyosys as ys

_NUMBER = re.compile(r"\$(\d+)")


def _key(name: str) -> tuple[int, ...]:
    return tuple(int(n) for n in _NUMBER.findall(name))


def new_names(names) -> dict[str, str]:
    """{old: new} for the names (strings) that hold ``$<digits>``: ``<base>$<k>``, ``k`` counting the names
    of each base in the order of their numbers. A name without ``$<digits>`` never ends in ``$<k>``, so the
    new names collide neither with each other nor with the names left alone."""
    by_base = defaultdict(list)
    for name in names:
        if _NUMBER.search(name):
            by_base[_NUMBER.sub("", name)].append(name)
    return {old: f"{base}${k}" for base, group in by_base.items()
            for k, old in enumerate(sorted(group, key=lambda n: (_key(n), n)))}


def _modules(design) -> list:
    return list(dict(design.modules_).values())


def _cells(module) -> list:
    return list(dict(module.cells_).values())


def _apply(rename, objects: dict, renamed: dict[str, str]) -> None:
    """Renames in two steps, through names no object has, as a new name may still be another's old one."""
    for i, old in enumerate(renamed):
        rename(objects[old], ys.IdString(f"$renumber${i}$"))
    for old, new in renamed.items():
        rename(objects[old], ys.IdString(new))


def _rename_modules(design) -> None:
    modules = {m.name.str(): m for m in _modules(design)}
    renamed = new_names(modules)
    _apply(design.rename, modules, renamed)
    if renamed:
        for module in _modules(design):
            for cell in _cells(module):
                if (new := renamed.get(cell.type.str())) is not None:
                    cell.type = ys.IdString(new)


def _rename_objects(module) -> dict[str, str]:
    """Renumbers ``module``'s wires and cells (one name space: Yosys refuses a cell a wire's name); returns
    its ports' renames."""
    wires = {w.name.str(): w for w in dict(module.wires_).values()}
    cells = {c.name.str(): c for c in _cells(module)}
    renamed = new_names([*wires, *cells])
    _apply(module.rename, wires | cells, renamed)
    port_renames = {old: new for old, new in renamed.items() if old in wires and wires[old].port_id}
    if port_renames:
        module.fixup_ports()
    return port_renames


def renumber(design) -> None:
    """Module-local numbering of every generated name of ``design`` (see the module docstring). Processes
    and memories keep their names, so none may be left: run after ``proc`` and ``memory``."""
    for module in _modules(design):
        if dict(module.processes) or dict(module.memories):
            raise ValueError(f"{module.name.str()}: processes or memories left; renumber runs after proc and memory")
    _rename_modules(design)
    ports = {m.name.str(): _rename_objects(m) for m in _modules(design)}
    for module in _modules(design):
        for cell in _cells(module):
            for old, new in ports.get(cell.type.str(), {}).items():
                if cell.hasPort(ys.IdString(old)):
                    sig = cell.getPort(ys.IdString(old))
                    cell.unsetPort(ys.IdString(old))
                    cell.setPort(ys.IdString(new), sig)
