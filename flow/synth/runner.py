"""Runs the Yosys children (flow/synth/worker.py): the plan, then the parts whose digest the cache does not
hold, ``jobs`` at a time, largest first; each finished part goes into the cache."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from flow.synth.cache import PartCache, plan_digest
from flow.synth.partition import Part
from flow.synth.sources import Source
from flow.synth.spec import SynthError, progress

REPO = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class PartRun:
    """Where part i's files are (a cache entry) and how it got there."""
    entry: Path
    digest: str
    reused: bool
    runtime_s: float          # this run's mapping time (0 when reused)
    mapped_in_s: float        # the time the mapping took when it ran


def _log_errors(log: Path) -> str:
    if not log.exists():
        return "(no log)"
    lines = log.read_text(errors="replace").splitlines()
    errs = [ln for ln in lines if ln.startswith("ERROR")]
    return "\n".join(errs or lines[-15:])


def _child(mode: str, job: dict, folder: Path) -> subprocess.Popen:
    (folder / "job.json").write_text(json.dumps(job, indent=1))
    with open(folder / "yosys.log", "w") as f:
        return subprocess.Popen([sys.executable, "-m", "flow.synth", f"--{mode}", str(folder / "job.json")],
                                stdout=f, cwd=REPO)


def _part_error(part_dir: Path, code: int) -> SynthError:
    err_json = part_dir / "error.json"
    detail = json.loads(err_json.read_text()) if err_json.exists() else {}
    if "inferred_memories" in detail:
        names = "; ".join(f"{m['module']}.{m['memory']} ({m['depth']} x {m['width']} bits, {m['src']})"
                          for m in detail["inferred_memories"])
        return SynthError(f"inferred memory survives synthesis: {names}. Every on-chip array must be an "
                          "msh_sram / msh_rom instance (SPEC_NANO_KPU.md section 5).")
    if "unmapped_cells" in detail:
        return SynthError(f"cells left unmapped to Nangate45: {detail['unmapped_cells']} (see {part_dir}/yosys.log)")
    log = part_dir / "yosys.log"
    return SynthError(f"Yosys failed (exit {code}); log {log}:\n" + _log_errors(log))


def run_plan(job: dict, stage: Path, cache: PartCache, source: Source) -> dict:
    """Every module with its size estimate and submodules (worker.plan_worker), from the cache when the
    whole source was planned before."""
    digest = plan_digest(job, source)
    plan = cache.load_plan(digest)
    if plan is not None:
        progress(f"{job['top']}: plan reused (cache plan-{digest[:8]})")
        return plan
    d = stage / "plan"
    d.mkdir()
    t0 = time.monotonic()
    proc = _child("plan", {**job, "part_out": str(d.resolve()),
                           "macro_stubs": str((stage / "macro_stubs.v").resolve())}, d)
    if proc.wait() != 0:
        raise _part_error(d, proc.returncode)
    plan = json.loads((d / "plan.json").read_text())
    progress(f"{job['top']}: planned {len(plan)} modules in {time.monotonic() - t0:.0f} s (cache plan-{digest[:8]})")
    cache.store_plan(digest, plan)
    return plan


def _part_job(job: dict, part: Part, text: str | None, d: Path, stage: Path, label: str) -> dict:
    """A part reads its own Verilog (``text``, written to ``d/source.v``), or every file when it is None."""
    pj = {**job, "top": part.top, "blackbox": list(part.blackbox), "label": label, "part_out": str(d.resolve()),
          "macro_stubs": str((stage / "macro_stubs.v").resolve())}
    if text is not None:
        (d / "source.v").write_text(text, errors="surrogateescape")
        pj |= {"files": [str((d / "source.v").resolve())], "include_dirs": []}
    return pj


def run_parts(job: dict, parts: list[Part], texts: list[str | None], digests: list[str], stage: Path, jobs: int,
              cache: PartCache) -> list[PartRun]:
    """Each part from the cache, or mapped by a Yosys child (``jobs`` at a time, in the partition's order:
    largest first) and then stored in the cache."""
    n = len(parts)
    runs: list[PartRun | None] = [None] * n
    todo = []
    for i, (part, digest) in enumerate(zip(parts, digests)):
        entry = cache.lookup(digest)
        if entry is None:
            todo.append(i)
            continue
        runs[i] = PartRun(entry, digest, True, 0.0, float(cache.meta(digest).get("mapped_in_s", 0.0)))
        progress(f"part {i + 1} of {n}: {part.top} reused (cache {digest[:8]})")
    dirs = {i: stage / "parts" / str(i) for i in todo}
    running: dict[int, tuple[subprocess.Popen, float]] = {}
    try:
        while todo or running:
            while todo and len(running) < jobs:
                i = todo.pop(0)
                dirs[i].mkdir(parents=True)
                how = "its own modules" if texts[i] is not None else "all files"
                progress(f"part {i + 1} of {n}: {parts[i].top} runs (digest {digests[i][:8]}, reads {how})")
                label = f"{parts[i].top}: " if n > 1 else ""
                running[i] = (_child("worker", _part_job(job, parts[i], texts[i], dirs[i], stage, label), dirs[i]),
                              time.monotonic())
            time.sleep(0.5)
            for i, (proc, t) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[i]
                if proc.returncode != 0:
                    raise _part_error(dirs[i], proc.returncode)
                took = time.monotonic() - t
                meta = {"top": parts[i].top, "blackbox": list(parts[i].blackbox), "mapped_in_s": round(took, 2),
                        "created_unix": round(time.time(), 1)}
                entry = cache.store(digests[i], dirs[i], meta)
                runs[i] = PartRun(entry, digests[i], False, took, took)
                left = len(todo) + len(running)
                progress(f"part {i + 1} of {n}: {parts[i].top} mapped in {took:.0f} s ({left} part(s) to go)")
    finally:
        for proc, _ in running.values():
            proc.kill()
            proc.wait()
    return [r for r in runs if r is not None]
