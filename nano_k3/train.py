"""Train the nano-K3 golden model on Python's standard library, then quantise it into a SPEC image.

    python -m nano_k3.train [--out nano_k3/trained] [--steps N] [--batch B]

1. Corpus and tokenizer (nano_k3/corpus.py): a 512-entry byte-level BPE trained on a fixed list of
   stdlib modules; other modules are the held-out text.
2. Two runs of the same budget (steps x batch x max_seq tokens, same seed, same schedule) of the float
   golden model itself (``GoldenModel.from_tensors``: the same equations, under autograd): K3's recipe
   (Per-Head Muon for the projections, AdamW for embedding, head and vectors) and plain AdamW for every
   tensor. Both route with Quantile Balancing (nano_k3/optim.py), no auxiliary loss.
3. The Muon model is quantised (nano_k3/quantize.py: INT4 groups with Q3.12 scales and zero points,
   int16 small params) into the SPEC image at group 128 with a held-out window as its tokens.
4. Held-out perplexity of the float model, of the INT4-dequantised float model (the golden model of the
   image) and of the fixed-point model (nano_k3/fixed.py, the chip's arithmetic), and the experts' load,
   printed and written to ``train.json`` beside ``tokenizer.json`` and ``nano.bin``.

Deterministic: fixed seeds and one torch thread (the model is a chain of small ops, which a second
thread does not speed up), so the command reproduces the committed files.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .config import NANO, ModelConfig
from .corpus import HELDOUT_MODULES, TRAIN_MODULES, TRAINED_DIR, Corpus, build_corpus, windows
from .fixed import FixedModel
from .golden import GoldenModel
from .image import build_image
from .optim import PerHeadMuon, expert_load, head_slices, quantile_balance
from .quantize import param_limits, to_weights
from .tensors import MatSpec, ParamSpec, tensor_specs

IMAGE_SEQ_LEN = 48            # the SPEC long run's length; the image's tokens are held-out text
# The chip keeps the KDA state, and the delta rule's error u = v - k.S, in S = Q4.24 (+-8, docs/fixed_point.md).
# Trained freely, |v| and |u| reach twice that and saturate; the model hardly needs the scale (the read-out
# is RMS-normalised), so training pays RANGE_WEIGHT x the squared excess of |v| and |S| over these bounds.
RANGE_BOUNDS = {".kda.v": 4.0, ".kda.S": 6.0}
RANGE_WEIGHT = 1.0


@dataclass(frozen=True)
class Settings:
    steps: int = 300
    batch: int = 64
    lr_muon: float = 3e-2     # the K3 run (Muon and its AdamW tensors share it, Moonlight scaling)
    lr_adamw: float = 1e-2    # the plain AdamW run; each the better of a 100-step sweep (docs/trained_model.md)
    warmup: int = 30
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    seed: int = 19
    eval_windows: int = 64    # held-out windows of max_seq + 1 tokens


# Parameters ------------------------------------------------------------------------------------
def init_tensors(cfg: ModelConfig, seed: int) -> tuple[torch.Tensor, dict, dict]:
    """Float tensors named as ``golden.load_tensors`` names them; norm entries are gains."""
    gen = torch.Generator().manual_seed(seed)
    emb, w, p = None, {}, {}
    for spec in tensor_specs(cfg):
        if isinstance(spec, MatSpec):
            shape = (spec.fan_out, spec.fan_in) if spec.emb else (spec.fan_in, spec.fan_out)
            std = 1.0 if spec.emb else spec.fan_in ** -0.5
            t = torch.randn(shape, generator=gen) * std
            if spec.emb:
                emb = t
            else:
                w[spec.name] = t
        else:
            p[spec.name] = _init_param(cfg, spec, gen)
    for t in [emb, *w.values(), *p.values()]:
        t.requires_grad_(not _is_router_bias(t, p))
    return emb, w, p


def _is_router_bias(t: torch.Tensor, p: dict) -> bool:
    return any(t is v for k, v in p.items() if k.endswith("moe.bias"))


def _init_param(cfg: ModelConfig, spec: ParamSpec, gen: torch.Generator) -> torch.Tensor:
    key = spec.name.rsplit(".", 1)[-1]
    if spec.fmt == "norm":
        return torch.ones(spec.shape)                                  # gains
    if key in ("qconv", "kconv", "vconv"):
        taps = 0.1 * torch.randn(spec.shape, generator=gen)            # (P, K)
        taps[:, -1] += 1.0                                             # start near the identity
        return taps
    if key == "dtb":                                                   # alpha from ~0.99 to ~0.6 at A = 1
        return -1.0 - 5.0 * torch.rand(spec.shape, generator=gen)
    if key == "A":
        return torch.ones(spec.shape)
    return torch.zeros(spec.shape)                                     # mix projections, router bias


def make_optimisers(cfg: ModelConfig, emb, w: dict, p: dict, kind: str, s: Settings) -> list[torch.optim.Optimizer]:
    """kind "muon": Per-Head Muon for every projection, AdamW for emb, head and vectors; "adamw": AdamW only."""
    vectors = [t for t in p.values() if t.requires_grad]
    adam_decay = [emb, w["head"]]
    matrices = {n: t for n, t in w.items() if n != "head"}
    if kind == "adamw":
        adam_decay += list(matrices.values())
    if kind not in ("muon", "adamw"):
        raise ValueError(f"optimiser kind must be 'muon' or 'adamw', got {kind!r}")
    lr = s.lr_muon if kind == "muon" else s.lr_adamw
    groups = [{"params": adam_decay, "weight_decay": s.weight_decay}, {"params": vectors, "weight_decay": 0.0}]
    opts: list[torch.optim.Optimizer] = [torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))]
    if kind == "muon":
        opts.append(PerHeadMuon(list(matrices.values()), [head_slices(cfg, n) for n in matrices], lr=lr,
                                weight_decay=s.weight_decay))
    return opts


def lr_factor(step: int, s: Settings) -> float:
    """Linear warm-up, then a cosine down to a tenth."""
    if step < s.warmup:
        return (step + 1) / s.warmup
    t = (step - s.warmup) / max(1, s.steps - s.warmup)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * t))


class RouterTrace(dict):
    """A trace that keeps only the router's scores and picks (what balancing and load need)."""

    def __setitem__(self, key, value) -> None:
        if key.endswith(".moe.scores") or key.endswith(".moe.topk"):
            super().__setitem__(key, value)


class TrainTrace(RouterTrace):
    """The router's trace, plus each ``RANGE_BOUNDS`` value's squared excess over its bound, under autograd."""

    keep_graph = True

    def __setitem__(self, key, value) -> None:
        for suffix, bound in RANGE_BOUNDS.items():
            if key.endswith(suffix):
                dict.__setitem__(self, key, F.relu(value.abs() - bound).pow(2).sum())
                return
        super().__setitem__(key, value.detach())


def range_excess(traces: list[dict]) -> torch.Tensor:
    """Sum of the ``RANGE_BOUNDS`` excesses over the positions of a ``TrainTrace`` run."""
    return sum(v for tr in traces for k, v in tr.items() if k.endswith(tuple(RANGE_BOUNDS)))


# Training ----------------------------------------------------------------------------------------
@torch.no_grad()
def _clamp_params(cfg: ModelConfig, p: dict) -> None:
    """Keep every small parameter inside its image container (SPEC §4.4)."""
    for spec in tensor_specs(cfg):
        if isinstance(spec, ParamSpec):
            p[spec.name].clamp_(*param_limits(spec))


@torch.no_grad()
def _balance(cfg: ModelConfig, p: dict, traces: list[dict]) -> None:
    for i in range(cfg.n_layers):
        scores = torch.cat([tr[f"L{i}.moe.scores"].reshape(-1, cfg.n_experts) for tr in traces])  # (B*T, E)
        p[f"L{i}.moe.bias"].copy_(quantile_balance(scores, p[f"L{i}.moe.bias"], cfg.top_k))
    _clamp_params(cfg, p)


def train_run(cfg: ModelConfig, corpus: Corpus, kind: str, s: Settings) -> dict:
    """One training run; returns its tensors, loss curve and wall time."""
    torch.manual_seed(s.seed)
    emb, w, p = init_tensors(cfg, s.seed)
    model = GoldenModel.from_tensors(cfg, emb, w, p)
    opts = make_optimisers(cfg, emb, w, p, kind, s)
    base_lrs = [[g["lr"] for g in o.param_groups] for o in opts]
    params = [t for t in [emb, *w.values(), *p.values()] if t.requires_grad]
    rng = np.random.default_rng(s.seed)
    span = cfg.max_seq + 1
    losses, t0 = [], time.time()
    for step in range(s.steps):
        starts = rng.integers(0, len(corpus.train) - span, s.batch)
        batch = torch.from_numpy(np.stack([corpus.train[a:a + span] for a in starts]))  # (B, T+1)
        traces: list[dict] = []
        logits = model.run(batch[:, :-1], traces, TrainTrace)                           # (B, T, vocab)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1))
        excess = range_excess(traces) / batch[:, 1:].numel()
        for o in opts:
            o.zero_grad(set_to_none=True)
        (loss + RANGE_WEIGHT * excess).backward()
        torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
        for o, lrs in zip(opts, base_lrs):
            for g, lr in zip(o.param_groups, lrs):
                g["lr"] = lr * lr_factor(step, s)
            o.step()
        _balance(cfg, p, traces)
        losses.append(loss.item())
        if step % 25 == 0 or step == s.steps - 1:
            print(f"  {kind:5s} step {step:4d}/{s.steps}  loss {loss.item():.4f}  range excess {excess.item():.2e}  "
                  f"{time.time() - t0:6.1f} s", flush=True)
    return {"tensors": (emb, w, p), "losses": losses, "seconds": time.time() - t0}


# Evaluation --------------------------------------------------------------------------------------
@torch.no_grad()
def float_eval(model: GoldenModel, held: np.ndarray, chunk: int = 16) -> tuple[float, list[list[float]]]:
    """Mean next-token NLL (nats) over held-out windows (n, T+1), and each layer's expert load."""
    nll, picks = [], {}
    for a in range(0, len(held), chunk):
        w = torch.from_numpy(held[a:a + chunk])
        traces: list[dict] = []
        logits = model.run(w[:, :-1], traces, RouterTrace)                               # (b, T, vocab)
        nll.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="none"))
        for tr in traces:
            for key, v in tr.items():
                if key.endswith("topk"):
                    picks.setdefault(key, []).append(v)
    cfg = model.cfg
    loads = [expert_load(torch.cat(picks[f"L{i}.moe.topk"]), cfg.n_experts).tolist() for i in range(cfg.n_layers)]
    return float(torch.cat(nll).mean()), loads


def fixed_nll(model: FixedModel, held: np.ndarray) -> float:
    """Mean next-token NLL of the fixed-point model (int32 logits are real x 2^16)."""
    total, count = 0.0, 0
    for w in held:
        logits, _ = model.forward_sequence(w[:-1])                                         # (T, vocab) int32
        lp = torch.log_softmax(torch.from_numpy(logits.astype(np.float64) / 65536.0), dim=-1)
        total -= float(lp[torch.arange(len(w) - 1), torch.from_numpy(w[1:])].sum())
        count += len(w) - 1
    return total / count


def _load_summary(loads: list[list[float]]) -> dict:
    """Per-layer load fractions and the max over mean (1.0 = perfectly balanced)."""
    return {"fractions": [[round(x, 4) for x in layer] for layer in loads],
            "max_over_mean": [round(max(layer) * len(layer), 3) for layer in loads]}


def _ppl(nll: float) -> float:
    return round(math.exp(nll), 4)


# Command -----------------------------------------------------------------------------------------
def _run_and_eval(cfg: ModelConfig, kind: str, s: Settings) -> dict:
    """One training run and its float held-out evaluation (a process of its own with ``--jobs 2``)."""
    torch.set_num_threads(1)
    corpus = build_corpus(cfg.vocab)
    r = train_run(cfg, corpus, kind, s)
    held = windows(corpus.heldout, cfg.max_seq + 1, s.eval_windows)
    nll, loads = float_eval(GoldenModel.from_tensors(cfg, *r["tensors"]), held)
    print(f"{kind}: held-out perplexity {math.exp(nll):.3f} (float), {r['seconds']:.0f} s", flush=True)
    emb, w, p = r["tensors"]
    return {**r, "tensors": (emb.detach(), {k: v.detach() for k, v in w.items()}, {k: v.detach() for k, v in p.items()}),
            "nll": nll, "loads": loads}


def run(out: Path, s: Settings, jobs: int = 2, cfg: ModelConfig = NANO) -> dict:
    torch.set_num_threads(1)
    t_start = time.time()
    corpus = build_corpus(cfg.vocab)
    held = windows(corpus.heldout, cfg.max_seq + 1, s.eval_windows)                       # (n, T+1)
    print(f"corpus: {len(TRAIN_MODULES)} training modules ({len(corpus.train)} tokens), {len(HELDOUT_MODULES)} "
          f"held-out ({len(corpus.heldout)} tokens); sha256 {corpus.sha256[:16]}", flush=True)
    kinds = ("muon", "adamw")
    if jobs > 1:   # one process per run, each on one thread: the same numbers as one after the other
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = dict(zip(kinds, pool.map(_run_and_eval, [cfg] * 2, kinds, [s] * 2)))
    else:
        runs = {kind: _run_and_eval(cfg, kind, s) for kind in kinds}

    weights, saturated = to_weights(cfg, *runs["muon"]["tensors"])
    int4_nll, int4_loads = float_eval(GoldenModel(weights), held)
    fixed = fixed_nll(FixedModel(weights), held)
    image = build_image(weights, corpus.heldout[:IMAGE_SEQ_LEN].astype(np.uint32))
    out.mkdir(parents=True, exist_ok=True)
    image.write(out / "nano.bin")
    corpus.tokenizer.save(str(out / "tokenizer.json"))
    report = {
        "command": "python -m nano_k3.train", "settings": asdict(s), "config": cfg.name,
        "corpus": {"train_modules": len(TRAIN_MODULES), "heldout_modules": list(HELDOUT_MODULES),
                   "train_tokens": int(len(corpus.train)), "heldout_tokens": int(len(corpus.heldout)),
                   "chars": corpus.chars, "sha256": corpus.sha256, "python": sys.version.split()[0]},
        "heldout_eval_tokens": int(held.shape[0] * (held.shape[1] - 1)),
        "perplexity": {"float": _ppl(runs["muon"]["nll"]), "int4_float": _ppl(int4_nll), "fixed": _ppl(fixed),
                       "adamw_float": _ppl(runs["adamw"]["nll"])},
        "train_seconds": {k: round(r["seconds"], 1) for k, r in runs.items()},
        "final_train_loss": {k: round(float(np.mean(r["losses"][-20:])), 4) for k, r in runs.items()},
        "expert_load": {"muon_float": _load_summary(runs["muon"]["loads"]), "int4_float": _load_summary(int4_loads),
                        "adamw_float": _load_summary(runs["adamw"]["loads"])},
        "saturated_params": saturated,
        "image": {"file": "nano.bin", "group": cfg.group_size, "seq_len": IMAGE_SEQ_LEN,
                  "sha256": hashlib.sha256(image.data).hexdigest()},
        "wall_seconds": round(time.time() - t_start, 1),
    }
    (out / "train.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    d = Settings()
    ap = argparse.ArgumentParser(prog="python -m nano_k3.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=TRAINED_DIR, help="folder for nano.bin, tokenizer.json, train.json")
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--batch", type=int, default=d.batch)
    ap.add_argument("--jobs", type=int, choices=(1, 2), default=2, help="2: the two runs side by side")
    args = ap.parse_args(argv)
    r = run(args.out, Settings(steps=args.steps, batch=args.batch), args.jobs)
    ppl = r["perplexity"]
    print(f"held-out perplexity ({r['heldout_eval_tokens']} tokens): float {ppl['float']:.3f}  "
          f"INT4 {ppl['int4_float']:.3f}  fixed {ppl['fixed']:.3f}  |  plain AdamW float {ppl['adamw_float']:.3f}")
    for k in ("muon_float", "adamw_float"):
        print(f"expert load {k}: max/mean per layer {r['expert_load'][k]['max_over_mean']}")
    if r["saturated_params"]:
        print(f"small params saturated at quantisation: {r['saturated_params']}")
    print(f"wrote {args.out}/train.json, nano.bin, tokenizer.json in {r['wall_seconds']:.0f} s")
    committed = TRAINED_DIR / "train.json"
    if args.out.resolve() != TRAINED_DIR.resolve() and committed.is_file():
        ref = json.loads(committed.read_text())["perplexity"]
        print("against the committed model: " + ", ".join(
            f"{k} {ppl[k]:.3f} vs {ref[k]:.3f} ({100 * (ppl[k] / ref[k] - 1):+.2f} %)" for k in ref))
    return 0


if __name__ == "__main__":
    sys.exit(main())
