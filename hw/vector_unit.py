"""The vector unit: element-wise ops, the norm unit and the softmax-exponent unit behind stream ports.

``Elementwise`` (a ``hw.lib.pipe.FixedPipe``, LATENCY = Silu.LATENCY + 2 = 9 for every op, ``lanes``
elements per enabled cycle, a SiLU each; ``Streamed(Elementwise())`` gives stream ports):

=========  ======================================  ====================================
op          operands                                result (X)
=========  ======================================  ====================================
ADD         a, b in X                               X.fit(a + b, X.frac)  (residual adds)
MUL_P       a in X, b in P                          X.fit(a·b, X.frac + P.frac)  (gated norm)
SWIGLU      a = g, b = u in X                       fixed.expert_hidden(g, u) = X.fit(silu(g)·u, 2·X.frac)
=========  ======================================  ====================================

Stages: Silu(a) (7) beside delayed operands; S7 the product (X.bits × X.bits, alone in its stage) or
the sum; S8 round half up and saturate to X.

``VectorUnit`` puts the three side by side (the block rtl_gen emits and the tests drive): ports
``ew_i``/``ew_o`` (Elementwise payloads), ``norm_i``/``norm_o`` (``hw.norm_unit``: RMSNorm, L2 norm),
``softmax_i``/``softmax_o`` (``hw.softmax_unit``: to_log2 + softmax_exp). All are
``amaranth.lib.stream`` ports; see each module for payloads and latency.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.lut import Silu
from hw.lib.lut_rom import port_of
from hw.lib.pipe import FixedPipe, Streamed, clamp, delay, round_shift_const
from hw.norm_unit import NormParams, NormUnit
from hw.params import require_instance
from hw.roms import ROM_DIR
from hw.softmax_unit import SoftmaxExp, SoftmaxParams
from nano_k3.fxp_ops import P, X


class EwOp(enum.IntEnum):
    ADD = 1          # op codes start at 1: yosys turns "== 0" into a multi-bit "!" that Verilator flags
    MUL_P = 2
    SWIGLU = 3


class Elementwise(FixedPipe):
    """Element-wise ops of the model on X operands (see the module docstring)."""

    LATENCY = Silu.LATENCY + 2

    def __init__(self, *, lanes: int = 1, rom_dir: str = ROM_DIR, roms=None):
        """``roms``: shared-ROM ports by table name (``hw.lib.lut_rom.shared_rom``; lane k's SiLU takes the
        k-th sigmoid port), else each SiLU owns its ROM."""
        if lanes not in (1, 2, 4):
            self._MustUse__silence = True
            raise ValueError(f"Elementwise: lanes must be 1, 2 or 4, got {lanes!r}")
        self.lanes, self.rom_dir, self.roms = lanes, rom_dir, roms
        el = ArrayLayout(signed(X.bits), lanes)
        super().__init__(StructLayout({"op": unsigned(2), "a": el, "b": el}), StructLayout({"y": el}))

    def elaborate(self, platform):
        m = Module()
        en = self.en
        op = delay(m, en, self.i.op, Silu.LATENCY, "op")
        # one-hot op flags (yosys turns a compare with 0 into a multi-bit "!", which Verilator flags)
        is_add, is_mulp = Signal(), Signal()
        with m.If(en):
            m.d.sync += [is_add.eq(op == EwOp.ADD), is_mulp.eq(op == EwOp.MUL_P)]
        for k in range(self.lanes):
            m.submodules[f"silu{k}" if self.lanes > 1 else "silu"] = silu = Silu(
                rom_dir=self.rom_dir, port=port_of(self.roms, "sigmoid", k))
            m.d.comb += [silu.en.eq(en), silu.i.x.eq(self.i.a[k])]
            a = delay(m, en, self.i.a[k], Silu.LATENCY, f"a{k}")
            b = delay(m, en, self.i.b[k], Silu.LATENCY, f"b{k}")
            prod = Signal(signed(2 * X.bits), name=f"prod{k}")
            total = Signal(signed(X.bits + 1), name=f"total{k}")
            with m.If(en):
                m.d.sync += [prod.eq(Mux(op == EwOp.SWIGLU, silu.o.y, a) * b), total.eq(a + b)]
            res = Mux(is_add, total, Mux(is_mulp, round_shift_const(prod, P.frac), round_shift_const(prod, X.frac)))
            with m.If(en):
                m.d.sync += self.o.y[k].eq(clamp(res, X.lo, X.hi))
        self._valid_chain(m)
        return m


@dataclass(frozen=True)
class VectorParams:
    norm: NormParams = field(default_factory=NormParams)
    softmax: SoftmaxParams = field(default_factory=SoftmaxParams)
    rom_dir: str = ROM_DIR
    ew_lanes: int = 1              # Elementwise lanes

    def __post_init__(self) -> None:
        if not isinstance(self.norm, NormParams) or not isinstance(self.softmax, SoftmaxParams):
            raise TypeError(f"VectorParams needs NormParams and SoftmaxParams, got {self.norm!r}, {self.softmax!r}")


class VectorUnit(wiring.Component):
    """Elementwise, NormUnit and SoftmaxExp side by side (see the module docstring)."""

    def __init__(self, params: VectorParams = VectorParams()):
        require_instance(self, params, VectorParams)
        self.params = params
        self.ew = Streamed(Elementwise(lanes=params.ew_lanes, rom_dir=params.rom_dir))
        self.norm = NormUnit(params.norm)
        self.softmax = SoftmaxExp(params.softmax)
        members = {}
        for name, unit in (("ew", self.ew), ("norm", self.norm), ("softmax", self.softmax)):
            members[f"{name}_i"] = In(stream.Signature(unit.i.payload.shape()))
            members[f"{name}_o"] = Out(stream.Signature(unit.o.payload.shape()))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        for name, unit in (("ew", self.ew), ("norm", self.norm), ("softmax", self.softmax)):
            m.submodules[name] = unit
            wiring.connect(m, wiring.flipped(getattr(self, f"{name}_i")), unit.i)
            wiring.connect(m, unit.o, wiring.flipped(getattr(self, f"{name}_o")))
        return m


# --- rtl_gen hooks (rtl_gen.emit.BLOCKS["vector_unit"]) ---------------------------------------------
def vector_unit_block(chip_params) -> VectorUnit:
    return VectorUnit(_params(chip_params))


def _params(chip_params) -> VectorParams:
    """The chip's norm-unit and element-wise lanes (hw.params.ChipParams), with the L2 datapath."""
    return VectorParams(norm=NormParams(lanes=chip_params.norm_lanes), ew_lanes=chip_params.ew_lanes)


def vector_unit_derived(chip_params) -> dict:
    p = _params(chip_params)
    return {"ew_latency": Elementwise.LATENCY, "ew_lanes": p.ew_lanes, "norm_gap": NormUnit.GAP, "softmax_gap": SoftmaxExp.GAP,
            "norm": {"max_len": p.norm.max_len, "lanes": p.norm.lanes, "v_bits": p.norm.v_bits, "v_frac": p.norm.v_frac,
                     "rms_eps": p.norm.rms_eps, "l2_eps": p.norm.l2_eps},
            "softmax": {"max_len": p.softmax.max_len, "s_bits": p.softmax.s_bits, "s_frac": p.softmax.s_frac,
                        "c": p.softmax.c},
            "ew_ops": {op.name: int(op) for op in EwOp}}
