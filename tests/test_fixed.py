"""Fixed-point model: every primitive against hand-computed values, then the model vs the golden.

How long the model takes is a benchmark, not a test (``python -m verification.bench``: bench.json's
``timings``)."""
import numpy as np
import pytest

from nano_k3.config import NANO, TINY
from nano_k3.fixed import (ROUTER_SCALE_Q24, FixedModel, argmax, expert_hidden, kda_alpha, kda_conv,
                           kda_state_update, gated_norm, logits_out, mla_attention, moe_combine, residual_mix,
                           router_select, router_weights)
from nano_k3.fxp_math import (LOG2E_Q24, apply_mant, apply_mant_int, exp2_neg, l2norm, rmsnorm, sigmoid, silu,
                              softmax_combine, softmax_exp, to_log2)
from nano_k3.fxp_ops import (ALPHA, MAC_FRAC_MAX, SQ_FRAC, UNIT, A, P, S, T, X, bit_length, mac_input, matvec,
                             round_shift, saturate, wide_dot)
from nano_k3.golden import GoldenModel
from nano_k3.metrics import argmax_agreement, row_cosines
from nano_k3.weights import generate, generate_tokens

ONE_X, ONE_P, ONE_S = 1 << X.frac, 1 << P.frac, 1 << S.frac
MAX_ONE_MINUS_COS = 2e-5  # the project's precision target (README, "Where the chip stands"), never loosened


def a(*v):
    return np.array(v, dtype=np.int64)


# --- rounding, saturation, normalisation ----------------------------------------------------
def test_round_shift_is_round_half_up():
    assert round_shift(a(5, -5, 7, 6, -6, -7, 4), 1).tolist() == [3, -2, 4, 3, -3, -3, 2]
    assert round_shift(a(6, -6, 5, -5), 2).tolist() == [2, -1, 1, -1]       # 1.5 -> 2, -1.5 -> -1
    assert round_shift(a(3, -3), 0).tolist() == [3, -3]
    assert round_shift(a(3, -3), -2).tolist() == [12, -12]
    assert round_shift(a(6, 6, 6), a(2, 0, -1)).tolist() == [2, 6, 12]      # per-element shifts


def test_saturate_and_fit():
    assert saturate(a(40000, -40000, 5), 16).tolist() == [32767, -32768, 5]
    assert X.fit(a(1 << 40, -(1 << 40)), 16).tolist() == [X.hi, X.lo]
    assert X.fit(a(3), X.frac + 1).tolist() == [2]                           # 1.5 LSB -> 2


def test_elements_of_a_packed_word():
    vals = [X.lo, -1, 5, X.hi]
    word = sum((v & ((1 << X.bits) - 1)) << (X.bits * j) for j, v in enumerate(vals))
    assert [X.element(word, j) for j in range(4)] == vals
    assert [P.element((P.hi << P.bits) | 3, j) for j in range(2)] == [3, P.hi]      # unsigned stays positive


def test_apply_mant_int_rounds_as_apply_mant():
    rng = np.random.default_rng(3)
    for v, m, e in zip(rng.integers(-2**36, 2**36, 50), rng.integers(1 << 23, 1 << 24, 50), rng.integers(-8, 8, 50)):
        want = int(apply_mant(a(int(v)), 30, int(m), int(e), X.frac)[0])
        assert apply_mant_int(int(v), 30, int(m), int(e), X.frac) == want
    assert apply_mant_int(1 << 70, 40, 1 << 23, 0, 24) == 1 << 54                  # beyond int64


def test_bit_length():
    assert bit_length(a(0, 1, 2, 255, 256, 2**62)).tolist() == [0, 1, 2, 8, 9, 63]
    with pytest.raises(ValueError):
        bit_length(a(-1))


def test_mac_input_block_floating_point():
    assert A.bits == 20 and MAC_FRAC_MAX == 42
    m, f = mac_input(a(1 << 24, -(1 << 23)), 24)      # 1.0, -0.5 in X: top mantissa bit is 2^18
    assert m.tolist() == [1 << 18, -(1 << 17)] and f == 18
    m, f = mac_input(a((1 << 20) - 1), 0)             # rounds up to 2^19: saturates
    assert m.tolist() == [A.hi] and f == -1
    m, f = mac_input(a(0, 0), 24)                     # zero vector: largest exponent
    assert m.tolist() == [0, 0] and f == MAC_FRAC_MAX
    m, f = mac_input(a(3, -1), 24)                    # small values: exact left shift
    assert m.tolist() == [3 << 17, -(1 << 17)] and f == 41
    m, f = mac_input(a(1), 30)                        # exponent capped at MAC_FRAC_MAX
    assert m.tolist() == [1 << 12] and f == MAC_FRAC_MAX
    m, f = mac_input(a((1 << 25) + 64, -100), 24)     # rounding half up below the 20-bit mantissa
    assert m.tolist() == [(1 << 18) + 1, -1] and f == 17


def test_wide_dot_is_exact_beyond_int64():
    rng = np.random.default_rng(5)
    q = rng.integers(X.lo, X.hi, (3, 64))               # full-range 32-bit operands: 70-bit sums
    k = rng.integers(X.lo, X.hi, (5, 3, 64))
    got = wide_dot("hd,thd->ht", q, k, X.frac)
    exact = [[(sum(int(x) * int(y) for x, y in zip(q[h], k[t, h])) + (1 << (X.frac - 1))) >> X.frac
              for t in range(5)] for h in range(3)]
    assert got.tolist() == exact
    for sh in (-2, 0, 1, 15, 16, 17, 40):                                # both combining paths
        got = wide_dot("hd,thd->ht", q >> 20, k, sh)
        sums = [[sum(int(x >> 20) * int(y) for x, y in zip(q[h], k[t, h])) for t in range(5)] for h in range(3)]
        want = [[(v + (1 << (sh - 1))) >> sh if sh > 0 else v << -sh for v in row] for row in sums]
        assert got.tolist() == want, sh
    assert wide_dot("i,i->", a(3), a(5), 1).tolist() == 8              # 7.5 -> 8
    assert wide_dot("i,i->", a(-3), a(5), 1).tolist() == -7            # -7.5 -> -7 (half up)


def test_matvec_matches_float_dequant():
    rng = np.random.default_rng(1)
    q = rng.integers(0, 16, (128, 5))
    s = rng.integers(100, 400, (2, 5))
    z = rng.integers(6, 10, (2, 5))
    x = rng.integers(-30000, 30000, 128)
    y = matvec(x, 13, q, s, z, 64)
    w = (q - np.repeat(z, 64, 0)) * np.repeat(s, 64, 0) / 4096
    assert np.abs(y / ONE_X - (x / 8192) @ w).max() <= 0.5 / ONE_X + 1e-12   # one rounding only
    with pytest.raises(ValueError):
        matvec(a(A.hi + 1), 0, q[:1], s[:1], z[:1], 1)


# --- norms -----------------------------------------------------------------------------------
def test_rmsnorm_hand_values_and_zero_vector():
    y = rmsnorm(a(3, 4, 0, 0) * ONE_X, X.frac, a(0, 0, 0, 0))        # rms = 2.5 (eps 1e-5 shifts 1.6e-6)
    want = np.array([3, 4, 0, 0]) / np.sqrt(6.25 + 1e-5)
    assert np.abs(y / ONE_X - want).max() <= 2e-6                    # rsqrt table 7.8e-7, relative
    y = rmsnorm(a(3, 4, 0, 0) * ONE_X, X.frac, a(4096, 0, 0, 0))     # gain 1.5 on element 0
    assert abs(y[0] / ONE_X - 1.5 * want[0]) <= 2e-6
    assert rmsnorm(a(0, 0, 0, 0), X.frac, a(0, 0, 0, 0)).tolist() == [0, 0, 0, 0]
    y = rmsnorm(a(3, 4, 0, 0) * ONE_S, S.frac, a(0, 0, 0, 0))        # S input (gated norm), same result
    assert np.abs(y / ONE_X - want).max() <= 2e-6
    with pytest.raises(ValueError, match="power of two"):
        rmsnorm(a(1, 2, 3), X.frac, a(0, 0, 0))


def test_norms_of_full_range_vectors_do_not_wrap():
    big = np.full(64, X.hi, np.int64)                                 # sum of squares needs 68 bits
    y = rmsnorm(big, X.frac, np.zeros(64, np.int64))
    assert np.abs(y / ONE_X - 1).max() <= 2e-6
    u = l2norm(big, X.frac)
    assert np.abs(u / (1 << UNIT.frac) - 1 / 8).max() <= 2e-6
    assert SQ_FRAC == 32


def test_l2norm_hand_values_and_zero_vector():
    y = l2norm(a(3, 4) * ONE_X, X.frac)
    assert np.abs(y - np.array([0.6, 0.8]) * (1 << UNIT.frac)).max() <= 8
    assert l2norm(a(0, 0), X.frac).tolist() == [0, 0]
    y = l2norm(a(5 * ONE_X, 0), X.frac)                                   # 1 within the rsqrt error
    assert y[1] == 0 and 0 <= UNIT.hi - y[0] <= 1e-6 * (1 << UNIT.frac)
    rng = np.random.default_rng(2)
    v = rng.integers(4 * ONE_X, 100 * ONE_X, (200, 1)) * rng.choice([-1, 1], (200, 1))
    u = l2norm(v, X.frac)                                                 # one-element vectors: +-1
    assert u.max() <= UNIT.hi and u.min() >= UNIT.lo
    assert np.abs(np.abs(u) - (1 << UNIT.frac)).max() <= 1e-6 * (1 << UNIT.frac)


# --- nonlinearities --------------------------------------------------------------------------
def test_sigmoid_exact_points_and_symmetry():
    assert sigmoid(a(0)).tolist() == [ONE_P // 2]
    assert sigmoid(a(100 * ONE_X, -100 * ONE_X)).tolist() == [ONE_P, 0]
    x = np.arange(-20 * ONE_X, 20 * ONE_X, 4099, dtype=np.int64)
    assert (sigmoid(x) + sigmoid(-x) == ONE_P).all()
    assert (np.diff(sigmoid(x)) >= 0).all()


def test_silu():
    assert silu(a(0, 100 * ONE_X, -100 * ONE_X)).tolist() == [0, 100 * ONE_X, 0]
    assert abs(silu(a(ONE_X))[0] / ONE_X - 1 / (1 + np.exp(-1))) <= 1.6e-6   # sigmoid table 1.5e-6


def test_exp2_and_softmax():
    one_t = 1 << T.frac
    assert exp2_neg(a(0, one_t, 2 * one_t, 64 * one_t)).tolist() == [ONE_P, ONE_P // 2, ONE_P // 4, 0]
    with pytest.raises(ValueError):
        exp2_neg(a(-1))
    e = softmax_exp(a(5 * one_t, 5 * one_t))                     # equal scores
    assert e.tolist() == [ONE_P, ONE_P]
    out = softmax_combine(e, a([2, 4], [4, 8]) * ONE_X, X.frac)  # average of the two rows
    assert np.abs(out - a(3, 6) * ONE_X).max() <= 1
    assert to_log2(a(ONE_X), X.frac).tolist() == [LOG2E_Q24]      # log2(e) in T (24 fractional bits)
    assert to_log2(a(X.hi), X.frac).tolist() == [T.hi]            # saturates


# --- KDA -------------------------------------------------------------------------------------
def test_kda_conv_hand_value():
    window = np.ones((4, 2), np.int64) * ONE_X                # K=4 taps, P=2 channels, all 1.0
    taps = a([1024, 1024, 1024, 1024], [0, 0, 0, -2048])      # ch0: 4 x 0.5 = 2, ch1: -1
    y = kda_conv(window, taps)
    want = np.array([2 / (1 + np.exp(-2)), -1 / (1 + np.exp(1))]) * ONE_X
    assert np.abs(y - want).max() <= 3.1e-6 * ONE_X              # sigmoid table 1.5e-6 times |x| <= 2


def test_kda_decay_range():
    alpha = kda_alpha(np.zeros((1, 3), np.int64), a(256), a([0, 2048 * 8, -2048 * 8]))
    want = np.exp(-5 / (1 + np.exp(-np.array([0.0, 8, -8]))))
    assert np.abs(alpha / (1 << ALPHA.frac) - want).max() <= 1.1e-5          # decay table 1.0e-5


def test_kda_state_update_delta_rule_by_hand():
    H, dh = 1, 4
    S0 = np.zeros((H, dh, dh), np.int64)
    e0 = np.zeros((H, dh), np.int64)
    e0[0, 0] = UNIT.hi                                         # unit vector, saturated just below 1
    v = np.array([[1, -2, 3, 0]], np.int64) * ONE_X
    S1, read = kda_state_update(S0, e0, e0, v, a(ONE_P), np.full((H, dh), ALPHA.hi))
    assert np.abs(S1[0, 0] / ONE_S - [1, -2, 3, 0]).max() < 1e-6 and not S1[0, 1:].any()
    assert np.abs(read[0] / ONE_S - [1, -2, 3, 0]).max() < 1e-6
    # Same key again with beta = 1: the error u is ~0, so the state stays put.
    S2, _ = kda_state_update(S1, e0, e0, v, a(ONE_P), np.full((H, dh), ALPHA.hi))
    assert np.abs(S2 - S1).max() <= 2e-6 * ONE_S


def test_gated_norm_zero_read_is_zero():
    assert not gated_norm(np.zeros((2, 4), np.int64), np.zeros((2, 4), np.int64), a(0, 0, 0, 0)).any()


# --- MLA, mixing, MoE ------------------------------------------------------------------------
def test_mla_single_position_context_is_value():
    rng = np.random.default_rng(3)
    q = rng.integers(-ONE_X, ONE_X, (2, 6))
    k = rng.integers(-ONE_X, ONE_X, (1, 2, 6))
    v = rng.integers(-ONE_X, ONE_X, (1, 2, 4))
    ctx, _, e = mla_attention(q, k, v, 1 << 24)
    assert e.tolist() == [[ONE_P], [ONE_P]]
    assert np.abs(ctx - v[0]).max() <= 1


def test_residual_mix_identical_candidates():
    c = np.tile(np.arange(-32, 32, dtype=np.int64) * 1000, (2, 1))
    x, e = residual_mix(c, np.zeros(64, np.int64), np.full(64, 100, np.int64))
    assert e[0] == e[1] and np.abs(x - c[0]).max() <= 1


@pytest.mark.parametrize("scale", [2.0**-8, 1.0, 60.0])
def test_residual_mix_probabilities_match_float(scale):
    """The mix's score is RMSNorm's scale times the exact dot of c with (1 + w)·proj (one rounding): its
    softmax is float64's softmax of dot(RN(c, w), proj) to about one P LSB (measured 1.6e-7), for small, unit
    and large candidates."""
    rng = np.random.default_rng(int(scale * 256))
    c = np.round(rng.normal(0, scale, (3, 64)) * (1 << X.frac)).astype(np.int64)
    w, proj = rng.integers(-3000, 3000, 64), rng.integers(-300, 300, 64)     # scores of order 1
    _, e = residual_mix(c, w, proj)
    v = c / 2.0**X.frac
    r = v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5) * (1 + w / 8192)
    s = r @ (proj / 2.0**11)
    p_ref = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    assert p_ref.min() > 0.05                                               # no candidate saturates
    assert np.abs(e / e.sum() - p_ref).max() < 1e-6, (e / e.sum(), p_ref)   # a score off by 2^-10: 1e-4


def test_router_ties_prefer_lower_index():
    scores = a(100, 300, 300, 200, 300)
    assert router_select(scores, a(0, 0, 0, 0, 0), 2).tolist() == [1, 2]
    assert router_select(scores, a(0, 0, 0, 1, 0), 2).tolist() == [3, 1]     # bias 1/2048 wins
    w = router_weights(a(ONE_P // 2, ONE_P // 2))
    half = round(ROUTER_SCALE_Q24 / 8)                                       # 2.828 / 2 in UQ2.22
    assert w.tolist() == [half, half] and abs(half / 2**22 - 1.414) < 1e-7


def test_expert_hidden_and_moe_combine():
    assert expert_hidden(a(0, 100 * ONE_X), a(5 * ONE_X, 2 * ONE_X)).tolist() == [0, X.hi]   # 200 saturates
    out = moe_combine(a(ONE_X), a([2 * ONE_X]), a(1 << 21))                  # 1 + 0.5 * 2 (RW UQ2.22)
    assert out.tolist() == [2 * ONE_X]


def test_logits_and_argmax():
    assert logits_out(a(3 << 6, 1 << 50), 23).tolist() == [2, 2**31 - 1]   # 1.5 LSB -> 2; saturate
    assert argmax(a(5, 9, 9, 1)) == 1


# --- the model -------------------------------------------------------------------------------
CASES = [(cfg, g, seed) for cfg in (TINY, NANO) for g in (64, 128) for seed in (0, 1)]


@pytest.mark.parametrize("cfg,group,seed", CASES, ids=[f"{c.name}-g{g}-s{s}" for c, g, s in CASES])
def test_precision_vs_golden(cfg, group, seed):
    cfg = cfg.with_group(group)
    w = generate(cfg, seed)
    tokens = generate_tokens(cfg, seed, 16)
    ref = GoldenModel(w).forward_sequence(tokens).numpy()
    chip, picks = FixedModel(w).forward_sequence(tokens)
    assert chip.dtype == np.int32 and chip.shape == (16, cfg.vocab)
    assert (picks == np.argmax(chip, axis=1)).all()
    omc = 1 - row_cosines(chip, ref)
    worst = int(np.argmax(omc))
    assert omc.max() <= MAX_ONE_MINUS_COS, f"seed {seed}: position {worst} has 1-cos {omc[worst]:.3e}"
    assert argmax_agreement(chip, ref) == 1.0


def test_deterministic_and_reset():
    w = generate(NANO, 7)
    tokens = generate_tokens(NANO, 7, 12)
    m = FixedModel(w)
    a1, p1 = m.forward_sequence(tokens)
    a2, p2 = m.forward_sequence(tokens)
    a3, _ = FixedModel(generate(NANO, 7)).forward_sequence(tokens)
    assert (a1 == a2).all() and (p1 == p2).all() and (a1 == a3).all()


def test_step_rejects_bad_token_and_overflow():
    m = FixedModel(generate(TINY, 0))
    with pytest.raises(ValueError):
        m.step(TINY.vocab)
    for _ in range(TINY.max_seq):
        m.step(0)
    with pytest.raises(ValueError):
        m.step(0)


def test_router_weights_zero_sum_gives_zero_weights():
    from nano_k3.fixed import router_weights
    assert router_weights(np.zeros(2, dtype=np.int64)).tolist() == [0, 0]
