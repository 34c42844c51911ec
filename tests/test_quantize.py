"""Trained floats -> image integers (nano_k3/quantize.py): INT4 groups and small params."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nano_k3.config import TINY
from nano_k3.golden import GoldenModel, load_tensors
from nano_k3.quantize import dequantise, param_limits, quantise_columns, quantise_param, to_weights
from nano_k3.tensors import ParamSpec
from nano_k3.weights import generate

SEED = 19


def _minmax_rms(w: np.ndarray, group: int) -> float:
    """RMS error of the plain min/max quantiser (scale = range including 0 / 15, nearest zero point)."""
    err = []
    for g in range(0, w.shape[0], group):
        part = w[g:g + group]
        span = np.maximum(part.max(0), 0) - np.minimum(part.min(0), 0)
        step = np.maximum(np.rint(span / 15 * 4096), 1) / 4096
        z = np.clip(np.rint(-np.minimum(part.min(0), 0) / step), 0, 15)
        q = np.clip(np.rint(part / step) + z, 0, 15)
        err.append((q - z) * step - part)
    return float(np.sqrt(np.mean(np.concatenate(err) ** 2)))


@pytest.mark.parametrize("dist", ["normal", "heavy-tailed", "one-sided"])
@pytest.mark.parametrize("group", [64, 128])
def test_int4_error_bounds(dist, group):
    rng = np.random.default_rng(SEED)
    w = {"normal": rng.normal(0, 0.1, (128, 48)), "heavy-tailed": 0.05 * rng.standard_t(3, (128, 48)),
         "one-sided": rng.uniform(0.2, 0.9, (128, 48))}[dist]
    m = quantise_columns(w, group)
    assert m.q.shape == w.shape and m.s.shape == m.z.shape == (128 // group, 48)
    assert m.q.max() <= 15 and m.z.max() <= 15 and m.s.min() >= 1
    err = dequantise(m, group) - w
    rows = np.arange(128) // group
    step = m.s[rows] / 4096
    inside = (m.q > 0) & (m.q < 15)                      # not clipped: only rounding error
    rms, naive = float(np.sqrt(np.mean(err ** 2))), _minmax_rms(w, group)
    print(f"{dist} g{group}: rms error {rms:.2e} (min/max quantiser {naive:.2e}), "
          f"{(~inside).mean():.1%} at the end codes")
    assert rms <= naive                                    # the search never does worse than min/max
    assert np.all(np.abs(err[inside]) <= step[inside] / 2 + 1e-12)


def test_exact_grid_weights_come_back_exactly():
    m0 = generate(TINY, SEED).mat("L0.kda.q")
    w = dequantise(m0, TINY.group_of(m0.q.shape[0]))
    m = quantise_columns(w, TINY.group_of(m0.q.shape[0]))
    np.testing.assert_allclose(dequantise(m, TINY.group_of(m0.q.shape[0])), w, atol=0.5 * m0.s.max() / 4096)


def test_params_round_and_saturate():
    spec = ParamSpec("L0.res_mlp.proj", (4,), "q4_11")
    v, n = quantise_param(spec, np.array([0.5, -0.25, 100.0, 1 / 4096]))
    assert v.tolist() == [1024, -512, 32767, 0] and n == 1
    gain = ParamSpec("final_norm.w", (2,), "norm")
    v, n = quantise_param(gain, np.array([1.5, 1.0]))     # gains -> offsets v / 8192
    assert v.tolist() == [4096, 0] and n == 0
    assert param_limits(gain) == (1 - 4.0, 1 + 32767 / 8192)
    assert param_limits(ParamSpec("L0.kda.A", (1,), "uq8_8")) == (0.0, 65535 / 256)


def test_to_weights_keeps_params_and_lays_out_the_embedding_token_major():
    w0 = generate(TINY, SEED)
    emb, w, p = load_tensors(w0)
    w1, saturated = to_weights(TINY, emb, w, p)
    assert not saturated
    for name, v in w0.params.items():
        np.testing.assert_array_equal(w1.params[name], v, err_msg=name)
    e = w1.mat("emb")
    assert e.q.shape == (TINY.vocab, TINY.d_model) and e.s.shape == (TINY.vocab, TINY.n_groups(TINY.d_model))
    back = GoldenModel(w1).emb                                           # (vocab, d) via dequant_emb
    err = (back - emb).abs().max(dim=1).values / torch.from_numpy(e.s.max(axis=1) / 4096.0)
    assert float(err.max()) <= 7.5                         # within the token row's own scale (clipping included)
    rms = float(((back - emb) ** 2).mean().sqrt())
    print(f"embedding rms error {rms:.2e}")
    assert rms < 0.1 * float(emb.std())
