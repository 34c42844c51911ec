"""Where the fixed-point model drifts from the float golden model: per-intermediate relative error.

    python -m nano_k3.divergence --seed 18 --group 128 [--config nano] [--positions 64]
                                 [--position 45] [--reference float64] [--json out.json]

Both models run the same sequence with traces on. For every position and every trace key (in
datapath order, ``golden.trace_keys``) the error is ``max|fixed - golden| / max|golden|`` (the
inf-norm of the difference relative to the inf-norm of the golden tensor, so tiny elements of a
vector do not blow it up). Printed:

* one line per position: 1 - cos of the logits row, the router-key error and the golden
  router-key margin (gap between the k-th and (k+1)-th key) of every MoE layer, and ``FLIP``
  where the two models chose different experts;
* per trace key, the largest error over all positions and where it occurs;
* with ``--position``, every key's error at that position (the chain through the datapath).

The router key is ``sigmoid score + bias`` (§6.5), rebuilt here from the traced scores and the
``moe.bias`` parameter; it is the quantity whose ordering decides the routing.

``--reference float64`` runs the same golden code with its weights and state in float64 (the
golden model itself is unchanged): the float32 golden carries its own rounding noise (~5e-7 at
the layer-1 router input), and this shows the fixed-point datapath's error without it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys

import numpy as np
import torch

from .config import preset
from .fixed import FixedModel, trace_real
from .golden import GoldenModel, trace_keys
from .metrics import row_cosines
from .out_paths import output_file
from .tensors import PARAM_FORMATS
from .weights import Weights, generate, generate_tokens

ROUTER_KEY = "moe.key"  # derived entry: router scores + bias, per MoE layer


def rel_err(fixed: np.ndarray, ref: np.ndarray) -> float:
    """max|fixed - ref| / max|ref| (0 when both are zero, inf when only ref is zero)."""
    fixed, ref = np.asarray(fixed, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    diff = float(np.abs(fixed - ref).max()) if ref.size else 0.0
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    return diff / scale if scale else (0.0 if diff == 0 else float("inf"))


def _router_keys(w: Weights, tr: dict) -> dict[str, np.ndarray]:
    """``L{i}.moe.key`` = scores + bias for every MoE layer of a real-valued trace."""
    frac, _ = PARAM_FORMATS["q4_11"]
    out = {}
    for key in [k for k in tr if k.endswith(".moe.scores")]:
        layer = key[: -len(".moe.scores")]
        bias = np.asarray(w.param(f"{layer}.moe.bias"), dtype=np.float64) / (1 << frac)
        out[f"{layer}.{ROUTER_KEY}"] = np.asarray(tr[key], dtype=np.float64) + bias
    return out


@contextlib.contextmanager
def _default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def golden_run(w: Weights, tokens, traces: list, reference: str) -> np.ndarray:
    """The golden model's logits (T, vocab) as float64; ``reference`` is "float32" or "float64"."""
    if reference == "float32":
        return GoldenModel(w).forward_sequence(tokens, traces).numpy().astype(np.float64)
    with _default_dtype(torch.float64):                  # state buffers made by reset()
        gm = GoldenModel(w)
        gm.w = {k: v.double() for k, v in gm.w.items()}
        gm.p = {k: v.double() for k, v in gm.p.items()}
        gm.emb = gm.emb.double()
        return gm.forward_sequence(tokens, traces).numpy()


def run(cfg, seed: int, positions: int, reference: str = "float32") -> dict:
    """Run both models with traces; return per-position errors, router facts and logits 1 - cos."""
    w = generate(cfg, seed)
    tokens = generate_tokens(cfg, seed, positions)
    g_tr: list[dict] = []
    f_tr: list[dict] = []
    ref = golden_run(w, tokens, g_tr, reference)                                    # (T, vocab)
    chip, _ = FixedModel(w).forward_sequence(tokens, f_tr)                          # (T, vocab)
    omc = 1.0 - row_cosines(chip, ref)                                              # (T,)
    keys = [k for k in trace_keys(cfg) if not k.endswith(".moe.topk")]
    rows = []
    for t, (gt, ft) in enumerate(zip(g_tr, f_tr)):
        g = {k: v.double().numpy() for k, v in gt.items()}
        f = trace_real(ft)
        g.update(_router_keys(w, g))
        f.update(_router_keys(w, f))
        errs = {k: rel_err(f[k], g[k]) for k in keys}
        router = {}
        for rk in [k for k in g if k.endswith(ROUTER_KEY)]:
            layer = rk[: -len(ROUTER_KEY) - 1]
            errs[rk] = rel_err(f[rk], g[rk])
            srt = np.sort(g[rk])[::-1]
            margin = float(srt[cfg.top_k - 1] - srt[cfg.top_k]) if srt.size > cfg.top_k else float("inf")
            flip = sorted(gt[f"{layer}.moe.topk"].tolist()) != sorted(ft[f"{layer}.moe.topk"].tolist())
            router[layer] = {"key_err": errs[rk], "margin": margin,
                             "key_abs_err": float(np.abs(f[rk] - g[rk]).max()), "flip": bool(flip)}
        rows.append({"position": t, "one_minus_cos": float(omc[t]), "errors": errs, "router": router})
    return {"seed": seed, "group": cfg.group_size, "reference": reference, "keys": keys, "rows": rows}


def _key_order(rows: list[dict]) -> list[str]:
    return list(rows[0]["errors"]) if rows else []


def report(res: dict, position: int | None = None) -> str:
    rows, lines = res["rows"], []
    lines.append(f"seed {res['seed']}  group {res['group']}  {len(rows)} positions  reference {res['reference']} "
                 "golden; error = max|fixed - golden| / max|golden|")
    lines.append("pos   1-cos      " + "  ".join(f"{layer}: key err  |abs err|  margin" for layer in rows[0]["router"]))
    for r in rows:
        parts = [f"{r['position']:3d}  {r['one_minus_cos']:.2e}"]
        for layer, ro in r["router"].items():
            parts.append(f"{layer}: {ro['key_err']:.2e}  {ro['key_abs_err']:.2e}  {ro['margin']:.2e}"
                         + ("  FLIP" if ro["flip"] else "      "))
        lines.append("  ".join(parts))
    lines.append("")
    lines.append(f"{'trace key':22s} {'max err':>9s}  at pos   {'median':>9s}")
    for k in _key_order(rows):
        e = np.array([r["errors"][k] for r in rows])
        lines.append(f"{k:22s} {e.max():9.2e}  {int(np.argmax(e)):6d}   {np.median(e):9.2e}")
    if position is not None:
        r = rows[position]
        lines.append("")
        lines.append(f"position {position}: 1-cos {r['one_minus_cos']:.3e}")
        for k in _key_order(rows):
            lines.append(f"  {k:22s} {r['errors'][k]:9.2e}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nano_k3.divergence",
        description="Per-intermediate error of the fixed-point model vs the golden model.")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--group", type=int, default=128, help="int4 group size (64 or 128)")
    ap.add_argument("--config", default="nano", help="model preset (nano, tiny)")
    ap.add_argument("--positions", type=int, default=64, help="positions in the sequence")
    ap.add_argument("--position", type=int, help="also print every key's error at this position")
    ap.add_argument("--reference", choices=("float32", "float64"), default="float32",
                    help="golden arithmetic to compare with (float64: without the golden's own rounding)")
    ap.add_argument("--json", help="write the per-position errors here")
    args = ap.parse_args(argv)
    if args.json:
        output_file(ap, "--json", args.json)
    cfg = preset(args.config).with_group(args.group)
    if not 1 <= args.positions <= cfg.max_seq:
        ap.error(f"--positions must be in 1..{cfg.max_seq} for {cfg.name}, got {args.positions}")
    if args.position is not None and not 0 <= args.position < args.positions:
        ap.error(f"--position must be in 0..{args.positions - 1}, got {args.position}")
    res = run(cfg, args.seed, args.positions, args.reference)
    print(report(res, args.position))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
