"""The training corpus and tokenizer of the trained nano-K3: Python's own standard library, offline.

Every machine that runs this project has the standard library's source files, so the corpus needs no
download: a fixed list of modules (``TRAIN_MODULES``, ``HELDOUT_MODULES``) read from the running
interpreter's ``sysconfig`` stdlib folder. Their bytes can differ between Python versions; the
sha256 of the text is recorded beside the trained image so a different corpus is visible.

Tokenizer: a byte-level BPE of Hugging Face ``tokenizers`` with exactly ``vocab`` entries (256 byte
symbols plus merges), trained on the training modules only. Byte-level means every text encodes and
decodes back to itself, and no id is reserved: the model's whole vocabulary is text.
"""
from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

# Modules whose file is a plain ``<name>.py`` in CPython 3.11 .. 3.13 (no shim, no package).
TRAIN_MODULES = (
    "argparse", "ast", "base64", "calendar", "cmd", "code", "codecs", "configparser", "contextlib", "copy",
    "csv", "dataclasses", "difflib", "enum", "fnmatch", "functools", "gettext", "glob", "gzip", "hmac",
    "inspect", "ipaddress", "locale", "netrc", "numbers", "operator", "optparse", "os", "pickle", "pprint",
    "queue", "random", "reprlib", "selectors", "secrets", "shutil", "socket", "statistics", "string",
    "subprocess", "tarfile", "tempfile", "threading", "tokenize", "trace", "traceback", "types", "typing",
    "uuid", "warnings", "weakref", "colorsys", "keyword", "linecache",
)
HELDOUT_MODULES = ("heapq", "bisect", "fractions", "textwrap", "shlex", "sched")
TRAINED_DIR = Path(__file__).parent / "trained"   # tokenizer.json, nano.bin, train.json of the trained model


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_modules(names: tuple[str, ...], root: Path | None = None) -> list[str]:
    """The source text of each module, in order; a missing file is an error, never skipped."""
    root = root or stdlib_dir()
    texts = []
    for name in names:
        path = root / f"{name}.py"
        if not path.is_file():
            raise FileNotFoundError(f"corpus module {name!r} not found at {path} (stdlib folder {root})")
        texts.append(path.read_text(encoding="utf-8"))
    return texts


def train_tokenizer(texts: list[str], vocab: int) -> Tokenizer:
    """Byte-level BPE with exactly ``vocab`` ids (deterministic for the same texts)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if tok.get_vocab_size() != vocab:
        raise ValueError(f"tokenizer has {tok.get_vocab_size()} ids, the model's vocabulary is {vocab}")
    return tok


def encode(tok: Tokenizer, texts: list[str]) -> np.ndarray:
    """All texts encoded and concatenated: (n,) int64 ids."""
    return np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(texts)])


def text_sha256(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
    return h.hexdigest()


@dataclass(frozen=True)
class Corpus:
    """Token streams of the training and held-out modules, and the tokenizer that made them."""

    tokenizer: Tokenizer
    train: np.ndarray    # (n_train,) int64
    heldout: np.ndarray  # (n_heldout,) int64
    sha256: str          # of the training and held-out texts, in order
    chars: int


def build_corpus(vocab: int, root: Path | None = None) -> Corpus:
    train_texts, held_texts = read_modules(TRAIN_MODULES, root), read_modules(HELDOUT_MODULES, root)
    tok = train_tokenizer(train_texts, vocab)
    return Corpus(tokenizer=tok, train=encode(tok, train_texts), heldout=encode(tok, held_texts),
                  sha256=text_sha256(train_texts + held_texts), chars=sum(map(len, train_texts + held_texts)))


def load_tokenizer(folder: Path = TRAINED_DIR) -> Tokenizer:
    """The committed tokenizer of the trained image (written by ``python -m nano_k3.train``)."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer at {path}: run python -m nano_k3.train")
    return Tokenizer.from_file(str(path))


def heldout_stream(tok: Tokenizer, root: Path | None = None) -> np.ndarray:
    """The held-out modules encoded with ``tok``: (n,) int64."""
    return encode(tok, read_modules(HELDOUT_MODULES, root))


def windows(stream: np.ndarray, length: int, count: int) -> np.ndarray:
    """``count`` evenly spaced windows of ``length`` tokens from a stream: (count, length) int64."""
    if len(stream) < length:
        raise ValueError(f"a stream of {len(stream)} tokens has no window of {length}")
    starts = np.linspace(0, len(stream) - length, count).astype(np.int64)  # (count,)
    return np.stack([stream[s:s + length] for s in starts])
