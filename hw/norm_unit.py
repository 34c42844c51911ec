"""The norm unit: RMSNorm (``fxp_math.rmsnorm``) and L2 norm (``fxp_math.l2norm``) of one streamed vector.

Stream ``i`` carries one element per transfer: ``v`` (signed ``NormParams.v_bits``, ``v_frac`` fraction
bits, X by default), ``w`` (the Q2.13 norm offset of that element; RMSNorm gain = 2^13 + w, ignored
by L2), ``op`` (``NormOp``: sampled on the first element of a vector) and ``last``. Stream ``o``
carries the normalised vector, one element per transfer, ``y`` (X for RMSNorm, UNIT for L2, sign-
extended to the field) and ``last``.

Per vector (n elements, n a power of two <= ``max_len`` for RMSNorm, any 1..max_len for L2):
* pass 1, one element per cycle: the element and its offset go into an ``msh_sram`` buffer (n ×
  roundup8(v_bits + 16) bits: at 128 × 48 bits an SRAM macro is cheaper than flops, SPEC §5), v²
  (v_bits × v_bits multiply, its own stage) accumulates exactly;
* the sum of squares is rounded once to SQ_FRAC (``fxp_math.sum_squares``), the epsilon constant
  is added (RMSNorm: eps·n for the run-time n, a small constant table over log2 n; L2: eps), and
  one ``hw.lut_unit.Rsqrt`` (frac = SQ_FRAC + log2 n, resp. SQ_FRAC) gives (mant, e) once;
* pass 2, one element per cycle under back-pressure: buffer read, ``ApplyMant`` (v × mant, shift),
  then RMSNorm × gain (round half up, saturate to X) or L2 saturate to UNIT.
Latency (no stalls, measured by verification/test_vector_unit.py ``vector_latency``): the first
output leaves ``NormUnit.GAP`` = 16 cycles after the last input, then one element per cycle: a
64-element vector takes 64 + 16 + 63 = 143 cycles from its first input to its last output.
The unit takes the next vector after
the last output of the previous one (no overlap of the two passes: a second buffer would double
the SRAM).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from amaranth.hdl import ClockSignal, Const, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from hw.lut_unit import ApplyMant, Rsqrt, clamp, delay, leading_one, round_shift_const
from hw.params import pow2_at_least, require_instance
from nano_k3 import fxp_math
from nano_k3.config import L2_EPS, RMS_EPS
from nano_k3.fxp_ops import SQ_FRAC, UNIT, X

NORM_OFFSET_BITS = 16      # the Q2.13 norm offset w (int16 in the image, SPEC §4.4)
NORM_OFFSET_FRAC = 13


class NormOp(enum.IntEnum):
    RMS = 0
    L2 = 1


@dataclass(frozen=True)
class NormParams:
    """Sizes of one norm unit (defaults: X vectors of up to 128 elements, the model's epsilons)."""

    max_len: int = 128
    v_bits: int = X.bits
    v_frac: int = X.frac
    rms_eps: float = RMS_EPS
    l2_eps: float = L2_EPS
    rom_dir: str = "roms"

    def __post_init__(self) -> None:
        pow2_at_least("max_len", self.max_len, 2)
        if not isinstance(self.v_bits, int) or not 2 <= self.v_bits <= 32:
            raise ValueError(f"v_bits must be an integer in 2..32, got {self.v_bits!r}")
        if not isinstance(self.v_frac, int) or not 0 <= self.v_frac < self.v_bits or 2 * self.v_frac < SQ_FRAC:
            raise ValueError(f"v_frac must be in {(SQ_FRAC + 1) // 2}..{self.v_bits - 1} (sum of squares "
                             f"rounds to SQ_FRAC={SQ_FRAC}), got {self.v_frac!r}")
        for name in ("rms_eps", "l2_eps"):
            e = getattr(self, name)
            if not isinstance(e, float) or not 0 < e < 1:
                raise ValueError(f"{name} must be a float in (0, 1), got {e!r}")

    @property
    def len_log2(self) -> int:
        return self.max_len.bit_length() - 1

    @property
    def acc_bits(self) -> int:
        """Exact Σv² over max_len elements (|v| <= 2^(v_bits-1))."""
        return 2 * (self.v_bits - 1) + self.len_log2 + 1

    @property
    def ss_bits(self) -> int:
        """Σv² rounded to SQ_FRAC plus the largest epsilon constant (unsigned)."""
        eps = max(fxp_math.eps_int(self.rms_eps * self.max_len, SQ_FRAC), fxp_math.eps_int(self.l2_eps, SQ_FRAC))
        top = ((1 << (self.acc_bits - 1)) >> (2 * self.v_frac - SQ_FRAC)) + 1 + eps
        return top.bit_length()

    @property
    def y_bits(self) -> int:
        """v / rms before the gain: |y| <= sqrt(n) in X (plus LUT error), with a bit of margin."""
        return X.frac + math.ceil(self.len_log2 / 2) + 2


def in_layout(p: NormParams) -> StructLayout:
    return StructLayout({"v": signed(p.v_bits), "w": signed(NORM_OFFSET_BITS), "op": unsigned(1),
                         "last": unsigned(1)})


def out_layout(p: NormParams) -> StructLayout:
    return StructLayout({"y": signed(max(X.bits, UNIT.bits)), "last": unsigned(1)})


class NormUnit(wiring.Component):
    """RMSNorm / L2 norm of streamed vectors (see the module docstring)."""

    # cycles from the last input transfer to the first output (no stalls): square, accumulate, round +
    # epsilon, Rsqrt, capture, then the pass-2 pipeline (SRAM read, ApplyMant, gain, output register)
    GAP = 4 + Rsqrt.LATENCY + 1 + 1 + ApplyMant.LATENCY + 2

    def __init__(self, params: NormParams = NormParams()):
        require_instance(self, params, NormParams)
        self.params = params
        p = params
        self.rsqrt = Rsqrt(m_bits=p.ss_bits, frac_bits=(SQ_FRAC + p.len_log2).bit_length(), rom_dir=p.rom_dir)
        e_range = self.rsqrt.e_range
        self.apply_rms = ApplyMant(v_bits=p.v_bits, v_frac=p.v_frac, out_frac=X.frac, out_bits=p.y_bits,
                                   e_range=e_range)
        self.apply_l2 = ApplyMant(v_bits=p.v_bits, v_frac=p.v_frac, out_frac=UNIT.frac, out_bits=UNIT.bits,
                                  e_range=e_range)
        super().__init__({"i": In(stream.Signature(in_layout(p))), "o": Out(stream.Signature(out_layout(p)))})

    def elaborate(self, platform):
        m = Module()
        p = self.params
        ip = self.i.payload
        buf_w = -(-(p.v_bits + NORM_OFFSET_BITS) // 8) * 8
        addr_w = p.len_log2
        m.submodules.rsqrt = rsqrt = self.rsqrt
        m.submodules.apply_rms = apply_rms = self.apply_rms
        m.submodules.apply_l2 = apply_l2 = self.apply_l2

        # the vector buffer (one msh_sram)
        we, waddr, wdata = Signal(), Signal(addr_w), Signal(buf_w)
        re, raddr, rdata = Signal(), Signal(addr_w), Signal(buf_w)
        m.submodules.buf = Instance(
            "msh_sram", p_DEPTH=p.max_len, p_WIDTH=buf_w, p_ADDRW=addr_w,
            i_clk=ClockSignal(), i_we=we, i_waddr=waddr, i_wdata=wdata, i_wstrb=Const((1 << (buf_w // 8)) - 1, buf_w // 8),
            i_re=re, i_raddr=raddr, o_rdata=rdata)

        count = Signal(range(p.max_len + 1))      # elements of the current vector
        op = Signal(1)
        first = Signal(init=1)
        # pass 1: write, square, accumulate
        take = Signal()
        m.d.comb += [take.eq(self.i.valid & self.i.ready),
                     we.eq(take), waddr.eq(count), wdata.eq(ip.v.as_unsigned() | (ip.w.as_unsigned() << p.v_bits))]
        sq_v, sq_last = Signal(), Signal()
        v1 = Signal(signed(p.v_bits))
        sq = Signal(unsigned(2 * p.v_bits - 1))
        acc = Signal(unsigned(p.acc_bits))
        acc_done = Signal()
        m.d.sync += [sq_v.eq(take), sq_last.eq(take & ip.last), v1.eq(ip.v), acc_done.eq(sq_last)]
        m.d.sync += sq.eq(v1 * v1)
        sq_v2 = Signal()
        m.d.sync += sq_v2.eq(sq_v)
        with m.If(sq_v2):
            m.d.sync += acc.eq(acc + sq)
        with m.If(take):
            m.d.sync += [count.eq(count + 1), first.eq(ip.last)]
            with m.If(first):
                m.d.sync += op.eq(ip.op)

        # once per vector: round, epsilon, rsqrt
        busy = Signal()          # from the last input until the last output of the vector
        m.d.comb += self.i.ready.eq(~busy)
        with m.If(take & ip.last):
            m.d.sync += busy.eq(1)
        done2 = Signal()
        m.d.sync += done2.eq(acc_done)            # acc holds the full sum one cycle after acc_done
        _, sh_c = leading_one(m, count, "lg")      # log2 n (n a power of two)
        ss = Signal(p.ss_bits)
        eps = Signal(p.ss_bits)
        with m.Switch(sh_c):
            for k in range(p.len_log2 + 1):
                with m.Case(k):
                    m.d.comb += eps.eq(fxp_math.eps_int(p.rms_eps * (1 << k), SQ_FRAC))
        l2_eps = fxp_math.eps_int(p.l2_eps, SQ_FRAC)
        ss_v = Signal()
        sh = Signal(range(p.len_log2 + 1))
        m.d.sync += ss_v.eq(done2)
        with m.If(done2):
            m.d.sync += [ss.eq(round_shift_const(acc, 2 * p.v_frac - SQ_FRAC) + Mux(op, l2_eps, eps)),
                         sh.eq(sh_c)]
        m.d.comb += [rsqrt.en.eq(1), rsqrt.i_valid.eq(ss_v), rsqrt.i.m.eq(ss),
                     rsqrt.i.frac.eq(Mux(op, SQ_FRAC, SQ_FRAC + sh))]
        mant, e = Signal.like(rsqrt.o.mant), Signal.like(rsqrt.o.e)
        draining = Signal()
        rd_ptr = Signal(range(p.max_len + 1))
        with m.If(rsqrt.o_valid):
            m.d.sync += [mant.eq(rsqrt.o.mant), e.eq(rsqrt.o.e), draining.eq(1), rd_ptr.eq(0), acc.eq(0)]

        # pass 2: read, apply, gain, output (every stage advances with en)
        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)
        issue = Signal()
        m.d.comb += [issue.eq(draining & (rd_ptr != count) & en), re.eq(issue), raddr.eq(rd_ptr)]
        r_v, r_last = Signal(), Signal()
        with m.If(en):
            m.d.sync += [r_v.eq(issue), r_last.eq(rd_ptr == count - 1)]
        with m.If(issue):
            m.d.sync += rd_ptr.eq(rd_ptr + 1)
        rv = rdata[:p.v_bits].as_signed()
        rw = rdata[p.v_bits:p.v_bits + NORM_OFFSET_BITS].as_signed()
        for a in (apply_rms, apply_l2):
            m.d.comb += [a.en.eq(en), a.i_valid.eq(r_v), a.i.v.eq(rv), a.i.mant.eq(mant), a.i.e.eq(e)]
        lat = ApplyMant.LATENCY
        gain = delay(m, en, rw + (1 << NORM_OFFSET_FRAC), lat, "gain")
        last_a = delay(m, en, r_last, lat, "last_a")
        op_a = delay(m, en, op, lat, "op_a")
        l2_a = apply_l2.o.y
        prod = Signal(signed(p.y_bits + NORM_OFFSET_BITS + 2))
        l2_b = Signal(signed(UNIT.bits))
        v_b, last_b, op_b = Signal(), Signal(), Signal()
        with m.If(en):
            m.d.sync += [prod.eq(apply_rms.o.y * gain), l2_b.eq(l2_a), v_b.eq(apply_rms.o_valid),
                         last_b.eq(last_a), op_b.eq(op_a)]
            m.d.sync += [self.o.valid.eq(v_b), self.o.payload.last.eq(last_b),
                         self.o.payload.y.eq(Mux(op_b, l2_b,
                                                  clamp(round_shift_const(prod, NORM_OFFSET_FRAC), X.lo, X.hi)))]
        # end of the vector: the last output leaves
        with m.If(self.o.valid & self.o.ready & self.o.payload.last):
            m.d.sync += [busy.eq(0), draining.eq(0), count.eq(0), first.eq(1)]
        return m
