"""K3's training recipe at nano size: Per-Head Muon for the projections, Quantile Balancing for the router.

Per-Head Muon. Muon replaces a matrix's momentum by its nearest semi-orthogonal matrix (five
Newton-Schulz iterations of the quintic of Jordan et al.) before the step. Per-Head Muon applies that
orthogonalisation to each attention head's slice of a projection separately (``head_slices``: the
output columns of a head for q/k/v/gates, its input rows for the output projection), so no head's
update is shaped by another's gradient. The step is scaled as in Moonlight (0.2 sqrt(max(rows, cols))),
which matches AdamW's update RMS, so both share one learning rate and decoupled weight decay.
Embeddings, the LM head and every vector (norm gains, conv taps, decay biases, mix projections) train
with AdamW.

Quantile Balancing. The router bias only decides which experts are picked (SPEC §6.5), so it can be
set rather than learned: with per-token thresholds a_i and per-expert thresholds beta_j, token i uses
expert j when s_ij - a_i - beta_j > 0. Balancing asks each expert to be picked by k/E of the tokens,
so beta_j is the (1 - k/E) quantile over tokens of s_ij - a_i, and a_i is the (k+1)-th largest
s_ij - beta_j of token i (every token takes exactly k). A few alternations on the batch's router scores
give beta; the bias -beta (centred) routes the next batch. No auxiliary loss touches the gradients.
"""
from __future__ import annotations

import torch

from .config import ModelConfig

NS_COEFFS = (3.4445, -4.7750, 2.0315)  # quintic Newton-Schulz of Muon (Jordan et al. 2024)
NS_STEPS = 5
MOONLIGHT_RMS = 0.2                    # update RMS matched to AdamW's (Liu et al. 2025, "Muon is scalable")
QB_ITERS = 4


def newton_schulz(g: torch.Tensor, steps: int = NS_STEPS) -> torch.Tensor:
    """Approximately U V^T of g = U S V^T, for g (..., rows, cols)."""
    a, b, c = NS_COEFFS
    x = g / (g.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.transpose(-2, -1)
    for _ in range(steps):
        m = x @ x.transpose(-2, -1)                                   # (..., r, r)
        x = a * x + (b * m + c * m @ m) @ x
    return x.transpose(-2, -1) if tall else x


def head_slices(cfg: ModelConfig, name: str) -> tuple[int, int]:
    """(axis, heads) of a projection: split ``axis`` (0 = input rows, 1 = output columns) into ``heads``
    equal slices, each orthogonalised alone; (1, 1) for matrices not owned by a head."""
    local = name.split(".", 1)[1] if name[:1] == "L" else name
    per_head_out = {"kda.q", "kda.k", "kda.v", "kda.b", "kda.f2", "kda.g2"}
    if local in per_head_out:
        return 1, cfg.kda_heads
    if local == "kda.o":
        return 0, cfg.kda_heads
    if local in ("mla.wq_c", "mla.wq_r", "mla.wk_c", "mla.wv"):
        return 1, cfg.mla_heads
    if local == "mla.o":
        return 0, cfg.mla_heads
    return 1, 1


def orthogonalised(update: torch.Tensor, axis: int, heads: int) -> torch.Tensor:
    """The Muon direction of a (rows, cols) update, head slice by head slice along ``axis``."""
    parts = update.chunk(heads, dim=axis)
    rows, cols = parts[0].shape
    scale = MOONLIGHT_RMS * max(rows, cols) ** 0.5
    return torch.cat([newton_schulz(p) * scale for p in parts], dim=axis)


class PerHeadMuon(torch.optim.Optimizer):
    """Muon with Nesterov momentum over named matrices; ``slicing[i]`` = (axis, heads) of param i."""

    def __init__(self, params: list[torch.Tensor], slicing: list[tuple[int, int]], lr: float,
                 momentum: float = 0.95, weight_decay: float = 0.0) -> None:
        if len(params) != len(slicing):
            raise ValueError(f"{len(params)} parameters but {len(slicing)} slicings")
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})
        self.slicing = {id(p): s for p, s in zip(params, slicing)}

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("momentum", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                nesterov = p.grad + group["momentum"] * buf
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(orthogonalised(nesterov, *self.slicing[id(p)]), alpha=-group["lr"])


@torch.no_grad()
def quantile_balance(scores: torch.Tensor, bias: torch.Tensor, k: int) -> torch.Tensor:
    """Router bias that gives each expert k/E of the tokens of ``scores`` (tokens, E); starts from ``bias``."""
    n_experts = scores.shape[-1]
    beta = -bias.to(scores.dtype)                                       # (E,)
    for _ in range(QB_ITERS):
        a = torch.topk(scores - beta, k + 1, dim=-1).values[:, k]       # (tokens,) threshold under the top k
        beta = torch.quantile(scores - a[:, None], 1 - k / n_experts, dim=0)  # (E,)
    new = -beta
    return new - new.mean()


def expert_load(topk: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Fraction of all routed picks that went to each expert: topk (..., k) -> (E,), sums to 1."""
    counts = torch.bincount(topk.reshape(-1), minlength=n_experts).to(torch.float64)
    return counts / counts.sum()
