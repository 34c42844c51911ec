"""And-inverter graphs as Yosys writes them (``write_aiger -ascii -map``) and a compiled cycle simulator for them.

A graph is the flattened logic of a design: inputs, latches (flip-flops: current and next literal, initial
value) and outputs are literals (2 * variable + inverted), and-gates in topological order. ``AigSim`` evaluates
it 64 runs at a time (one bit of a 64-bit word per run): the and-gates are evaluated by a small C loop compiled
once with the system's C compiler into the work folder (``LIB_DIR``), the rest is numpy. verification.equiv_pairs
runs 64 random runs to compare registers; verification.replay runs one trace through every part of a netlist.
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flow.toolchain import work_root

Bit = tuple[str, int]
ONES = np.uint64(0xFFFFFFFFFFFFFFFF)
LIB_DIR = work_root() / "aigsim"
_C = r"""
#include <stdint.h>
void aig_eval(uint64_t *v, const int32_t *lhs, const int32_t *a, const int32_t *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)a[i], y = (uint32_t)b[i];
        v[lhs[i]] = (v[x >> 1] ^ (0 - (uint64_t)(x & 1))) & (v[y >> 1] ^ (0 - (uint64_t)(y & 1)));
    }
}
"""
_lib = None


class AigError(RuntimeError):
    """A graph cannot be read or simulated (bad file, no C compiler); the message says what to do."""


@dataclass
class Aig:
    """An ASCII AIGER graph with its ``-map`` names (bit as declared in the wire: offset, maybe descending)."""
    max_var: int
    inputs: list[int]
    latches: list[tuple[int, int, int]]          # current literal, next literal, initial value
    outputs: list[int]
    ands: np.ndarray                             # rows: lhs, rhs0, rhs1 (literals)
    input_names: dict[int, Bit] = field(default_factory=dict)
    latch_names: dict[int, list[Bit]] = field(default_factory=dict)
    output_names: dict[int, Bit] = field(default_factory=dict)


def read_aig(aag: Path, symbols: Path) -> Aig:
    text = Path(aag).read_text()
    head_end = text.find("\n")
    head = text[:head_end].split()
    if len(head) < 6 or head[0] != "aag":
        raise AigError(f"{aag}: not an ASCII AIGER file (header {text[:head_end]!r})")
    n_in, n_latch, n_out, n_and = map(int, head[2:6])
    pos, lines = head_end + 1, []
    for _ in range(n_in + n_latch + n_out):                # the short sections line by line
        end = text.find("\n", pos)
        lines.append(text[pos:end])
        pos = end + 1
    inputs = [int(x) for x in lines[:n_in]]
    latches = []
    for line in lines[n_in:n_in + n_latch]:
        f = list(map(int, line.split()))
        latches.append((f[0], f[1], f[2] if len(f) > 2 else 0))
    outputs = [int(x) for x in lines[n_in + n_latch:]]
    comment = text.find("\nc\n", pos - 1)                # the and-gates in one parse, up to the comment
    body = text[pos:comment if comment >= 0 else len(text)]
    ands = np.array(body.split(), dtype=np.int64).reshape(-1, 3) if n_and else np.zeros((0, 3), np.int64)
    if len(ands) != n_and:
        raise AigError(f"{aag}: {len(ands)} and-gates, the header says {n_and}")
    aig = Aig(int(head[1]), inputs, latches, outputs, ands)
    for line in Path(symbols).read_text().splitlines():
        kind, idx, bit, name = line.split(maxsplit=3)
        if kind == "input":
            aig.input_names[int(idx)] = (name, int(bit))
        elif kind == "output":
            aig.output_names[int(idx)] = (name, int(bit))
        elif kind == "latch":
            aig.latch_names.setdefault(int(idx), []).append((name, int(bit)))
    return aig


def _library():
    """The compiled evaluator (built once per source text into ``LIB_DIR``)."""
    global _lib
    if _lib is None:
        digest = hashlib.sha256(_C.encode()).hexdigest()[:12]
        so = LIB_DIR / f"aig_eval-{digest}.so"
        if not so.is_file():
            cc = shutil.which("cc") or shutil.which("gcc")
            if cc is None:
                raise AigError("no C compiler (cc/gcc) to build the graph simulator: apt-get install gcc")
            LIB_DIR.mkdir(parents=True, exist_ok=True)
            src, tmp = so.with_suffix(".c"), so.with_suffix(".tmp.so")
            src.write_text(_C)
            subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(src)], check=True)
            tmp.replace(so)
        _lib = ctypes.CDLL(str(so))
        ptr = ctypes.c_void_p
        _lib.aig_eval.argtypes = [ptr, ptr, ptr, ptr, ctypes.c_int64]
    return _lib


class AigSim:
    """Cycle simulation of one graph: ``set`` inputs (by input index), ``eval`` the logic, read ``outputs`` or
    ``latch_values``, ``step`` to the next cycle. Latches start at their initial value (0 when uninitialised)."""

    def __init__(self, aig: Aig):
        self.aig = aig
        self.val = np.zeros(aig.max_var + 1, dtype=np.uint64)
        self.in_vars = np.array([lit >> 1 for lit in aig.inputs], dtype=np.int64)
        self.out_lits = np.array(aig.outputs, dtype=np.int64)
        self._out_vars, self._out_inv = self.out_lits >> 1, np.where(self.out_lits & 1, ONES, np.uint64(0))
        self.lat_vars = np.array([cur >> 1 for cur, _, _ in aig.latches], dtype=np.int64)
        self.lat_next = np.array([nxt for _, nxt, _ in aig.latches], dtype=np.int64)
        self._next_vars, self._next_inv = self.lat_next >> 1, np.where(self.lat_next & 1, ONES, np.uint64(0))
        self.state = np.array([ONES if init == 1 else 0 for _, _, init in aig.latches], dtype=np.uint64)
        self._lhs = np.ascontiguousarray(aig.ands[:, 0] >> 1, dtype=np.int32)
        self._a = np.ascontiguousarray(aig.ands[:, 1], dtype=np.int32)
        self._b = np.ascontiguousarray(aig.ands[:, 2], dtype=np.int32)
        self._eval = _library().aig_eval

    def set(self, index: np.ndarray, words: np.ndarray) -> None:
        self.val[self.in_vars[index]] = words

    def eval(self) -> None:
        self.val[self.lat_vars] = self.state
        self.val[0] = 0
        self._eval(self.val.ctypes.data, self._lhs.ctypes.data, self._a.ctypes.data, self._b.ctypes.data,
                   len(self._lhs))

    def outputs(self) -> np.ndarray:
        return self.val[self._out_vars] ^ self._out_inv

    def latch_values(self) -> np.ndarray:
        return self.state.copy()

    def step(self) -> None:
        self.state = self.val[self._next_vars] ^ self._next_inv
