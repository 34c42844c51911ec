"""The committed trained model (nano_k3/trained/, written by ``python -m nano_k3.train``)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nano_k3.config import NANO
from nano_k3.corpus import TRAINED_DIR, heldout_stream, load_tokenizer, text_sha256, read_modules, windows
from nano_k3.corpus import HELDOUT_MODULES, TRAIN_MODULES
from nano_k3.golden import GoldenModel
from nano_k3.image import check_image, read_image

REPORT = json.loads((TRAINED_DIR / "train.json").read_text())


@pytest.fixture(scope="module")
def parsed():
    return read_image((TRAINED_DIR / "nano.bin").read_bytes())


def test_committed_image_validates_as_a_nano_image(parsed):
    check = check_image((TRAINED_DIR / "nano.bin").read_bytes())
    assert check.ok, check.problems
    cfg = parsed.cfg
    assert (cfg.d_model, cfg.vocab, cfg.n_experts, cfg.group_size, cfg.layer_pattern) == \
        (NANO.d_model, NANO.vocab, NANO.n_experts, REPORT["image"]["group"], NANO.layer_pattern)
    assert parsed.layout.seq_len == REPORT["image"]["seq_len"]


def test_trained_scales_use_the_q3_12_range(parsed):
    """Trained groups differ from SPEC §11's uniform ones, but every scale and zero is a legal code."""
    for name, m in parsed.weights.mats.items():
        assert m.s.min() >= 1 and m.z.max() <= 15, name


def test_tokenizer_round_trip_and_image_tokens():
    tok = load_tokenizer()
    assert tok.get_vocab_size() == NANO.vocab
    text = "for i, x in enumerate(items):\n    print(f'{i}: {x!r}')\n"
    assert tok.decode(tok.encode(text).ids) == text
    ids = read_image((TRAINED_DIR / "nano.bin").read_bytes()).tokens
    assert len(tok.decode(ids.tolist())) > len(ids)           # held-out code, several characters a token


def test_int4_perplexity_matches_the_report(parsed):
    """Re-evaluate the committed image's float (INT4-dequantised) perplexity on the held-out text."""
    if text_sha256(read_modules(TRAIN_MODULES) + read_modules(HELDOUT_MODULES)) != REPORT["corpus"]["sha256"]:
        pytest.skip(f"this Python's stdlib differs from the corpus of train.json (Python {REPORT['corpus']['python']})")
    torch.set_num_threads(1)
    held = windows(heldout_stream(load_tokenizer()), NANO.max_seq + 1, REPORT["settings"]["eval_windows"])
    logits = GoldenModel(parsed.weights).run(torch.from_numpy(held[:, :-1])).detach()   # (n, T, vocab)
    nll = F.cross_entropy(logits.reshape(-1, NANO.vocab), torch.from_numpy(held[:, 1:]).reshape(-1))
    print(f"INT4 float perplexity {math.exp(float(nll)):.4f}, train.json {REPORT['perplexity']['int4_float']}")
    assert math.exp(float(nll)) == pytest.approx(REPORT["perplexity"]["int4_float"], rel=1e-4)
    assert np.isfinite(float(nll))
