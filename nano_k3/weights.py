"""Integer weights of a model: the raw values the image stores (SPEC §4.3, §4.4, §11)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ModelConfig
from .tensors import MatSpec, ParamSpec, tensor_specs


@dataclass(frozen=True)
class IntMat:
    """One packed-int4 weight, unpacked: nibbles ``q``, Q3.12 scales ``s``, zero points ``z``.

    Standard tensors: q (fan_in, fan_out), s/z (n_groups, fan_out), groups along fan_in.
    Embedding (token-major): q (vocab, d_model), s/z (vocab, n_groups), groups along d_model.
    """

    q: np.ndarray  # uint8 nibbles 0..15
    s: np.ndarray  # int16 Q3.12
    z: np.ndarray  # uint8 0..15


@dataclass
class Weights:
    cfg: ModelConfig
    mats: dict[str, IntMat]       # by logical name ("emb", "L0.kda.q", "head", ...)
    params: dict[str, np.ndarray]  # by name, int16 (uint16 for "uq8_8"), shaped as ParamSpec.shape

    def mat(self, name: str) -> IntMat:
        return self.mats[name]

    def param(self, name: str) -> np.ndarray:
        return self.params[name]


# ---------------------------------------------------------------------------------------------
# Seeded generator with the benchmark's value ranges (SPEC §11).
# ---------------------------------------------------------------------------------------------

NIBBLE_RANGE = (0, 15)
ZERO_RANGE = (6, 9)
# s0 = SCALE_NUM / (SCALE_DEN * sqrt(fan_in)) in Q3.12 (SPEC §11).
SCALE_NUM, SCALE_DEN = 4096.0, 4.61
# Tensors whose outputs feed sigmoid gates get a smaller scale (SPEC §11), by name without "L{i}.".
SCALE_DAMPING = {"kda.b": 2.0 ** (-6 / 4), "kda.f2": 2.0 ** (-6 / 4)}
# Inclusive integer ranges of the small parameters, by the last component of the name (SPEC §11).
PARAM_RANGES = {
    "w": (-2048, 2047),       # every norm offset (Q2.13)
    "proj": (-512, 511),      # residual-mix projections (Q4.11)
    "bias": (-512, 511),      # moe.bias (Q4.11)
    "qconv": (-1024, 1023),   # conv taps (Q4.11)
    "kconv": (-1024, 1023),
    "vconv": (-1024, 1023),
    "dtb": (-2048, 2047),     # kda.dtb (Q4.11)
    "A": (128, 1024),         # kda.A (unsigned Q8.8)
}
PARAM_DTYPES = {"norm": np.int16, "q4_11": np.int16, "uq8_8": np.uint16}


def _check_seed(seed: int) -> None:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def _local_name(name: str) -> str:
    """'L0.kda.b' -> 'kda.b'; top-level names are unchanged."""
    head, _, rest = name.partition(".")
    return rest if head[:1] == "L" and head[1:].isdigit() else name


def mat_shapes(cfg: ModelConfig, spec: MatSpec) -> tuple[tuple[int, int], tuple[int, int]]:
    """(q shape, s/z shape) of an unpacked IntMat (see the IntMat docstring, SPEC §4.3)."""
    groups = cfg.n_groups(spec.fan_in)
    if spec.emb:
        return (spec.fan_out, spec.fan_in), (spec.fan_out, groups)  # token-major (vocab, d_model)
    return (spec.fan_in, spec.fan_out), (groups, spec.fan_out)


def base_scale(spec: MatSpec) -> float:
    """s0 of SPEC §11 in Q3.12 units, damping included."""
    s0 = SCALE_NUM / (SCALE_DEN * np.sqrt(spec.fan_in))  # fan_in = d_model for emb
    return s0 * SCALE_DAMPING.get(_local_name(spec.name), 1.0)


def param_range(spec: ParamSpec) -> tuple[int, int]:
    key = spec.name.rsplit(".", 1)[-1]
    if key not in PARAM_RANGES:
        raise KeyError(f"no SPEC §11 value range for parameter {spec.name!r}")
    return PARAM_RANGES[key]


def generate(cfg: ModelConfig, seed: int) -> Weights:
    """Random integer weights drawn from the SPEC §11 ranges, deterministic per (cfg, seed).

    One generator, three passes: all nibbles, then all small parameters, then all scales and
    zero points. Only the last pass depends on the group size, so changing the group size keeps
    every nibble and parameter and redraws only scales and zeros.
    """
    _check_seed(seed)
    rng = np.random.default_rng(seed)
    specs = tensor_specs(cfg)
    mat_specs = [s for s in specs if isinstance(s, MatSpec)]
    param_specs = [s for s in specs if isinstance(s, ParamSpec)]

    nibbles = {}
    for spec in mat_specs:
        q_shape, _ = mat_shapes(cfg, spec)
        nibbles[spec.name] = rng.integers(NIBBLE_RANGE[0], NIBBLE_RANGE[1] + 1, q_shape).astype(np.uint8)

    params = {}
    for spec in param_specs:
        lo, hi = param_range(spec)
        params[spec.name] = rng.integers(lo, hi + 1, spec.shape).astype(PARAM_DTYPES[spec.fmt])

    mats = {}
    for spec in mat_specs:
        _, sz_shape = mat_shapes(cfg, spec)
        s0 = base_scale(spec)
        jitter = rng.uniform(-s0 / 4, s0 / 4, sz_shape)                      # (G, fan_out) or (vocab, G)
        s = np.maximum(np.rint(s0 + jitter), 1).astype(np.int16)
        z = rng.integers(ZERO_RANGE[0], ZERO_RANGE[1] + 1, sz_shape).astype(np.uint8)
        mats[spec.name] = IntMat(q=nibbles[spec.name], s=s, z=z)
    return Weights(cfg=cfg, mats=mats, params=params)


# Token ids come from their own stream so that a shared seed does not correlate them with weights.
TOKEN_STREAM = 0x70CE


def generate_tokens(cfg: ModelConfig, seed: int, seq_len: int) -> np.ndarray:
    """(seq_len,) uint32 token ids uniform over the vocabulary (SPEC §11); 1 <= seq_len <= max_seq."""
    _check_seed(seed)
    if not isinstance(seq_len, (int, np.integer)) or isinstance(seq_len, bool) or not 1 <= seq_len <= cfg.max_seq:
        raise ValueError(f"seq_len must be an integer in 1..{cfg.max_seq} (max_seq of {cfg.name!r}), got {seq_len!r}")
    rng = np.random.default_rng([seed, TOKEN_STREAM])
    return rng.integers(0, cfg.vocab, seq_len).astype(np.uint32)  # (seq_len,)
