"""The softmax-exponent unit: ``fxp_math.softmax_exp(fxp_math.to_log2(s, s_frac, c))`` of one streamed vector.

Stream ``i``: one score per transfer, ``s`` (signed ``SoftmaxParams.s_bits``, ``s_frac`` fraction bits)
and ``last``. Stream ``o``: the unnormalised weights e_i = 2^-(max t − t_i) in P, one per transfer, in
input order, and ``last``. The score-to-exponent constant ``c`` (log2 e times the score scale, C_FRAC
fraction bits: ``LOG2E_Q24``, ``fixed.mla_score_const``) is a constructor parameter.

Pass 1, one score per cycle: t = T.fit(s·c, s_frac + C_FRAC) (multiply, then round/saturate: two
stages), written to an ``msh_sram`` (max_len × roundup8(T.bits)), running max. Pass 2, one element per
cycle under back-pressure: read t, d = max − t (unsigned, T.bits), ``hw.lib.lut.Exp2Neg``.
The next vector is taken after the last output of the previous one. Latency (no stalls, measured by
verification/test_vector_unit.py ``vector_latency``): first output ``SoftmaxExp.GAP`` = 9 cycles after
the last input, one element per cycle: a 64-element vector in 64 + 9 + 63 = 136 cycles.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import ClockSignal, Const, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.lut import Exp2Neg
from hw.lib.pipe import clamp, delay, round_shift_const
from hw.params import pow2_at_least, require_instance
from hw.roms import ROM_DIR
from nano_k3 import fxp_math
from nano_k3.fxp_ops import P, T, X


@dataclass(frozen=True)
class SoftmaxParams:
    max_len: int = 64
    s_bits: int = X.bits
    s_frac: int = X.frac
    c: int = fxp_math.LOG2E_Q24
    rom_dir: str = ROM_DIR

    def __post_init__(self) -> None:
        pow2_at_least("max_len", self.max_len, 2)
        if not isinstance(self.s_bits, int) or not 2 <= self.s_bits <= 40:
            raise ValueError(f"s_bits must be an integer in 2..40, got {self.s_bits!r}")
        if not isinstance(self.s_frac, int) or not 0 <= self.s_frac <= 48:
            raise ValueError(f"s_frac must be an integer in 0..48, got {self.s_frac!r}")
        if not isinstance(self.c, int) or not 0 < self.c < 1 << 26:
            raise ValueError(f"c must be a positive integer below 2^26 (C_FRAC={fxp_math.C_FRAC}), got {self.c!r}")


def in_layout(p: SoftmaxParams) -> StructLayout:
    return StructLayout({"s": signed(p.s_bits), "last": unsigned(1)})


def out_layout(p: SoftmaxParams) -> StructLayout:
    return StructLayout({"e": unsigned(P.bits), "last": unsigned(1)})


class SoftmaxExp(wiring.Component):
    """Base-2 softmax weights of streamed score vectors (see the module docstring)."""

    # cycles from the last input transfer to the first output (no stalls): s·c, round, write + max,
    # then the pass-2 pipeline (SRAM read, Exp2Neg)
    GAP = 3 + 1 + Exp2Neg.LATENCY

    def __init__(self, params: SoftmaxParams = SoftmaxParams()):
        require_instance(self, params, SoftmaxParams)
        self.params = params
        self.exp2 = Exp2Neg(t_bits=T.bits, rom_dir=params.rom_dir)
        super().__init__({"i": In(stream.Signature(in_layout(params))),
                          "o": Out(stream.Signature(out_layout(params)))})

    def elaborate(self, platform):
        m = Module()
        p = self.params
        ip = self.i.payload
        addr_w = p.max_len.bit_length() - 1
        buf_w = -(-T.bits // 8) * 8
        m.submodules.exp2 = exp2 = self.exp2
        we, waddr, wdata = Signal(), Signal(addr_w), Signal(buf_w)
        re, raddr, rdata = Signal(), Signal(addr_w), Signal(buf_w)
        m.submodules.buf = Instance(
            "msh_sram", p_DEPTH=p.max_len, p_WIDTH=buf_w, p_ADDRW=addr_w,
            i_clk=ClockSignal(), i_we=we, i_waddr=waddr, i_wdata=wdata,
            i_wstrb=Const((1 << (buf_w // 8)) - 1, buf_w // 8), i_re=re, i_raddr=raddr, o_rdata=rdata)

        busy = Signal()
        take = Signal()
        m.d.comb += [self.i.ready.eq(~busy), take.eq(self.i.valid & self.i.ready)]
        # pass 1: S1 s·c, S2 round + saturate to T, write, running max
        v1, l1, v2, l2 = Signal(), Signal(), Signal(), Signal()
        prod = Signal(signed(p.s_bits + p.c.bit_length() + 1))
        t2 = Signal(signed(T.bits))
        m.d.sync += [v1.eq(take), l1.eq(take & ip.last), prod.eq(ip.s * p.c),
                     v2.eq(v1), l2.eq(v1 & l1),
                     t2.eq(clamp(round_shift_const(prod, p.s_frac + fxp_math.C_FRAC - T.frac), T.lo, T.hi))]
        count = Signal(range(p.max_len + 1))
        mx = Signal(signed(T.bits))
        fresh = Signal(init=1)
        m.d.comb += [we.eq(v2), waddr.eq(count), wdata.eq(t2.as_unsigned())]
        draining = Signal()
        with m.If(take & ip.last):
            m.d.sync += busy.eq(1)
        with m.If(v2):
            m.d.sync += [count.eq(count + 1), fresh.eq(0), mx.eq(Mux(fresh | (t2 > mx), t2, mx))]
            with m.If(l2):
                m.d.sync += draining.eq(1)
        # pass 2: read, max − t, exp2 (every stage advances with en)
        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)
        rd_ptr = Signal(range(p.max_len + 1))
        issue = Signal()
        m.d.comb += [issue.eq(draining & (rd_ptr != count) & en), re.eq(issue), raddr.eq(rd_ptr)]
        r_v, r_last = Signal(), Signal()
        with m.If(en):
            m.d.sync += [r_v.eq(issue), r_last.eq(rd_ptr == count - 1)]
        with m.If(issue):
            m.d.sync += rd_ptr.eq(rd_ptr + 1)
        d = Signal(T.bits)
        m.d.comb += d.eq(mx - rdata[:T.bits].as_signed())
        m.d.comb += [exp2.en.eq(en), exp2.i_valid.eq(r_v), exp2.i.t.eq(d),
                     self.o.valid.eq(exp2.o_valid), self.o.payload.e.eq(exp2.o.y),
                     self.o.payload.last.eq(delay(m, en, r_last, Exp2Neg.LATENCY, "last"))]
        with m.If(self.o.valid & self.o.ready & self.o.payload.last):
            m.d.sync += [busy.eq(0), draining.eq(0), count.eq(0), rd_ptr.eq(0), fresh.eq(1)]
        return m
