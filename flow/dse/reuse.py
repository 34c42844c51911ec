"""``python -m flow.dse reuse --preset P --set FIELD=VALUE ...``: which engines a trial of that point would map
again, because their Verilog differs from the current chip's (flow.synth caches each engine part by its text).

Both designs are generated into ``<out>/reuse/`` and split by module (flow/synth/sources.py); an engine is
the module path below the top's single wrapper (``msh_chip_top.core.kda``), and it differs when any of its
modules does. Module names are Amaranth's hierarchy paths, so the same engine has the same names in both.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from flow.dse.space import DsePreset
from flow.dse.sweep import progress
from flow.dse.trial import emit_fresh


def _modules(preset: DsePreset, point: dict, folder: Path) -> dict[str, str]:
    from flow.synth.sources import read_source
    from rtl_gen.emit import FILELIST_NAME, read_filelist
    rtl = emit_fresh(preset.design, folder, preset.params(point))
    src = read_source(read_filelist(rtl / FILELIST_NAME), [])
    if src.modules is None:
        raise ValueError(f"{folder}: the Verilog cannot be split by module ({src.why})")
    return {n: hashlib.sha256(m.text.encode()).hexdigest() for n, m in src.modules.items()}


def engine_of(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth])


def compare(preset: DsePreset, changes: dict, out: Path) -> dict:
    """{"modules": (differing, all), "engines": {engine: modules differing}} of the point ``changes`` against
    the preset's current chip."""
    point = preset.current() | changes
    preset.params(point)                                 # an illegal point is named before any work
    base = _modules(preset, preset.current(), Path(out) / "reuse" / "current")
    other = _modules(preset, point, Path(out) / "reuse" / "point")
    depth = 3 if preset.design == "chip" else 2          # msh_chip_top.core.<engine>, <block>.<engine>
    engines: dict[str, int] = {}
    for name, digest in other.items():
        engines.setdefault(engine_of(name, depth), 0)
        if base.get(name) != digest:
            engines[engine_of(name, depth)] += 1
    differ = sum(base.get(n) != d for n, d in other.items())
    return {"point": point, "modules": (differ, len(other)), "engines": engines}


def report(preset: DsePreset, changes: dict, out: Path) -> dict:
    r = compare(preset, changes, out)
    same = sorted(e for e, n in r["engines"].items() if not n)
    again = sorted(f"{e} ({n})" for e, n in r["engines"].items() if n)
    progress(f"{', '.join(f'{k}={v}' for k, v in changes.items())}: {r['modules'][0]} of {r['modules'][1]} modules "
             f"differ from the current {preset.chip} chip's")
    progress(f"  engines mapped again ({len(again)}; differing modules): {', '.join(again) or '-'}")
    progress(f"  engines reused ({len(same)}): {', '.join(same) or '-'}")
    return r
