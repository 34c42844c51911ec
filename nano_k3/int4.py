"""INT4 weights with group scale and zero point: nibble packing and the exact dequant-matvec.

This is the arithmetic of the chip's dequant + MAC array, bit for bit. Scales are Q3.12 int16,
zero points uint8 (SPEC §4.3). The zero point and scale are applied once per group per output
column, on the exact integer sums:

    y[c] = sum_g s[g, c] * (sum_{k in g} q[k, c] * x[k]  -  z[g, c] * sum_{k in g} x[k])

so the result is exact (no rounding) and carries the activation's fractional bits plus 12.
"""
from __future__ import annotations

import numpy as np

SCALE_BITS = 16  # group scales are int16 (.s) ...
SCALE_FRAC = 12  # ... Q3.12


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(2R, C) nibbles 0..15 -> (R, C) bytes; row 2r in the low nibble, 2r+1 in the high (SPEC §4.3)."""
    q = np.asarray(q)
    if q.shape[0] % 2:
        raise ValueError(f"pack_nibbles needs an even number of rows, got shape {q.shape}")
    if q.size and (q.min() < 0 or q.max() > 15):
        raise ValueError(f"nibbles must lie in 0..15, got range {q.min()}..{q.max()}")
    q = q.astype(np.uint8)
    return (q[0::2] | (q[1::2] << 4)).astype(np.uint8)


def unpack_nibbles(b: np.ndarray) -> np.ndarray:
    """(R, C) bytes -> (2R, C) nibbles; inverse of ``pack_nibbles``."""
    b = np.asarray(b, dtype=np.uint8)
    out = np.empty((2 * b.shape[0],) + b.shape[1:], dtype=np.uint8)
    out[0::2] = b & 0xF
    out[1::2] = b >> 4
    return out


def dequant_matvec(x: np.ndarray, q: np.ndarray, s: np.ndarray, z: np.ndarray, group: int) -> np.ndarray:
    """Exact y = x . dequant(W) in integers: x (fan_in,), q (fan_in, fan_out), s/z (G, fan_out).

    Returns int64 (fan_out,) with frac(x) + 12 fractional bits. ``group`` is the effective group
    size min(group_size, fan_in).
    """
    x = np.asarray(x, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    fan_in, fan_out = q.shape
    n_groups = -(-fan_in // group)
    if x.shape != (fan_in,) or s.shape != (n_groups, fan_out) or z.shape != (n_groups, fan_out):
        raise ValueError(f"shape mismatch: x {x.shape}, q {q.shape}, s {s.shape}, z {z.shape}, group {group}")
    y = np.zeros(fan_out, dtype=np.int64)
    for g in range(n_groups):
        rows = slice(g * group, min((g + 1) * group, fan_in))
        sum_qx = x[rows] @ q[rows]                      # (fan_out,)
        sum_x = x[rows].sum()
        y += s[g].astype(np.int64) * (sum_qx - z[g].astype(np.int64) * sum_x)
    return y
