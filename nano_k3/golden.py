"""The float32 golden model: SPEC_NANO_KPU.md §6 in PyTorch, one position at a time.

This is the reference the fixed-point C-model and the chip are scored against (§7: row cosine and
argmax agreement). It follows §6 line by line and favours readability over speed; the only
"optimisation" is dequantising every weight once in ``__init__``.

Dequantisation (SPEC §4.3/§4.4), exact in float32 (small integers times a power of two):
  standard  W[k, c] = (q[k, c] - z[k // g, c]) * s[k // g, c] / 4096,  g = cfg.group_of(fan_in), y = x @ W
  embedding E[t, k] = (q[t, k] - z[t, k // g]) * s[t, k // g] / 4096,  g = cfg.group_of(d_model)
  params    norm (Q2.13) -> the gain 1 + v/8192; Q4.11 -> v/2048; kda.A (unsigned Q8.8) -> v/256.
Norm parameters are kept as gains, so ``rms_norm(x, gain)`` is RN(x, w) of §6.2.

Trace names. ``step(token, trace)`` fills ``trace`` (a dict) with float32 tensors (indices as int64)
for that position; ``trace_keys(cfg)`` lists exactly the keys one position records. Per layer i
(prefix ``L{i}.``):
  in                  (d,)      x entering the layer
  res_attn.probs      (n,)      pre-mixer MIX probabilities  } only when the history is non-empty
  res_attn.x          (d,)      pre-mixer MIX result         } (never for layer 0; see §6.2)
  norm1               (d,)      h = RN(x, norm1.w), the mixer input
  KDA layers:
    kda.q_pre, kda.k_pre, kda.v_pre  (P,)  projections before the conv
    kda.q, kda.k, kda.v              (P,)  after conv + SiLU
    kda.beta          (H,)      sigmoid(h . Wb)
    kda.f             (H, dh)   decay input (h . Wf1) . Wf2
    kda.alpha         (H, dh)   exp(-5 sigmoid(A_head (f + dtb)))
    kda.z             (H, dh)   output gate before its sigmoid
    kda.S             (H, dh, dh) state after this position's update
    kda.read          (H, dh)   q_hat . S / sqrt(dh)
    kda.gated         (P,)      RN(read, onorm.w) * sigmoid(z), heads concatenated
    kda.o             (d,)      mixer output (after Wo)
  MLA layers:
    mla.c             (dc,)     latent RN(h . Wc, knorm.w)
    mla.q             (H, dk+dr) [qc_h, qr_h]
    mla.k             (H, dk+dr) [kc_h, kr] of this position
    mla.v             (H, dv)
    mla.scores        (H, t+1)  q . k / sqrt(dk + dr) over positions 0..t
    mla.probs         (H, t+1)
    mla.ctx           (H*dv,)   heads concatenated
    mla.o             (d,)      mixer output (after Wo)
  p                   (d,)      running residual after the mixer
  res_mlp.probs       (n,)      MIX probabilities over B + [p]
  res_mlp.x           (d,)
  norm2               (d,)      MoE input
  moe.scores          (E,)      sigmoid router scores
  moe.topk            (k,)      chosen expert indices (int64), best first
  moe.weights         (k,)      normalised weights x 2.828
  moe.out             (d,)      shared + routed output
  out                 (d,)      x leaving the layer (p + MoE)
and for the whole position: ``emb`` (d,), ``final.probs`` (n,), ``final.x`` (d,), ``final.norm`` (d,),
``logits`` (vocab,).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .config import KDA_LOG_DECAY_MIN, L2_EPS, RMS_EPS, ROUTER_SCALE, ModelConfig
from .tensors import PARAM_FORMATS, MatSpec, ParamSpec, tensor_specs
from .weights import IntMat, Weights

_KDA_KEYS = ("kda.q_pre", "kda.k_pre", "kda.v_pre", "kda.q", "kda.k", "kda.v", "kda.beta", "kda.f",
             "kda.alpha", "kda.z", "kda.S", "kda.read", "kda.gated", "kda.o")
_MLA_KEYS = ("mla.c", "mla.q", "mla.k", "mla.v", "mla.scores", "mla.probs", "mla.ctx", "mla.o")
_MOE_KEYS = ("res_mlp.probs", "res_mlp.x", "norm2", "moe.scores", "moe.topk", "moe.weights",
             "moe.out", "out")


# Dequantisation (SPEC §4.3, §4.4) ----------------------------------------------------------------
def _expand_groups(a: np.ndarray, group: int, length: int, axis: int) -> np.ndarray:
    """Repeat each group entry ``group`` times along ``axis`` and cut to ``length``."""
    return np.repeat(a, group, axis=axis).take(np.arange(length), axis=axis)


def dequant_mat(m: IntMat, group: int) -> torch.Tensor:
    """Standard weight -> float32 (fan_in, fan_out), groups along fan_in."""
    fan_in = m.q.shape[0]
    z = _expand_groups(m.z.astype(np.int64), group, fan_in, axis=0)  # (fan_in, fan_out)
    s = _expand_groups(m.s.astype(np.int64), group, fan_in, axis=0)  # (fan_in, fan_out)
    w = (m.q.astype(np.int64) - z) * s                               # exact integers
    return torch.from_numpy((w / 4096.0).astype(np.float32))


def dequant_emb(m: IntMat, group: int) -> torch.Tensor:
    """Token-major embedding -> float32 (vocab, d_model), groups along d_model."""
    d = m.q.shape[1]
    z = _expand_groups(m.z.astype(np.int64), group, d, axis=1)  # (vocab, d)
    s = _expand_groups(m.s.astype(np.int64), group, d, axis=1)  # (vocab, d)
    w = (m.q.astype(np.int64) - z) * s
    return torch.from_numpy((w / 4096.0).astype(np.float32))


def dequant_param(v: np.ndarray, fmt: str) -> torch.Tensor:
    """A small int16 parameter -> float32; norm offsets become gains 1 + v/8192."""
    frac, _signed = PARAM_FORMATS[fmt]
    real = np.asarray(v, dtype=np.float64) / (1 << frac)
    if fmt == "norm":
        real = 1.0 + real
    return torch.from_numpy(real.astype(np.float32))


# Building blocks (pure functions, tested on their own) -------------------------------------------
def rms_norm(x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    """RN(x, w) of §6.2 over the last axis; ``gain`` = 1 + w."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * gain  # (..., n)


def l2_norm(x: torch.Tensor) -> torch.Tensor:
    """x / sqrt(sum x^2 + 1e-6) over the last axis (§6.3 step 6)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2_EPS)  # (..., n)


def softmax(s: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis with explicit max subtraction."""
    e = torch.exp(s - s.max(-1, keepdim=True).values)  # (..., n)
    return e / e.sum(-1, keepdim=True)                 # (..., n)


def residual_mix(cands: torch.Tensor, gain: torch.Tensor, proj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MIX of §6.2: cands (n, d), oldest first -> (mixed (d,), probs (n,))."""
    scores = (rms_norm(cands, gain) * proj).sum(-1)  # (n,)
    probs = softmax(scores)                          # (n,)
    return probs @ cands, probs                      # (d,), (n,)


def kda_recurrence(S: torch.Tensor, q_hat: torch.Tensor, k_hat: torch.Tensor, v: torch.Tensor,
                   beta: torch.Tensor, alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One position of the per-head delta rule (§6.3 step 6), all heads at once.

    S (H, dh, dh) row = key channel; q_hat, k_hat, v, alpha (H, dh); beta (H,).
    Returns the updated state and the read-out o = q_hat . S / sqrt(dh).
    """
    dh = S.shape[-1]
    S = S * alpha[:, :, None]                                # (H, dh, dh) decay first
    u = v - torch.einsum("hi,hij->hj", k_hat, S)             # (H, dh)
    S = S + beta[:, None, None] * k_hat[:, :, None] * u[:, None, :]  # (H, dh, dh)
    o = torch.einsum("hi,hij->hj", q_hat, S) / math.sqrt(dh)  # (H, dh)
    return S, o


def mla_attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Attention of one query over the cache (§6.4 step 5).

    q (H, dq); keys (T, H, dq); values (T, H, dv). Returns ctx (H, dv), scores (H, T), probs (H, T).
    """
    scores = torch.einsum("hd,thd->ht", q, keys) / math.sqrt(q.shape[-1])  # (H, T)
    probs = softmax(scores)                                                # (H, T)
    ctx = torch.einsum("ht,thd->hd", probs, values)                        # (H, dv)
    return ctx, scores, probs


def router_select(scores: torch.Tensor, bias: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k experts by score + bias; a stable sort so equal values prefer the lower index."""
    order = torch.sort(scores + bias, descending=True, stable=True).indices  # (E,)
    return order[:k]                                                        # (k,)


def mix_plan(cfg: ModelConfig) -> list[tuple[bool, bool]]:
    """Per layer (boundary, pre-mixer mix runs), from the §6.2 rule; B grows by one per boundary."""
    plan, n_snapshots = [], 0
    for i in range(cfg.n_layers):
        boundary = i % cfg.res_block == 0
        n_snapshots += boundary
        history = n_snapshots - 1 if boundary else n_snapshots
        plan.append((boundary, history > 0))
    return plan


def trace_keys(cfg: ModelConfig) -> list[str]:
    """The keys ``GoldenModel.step`` writes into its trace for one position (see module docstring)."""
    keys = ["emb"]
    for i, (kind, (_b, pre_mix)) in enumerate(zip(cfg.layer_kinds, mix_plan(cfg))):
        keys += [f"L{i}.in"]
        keys += [f"L{i}.res_attn.probs", f"L{i}.res_attn.x"] if pre_mix else []
        keys += [f"L{i}.norm1"]
        keys += [f"L{i}.{k}" for k in (_KDA_KEYS if kind == "kda" else _MLA_KEYS)]
        keys += [f"L{i}.p"] + [f"L{i}.{k}" for k in _MOE_KEYS]
    return keys + ["final.probs", "final.x", "final.norm", "logits"]


def _rec(trace: dict | None, key: str, t: torch.Tensor) -> None:
    if trace is not None:
        trace[key] = t.detach().clone()


class GoldenModel:
    """The §6 decoder, one position per ``step``; KDA and MLA state persist until ``reset``."""

    def __init__(self, weights: Weights) -> None:
        cfg = self.cfg = weights.cfg
        self.w: dict[str, torch.Tensor] = {}  # dequantised matmul weights, (fan_in, fan_out)
        self.p: dict[str, torch.Tensor] = {}  # real-valued params; norm entries are gains
        for spec in tensor_specs(cfg):
            if isinstance(spec, MatSpec):
                m = weights.mat(spec.name)
                want = (spec.fan_out, spec.fan_in) if spec.emb else (spec.fan_in, spec.fan_out)
                if m.q.shape != want:
                    raise ValueError(f"{spec.name}: q has shape {m.q.shape}, expected {want}")
                if spec.emb:
                    self.emb = dequant_emb(m, cfg.group_of(spec.fan_in))  # (vocab, d)
                else:
                    self.w[spec.name] = dequant_mat(m, cfg.group_of(spec.fan_in))  # (fan_in, fan_out)
            else:
                assert isinstance(spec, ParamSpec)
                v = weights.param(spec.name)
                if tuple(v.shape) != spec.shape:
                    raise ValueError(f"{spec.name}: shape {tuple(v.shape)}, expected {spec.shape}")
                self.p[spec.name] = dequant_param(v, spec.fmt)
        self.plan = mix_plan(cfg)
        self.reset()

    def reset(self) -> None:
        """Start a new sequence: zero conv histories, KDA states and MLA caches."""
        c = self.cfg
        self.pos = 0
        self.conv_hist: dict[int, torch.Tensor] = {}  # (3, K-1, P) pre-conv q, k, v, oldest first
        self.state: dict[int, torch.Tensor] = {}      # (H, dh, dh)
        self.kcache: dict[int, torch.Tensor] = {}     # (max_seq, H, dk+dr)
        self.vcache: dict[int, torch.Tensor] = {}     # (max_seq, H, dv)
        for i, kind in enumerate(c.layer_kinds):
            if kind == "kda":
                self.conv_hist[i] = torch.zeros(3, c.conv_k - 1, c.kda_width)
                self.state[i] = torch.zeros(c.kda_heads, c.kda_dh, c.kda_dh)
            else:
                self.kcache[i] = torch.zeros(c.max_seq, c.mla_heads, c.mla_dk + c.mla_dr)
                self.vcache[i] = torch.zeros(c.max_seq, c.mla_heads, c.mla_dv)

    # Token mixers ------------------------------------------------------------------------------
    def _kda_conv(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        """Causal depthwise conv + SiLU of the three streams (§6.3 step 2); pre (3, P)."""
        n = f"L{i}.kda."
        taps = torch.stack([self.p[n + s] for s in ("qconv", "kconv", "vconv")])  # (3, P, K)
        window = torch.cat([self.conv_hist[i], pre[:, None, :]], dim=1)           # (3, K, P)
        out = F.silu((window * taps.transpose(1, 2)).sum(1))                      # (3, P)
        self.conv_hist[i] = window[:, 1:]                                         # (3, K-1, P)
        return out

    def _kda(self, i: int, h: torch.Tensor, tr: dict | None) -> torch.Tensor:
        """KDA linear attention (§6.3); h (d,) -> (d,)."""
        c, n, w = self.cfg, f"L{i}.kda.", self.w
        H, dh = c.kda_heads, c.kda_dh
        pre = torch.stack([h @ w[n + "q"], h @ w[n + "k"], h @ w[n + "v"]])   # (3, P)
        q, k, v = self._kda_conv(i, pre)                                      # (P,) each
        beta = torch.sigmoid(h @ w[n + "b"])                                  # (H,)
        f = ((h @ w[n + "f1"]) @ w[n + "f2"]).view(H, dh)                     # (H, dh)
        A = self.p[n + "A"][:, None]                                          # (H, 1)
        dtb = self.p[n + "dtb"].view(H, dh)                                   # (H, dh)
        alpha = torch.exp(KDA_LOG_DECAY_MIN * torch.sigmoid(A * (f + dtb)))   # (H, dh)
        z = ((h @ w[n + "g1"]) @ w[n + "g2"]).view(H, dh)                     # (H, dh)
        q_hat, k_hat = l2_norm(q.view(H, dh)), l2_norm(k.view(H, dh))         # (H, dh)
        self.state[i], read = kda_recurrence(self.state[i], q_hat, k_hat, v.view(H, dh), beta, alpha)
        gated = (rms_norm(read, self.p[n + "onorm.w"]) * torch.sigmoid(z)).reshape(-1)  # (P,)
        o = gated @ w[n + "o"]                                                # (d,)
        if tr is not None:
            for key, t in zip(_KDA_KEYS, (*pre, q, k, v, beta, f, alpha, z, self.state[i], read, gated, o)):
                _rec(tr, f"L{i}.{key}", t)
        return o

    def _mla(self, i: int, h: torch.Tensor, tr: dict | None) -> torch.Tensor:
        """NoPE multi-head latent attention (§6.4); h (d,) -> (d,)."""
        c, n, w, t = self.cfg, f"L{i}.mla.", self.w, self.pos
        H = c.mla_heads
        lat = rms_norm(h @ w[n + "wc"], self.p[n + "knorm.w"])              # (dc,)
        qc = (h @ w[n + "wq_c"]).view(H, c.mla_dk)                           # (H, dk)
        qr = (h @ w[n + "wq_r"]).view(H, c.mla_dr)                           # (H, dr)
        kc = (lat @ w[n + "wk_c"]).view(H, c.mla_dk)                         # (H, dk)
        kr = h @ w[n + "wk_r"]                                               # (dr,) shared by heads
        v = (lat @ w[n + "wv"]).view(H, c.mla_dv)                            # (H, dv)
        q = torch.cat([qc, qr], dim=-1)                                      # (H, dk+dr)
        k = torch.cat([kc, kr.expand(H, c.mla_dr)], dim=-1)                  # (H, dk+dr)
        self.kcache[i][t], self.vcache[i][t] = k, v                         # append before attending
        ctx, scores, probs = mla_attend(q, self.kcache[i][: t + 1], self.vcache[i][: t + 1])
        ctx = ctx.reshape(-1)                                                # (H*dv,)
        o = ctx @ w[n + "o"]                                                 # (d,)
        if tr is not None:
            for key, x in zip(_MLA_KEYS, (lat, q, k, v, scores, probs, ctx, o)):
                _rec(tr, f"L{i}.{key}", x)
        return o

    # MoE and residual mixing -------------------------------------------------------------------
    def _expert(self, name: str, h: torch.Tensor) -> torch.Tensor:
        """SwiGLU expert: (SiLU(h Wg) * (h Wu)) Wd; h (d,) -> (d,)."""
        return (F.silu(h @ self.w[name + ".g"]) * (h @ self.w[name + ".u"])) @ self.w[name + ".d"]

    def _moe(self, i: int, h: torch.Tensor, tr: dict | None) -> torch.Tensor:
        """Sigmoid-routed top-k MoE plus the shared expert (§6.5); h (d,) -> (d,)."""
        n = f"L{i}.moe."
        scores = torch.sigmoid(h @ self.w[n + "router"])                   # (E,)
        top = router_select(scores, self.p[n + "bias"], self.cfg.top_k)     # (k,)
        chosen = scores[top]                                                # (k,)
        weights = chosen / chosen.sum() * ROUTER_SCALE                      # (k,)
        out = self._expert(n + "shared", h) if self.cfg.n_shared else torch.zeros_like(h)  # (d,)
        for e, wt in zip(top.tolist(), weights):
            out = out + wt * self._expert(f"{n}e{e}", h)                    # (d,)
        if tr is not None:
            for key, t in zip(("scores", "topk", "weights", "out"), (scores, top, weights, out)):
                _rec(tr, n + key, t)
        return out

    def _mix(self, cands: list[torch.Tensor], name: str, tr: dict | None, key: str = "") -> torch.Tensor:
        """MIX(cands, name) of §6.2, traced as ``{key or name}.probs`` / ``.x``."""
        x, probs = residual_mix(torch.stack(cands), self.p[name + ".norm.w"], self.p[name + ".proj"])
        _rec(tr, (key or name) + ".probs", probs)
        _rec(tr, (key or name) + ".x", x)
        return x

    def _layer(self, i: int, x: torch.Tensor, B: list[torch.Tensor], tr: dict | None) -> torch.Tensor:
        """One layer of §6.2 step 2; appends to the snapshot list B at a boundary."""
        boundary, pre_mix = self.plan[i]
        _rec(tr, f"L{i}.in", x)
        p = x                                                               # (d,) pre-mix value
        if boundary:
            B.append(x)
        if pre_mix:
            history = B[:-1] if boundary else B
            x = self._mix(history + [x], f"L{i}.res_attn", tr)              # (d,)
        h = rms_norm(x, self.p[f"L{i}.norm1.w"])                            # (d,)
        _rec(tr, f"L{i}.norm1", h)
        mixer = self._kda if self.cfg.layer_kinds[i] == "kda" else self._mla
        a = mixer(i, h, tr)                                                 # (d,)
        p = a if boundary else p + a                                        # (d,)
        _rec(tr, f"L{i}.p", p)
        x = self._mix(B + [p], f"L{i}.res_mlp", tr)                         # (d,)
        h = rms_norm(x, self.p[f"L{i}.norm2.w"])                            # (d,)
        _rec(tr, f"L{i}.norm2", h)
        x = p + self._moe(i, h, tr)                                         # (d,)
        _rec(tr, f"L{i}.out", x)
        return x

    # Public entry points -----------------------------------------------------------------------
    @torch.no_grad()
    def step(self, token: int, trace: dict | None = None) -> torch.Tensor:
        """Process the next position; returns float32 logits (vocab,)."""
        c = self.cfg
        if not 0 <= int(token) < c.vocab:
            raise ValueError(f"token {token} outside the vocabulary 0..{c.vocab - 1}")
        if self.pos >= c.max_seq:
            raise ValueError(f"position {self.pos} exceeds max_seq={c.max_seq}; call reset()")
        x = self.emb[int(token)].clone()                                    # (d,)
        _rec(trace, "emb", x)
        B: list[torch.Tensor] = []                                          # snapshots of this position
        for i in range(c.n_layers):
            x = self._layer(i, x, B, trace)                                 # (d,)
        x = self._mix(B + [x], "res_out", trace, key="final")               # (d,)
        y = rms_norm(x, self.p["final_norm.w"])                             # (d,)
        _rec(trace, "final.norm", y)
        logits = y @ self.w["head"]                                         # (vocab,)
        _rec(trace, "logits", logits)
        self.pos += 1
        return logits

    @torch.no_grad()
    def forward_sequence(self, tokens, traces: list[dict] | None = None) -> torch.Tensor:
        """Teacher-forced run from a fresh state: (T,) tokens -> (T, vocab) logits.

        If ``traces`` is a list, one trace dict per position is appended to it.
        """
        self.reset()
        rows = []
        for token in tokens:
            tr = {} if traces is not None else None
            rows.append(self.step(int(token), tr))                          # (vocab,)
            if traces is not None:
                traces.append(tr)
        return torch.stack(rows) if rows else torch.zeros(0, self.cfg.vocab)  # (T, vocab)
