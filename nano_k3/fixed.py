"""The fixed-point model: the chip's arithmetic, bit for bit, structured like SPEC_NANO_KPU.md §6.

Integers only (int64 numpy arrays holding the formats of ``fxp_ops``; docs/fixed_point.md is the
format table). Every block the chip implements is a small pure function below (``kda_conv``,
``kda_state_update``, ``mla_attention``, ``router_select``, ...) built from the primitives of
``fxp_ops`` (rounding, saturation, the MAC array) and ``fxp_math`` (LUT nonlinearities, norms);
hardware block tests call them as their reference. ``FixedModel`` strings them together exactly
like ``golden.GoldenModel``.

Logits: int32, real logit x 2^16 (format LOGIT, Q16.16), the same scale on every row.
Trace keys match ``golden.trace_keys``; values are the integers, ``trace_frac(key)`` gives their
fractional bits (``trace_real`` converts a whole trace for comparison with the golden trace).
"""
from __future__ import annotations

import math

import numpy as np

from .config import L2_EPS, RMS_EPS, ROUTER_SCALE, ModelConfig
from .fxp_math import (NORM_FRAC, apply_mant, apply_mant_int, kda_decay, l2norm, recip, rms_rsqrt, rmsnorm, sigmoid,
                       silu, softmax_combine, softmax_exp, softmax_probs, to_log2)
from .fxp_ops import (ACC_FRAC, ALPHA, LOGIT, RW, UNIT, P, S, X, embed_row, mac_input, matvec, round_shift,
                      wide_dot)
from .int4 import dequant_matvec
from .tensors import MatSpec, ParamSpec, tensor_specs
from .weights import Weights

ROUTER_SCALE_FRAC = 24
ROUTER_SCALE_Q24 = round(ROUTER_SCALE * (1 << ROUTER_SCALE_FRAC))  # 2.828 in UQ2.24 = 47445967 (rel. err 3e-9)
Q4_11 = 11                                          # fractional bits of the Q4.11 parameters
MIX_DOT_FRAC = 40                                   # residual_mix rounds its exact score dot to this


# --- KDA blocks --------------------------------------------------------------------------------
def kda_conv(window, taps) -> np.ndarray:
    """Causal depthwise conv + SiLU: window (..., K, P) in X (oldest first), taps (P, K) Q4.11 -> X."""
    acc = np.einsum("...kp,pk->...p", np.asarray(window, dtype=np.int64), np.asarray(taps, dtype=np.int64))
    return silu(X.fit(acc, X.frac + Q4_11))                         # (..., P)


def kda_beta(b) -> np.ndarray:
    """beta = sigmoid(h . Wb): (H,) X -> P."""
    return sigmoid(b)


def kda_alpha(f, a_q88, dtb) -> np.ndarray:
    """alpha = exp(-5 sigmoid(A (f + dtb))): f (H, dh) X, A (H,) UQ8.8, dtb (H, dh) Q4.11 -> ALPHA.

    f + dtb is formed in X (dtb shifted left by X.frac - 11), times A gives X.frac + 8 fractional
    bits, rounded back to X before the decay table.
    """
    fx = np.asarray(f, dtype=np.int64) + (np.asarray(dtb, dtype=np.int64) << (X.frac - Q4_11))
    g = X.fit(fx * np.asarray(a_q88, dtype=np.int64)[:, None], X.frac + 8)   # (H, dh)
    return kda_decay(g)


def kda_state_update(S_, q_hat, k_hat, v, beta, alpha) -> tuple[np.ndarray, np.ndarray]:
    """One position of the delta rule for all heads (SPEC §6.3 step 6), without the 1/sqrt(dh).

    S_ (H, dh, dh) in S (Q4.24); q_hat, k_hat (H, dh) UNIT; v (H, dh) X; beta (H,) P;
    alpha (H, dh) ALPHA. Returns (S', read) with read = q_hat . S' in S format. The 1/sqrt(dh)
    of the spec is folded into the gated norm's epsilon (``gated_norm``), which is exact.
    """
    S_ = np.asarray(S_, dtype=np.int64)
    k_hat = np.asarray(k_hat, dtype=np.int64)
    S_ = round_shift(S_ * np.asarray(alpha, dtype=np.int64)[:, :, None], ALPHA.frac)  # decay rows
    kS = round_shift(np.einsum("hi,hij->hj", k_hat, S_), UNIT.frac)                  # (H, dh) S.frac
    u = S.fit((np.asarray(v, dtype=np.int64) << (S.frac - X.frac)) - kS, S.frac)     # (H, dh)
    bu = round_shift(u * np.asarray(beta, dtype=np.int64)[:, None], P.frac)          # (H, dh)
    S_ = S.fit(S_ + round_shift(k_hat[:, :, None] * bu[:, None, :], UNIT.frac), S.frac)
    read = S.fit(round_shift(np.einsum("hi,hij->hj", np.asarray(q_hat, dtype=np.int64), S_), UNIT.frac), S.frac)
    return S_, read


def gated_norm(read, z, w) -> np.ndarray:
    """RN(read / sqrt(dh), w) * sigmoid(z): read (H, dh) in S, z (H, dh) X, w (dh,) Q2.13 -> X.

    RN(o / c) = o / sqrt(mean(o^2) + eps c^2), so the spec's 1/sqrt(dh) becomes eps * dh.
    """
    dh = np.asarray(read).shape[-1]
    y = rmsnorm(read, S.frac, w, eps=RMS_EPS * dh)                          # (H, dh) X
    return X.fit(y * sigmoid(z), X.frac + P.frac)


# --- MLA ---------------------------------------------------------------------------------------
def mla_score_const(dq: int) -> int:
    """log2(e) / sqrt(dk + dr) as a UQ0.24 constant (scores go straight to the base-2 domain)."""
    return round(math.log2(math.e) / math.sqrt(dq) * (1 << 24))


def mla_attention(q, keys, values, c_q24: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q (H, dq) X; keys (T, H, dq) X; values (T, H, dv) X -> (ctx (H, dv) X, scores X, e P).

    Scores are exact 32x32-bit dot products rounded once to X (``wide_dot``); the softmax runs in
    base 2 with the 1/sqrt(dq) folded into ``c_q24``; context = sum e v / sum e (one reciprocal
    per head).
    """
    scores = X.fit(wide_dot("hd,thd->ht", q, keys, X.frac), X.frac)    # (H, T) X, unscaled q . k
    e = softmax_exp(to_log2(scores, X.frac, c_q24))                     # (H, T) P
    ctx = softmax_combine(e, np.asarray(values, dtype=np.int64).transpose(1, 0, 2), X.frac)
    return ctx, scores, e


# --- residual mixing ---------------------------------------------------------------------------
def residual_mix(cands, w, proj) -> tuple[np.ndarray, np.ndarray]:
    """MIX of §6.2: cands (n, d) in X, oldest first; w Q2.13, proj Q4.11 (d,) -> (mixed X, e P).

    The score dot(RN(c, w), proj) is linear in c after RMSNorm's scale, so it is formed as that
    scale times the exact dot product of c with h = (2^13 + w) · proj (frac X.frac + 13 + 11; the
    chip sums it while the candidates stream in, with no pass after their norms), rounded once to
    ``MIX_DOT_FRAC``; the scale's (mant, e) is rmsnorm's (``rms_rsqrt``), the product rounded to X.
    """
    cands = np.asarray(cands, dtype=np.int64)
    mant, e = rms_rsqrt(cands, X.frac)                                  # (n, 1) each
    h = (np.int64(1 << NORM_FRAC) + np.asarray(w, dtype=np.int64)) * np.asarray(proj, dtype=np.int64)  # (d,)
    dot = wide_dot("ni,i->n", cands, h, X.frac + NORM_FRAC + Q4_11 - MIX_DOT_FRAC)   # (n,) frac MIX_DOT_FRAC
    score = X.fit([apply_mant_int(int(v), MIX_DOT_FRAC, int(m), int(x), X.frac)
                   for v, m, x in zip(dot, mant[:, 0], e[:, 0])], X.frac)          # (n,) X
    e = softmax_exp(to_log2(score, X.frac))                             # (n,) P
    return softmax_combine(e, cands, X.frac), e


# --- MoE ---------------------------------------------------------------------------------------
def router_scores(logits) -> np.ndarray:
    """sigmoid router scores: (E,) X -> P."""
    return sigmoid(logits)


def router_select(scores, bias, k: int) -> np.ndarray:
    """Top-k experts by score + bias (bias Q4.11 aligned to P); ties prefer the lower index."""
    key = np.asarray(scores, dtype=np.int64) + (np.asarray(bias, dtype=np.int64) << (P.frac - Q4_11))
    return np.argsort(-key, kind="stable")[:k]


def router_weights(chosen) -> np.ndarray:
    """chosen (k,) scores in P -> chosen / sum(chosen) * 2.828 in RW (UQ2.22).

    When every chosen score is exactly 0 (all their logits at or below the sigmoid table's -16
    saturation) the sum has no reciprocal; the weights are then 0, as in the chip.
    """
    chosen = np.asarray(chosen, dtype=np.int64)
    if chosen.sum() == 0:
        return np.zeros_like(chosen)
    num = round_shift(chosen * ROUTER_SCALE_Q24, ROUTER_SCALE_FRAC)     # (k,) frac 23
    mant, e = recip(chosen.sum(), P.frac)
    return RW.fit(apply_mant(num, P.frac, mant, e, RW.frac), RW.frac)


def expert_hidden(g, u) -> np.ndarray:
    """SiLU(h Wg) * (h Wu): both X -> X (the input of the down projection)."""
    return X.fit(silu(g) * np.asarray(u, dtype=np.int64), 2 * X.frac)


def moe_combine(shared, outs, weights) -> np.ndarray:
    """shared (d,) X + sum_j weights[j] (RW) * outs[j] (X) -> X."""
    acc = np.asarray(shared, dtype=np.int64) << RW.frac
    acc = acc + (np.asarray(weights, dtype=np.int64)[:, None] * np.asarray(outs, dtype=np.int64)).sum(0)
    return X.fit(acc, X.frac + RW.frac)


def logits_out(acc, acc_frac: int) -> np.ndarray:
    """Head accumulator (acc_frac fractional bits) -> int32 LOGIT (Q16.16), round half up, saturate."""
    return LOGIT.fit(acc, acc_frac)


def argmax(logits) -> int:
    """Index of the largest logit, lowest index on ties."""
    return int(np.argmax(np.asarray(logits)))


def mix_plan(cfg: ModelConfig) -> list[tuple[bool, bool]]:
    """Per layer (boundary, pre-mixer mix runs) from the §6.2 rule (same as ``golden.mix_plan``)."""
    plan, n_snapshots = [], 0
    for i in range(cfg.n_layers):
        boundary = i % cfg.res_block == 0
        n_snapshots += boundary
        plan.append((boundary, (n_snapshots - 1 if boundary else n_snapshots) > 0))
    return plan


# --- the model ---------------------------------------------------------------------------------
_TRACE_FORMATS = {
    "emb": X, "in": X, "res_attn.x": X, "res_mlp.x": X, "p": X, "out": X,
    "final.x": X, "norm1": X, "norm2": X, "final.norm": X,
    "res_attn.probs": P, "res_mlp.probs": P, "final.probs": P, "logits": LOGIT,
    "kda.q_pre": X, "kda.k_pre": X, "kda.v_pre": X, "kda.q": X, "kda.k": X,
    "kda.v": X, "kda.beta": P, "kda.f": X, "kda.alpha": ALPHA, "kda.z": X,
    "kda.S": S, "kda.read": S, "kda.gated": X, "kda.o": X,
    "mla.c": X, "mla.q": X, "mla.k": X, "mla.v": X, "mla.scores": X,
    "mla.probs": P, "mla.ctx": X, "mla.o": X,
    "moe.scores": P, "moe.topk": None, "moe.weights": RW, "moe.out": X,
}


def trace_format(key: str):
    """The format of a trace entry (keys as in ``golden.trace_keys``); None for the chosen experts' indices."""
    head, _, rest = key.partition(".")
    local = rest if head[:1] == "L" and head[1:].isdigit() else key
    return _TRACE_FORMATS[local]


def trace_frac(key: str) -> int:
    """Fractional bits of a trace entry (keys as in ``golden.trace_keys``)."""
    fmt = trace_format(key)
    return fmt.frac if fmt is not None else 0


def trace_real(trace: dict) -> dict:
    """Integer trace -> float64 values comparable with the golden trace (debugging aid)."""
    return {k: np.asarray(v, dtype=np.float64) / (1 << trace_frac(k)) for k, v in trace.items()}


class FixedModel:
    """The §6 decoder in the chip's integer arithmetic; one position per ``step``."""

    def __init__(self, weights: Weights) -> None:
        cfg = self.cfg = weights.cfg
        self.mats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
        self.p: dict[str, np.ndarray] = {}
        for spec in tensor_specs(cfg):
            if isinstance(spec, MatSpec):
                m = weights.mat(spec.name)
                self.mats[spec.name] = (m.q.astype(np.int64), m.s.astype(np.int64), m.z.astype(np.int64),
                                        cfg.group_of(spec.fan_in))
            else:
                assert isinstance(spec, ParamSpec)
                self.p[spec.name] = np.asarray(weights.param(spec.name)).astype(np.int64)
        self.plan = mix_plan(cfg)
        self.mla_c = mla_score_const(cfg.mla_dk + cfg.mla_dr)
        self.reset()

    def reset(self) -> None:
        c = self.cfg
        self.pos = 0
        self.conv_hist = {i: np.zeros((3, c.conv_k - 1, c.kda_width), np.int64)
                          for i, k in enumerate(c.layer_kinds) if k == "kda"}
        self.state = {i: np.zeros((c.kda_heads, c.kda_dh, c.kda_dh), np.int64)
                      for i, k in enumerate(c.layer_kinds) if k == "kda"}
        self.kcache = {i: np.zeros((c.max_seq, c.mla_heads, c.mla_dk + c.mla_dr), np.int64)
                       for i, k in enumerate(c.layer_kinds) if k == "mla"}
        self.vcache = {i: np.zeros((c.max_seq, c.mla_heads, c.mla_dv), np.int64)
                       for i, k in enumerate(c.layer_kinds) if k == "mla"}

    def _mv(self, x, name: str) -> np.ndarray:
        """X vector -> block-floating MAC input -> matvec -> X."""
        q, s, z, g = self.mats[name]
        return matvec(*mac_input(x, X.frac), q, s, z, g)

    # Token mixers ------------------------------------------------------------------------------
    def _kda(self, i: int, h, tr) -> np.ndarray:
        c, n = self.cfg, f"L{i}.kda."
        H, dh = c.kda_heads, c.kda_dh
        pre = np.stack([self._mv(h, n + s) for s in "qkv"])                       # (3, P) X
        window = np.concatenate([self.conv_hist[i], pre[:, None, :]], axis=1)      # (3, K, P)
        taps = np.stack([self.p[n + s] for s in ("qconv", "kconv", "vconv")])      # (3, P, K)
        q, k, v = (kda_conv(window[j], taps[j]) for j in range(3))                # (P,) X each
        self.conv_hist[i] = window[:, 1:]
        beta = kda_beta(self._mv(h, n + "b"))                                      # (H,) P
        f = self._mv(self._mv(h, n + "f1"), n + "f2").reshape(H, dh)  # (H, dh) X
        alpha = kda_alpha(f, self.p[n + "A"], self.p[n + "dtb"].reshape(H, dh))   # (H, dh) ALPHA
        z = self._mv(self._mv(h, n + "g1"), n + "g2").reshape(H, dh)  # (H, dh) X
        q_hat, k_hat = l2norm(q.reshape(H, dh), X.frac, L2_EPS), l2norm(k.reshape(H, dh), X.frac, L2_EPS)
        self.state[i], read = kda_state_update(self.state[i], q_hat, k_hat, v.reshape(H, dh), beta, alpha)
        gated = gated_norm(read, z, self.p[n + "onorm.w"]).reshape(-1)            # (P,) X
        o = self._mv(gated, n + "o")                                               # (d,) X
        if tr is not None:
            # The golden read-out includes 1/sqrt(dh); apply it here for the trace only.
            read_tr = round_shift(read * round((1 << 24) / math.sqrt(dh)), 24)
            vals = (*pre, q, k, v, beta, f, alpha, z, self.state[i], read_tr, gated, o)
            keys = ("q_pre", "k_pre", "v_pre", "q", "k", "v", "beta", "f", "alpha", "z", "S", "read",
                    "gated", "o")
            tr.update({f"L{i}.kda.{key}": val.copy() for key, val in zip(keys, vals)})
        return o

    def _mla(self, i: int, h, tr) -> np.ndarray:
        c, n, t = self.cfg, f"L{i}.mla.", self.pos
        H = c.mla_heads
        lat = rmsnorm(self._mv(h, n + "wc"), X.frac, self.p[n + "knorm.w"])         # (dc,) X
        qc = self._mv(h, n + "wq_c").reshape(H, c.mla_dk)                         # (H, dk) X
        qr = self._mv(h, n + "wq_r").reshape(H, c.mla_dr)                         # (H, dr) X
        kc = self._mv(lat, n + "wk_c").reshape(H, c.mla_dk)                       # (H, dk) X
        kr = self._mv(h, n + "wk_r")                                               # (dr,) X
        v = self._mv(lat, n + "wv").reshape(H, c.mla_dv)                          # (H, dv) X
        q = np.concatenate([qc, qr], axis=-1)                                     # (H, dq) X
        k = np.concatenate([kc, np.broadcast_to(kr, (H, c.mla_dr))], axis=-1)     # (H, dq) X
        self.kcache[i][t], self.vcache[i][t] = k, v                               # append first
        ctx, scores, e = mla_attention(q, self.kcache[i][: t + 1], self.vcache[i][: t + 1], self.mla_c)
        ctx = ctx.reshape(-1)                                                      # (H*dv,) X
        o = self._mv(ctx, n + "o")                                                 # (d,) X
        if tr is not None:
            # The golden scores include 1/sqrt(dq); apply it here for the trace only.
            sc = round_shift(scores * round((1 << 24) / math.sqrt(q.shape[-1])), 24)
            vals = (lat, q, k, v, sc, softmax_probs(e), ctx, o)
            tr.update({f"L{i}.mla.{key}": val.copy() for key, val in
                       zip(("c", "q", "k", "v", "scores", "probs", "ctx", "o"), vals)})
        return o

    # MoE and mixing ----------------------------------------------------------------------------
    def _expert(self, name: str, h) -> np.ndarray:
        return self._mv(expert_hidden(self._mv(h, name + ".g"), self._mv(h, name + ".u")), name + ".d")

    def _moe(self, i: int, h, tr) -> np.ndarray:
        n = f"L{i}.moe."
        scores = router_scores(self._mv(h, n + "router"))                          # (E,) P
        top = router_select(scores, self.p[n + "bias"], self.cfg.top_k)           # (k,)
        weights = router_weights(scores[top])                                     # (k,) RW
        shared = self._expert(n + "shared", h) if self.cfg.n_shared else np.zeros_like(h)
        outs = np.stack([self._expert(f"{n}e{e}", h) for e in top])               # (k, d) X
        out = moe_combine(shared, outs, weights)                                  # (d,) X
        if tr is not None:
            tr.update({n + "scores": scores, n + "topk": top.astype(np.int64), n + "weights": weights,
                       n + "out": out})
        return out

    def _mix(self, cands: list, name: str, key: str, tr) -> np.ndarray:
        x, e = residual_mix(np.stack(cands), self.p[name + ".norm.w"], self.p[name + ".proj"])
        if tr is not None:
            tr[key + ".probs"], tr[key + ".x"] = softmax_probs(e), x
        return x

    def _layer(self, i: int, x, B: list, tr) -> np.ndarray:
        boundary, pre_mix = self.plan[i]
        if tr is not None:
            tr[f"L{i}.in"] = x
        p = x
        if boundary:
            B.append(x)
        if pre_mix:
            history = B[:-1] if boundary else B
            x = self._mix(history + [x], f"L{i}.res_attn", f"L{i}.res_attn", tr)
        h = rmsnorm(x, X.frac, self.p[f"L{i}.norm1.w"])                            # (d,) X
        mixer = self._kda if self.cfg.layer_kinds[i] == "kda" else self._mla
        a = mixer(i, h, tr)                                                        # (d,) X
        p = a if boundary else X.fit(p + a, X.frac)
        x = self._mix(B + [p], f"L{i}.res_mlp", f"L{i}.res_mlp", tr)
        h2 = rmsnorm(x, X.frac, self.p[f"L{i}.norm2.w"])                           # (d,) X
        out = X.fit(p + self._moe(i, h2, tr), X.frac)
        if tr is not None:
            tr.update({f"L{i}.norm1": h, f"L{i}.p": p, f"L{i}.norm2": h2, f"L{i}.out": out})
        return out

    # Public entry points -----------------------------------------------------------------------
    def step(self, token: int, trace: dict | None = None) -> np.ndarray:
        """Process the next position; returns the int32 logits row (vocab,), real value x 2^16."""
        c = self.cfg
        if not 0 <= int(token) < c.vocab:
            raise ValueError(f"token {token} outside the vocabulary 0..{c.vocab - 1}")
        if self.pos >= c.max_seq:
            raise ValueError(f"position {self.pos} exceeds max_seq={c.max_seq}; call reset()")
        q, s, z, g = self.mats["emb"]
        x = embed_row(q[int(token)], s[int(token)], z[int(token)], g)             # (d,) X
        B: list = []
        if trace is not None:
            trace["emb"] = x
        for i in range(c.n_layers):
            x = self._layer(i, x, B, trace)
        x = self._mix(B + [x], "res_out", "final", trace)                          # (d,) X
        hn = rmsnorm(x, X.frac, self.p["final_norm.w"])                            # (d,) X
        hq, hs, hz, hg = self.mats["head"]
        m, m_frac = mac_input(hn, X.frac)
        logits = logits_out(dequant_matvec(m, hq, hs, hz, hg), m_frac + ACC_FRAC).astype(np.int32)  # (vocab,)
        if trace is not None:
            trace["final.norm"], trace["logits"] = hn, logits.astype(np.int64)
        self.pos += 1
        return logits

    def forward_sequence(self, tokens, traces: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """From a fresh state: (T,) tokens -> (int32 logits (T, vocab), argmax (T,) int64)."""
        self.reset()
        rows = []
        for token in tokens:
            tr = {} if traces is not None else None
            rows.append(self.step(int(token), tr))
            if traces is not None:
                traces.append(tr)
        logits = np.stack(rows) if rows else np.zeros((0, self.cfg.vocab), np.int32)
        return logits, np.argmax(logits, axis=1).astype(np.int64) if rows else np.zeros(0, np.int64)
