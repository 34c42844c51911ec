"""Parameters of a MAC array build, its stream layouts and the number formats of its operands (hw/mac_array.py
describes the array)."""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import signed, unsigned
from amaranth.lib.data import ArrayLayout, StructLayout

from hw.params import ChipParams, NIBBLE_BITS, log2, signed_bits
from hw.weight_store import BEAT_BYTES, WeightStoreParams
from nano_k3 import fxp_ops
from nano_k3.int4 import SCALE_BITS, SCALE_FRAC      # .s is int16 Q3.12 (SPEC §4.3)

ZERO_BITS = NIBBLE_BITS    # .z values 0..15 (SPEC §4.3); the low nibble of each uint8
Q, Z, S0, S1 = range(4)    # kinds of store reads


def _is_pow2(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1 and not v & (v - 1)


@dataclass(frozen=True)
class MacArrayParams:
    """Parameters of one MAC array build (new: report for merging into hw.params)."""

    store: WeightStoreParams = WeightStoreParams()
    max_fan_in: int = 128      # activation register file (nano: mla.wk_c / wv have fan-in dc = 128)
    max_fan_out: int = 512     # nano: the LM head
    min_fan_out: int = 2       # nano: kda.b
    act_lanes: int = 4         # activation elements per ``act`` transfer
    out_lanes: int = 16        # results per ``o`` transfer
    scale_lanes: int = 16      # s·d multipliers (S4): columns scaled per cycle

    def __post_init__(self) -> None:
        if not isinstance(self.store, WeightStoreParams):
            raise TypeError(f"store must be a WeightStoreParams, got {self.store!r}")
        for name in ("max_fan_in", "max_fan_out", "min_fan_out", "act_lanes", "out_lanes"):
            v = getattr(self, name)
            if not _is_pow2(v) or v > 1 << 16:
                raise ValueError(f"{name} must be a power of two in 1..65536, got {v!r}")
        if self.max_fan_in < 2:
            raise ValueError(f"max_fan_in must be at least 2 (two int4 rows per byte), got {self.max_fan_in}")
        if self.min_fan_out > self.max_fan_out:
            raise ValueError(f"min_fan_out={self.min_fan_out} exceeds max_fan_out={self.max_fan_out}")
        if not 2 <= self.act_lanes <= self.max_fan_in:
            raise ValueError(f"act_lanes must be in 2..max_fan_in={self.max_fan_in}, got {self.act_lanes}")
        if self.out_lanes > self.lanes:
            raise ValueError(f"out_lanes={self.out_lanes} exceeds the array's {self.lanes} lanes")
        if not _is_pow2(self.scale_lanes) or self.scale_lanes > self.lanes:
            raise ValueError(f"scale_lanes must be a power of two in 1..lanes={self.lanes}, got {self.scale_lanes!r}")

    # Geometry -------------------------------------------------------------------------------------
    @property
    def lanes(self) -> int:
        return BEAT_BYTES * self.store.banks

    @property
    def pairs(self) -> int:
        return self.max_fan_in // 2

    @property
    def window(self) -> int:
        """Activation pairs one read can need: W/min_fan_out, at most a group's (≤ max_fan_in/2)."""
        return max(1, min(self.lanes // self.min_fan_out, self.pairs))

    # Number formats (fxp_ops, read at construction) -----------------------------------------------
    @property
    def widths(self) -> ChipParams:
        """Exact accumulator widths of hw.params for int-A activations over max_fan_in rows."""
        return ChipParams(name="mac_array", act_bits=fxp_ops.A.bits, scale_bits=SCALE_BITS,
                          scale_frac=SCALE_FRAC, max_fan_in=max(2, self.max_fan_in))

    @property
    def frac_range(self) -> tuple[int, int]:
        """Exponents mac_input gives an X vector: X.frac − (X.bits − A.bits + 1) .. MAC_FRAC_MAX."""
        X, A = fxp_ops.X, fxp_ops.A
        return X.frac - max(0, X.bits - A.bits + 1), fxp_ops.MAC_FRAC_MAX

    @property
    def out_fmts(self) -> tuple[fxp_ops.Fmt, fxp_ops.Fmt]:
        return fxp_ops.X, fxp_ops.LOGIT

    @property
    def shift_range(self) -> tuple[int, int]:
        lo, hi = self.frac_range
        fr = [f.frac for f in self.out_fmts]
        return lo + fxp_ops.ACC_FRAC - max(fr), hi + fxp_ops.ACC_FRAC - min(fr)

    @property
    def out_bits(self) -> int:
        return max(f.bits for f in self.out_fmts)

    # Performance model ----------------------------------------------------------------------------
    def scale_steps(self, fan_out: int) -> int:
        """S4 cycles of one (block, group): the block's min(fan_out, W) columns, scale_lanes a cycle."""
        return max(1, min(fan_out, self.lanes) // self.scale_lanes)

    def issue_cycles(self, fan_in: int, fan_out: int, group: int) -> int:
        """Store-port cycles of one matvec (= cycles between back-to-back commands): a (block, group)
        holds the port for its reads, or for its scale steps when they are more (tiny groups)."""
        W = self.lanes
        F = 1 if fan_out >= W else min(W // fan_out, group // 2)
        blocks = max(1, fan_out // W)
        s_reads = 2 if min(fan_out, W) == W else 1
        return blocks * (fan_in // group) * max((group // 2) // F + 1 + s_reads, self.scale_steps(fan_out))


def act_layout(p: MacArrayParams) -> StructLayout:
    lo, hi = p.frac_range
    return StructLayout({"m": ArrayLayout(signed(fxp_ops.A.bits), p.act_lanes),
                         "frac": signed(signed_bits(lo, hi)), "last": unsigned(1)})


def cmd_layout(p: MacArrayParams) -> StructLayout:
    bb = p.store.beat_bits
    return StructLayout({
        "q_beat": unsigned(bb), "s_beat": unsigned(bb), "z_beat": unsigned(bb),
        "fan_in": unsigned(p.max_fan_in.bit_length()),
        "fan_out_log2": unsigned(max(1, log2(p.max_fan_out).bit_length())),
        "group_log2": unsigned(max(1, log2(p.max_fan_in).bit_length())),
        "fmt": unsigned(1),
    })


def out_layout(p: MacArrayParams) -> StructLayout:
    return StructLayout({"y": ArrayLayout(signed(p.out_bits), p.out_lanes),
                         "count": unsigned(p.out_lanes.bit_length()), "last": unsigned(1)})
