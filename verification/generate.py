"""`make generate PROMPT="..." N=48`: the chip writes text, checked against torch token by token.

    python -m verification.generate --rtl build/rtl --prompt "def main(" --n 48 [--profile long] [--out build/generate]

The trained image (nano_k3/trained/, ``python -m nano_k3.train``) in generate mode (header word 32 =
the prompt's length, nano_k3/image.py ``WORD_PROMPT_LEN``): the chip emitted by ``make rtl`` runs it
under cocotb + Verilator with every SPEC check (bit-exact logits, the token array it wrote, decoder
order, status, cosine). Then, side by side: the chip's text (its argmax words from the last prompt
position on), the fixed-point model's greedy text, the float (torch) model's greedy text, the chip's
tokens/s from its RTL cycles, and the first generated token where float and chip disagree; the same, with
the trained model's perplexity table (nano_k3/trained/train.json), in ``generate.json`` for the report
(flow/report.py). Exits 1 when a check fails or the chip's text differs from the fixed-point model's.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from nano_k3.corpus import TRAINED_DIR, load_tokenizer
from nano_k3.greedy import first_difference, fixed_greedy, golden_greedy
from nano_k3.image import plan_layout, read_image
from rtl_gen import read_config, read_filelist

from .chip_run import chip_sources
from .chip_sim import preset_of, simulate_with_progress
from .chip_tb import RunSpec, read_output_arrays
from .runner import SIM_ROOT

SIM_NAME = "chip-generate"


def _chip_picks(run: RunSpec, outputs: bytes, cfg) -> np.ndarray:
    """The argmax words of the run's output region (logits rows .. status block)."""
    lay = plan_layout(cfg, run.seq_len, len(run.prompt))
    mem = bytes(lay.logits_addr) + outputs          # read_output_arrays reads at the image's own addresses
    return read_output_arrays(mem, lay)[1].astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verification.generate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtl", type=Path, default=Path("build/rtl"))
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--n", type=int, default=48, help="tokens to generate")
    ap.add_argument("--profile", default="long", choices=("long", "short", "elastic"))
    ap.add_argument("--out", type=Path, default=Path("build/generate"), help="folder for generate.json")
    args = ap.parse_args(argv)
    cfg_json, _ = read_config(args.rtl / "config.json")
    if cfg_json["block"] != "chip":
        ap.error(f"{args.rtl} holds block {cfg_json['block']!r}; run `make rtl` (BLOCK=chip)")
    tok = load_tokenizer()
    weights = read_image((TRAINED_DIR / "nano.bin").read_bytes()).weights
    prompt = tok.encode(args.prompt).ids
    positions = len(prompt) + args.n - 1            # the last position's argmax is the n-th new token
    if not prompt or args.n < 1 or positions > weights.cfg.max_seq:
        ap.error(f"the prompt is {len(prompt)} tokens: {args.n} new tokens need a prompt of 1.."
                 f"{weights.cfg.max_seq + 1 - args.n} tokens (max_seq {weights.cfg.max_seq})")
    run = RunSpec(seq_len=positions, profile=args.profile, config=preset_of(cfg_json), trained=True,
                  prompt=tuple(prompt))
    print(f"generate: prompt {args.prompt!r} = {len(prompt)} tokens, {args.n} new; {positions} positions on "
          f"{cfg_json['top']} ({args.rtl}), profile {args.profile}; building and running the simulation", flush=True)
    sources = chip_sources(read_filelist(args.rtl / cfg_json["files"]["filelist"]))
    res = simulate_with_progress(SIM_NAME, sources, cfg_json["top"], [run], rand_reset=False, rtl_dir=args.rtl,
                                 tag="generate", build_dir=SIM_ROOT / SIM_NAME, count=(0, 1))
    report = res.reports.get(run.name)
    if report is None:
        print(f"generate: the simulation wrote no report; see {res.log}", file=sys.stderr)
        return 1
    start = len(prompt) - 1
    texts = {"chip": _chip_picks(run, res.outputs[run.name], run.model_config())[start:],
             "fixed-point": fixed_greedy(weights, prompt, positions).argmax[start:],
             "float (torch)": golden_greedy(weights, prompt, positions).argmax[start:]}
    for name, ids in texts.items():
        print(f"\n--- {name}: {len(ids)} tokens\n{args.prompt}{tok.decode(ids.tolist())}")
    failed = [c for c in report["checks"] if not c["passed"]]
    cycles = report["cycles"]
    print()
    for c in report["checks"]:
        print(f"  {'PASS' if c['passed'] else 'FAIL'}  {c['name']}: {c['message']}")
    if cycles:
        print(f"speed: {positions} positions in {cycles} cycles = {cycles / positions:.1f} cycles/token = "
              f"{run.clock_hz * positions / cycles:,.0f} tokens/s at {run.clock_hz / 1e6:.0f} MHz "
              "(prompt positions included)")
    chip_vs_fixed = first_difference(texts["chip"], texts["fixed-point"])
    chip_vs_float = first_difference(texts["chip"], texts["float (torch)"])
    print("chip vs fixed-point: " + ("identical, token for token" if chip_vs_fixed is None
                                     else f"DIFFER from generated token {chip_vs_fixed}"))
    print("chip vs float: " + (f"agree on all {args.n} tokens" if chip_vs_float is None
                               else f"first disagreement at generated token {chip_vs_float}"))
    ok = not failed and chip_vs_fixed is None
    result = {"command": f"make generate PROMPT={args.prompt!r} N={args.n}", "passed": ok, "prompt": args.prompt,
              "prompt_tokens": len(prompt), "n": args.n, "positions": positions, "profile": args.profile,
              "texts": {k: tok.decode(v.tolist()) for k, v in texts.items()},
              "tokens": {k: v.tolist() for k, v in texts.items()}, "cycles": cycles,
              "tokens_per_s": run.clock_hz * positions / cycles if cycles else None,
              "chip_vs_fixed_first_difference": chip_vs_fixed, "chip_vs_float_first_difference": chip_vs_float,
              "failed_checks": [c["name"] for c in failed],
              "perplexity": json.loads((TRAINED_DIR / "train.json").read_text())["perplexity"]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "generate.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out / 'generate.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
