"""Generate mode (header word 32, ``image.WORD_PROMPT_LEN``): the decoder feeds its own argmax back.

Positions 0..P-1 read the prompt; position t >= P reads the argmax of position t - 1 (lowest index on
ties, SPEC §4.5). The float golden model and the fixed-point model run the same loop (``greedy``), so
a chip run of a generate-mode image is checked token by token against the fixed-point model and
compared with torch's own greedy text.

    python -m nano_k3.greedy --prompt "def main(" --n 48    # fixed-point and float text, side by side

runs the trained image (nano_k3/trained/) in both models; ``make generate`` adds the chip.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .corpus import TRAINED_DIR, load_tokenizer
from .fixed import FixedModel
from .golden import GoldenModel
from .image import ParsedImage, read_image
from .weights import Weights


@dataclass(frozen=True)
class Decoded:
    logits: np.ndarray   # (positions, vocab): int32 (fixed) or float32 (golden)
    argmax: np.ndarray   # (positions,) int64
    tokens: np.ndarray   # (positions,) int64: the prompt, then the fed-back picks


def greedy(step: Callable, pick: Callable, prompt, positions: int) -> Decoded:
    """Run ``positions`` positions from a reset model: the prompt, then each previous position's pick."""
    tokens = [int(t) for t in prompt]
    if not 1 <= len(tokens) <= positions:
        raise ValueError(f"the prompt must hold 1..{positions} tokens (the positions), got {len(tokens)}")
    rows, picks = [], []
    for t in range(positions):
        if t >= len(tokens):
            tokens.append(picks[-1])
        rows.append(step(tokens[t]))
        picks.append(pick(rows[-1]))
    return Decoded(np.stack(rows), np.asarray(picks, np.int64), np.asarray(tokens, np.int64))


def fixed_greedy(weights: Weights, prompt, positions: int) -> Decoded:
    model = FixedModel(weights)
    model.reset()
    return greedy(model.step, lambda row: int(np.argmax(row)), prompt, positions)


def golden_greedy(weights: Weights, prompt, positions: int) -> Decoded:
    model = GoldenModel(weights)
    model.reset()
    return greedy(lambda t: model.step(t).numpy(), lambda row: int(np.argmax(row)), prompt, positions)


def fixed_outputs(parsed: ParsedImage) -> Decoded:
    """What the chip must produce for an image, in the image's mode (SPEC, or generate with word 32)."""
    lay = parsed.layout
    if lay.generates:
        return fixed_greedy(parsed.weights, parsed.tokens[:lay.prompt_len], lay.seq_len)
    logits, argmax = FixedModel(parsed.weights).forward_sequence(parsed.tokens)
    return Decoded(logits, argmax, parsed.tokens.astype(np.int64))


def first_difference(a, b) -> int | None:
    """First index where two token sequences differ (over their common length), or None."""
    diff = np.flatnonzero(np.asarray(a)[:len(b)] != np.asarray(b)[:len(a)])
    return int(diff[0]) if diff.size else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nano_k3.greedy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", required=True, help="text to continue")
    ap.add_argument("--n", type=int, default=48, help="tokens to generate")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tok = load_tokenizer()
    weights = read_image((TRAINED_DIR / "nano.bin").read_bytes()).weights
    prompt = tok.encode(args.prompt).ids
    positions = len(prompt) + args.n - 1          # the last position's argmax is the n-th new token
    if not prompt or positions > weights.cfg.max_seq:
        ap.error(f"the prompt has {len(prompt)} tokens; it needs 1 and at most "
                 f"{weights.cfg.max_seq + 1 - args.n} for {args.n} new tokens (max_seq {weights.cfg.max_seq})")
    runs = {"fixed-point": fixed_greedy(weights, prompt, positions), "float": golden_greedy(weights, prompt, positions)}
    for name, d in runs.items():
        new = d.argmax[len(prompt) - 1:]
        print(f"--- {name} ({len(new)} tokens)\n{args.prompt}{tok.decode(new.tolist())}")
    start = len(prompt) - 1
    where = first_difference(runs["fixed-point"].argmax[start:], runs["float"].argmax[start:])
    print("--- fixed-point and float agree on every token" if where is None else
          f"--- first disagreement at generated token {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
