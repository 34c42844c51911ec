"""Tests of the float32 golden model (nano_k3/golden.py) and the §7 metrics (nano_k3/metrics.py).

The building blocks are checked against deliberately naive loop-over-elements references
(``ref_*``), the whole model against the §6.2 wiring read back from its own trace.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest
import torch

from nano_k3.config import NANO, ROUTER_SCALE, TINY, ModelConfig
from nano_k3.golden import (GoldenModel, dequant_emb, dequant_mat, kda_recurrence, l2_norm, mix_plan,
                            mla_attend, residual_mix, rms_norm, router_select, trace_keys)
from nano_k3.int4 import dequant_matvec
from nano_k3.metrics import argmax_agreement, pick_correct, row_cosines
from nano_k3.weights import generate, generate_tokens

SEED = 20260706
CONFIG_IDS = ["tiny", "nano-g128", "nano-g64"]


def _cfg(config_id: str) -> ModelConfig:
    return {"tiny": TINY, "nano-g128": NANO, "nano-g64": NANO.with_group(64)}[config_id]


_MODELS: dict[str, GoldenModel] = {}


def _model(config_id: str) -> GoldenModel:
    if config_id not in _MODELS:
        print(f"weights: generate({config_id}, seed={SEED})")
        _MODELS[config_id] = GoldenModel(generate(_cfg(config_id), SEED))
    return _MODELS[config_id]


def _run(config_id: str, n: int) -> tuple[torch.Tensor, list[dict], np.ndarray]:
    m = _model(config_id)
    tokens = generate_tokens(m.cfg, SEED, n)
    traces: list[dict] = []
    return m.forward_sequence(tokens, traces), traces, tokens


# Naive references -------------------------------------------------------------------------------
def ref_kda_head(S, q, k, v, beta, alpha):
    """One head, one position of §6.3 step 6 with Python loops in float64; S is a list of rows."""
    dh = len(q)
    qn = math.sqrt(sum(x * x for x in q) + 1e-6)
    kn = math.sqrt(sum(x * x for x in k) + 1e-6)
    qh, kh = [x / qn for x in q], [x / kn for x in k]
    S = [[S[i][j] * alpha[i] for j in range(dh)] for i in range(dh)]
    u = [v[j] - sum(kh[i] * S[i][j] for i in range(dh)) for j in range(dh)]
    S = [[S[i][j] + beta * kh[i] * u[j] for j in range(dh)] for i in range(dh)]
    o = [sum(qh[i] * S[i][j] for i in range(dh)) / math.sqrt(dh) for j in range(dh)]
    return S, o


def ref_attend_head(q, keys, values):
    """One head of §6.4 step 5 with loops: q (dq,), keys (T, dq), values (T, dv)."""
    scores = [sum(a * b for a, b in zip(q, k)) / math.sqrt(len(q)) for k in keys]
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    probs = [x / sum(e) for x in e]
    ctx = [sum(p * v[j] for p, v in zip(probs, values)) for j in range(len(values[0]))]
    return ctx, scores, probs


# Building blocks --------------------------------------------------------------------------------
def test_kda_recurrence_matches_naive_loops():
    rng = np.random.default_rng(SEED)
    print(f"seed {SEED}")
    H, dh = 2, 5
    S = torch.zeros(H, dh, dh)
    S_ref = [[[0.0] * dh for _ in range(dh)] for _ in range(H)]
    for _step in range(4):  # several positions, so the decay acts on a non-zero state
        q, k, v = (rng.normal(size=(H, dh)) for _ in range(3))
        beta = rng.uniform(0.05, 0.95, H)
        alpha = np.exp(-5 * rng.uniform(0, 1, (H, dh)))
        t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
        S, o = kda_recurrence(S, l2_norm(t(q)), l2_norm(t(k)), t(v), t(beta), t(alpha))
        for h in range(H):
            S_ref[h], o_ref = ref_kda_head(S_ref[h], q[h], k[h], v[h], beta[h], alpha[h])
            np.testing.assert_allclose(o[h].numpy(), o_ref, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(S[h].numpy(), S_ref[h], rtol=1e-5, atol=1e-6)


def test_kda_hand_built_state():
    """A one-hot key into a zero state: S = beta * e_i v^T, read-out with q = k gives beta v / sqrt(dh)."""
    dh = 4
    k = torch.tensor([[0.0, 2.0, 0.0, 0.0]])                        # (1, dh), k_hat ~ e_1
    v = torch.tensor([[1.0, -2.0, 3.0, 0.5]])                       # (1, dh)
    S, o = kda_recurrence(torch.zeros(1, dh, dh), l2_norm(k), l2_norm(k), v, torch.tensor([0.5]),
                          torch.full((1, dh), 0.3))
    khat = 2.0 / math.sqrt(4.0 + 1e-6)
    np.testing.assert_allclose(S[0, 1].numpy(), 0.5 * khat * v[0].numpy(), rtol=1e-6)
    assert torch.count_nonzero(S[0, [0, 2, 3]]) == 0
    np.testing.assert_allclose(o[0].numpy(), 0.5 * khat ** 2 * v[0].numpy() / 2.0, rtol=1e-6)


def test_mla_attend_matches_naive_loops():
    rng = np.random.default_rng(SEED + 1)
    H, T, dq, dv = 2, 3, 6, 4
    q, keys, values = rng.normal(size=(H, dq)), rng.normal(size=(T, H, dq)), rng.normal(size=(T, H, dv))
    ctx, scores, probs = mla_attend(*(torch.tensor(a, dtype=torch.float32) for a in (q, keys, values)))
    for h in range(H):
        c_ref, s_ref, p_ref = ref_attend_head(q[h], keys[:, h], values[:, h])
        np.testing.assert_allclose(scores[h].numpy(), s_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(probs[h].numpy(), p_ref, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(ctx[h].numpy(), c_ref, rtol=1e-5, atol=1e-6)


def test_mla_softmax_survives_large_scores():
    q = torch.tensor([[400.0, 0.0]])                                 # (1, 2) scores ~ 283: exp overflows
    keys = torch.tensor([[[1.0, 0.0]], [[0.999, 0.0]]])              # (2, 1, 2)
    ctx, _, probs = mla_attend(q, keys, torch.tensor([[[1.0]], [[3.0]]]))
    assert torch.isfinite(ctx).all() and torch.isclose(probs.sum(), torch.tensor(1.0))


@pytest.mark.parametrize("scores, bias, k, expected", [
    ([0.5, 0.5, 0.5, 0.5], [0, 0, 0, 0], 2, [0, 1]),
    ([0.25, 0.75, 0.75, 0.875], [0, 0, 0, 0], 2, [3, 1]),
    ([0.875, 0.125, 0.125, 0.125], [-1, 0, 0, 0], 1, [1]),         # bias decides, then the tie
    ([0.25, 0.5, 0.75, 0.5], [0.5, 0.25, -0.5, 0], 2, [0, 1]),     # highest raw score not picked
], ids=["all-equal", "tie-in-second", "bias-then-tie", "bias-reorders"])
def test_router_select_tie_break(scores, bias, k, expected):
    t = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    assert router_select(t(scores), t(bias), k).tolist() == expected


def test_mix_of_identical_candidates_is_that_candidate():
    v = torch.linspace(-2.0, 3.0, 64)                               # (64,)
    gain, proj = torch.full((64,), 1.25), torch.linspace(-0.25, 0.25, 64)
    for n in (1, 2, 3):
        x, probs = residual_mix(torch.stack([v] * n), gain, proj)
        torch.testing.assert_close(x, v, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(probs, torch.full((n,), 1.0 / n))


def test_mix_weights_the_unnormalised_candidates():
    """Same direction, different size: the eps inside RN makes the scores differ by ~2e-5 only."""
    a, b = torch.ones(8), 10.0 * torch.ones(8)
    x, probs = residual_mix(torch.stack([a, b]), torch.ones(8), torch.full((8,), 0.5))
    sa, sb = 4.0 / math.sqrt(1.0 + 1e-5), 40.0 / math.sqrt(100.0 + 1e-5)
    pa = 1.0 / (1.0 + math.exp(sb - sa))
    torch.testing.assert_close(probs, torch.tensor([pa, 1.0 - pa]))
    torch.testing.assert_close(x, (pa + 10.0 * (1.0 - pa)) * torch.ones(8))


def test_rms_norm_formula():
    x, w = torch.tensor([3.0, -4.0]), torch.tensor([1.5, 0.5])
    expect = x / math.sqrt((9 + 16) / 2 + 1e-5) * w
    torch.testing.assert_close(rms_norm(x, w), expect)


# Dequantisation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("config_id", ["nano-g128", "nano-g64"])
def test_dequant_matches_exact_integer_matvec(config_id):
    cfg = _cfg(config_id)
    w = generate(cfg, SEED)
    x = np.random.default_rng(SEED).integers(-100, 100, cfg.mla_dc)
    for name in ("L1.mla.wk_c", "L1.mla.wv", "L0.kda.b", "head"):
        m = w.mat(name)
        fan_in = m.q.shape[0]
        g = cfg.group_of(fan_in)
        exact = dequant_matvec(x[:fan_in], m.q, m.s, m.z, g)          # int64, 12 fractional bits
        got = x[:fan_in].astype(np.float64) @ dequant_mat(m, g).numpy().astype(np.float64)
        np.testing.assert_array_equal(got * 4096, exact, err_msg=f"{config_id} {name}")


def test_dequant_embedding_is_token_major():
    cfg = dataclasses.replace(TINY, d_model=128)                    # group 64: two groups per token row
    m = generate(cfg, SEED).mat("emb")
    g = cfg.group_of(cfg.d_model)
    E = dequant_emb(m, g).numpy()
    for t in (0, 7, cfg.vocab - 1):
        for k in (0, 1, 63, 64, 127):
            ref = (int(m.q[t, k]) - int(m.z[t, k // g])) * int(m.s[t, k // g]) / 4096
            assert E[t, k] == np.float32(ref), (t, k)


# Whole model ------------------------------------------------------------------------------------
def test_mix_plan_reproduces_the_nano_paragraph():
    assert mix_plan(NANO) == [(True, False), (False, True)]          # L0 skips its pre-mixer mix
    assert mix_plan(TINY) == [(True, False), (True, True)]           # res_block 1: every layer a boundary
    deep = dataclasses.replace(NANO, n_layers=5, layer_pattern="LFLFL", res_block=2)
    assert mix_plan(deep) == [(True, False), (False, True), (True, True), (False, True), (True, True)]


@pytest.mark.parametrize("config_id", CONFIG_IDS)
def test_step_equals_forward_sequence(config_id):
    logits, _, tokens = _run(config_id, 10)
    m = _model(config_id)
    m.reset()
    stepped = torch.stack([m.step(int(t)) for t in tokens])
    assert torch.equal(stepped, logits)
    assert torch.equal(m.forward_sequence(tokens), logits)            # reset really resets


@pytest.mark.parametrize("config_id", CONFIG_IDS)
def test_logits_finite_and_trace_keys(config_id):
    logits, traces, _ = _run(config_id, 5)
    cfg = _model(config_id).cfg
    assert logits.shape == (5, cfg.vocab) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all() and (logits.std(dim=1) > 0).all()
    for t, tr in enumerate(traces):
        assert sorted(tr) == sorted(trace_keys(cfg)), f"position {t}"
        assert torch.equal(tr["logits"], logits[t])
        assert tr[f"L{cfg.layer_kinds.index('mla')}.mla.scores"].shape == (cfg.mla_heads, t + 1)


def test_nano_wiring_from_trace():
    """§6.2 'Concretely for nano', checked on traced values."""
    _, traces, _ = _run("nano-g128", 4)
    m = _model("nano-g128")
    P = m.p
    for tr in traces:
        emb = tr["emb"]
        assert "L0.res_attn.probs" not in tr                           # history empty at layer 0
        torch.testing.assert_close(tr["L0.p"], tr["L0.kda.o"])          # residual restarts from a0
        for key in ("L0.res_mlp", "L1.res_attn", "L1.res_mlp", "final"):
            assert tr[key + ".probs"].shape == (2,)                    # 4 mixes of 2 candidates
        res_attn, _ = residual_mix(torch.stack([emb, tr["L0.out"]]), P["L1.res_attn.norm.w"], P["L1.res_attn.proj"])
        torch.testing.assert_close(tr["L1.res_attn.x"], res_attn)
        torch.testing.assert_close(tr["L1.p"], tr["L0.out"] + tr["L1.mla.o"])  # from the pre-mix value
        torch.testing.assert_close(tr["L0.out"], tr["L0.p"] + tr["L0.moe.out"])
        fx, _ = residual_mix(torch.stack([emb, tr["L1.out"]]), P["res_out.norm.w"], P["res_out.proj"])
        torch.testing.assert_close(tr["final.x"], fx)


def test_kda_conv_and_gates_from_trace():
    """Conv (tap 3 on the current input, zero history), beta and alpha recomputed by loops from the trace."""
    _, traces, _ = _run("nano-g128", 6)
    m, cfg = _model("nano-g128"), NANO
    K, H, dh = cfg.conv_k, cfg.kda_heads, cfg.kda_dh
    taps = m.p["L0.kda.qconv"].numpy().astype(np.float64)             # (P, K)
    A, dtb = m.p["L0.kda.A"].numpy(), m.p["L0.kda.dtb"].numpy()
    for t, tr in enumerate(traces):
        for ch in (0, 17, cfg.kda_width - 1):
            acc = 0.0
            for j in range(K):
                src = t - (K - 1 - j)                                  # tap K-1 sees position t
                acc += taps[ch, j] * (float(traces[src]["L0.kda.q_pre"][ch]) if src >= 0 else 0.0)
            assert abs(float(tr["L0.kda.q"][ch]) - acc / (1 + math.exp(-acc))) < 1e-5, (t, ch)
        for h in range(H):
            for i in (0, dh - 1):
                f = float(tr["L0.kda.f"][h, i])
                ref = math.exp(-5 / (1 + math.exp(-A[h] * (f + dtb[h * dh + i]))))
                assert abs(float(tr["L0.kda.alpha"][h, i]) - ref) < 1e-6
        assert ((tr["L0.kda.beta"] > 0) & (tr["L0.kda.beta"] < 1)).all()


def test_mla_cache_from_trace():
    """Scores at position t are q_t . k_s / sqrt(dk + dr) over s = 0..t (cache appended before attending)."""
    _, traces, _ = _run("nano-g128", 5)
    dq = NANO.mla_dk + NANO.mla_dr
    t = len(traces) - 1
    q = traces[t]["L1.mla.q"].double()                                # (H, dq)
    for s in range(t + 1):
        k = traces[s]["L1.mla.k"].double()                            # (H, dq)
        ref = (q * k).sum(-1) / math.sqrt(dq)                         # (H,)
        np.testing.assert_allclose(traces[t]["L1.mla.scores"][:, s].numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    k = traces[0]["L1.mla.k"]
    torch.testing.assert_close(k[0, NANO.mla_dk:], k[1, NANO.mla_dk:])   # kr shared by heads


def test_moe_weights_from_trace():
    _, traces, _ = _run("nano-g128", 4)
    bias = _model("nano-g128").p["L0.moe.bias"]
    for tr in traces:
        sc, top, wt = tr["L0.moe.scores"], tr["L0.moe.topk"], tr["L0.moe.weights"]
        assert top.tolist() == router_select(sc, bias, NANO.top_k).tolist() and len(set(top.tolist())) == 2
        torch.testing.assert_close(wt, sc[top] / sc[top].sum() * ROUTER_SCALE)


def test_general_stack_runs():
    cfg = dataclasses.replace(TINY, n_layers=5, layer_pattern="LFFLF", res_block=2, max_seq=4)
    m = GoldenModel(generate(cfg, SEED))
    traces: list[dict] = []
    logits = m.forward_sequence([1, 2, 3], traces)
    assert torch.isfinite(logits).all() and sorted(traces[-1]) == sorted(trace_keys(cfg))
    assert traces[-1]["final.probs"].shape == (4,)                    # B = 3 snapshots + x


def test_bad_inputs_are_rejected():
    m = _model("tiny")
    m.reset()
    with pytest.raises(ValueError, match="vocabulary"):
        m.step(TINY.vocab)
    for t in range(TINY.max_seq):
        m.step(t % TINY.vocab)
    with pytest.raises(ValueError, match="max_seq"):
        m.step(0)


def test_nano_64_positions_runtime():
    torch.set_num_threads(1)
    m = _model("nano-g128")
    tokens = generate_tokens(NANO, SEED, 64)
    t0 = time.perf_counter()
    logits = m.forward_sequence(tokens)
    dt = time.perf_counter() - t0
    print(f"golden nano: 64 positions in {dt:.3f} s ({dt / 64 * 1e3:.2f} ms/position, 1 thread)")
    assert logits.shape == (64, NANO.vocab) and torch.isfinite(logits).all()


# Metrics ----------------------------------------------------------------------------------------
def test_row_cosines():
    rng = np.random.default_rng(SEED)
    ref = rng.normal(size=(4, 512))
    chip = np.stack([ref[0] * 3.0e6, -ref[1], np.zeros(512), ref[3] + 1e-3 * rng.normal(size=512)])
    cos = row_cosines(chip, ref)
    assert cos.dtype == np.float64 and cos.shape == (4,)
    np.testing.assert_allclose(cos[:2], [1.0, -1.0], atol=1e-12)
    assert cos[2] == 0.0 and 0.99999 < cos[3] < 1.0
    assert row_cosines(ref[0], ref[0]).shape == (1,)
    with pytest.raises(ValueError, match="shape mismatch"):
        row_cosines(ref, ref[:, :5])


def test_row_cosines_of_int32_rows():
    ref = np.array([[0.1, 0.2, -0.3]], dtype=np.float32)
    chip = np.array([[100000, 200000, -300000]], dtype=np.int32)
    assert abs(row_cosines(chip, ref)[0] - 1.0) < 1e-12


def test_argmax_agreement():
    ref = np.array([[0.0, 1.0, 2.0, 2.0], [5.0, 4.999, 0.0, 0.0], [0.0, 0.0, 1.0, 3.0]])
    assert argmax_agreement(ref, ref) == 1.0
    # row 1: chip picks index 1, within 0.01 std of the max -> correct; row 2: picks index 2 -> wrong
    chip = np.array([[0, 0, 0, 9], [0, 1, 0, 0], [0, 0, 1, 0]])
    assert pick_correct(np.argmax(chip, axis=1), ref).tolist() == [True, True, False]
    assert argmax_agreement(chip, ref) == pytest.approx(2 / 3)
    std = ref[1].std()
    assert 5.0 - 4.999 <= 0.01 * std                                   # the case above is the tolerance one
    assert pick_correct([0, 0, 0], np.zeros((3, 4))).all()             # flat reference: anything goes
    with pytest.raises(ValueError):
        pick_correct([4], ref[:1])
