"""Per-Head Muon and Quantile Balancing (nano_k3/optim.py)."""
from __future__ import annotations

import pytest
import torch

from nano_k3.config import NANO
from nano_k3.optim import PerHeadMuon, expert_load, head_slices, newton_schulz, orthogonalised, quantile_balance

SEED = 19


@pytest.mark.parametrize("shape", [(64, 32), (32, 64), (64, 64), (64, 1)])
def test_newton_schulz_flattens_the_spectrum(shape):
    gen = torch.Generator().manual_seed(SEED)
    r = min(shape)
    u, _ = torch.linalg.qr(torch.randn(shape[0], r, generator=gen))
    v, _ = torch.linalg.qr(torch.randn(shape[1], r, generator=gen))
    g = u @ torch.diag(torch.logspace(-0.5, 0.5, r)) @ v.T                 # singular values 0.32 .. 3.2
    sv = torch.linalg.svdvals(newton_schulz(g))
    print(shape, f"singular values {sv.min():.3f}..{sv.max():.3f}")
    assert sv.min() > 0.6 and sv.max() < 1.25            # Muon's quintic lands near 1, not exactly on it


@pytest.mark.parametrize("name,expected", [("L0.kda.q", (1, 2)), ("L0.kda.o", (0, 2)), ("L1.mla.wv", (1, 2)),
                                           ("L1.mla.o", (0, 2)), ("L1.mla.wc", (1, 1)), ("L0.moe.e3.g", (1, 1))])
def test_head_slices(name, expected):
    assert head_slices(NANO, name) == expected


def test_heads_are_orthogonalised_apart():
    gen = torch.Generator().manual_seed(SEED)
    g = torch.randn(64, 64, generator=gen)
    other = g.clone()
    other[:, 32:] = torch.randn(64, 32, generator=gen)       # only head 1's gradient changes
    a, b = orthogonalised(g, 1, 2), orthogonalised(other, 1, 2)
    assert torch.equal(a[:, :32], b[:, :32]) and not torch.allclose(a[:, 32:], b[:, 32:])
    whole = orthogonalised(g, 1, 1)
    assert not torch.allclose(whole[:, :32], a[:, :32])


def test_muon_step_moves_against_the_gradient():
    w = torch.nn.Parameter(torch.zeros(8, 8))
    opt = PerHeadMuon([w], [(1, 2)], lr=0.1)
    w.grad = torch.eye(8)
    opt.step()
    assert (torch.diagonal(w) < 0).all()


def test_quantile_balance_evens_a_skewed_router():
    gen = torch.Generator().manual_seed(SEED)
    E, k = NANO.n_experts, NANO.top_k
    scores = torch.sigmoid(torch.randn(4096, E, generator=gen) + torch.linspace(-2, 2, E))  # (tokens, E)
    picks = lambda b: torch.topk(scores + b, k, dim=-1).indices            # noqa: E731
    before = expert_load(picks(torch.zeros(E)), E)
    bias = quantile_balance(scores, torch.zeros(E), k)
    after = expert_load(picks(bias), E)
    print(f"max load before {before.max():.3f}, after {after.max():.3f} (ideal {1 / E:.3f})")
    assert before.max() > 2 / E
    assert (after - 1 / E).abs().max() < 0.01
    assert abs(float(bias.mean())) < 1e-6


def test_expert_load_sums_to_one():
    load = expert_load(torch.tensor([[0, 1], [0, 2]]), 4)
    assert load.tolist() == [0.5, 0.25, 0.25, 0.0]
