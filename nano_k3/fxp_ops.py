"""Integer primitives of the chip's datapath: rounding shifts, saturation, leading-zero count, formats.

Every value in the fixed-point model is an int64 numpy array holding a two's-complement integer
whose real value is ``v / 2**frac``. The formats are defined once here (``FORMATS``) and documented
in docs/fixed_point.md. No function in this module ever uses a float.

Rounding, everywhere in the chip: round half up (toward +inf), i.e. ``(v + 2**(s-1)) >> s`` with an
arithmetic shift. It is one adder in front of a shifter, and its bias (+2**-(s+1) on exact ties
only) is far below the precision target. Saturation clips to the signed (or unsigned) range of the
destination container.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .int4 import SCALE_FRAC, dequant_matvec


@dataclass(frozen=True)
class Fmt:
    """A fixed-point format: ``bits``-wide container, ``frac`` fractional bits, signed or not."""

    name: str
    bits: int
    frac: int
    signed: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 48 or not 0 <= self.frac <= 48:
            raise ValueError(f"format {self.name}: bits={self.bits}, frac={self.frac} out of range")

    @property
    def lo(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def q(self) -> str:
        """Q notation: integer bits (sign included for signed formats) . fraction bits."""
        return f"{'' if self.signed else 'U'}Q{self.bits - self.frac}.{self.frac}"

    def fit(self, v, frac: int) -> np.ndarray:
        """Requantise ``v`` (with ``frac`` fractional bits) into this format: round, then saturate."""
        return np.clip(round_shift(v, frac - self.frac), self.lo, self.hi)

    def element(self, word: int, j: int) -> int:
        """Element ``j`` of a packed word of elements ``bits`` wide (element 0 in the low bits)."""
        v = (word >> (self.bits * j)) & ((1 << self.bits) - 1)
        return v - (1 << self.bits) if self.signed and v >> (self.bits - 1) else v


# The formats of the datapath (docs/fixed_point.md is the table that explains each one).
X = Fmt("X", 32, 24)             # vectors between blocks: residual stream, norms, matvec outputs, KV cache
A = Fmt("A", 20, 0)              # MAC-array input mantissa (int20); its exponent is per vector (mac_input)
UNIT = Fmt("UNIT", 24, 23)       # L2-normalised q_hat, k_hat (|v| <= 1, saturates at 1 - 2^-23)
P = Fmt("P", 24, 23, False)      # probabilities, sigmoid and exp outputs, reciprocal mantissas
ALPHA = Fmt("ALPHA", 23, 23, False)  # KDA decay alpha in (e^-5, 1)
S = Fmt("S", 28, 24)             # KDA state and its read-out
RW = Fmt("RW", 24, 22, False)    # router weights (<= 2.828)
T = Fmt("T", 32, 24)             # base-2 softmax exponents t = score x log2(e) (scaled), |t| < 128
LOGIT = Fmt("LOGIT", 32, 16)     # int32 logits written by the chip: real logit x 2^16
ACC_FRAC = SCALE_FRAC            # fractional bits the dequant-MAC adds to its input's (Q3.12 scales)
SQ_FRAC = 32                     # fractional bits of a norm's sum of squares (rmsnorm, l2norm)
MAC_FRAC_MAX = X.frac + A.bits - 2   # largest block exponent of a MAC-input vector: X's 1 LSB, normalised
FORMATS = {f.name: f for f in (X, A, UNIT, P, ALPHA, S, RW, T, LOGIT)}


def round_shift(v, s) -> np.ndarray:
    """v * 2**-s rounded half up (s > 0); an exact left shift for s <= 0. ``s`` may be an array."""
    v = np.asarray(v, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    if s.ndim == 0:
        s = int(s)
        return (v + (1 << (s - 1))) >> s if s > 0 else v << (-s)
    right = np.maximum(s, 1)
    return np.where(s > 0, (v + (np.int64(1) << (right - 1))) >> right, v << np.maximum(-s, 0))


def saturate(v, bits: int) -> np.ndarray:
    """Clip to the signed ``bits``-wide range."""
    return np.clip(np.asarray(v, dtype=np.int64), -(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def saturate_unsigned(v, bits: int) -> np.ndarray:
    """Clip to 0 .. 2**bits - 1."""
    return np.clip(np.asarray(v, dtype=np.int64), 0, (1 << bits) - 1)


_POW2 = np.int64(1) << np.arange(63, dtype=np.int64)  # (63,) thresholds of the priority encoder


def bit_length(v) -> np.ndarray:
    """Position of the leading one plus one (0 for 0): 64 minus the leading-zero count; v >= 0."""
    v = np.asarray(v, dtype=np.int64)
    if np.any(v < 0):
        raise ValueError(f"bit_length needs non-negative inputs, got min {v.min()}")
    return (v[..., None] >= _POW2).sum(-1).astype(np.int64)


def normalise(v, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Shift v > 0 so its leading one sits at bit ``width``: returns (t, L) with 2^width <= t < 2^(width+1).

    L is the leading-one position of v. Bits below the kept ``width + 1`` are truncated (a
    barrel shifter driven by the leading-zero count); the relative error is below 2^-width.
    """
    v = np.asarray(v, dtype=np.int64)
    if np.any(v <= 0):
        raise ValueError(f"normalise needs positive inputs, got min {v.min()}")
    lead = bit_length(v) - 1
    sh = lead - width
    t = np.where(sh >= 0, v >> np.maximum(sh, 0), v << np.maximum(-sh, 0))
    return t, lead


def log2_exact(n: int, what: str) -> int:
    """log2 of a power of two; vector lengths divided by in the datapath must be powers of two."""
    if n <= 0 or n & (n - 1):
        raise ValueError(f"{what} must be a power of two (division by a shift), got {n}")
    return n.bit_length() - 1


def mac_input(v, v_frac: int) -> tuple[np.ndarray, int]:
    """Block floating point for the MAC array: (A mantissas, shared fractional bits) of a vector.

    The exponent comes from the leading-one position of max|v| (a leading-zero count over the
    vector) so that the largest mantissa uses the top bit: 2^18 <= max|m| < 2^19 for A = int20,
    rounded half up and saturated (a round-up to 2^23 clips to A.hi). The fractional bits are
    capped at MAC_FRAC_MAX (a zero vector gets the cap); every X vector with a nonzero element
    reaches the top bit below the cap.
    """
    v = np.asarray(v, dtype=np.int64)
    mx = int(np.abs(v).max()) if v.size else 0
    floor = v_frac - MAC_FRAC_MAX
    shift = max(int(bit_length(mx)) - (A.bits - 1), floor) if mx else floor
    return saturate(round_shift(v, shift), A.bits), v_frac - shift


_SPLIT = 16  # wide_dot splits its second operand into 16-bit halves so no int64 partial sum wraps


def wide_dot(subscripts: str, a, b, shift: int) -> np.ndarray:
    """round_shift(einsum(subscripts, a, b), shift), exact for products wider than int64 allows.

    The chip's dot-product accumulators are as wide as the exact sum (e.g. 32 x 32-bit products
    summed over 64 terms: 70 bits) and round once at the end. numpy has int64 only, so b is split
    as b = hi * 2^16 + lo (lo unsigned 16 bits) and the two partial sums are combined without
    forming the full sum: sum = c * 2^16 + low with c = hi_sum + (lo_sum >> 16) and
    0 <= low < 2^16. For shift > 16 the result is round_shift(c, shift - 16) (low cannot carry
    across the rounding point); otherwise c * 2^(16 - shift) + round_shift(low, shift). Exact as
    long as a times 16 bits, summed, and the result fit in int64.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    hi, lo = b >> _SPLIT, b & ((1 << _SPLIT) - 1)
    lo_sum = np.einsum(subscripts, a, lo)
    c = np.einsum(subscripts, a, hi) + (lo_sum >> _SPLIT)
    if shift > _SPLIT:
        return round_shift(c, shift - _SPLIT)
    return (c << (_SPLIT - shift)) + round_shift(lo_sum & ((1 << _SPLIT) - 1), shift)


def matvec(m, m_frac: int, q: np.ndarray, s: np.ndarray, z: np.ndarray, group: int) -> np.ndarray:
    """The MAC array: A mantissas m (fan_in,) with m_frac fractional bits -> x . dequant(W) in X.

    The accumulator (``int4.dequant_matvec``) is exact with m_frac + ACC_FRAC fractional bits; only
    the final requantisation to X rounds (half up) and saturates.
    """
    m = np.asarray(m, dtype=np.int64)
    if m.size and (m.min() < A.lo or m.max() > A.hi):
        raise ValueError(f"MAC inputs must be int{A.bits}, got range {m.min()}..{m.max()}")
    return X.fit(dequant_matvec(m, q, s, z, group), m_frac + ACC_FRAC)


def embed_row(q_row: np.ndarray, s_row: np.ndarray, z_row: np.ndarray, group: int) -> np.ndarray:
    """Dequantise one token-major embedding row through the MAC array (input 1, fan-in 1) -> X.

    q_row (d,) nibbles, s_row/z_row (G,) per group along d. Each column is one output of a
    fan-in-1 matvec with input 1 (frac 0), so the result is s * (q - z) with ACC_FRAC (12)
    fractional bits, exact; it is shifted left into X.
    """
    d = q_row.shape[0]
    cols = np.arange(d) // group                                  # (d,) group of each element
    return matvec(np.ones(1, dtype=np.int64), 0, q_row[None, :], s_row[cols][None, :],
                  z_row[cols][None, :], 1)                       # (d,) X
