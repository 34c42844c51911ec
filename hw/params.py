"""Chip parameters: one frozen dataclass, the single source of truth for every hardware size.

Number formats (SPEC_NANO_KPU.md §4.3), written down once:
* weights: unsigned int4 nibbles 0..15, two input rows per byte (row 2r low nibble, 2r+1 high);
* zero points: unsigned, ``zero_bits`` wide (values 0..15; the image stores them as uint8);
* scales: signed two's complement ``scale_bits`` wide, Q3.12 (value = s / 2**scale_frac);
* activations: signed two's complement ``act_bits`` wide (fraction bits are the caller's business:
  the dequant-MAC is exact, its result carries frac(x) + scale_frac fraction bits).

Every accumulator width below is derived from exact integer bounds over ``max_fan_in`` rows, so no
sum can wrap for any input a caller may legally send (see ``signed_bits``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field

from nano_k3.config import PRESETS as MODEL_PRESETS
from nano_k3.config import ModelConfig
from nano_k3.fxp_ops import A as MAC_INPUT
from nano_k3.int4 import SCALE_BITS, SCALE_FRAC

NIBBLE_MAX = 15          # int4 weights are unsigned nibbles 0..15 (SPEC §4.3)
NIBBLE_BITS = 4


def signed_bits(lo: int, hi: int) -> int:
    """Smallest two's complement width holding every integer in [lo, hi]."""
    if lo > hi:
        raise ValueError(f"empty range [{lo}, {hi}]")
    bits = 1
    while not (-(1 << (bits - 1)) <= lo and hi <= (1 << (bits - 1)) - 1):
        bits += 1
    return bits


def log2(v: int) -> int:
    """floor(log2 v) of a positive integer: the exponent of a power of two."""
    return v.bit_length() - 1


def pow2_ceil(v: int) -> int:
    """The smallest power of two >= v (1 for v <= 1)."""
    return 1 << max(0, (v - 1).bit_length())


def require_instance(component: object, value: object, cls: type) -> None:
    """Raises TypeError unless ``value`` (the build parameter of ``component``) is a ``cls``. The rejected
    component is marked used: Amaranth would otherwise warn that it was never elaborated."""
    if not isinstance(value, cls):
        component._MustUse__silence = True
        raise TypeError(f"{type(component).__name__} needs a {cls.__module__}.{cls.__qualname__}, got {value!r}")


def int_in(name: str, value: object, lo: int, hi: int) -> None:
    """Raises ValueError naming ``name`` unless ``value`` is an integer (not a bool) in ``lo..hi``."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")


SWEEP = "sweep"      # field metadata: the values design-space exploration (flow/dse) searches
CLOSED = "closed"    # field metadata: True when those values are also the only legal ones


def choice(default: int, values: tuple[int, ...], closed: bool = True):
    """A parameter that changes the chip's speed or area: ``values`` are the ones ``python -m flow.dse``
    searches; ``closed``: they are the only legal ones (``ChipParams.__post_init__`` rejects any other)."""
    return field(default=default, metadata={SWEEP: tuple(values), CLOSED: closed})


def sweep_space() -> dict[str, tuple[int, ...]]:
    """Every ``ChipParams`` field the design-space exploration searches, with its values (declared once, on
    the field). The fields left out and why: number formats and ``max_fan_in`` (``act_bits``, ``scale_bits``,
    ``scale_frac``, ``zero_bits``) are fixed by the model's fixed-point formats, so changing them breaks bit
    exactness rather than trading speed for area; ``mac_lanes`` shapes only the stand-alone dequant_mac block
    (the chip's MAC array is 16 x ``mac_banks`` lanes); ``clock_ns`` is SPEC section 9's 100 MHz;
    ``mem_max_inflight`` below the latency it covers stalls reads, which perf/model.py does not model;
    ``mem_len_bits`` bounds a read's length, not its speed."""
    return {f.name: f.metadata[SWEEP] for f in dataclasses.fields(ChipParams) if SWEEP in f.metadata}


def pow2_at_least(name: str, value: object, lo: int, why: str = "") -> None:
    """Raises ValueError naming ``name`` unless ``value`` is a power-of-two integer >= ``lo``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < lo or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= {lo}{' (' + why + ')' if why else ''}, got {value!r}")


@dataclass(frozen=True)
class ChipParams:
    """Hardware parameters of one chip build (overrides via ``dataclasses.replace``)."""

    name: str = "nano"
    mac_lanes: int = 16         # columns of the dequant_mac skeleton block (bytes of a 16 B beat it takes)
    # weight-store banks = MAC array lane groups (16 columns each: nano 128 lanes); any power of two is legal
    mac_banks: int = choice(8, (1, 2, 4, 8, 16), closed=False)
    act_bits: int = MAC_INPUT.bits  # signed MAC-input mantissa width (fixed-point format A)
    scale_bits: int = SCALE_BITS    # Q3.12 group scale (SPEC §4.3)
    scale_frac: int = SCALE_FRAC
    zero_bits: int = 4          # zero point 0..15
    max_fan_in: int = 512       # largest fan-in the accumulators are sized for (exactness bound)
    clock_ns: float = 10.0      # target clock period (100 MHz)
    mem_max_inflight: int = 64  # memory engine: reads in flight (covers base 24 + jitter 12 at 1 beat/cycle)
    mem_len_bits: int = 24      # memory engine: bits of a read range's byte length
    norm_lanes: int = choice(16, (1, 2, 4, 8, 16))  # RMSNorm elements per cycle (hw.norm_unit lanes)
    ew_lanes: int = choice(4, (1, 2, 4))        # element-wise (ADD, SwiGLU) elements per cycle (hw.vector_unit)
    mix_lanes: int = choice(8, (1, 2, 4, 8))    # residual-mixer elements per cycle (hw.res_mixer)
    comb_lanes: int = choice(8, (1, 2, 4, 8))   # MoE-combine elements per cycle (hw.chip_glue.Combine)
    kda_lanes: int = choice(2, (1, 2))          # KDA engine input elements per cycle (hw.kda_engine.KdaParams.lanes)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"name must be an identifier-like string, got {self.name!r}")
        int_in("mac_lanes", self.mac_lanes, 1, 256)
        if self.mac_lanes & (self.mac_lanes - 1):
            raise ValueError(f"mac_lanes must be a power of two (bytes of a memory beat), got {self.mac_lanes}")
        pow2_at_least("mac_banks", self.mac_banks, 1, "weight-store banks")
        int_in("act_bits", self.act_bits, 2, 32)
        int_in("scale_bits", self.scale_bits, 2, 32)
        int_in("scale_frac", self.scale_frac, 0, self.scale_bits - 1)
        int_in("zero_bits", self.zero_bits, NIBBLE_BITS, 8)
        int_in("max_fan_in", self.max_fan_in, 2, 1 << 16)
        int_in("mem_max_inflight", self.mem_max_inflight, 2, 1024)
        int_in("mem_len_bits", self.mem_len_bits, 8, 32)
        for f in dataclasses.fields(self):
            allowed = f.metadata.get(SWEEP) if f.metadata.get(CLOSED) else None
            if allowed and getattr(self, f.name) not in allowed:
                raise ValueError(f"{f.name} must be one of {', '.join(map(str, allowed))}, got {getattr(self, f.name)!r}")
        if self.max_fan_in % 2:
            raise ValueError(f"max_fan_in must be even (two int4 rows per byte), got {self.max_fan_in}")
        if (isinstance(self.clock_ns, bool) or not isinstance(self.clock_ns, (int, float))
                or not math.isfinite(self.clock_ns) or self.clock_ns <= 0):
            raise ValueError(f"clock_ns must be a positive finite number, got {self.clock_ns!r}")

    @property
    def model(self) -> ModelConfig:
        """The model this chip is built for: the ``nano_k3.config`` preset of the same name. Every model
        dimension a generator needs (engine sizes, header checks, program) comes from here."""
        if self.name not in MODEL_PRESETS:
            raise ValueError(f"no model preset named {self.name!r} for chip {self.name!r}; "
                             f"valid: {', '.join(sorted(MODEL_PRESETS))}")
        return MODEL_PRESETS[self.name]

    # Value ranges ------------------------------------------------------------------------------
    @property
    def act_range(self) -> tuple[int, int]:
        return -(1 << (self.act_bits - 1)), (1 << (self.act_bits - 1)) - 1

    @property
    def scale_range(self) -> tuple[int, int]:
        return -(1 << (self.scale_bits - 1)), (1 << (self.scale_bits - 1)) - 1

    @property
    def zero_max(self) -> int:
        """Zero points are nibble values (SPEC §4.3), whatever width carries them."""
        return NIBBLE_MAX

    # Exact accumulator widths of the dequant-MAC lanes --------------------------------------
    @property
    def beat_qx_bits(self) -> int:
        """q[2r]*x[2r] + q[2r+1]*x[2r+1] for one beat."""
        lo, hi = self.act_range
        return signed_bits(2 * NIBBLE_MAX * lo, 2 * NIBBLE_MAX * hi)

    @property
    def beat_x_bits(self) -> int:
        lo, hi = self.act_range
        return signed_bits(2 * lo, 2 * hi)

    @property
    def group_qx_bits(self) -> int:
        """Σ q·x over one group (at most max_fan_in rows)."""
        lo, hi = self.act_range
        return signed_bits(self.max_fan_in * NIBBLE_MAX * lo, self.max_fan_in * NIBBLE_MAX * hi)

    @property
    def group_x_bits(self) -> int:
        """Σ x over one group."""
        lo, hi = self.act_range
        return signed_bits(self.max_fan_in * lo, self.max_fan_in * hi)

    @property
    def beat_d_bits(self) -> int:
        """(q − z)·x over one beat's two rows, q − z in −15..15: |·| ≤ 2 · 15 · 2**(act_bits−1)."""
        a = 1 << (self.act_bits - 1)
        return signed_bits(-2 * NIBBLE_MAX * a, 2 * NIBBLE_MAX * a)

    @property
    def group_d_bits(self) -> int:
        """Σqx − z·Σx = Σ (q − z)·x with q − z in −15..15: |d| ≤ fan_in · 15 · 2**(act_bits−1)."""
        a = 1 << (self.act_bits - 1)
        return signed_bits(-self.max_fan_in * NIBBLE_MAX * a, self.max_fan_in * NIBBLE_MAX * a)

    @property
    def out_bits(self) -> int:
        """Σ_g s·d over all groups: |y| ≤ fan_in · 2**(scale_bits−1) · 15 · 2**(act_bits−1).

        The bound depends on the total fan-in only, not on the number of groups.
        """
        a = 1 << (self.act_bits - 1)
        s = 1 << (self.scale_bits - 1)
        bound = self.max_fan_in * s * NIBBLE_MAX * a
        return signed_bits(-bound, bound)

    # Serialisation -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ChipParams":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown ChipParams fields {unknown}; valid: {sorted(names)}")
        return cls(**d)

    def digest(self) -> str:
        """A stable hash of the resolved parameters (sha256 of the sorted JSON, first 16 hex)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


PRESETS: dict[str, ChipParams] = {
    "nano": ChipParams(),
    # a narrow variant that simulates fast; same arithmetic, fewer lanes
    "tiny": ChipParams(name="tiny", mac_lanes=4, mac_banks=2, max_fan_in=128, norm_lanes=4, mix_lanes=1, kda_lanes=1),
    # every engine at its narrowest, for the physical flow in make test (tests/test_ci_chip.py)
    "ci": ChipParams(name="ci", mac_lanes=4, mac_banks=1, max_fan_in=128, norm_lanes=1, ew_lanes=1, mix_lanes=1,
                     comb_lanes=1, kda_lanes=1, mem_max_inflight=16),
}


def preset(name: str) -> ChipParams:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown chip preset {name!r}; valid presets: {', '.join(sorted(PRESETS))}") from None
