"""The residual mixer: MIX(cands, name) of SPEC §6.2, bit-exact to ``nano_k3.fixed.residual_mix``.

Arithmetic (formats in docs/fixed_point.md; every width is derived from ``nano_k3`` at construction):

    r_k     = rmsnorm(c_k, X.frac, w)               Σc² exact, rounded to SQ_FRAC, + eps·d, rsqrt LUT,
                                                    × mant, × (1 + w), → X
    score_k = X.fit(Σ_j r_kj · proj_j)              exact sum (frac X.frac + 11), round, saturate
    t_k     = to_log2(score_k)                      × log2 e (C_FRAC), round, saturate → T
    e_k     = exp2_neg(max t − t_k)                 P (UQ1.23)
    mixed_j = apply_mant(round(Σ_k e_k c_kj, X.frac), recip(Σ e)) → X (saturate)

Streams (all ``amaranth.lib.stream``):
* ``i``   candidates, one X element per transfer, candidate-major, oldest first, the current vector last.
  ``last`` ends a candidate; ``final`` (read on the ``last`` transfer) marks the current vector, i.e.
  the end of the mix. The first candidate's length sets d (a power of two, 1..max_d); every candidate
  of the mix must have that length, and a mix has 1..max_cands candidates (more is undefined).
* ``w``, ``proj``  the norm offset (int16 Q2.13) and the score projection (int16 Q4.11), one element
  per transfer, d of each per mix. They are joined with the first candidate: element j of ``i``, ``w``
  and ``proj`` transfer in the same cycle (data from weight storage at run time, read once per mix).
* ``o``   the mixed vector, d X elements, ``last`` on the final one.
* ``e``   (only with ``trace_e``) the n unnormalised softmax weights e_k (P), ``last`` on the final one,
  for traces; it must be consumed (the next mix's combine waits for it).

Storage. One ``msh_sram`` of max_d words holds, at address j, element j of every candidate slot (each
slot X.bits rounded up to whole bytes, written with that slot's byte strobes) plus w_j and proj_j: the
combine reads all candidates of one element in one access, so it runs at one element per cycle with
max_cands parallel multipliers. nano (max_cands 4, max_d 64): 64 × 128 bits = 8 kbit.
LUTs: ``hw.lut_unit`` Rsqrt, Exp2Neg, Recip (one msh_rom each, files ``<rom_dir>/<table>.hex``).

Schedule (one mix at a time; two processes that overlap):
    ingest     one element per cycle: SRAM write, Σc² (multiply and accumulate in separate stages);
               at the end of a candidate its Σc² goes to a one-entry job register
    per job    + eps·d | Rsqrt | score pass: read the SRAM d times (1/cycle), pipeline
               slot mux | ApplyMant(c × mant) | × gain | round, saturate | × proj | accumulate |
               × log2 e (split in two 25-bit halves) | round → t_k | running max
               (the score pass of candidate k overlaps the ingest of candidate k + 1)
    final      Exp2Neg of max t − t_k (one per cycle) and Σe | Recip | combine: read d words
               (1/cycle), e_k × c_kj (max_cands multipliers) | Σ, round to frac 16 |
               ApplyMant(× recip mant, shift, saturate) → ``o``; a stall-able pipeline
               (``~o.valid | o.ready``). The next mix's ingest starts once the last word is read.
Latency (no stalls, ``ResMixer.latency``, checked by the test): the last ``o`` element leaves
(n + 2)·d + 19·(n − 1) + 38 cycles after the first element was accepted (with the present lut_unit
latencies); nano (n = 2, d = 64): 313 cycles. Each score job keeps the scorer busy d + 18 cycles, so
jobs queue by 18 cycles per candidate (overlapping the next job's Rsqrt with the previous pass's
pipeline drain would remove that; not done yet).
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

from hw.params import require_instance
from hw.lut_unit import ApplyMant, Exp2Neg, Recip, Rsqrt, clamp, delay, round_shift_const, signed_width
from nano_k3 import fxp_math, luts
from nano_k3.fixed import Q4_11
from nano_k3.fxp_ops import SQ_FRAC, P, T, X

PARAM_BITS = 16        # norm offset w and proj are int16 small parameters (SPEC §4.4)
W_FRAC = 13            # norm offset Q2.13: gain = 2^13 + w (fxp_math.rmsnorm)
PROJ_FRAC = Q4_11      # proj Q4.11 (fixed.residual_mix)
NUM_FRAC = X.frac      # softmax_combine rounds the numerator Σ e·v to X.frac fractional bits
# RMSNorm epsilon of residual_mix: the default of the reference's rmsnorm, read from its signature.
RMS_EPS = inspect.signature(fxp_math.rmsnorm).parameters["eps"].default


@dataclass(frozen=True)
class ResMixerParams:
    """Build maxima of the residual mixer (SPEC §6.2: nano mixes 2 candidates of d_model = 64)."""

    max_cands: int = 4         # snapshot lists grow with layers / res_block
    max_d: int = 64            # largest vector length (a power of two)
    trace_e: bool = True       # add the ``e`` output stream (softmax weights, for traces)
    rom_dir: str = "roms"      # where $readmemh finds the LUT hex files (see hw.lut_unit)

    def __post_init__(self) -> None:
        for name, lo, hi in (("max_cands", 1, 16), ("max_d", 2, 4096)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {v!r}")
        if self.max_d & (self.max_d - 1):
            raise ValueError(f"max_d must be a power of two (RMSNorm divides by a shift), got {self.max_d}")
        if not isinstance(self.trace_e, bool):
            raise ValueError(f"trace_e must be a bool, got {self.trace_e!r}")
        if not isinstance(self.rom_dir, str) or not self.rom_dir:
            raise ValueError(f"rom_dir must be a non-empty path string, got {self.rom_dir!r}")


def cand_layout() -> StructLayout:
    return StructLayout({"data": signed(X.bits), "last": unsigned(1), "final": unsigned(1)})


def out_layout() -> StructLayout:
    return StructLayout({"data": signed(X.bits), "last": unsigned(1)})


def e_layout() -> StructLayout:
    return StructLayout({"data": unsigned(P.bits), "last": unsigned(1)})


_JOB_STATES = ("RSQRT", "RSQRT_WAIT", "SCORE", "SCORE_WAIT", "SCORE_X", "LOG2", "TMAX")
STATES = {name: k + 1 for k, name in enumerate((
    "IDLE", *_JOB_STATES, *(f"{s}_LAST" for s in _JOB_STATES),   # per candidate; _LAST: the current vector
    "EXP", "EXP_WAIT", "RECIP", "RECIP_WAIT", "COMBINE", "COMBINE_WAIT"))}


def is_k(sig, k: int):
    """sig == k, written as a reduction for k = 0 (yosys turns == 0 into a logical not that lints badly)."""
    return ~sig.any() if k == 0 else sig == k


class ResMixer(wiring.Component):
    """Attention-residual mixer (see the module docstring for streams, storage and schedule)."""

    def __init__(self, params: ResMixerParams = ResMixerParams()):
        require_instance(self, params, ResMixerParams)
        self.params = p = params
        self.log2_max_d = p.max_d.bit_length() - 1
        xb, xf = X.bits, X.frac
        # SRAM word: max_cands slots of whole bytes, then w and proj
        self.slot_bits = 8 * -(-xb // 8)
        self.word_bits = p.max_cands * self.slot_bits + 2 * PARAM_BITS
        # Σc² + eps·d: exact, unsigned
        # Σc² exact (acc_bits), then rounded to SQ_FRAC with eps·d folded into the rounding constant:
        # round_shift(a, s) + eps = (a + 2^(s-1) + eps·2^s) >> s   (ss_bits, the Rsqrt input)
        self.eps = [fxp_math.eps_int(RMS_EPS * (1 << l), SQ_FRAC) for l in range(self.log2_max_d + 1)]
        self.sq_shift = 2 * xf - SQ_FRAC
        sq_max = p.max_d * (1 << (2 * (xb - 1)))
        self.acc_bits = sq_max.bit_length()
        ss_max = (sq_max + (1 << (self.sq_shift - 1))) >> self.sq_shift if self.sq_shift > 0 else sq_max << -self.sq_shift
        self.ss_bits = (ss_max + max(self.eps)).bit_length()
        self.frac_bits = (SQ_FRAC + self.log2_max_d).bit_length()
        # |RN before gain| <= sqrt(d) in real units (plus LUT error): one bit of margin on top
        self.y_bits = (2 * math.isqrt(p.max_d - 1) + 2 << xf).bit_length() + 1
        self.gain_bits = signed_width(-(1 << (PARAM_BITS - 1)) + (1 << W_FRAC), (1 << (PARAM_BITS - 1)) - 1 + (1 << W_FRAC))
        prod_hi = (1 << (xb - 1)) * (1 << (PARAM_BITS - 1))
        self.score_bits = signed_width(-p.max_d * prod_hi, p.max_d * prod_hi)
        self.score_shift = PROJ_FRAC                              # frac X.frac + 11 -> X
        self.log2e_lo_bits = (fxp_math.LOG2E_Q24.bit_length() + 1) // 2
        exp2 = luts.tables()["exp2"]
        if exp2.index_bits + exp2.interp_bits != T.frac:
            raise ValueError(f"exp2 table: index {exp2.index_bits} + interp {exp2.interp_bits} bits != T.frac {T.frac}")
        self.t_shift = xf + fxp_math.C_FRAC - T.frac              # to_log2(score, X.frac) -> T
        self.t_bits = T.bits
        self.esum_bits = (p.max_cands * int(exp2.base.max())).bit_length()
        self.num_shift = P.frac + xf - NUM_FRAC
        e_max = int(exp2.base.max())
        prod_sum = p.max_cands * e_max * (1 << (xb - 1))
        self.num_bits = signed_width(-prod_sum, prod_sum) - max(self.num_shift, 0) + 1
        self.cnt_bits = self.log2_max_d + 1
        self.k_bits = max(1, (p.max_cands - 1).bit_length())
        # LUT-unit cores (constructed here so that their widths are known for the members)
        self.rsqrt = Rsqrt(m_bits=self.ss_bits, frac_bits=self.frac_bits, rom_dir=p.rom_dir)
        self.exp2 = Exp2Neg(t_bits=T.bits, rom_dir=p.rom_dir)   # max t − t_k: 0 .. 2^T.bits − 1
        self.recip = Recip(m_bits=self.esum_bits, frac_bits=P.frac.bit_length(), rom_dir=p.rom_dir)
        self.apply_y = ApplyMant(v_bits=xb, v_frac=xf, out_frac=xf, out_bits=self.y_bits,
                                 e_range=self.rsqrt.e_range, mant_bits=luts.tables()["rsqrt"].base_bits)
        self.apply_o = ApplyMant(v_bits=self.num_bits, v_frac=NUM_FRAC, out_frac=xf, out_bits=xb,
                                 e_range=self.recip.e_range, mant_bits=luts.tables()["recip"].base_bits)
        members = {
            "i": In(stream.Signature(cand_layout())),
            "w": In(stream.Signature(signed(PARAM_BITS))),
            "proj": In(stream.Signature(signed(PARAM_BITS))),
            "o": Out(stream.Signature(out_layout())),
        }
        if p.trace_e:
            members["e"] = Out(stream.Signature(e_layout()))
        super().__init__(members)

    @staticmethod
    def latency(n: int, d: int) -> int:
        """Cycles from the first accepted element to the last ``o`` element, no idles, no back-pressure.

        A candidate's score job (job register, Rsqrt, d reads, 8-stage pipeline, to_log2, max) keeps
        the scorer busy for d + JOB_EXTRA cycles, so the jobs of a mix queue behind each other; after
        the last one: Exp2Neg per candidate, Recip, d combine reads and the 6-stage combine pipeline.
        """
        lat_rs, lat_am, lat_ex, lat_rc = Rsqrt.LATENCY, ApplyMant.LATENCY, Exp2Neg.LATENCY, Recip.LATENCY
        # IDLE, RSQRT, Rsqrt | 1 + ApplyMant + 4 pipeline stages | SCORE_X, LOG2, TMAX
        job_extra = lat_rs + lat_am + 10
        # 3 (Σc² to the job register) + the last job + Exp2Neg, Recip + combine pipeline (3 + ApplyMant)
        tail = 16 + lat_rs + 2 * lat_am + lat_ex + lat_rc
        return (n + 2) * d + (n - 1) * job_extra + n + tail

    def elaborate(self, platform):
        m = Module()
        p, xb, xf = self.params, X.bits, X.frac
        L, kb_w = self.log2_max_d, self.k_bits
        m.submodules.rsqrt = rsqrt = self.rsqrt
        m.submodules.exp2 = exp2 = self.exp2
        m.submodules.recip = recip = self.recip
        m.submodules.apply_y = apply_y = self.apply_y
        m.submodules.apply_o = apply_o = self.apply_o

        # ---- candidate buffer -----------------------------------------------------------------
        we, re = Signal(), Signal()
        waddr, raddr = Signal(L), Signal(L)
        wdata, rdata = Signal(self.word_bits), Signal(self.word_bits)
        wstrb = Signal(self.word_bits // 8)
        m.submodules.cand_sram = Instance(
            "msh_sram", p_DEPTH=p.max_d, p_WIDTH=self.word_bits, p_ADDRW=L,
            i_clk=ClockSignal(), i_we=we, i_waddr=waddr, i_wdata=wdata, i_wstrb=wstrb,
            i_re=re, i_raddr=raddr, o_rdata=rdata)
        slot_bytes = self.slot_bits // 8
        param_lsb = p.max_cands * self.slot_bits

        def slot(k):
            return rdata.word_select(k, self.slot_bits)[:xb].as_signed()

        # ---- ingest -----------------------------------------------------------------------------
        k_in = Signal(kb_w)                 # candidate being received
        j_in = Signal(self.cnt_bits)        # its element index
        dm1 = Signal(L)                     # d - 1 of the current mix (set by candidate 0)
        log2d = Signal(range(L + 1))
        # round_shift(Σc², sq_shift) + eps·d = (Σc² + ss_const) >> sq_shift: one add (eps·2^s is a multiple of 2^s)
        sh = self.sq_shift
        ss_consts = [((1 << (sh - 1)) + (e << sh)) if sh > 0 else e for e in self.eps]
        ss_const = Signal(range(max(ss_consts) + 1))
        hold = Signal()                     # the mix is complete: wait until its combine read every word
        job_full, job_ss, job_k, job_final = Signal(), Signal(self.acc_bits), Signal(kb_w), Signal()
        a1_valid, a1_last, a1_final, a1_v, a1_k = Signal(), Signal(), Signal(), Signal(signed(xb)), Signal(kb_w)
        a2_valid, a2_last, a2_final, a2_sq, a2_k = Signal(), Signal(), Signal(), Signal(2 * xb - 1), Signal(kb_w)
        acc_ss, fresh = Signal(self.acc_bits), Signal(init=1)

        ip = self.i.payload
        first_cand = ~k_in.any()
        params_ok = ~first_cand | (self.w.valid & self.proj.valid)
        # a candidate end may only be taken when its Σc² will find the job register free
        end_ok = ~ip.last | (~job_full & ~(a1_valid & a1_last) & ~(a2_valid & a2_last))
        take = Signal()
        m.d.comb += [
            self.i.ready.eq(~hold & params_ok & end_ok),
            self.w.ready.eq(~hold & first_cand & self.i.valid & self.proj.valid & end_ok),
            self.proj.ready.eq(~hold & first_cand & self.i.valid & self.w.valid & end_ok),
            take.eq(self.i.valid & self.i.ready),
            we.eq(take), waddr.eq(j_in[:L]),
            wdata.eq(Cat(*[Cat(ip.data, ip.data[-1].replicate(self.slot_bits - xb)) for _ in range(p.max_cands)],
                         self.w.payload, self.proj.payload)),
        ]
        for k in range(p.max_cands):
            m.d.comb += wstrb[k * slot_bytes:(k + 1) * slot_bytes].eq(Mux(is_k(k_in, k), (1 << slot_bytes) - 1, 0))
        m.d.comb += wstrb[param_lsb // 8:].eq(Mux(first_cand, (1 << (2 * PARAM_BITS // 8)) - 1, 0))

        m.d.sync += [a1_valid.eq(take), a1_last.eq(ip.last), a1_final.eq(ip.final), a1_v.eq(ip.data),
                     a1_k.eq(k_in),
                     a2_valid.eq(a1_valid), a2_last.eq(a1_last), a2_final.eq(a1_final), a2_k.eq(a1_k),
                     a2_sq.eq(a1_v * a1_v)]
        with m.If(take):
            m.d.sync += j_in.eq(j_in + 1)
            with m.If(ip.last):
                m.d.sync += [j_in.eq(0), k_in.eq(k_in + 1)]
                with m.If(first_cand):
                    m.d.sync += dm1.eq(j_in)
                    for l in range(L + 1):
                        with m.If(is_k(j_in, (1 << l) - 1)):
                            m.d.sync += [log2d.eq(l), ss_const.eq(ss_consts[l])]
                with m.If(ip.final):
                    m.d.sync += [k_in.eq(0), hold.eq(1)]
        ss_next = Signal(self.acc_bits)
        m.d.comb += ss_next.eq(Mux(fresh, 0, acc_ss) + a2_sq)
        with m.If(a2_valid):
            m.d.sync += [acc_ss.eq(ss_next), fresh.eq(a2_last)]
            with m.If(a2_last):
                m.d.sync += [job_full.eq(1), job_ss.eq(ss_next), job_k.eq(a2_k), job_final.eq(a2_final)]

        # ---- per-candidate score and the final softmax / combine -----------------------------------
        kb, nb_m1 = Signal(kb_w), Signal(kb_w)    # candidate being scored; n - 1 of the mix
        m_rs = Signal(self.ss_bits)
        mant_rs, e_rs = Signal(rsqrt.o.mant.shape()), Signal(rsqrt.o.e.shape())
        mant_rc, e_rc = Signal(recip.o.mant.shape()), Signal(recip.o.e.shape())
        jp = Signal(self.cnt_bits)                # score / combine read address
        score = Signal(signed(self.score_bits))
        score_done = Signal()
        score_x = Signal(signed(xb))
        t_regs = [Signal(signed(self.t_bits), name=f"t_{k}") for k in range(p.max_cands)]
        t_cur, t_max = Signal(signed(self.t_bits)), Signal(signed(self.t_bits))
        lo_bits = self.log2e_lo_bits
        c_lo, c_hi = fxp_math.LOG2E_Q24 & ((1 << lo_bits) - 1), fxp_math.LOG2E_Q24 >> lo_bits
        plo = Signal(signed(xb + lo_bits + 1))
        phi = Signal(signed(xb + c_hi.bit_length() + 1))
        e_regs = [Signal(exp2.o.y.shape(), name=f"e_{k}") for k in range(p.max_cands)]
        esum = Signal(self.esum_bits)
        kx, ko = Signal(kb_w), Signal(kb_w)       # exp issue / collect counters
        e_busy, e_cnt = Signal(), Signal(kb_w)
        o_done = Signal()
        sc_issue, cb_issue = Signal(), Signal()
        adv = Signal()                            # the combine pipeline moves (output free or taken)
        m.d.comb += adv.eq(~self.o.valid | self.o.ready)
        for core in (rsqrt, exp2, recip, apply_y):
            m.d.comb += core.en.eq(1)
        m.d.comb += [apply_o.en.eq(adv),
                     rsqrt.i.m.eq(m_rs), rsqrt.i.frac.eq(SQ_FRAC + log2d),
                     recip.i.m.eq(esum), recip.i.frac.eq(P.frac),
                     re.eq(sc_issue | (cb_issue & adv)), raddr.eq(jp[:L])]
        t_sel = Signal(signed(self.t_bits))
        m.d.comb += t_sel.eq(t_regs[0])
        for k in range(1, p.max_cands):
            with m.If(kx == k):
                m.d.comb += t_sel.eq(t_regs[k])
        m.d.comb += exp2.i.t.eq(t_max - t_sel)

        # one state register, states numbered from 1 (a compare with 0 lints as a width warning)
        state = Signal(range(len(STATES) + 1), init=STATES["IDLE"])
        with m.If(state == STATES["IDLE"]):
            with m.If(job_full):
                ss = ((job_ss + ss_const) >> sh) if sh > 0 else ((job_ss << -sh) + ss_const)
                m.d.sync += [job_full.eq(0), m_rs.eq(ss), kb.eq(job_k)]
                m.d.sync += nb_m1.eq(job_k)
                with m.If(job_final):
                    m.d.sync += state.eq(STATES["RSQRT_LAST"])
                with m.Else():
                    m.d.sync += state.eq(STATES["RSQRT"])
        for name, final in (("RSQRT", False), ("RSQRT_LAST", True)):
            with m.If(state == STATES[name]):
                m.d.comb += rsqrt.i_valid.eq(1)
                m.d.sync += state.eq(STATES["RSQRT_WAIT_LAST" if final else "RSQRT_WAIT"])
            with m.If(state == STATES["RSQRT_WAIT_LAST" if final else "RSQRT_WAIT"]):
                with m.If(rsqrt.o_valid):
                    m.d.sync += [mant_rs.eq(rsqrt.o.mant), e_rs.eq(rsqrt.o.e), jp.eq(0)]
                    m.d.sync += state.eq(STATES["SCORE_LAST" if final else "SCORE"])
            with m.If(state == STATES["SCORE_LAST" if final else "SCORE"]):
                m.d.comb += sc_issue.eq(1)
                m.d.sync += jp.eq(jp + 1)
                with m.If(jp[:L] == dm1):
                    m.d.sync += state.eq(STATES["SCORE_WAIT_LAST" if final else "SCORE_WAIT"])
            with m.If(state == STATES["SCORE_WAIT_LAST" if final else "SCORE_WAIT"]):
                with m.If(score_done):
                    m.d.sync += score_x.eq(clamp(round_shift_const(score, self.score_shift), X.lo, X.hi))
                    m.d.sync += state.eq(STATES["SCORE_X_LAST" if final else "SCORE_X"])
            with m.If(state == STATES["SCORE_X_LAST" if final else "SCORE_X"]):
                m.d.sync += [plo.eq(score_x * c_lo), phi.eq(score_x * c_hi)]
                m.d.sync += state.eq(STATES["LOG2_LAST" if final else "LOG2"])
            with m.If(state == STATES["LOG2_LAST" if final else "LOG2"]):
                m.d.sync += t_cur.eq(clamp(round_shift_const((phi << lo_bits) + plo, self.t_shift), T.lo, T.hi))
                m.d.sync += state.eq(STATES["TMAX_LAST" if final else "TMAX"])
            with m.If(state == STATES["TMAX_LAST" if final else "TMAX"]):
                for k in range(p.max_cands):
                    with m.If(is_k(kb, k)):
                        m.d.sync += t_regs[k].eq(t_cur)
                with m.If(~kb.any() | (t_cur > t_max)):
                    m.d.sync += t_max.eq(t_cur)
                if final:
                    m.d.sync += [kx.eq(0), ko.eq(0), esum.eq(0)] + [e.eq(0) for e in e_regs]
                    m.d.sync += state.eq(STATES["EXP"])
                else:
                    m.d.sync += state.eq(STATES["IDLE"])
        with m.If(state == STATES["EXP"]):
            m.d.comb += exp2.i_valid.eq(1)
            m.d.sync += kx.eq(kx + 1)
            with m.If(kx == nb_m1):
                m.d.sync += state.eq(STATES["EXP_WAIT"])
        with m.If(state == STATES["EXP_WAIT"]):
            with m.If(exp2.o_valid & (ko == nb_m1)):
                m.d.sync += state.eq(STATES["RECIP"])
        with m.If(state == STATES["RECIP"]):
            m.d.comb += recip.i_valid.eq(1)
            m.d.sync += [e_busy.eq(int(p.trace_e)), e_cnt.eq(0)]
            m.d.sync += state.eq(STATES["RECIP_WAIT"])
        with m.If(state == STATES["RECIP_WAIT"]):
            with m.If(recip.o_valid):
                m.d.sync += [mant_rc.eq(recip.o.mant), e_rc.eq(recip.o.e), jp.eq(0), o_done.eq(0)]
                m.d.sync += state.eq(STATES["COMBINE"])
        with m.If(state == STATES["COMBINE"]):
            m.d.comb += cb_issue.eq(1)
            with m.If(adv):
                m.d.sync += jp.eq(jp + 1)
                with m.If(jp[:L] == dm1):
                    m.d.sync += hold.eq(0)     # every word is read: the next mix may overwrite
                    m.d.sync += state.eq(STATES["COMBINE_WAIT"])
        with m.If(state == STATES["COMBINE_WAIT"]):
            with m.If(o_done & ~e_busy):
                m.d.sync += state.eq(STATES["IDLE"])

        # exp2 results arrive in issue order
        with m.If(exp2.o_valid):
            m.d.sync += [ko.eq(ko + 1), esum.eq(esum + exp2.o.y)]
            for k in range(p.max_cands):
                with m.If(is_k(ko, k)):
                    m.d.sync += e_regs[k].eq(exp2.o.y)

        # ---- score pass pipeline (never stalls) ----------------------------------------------------
        s1_valid, s1_last = Signal(), Signal()
        m.d.sync += [s1_valid.eq(sc_issue), s1_last.eq(jp[:L] == dm1)]
        v_sel = Signal(signed(xb))
        m.d.comb += v_sel.eq(slot(0))
        for k in range(1, p.max_cands):
            with m.If(is_k(kb, k)):
                m.d.comb += v_sel.eq(slot(k))
        w_rd = rdata[param_lsb:param_lsb + PARAM_BITS].as_signed()
        pj_rd = rdata[param_lsb + PARAM_BITS:param_lsb + 2 * PARAM_BITS].as_signed()
        gain2, proj2 = Signal(signed(self.gain_bits)), Signal(signed(PARAM_BITS))
        m.d.sync += [gain2.eq(w_rd + (1 << W_FRAC)), proj2.eq(pj_rd)]
        m.d.comb += [apply_y.i_valid.eq(s1_valid), apply_y.i.v.eq(v_sel), apply_y.i.mant.eq(mant_rs),
                     apply_y.i.e.eq(e_rs)]
        one = Const(1)
        y_last = delay(m, one, s1_last, ApplyMant.LATENCY, "y_last")
        gain_y = delay(m, one, gain2, ApplyMant.LATENCY - 1, "gain")
        proj_y = delay(m, one, proj2, ApplyMant.LATENCY - 1, "proj")
        # × gain | round, saturate to X | × proj | accumulate
        s4_valid, s4_last = Signal(), Signal()
        yg4 = Signal(signed(self.y_bits + self.gain_bits))
        proj4 = Signal(signed(PARAM_BITS))
        m.d.sync += [s4_valid.eq(apply_y.o_valid), s4_last.eq(y_last), yg4.eq(apply_y.o.y * gain_y),
                     proj4.eq(proj_y)]
        s5_valid, s5_last = Signal(), Signal()
        r5 = Signal(signed(xb))
        proj5 = Signal(signed(PARAM_BITS))
        m.d.sync += [s5_valid.eq(s4_valid), s5_last.eq(s4_last), proj5.eq(proj4),
                     r5.eq(clamp(round_shift_const(yg4, W_FRAC), X.lo, X.hi))]
        s6_valid, s6_last = Signal(), Signal()
        rp6 = Signal(signed(xb + PARAM_BITS))
        m.d.sync += [s6_valid.eq(s5_valid), s6_last.eq(s5_last), rp6.eq(r5 * proj5)]
        sc_fresh = Signal(init=1)
        m.d.sync += score_done.eq(0)
        with m.If(s6_valid):
            m.d.sync += [score.eq(Mux(sc_fresh, 0, score) + rp6), sc_fresh.eq(s6_last), score_done.eq(s6_last)]

        # ---- combine pipeline (stalls with the output) -------------------------------------------
        c1_valid, c1_last = Signal(), Signal()
        c2_valid, c2_last = Signal(), Signal()
        c2 = [Signal(signed(xb), name=f"c2_{k}") for k in range(p.max_cands)]
        c3_valid, c3_last = Signal(), Signal()
        prod3 = [Signal(signed(P.bits + xb + 1), name=f"prod3_{k}") for k in range(p.max_cands)]
        with m.If(adv):
            m.d.sync += [c1_valid.eq(cb_issue), c1_last.eq(jp[:L] == dm1),
                         c2_valid.eq(c1_valid), c2_last.eq(c1_last),
                         c3_valid.eq(c2_valid), c3_last.eq(c2_last)]
            m.d.sync += [c2[k].eq(slot(k)) for k in range(p.max_cands)]
            m.d.sync += [prod3[k].eq(e_regs[k] * c2[k]) for k in range(p.max_cands)]
        num = Signal(signed(self.num_bits))
        total = sum(prod3[1:], prod3[0])
        m.d.comb += [num.eq(round_shift_const(total, self.num_shift)),
                     apply_o.i_valid.eq(c3_valid), apply_o.i.v.eq(num), apply_o.i.mant.eq(mant_rc),
                     apply_o.i.e.eq(e_rc)]
        o_last = delay(m, adv, c3_last, ApplyMant.LATENCY, "o_last")
        m.d.comb += [self.o.valid.eq(apply_o.o_valid), self.o.payload.data.eq(apply_o.o.y),
                     self.o.payload.last.eq(o_last)]
        with m.If(self.o.valid & self.o.ready & self.o.payload.last):
            m.d.sync += o_done.eq(1)

        # ---- e trace ------------------------------------------------------------------------------
        if p.trace_e:
            e_sel = Signal(P.bits)
            m.d.comb += e_sel.eq(e_regs[0])
            for k in range(1, p.max_cands):
                with m.If(e_cnt == k):
                    m.d.comb += e_sel.eq(e_regs[k])
            m.d.comb += [self.e.valid.eq(e_busy), self.e.payload.data.eq(e_sel),
                         self.e.payload.last.eq(e_cnt == nb_m1)]
            with m.If(self.e.valid & self.e.ready):
                m.d.sync += e_cnt.eq(e_cnt + 1)
                with m.If(self.e.payload.last):
                    m.d.sync += e_busy.eq(0)
        return m


# --- rtl_gen entry (rtl_gen.emit.BLOCKS) ----------------------------------------------------------------
def res_mixer_block(chip) -> ResMixer:
    """The block rtl_gen emits: the default build maxima (ChipParams carries no mixer parameters yet)."""
    return ResMixer(ResMixerParams())


def res_mixer_derived(chip) -> dict:
    p = ResMixerParams()
    return {"max_cands": p.max_cands, "max_d": p.max_d, "trace_e": p.trace_e, "rom_dir": p.rom_dir,
            "sram_words": p.max_d, "sram_word_bits": p.max_cands * 8 * -(-X.bits // 8) + 2 * PARAM_BITS,
            "roms": ["rsqrt", "exp2", "recip"], "latency_n2_d64": ResMixer.latency(2, 64)}
