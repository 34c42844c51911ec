"""The norm unit: RMSNorm (``fxp_math.rmsnorm``) and L2 norm (``fxp_math.l2norm``) of one streamed vector.

Stream ``i`` carries ``K = NormParams.lanes`` consecutive elements per transfer: ``v[k]`` (signed
``NormParams.v_bits``, ``v_frac`` fraction bits, X by default), ``w[k]`` (the Q2.13 norm offset of that
element; RMSNorm gain = 2^13 + w, ignored by L2), ``op`` (``NormOp``: sampled on the first transfer of
a vector) and ``last``. Stream ``o`` carries the normalised vector, K elements per transfer, ``y[k]``
(X for RMSNorm, UNIT for L2, sign-extended to the field) and ``last``.

Per vector (n elements, n a power of two with K <= n <= ``max_len`` for RMSNorm, any multiple of K up
to max_len for L2):
* pass 1, one transfer (K elements) per cycle: the elements and their offsets go into an ``msh_sram``
  buffer (n/K words of K × roundup8(v_bits + 16) bits: at 128 × 48 bits an SRAM macro is cheaper than
  flops, SPEC §5), K v² (v_bits × v_bits multiplies, their own stage) accumulate exactly;
* the sum of squares is rounded once to SQ_FRAC (``fxp_math.sum_squares``), the epsilon constant
  is added (RMSNorm: eps·n for the run-time n, a small constant table over log2 n; L2: eps), and
  one ``hw.lib.lut.Rsqrt`` (frac = SQ_FRAC + log2 n, resp. SQ_FRAC) gives (mant, e) once;
* pass 2, one transfer per cycle under back-pressure: buffer read, K ``ApplyMant`` (v × mant, shift;
  RMSNorm's multiply v × mant on pass 1's squarers, which are idle by then), then RMSNorm × gain (round
  half up, saturate to X) or L2 saturate to UNIT (without ``l2`` the unit
  does RMSNorm only and has no L2 datapath).
Latency (no stalls, measured by verification/test_vector_unit.py ``vector_latency`` at K = 1): the
first output leaves ``NormUnit.GAP`` = 14 cycles after the last input, then one transfer per cycle: a
64-element vector takes 64/K + 14 + 64/K − 1 cycles from its first input to its last output (141 at
K = 1; 16 and 143 before issue 21 squared a registered copy of the input and read after capturing mant).
The unit takes the next vector after
the last output of the previous one (no overlap of the two passes: a second buffer would double
the SRAM).
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.lut import ApplyMant, Rsqrt
from hw.lib.lut_rom import port_of
from hw.lib.pipe import clamp, delay, leading_one, round_shift_const
from hw.params import pow2_at_least, require_instance
from hw.roms import ROM_DIR
from nano_k3 import fxp_math
from nano_k3.config import L2_EPS, RMS_EPS
from nano_k3.fxp_ops import SQ_FRAC, UNIT, X
from nano_k3.tensors import PARAM_BITS, PARAM_FORMATS

NORM_OFFSET_BITS = PARAM_BITS                       # the norm offset w, a small int16 parameter (SPEC §4.4) ...
NORM_OFFSET_FRAC = PARAM_FORMATS["norm"][0]         # ... Q2.13


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
    rom_dir: str = ROM_DIR
    lanes: int = 1             # elements per transfer (K)
    l2: bool = True            # build the L2-norm datapath (NormOp.L2)

    def __post_init__(self) -> None:
        pow2_at_least("max_len", self.max_len, 2)
        pow2_at_least("lanes", self.lanes, 1)
        if self.lanes > self.max_len:
            raise ValueError(f"lanes must be at most max_len={self.max_len}, got {self.lanes}")
        if not isinstance(self.l2, bool):
            raise ValueError(f"l2 must be a bool, got {self.l2!r}")
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
    return StructLayout({"v": ArrayLayout(signed(p.v_bits), p.lanes),
                         "w": ArrayLayout(signed(NORM_OFFSET_BITS), p.lanes), "op": unsigned(1),
                         "last": unsigned(1)})


def out_layout(p: NormParams) -> StructLayout:
    return StructLayout({"y": ArrayLayout(signed(max(X.bits, UNIT.bits)), p.lanes), "last": unsigned(1)})


class NormUnit(wiring.Component):
    """RMSNorm / L2 norm of streamed vectors (see the module docstring)."""

    # cycles from the last input transfer to the first output (no stalls): square, accumulate, round +
    # epsilon, Rsqrt, then the pass-2 pipeline (SRAM read issued as the Rsqrt result arrives, ApplyMant,
    # gain, output register)
    GAP = 3 + Rsqrt.LATENCY + 1 + ApplyMant.LATENCY + 2

    def __init__(self, params: NormParams = NormParams(), *, roms=None):
        """``roms``: shared-ROM ports by table name (``hw.lib.lut_rom.shared_rom``), else the Rsqrt owns its ROM."""
        require_instance(self, params, NormParams)
        self.params = params
        p = params
        self.rsqrt = Rsqrt(m_bits=p.ss_bits, frac_bits=(SQ_FRAC + p.len_log2).bit_length(), rom_dir=p.rom_dir,
                           port=port_of(roms, "rsqrt"))
        e_range = self.rsqrt.e_range
        # the lanes' squarers (pass 1) do RMSNorm's v × mant too (pass 2): one multiplier a lane
        self.apply_rms = [ApplyMant(v_bits=p.v_bits, v_frac=p.v_frac, out_frac=X.frac, out_bits=p.y_bits,
                                    e_range=e_range, external_mul=True) for _ in range(p.lanes)]
        self.apply_l2 = [ApplyMant(v_bits=p.v_bits, v_frac=p.v_frac, out_frac=UNIT.frac, out_bits=UNIT.bits,
                                   e_range=e_range) for _ in range(p.lanes if p.l2 else 0)]
        super().__init__({"i": In(stream.Signature(in_layout(p))), "o": Out(stream.Signature(out_layout(p)))})

    def elaborate(self, platform):
        m = Module()
        p = self.params
        K = p.lanes
        ip = self.i.payload
        el_w = p.v_bits + NORM_OFFSET_BITS
        buf_w = -(-(K * el_w) // 8) * 8
        depth = p.max_len // K
        addr_w = max(1, (depth - 1).bit_length())
        m.submodules.rsqrt = rsqrt = self.rsqrt
        for k, a in enumerate(self.apply_rms):
            m.submodules[f"apply_rms{k}" if K > 1 else "apply_rms"] = a
        for k, a in enumerate(self.apply_l2):
            m.submodules[f"apply_l2_{k}" if K > 1 else "apply_l2"] = a

        # the vector buffer (one msh_sram, K elements and their offsets per word)
        we, waddr, wdata = Signal(), Signal(addr_w), Signal(buf_w)
        re, raddr, rdata = Signal(), Signal(addr_w), Signal(buf_w)
        m.submodules.buf = Instance(
            "msh_sram", p_DEPTH=max(2, depth), p_WIDTH=buf_w, p_ADDRW=addr_w,
            i_clk=ClockSignal(), i_we=we, i_waddr=waddr, i_wdata=wdata, i_wstrb=Const((1 << (buf_w // 8)) - 1, buf_w // 8),
            i_re=re, i_raddr=raddr, o_rdata=rdata)

        count = Signal(range(p.max_len + 1))      # elements of the current vector
        words = Signal(range(depth + 1))          # buffer words of the current vector
        op = Signal(1)
        first = Signal(init=1)
        # pass 1: write, square, accumulate
        take = Signal()
        m.d.comb += [take.eq(self.i.valid & self.i.ready), we.eq(take), waddr.eq(words),
                     wdata.eq(Cat(*[Cat(ip.v[k], ip.w[k]) for k in range(K)]))]
        sq_v, sq_last = Signal(), Signal()
        sq = [Signal(unsigned(2 * p.v_bits - 1), name=f"sq{k}") for k in range(K)]
        acc = Signal(unsigned(p.acc_bits))
        acc_done = Signal()
        draining = Signal()                       # pass 2: the lanes' multipliers are RMSNorm's v × mant
        m.d.sync += [sq_v.eq(take), sq_last.eq(take & ip.last), acc_done.eq(sq_last)]   # acc_done: acc is the sum
        for k, a in enumerate(self.apply_rms):
            mul = Signal(signed(2 * p.v_bits), name=f"mul{k}")
            m.d.comb += [mul.eq(Mux(draining, a.mul_a, ip.v[k]) * Mux(draining, a.mul_b, ip.v[k])), a.mul_p.eq(mul)]
            m.d.sync += sq[k].eq(mul)
        with m.If(sq_v):
            m.d.sync += acc.eq(acc + sum(sq[1:], sq[0]))
        with m.If(take):
            m.d.sync += [count.eq(count + K), words.eq(words + 1), first.eq(ip.last)]
            with m.If(first):
                m.d.sync += op.eq(ip.op if p.l2 else NormOp.RMS)

        # once per vector: round, epsilon, rsqrt
        busy = Signal()          # from the last input until the last output of the vector
        m.d.comb += self.i.ready.eq(~busy)
        with m.If(take & ip.last):
            m.d.sync += busy.eq(1)
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
        m.d.sync += ss_v.eq(acc_done)
        with m.If(acc_done):
            m.d.sync += [ss.eq(round_shift_const(acc, 2 * p.v_frac - SQ_FRAC) + Mux(op, l2_eps, eps)),
                         sh.eq(sh_c)]
        m.d.comb += [rsqrt.en.eq(1), rsqrt.i_valid.eq(ss_v), rsqrt.i.m.eq(ss),
                     rsqrt.i.frac.eq(Mux(op, SQ_FRAC, SQ_FRAC + sh))]
        mant, e = Signal.like(rsqrt.o.mant), Signal.like(rsqrt.o.e)
        rd_ptr = Signal(range(depth + 1))
        with m.If(rsqrt.o_valid):
            m.d.sync += [mant.eq(rsqrt.o.mant), e.eq(rsqrt.o.e), draining.eq(1), acc.eq(0)]

        # pass 2: read, apply, gain, output (every stage advances with en); the first read may issue in the
        # cycle the rsqrt result arrives: its word reaches the ApplyMant as mant and e are held
        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)
        issue = Signal()
        m.d.comb += [issue.eq((draining | rsqrt.o_valid) & (rd_ptr != words) & en), re.eq(issue),
                     raddr.eq(rd_ptr)]
        r_v, r_last = Signal(), Signal()
        with m.If(en):
            m.d.sync += [r_v.eq(issue), r_last.eq(rd_ptr == words - 1)]
        with m.If(issue):
            m.d.sync += rd_ptr.eq(rd_ptr + 1)
        lat = ApplyMant.LATENCY
        last_a = delay(m, en, r_last, lat, "last_a")
        op_a = delay(m, en, op, lat, "op_a")
        v_b, last_b, op_b = Signal(), Signal(), Signal()
        with m.If(en):
            m.d.sync += [v_b.eq(self.apply_rms[0].o_valid), last_b.eq(last_a), op_b.eq(op_a),
                         self.o.valid.eq(v_b), self.o.payload.last.eq(last_b)]
        for k in range(K):
            rv = rdata[k * el_w:k * el_w + p.v_bits].as_signed()
            rw = rdata[k * el_w + p.v_bits:(k + 1) * el_w].as_signed()
            for a in [self.apply_rms[k]] + self.apply_l2[k:k + 1]:
                m.d.comb += [a.en.eq(en), a.i_valid.eq(r_v), a.i.v.eq(rv), a.i.mant.eq(mant), a.i.e.eq(e)]
            gain = delay(m, en, rw + (1 << NORM_OFFSET_FRAC), lat, f"gain{k}")
            prod = Signal(signed(p.y_bits + NORM_OFFSET_BITS + 2), name=f"prod{k}")
            rms_y = clamp(round_shift_const(prod, NORM_OFFSET_FRAC), X.lo, X.hi)
            with m.If(en):
                m.d.sync += prod.eq(self.apply_rms[k].o.y * gain)
            if p.l2:
                l2_b = Signal(signed(UNIT.bits), name=f"l2_b{k}")
                with m.If(en):
                    m.d.sync += [l2_b.eq(self.apply_l2[k].o.y), self.o.payload.y[k].eq(Mux(op_b, l2_b, rms_y))]
            else:
                with m.If(en):
                    m.d.sync += self.o.payload.y[k].eq(rms_y)
        # end of the vector: the last output leaves
        with m.If(self.o.valid & self.o.ready & self.o.payload.last):
            m.d.sync += [busy.eq(0), draining.eq(0), count.eq(0), words.eq(0), first.eq(1), rd_ptr.eq(0)]
        return m
