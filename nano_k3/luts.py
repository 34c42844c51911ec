"""Every lookup table of the chip: one generator, documented tables, ``$readmemh`` ROM files.

All tables share one shape: ``depth = 2**index_bits`` entries, each a (base, delta) pair packed in
one ROM word ``{delta (two's complement, delta_bits), base (unsigned, base_bits)}``, width a
multiple of 8. Evaluation is piecewise-linear interpolation in integers (``Lut.lookup``):

    y = base[i] + round_half_up(delta[i] * r / 2**interp_bits)

where ``i`` is the top bits of the (normalised) input and ``r`` the next ``interp_bits`` bits.
``delta[i] = base(next knot) - base[i]`` is taken from the rounded knot values, so the
interpolant is continuous. The knots are f(x_i) moved by half the mean sagitta of the two
segments they end (equi-ripple: the chord error of a segment, h^2 f''/8, becomes +-h^2 f''/16),
except knot 0 of recip and exp2, kept exact so that 1/1 and 2^0 are exactly 1.0 (a softmax's
largest term is exactly 1; a one-element softmax returns its value). Floats appear only here,
when the tables are built; the model and the chip see integers. ``tables()`` builds them once
and caches them.

    python -m nano_k3.luts -o build/rtl/roms     # writes <name>.hex for every table + luts.json
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import KDA_LOG_DECAY_MIN
from .fxp_ops import ALPHA, T, X, round_shift


@dataclass(frozen=True)
class Lut:
    """One ROM table; see the module docstring for the word layout and the evaluation rule."""

    name: str
    doc: str           # input domain and meaning, one line
    index_bits: int
    interp_bits: int
    base_bits: int
    delta_bits: int
    out_frac: int      # fractional bits of the output
    base: np.ndarray = field(repr=False)   # (depth,) int64, unsigned
    delta: np.ndarray = field(repr=False)  # (depth,) int64, signed
    max_err: float = 0.0                   # measured max |interpolant - f| on a dense grid, real units

    def __post_init__(self) -> None:
        if self.width % 8:
            raise ValueError(f"LUT {self.name}: ROM width {self.width} is not a multiple of 8")
        if self.base.shape != (self.depth,) or self.delta.shape != (self.depth,):
            raise ValueError(f"LUT {self.name}: expected {self.depth} entries, got {self.base.shape}")
        if self.base.min() < 0 or self.base.max() >= 1 << self.base_bits:
            raise ValueError(f"LUT {self.name}: base outside {self.base_bits} unsigned bits")
        lim = 1 << (self.delta_bits - 1)
        if self.delta.min() < -lim or self.delta.max() >= lim:
            raise ValueError(f"LUT {self.name}: delta {self.delta.min()}..{self.delta.max()} "
                             f"outside {self.delta_bits} signed bits")

    @property
    def depth(self) -> int:
        return 1 << self.index_bits

    @property
    def width(self) -> int:
        return self.base_bits + self.delta_bits

    @property
    def bits(self) -> int:
        return self.depth * self.width

    def words(self) -> list[int]:
        """ROM words {delta, base} as Python ints."""
        dmask = (1 << self.delta_bits) - 1
        return [((int(d) & dmask) << self.base_bits) | int(b) for b, d in zip(self.base, self.delta)]

    def hex_lines(self) -> list[str]:
        digits = self.width // 4
        return [f"{w:0{digits}x}" for w in self.words()]

    def lookup(self, idx, r) -> np.ndarray:
        """The ROM read plus the interpolation multiply-add: idx in 0..depth-1, r in 0..2^interp_bits-1."""
        idx = np.asarray(idx, dtype=np.int64)
        return self.base[idx] + round_shift(self.delta[idx] * np.asarray(r, dtype=np.int64), self.interp_bits)


def _build(name: str, doc: str, f, x0: float, step: float, index_bits: int, interp_bits: int,
           out_frac: int, base_bits: int, delta_bits: int, max_knot: float | None = None,
           exact_at_0: bool = False) -> Lut:
    """Tabulate f at knots x0 + i*step (i = 0..depth), pack (base, delta), measure the error."""
    depth = 1 << index_bits
    knots = np.array([f(x0 + i * step) for i in range(depth + 1)], dtype=np.float64)
    mids = np.array([f(x0 + (i + 0.5) * step) for i in range(depth)], dtype=np.float64)
    sag = mids - (knots[:-1] + knots[1:]) / 2                     # (depth,) chord error at mid-segment
    shift = np.zeros(depth + 1)
    shift[1:-1] = (sag[:-1] + sag[1:]) / 4
    shift[0], shift[-1] = (0.0 if exact_at_0 else sag[0] / 2), sag[-1] / 2
    knots = knots + shift
    ints = np.rint(knots * (1 << out_frac)).astype(np.int64)
    if max_knot is not None:
        ints = np.minimum(ints, int(max_knot))
    base, delta = ints[:-1], ints[1:] - ints[:-1]
    lut = Lut(name, doc, index_bits, interp_bits, base_bits, delta_bits, out_frac, base, delta)
    # Dense check: 16 points per segment plus the segment ends.
    n_r = 1 << interp_bits
    r = np.arange(0, n_r, max(1, n_r // 16), dtype=np.int64)
    idx = np.repeat(np.arange(depth), r.size)
    rr = np.tile(r, depth)
    got = lut.lookup(idx, rr) / float(1 << out_frac)
    want = np.array([f(x0 + (i + k / n_r) * step) for i, k in zip(idx, rr)])
    return dataclasses.replace(lut, max_err=float(np.abs(got - want).max()))


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# Table parameters, referenced by fxp_math (which implements the index/fraction extraction).
# Index + interpolation bits cover the whole input: 23 mantissa bits below the leading one for
# rsqrt/recip (``fxp_ops.normalise``), T.frac bits of the exponent fraction for exp2, the X
# fractional bits plus log2 of the range for sigmoid and the decay.
MANT_BITS = 23
SIGMOID_RANGE = 16                    # |x| in [0, 16)
DECAY_RANGE = 16                      # g in [-16, 16)
# Depths: the decay (into every KDA state update) and the sigmoid (router scores, SiLU, gates)
# dominate the model's error, so they get the deep tables; see docs/fixed_point.md.
RSQRT_INDEX = 9                       # 1 octave-parity bit + 8 mantissa bits
RSQRT_INTERP = MANT_BITS - (RSQRT_INDEX - 1)
RECIP_INDEX = 9                       # 9 mantissa bits
RECIP_INTERP = MANT_BITS - RECIP_INDEX
EXP2_INDEX = 8                        # f in [0, 1), step 1/256
EXP2_INTERP = T.frac - EXP2_INDEX
SIGMOID_INDEX = 11                    # step 16/2048 = 1/128
SIGMOID_INTERP = X.frac + 4 - SIGMOID_INDEX
DECAY_INDEX = 12                      # step 32/4096 = 1/128
DECAY_INTERP = X.frac + 5 - DECAY_INDEX
DECAY_DELTA_BITS = 17                 # max |delta| = 0.302 * 2^23 / 128 < 2^15; 23 + 17 = 40-bit words


def _rsqrt_lut() -> Lut:
    # Entry i = (p, m): u = (1 + m/half) * 2^p, p the octave parity of the normalised input.
    depth = 1 << RSQRT_INDEX
    half = depth // 2

    def u(i: float) -> float:
        p, m = (0, i) if i < half else (1, i - half)
        return (1 + m / half) * 2.0 ** p

    return _build("rsqrt", f"1/sqrt(u), u = (1 + m/{half}) * 2^p in [1, 4); index {{p, m[{RSQRT_INDEX - 2}:0]}}; "
                  "out UQ1.23", lambda i: 1 / math.sqrt(u(i)), 0.0, 1.0, RSQRT_INDEX, RSQRT_INTERP, 23, 24, 16)


def _recip_lut() -> Lut:
    n = 1 << RECIP_INDEX
    return _build("recip", f"1/u, u in [1, 2), {RECIP_INDEX} mantissa bits index; out UQ1.23",
                  lambda x: 1 / x, 1.0, 1.0 / n, RECIP_INDEX, RECIP_INTERP, 23, 24, 16, exact_at_0=True)


def _exp2_lut() -> Lut:
    n = 1 << EXP2_INDEX
    return _build("exp2", "2^-f, f in [0, 1) (softmax: e^x = 2^(x log2 e), integer part by shift); out UQ1.23",
                  lambda f: 2.0 ** -f, 0.0, 1.0 / n, EXP2_INDEX, EXP2_INTERP, 23, 24, 16, exact_at_0=True)


def _sigmoid_lut() -> Lut:
    n = 1 << SIGMOID_INDEX
    return _build("sigmoid", "sigmoid(a), a = |x| in [0, 16); sigmoid(-a) = 1 - sigmoid(a); out UQ1.23",
                  _sigmoid, 0.0, SIGMOID_RANGE / n, SIGMOID_INDEX, SIGMOID_INTERP, 23, 24, 16)


def _decay_lut() -> Lut:
    n = 1 << DECAY_INDEX
    return _build("kda_decay", f"alpha = exp(-5 sigmoid(g)), g in [-16, 16) (clamped); out UQ0.{ALPHA.frac}",
                  lambda g: math.exp(KDA_LOG_DECAY_MIN * _sigmoid(g)),
                  -DECAY_RANGE, 2 * DECAY_RANGE / n, DECAY_INDEX, DECAY_INTERP, ALPHA.frac, ALPHA.bits,
                  DECAY_DELTA_BITS, max_knot=(1 << ALPHA.bits) - 1)


@functools.cache
def tables() -> dict[str, Lut]:
    """Every LUT of the chip, by name (built once per process)."""
    luts = [_rsqrt_lut(), _recip_lut(), _exp2_lut(), _sigmoid_lut(), _decay_lut()]
    return {t.name: t for t in luts}


def write_roms(out_dir: str | Path) -> list[Path]:
    """Write ``<name>.hex`` (one word per line, $readmemh) for every table and a ``luts.json`` index."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths, index = [], {}
    for t in tables().values():
        p = out / f"{t.name}.hex"
        p.write_text("\n".join(t.hex_lines()) + "\n")
        paths.append(p)
        index[t.name] = {"file": p.name, "depth": t.depth, "width": t.width, "base_bits": t.base_bits,
                         "delta_bits": t.delta_bits, "index_bits": t.index_bits,
                         "interp_bits": t.interp_bits, "out_frac": t.out_frac, "doc": t.doc,
                         "max_abs_error": t.max_err}
    (out / "luts.json").write_text(json.dumps(index, indent=2) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate the chip's LUT ROM hex files ($readmemh).")
    ap.add_argument("-o", "--out", required=True, help="output directory, e.g. build/rtl/roms")
    args = ap.parse_args(argv)
    for p, t in zip(write_roms(args.out), tables().values()):
        print(f"{p}: {t.depth} x {t.width} bits  max|err| {t.max_err:.2e}  {t.doc}")
    total = sum(t.bits for t in tables().values())
    print(f"total {total} bits ({total / 8192:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
