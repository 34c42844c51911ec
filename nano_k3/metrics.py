"""The correctness metrics of SPEC_NANO_KPU.md §7, in numpy (no torch), for every level of the flow.

* ``row_cosines``: per-row cosine similarity, computed in float64; a row where either side is all
  zero scores 0 (the spec says an all-zero chip row scores 0; a zero reference row cannot be matched
  by direction either).
* ``argmax_agreement``: the fraction of rows whose pick counts as correct: the reference logit at
  the picked index is >= reference max - 0.01 * std(reference row). The std is the population
  standard deviation (ddof = 0) of the float64 reference row. The chip's pick is the argmax of its
  row with the lowest index winning ties (§4.5), which is what ``np.argmax`` returns.
Rows of several runs are pooled by concatenating them before calling.
"""
from __future__ import annotations

import numpy as np

PICK_TOLERANCE_STD = 0.01  # §7: a pick within 0.01 std of the reference maximum counts as correct


def _rows(a, name: str) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise ValueError(f"{name} must be a (rows, vocab) array or one row, got shape {a.shape}")
    return a


def _check_same(a: np.ndarray, b: np.ndarray) -> None:
    if a.shape != b.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {b.shape}")


def row_cosines(a, b) -> np.ndarray:
    """Cosine similarity of matching rows of a and b (float64, shape (rows,)); zero rows score 0."""
    a, b = _rows(a, "a"), _rows(b, "b")
    _check_same(a, b)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    dots = np.einsum("rv,rv->r", a, b)
    ok = (na > 0) & (nb > 0)
    out = np.zeros(a.shape[0], dtype=np.float64)
    out[ok] = dots[ok] / (na[ok] * nb[ok])
    return out


def pick_correct(picks, ref_logits) -> np.ndarray:
    """Per row: does the picked index count as correct against the reference row (bool (rows,))?"""
    ref = _rows(ref_logits, "ref_logits")
    picks = np.asarray(picks, dtype=np.int64).reshape(-1)
    if picks.shape[0] != ref.shape[0]:
        raise ValueError(f"{picks.shape[0]} picks for {ref.shape[0]} reference rows")
    if picks.size and (picks.min() < 0 or picks.max() >= ref.shape[1]):
        raise ValueError(f"picks must lie in 0..{ref.shape[1] - 1}, got {picks.min()}..{picks.max()}")
    picked = ref[np.arange(ref.shape[0]), picks]
    return picked >= ref.max(axis=1) - PICK_TOLERANCE_STD * ref.std(axis=1)


def argmax_agreement(chip_logits, ref_logits) -> float:
    """Fraction of rows where the chip's argmax (lowest index on ties) counts as correct."""
    chip, ref = _rows(chip_logits, "chip_logits"), _rows(ref_logits, "ref_logits")
    _check_same(chip, ref)
    if chip.shape[0] == 0:
        raise ValueError("argmax_agreement of zero rows is undefined")
    return float(pick_correct(np.argmax(chip, axis=1), ref).mean())
