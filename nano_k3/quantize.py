"""Trained float tensors -> the image's integers (SPEC §4.3, §4.4): INT4 groups and int16 small params.

INT4 (SPEC §4.3): each group of ``g`` input rows of one output column gets a Q3.12 scale ``s`` (int16,
at least 1) and a zero point ``z`` in 0..15; the weight is (q - z) s / 4096 with q in 0..15. The
quantiser searches, per group and column, the scale among ``RANGE_FACTORS`` times the group's range / 15
(shrinking the range trades clipped outliers for finer steps; the range always includes 0, which
(q - z) s represents with q = z) and every zero point, and keeps the pair
with the least squared error; q is then round(w / scale) + z, clipped. The embedding is token-major:
its groups run along d_model inside a token row (SPEC §4.3), so it is quantised transposed.

Small parameters (SPEC §4.4) round to their format, half away from zero, and saturate to the container;
``to_weights`` reports every parameter that saturated.
"""
from __future__ import annotations

import numpy as np
import torch

from .config import ModelConfig
from .int4 import SCALE_FRAC
from .tensors import PARAM_FORMATS, MatSpec, ParamSpec, tensor_specs
from .weights import PARAM_DTYPES, IntMat, Weights

LEVELS = 15
RANGE_FACTORS = np.linspace(0.5, 1.0, 11)   # candidate fractions of a group's full range
SCALE_MAX = (1 << 15) - 1                    # int16 Q3.12: the largest scale is 8 - 2^-12


def quantise_columns(w: np.ndarray, group: int) -> IntMat:
    """(rows, cols) float -> nibbles (rows, cols), scales and zeros (ceil(rows / group), cols)."""
    w = np.asarray(w, dtype=np.float64)
    rows, cols = w.shape
    n_groups = -(-rows // group)
    q = np.empty((rows, cols), np.uint8)
    s = np.empty((n_groups, cols), np.int16)
    z = np.empty((n_groups, cols), np.uint8)
    zeros = np.arange(LEVELS + 1, dtype=np.float64)[None, :, None, None]          # (1, 16, 1, 1)
    for g in range(n_groups):
        part = w[g * group:(g + 1) * group]                                         # (r, cols)
        span = np.maximum(part.max(0), 0) - np.minimum(part.min(0), 0)              # (cols,) 0 is a level
        cand = np.clip(np.rint(RANGE_FACTORS[:, None] * span / LEVELS * (1 << SCALE_FRAC)), 1, SCALE_MAX)  # (F, cols)
        step = cand[:, None, None, :] / (1 << SCALE_FRAC)                           # (F, 1, 1, cols)
        codes = np.clip(np.rint(part[None, None] / step) + zeros, 0, LEVELS)        # (F, 16, r, cols)
        err = (((codes - zeros) * step - part[None, None]) ** 2).sum(2)             # (F, 16, cols)
        best = err.reshape(-1, cols).argmin(0)                                      # (cols,)
        f_idx, z_idx = np.divmod(best, LEVELS + 1)
        col = np.arange(cols)
        s[g], z[g] = cand[f_idx, col], z_idx
        q[g * group:(g + 1) * group] = codes[f_idx, z_idx, :, col].T
    return IntMat(q=q, s=s, z=z)


def dequantise(m: IntMat, group: int) -> np.ndarray:
    """IntMat -> float64 (rows, cols), groups along rows (the inverse map of ``quantise_columns``)."""
    rows = m.q.shape[0]
    idx = np.arange(rows) // group
    return (m.q.astype(np.float64) - m.z[idx]) * m.s[idx] / (1 << SCALE_FRAC)


def quantise_mat(spec: MatSpec, w: np.ndarray, cfg: ModelConfig) -> IntMat:
    """A standard weight (fan_in, fan_out), or the embedding (vocab, d_model) token-major."""
    g = cfg.group_of(spec.fan_in)
    if not spec.emb:
        return quantise_columns(w, g)
    t = quantise_columns(np.asarray(w).T, g)                    # groups along d_model
    return IntMat(q=np.ascontiguousarray(t.q.T), s=np.ascontiguousarray(t.s.T), z=np.ascontiguousarray(t.z.T))


def param_limits(spec: ParamSpec) -> tuple[float, float]:
    """The real range a small parameter's container holds (norm entries as gains 1 + v / 8192)."""
    frac, _signed = PARAM_FORMATS[spec.fmt]
    info = np.iinfo(PARAM_DTYPES[spec.fmt])
    offset = 1.0 if spec.fmt == "norm" else 0.0
    return offset + info.min / (1 << frac), offset + info.max / (1 << frac)


def quantise_param(spec: ParamSpec, value: np.ndarray) -> tuple[np.ndarray, int]:
    """A real small parameter (norm entries as gains) -> (its integers, how many saturated)."""
    frac, _signed = PARAM_FORMATS[spec.fmt]
    real = np.asarray(value, dtype=np.float64) - (1.0 if spec.fmt == "norm" else 0.0)
    dtype = PARAM_DTYPES[spec.fmt]
    info = np.iinfo(dtype)
    v = np.rint(real * (1 << frac))
    clipped = int(((v < info.min) | (v > info.max)).sum())
    return np.clip(v, info.min, info.max).astype(dtype).reshape(spec.shape), clipped


def to_weights(cfg: ModelConfig, emb: torch.Tensor, w: dict[str, torch.Tensor],
               p: dict[str, torch.Tensor]) -> tuple[Weights, dict[str, int]]:
    """Float tensors (as ``golden.load_tensors`` names them) -> (image Weights, saturated count by param)."""
    mats, params, saturated = {}, {}, {}
    for spec in tensor_specs(cfg):
        if isinstance(spec, MatSpec):
            src = emb if spec.emb else w[spec.name]
            mats[spec.name] = quantise_mat(spec, src.detach().double().numpy(), cfg)
        else:
            params[spec.name], n = quantise_param(spec, p[spec.name].detach().double().numpy())
            if n:
                saturated[spec.name] = n
    return Weights(cfg=cfg, mats=mats, params=params), saturated
