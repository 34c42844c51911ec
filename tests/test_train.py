"""The training command's parts (nano_k3/train.py) on the tiny config: a few steps must learn."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nano_k3.config import NANO, TINY
from nano_k3.corpus import Corpus
from nano_k3.golden import GoldenModel
from nano_k3.quantize import param_limits
from nano_k3.tensors import ParamSpec, tensor_specs
from nano_k3.train import Settings, init_tensors, lr_factor, make_optimisers, train_run

SEED = 19


def _corpus(cfg) -> Corpus:
    """A learnable stream: a repeating pattern of 23 ids, with every 7th id random."""
    rng = np.random.default_rng(SEED)
    stream = np.tile((np.arange(23) * 5) % cfg.vocab, 200)
    stream[::7] = rng.integers(0, cfg.vocab, len(stream[::7]))
    return Corpus(tokenizer=None, train=stream.astype(np.int64), heldout=stream[:200], sha256="", chars=0)


@pytest.mark.parametrize("kind", ["muon", "adamw"])
def test_a_few_steps_reduce_the_loss(kind):
    torch.set_num_threads(1)
    s = Settings(steps=20, batch=8, lr_muon=1e-2, lr_adamw=1e-2, warmup=2, seed=SEED)
    r = train_run(TINY, _corpus(TINY), kind, s)
    first, last = r["losses"][0], float(np.mean(r["losses"][-3:]))
    print(f"{kind}: loss {first:.3f} -> {last:.3f}")
    assert last < first - 0.5
    emb, w, p = r["tensors"]
    for spec in tensor_specs(TINY):
        if isinstance(spec, ParamSpec):
            lo, hi = param_limits(spec)
            v = p[spec.name].detach()
            assert lo <= float(v.min()) and float(v.max()) <= hi, spec.name
    assert any(float(p[f"L{i}.moe.bias"].abs().max()) > 0 for i in range(TINY.n_layers))  # balancing ran


def test_init_tensors_feed_the_golden_model():
    emb, w, p = init_tensors(NANO, SEED)
    assert emb.shape == (NANO.vocab, NANO.d_model) and emb.requires_grad
    assert not p["L0.moe.bias"].requires_grad                      # set by balancing, not by gradients
    logits = GoldenModel.from_tensors(NANO, emb, w, p).run(torch.arange(6).reshape(2, 3))
    assert logits.shape == (2, 3, NANO.vocab) and logits.requires_grad


def test_optimiser_groups():
    emb, w, p = init_tensors(TINY, SEED)
    s = Settings()
    muon = make_optimisers(TINY, emb, w, p, "muon", s)
    adamw = make_optimisers(TINY, emb, w, p, "adamw", s)
    n_trainable = sum(1 for t in [emb, *w.values(), *p.values()] if t.requires_grad)
    assert len(muon) == 2 and len(adamw) == 1
    for opts in (muon, adamw):
        assert sum(len(g["params"]) for o in opts for g in o.param_groups) == n_trainable
    assert len(muon[1].param_groups[0]["params"]) == len(w) - 1    # every matrix but the head
    with pytest.raises(ValueError, match="muon"):
        make_optimisers(TINY, emb, w, p, "sgd", s)


def test_schedule_warms_up_then_decays_to_a_tenth():
    s = Settings(steps=100, warmup=10)
    assert lr_factor(0, s) == pytest.approx(0.1) and lr_factor(9, s) == pytest.approx(1.0)
    assert lr_factor(10, s) == pytest.approx(1.0) and lr_factor(100, s) == pytest.approx(0.1)


def test_range_penalty_reaches_the_kda_values():
    """TrainTrace keeps |v| and |S| excesses under autograd; their gradient pushes the v projection."""
    from nano_k3.train import RANGE_BOUNDS, TrainTrace, range_excess
    emb, w, p = init_tensors(TINY, SEED)
    with torch.no_grad():
        w["L0.kda.v"].mul_(50.0)                                   # |v| far beyond its bound
    traces: list[dict] = []
    GoldenModel.from_tensors(TINY, emb, w, p).run(torch.arange(8).reshape(2, 4), traces, TrainTrace)
    assert set(traces[0]) == {"L0.kda.v", "L0.kda.S", "L0.moe.scores", "L0.moe.topk", "L1.moe.scores", "L1.moe.topk"}
    assert not traces[0]["L0.moe.scores"].requires_grad
    excess = range_excess(traces)
    assert excess.item() > 0 and set(RANGE_BOUNDS) == {".kda.v", ".kda.S"}
    excess.backward()
    assert w["L0.kda.v"].grad.abs().sum() > 0
