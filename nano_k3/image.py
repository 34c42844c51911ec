"""The memory image (format version 1, little-endian): build, parse, validate, fill outputs.

SPEC_NANO_KPU.md §4 is the contract. Regions, each 16-byte aligned, in this order (§4):
header (256 B) | descriptor table | tensors (canonical order) | token ids | logits | argmax |
status block (16 B) | scratch. The memory the chip sees is the whole image including the zeroed
scratch region, so ``Image.data`` and the written file include it.

``python -m nano_k3.image build --config nano --seed 1 --seq-len 48 -o nano.bin`` writes one,
``python -m nano_k3.image show FILE`` and ``... validate FILE`` read one (nano_k3/image_cli.py).
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import ModelConfig
from .int4 import pack_nibbles, unpack_nibbles
from .tensors import MatSpec, tensor_specs
from .weights import IntMat, Weights, mat_shapes

MAGIC = 0x4B444143          # "KDAC" (SPEC §4.1 word 0)
FORMAT_VERSION = 1
HEADER_WORDS = 64           # 256 bytes, words 33..63 are zero (32: WORD_PROMPT_LEN)
HEADER_BYTES = 4 * HEADER_WORDS
DESC_BYTES = 16             # (name hash, addr, length, aux), four uint32 (SPEC §4.2)
ALIGN = 16                  # every region and tensor starts on a 16-byte boundary
STATUS_BYTES = 16
STATUS_DONE = 0x600DD00D    # first status word after a finished run (SPEC §4.5)
SCRATCH_MIN = 1 << 20

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1

# Header words that carry ModelConfig fields (SPEC §4.1); word 21 (layer bitmap) is handled apart.
HEADER_CFG_WORDS = {
    2: "n_layers", 3: "d_model", 4: "mla_heads", 5: "mla_dk", 6: "mla_dr", 7: "mla_dv",
    8: "mla_dc", 9: "kda_heads", 10: "kda_dh", 11: "conv_k", 12: "n_experts", 13: "top_k",
    14: "n_shared", 15: "d_ff", 16: "res_block", 17: "vocab", 18: "max_seq", 20: "group_size",
}
# Header words that carry ImageLayout fields (word 31 repeats seq_len).
HEADER_LAYOUT_WORDS = {
    19: "seq_len", 22: "n_records", 23: "desc_addr", 24: "tokens_addr", 25: "logits_addr",
    26: "argmax_addr", 27: "status_addr", 28: "scratch_addr", 29: "scratch_size",
    30: "logits_stride", 31: "seq_len",
}
WORD_MAGIC, WORD_VERSION, WORD_BITMAP, WORD_POSITIONS = 0, 1, 21, 31
# Extension of SPEC §4.1 (issue 19): generate mode. Word 32 = prompt length P. P = 0 (every SPEC image) is
# the SPEC's behaviour: every position's token comes from the token array. With 1 <= P <= seq_len,
# positions 0..P-1 take the prompt from the token array and every later position t takes the argmax of
# position t - 1, which the chip also writes into token array entry t before position t reads it, so the
# host reads the generated text back from the token area. Words 33..63 stay 0.
WORD_PROMPT_LEN = 32
HEADER_USED_WORDS = WORD_PROMPT_LEN + 1     # words 0..32 carry values, the rest are zero
# Every used header word by the name of what it holds (the chip's header registers are read by name).
HEADER_WORD = {"magic": WORD_MAGIC, "version": WORD_VERSION, "layer_bitmap": WORD_BITMAP,
               **{f: i for i, f in HEADER_CFG_WORDS.items()},
               **{f: i for i, f in HEADER_LAYOUT_WORDS.items() if i != WORD_POSITIONS}, "positions": WORD_POSITIONS,
               "prompt_len": WORD_PROMPT_LEN}

ROUTED_EXPERT = re.compile(r"\.moe\.e\d+\.")  # "L0.moe.e3.g": routed, not the shared expert


class ImageError(ValueError):
    """A malformed memory image; the message says what is wrong and where."""


def round_up(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


def name_hash(name: str) -> int:
    """Low 32 bits of the 64-bit FNV-1a hash of the UTF-8 name (SPEC §4.2)."""
    h = FNV_OFFSET
    for byte in name.encode("utf-8"):
        h = ((h ^ byte) * FNV_PRIME) & _MASK64
    return h & 0xFFFFFFFF


def scratch_size(cfg: ModelConfig) -> int:
    """Header word 29 (SPEC §4.1): room for the MLA KV cache and the KDA state + conv history."""
    kv = cfg.max_seq * cfg.mla_heads * (cfg.mla_dk + cfg.mla_dr + cfg.mla_dv) * 2 * cfg.n_mla_layers
    st = (cfg.kda_heads * cfg.kda_dh ** 2 + 3 * (cfg.conv_k - 1) * cfg.kda_width) * 4 * cfg.n_kda_layers
    return round_up(max(SCRATCH_MIN, 8 * (kv + st)))


def logits_stride(cfg: ModelConfig) -> int:
    """Header word 30: bytes per logits row."""
    return round_up(cfg.vocab * 4)


# ---------------------------------------------------------------------------------------------
# Records: what each descriptor holds and how it is encoded (SPEC §4.3, §4.4)
# ---------------------------------------------------------------------------------------------

PARAM_DTYPES = {"norm": "<i2", "q4_11": "<i2", "uq8_8": "<u2"}


@dataclass(frozen=True)
class RecordSpec:
    """One descriptor record: the stored array's shape and little-endian dtype."""

    name: str                 # full record name, e.g. "L0.kda.q.s"
    tensor: str               # logical tensor, e.g. "L0.kda.q"
    part: str                 # "q", "s", "z" or "param"
    emb: bool
    shape: tuple[int, ...]    # stored array shape (bytes for "q")
    dtype: str
    aux: int

    @property
    def length(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


def _mat_records(cfg: ModelConfig, spec: MatSpec) -> list[RecordSpec]:
    q_shape, sz_shape = mat_shapes(cfg, spec)
    # Stored .q: standard (fan_in/2, fan_out), emb (vocab, d_model/2): nibble pairs along fan_in.
    stored_q = (q_shape[0], q_shape[1] // 2) if spec.emb else (q_shape[0] // 2, q_shape[1])
    return [
        RecordSpec(spec.name + ".q", spec.name, "q", spec.emb, stored_q, "u1", spec.fan_in),
        RecordSpec(spec.name + ".s", spec.name, "s", spec.emb, sz_shape, "<i2", 0),
        RecordSpec(spec.name + ".z", spec.name, "z", spec.emb, sz_shape, "u1", 0),
    ]


def record_specs(cfg: ModelConfig) -> list[RecordSpec]:
    """Every descriptor record in canonical order (SPEC §4.2): a triple per matmul, one per param."""
    out: list[RecordSpec] = []
    for spec in tensor_specs(cfg):
        if isinstance(spec, MatSpec):
            out += _mat_records(cfg, spec)
        else:
            out.append(RecordSpec(spec.name, spec.name, "param", False, spec.shape, PARAM_DTYPES[spec.fmt], 0))
    return out


def _pack_q(q: np.ndarray, emb: bool) -> np.ndarray:
    """Unpacked nibbles -> stored bytes; emb pairs elements 2j/2j+1 of a token row (SPEC §4.3)."""
    return np.ascontiguousarray(pack_nibbles(q.T).T) if emb else pack_nibbles(q)


def _unpack_q(b: np.ndarray, emb: bool) -> np.ndarray:
    return np.ascontiguousarray(unpack_nibbles(b.T).T) if emb else unpack_nibbles(b)


def _checked(rec: RecordSpec, arr: np.ndarray, expected_shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    arr = np.asarray(arr)
    if arr.shape != tuple(expected_shape):
        raise ValueError(f"{rec.name}: shape {arr.shape}, expected {tuple(expected_shape)}")
    if arr.size and (arr.min() < lo or arr.max() > hi):
        raise ValueError(f"{rec.name}: values {arr.min()}..{arr.max()} outside {lo}..{hi}")
    return arr


def _dtype_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def encode_record(rec: RecordSpec, weights: Weights) -> bytes:
    """The stored bytes of one record, after shape and range checks."""
    if rec.part == "param":
        arr = _checked(rec, weights.params[rec.tensor], rec.shape, *_dtype_range(rec.dtype))
        return arr.astype(rec.dtype).tobytes()
    mat = weights.mats[rec.tensor]
    if rec.part == "q":
        rows, cols = rec.shape
        unpacked_shape = (rows, 2 * cols) if rec.emb else (2 * rows, cols)
        return _pack_q(_checked(rec, mat.q, unpacked_shape, 0, 15), rec.emb).tobytes()
    lo, hi = (0, 15) if rec.part == "z" else _dtype_range(rec.dtype)
    return _checked(rec, getattr(mat, rec.part), rec.shape, lo, hi).astype(rec.dtype).tobytes()


def record_values(rec: RecordSpec, blob: bytes) -> np.ndarray:
    """The values one record holds: unpacked nibbles for ``.q``, the stored integers otherwise."""
    arr = np.frombuffer(blob, rec.dtype).reshape(rec.shape)
    return _unpack_q(arr, rec.emb) if rec.part == "q" else arr


def decode_records(cfg: ModelConfig, records: list[RecordSpec], blobs: list[bytes]) -> Weights:
    """Stored bytes of every record -> Weights (inverse of ``encode_record``)."""
    arrays = {rec.name: record_values(rec, blob) for rec, blob in zip(records, blobs)}
    mats, params = {}, {}
    for rec in records:
        if rec.part == "param":
            params[rec.tensor] = arrays[rec.name].astype(rec.dtype.lstrip("<"))
        elif rec.part == "q":
            mats[rec.tensor] = IntMat(
                q=arrays[rec.name],
                s=arrays[rec.tensor + ".s"].astype(np.int16),
                z=arrays[rec.tensor + ".z"].astype(np.uint8),
            )
    return Weights(cfg=cfg, mats=mats, params=params)


# ---------------------------------------------------------------------------------------------
# Weight byte counts (SPEC §6.1, §8): the testbench's dense-byte floor and the read roofline
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WeightBytes:
    """Unpadded tensor bytes: dense (everything but routed experts and emb), experts, emb."""

    dense: int
    experts: int            # all routed experts of all layers
    embedding: int
    expert: int             # one routed expert (g, u, d)
    emb_row: int            # one token row of emb (.q row + its .s and .z entries)
    active_per_token: int   # dense + top_k experts per layer + one embedding row

    @property
    def total(self) -> int:
        return self.dense + self.experts + self.embedding


def weight_bytes(cfg: ModelConfig) -> WeightBytes:
    recs = record_specs(cfg)
    emb = sum(r.length for r in recs if r.emb)
    experts = sum(r.length for r in recs if ROUTED_EXPERT.search(r.name))
    dense = sum(r.length for r in recs) - emb - experts
    expert = experts // (cfg.n_layers * cfg.n_experts)
    emb_row = emb // cfg.vocab
    active = dense + cfg.n_layers * cfg.top_k * expert + emb_row
    return WeightBytes(dense=dense, experts=experts, embedding=emb, expert=expert, emb_row=emb_row,
                       active_per_token=active)


# ---------------------------------------------------------------------------------------------
# Layout: every address of an image (SPEC §4.1, §4.2)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Descriptor:
    name: str
    addr: int
    length: int
    aux: int

    @property
    def hash(self) -> int:
        return name_hash(self.name)


@dataclass(frozen=True)
class ImageLayout:
    """Every address of one image; ``header_words()`` is the 64-word header (SPEC §4.1)."""

    cfg: ModelConfig
    seq_len: int
    descriptors: tuple[Descriptor, ...]
    desc_addr: int
    tokens_addr: int
    logits_addr: int
    argmax_addr: int
    status_addr: int
    scratch_addr: int
    scratch_size: int
    logits_stride: int
    prompt_len: int = 0       # header word 32 (generate mode, see WORD_PROMPT_LEN); 0 = SPEC behaviour

    @property
    def generates(self) -> bool:
        return self.prompt_len > 0

    @property
    def n_records(self) -> int:
        return len(self.descriptors)

    @property
    def size(self) -> int:
        """Memory size in bytes: the image including scratch, rounded up to 16 (SPEC §3)."""
        return round_up(self.scratch_addr + self.scratch_size)

    def descriptor(self, name: str) -> Descriptor:
        for d in self.descriptors:
            if d.name == name:
                return d
        raise KeyError(f"no record named {name!r}")

    def header_words(self) -> np.ndarray:
        words = np.zeros(HEADER_WORDS, dtype=np.uint32)  # (64,)
        words[WORD_MAGIC], words[WORD_VERSION] = MAGIC, FORMAT_VERSION
        for i, field in HEADER_CFG_WORDS.items():
            words[i] = getattr(self.cfg, field)
        words[WORD_BITMAP] = self.cfg.layer_bitmap
        for i, field in HEADER_LAYOUT_WORDS.items():
            words[i] = getattr(self, field)
        words[WORD_PROMPT_LEN] = self.prompt_len
        return words


def plan_layout(cfg: ModelConfig, seq_len: int, prompt_len: int = 0) -> ImageLayout:
    """The canonical layout: every region packed in order, each start rounded up to 16."""
    if not 1 <= seq_len <= cfg.max_seq:
        raise ValueError(f"seq_len must be in 1..{cfg.max_seq}, got {seq_len}")
    if not 0 <= prompt_len <= seq_len:
        raise ValueError(f"prompt_len must be in 0..seq_len={seq_len} (0 = no generate mode), got {prompt_len}")
    recs = record_specs(cfg)
    desc_addr = HEADER_BYTES
    addr = round_up(desc_addr + DESC_BYTES * len(recs))
    descriptors = []
    for rec in recs:
        descriptors.append(Descriptor(rec.name, addr, rec.length, rec.aux))
        addr = round_up(addr + rec.length)
    stride = logits_stride(cfg)
    tokens_addr = addr
    logits_addr = round_up(tokens_addr + 4 * seq_len)
    argmax_addr = round_up(logits_addr + stride * seq_len)
    status_addr = round_up(argmax_addr + 4 * seq_len)
    scratch_addr = round_up(status_addr + STATUS_BYTES)
    return ImageLayout(cfg=cfg, seq_len=seq_len, descriptors=tuple(descriptors), desc_addr=desc_addr,
                       tokens_addr=tokens_addr, logits_addr=logits_addr, argmax_addr=argmax_addr,
                       status_addr=status_addr, scratch_addr=scratch_addr,
                       scratch_size=scratch_size(cfg), logits_stride=stride, prompt_len=prompt_len)


# ---------------------------------------------------------------------------------------------
# Building and writing
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Image:
    layout: ImageLayout
    data: bytes  # the whole memory, layout.size bytes

    def with_outputs(self, logits: np.ndarray, argmax: np.ndarray | None = None,
                     status: int = STATUS_DONE) -> "Image":
        return Image(self.layout, write_outputs(self.data, logits, argmax, status))

    def write(self, path: str | Path) -> None:
        Path(path).write_bytes(self.data)


def _put(buf: bytearray, addr: int, blob: bytes) -> None:
    buf[addr:addr + len(blob)] = blob


def build_image(weights: Weights, tokens: np.ndarray, prompt_len: int = 0) -> Image:
    """Header, descriptors, tensors and tokens; outputs, status and scratch zeroed (SPEC §4).

    ``prompt_len`` > 0 makes a generate-mode image (header word 32, ``WORD_PROMPT_LEN``): only
    tokens[:prompt_len] are read, the rest of the token array is overwritten by the run."""
    cfg = weights.cfg
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.size and (tokens.min() < 0 or tokens.max() >= cfg.vocab):
        got = f", range {tokens.min()}..{tokens.max()}" if tokens.size else ""
        raise ValueError(f"tokens must be a 1-D array of ids in 0..{cfg.vocab - 1}, got shape {tokens.shape}{got}")
    layout = plan_layout(cfg, len(tokens), prompt_len)
    buf = bytearray(layout.size)
    _put(buf, 0, layout.header_words().astype("<u4").tobytes())
    table = np.array([[d.hash, d.addr, d.length, d.aux] for d in layout.descriptors], dtype="<u4")  # (n, 4)
    _put(buf, layout.desc_addr, table.tobytes())
    for rec, desc in zip(record_specs(cfg), layout.descriptors):
        _put(buf, desc.addr, encode_record(rec, weights))
    _put(buf, layout.tokens_addr, tokens.astype("<u4").tobytes())
    return Image(layout, bytes(buf))


def write_image(path: str | Path, weights: Weights, tokens: np.ndarray) -> Image:
    image = build_image(weights, tokens)
    image.write(path)
    return image


# ---------------------------------------------------------------------------------------------
# Reading and validating
# ---------------------------------------------------------------------------------------------

def _words(data: bytes, addr: int, count: int) -> np.ndarray:
    return np.frombuffer(data, dtype="<u4", count=count, offset=addr)


@dataclass(frozen=True)
class RowCheck:
    """One stored descriptor (SPEC §4.2) beside the record the format expects at its index."""

    index: int
    record: RecordSpec        # what belongs at this index
    hash: int
    addr: int
    length: int
    aux: int
    readable: bool            # its bytes lie inside the file
    problems: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"descriptor {self.index} ({self.record.name})"


@dataclass(frozen=True)
class RegionCheck:
    """The descriptor table or one region after the tensors (SPEC §4.1 words 23..28)."""

    key: str                  # "table", "tokens", "logits", "argmax", "status" or "scratch"
    what: str                 # e.g. "token array (word 24)"
    addr: int
    length: int
    readable: bool
    problem: str | None


# key, description, header field of the address, length in bytes from the header's layout fields
REGIONS = (
    ("tokens", "token array (word 24)", "tokens_addr", lambda f: 4 * f["seq_len"]),
    ("logits", "logits region (word 25)", "logits_addr", lambda f: f["logits_stride"] * f["seq_len"]),
    ("argmax", "argmax region (word 26)", "argmax_addr", lambda f: 4 * f["seq_len"]),
    ("status", "status block (word 27)", "status_addr", lambda f: STATUS_BYTES),
    ("scratch", "scratch (word 28)", "scratch_addr", lambda f: f["scratch_size"]),
)


@dataclass(frozen=True, eq=False)
class ImageCheck:
    """Every check of an image, its problems collected in order instead of raised (``check_image``).

    A problem that leaves the rest unreadable (a file shorter than the header, a wrong magic or version,
    header words that describe no model, a descriptor table outside the file or of the wrong length)
    ends the checks there, so ``cfg``, ``rows`` and ``regions`` may be missing."""

    file_len: int
    words: np.ndarray | None            # (64,) header words; None if the file is shorter than the header
    cfg: ModelConfig | None
    rows: tuple[RowCheck, ...]
    regions: tuple[RegionCheck, ...]
    problems: tuple[str, ...]
    layout: ImageLayout | None          # set when header, descriptor table and regions are sound

    @property
    def ok(self) -> bool:
        return not self.problems

    def region(self, key: str) -> RegionCheck | None:
        return next((r for r in self.regions if r.key == key), None)

    def raise_first(self) -> None:
        """Raise ImageError with the first problem, if there is one."""
        if self.problems:
            more = len(self.problems) - 1
            tail = f" (and {more} more: python -m nano_k3.image validate FILE lists them)" if more else ""
            raise ImageError(self.problems[0] + tail)


class _Problems(list):
    """Problems in the order found. Once one region lies past the end of the file, the regions after it
    that do too are only counted: a truncated file is one problem and a count, not one per tensor."""

    def __init__(self, file_len: int):
        super().__init__()
        self.file_len = file_len
        self.beyond: list[str] = []   # regions outside the file after the first one
        self.outside_seen = False

    def region(self, where: str, addr: int, length: int, prev_end: int) -> str | None:
        """Alignment, order and bounds of one region; records and returns its problem (without ``where``)."""
        if addr % ALIGN:
            problem = f"address {addr} (0x{addr:x}) is not {ALIGN}-byte aligned"
        elif addr < prev_end:
            problem = f"address {addr} overlaps the previous region, which ends at {prev_end}"
        elif addr + length > self.file_len:
            problem = f"bytes {addr}..{addr + length} lie outside the {self.file_len}-byte file"
            if self.outside_seen:
                self.beyond.append(where)
                return problem
            self.outside_seen = True
        else:
            return None
        self.append(f"{where}: {problem}")
        return problem

    def close_truncation(self, image_size: int) -> None:
        if self.beyond:
            cut = (f": the file is truncated (its header makes the image {image_size} bytes)"
                   if self.file_len < image_size else "")
            self.append(f"{len(self.beyond)} more regions, {self.beyond[0]} to {self.beyond[-1]}, lie outside "
                        f"the {self.file_len}-byte file too{cut}")


def _header_config(words: np.ndarray) -> ModelConfig:
    fields = {field: int(words[i]) for i, field in HEADER_CFG_WORDS.items()}
    n_layers, bitmap = fields["n_layers"], int(words[WORD_BITMAP])
    if n_layers > 32 or bitmap >> n_layers:
        raise ImageError(f"header word 21: layer bitmap 0x{bitmap:x} has bits beyond n_layers={n_layers}")
    pattern = "".join("F" if bitmap >> i & 1 else "L" for i in range(n_layers))
    try:
        return ModelConfig(name="image", layer_pattern=pattern, **fields)
    except ValueError as e:
        raise ImageError(f"header words 2..21 describe an invalid model: {e}") from None


def _word_problem(words: np.ndarray, i: int, expected: int, what: str) -> str | None:
    if int(words[i]) != expected:
        return f"header word {i} ({what}) = {int(words[i])}, expected {expected}"
    return None


def _check_header(words: np.ndarray, problems: _Problems) -> ModelConfig | None:
    """Header words 0..63 (SPEC §4.1); None when the rest of the file cannot be interpreted."""
    if int(words[WORD_MAGIC]) != MAGIC:
        problems.append(f"bad magic at word 0: 0x{int(words[WORD_MAGIC]):08x}, expected 0x{MAGIC:08x} ('KDAC')")
        return None
    if problem := _word_problem(words, WORD_VERSION, FORMAT_VERSION, "format version"):
        problems.append(problem)
        return None
    try:
        cfg = _header_config(words)
    except ImageError as e:
        problems.append(str(e))
        return None
    seq_len = int(words[19])
    if not 1 <= seq_len <= cfg.max_seq:
        problems.append(f"header word 19: seq_len {seq_len} outside 1..{cfg.max_seq} (max_seq)")
    for i, expected, what in ((31, seq_len, "number of positions, must repeat word 19"),
                              (30, logits_stride(cfg), "logits row stride = round_up_16(vocab*4)"),
                              (29, scratch_size(cfg), "scratch size")):
        if problem := _word_problem(words, i, expected, what):
            problems.append(problem)
    if int(words[WORD_PROMPT_LEN]) > seq_len:
        problems.append(f"header word 32: prompt length {int(words[WORD_PROMPT_LEN])} (generate mode) exceeds "
                        f"seq_len {seq_len}")
    reserved = [i for i in range(HEADER_USED_WORDS, HEADER_WORDS) if words[i]]
    if reserved:
        problems.append(f"header words 33..63 must be 0; word {reserved[0]} = 0x{int(words[reserved[0]]):x}"
                        + (f" and {len(reserved) - 1} more are not" if len(reserved) > 1 else ""))
    return cfg


def _check_rows(data: bytes, cfg: ModelConfig, desc_addr: int, end: int,
                problems: _Problems) -> tuple[list[RowCheck], int]:
    """Every descriptor against its record (SPEC §4.2): name hash, length, aux, alignment, order, bounds."""
    recs = record_specs(cfg)
    table = _words(data, desc_addr, 4 * len(recs)).reshape(len(recs), 4)  # (n, 4)
    rows = []
    for i, (rec, (h, addr, length, aux)) in enumerate(zip(recs, table.tolist())):
        where, found = f"descriptor {i} ({rec.name})", []
        if h != name_hash(rec.name):
            found.append(f"name hash 0x{h:08x} does not match tensor {rec.name!r} "
                         f"(expected 0x{name_hash(rec.name):08x})")
        if length != rec.length:
            found.append(f"length {length}, expected {rec.length} for shape {rec.shape}")
        if aux != rec.aux:
            found.append(f"aux {aux}, expected {rec.aux}")
        problems.extend(f"{where}: {p}" for p in found)
        if region := problems.region(where, addr, length, end):
            found.append(region)
        readable = addr + length <= problems.file_len
        end = max(end, addr + length) if readable else end
        rows.append(RowCheck(i, rec, h, addr, length, aux, readable, tuple(found)))
    return rows, end


def _id_problem(data: bytes, addr: int, n: int, vocab: int) -> str | None:
    ids = _words(data, addr, n)  # (n,)
    if ids.size and ids.max() >= vocab:
        p = int(np.argmax(ids >= vocab))
        return f"position {p} holds id {int(ids[p])}, vocab is {vocab}"
    return None


def _value_problems(data: bytes, cfg: ModelConfig, rows: list[RowCheck], regions: list[RegionCheck],
                    inputs: bool, outputs: bool) -> list[str]:
    """Inputs: zero points in 0..15 (SPEC §4.3) and token ids below vocab; outputs: argmax ids below vocab
    (§4.5). Only records and regions that lie inside the file are read."""
    problems = []
    for row in rows if inputs else ():
        if row.record.part == "z" and row.readable and row.length == row.record.length:
            z = record_values(row.record, data[row.addr:row.addr + row.length]).ravel()
            bad = np.flatnonzero(z > 15)
            if bad.size:
                problems.append(f"{row.where}: zero point {int(z[bad[0]])} at element {int(bad[0])} is outside "
                                f"0..15" + (f" ({bad.size} such elements)" if bad.size > 1 else ""))
    id_regions = ("tokens",) * inputs + ("argmax",) * outputs
    for region in regions:
        if region.key in id_regions and region.readable:
            if problem := _id_problem(data, region.addr, region.length // 4, cfg.vocab):
                problems.append(f"{region.what}: {problem}")
    return problems


def check_image(data: bytes, inputs: bool = True, outputs: bool = True) -> ImageCheck:
    """Check an image against SPEC §4, collecting every problem: header words (§4.1), each descriptor's
    name hash, length, aux, alignment, order and bounds (§4.2), the regions after the tensors, and, with
    ``inputs``, zero points and token ids, with ``outputs``, argmax ids (§4.3, §4.5)."""
    problems = _Problems(len(data))
    if len(data) < HEADER_BYTES:
        problems.append(f"truncated file: {len(data)} bytes, the header alone needs {HEADER_BYTES}")
        return ImageCheck(len(data), None, None, (), (), tuple(problems), None)
    words = _words(data, 0, HEADER_WORDS).copy()  # (64,)
    cfg = _check_header(words, problems)

    def stop(rows=(), regions=()) -> ImageCheck:
        return ImageCheck(len(data), words, cfg, tuple(rows), tuple(regions), tuple(problems), None)

    if cfg is None:
        return stop()
    fields = {f: int(words[i]) for i, f in HEADER_LAYOUT_WORDS.items()}
    n_records = fields.pop("n_records")
    what = "descriptor table (word 23)"
    problem = problems.region(what, fields["desc_addr"], DESC_BYTES * n_records, HEADER_BYTES)
    table = RegionCheck("table", what, fields["desc_addr"], DESC_BYTES * n_records,
                        fields["desc_addr"] + DESC_BYTES * n_records <= len(data), problem)
    if not table.readable:
        return stop(regions=[table])
    # Each routed expert owns 9 records; checked first so a corrupt E cannot make the catalogue huge.
    if 9 * cfg.n_experts * cfg.n_layers > n_records:
        problems.append(f"header word 12: {cfg.n_experts} experts x {cfg.n_layers} layers need more "
                        f"than the {n_records} descriptors of word 22")
        return stop(regions=[table])
    if problem := _word_problem(words, 22, len(record_specs(cfg)), "descriptor count for this model"):
        problems.append(problem)
        return stop(regions=[table])

    rows, end = _check_rows(data, cfg, table.addr, table.addr + table.length, problems)
    regions = [table]
    for key, what, addr_field, length_of in REGIONS:
        addr, length = fields[addr_field], length_of(fields)
        problem = problems.region(what, addr, length, end)
        readable = addr + length <= len(data)
        end = max(end, addr + length) if readable else end
        regions.append(RegionCheck(key, what, addr, length, readable, problem))
    problems.close_truncation(round_up(fields["scratch_addr"] + fields["scratch_size"]))

    layout = None if problems else ImageLayout(
        cfg=cfg, descriptors=tuple(Descriptor(r.record.name, r.addr, r.length, r.aux) for r in rows),
        prompt_len=int(words[WORD_PROMPT_LEN]), **fields)
    problems.extend(_value_problems(data, cfg, rows, regions, inputs, outputs))
    return ImageCheck(len(data), words, cfg, tuple(rows), tuple(regions), tuple(problems), layout)


def read_layout(data: bytes) -> ImageLayout:
    """Parse and validate the header and descriptor table of any image (SPEC §4.1, §4.2)."""
    check = check_image(data, inputs=False, outputs=False)
    check.raise_first()
    return check.layout


@dataclass(frozen=True)
class Outputs:
    logits: np.ndarray  # (seq_len, vocab) int32
    argmax: np.ndarray  # (seq_len,) uint32
    status: int         # first word of the status block


@dataclass(frozen=True)
class ParsedImage:
    layout: ImageLayout
    weights: Weights
    tokens: np.ndarray  # (seq_len,) uint32
    outputs: Outputs

    @property
    def cfg(self) -> ModelConfig:
        return self.layout.cfg


def _read_outputs(data: bytes, layout: ImageLayout) -> Outputs:
    n, vocab = layout.seq_len, layout.cfg.vocab
    rows = np.frombuffer(data, dtype=np.uint8, count=n * layout.logits_stride, offset=layout.logits_addr)
    logits = rows.reshape(n, layout.logits_stride)[:, :4 * vocab].copy().view("<i4")  # (seq_len, vocab)
    argmax = _words(data, layout.argmax_addr, n).copy()                                  # (seq_len,)
    status = int(_words(data, layout.status_addr, 1)[0])
    return Outputs(logits=logits.astype(np.int32), argmax=argmax.astype(np.uint32), status=status)


def read_outputs(data: bytes) -> Outputs:
    """Logits rows, argmax words and the status word of an image (SPEC §4.5)."""
    return _read_outputs(data, read_layout(data))


def read_image(data: bytes) -> ParsedImage:
    """Parse any image: header -> ModelConfig (name "image"), records -> Weights, tokens, outputs."""
    check = check_image(data, outputs=False)
    check.raise_first()
    layout = check.layout
    recs = record_specs(layout.cfg)
    blobs = [data[d.addr:d.addr + d.length] for d in layout.descriptors]
    weights = decode_records(layout.cfg, recs, blobs)
    tokens = _words(data, layout.tokens_addr, layout.seq_len).copy()  # (seq_len,)
    return ParsedImage(layout=layout, weights=weights, tokens=tokens, outputs=_read_outputs(data, layout))


def write_outputs(data: bytes, logits: np.ndarray, argmax: np.ndarray | None = None,
                  status: int = STATUS_DONE) -> bytes:
    """A copy of the image with logits rows, argmax words and status written (SPEC §4.5).

    ``argmax`` defaults to the row-wise argmax of ``logits`` (lowest index wins ties).
    """
    layout = read_layout(data)
    n, vocab = layout.seq_len, layout.cfg.vocab
    logits = np.asarray(logits)
    if logits.shape != (n, vocab):
        raise ValueError(f"logits shape {logits.shape}, expected (seq_len, vocab) = {(n, vocab)}")
    if logits.size and (logits.min() < -2**31 or logits.max() >= 2**31):
        raise ValueError(f"logits {logits.min()}..{logits.max()} do not fit int32")
    argmax = np.argmax(logits, axis=1) if argmax is None else np.asarray(argmax)  # (seq_len,)
    if argmax.shape != (n,):
        raise ValueError(f"argmax shape {argmax.shape}, expected ({n},)")
    buf = bytearray(data)
    for p in range(n):
        _put(buf, layout.logits_addr + p * layout.logits_stride, logits[p].astype("<i4").tobytes())
    _put(buf, layout.argmax_addr, argmax.astype("<u4").tobytes())
    _put(buf, layout.status_addr, np.array([status], dtype="<u4").tobytes())
    return bytes(buf)


if __name__ == "__main__":
    from nano_k3.image_cli import main
    sys.exit(main())
