"""Work done by a forked copy of this process, beside it on the machine's other core.

The placement and sign-off steps hold the whole placed design in memory, and writing it out (the
Verilog netlist; the DEF and SPEF; the layout pictures) is several independent reads of it, each of a
minute on the nano chip. ``beside(fn, ...)`` runs ``fn`` in a child made by ``fork``: the child sees the
design as it is, without pickling gigabytes, while this process goes on with the next write.
``.result()`` waits for the child and returns what ``fn`` returned (it must pickle), or raises the
child's exception (ForkError, with the child's traceback, when the exception itself does not pickle or
the child died without answering, e.g. killed for memory).

Pages are shared copy-on-write; the garbage collector's objects are frozen before the fork and the
child never collects, so a collection does not touch, and copy, every page of the parent's heap. The
child still copies each page whose objects it reads (reference counts), up to the size of what it
reads: ``beside(..., copies=bytes)`` runs ``fn`` here, at once, when the memory available now does
not hold that much (the nano chip's sign-off holds 13 GB, beside an OpenSTA run of 4.4 GB).
"""
from __future__ import annotations

import gc
import multiprocessing
import pickle
import traceback
from pathlib import Path
from typing import Any, Callable

from flow.cli import die_with_parent


class ForkError(RuntimeError):
    """The forked child failed or died; the message holds its traceback or exit code."""


def _child(send, fn: Callable, args: tuple, kwargs: dict) -> None:
    gc.disable()
    die_with_parent()
    try:
        answer = (True, fn(*args, **kwargs))
    except BaseException as e:                   # everything goes back to the parent, which decides
        answer = (False, e)
        try:
            pickle.dumps(e)
        except Exception:
            answer = (False, ForkError(f"{getattr(fn, '__name__', fn)} failed in a forked process:\n"
                                       + traceback.format_exc()))
    send.send(answer)
    send.close()


class Beside:
    """A call running in a forked child (see the module docstring); ``result()`` joins it."""

    reserved = 0          # bytes the children now running may still copy (their ``copies``)

    def __init__(self, fn: Callable, *args, copies: int = 0, **kwargs):
        self.name = getattr(fn, "__name__", repr(fn))
        self.copies = copies
        Beside.reserved += copies
        ctx = multiprocessing.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        gc.freeze()
        try:
            self._proc = ctx.Process(target=_child, args=(send, fn, args, kwargs), daemon=True)
            self._proc.start()
        finally:
            gc.unfreeze()
            send.close()

    def result(self) -> Any:
        Beside.reserved -= self.copies
        self.copies = 0
        try:
            ok, value = self._recv.recv()
        except EOFError:
            self._proc.join()
            raise ForkError(f"{self.name} in a forked process ended without an answer (exit code "
                            f"{self._proc.exitcode}; a negative code is the signal that ended it, -9 often "
                            f"the kernel's out-of-memory killer)") from None
        finally:
            self._recv.close()
        self._proc.join()
        if not ok:
            raise value
        return value


class Done:
    """A call that ran in this process (too little memory for a child): ``result()`` as ``Beside``'s."""

    def __init__(self, fn: Callable, *args, **kwargs):
        self._value, self._error = None, None
        try:
            self._value = fn(*args, **kwargs)
        except Exception as e:
            self._error = e

    def result(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def mem_available() -> int | None:
    """Bytes of memory available now (the kernel's MemAvailable), or None where /proc does not say."""
    try:
        return next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None


def beside(fn: Callable, *args, copies: int = 0, **kwargs) -> Beside | Done:
    """Start ``fn(*args, **kwargs)`` in a forked child, or run it here when less than ``copies`` bytes (what the
    child would copy) are available beyond what the children still running may copy; the returned object's
    ``result()`` waits for it."""
    avail = mem_available()
    if avail is not None and avail - Beside.reserved < copies:
        return Done(fn, *args, **kwargs)
    return Beside(fn, *args, copies=copies, **kwargs)
