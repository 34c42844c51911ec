"""Parameters of a KDA engine build, its stream layouts, and the word-packing helpers its parts share
(hw/kda_engine.py describes the engine)."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from amaranth.hdl import Cat, Const, signed, unsigned
from amaranth.lib.data import ArrayLayout, StructLayout

from hw.params import int_in, pow2_at_least
from nano_k3.fxp_ops import S, X
from nano_k3.tensors import PARAM_BITS, PARAM_FORMATS

TAP_FRAC = PARAM_FORMATS["q4_11"][0]              # conv taps, dtb
A_FRAC = PARAM_FORMATS["uq8_8"][0]                # A
W_FRAC = PARAM_FORMATS["norm"][0]                 # onorm.w, gain = 2^W_FRAC + w


class Sel(enum.IntEnum):
    Q = 0
    K = 1
    V = 2
    B = 3
    F = 4
    Z = 5


def byte_width(bits: int) -> int:
    """``bits`` rounded up to whole bytes (SRAM fields are byte-strobed)."""
    return -(-bits // 8) * 8



@dataclass(frozen=True)
class KdaParams:
    """Dimensions of one KDA engine build: the chip's from its model (``for_model``), a test's by ``replace``."""

    heads: int
    dh: int
    conv_k: int
    max_layers: int
    lanes: int = 1              # elements per input transfer (a LUT ROM has two read ports)

    def __post_init__(self) -> None:
        int_in("heads", self.heads, 1, 16)
        int_in("dh", self.dh, 2, 256)
        pow2_at_least("dh", self.dh, 2, "the RMS mean is a shift")
        int_in("conv_k", self.conv_k, 2, 8)
        int_in("max_layers", self.max_layers, 1, 64)
        int_in("lanes", self.lanes, 1, 2)

    @classmethod
    def for_model(cls, cfg, lanes: int) -> "KdaParams":
        """The chip's engine for model config ``cfg`` (a ``nano_k3.config.ModelConfig``): state and conv
        histories for its KDA layers, ``lanes`` input elements a transfer."""
        return cls(heads=cfg.kda_heads, dh=cfg.kda_dh, conv_k=cfg.conv_k, max_layers=max(1, cfg.n_kda_layers),
                   lanes=lanes)

    @property
    def width(self) -> int:
        return self.heads * self.dh

    @property
    def state_transfers(self) -> int:
        """Input transfers of Q, K, V, B and F in one position (everything but the gate Z)."""
        return 4 * self.width // self.lanes + -(-self.heads // self.lanes)

    @property
    def row_transfers(self) -> int:
        """Input transfers of K, V, B and F in one position: the state rows start after the last of them (Q is
        needed from the second pass on, so it may come later)."""
        return self.state_transfers - self.width // self.lanes

    @property
    def transfers(self) -> int:
        """Input transfers of one position (the state inputs and Z)."""
        return self.state_transfers + self.width // self.lanes


def in_layout(p: KdaParams) -> StructLayout:
    lanes = lambda shape: ArrayLayout(shape, p.lanes)      # noqa: E731  lane k = element idx + k
    return StructLayout({
        "sel": unsigned(3),
        "idx": unsigned(max(1, (p.width - 1).bit_length())),
        "data": lanes(signed(X.bits)),
        "taps": ArrayLayout(signed(PARAM_BITS), p.lanes * p.conv_k),     # lane k's at k conv_k + j
        "a": lanes(unsigned(PARAM_BITS)),
        "dtb": lanes(signed(PARAM_BITS)),
        "w": lanes(signed(PARAM_BITS)),
        "layer": unsigned(max(1, (p.max_layers - 1).bit_length())),
        "restart": unsigned(1),
        "last": unsigned(1),
    })


def out_layout(p: KdaParams) -> StructLayout:
    lanes = lambda shape: ArrayLayout(shape, p.lanes)      # noqa: E731  lane k = element index + k
    return StructLayout({"data": lanes(signed(X.bits)), "read": lanes(signed(S.bits)), "last": unsigned(1)})


def pack(*parts):
    """Concatenate (value, field width) pairs, LSB first: each value truncated or zero-padded to its field."""
    return Cat(*(Cat(v.as_unsigned()[:w], Const(0, max(0, w - len(v)))) for v, w in parts))
