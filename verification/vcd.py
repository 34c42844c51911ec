"""The top-level ports of a simulation, cycle by cycle, from a VCD file (Verilator's ``--trace``).

``read_cycles`` samples every signal of one scope (the top level) just before each rising edge of the clock: the
inputs the design sees in that cycle and the outputs it drives from its state and those inputs, as a cycle-based
simulation of the same design would have them. Values come as bit matrices (cycles x width, bit 0 first) with a
second matrix saying which bits were known (not x or z).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


class VcdError(RuntimeError):
    """The file is not a VCD of the expected design (no such scope, no clock); the message says what."""


@dataclass
class Cycles:
    """Per signal name: ``bits`` and ``known``, uint8 / bool arrays [cycles, width]."""
    n: int
    bits: dict[str, np.ndarray]
    known: dict[str, np.ndarray]


def _scope_vars(lines, scope_depth: int) -> tuple[dict[str, tuple[str, int]], int]:
    """The variables of the first scope at ``scope_depth`` (1: the outermost; Verilator's ``$rootio``, the top
    level's ports): {id code: (name, width)}, and the index of the first line after ``$enddefinitions``."""
    depth, found, scopes = 0, {}, 0
    for k, line in enumerate(lines):
        words = line.split()
        if not words:
            continue
        if words[0] == "$scope":
            depth += 1
            scopes += depth == scope_depth
        elif words[0] == "$upscope":
            depth -= 1
        elif words[0] == "$var" and depth == scope_depth and scopes == 1:       # the first such scope only
            found.setdefault(words[3], (words[4], int(words[2])))
        elif words[0] == "$enddefinitions":
            return found, k + 1
    raise VcdError("no $enddefinitions: not a VCD file")


def read_cycles(path: Path, clock: str = "clk", scope_depth: int = 1) -> Cycles:
    """Every signal of the scope at ``scope_depth`` sampled before each rising edge of ``clock`` (module
    docstring)."""
    lines = Path(path).read_text().splitlines()
    codes, start = _scope_vars(lines, scope_depth)
    by_name = {name: code for code, (name, _) in codes.items()}
    if clock not in by_name:
        raise VcdError(f"{path}: no clock {clock!r} at scope depth {scope_depth}; signals: {sorted(by_name)[:20]}")
    clk = by_name[clock]
    width = {code: w for code, (_, w) in codes.items()}
    value = {code: "x" * w for code, w in width.items()}
    samples: list[dict[str, str]] = []
    pending: dict[str, str] = {}

    def apply():
        if pending.get(clk) == "1" and value[clk] == "0":
            samples.append(dict(value))
        value.update(pending)
        pending.clear()

    for line in lines[start:]:
        if not line or line[0] == "$":
            continue
        c = line[0]
        if c == "#":
            apply()
        elif c in "bB":
            bits, code = line[1:].split()
            if code in width:
                w = width[code]
                bits = bits.lower()
                pending[code] = bits.rjust(w, "x" if bits[0] in "xz" else "0")[-w:]
        elif c in "01xzXZ":
            if line[1:] in width:
                pending[line[1:]] = c.lower()
    apply()
    bits, known = {}, {}
    for code, (name, w) in codes.items():
        text = "".join(s[code] for s in samples).encode()
        raw = np.frombuffer(text, dtype=np.uint8).reshape(len(samples), w)[:, ::-1]     # bit 0 first
        bits[name] = (raw == ord("1")).astype(np.uint8)
        known[name] = (raw == ord("0")) | (raw == ord("1"))
    return Cycles(len(samples), bits, known)
