"""The stdlib corpus and its byte-level BPE tokenizer (nano_k3/corpus.py)."""
from __future__ import annotations

import numpy as np
import pytest

from nano_k3.config import NANO
from nano_k3.corpus import HELDOUT_MODULES, TRAIN_MODULES, read_modules, train_tokenizer, windows


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(read_modules(TRAIN_MODULES[:8]), NANO.vocab)


def test_vocabulary_is_exactly_the_models(tokenizer):
    assert tokenizer.get_vocab_size() == NANO.vocab


@pytest.mark.parametrize("text", [read_modules(HELDOUT_MODULES[:1])[0],
                                  "def f(x):\n\treturn x ** 2  # ünïcödé, 中文, emoji 🐍\r\n", ""])
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text).ids
    assert all(0 <= i < NANO.vocab for i in ids)
    assert tokenizer.decode(ids) == text


def test_bpe_compresses_code(tokenizer):
    text = read_modules(HELDOUT_MODULES[:1])[0]
    n = len(tokenizer.encode(text).ids)
    print(f"{len(text)} chars -> {n} tokens")
    assert n < 0.6 * len(text.encode("utf-8"))     # merges learnt, not bytes only


def test_training_is_deterministic(tokenizer):
    again = train_tokenizer(read_modules(TRAIN_MODULES[:8]), NANO.vocab)
    assert again.to_str() == tokenizer.to_str()


def test_missing_module_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_module"):
        read_modules(("no_such_module",), tmp_path)


def test_windows_are_evenly_spaced_slices():
    stream = np.arange(100)
    w = windows(stream, 10, 4)
    assert w.shape == (4, 10) and w[0, 0] == 0 and w[-1, -1] == 99
    assert (np.diff(w, axis=1) == 1).all()
    with pytest.raises(ValueError, match="no window"):
        windows(stream[:5], 10, 1)
