"""How a flow stage runs and ends: its finished folder replaces the previous one, and ``main`` prints the
summary and what it wrote, or the stage's error."""
from __future__ import annotations

import gc
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

R = TypeVar("R")


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (a context or, as ``@collector_paused()``, a function). A stage that
    builds tens of millions of objects (the placed nano chip: cells, pins, nets) spends about half of its
    netlist step in full collections that find nothing to free: its objects hold no reference cycles and
    are freed by their reference counts."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def publish(stage: Path, out: Path) -> None:
    """Replace ``out`` by the complete ``stage`` folder (the old one is kept as ``<out>.old`` until then),
    so that a failed run never leaves a half-written result under ``out``."""
    old = out.with_name(out.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if out.exists():
        out.rename(old)
    stage.rename(out)
    if old.exists():
        shutil.rmtree(old)


def report_stage(prog: str, error: type[Exception], run: Callable[[], R], summary: Callable[[R], str],
                 written: Callable[[R], Sequence[Path]]) -> int:
    """Call ``run()``; on ``error`` print ``<prog>: error: ...`` to stderr and return 1, else print
    ``summary(result)`` and ``wrote <files>`` and return 0 (the exit status of ``python -m <prog>``)."""
    try:
        result = run()
    except error as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    print(summary(result), end="")
    print("wrote " + ", ".join(str(p) for p in written(result)))
    return 0


def die_with_parent() -> None:
    """In a worker process (Yosys in pyosys): end when the process that started it ends, so that a stopped
    `make synth` / `make place` does not leave a worker holding gigabytes. Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def job_count(jobs: object, what: str) -> int:
    """``jobs`` child processes (``what`` they are) to run at a time; None: one per CPU this process may use.
    Raises ValueError naming the bad value."""
    if jobs is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"--jobs must be a whole number of {what}, at least 1; got {jobs!r}")
    return jobs
