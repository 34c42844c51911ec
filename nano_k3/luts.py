"""Every lookup table of the chip: one generator, documented tables, ``$readmemh`` ROM files.

All tables share one shape: ``depth = 2**index_bits`` segments between ``depth + 1`` integer knots.
Evaluation is piecewise-linear interpolation in integers (``Lut.lookup``):

    y = base[i] + round_half_up(delta[i] * r / 2**interp_bits),   base[i] = knot[i], delta[i] = knot[i+1] - knot[i]

where ``i`` is the top bits of the (normalised) input and ``r`` the next ``interp_bits`` bits;
``base`` is unsigned (``base_bits``), ``delta`` two's complement (``delta_bits``). Since ``delta``
is taken from the rounded knot values, the interpolant is continuous. The knots are f(x_i) moved by
half the mean sagitta of the two segments they end (equi-ripple: the chord error of a segment,
h^2 f''/8, becomes +-h^2 f''/16), except knot 0 of recip and exp2, kept exact so that 1/1 and 2^0
are exactly 1.0 (a softmax's largest term is exactly 1; a one-element softmax returns its value).
Floats appear only here, when the tables are built; the model and the chip see integers.
``tables()`` builds them once and caches them.

ROM image (``Lut.banks``): the knots in two msh_rom banks, so that the two knots of a segment come
from one read of each bank in the same cycle. Word widths are multiples of 8 (SPEC section 5).

* even bank ``<name>_even.hex``: knot[0], knot[2], ..., knot[depth] (depth/2 + 1 words), unsigned,
  ``knot_bits`` wide (the largest knot's width, rounded up);
* odd bank ``<name>_odd.hex``: knot[1], knot[3], ..., knot[depth-1] (depth/2 words), each modulo
  2^``low_bits``, ``low_bits`` the two's complement width of the largest delta, rounded up. An odd
  knot lies one delta from either even neighbour, so its low bits and that neighbour determine the
  delta (the ``low_bits``-bit difference, sign-extended) and with it the odd knot.

Segment i reads even[ceil(i/2)] and odd[floor(i/2)]: for i even, knot[i] and the low bits of
knot[i+1] (base[i] = knot[i]); for i odd, the low bits of knot[i] and knot[i+1], so base[i] =
knot[i+1] - delta[i]. That costs about 20 bits per segment where a {delta, base} word took 40.
The knots are stored as they are: subtracting the smallest knot would save one or two bits of a
24-bit word, never a byte.

    python -m nano_k3.luts -o build/rtl/roms     # writes <name>_even.hex, <name>_odd.hex + luts.json
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
from .out_paths import output_folder


def _byte_width(bits: int) -> int:
    """``bits`` rounded up to an msh_rom word width (a multiple of 8, SPEC section 5)."""
    return -(-bits // 8) * 8


@dataclass(frozen=True)
class RomBank:
    """One msh_rom image of a table (``kind`` "even" or "odd"): ``depth`` words of ``width`` bits."""

    table: str
    kind: str
    depth: int
    width: int
    words: np.ndarray = field(repr=False)   # (depth,) int64, unsigned

    @property
    def file(self) -> str:
        return f"{self.table}_{self.kind}.hex"

    @property
    def addr_bits(self) -> int:
        return max(1, (self.depth - 1).bit_length())

    @property
    def bits(self) -> int:
        return self.depth * self.width

    def hex_lines(self) -> list[str]:
        return [f"{int(w):0{self.width // 4}x}" for w in self.words]


@dataclass(frozen=True)
class Lut:
    """One table; see the module docstring for the evaluation rule and the ROM banks."""

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
        if self.base.shape != (self.depth,) or self.delta.shape != (self.depth,):
            raise ValueError(f"LUT {self.name}: expected {self.depth} entries, got {self.base.shape}")
        if self.knots.min() < 0 or self.knots.max() >= 1 << self.base_bits:
            raise ValueError(f"LUT {self.name}: knots {self.knots.min()}..{self.knots.max()} "
                             f"outside {self.base_bits} unsigned bits")
        lim = 1 << (self.delta_bits - 1)
        if self.delta.min() < -lim or self.delta.max() >= lim:
            raise ValueError(f"LUT {self.name}: delta {self.delta.min()}..{self.delta.max()} "
                             f"outside {self.delta_bits} signed bits")
        gap = np.flatnonzero(self.base[1:] != self.base[:-1] + self.delta[:-1])
        if gap.size:      # the ROM holds knots only: base[i+1] must be base[i] + delta[i]
            i = int(gap[0])
            raise ValueError(f"LUT {self.name}: not continuous at segment {i}: base {self.base[i]} + delta "
                             f"{self.delta[i]} != next base {self.base[i + 1]}")

    @property
    def depth(self) -> int:
        return 1 << self.index_bits

    @property
    def knots(self) -> np.ndarray:
        """(depth + 1,) int64: base, then the end of the last segment."""
        return np.append(self.base, self.base[-1] + self.delta[-1])

    @property
    def knot_bits(self) -> int:
        """Width of an even-bank word: a whole knot."""
        return _byte_width(int(self.knots.max()).bit_length())

    @property
    def low_bits(self) -> int:
        """Width of an odd-bank word: the low bits of a knot, enough to hold any delta in two's complement."""
        return _byte_width(max(int(-self.delta.min()) - 1, int(self.delta.max())).bit_length() + 1)

    @property
    def banks(self) -> tuple[RomBank, RomBank]:
        """(even, odd) ROM images: every even knot whole, the low ``low_bits`` bits of every odd knot."""
        k = self.knots
        return (RomBank(self.name, "even", self.depth // 2 + 1, self.knot_bits, k[0::2]),
                RomBank(self.name, "odd", self.depth // 2, self.low_bits, k[1::2] & ((1 << self.low_bits) - 1)))

    @property
    def bits(self) -> int:
        return sum(b.bits for b in self.banks)

    def lookup(self, idx, r) -> np.ndarray:
        """The ROM read plus the interpolation multiply-add: idx in 0..depth-1, r in 0..2^interp_bits-1."""
        idx = np.asarray(idx, dtype=np.int64)
        return self.base[idx] + round_shift(self.delta[idx] * np.asarray(r, dtype=np.int64), self.interp_bits)


def _build(name: str, doc: str, f, x0: float, step: float, index_bits: int, interp_bits: int,
           out_frac: int, base_bits: int, delta_bits: int, max_knot: float | None = None,
           exact_at_0: bool = False) -> Lut:
    """Tabulate f at knots x0 + i*step (i = 0..depth), take (base, delta) from them, measure the error."""
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
# dominate the model's error. 1,024 segments each keep the model ~1,000x inside its precision target
# (max 1 - cos 1.9e-8 over 20 seeds vs 2e-5, python -m nano_k3.precision) at a third of the deeper
# tables' ROM bits (2,048 / 4,096 segments: 2 x 40,984 + 81,944 bits); see docs/fixed_point.md.
RSQRT_INDEX = 9                       # 1 octave-parity bit + 8 mantissa bits
RSQRT_INTERP = MANT_BITS - (RSQRT_INDEX - 1)
RECIP_INDEX = 9                       # 9 mantissa bits
RECIP_INTERP = MANT_BITS - RECIP_INDEX
EXP2_INDEX = 8                        # f in [0, 1), step 1/256
EXP2_INTERP = T.frac - EXP2_INDEX
SIGMOID_INDEX = 10                    # step 16/1024 = 1/64
SIGMOID_INTERP = X.frac + 4 - SIGMOID_INDEX
DECAY_INDEX = 10                      # step 32/1024 = 1/32
DECAY_INTERP = X.frac + 5 - DECAY_INDEX
DECAY_DELTA_BITS = 18                 # max |delta| = 0.302 * 2^23 / 32 < 2^17
SIGMOID_DELTA_BITS = 17               # max delta = 0.25 * 2^23 / 64 = 2^15


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
                  _sigmoid, 0.0, SIGMOID_RANGE / n, SIGMOID_INDEX, SIGMOID_INTERP, 23, 24, SIGMOID_DELTA_BITS)


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
    """Write every table's banks (``Lut.banks``: one word per line, $readmemh) and a ``luts.json`` index."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths, index = [], {}
    for t in tables().values():
        for b in t.banks:
            p = out / b.file
            p.write_text("\n".join(b.hex_lines()) + "\n")
            paths.append(p)
        index[t.name] = {"banks": {b.kind: {"file": b.file, "depth": b.depth, "width": b.width} for b in t.banks},
                         "depth": t.depth, "base_bits": t.base_bits, "delta_bits": t.delta_bits,
                         "index_bits": t.index_bits, "interp_bits": t.interp_bits, "out_frac": t.out_frac,
                         "doc": t.doc, "max_abs_error": t.max_err}
    (out / "luts.json").write_text(json.dumps(index, indent=2) + "\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nano_k3.luts", description="Generate the chip's LUT ROM hex files ($readmemh).")
    ap.add_argument("-o", "--out", required=True, help="output directory, e.g. build/rtl/roms")
    args = ap.parse_args(argv)
    output_folder(ap, "-o", args.out)
    write_roms(args.out)
    for t in tables().values():
        shapes = " + ".join(f"{b.file} {b.depth} x {b.width}" for b in t.banks)
        print(f"{t.name}: {shapes} = {t.bits} bits  max|err| {t.max_err:.2e}  {t.doc}")
    total = sum(t.bits for t in tables().values())
    print(f"total {total} bits ({total / 8192:.1f} KiB) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
