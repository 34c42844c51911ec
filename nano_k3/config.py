"""The model configuration: one frozen dataclass, the single source of truth for every dimension.

Header fields follow SPEC_NANO_KPU.md §4.1; the constants that are not in the header follow §6.1.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# SPEC §6.1 constants (not carried in the image header).
RMS_EPS = 1e-5
L2_EPS = 1e-6
KDA_LOG_DECAY_MIN = -5.0
ROUTER_SCALE = 2.828

GROUP_SIZES = (64, 128)
# Layer-type letters of the pattern string: L = linear attention (KDA), F = full attention (MLA).
LAYER_KINDS = {"L": "kda", "F": "mla"}


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Every header field that describes the model (SPEC §4.1 words 2..18, 20, 21)."""

    name: str
    n_layers: int
    d_model: int
    mla_heads: int
    mla_dk: int
    mla_dr: int
    mla_dv: int
    mla_dc: int
    kda_heads: int
    kda_dh: int
    conv_k: int
    n_experts: int
    top_k: int
    n_shared: int
    d_ff: int
    res_block: int
    vocab: int
    max_seq: int
    group_size: int
    layer_pattern: str  # one letter per layer, "L" = KDA, "F" = MLA (SPEC §6.1 "LF")

    def __post_init__(self) -> None:
        for f in ("n_layers", "d_model", "mla_heads", "mla_dk", "mla_dr", "mla_dv", "mla_dc",
                  "kda_heads", "kda_dh", "conv_k", "n_experts", "top_k", "d_ff", "res_block",
                  "vocab", "max_seq"):
            _positive(f, getattr(self, f))
        if not isinstance(self.n_shared, int) or self.n_shared not in (0, 1):
            raise ValueError(f"n_shared must be 0 or 1 (the image has one 'moe.shared' slot), got {self.n_shared!r}")
        if self.group_size not in GROUP_SIZES:
            raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {self.group_size!r}")
        if self.top_k > self.n_experts:
            raise ValueError(f"top_k={self.top_k} exceeds n_experts={self.n_experts}")
        if len(self.layer_pattern) != self.n_layers or set(self.layer_pattern) - set(LAYER_KINDS):
            raise ValueError(f"layer_pattern must be {self.n_layers} letters from {sorted(LAYER_KINDS)} "
                             f"(L = KDA, F = MLA), got {self.layer_pattern!r}")
        # Packed int4 rows hold two input rows per byte, so every fan-in must be even.
        for f in ("d_model", "mla_dk", "mla_dr", "mla_dv", "mla_dc", "kda_dh", "d_ff"):
            if getattr(self, f) % 2:
                raise ValueError(f"{f} must be even (two int4 nibbles per byte), got {getattr(self, f)}")
        if self.n_layers > 32:
            raise ValueError(f"n_layers={self.n_layers} does not fit the 32-bit layer-type bitmap")

    # Derived quantities -------------------------------------------------------------------------
    @property
    def layer_kinds(self) -> tuple[str, ...]:
        return tuple(LAYER_KINDS[c] for c in self.layer_pattern)

    @property
    def layer_bitmap(self) -> int:
        """Header word 21: bit i set = layer i is MLA."""
        return sum(1 << i for i, kind in enumerate(self.layer_kinds) if kind == "mla")

    @property
    def kda_width(self) -> int:
        return self.kda_heads * self.kda_dh

    @property
    def n_mla_layers(self) -> int:
        return self.layer_kinds.count("mla")

    @property
    def n_kda_layers(self) -> int:
        return self.layer_kinds.count("kda")

    def group_of(self, fan_in: int) -> int:
        """Effective group size of a tensor with this fan-in (SPEC §4.3)."""
        return min(self.group_size, fan_in)

    def n_groups(self, fan_in: int) -> int:
        return -(-fan_in // self.group_of(fan_in))

    def with_group(self, group_size: int) -> "ModelConfig":
        return dataclasses.replace(self, group_size=group_size)


NANO = ModelConfig(
    name="nano", n_layers=2, d_model=64, mla_heads=2, mla_dk=32, mla_dr=16, mla_dv=32, mla_dc=128,
    kda_heads=2, kda_dh=32, conv_k=4, n_experts=8, top_k=2, n_shared=1, d_ff=32, res_block=2,
    vocab=512, max_seq=64, group_size=128, layer_pattern="LF",
)

# The smallest config that still has a KDA layer, an MLA layer, two experts and two residual
# blocks (res_block=1 makes every layer a boundary), for fast CI runs.
TINY = ModelConfig(
    name="tiny", n_layers=2, d_model=32, mla_heads=1, mla_dk=16, mla_dr=8, mla_dv=16, mla_dc=32,
    kda_heads=1, kda_dh=16, conv_k=4, n_experts=2, top_k=1, n_shared=1, d_ff=16, res_block=1,
    vocab=64, max_seq=16, group_size=64, layer_pattern="LF",
)

# The chip that make test takes through the physical flow (tests/test_ci_chip.py): every layer type and
# engine of TINY, with half its KDA head (the KDA engine has one pair of state multipliers per column of
# kda_dh) and a two-tap convolution.
CI = dataclasses.replace(TINY, name="ci", kda_dh=8, conv_k=2)

PRESETS: dict[str, ModelConfig] = {c.name: c for c in (NANO, TINY, CI)}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown config {name!r}; valid presets: {sorted(PRESETS)}") from None
