"""The float32 golden model: SPEC_NANO_KPU.md §6 in PyTorch, one position at a time.

This is the reference the fixed-point C-model and the chip are scored against (§7: row cosine and
argmax agreement). It follows §6 line by line and favours readability over speed; the only
"optimisations" are dequantising every weight once in ``__init__`` and running every routed expert
on a row (those off the top-k with weight 0). Every tensor may carry leading batch axes, and the
same model trains under autograd (``GoldenModel.from_tensors``, ``run``; nano_k3/train.py).

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
    """MIX of §6.2: cands (..., n, d), oldest first -> (mixed (..., d), probs (..., n))."""
    scores = (rms_norm(cands, gain) * proj).sum(-1)          # (..., n)
    probs = softmax(scores)                                  # (..., n)
    return (probs.unsqueeze(-2) @ cands).squeeze(-2), probs  # (..., d), (..., n)


def kda_recurrence(S: torch.Tensor, q_hat: torch.Tensor, k_hat: torch.Tensor, v: torch.Tensor,
                   beta: torch.Tensor, alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One position of the per-head delta rule (§6.3 step 6), all heads at once.

    S (..., H, dh, dh) row = key channel; q_hat, k_hat, v, alpha (..., H, dh); beta (..., H).
    Returns the updated state and the read-out o = q_hat . S / sqrt(dh).
    """
    dh = S.shape[-1]
    S = S * alpha[..., :, None]                                        # (..., H, dh, dh) decay first
    u = v - torch.einsum("...hi,...hij->...hj", k_hat, S)              # (..., H, dh)
    S = S + beta[..., None, None] * k_hat[..., :, None] * u[..., None, :]  # (..., H, dh, dh)
    o = torch.einsum("...hi,...hij->...hj", q_hat, S) / math.sqrt(dh)  # (..., H, dh)
    return S, o


def mla_attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Attention of one query over the cache (§6.4 step 5).

    q (..., H, dq); keys (..., T, H, dq); values (..., T, H, dv).
    Returns ctx (..., H, dv), scores (..., H, T), probs (..., H, T).
    """
    scores = torch.einsum("...hd,...thd->...ht", q, keys) / math.sqrt(q.shape[-1])  # (..., H, T)
    probs = softmax(scores)                                                         # (..., H, T)
    ctx = torch.einsum("...ht,...thd->...hd", probs, values)                        # (..., H, dv)
    return ctx, scores, probs


def router_select(scores: torch.Tensor, bias: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k experts by score + bias; a stable sort so equal values prefer the lower index."""
    order = torch.sort(scores + bias, descending=True, stable=True).indices  # (..., E)
    return order[..., :k]                                                   # (..., k)


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
    """Record a copy, cut from autograd; a trace whose class sets ``keep_graph`` gets the tensor itself
    (training penalises some values, nano_k3/train.py)."""
    if trace is not None:
        trace[key] = t if getattr(trace, "keep_graph", False) else t.detach().clone()


def load_tensors(weights: Weights) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Integer weights -> (emb (vocab, d), matmul weights (fan_in, fan_out), params with norm gains), float32."""
    cfg = weights.cfg
    emb, w, p = None, {}, {}
    for spec in tensor_specs(cfg):
        if isinstance(spec, MatSpec):
            m = weights.mat(spec.name)
            want = (spec.fan_out, spec.fan_in) if spec.emb else (spec.fan_in, spec.fan_out)
            if m.q.shape != want:
                raise ValueError(f"{spec.name}: q has shape {m.q.shape}, expected {want}")
            if spec.emb:
                emb = dequant_emb(m, cfg.group_of(spec.fan_in))               # (vocab, d)
            else:
                w[spec.name] = dequant_mat(m, cfg.group_of(spec.fan_in))      # (fan_in, fan_out)
        else:
            assert isinstance(spec, ParamSpec)
            v = weights.param(spec.name)
            if tuple(v.shape) != spec.shape:
                raise ValueError(f"{spec.name}: shape {tuple(v.shape)}, expected {spec.shape}")
            p[spec.name] = dequant_param(v, spec.fmt)
    return emb, w, p


class GoldenModel:
    """The §6 decoder, one position per ``step``; KDA and MLA state persist until ``reset``.

    Built from an image's integer weights (``GoldenModel(weights)``) or from real-valued tensors
    (``GoldenModel.from_tensors``, which nano_k3/train.py uses with trainable parameters: the same
    equations, differentiated by autograd). Every tensor may carry leading batch axes (``run`` on
    (B, T) tokens); ``step`` and ``forward_sequence`` are the single-sequence, no-grad entry points.
    """

    def __init__(self, weights: Weights) -> None:
        self._bind(weights.cfg, *load_tensors(weights))

    @classmethod
    def from_tensors(cls, cfg: ModelConfig, emb: torch.Tensor, w: dict[str, torch.Tensor],
                     p: dict[str, torch.Tensor]) -> "GoldenModel":
        """A model over real-valued tensors, named and shaped as ``load_tensors`` returns them (norm
        entries of ``p`` are gains). The tensors are held by reference, so an optimiser's in-place
        updates are seen by the next forward pass."""
        model = cls.__new__(cls)
        model._bind(cfg, emb, w, p)
        return model

    def _bind(self, cfg: ModelConfig, emb: torch.Tensor, w: dict[str, torch.Tensor],
              p: dict[str, torch.Tensor]) -> None:
        self.cfg, self.emb, self.w, self.p = cfg, emb, w, p  # emb (vocab, d); w (fan_in, fan_out)
        self.plan = mix_plan(cfg)
        self.reset()

    def reset(self, batch: tuple[int, ...] = ()) -> None:
        """Start a new sequence (``batch`` of them side by side): zero conv histories, KDA states, MLA caches."""
        c = self.cfg
        self.pos = 0
        self.conv_hist: dict[int, torch.Tensor] = {}  # (..., 3, K-1, P) pre-conv q, k, v, oldest first
        self.state: dict[int, torch.Tensor] = {}      # (..., H, dh, dh)
        self.kcache: dict[int, list[torch.Tensor]] = {}  # per position (..., H, dk+dr)
        self.vcache: dict[int, list[torch.Tensor]] = {}  # per position (..., H, dv)
        for i, kind in enumerate(c.layer_kinds):
            if kind == "kda":
                self.conv_hist[i] = torch.zeros(*batch, 3, c.conv_k - 1, c.kda_width)
                self.state[i] = torch.zeros(*batch, c.kda_heads, c.kda_dh, c.kda_dh)
            else:
                self.kcache[i], self.vcache[i] = [], []

    # Token mixers ------------------------------------------------------------------------------
    def _kda_conv(self, i: int, pre: torch.Tensor) -> torch.Tensor:
        """Causal depthwise conv + SiLU of the three streams (§6.3 step 2); pre (..., 3, P)."""
        n = f"L{i}.kda."
        taps = torch.stack([self.p[n + s] for s in ("qconv", "kconv", "vconv")])  # (3, P, K)
        window = torch.cat([self.conv_hist[i], pre.unsqueeze(-2)], dim=-2)        # (..., 3, K, P)
        out = F.silu((window * taps.transpose(1, 2)).sum(-2))                     # (..., 3, P)
        self.conv_hist[i] = window[..., 1:, :]                                    # (..., 3, K-1, P)
        return out

    def _kda(self, i: int, h: torch.Tensor, tr: dict | None) -> torch.Tensor:
        """KDA linear attention (§6.3); h (..., d) -> (..., d)."""
        c, n, w = self.cfg, f"L{i}.kda.", self.w
        H, dh = c.kda_heads, c.kda_dh
        pre = torch.stack([h @ w[n + "q"], h @ w[n + "k"], h @ w[n + "v"]], dim=-2)  # (..., 3, P)
        q, k, v = self._kda_conv(i, pre).unbind(-2)                           # (..., P) each
        beta = torch.sigmoid(h @ w[n + "b"])                                  # (..., H)
        f = ((h @ w[n + "f1"]) @ w[n + "f2"]).unflatten(-1, (H, dh))          # (..., H, dh)
        A = self.p[n + "A"][:, None]                                          # (H, 1)
        dtb = self.p[n + "dtb"].view(H, dh)                                   # (H, dh)
        alpha = torch.exp(KDA_LOG_DECAY_MIN * torch.sigmoid(A * (f + dtb)))   # (..., H, dh)
        z = ((h @ w[n + "g1"]) @ w[n + "g2"]).unflatten(-1, (H, dh))          # (..., H, dh)
        q_hat, k_hat = l2_norm(q.unflatten(-1, (H, dh))), l2_norm(k.unflatten(-1, (H, dh)))  # (..., H, dh)
        self.state[i], read = kda_recurrence(self.state[i], q_hat, k_hat, v.unflatten(-1, (H, dh)), beta, alpha)
        gated = (rms_norm(read, self.p[n + "onorm.w"]) * torch.sigmoid(z)).flatten(-2)  # (..., P)
        o = gated @ w[n + "o"]                                                # (..., d)
        if tr is not None:
            vals = (*pre.unbind(-2), q, k, v, beta, f, alpha, z, self.state[i], read, gated, o)
            for key, t in zip(_KDA_KEYS, vals):
                _rec(tr, f"L{i}.{key}", t)
        return o

    def _mla(self, i: int, h: torch.Tensor, tr: dict | None) -> torch.Tensor:
        """NoPE multi-head latent attention (§6.4); h (..., d) -> (..., d)."""
        c, n, w = self.cfg, f"L{i}.mla.", self.w
        H = c.mla_heads
        lat = rms_norm(h @ w[n + "wc"], self.p[n + "knorm.w"])              # (..., dc)
        qc = (h @ w[n + "wq_c"]).unflatten(-1, (H, c.mla_dk))                # (..., H, dk)
        qr = (h @ w[n + "wq_r"]).unflatten(-1, (H, c.mla_dr))                # (..., H, dr)
        kc = (lat @ w[n + "wk_c"]).unflatten(-1, (H, c.mla_dk))              # (..., H, dk)
        kr = h @ w[n + "wk_r"]                                               # (..., dr) shared by heads
        v = (lat @ w[n + "wv"]).unflatten(-1, (H, c.mla_dv))                 # (..., H, dv)
        q = torch.cat([qc, qr], dim=-1)                                      # (..., H, dk+dr)
        k = torch.cat([kc, kr.unsqueeze(-2).expand(*kr.shape[:-1], H, c.mla_dr)], dim=-1)  # (..., H, dk+dr)
        self.kcache[i].append(k)                                             # append before attending
        self.vcache[i].append(v)
        keys, values = torch.stack(self.kcache[i], dim=-3), torch.stack(self.vcache[i], dim=-3)  # (..., t+1, H, .)
        ctx, scores, probs = mla_attend(q, keys, values)
        ctx = ctx.flatten(-2)                                                # (..., H*dv)
        o = ctx @ w[n + "o"]                                                 # (..., d)
        if tr is not None:
            for key, x in zip(_MLA_KEYS, (lat, q, k, v, scores, probs, ctx, o)):
                _rec(tr, f"L{i}.{key}", x)
        return o

    # MoE and residual mixing -------------------------------------------------------------------
    def _expert(self, name: str, h: torch.Tensor) -> torch.Tensor:
        """SwiGLU expert: (SiLU(h Wg) * (h Wu)) Wd; h (..., d) -> (..., d)."""
        return (F.silu(h @ self.w[name + ".g"]) * (h @ self.w[name + ".u"])) @ self.w[name + ".d"]

    def _routed(self, n: str, gates: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Sum over routed experts e of gates[..., e] * expert_e(h); gates (..., E) is zero off the top-k.

        Every expert runs on every row (dense, a few large matmuls instead of per-row gathers); an
        expert whose gate is zero adds an exact 0."""
        E = self.cfg.n_experts
        g, u, d = (torch.stack([self.w[f"{n}e{j}.{m}"] for j in range(E)]) for m in "gud")  # (E, d|ff, ff|d)
        hid = F.silu(torch.einsum("...i,eio->...eo", h, g)) * torch.einsum("...i,eio->...eo", h, u)  # (..., E, ff)
        y = torch.einsum("...eo,eod->...ed", hid, d)                                                 # (..., E, d)
        return (gates.unsqueeze(-1) * y).sum(-2)                                                     # (..., d)

    def _moe(self, i: int, h: torch.Tensor, tr: dict | None) -> torch.Tensor:
        """Sigmoid-routed top-k MoE plus the shared expert (§6.5); h (..., d) -> (..., d)."""
        n = f"L{i}.moe."
        scores = torch.sigmoid(h @ self.w[n + "router"])                   # (..., E)
        top = router_select(scores.detach(), self.p[n + "bias"], self.cfg.top_k)  # (..., k)
        chosen = scores.gather(-1, top)                                     # (..., k)
        weights = chosen / chosen.sum(-1, keepdim=True) * ROUTER_SCALE      # (..., k)
        gates = torch.zeros_like(scores).scatter(-1, top, weights)          # (..., E)
        out = self._expert(n + "shared", h) if self.cfg.n_shared else torch.zeros_like(h)  # (..., d)
        out = out + self._routed(n, gates, h)                               # (..., d)
        if tr is not None:
            for key, t in zip(("scores", "topk", "weights", "out"), (scores, top, weights, out)):
                _rec(tr, n + key, t)
        return out

    def _mix(self, cands: list[torch.Tensor], name: str, tr: dict | None, key: str = "") -> torch.Tensor:
        """MIX(cands, name) of §6.2, traced as ``{key or name}.probs`` / ``.x``."""
        x, probs = residual_mix(torch.stack(cands, dim=-2), self.p[name + ".norm.w"], self.p[name + ".proj"])
        _rec(tr, (key or name) + ".probs", probs)
        _rec(tr, (key or name) + ".x", x)
        return x

    def _layer(self, i: int, x: torch.Tensor, B: list[torch.Tensor], tr: dict | None) -> torch.Tensor:
        """One layer of §6.2 step 2; appends to the snapshot list B at a boundary."""
        boundary, pre_mix = self.plan[i]
        _rec(tr, f"L{i}.in", x)
        p = x                                                               # (..., d) pre-mix value
        if boundary:
            B.append(x)
        if pre_mix:
            history = B[:-1] if boundary else B
            x = self._mix(history + [x], f"L{i}.res_attn", tr)              # (..., d)
        h = rms_norm(x, self.p[f"L{i}.norm1.w"])                            # (..., d)
        _rec(tr, f"L{i}.norm1", h)
        mixer = self._kda if self.cfg.layer_kinds[i] == "kda" else self._mla
        a = mixer(i, h, tr)                                                 # (..., d)
        p = a if boundary else p + a                                        # (..., d)
        _rec(tr, f"L{i}.p", p)
        x = self._mix(B + [p], f"L{i}.res_mlp", tr)                         # (..., d)
        h = rms_norm(x, self.p[f"L{i}.norm2.w"])                            # (..., d)
        _rec(tr, f"L{i}.norm2", h)
        x = p + self._moe(i, h, tr)                                         # (..., d)
        _rec(tr, f"L{i}.out", x)
        return x

    def _position(self, tokens: torch.Tensor, trace: dict | None) -> torch.Tensor:
        """The next position of every sequence: tokens (...,) int64 -> logits (..., vocab)."""
        x = self.emb[tokens]                                                # (..., d)
        _rec(trace, "emb", x)
        B: list[torch.Tensor] = []                                          # snapshots of this position
        for i in range(self.cfg.n_layers):
            x = self._layer(i, x, B, trace)                                 # (..., d)
        x = self._mix(B + [x], "res_out", trace, key="final")               # (..., d)
        y = rms_norm(x, self.p["final_norm.w"])                             # (..., d)
        _rec(trace, "final.norm", y)
        logits = y @ self.w["head"]                                         # (..., vocab)
        _rec(trace, "logits", logits)
        self.pos += 1
        return logits

    def _check(self, tokens: torch.Tensor, n_positions: int) -> None:
        c = self.cfg
        bad = tokens[(tokens < 0) | (tokens >= c.vocab)]
        if bad.numel():
            raise ValueError(f"token {int(bad[0])} outside the vocabulary 0..{c.vocab - 1}")
        if self.pos + n_positions > c.max_seq:
            raise ValueError(f"position {self.pos + n_positions - 1} exceeds max_seq={c.max_seq}; call reset()")

    # Public entry points -----------------------------------------------------------------------
    @torch.no_grad()
    def step(self, token: int, trace: dict | None = None) -> torch.Tensor:
        """Process the next position; returns float32 logits (vocab,)."""
        t = torch.tensor(int(token))
        self._check(t, 1)
        return self._position(t, trace)

    def run(self, tokens: torch.Tensor, traces: list[dict] | None = None, trace_type: type = dict) -> torch.Tensor:
        """Teacher-forced run from a fresh state, with autograd: tokens (..., T) int -> logits (..., T, vocab).

        If ``traces`` is a list, one trace (a new ``trace_type``, a dict or a subclass that keeps only
        some keys) per position is appended to it."""
        tokens = torch.as_tensor(tokens, dtype=torch.int64)
        self.reset(tuple(tokens.shape[:-1]))
        self._check(tokens, tokens.shape[-1])
        rows = []
        for t in range(tokens.shape[-1]):
            tr = trace_type() if traces is not None else None
            rows.append(self._position(tokens[..., t], tr))                # (..., vocab)
            if traces is not None:
                traces.append(tr)
        if not rows:
            return torch.zeros(*tokens.shape, self.cfg.vocab)
        return torch.stack(rows, dim=-2)                                    # (..., T, vocab)

    @torch.no_grad()
    def forward_sequence(self, tokens, traces: list[dict] | None = None) -> torch.Tensor:
        """Teacher-forced run from a fresh state: (T,) tokens -> (T, vocab) logits (``run`` without autograd).

        If ``traces`` is a list, one trace dict per position is appended to it.
        """
        return self.run(torch.as_tensor(np.asarray(tokens, dtype=np.int64)), traces)
