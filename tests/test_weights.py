"""Tests of the seeded weight/token generator (nano_k3.weights, SPEC §11)."""
from __future__ import annotations

import numpy as np
import pytest

from nano_k3.config import NANO, TINY
from nano_k3.tensors import MatSpec, ParamSpec, tensor_specs
from nano_k3.weights import base_scale, generate, generate_tokens, mat_shapes

SEED = 20260706
CONFIGS = [pytest.param(c.with_group(g), id=f"{c.name}-g{g}") for c in (NANO, TINY) for g in (64, 128)]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_shapes_and_dtypes(cfg):
    w = generate(cfg, SEED)
    for spec in tensor_specs(cfg):
        if isinstance(spec, MatSpec):
            m = w.mat(spec.name)
            q_shape, sz_shape = mat_shapes(cfg, spec)
            assert (m.q.shape, m.s.shape, m.z.shape) == (q_shape, sz_shape, sz_shape), spec.name
            assert (m.q.dtype, m.s.dtype, m.z.dtype) == (np.uint8, np.int16, np.uint8), spec.name
        else:
            assert w.param(spec.name).shape == spec.shape, spec.name
            assert w.param(spec.name).dtype == (np.uint16 if spec.fmt == "uq8_8" else np.int16), spec.name


def test_shapes_by_hand():
    # nano g64: mla.wk_c has fan_in dc = 128 -> two groups; emb is token-major (vocab, d_model).
    cfg = NANO.with_group(64)
    w = generate(cfg, 1)
    assert w.mat("L1.mla.wk_c").q.shape == (128, 64) and w.mat("L1.mla.wk_c").s.shape == (2, 64)
    assert w.mat("emb").q.shape == (512, 64) and w.mat("emb").s.shape == (512, 1)
    assert w.mat("L0.kda.b").q.shape == (64, 2)
    assert w.param("L0.kda.qconv").shape == (64, 4)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_value_ranges(cfg):
    """SPEC §11 ranges, and each range actually reached (the generator is not stuck on a subset)."""
    w = generate(cfg, SEED)
    q = np.concatenate([m.q.ravel() for m in w.mats.values()])
    z = np.concatenate([m.z.ravel() for m in w.mats.values()])
    assert (q.min(), q.max()) == (0, 15)
    assert (z.min(), z.max()) == (6, 9)
    for spec in tensor_specs(cfg):
        if isinstance(spec, MatSpec):
            s0 = base_scale(spec)
            s = w.mat(spec.name).s.astype(int)
            lo, hi = max(1, np.rint(s0 - s0 / 4)), np.rint(s0 + s0 / 4)  # rint is monotonic
            assert lo <= s.min() and s.max() <= hi, (spec.name, s.min(), s.max(), lo, hi)
    by_suffix = {"w": (-2048, 2047), "proj": (-512, 511), "bias": (-512, 511), "qconv": (-1024, 1023),
                 "kconv": (-1024, 1023), "vconv": (-1024, 1023), "dtb": (-2048, 2047), "A": (128, 1024)}
    for spec in tensor_specs(cfg):
        if isinstance(spec, ParamSpec):
            lo, hi = by_suffix[spec.name.rsplit(".", 1)[-1]]
            v = w.param(spec.name).astype(int)
            assert lo <= v.min() and v.max() <= hi, (spec.name, v.min(), v.max())


def test_base_scale_by_hand():
    # s0 = 4096 / (4.61 * sqrt(64)) = 111.06; kda.b is damped by 2^-1.5 = 0.35355 -> 39.27.
    d64 = MatSpec("L0.kda.q", 64, 64)
    assert base_scale(d64) == pytest.approx(111.063, abs=1e-3)
    assert base_scale(MatSpec("L0.kda.b", 64, 2)) == pytest.approx(39.267, abs=1e-3)
    # kda.f2 has fan_in dh = 32: 4096 / (4.61 * 5.6569) * 0.35355 = 55.53.
    assert base_scale(MatSpec("L0.kda.f2", 32, 64)) == pytest.approx(55.532, abs=1e-3)
    # emb uses fan_in = d_model.
    assert base_scale(MatSpec("emb", 64, 512, emb=True)) == base_scale(d64)
    w = generate(NANO, SEED)
    s = w.mat("L0.kda.b").s
    assert 29 <= s.min() and s.max() <= 50  # round(39.27 +- 9.82)


def test_scale_mean_tracks_s0():
    w = generate(NANO, SEED)
    s = w.mat("head").s.astype(float)  # 512 entries, uniform jitter averages out
    assert abs(s.mean() - 111.06) < 3


def test_deterministic_and_seed_sensitive():
    a, b, c = generate(NANO, 7), generate(NANO, 7), generate(NANO, 8)
    for name in a.mats:
        for part in "qsz":
            assert np.array_equal(getattr(a.mat(name), part), getattr(b.mat(name), part)), name
    for name in a.params:
        assert np.array_equal(a.param(name), b.param(name)), name
    assert not np.array_equal(a.mat("head").q, c.mat("head").q)


def test_nibbles_and_params_independent_of_group():
    a, b = generate(NANO.with_group(64), 3), generate(NANO.with_group(128), 3)
    for name in a.mats:
        assert np.array_equal(a.mat(name).q, b.mat(name).q), name
    for name in a.params:
        assert np.array_equal(a.param(name), b.param(name)), name


def test_tokens():
    t = generate_tokens(NANO, SEED, 64)
    assert t.shape == (64,) and t.dtype == np.uint32 and t.max() < NANO.vocab
    assert np.array_equal(t, generate_tokens(NANO, SEED, 64))
    assert len(set(generate_tokens(NANO, 1, 64).tolist())) > 40  # uniform over 512 ids
    assert generate_tokens(TINY, 0, 1).shape == (1,)


@pytest.mark.parametrize("bad", [0, -1, 65, 8.5])
def test_tokens_reject_bad_seq_len(bad):
    with pytest.raises(ValueError, match=rf"seq_len must be an integer in 1\.\.64.*got {bad}"):
        generate_tokens(NANO, 1, bad)


def test_reject_bad_seed():
    with pytest.raises(ValueError, match="seed must be a non-negative integer, got -3"):
        generate(NANO, -3)
