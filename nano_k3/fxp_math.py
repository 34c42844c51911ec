"""Fixed-point nonlinearities and norms: LUT + leading-zero normalisation + shifts, integers only.

Every function takes and returns int64 arrays in the formats of ``fxp_ops`` (documented in
docs/fixed_point.md); hardware block tests call these as the reference (``ref_*``). Tables come
from ``luts.tables()``.
"""
from __future__ import annotations

import math

import numpy as np

from . import luts as L
from .fxp_ops import SQ_FRAC, UNIT, P, T, X, log2_exact, normalise, round_shift, wide_dot
from .tensors import PARAM_FORMATS

MANT_FRAC = 23           # rsqrt / recip mantissas are UQ1.23
NORM_FRAC = PARAM_FORMATS["norm"][0]   # a norm weight w is Q2.13: the gain 2^NORM_FRAC + w is UQ2.13
ONE_P = 1 << P.frac      # 1.0 in format P
# Constants of the datapath, rounded once (the only place a float meets the design).
LOG2E_Q24 = round(math.log2(math.e) * (1 << 24))  # log2(e), UQ2.24 (25 bits)
C_FRAC = 24              # fractional bits of the score-to-exponent constants (log2 e and its scaled forms)


def eps_int(eps: float, frac: int) -> int:
    """A norm epsilon as an integer constant with ``frac`` fractional bits (round to nearest)."""
    return max(1, round(eps * (1 << frac)))


# --- reciprocal square root and reciprocal ---------------------------------------------------
def rsqrt(m, frac: int) -> tuple[np.ndarray, np.ndarray]:
    """1/sqrt(m * 2^-frac) ~= mant * 2^-23 * 2^e for integer m >= 1: returns (mant UQ1.23, e).

    Normalise m by its leading-one position L to u = m / 2^Ee in [1, 4) with Ee = L - frac rounded
    down to even (so the square root of 2^Ee is the shift e = -Ee/2); the table is indexed by the
    octave parity p and the top RSQRT_INDEX - 1 mantissa bits below the leading one, the other
    RSQRT_INTERP bits (of 23) interpolate.
    """
    t, lead = normalise(m, 23)                   # t in [2^23, 2^24)
    E = lead - frac
    p = E & 1                                    # octave parity (two's complement & is floor-mod)
    man = t - (1 << 23)                          # 23 bits below the leading one
    idx = (p << (L.RSQRT_INDEX - 1)) | (man >> L.RSQRT_INTERP)
    mant = L.tables()["rsqrt"].lookup(idx, man & ((1 << L.RSQRT_INTERP) - 1))
    return mant, -((E - p) >> 1)


def recip(m, frac: int) -> tuple[np.ndarray, np.ndarray]:
    """1/(m * 2^-frac) ~= mant * 2^-23 * 2^e for integer m >= 1: returns (mant UQ1.23, e)."""
    t, lead = normalise(m, 23)
    man = t - (1 << 23)
    mant = L.tables()["recip"].lookup(man >> L.RECIP_INTERP, man & ((1 << L.RECIP_INTERP) - 1))
    return mant, -(lead - frac)


def apply_mant(v, v_frac: int, mant, e, out_frac: int) -> np.ndarray:
    """v * mant * 2^-23 * 2^e, rounded to ``out_frac`` fractional bits (one multiply, one shift)."""
    return round_shift(np.asarray(v, dtype=np.int64) * mant, v_frac + MANT_FRAC - e - out_frac)


def apply_mant_int(v: int, v_frac: int, mant: int, e: int, out_frac: int) -> int:
    """``apply_mant`` of one Python integer, whose product may exceed int64: the same rounding (half up)."""
    s = v_frac + MANT_FRAC - e - out_frac
    p = v * mant
    return (p + (1 << (s - 1))) >> s if s > 0 else p << -s


# --- norms -------------------------------------------------------------------------------------
def sum_squares(v, v_frac: int) -> np.ndarray:
    """sum(v^2) over the last axis with SQ_FRAC (32) fractional bits: exact sum, one rounding.

    v is at most 32 bits, so the squares are 32 x 32-bit products; the accumulator is exact and
    rounds half up once to SQ_FRAC fractional bits (``wide_dot``).
    """
    v = np.asarray(v, dtype=np.int64)
    return wide_dot("...i,...i->...", v, v, 2 * v_frac - SQ_FRAC)[..., None]   # (..., 1)


def rms_rsqrt(v, v_frac: int, eps: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """RMSNorm's scale 1/sqrt(mean(v^2) + eps) over the last axis as (mant, e), each (..., 1).

    The mean is folded into the rsqrt exponent (length must be a power of two), eps into an integer
    constant with SQ_FRAC fractional bits added to the sum of squares (``sum_squares``).
    """
    v = np.asarray(v, dtype=np.int64)
    sh = log2_exact(v.shape[-1], "RMSNorm length")
    ss = sum_squares(v, v_frac) + eps_int(eps * v.shape[-1], SQ_FRAC)    # (..., 1) frac 32
    return rsqrt(ss, SQ_FRAC + sh)                                        # rsqrt of the mean


def rmsnorm(v, v_frac: int, w, eps: float = 1e-5, out=X) -> np.ndarray:
    """RN(v, w) = v / sqrt(mean(v^2) + eps) * (1 + w/8192) over the last axis -> ``out`` (default X).

    w is the Q2.13 norm offset; the gain 2^NORM_FRAC + w is a 14-bit unsigned multiplier; the scale is
    ``rms_rsqrt``'s.
    """
    v = np.asarray(v, dtype=np.int64)
    mant, e = rms_rsqrt(v, v_frac, eps)
    y = apply_mant(v, v_frac, mant, e, X.frac)                            # (..., n) X.frac
    gain = np.int64(1 << NORM_FRAC) + np.asarray(w, dtype=np.int64)      # (n,) UQ2.13
    return out.fit(y * gain, X.frac + NORM_FRAC)


def l2norm(v, v_frac: int, eps: float = 1e-6) -> np.ndarray:
    """v / sqrt(sum v^2 + eps) over the last axis -> UNIT (Q1.23, saturating at 1 - 2^-23)."""
    v = np.asarray(v, dtype=np.int64)
    ss = sum_squares(v, v_frac) + eps_int(eps, SQ_FRAC)                  # (..., 1) frac 32
    mant, e = rsqrt(ss, SQ_FRAC)
    return UNIT.fit(apply_mant(v, v_frac, mant, e, UNIT.frac), UNIT.frac)


# --- exp, sigmoid, SiLU, decay -----------------------------------------------------------------
def exp2_neg(t) -> np.ndarray:
    """2^-t for t >= 0 with T.frac (24) fractional bits -> P (UQ1.23); integer part of t is a right shift."""
    t = np.asarray(t, dtype=np.int64)
    if np.any(t < 0):
        raise ValueError(f"exp2_neg needs t >= 0, got min {t.min()}")
    n = np.minimum(t >> T.frac, 40)
    f = t & ((1 << T.frac) - 1)
    val = L.tables()["exp2"].lookup(f >> L.EXP2_INTERP, f & ((1 << L.EXP2_INTERP) - 1))
    return round_shift(val, n)


def sigmoid(x) -> np.ndarray:
    """sigmoid(x), x in X -> P (UQ1.23). Table on |x| < 16, symmetry for x < 0, 1 beyond."""
    x = np.asarray(x, dtype=np.int64)
    a = np.abs(x)
    inside = a < (L.SIGMOID_RANGE << X.frac)
    ac = np.where(inside, a, 0)
    val = L.tables()["sigmoid"].lookup(ac >> L.SIGMOID_INTERP, ac & ((1 << L.SIGMOID_INTERP) - 1))
    val = np.where(inside, val, ONE_P)
    return np.where(x < 0, ONE_P - val, val)


def silu(x) -> np.ndarray:
    """x * sigmoid(x): X -> X (32 x 24-bit multiply, round half up, saturate)."""
    x = np.asarray(x, dtype=np.int64)
    return X.fit(x * sigmoid(x), X.frac + P.frac)


def kda_decay(g) -> np.ndarray:
    """alpha = exp(-5 sigmoid(g)), g in X clamped to [-16, 16) -> ALPHA (UQ0.23)."""
    lim = L.DECAY_RANGE << X.frac
    u = np.clip(np.asarray(g, dtype=np.int64), -lim, lim - 1) + lim   # 0 .. 2^(X.frac + 5) - 1
    return L.tables()["kda_decay"].lookup(u >> L.DECAY_INTERP, u & ((1 << L.DECAY_INTERP) - 1))


# --- softmax -----------------------------------------------------------------------------------
def to_log2(s, s_frac: int, c_q24: int = LOG2E_Q24) -> np.ndarray:
    """Scores -> base-2 exponent in T: s * c (c = log2 e times any score scale, C_FRAC bits), saturated."""
    return T.fit(np.asarray(s, dtype=np.int64) * c_q24, s_frac + C_FRAC)


def softmax_exp(t) -> np.ndarray:
    """Unnormalised softmax weights 2^(t - max t) over the last axis, t from ``to_log2`` -> P."""
    t = np.asarray(t, dtype=np.int64)
    return exp2_neg(t.max(-1, keepdims=True) - t)


def softmax_combine(e, vals, v_frac: int, out=X) -> np.ndarray:
    """sum_i e_i vals_i / sum_i e_i: e (..., n) in P, vals (..., n, d) -> (..., d) in ``out``.

    The numerator (exact, 24 x 32-bit products) is rounded to X.frac fractional bits, then scaled
    by the reciprocal of the sum (LUT + leading-zero shift): one division-free multiply per element.
    """
    e = np.asarray(e, dtype=np.int64)
    num = wide_dot("...n,...nd->...d", e, vals, P.frac + v_frac - X.frac)     # (..., d) X.frac
    mant, ex = recip(e.sum(-1, keepdims=True), P.frac)                          # (..., 1)
    return out.fit(apply_mant(num, X.frac, mant, ex, out.frac), out.frac)


def softmax_probs(e) -> np.ndarray:
    """Normalised probabilities e_i / sum e in P (for traces and the router-style consumers)."""
    e = np.asarray(e, dtype=np.int64)
    mant, ex = recip(e.sum(-1, keepdims=True), P.frac)
    return P.fit(apply_mant(e, P.frac, mant, ex, P.frac), P.frac)

