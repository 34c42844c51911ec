"""KDA tail: per head, the read-out rotated through L squarers (sum read^2), its rsqrt, then the
back-pressured output pipeline (ApplyMant, gain, x sigmoid(z)) on L lanes. Adds its logic to the
engine's module (hw/kda_engine.py, output stages O0..O7)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal, signed, unsigned
from amaranth.lib.data import ArrayLayout, StructLayout

from hw.kda_front import field_of
from hw.kda_params import PARAM_BITS, W_FRAC
from hw.lib.lut import ApplyMant
from hw.lib.pipe import clamp, delay, round_shift_const
from nano_k3.fxp_ops import P, S, X


def tail(m: Module, ctx) -> None:
    """The tail of every head, overlapping the next head's rows: take read, sum read^2, rsqrt, the
    gated output pipeline into ``o``; ``ctx.pos_done`` after the last head's last output."""
    cols, L, dh, head, ss_o, core, tstate = ctx.cols, ctx.L, ctx.dh, ctx.head, ctx.ss_o, ctx.core, ctx.tstate
    TAIL, rd_full, rd, rd_head, tail_rq = ctx.TAIL, ctx.rd_full, ctx.rd, ctx.rd_head, ctx.tail_rq
    rsqrt_o, in_done, pos_done, H, lg_l, hbits = ctx.rsqrt_o, ctx.in_done, ctx.pos_done, ctx.H, ctx.lg_l, ctx.hbits
    gt, mant_o, e_o, gt_w, gt_off = ctx.gt, ctx.mant_o, ctx.e_o, ctx.gt_w, ctx.gt_off
    ordr = [Signal(signed(S.bits), name=f"oread_{j}") for j in cols]   # rotates by L per use; lane k: ordr[k]
    rotate = Signal()
    with m.If(rotate):
        m.d.sync += [ordr[j].eq(ordr[(j + L) % dh]) for j in cols]
    t_head = Signal.like(head)
    tcnt = Signal(range(dh // L + 2))
    sq_v = Signal()
    sq = [Signal(unsigned(2 * S.bits), name=f"osq_{k}") for k in range(L)]
    m.d.sync += [sq_v.eq(0), *(sq[k].eq(ordr[k] * ordr[k]) for k in range(L))]
    with m.If(sq_v):
        m.d.sync += ss_o.eq(ss_o + sum(sq))
    adv = Signal()
    m.d.comb += adv.eq(~core.o.valid | core.o.ready)
    ocol = Signal(range(dh + 1))                           # index of lane 0 of the next output transfer
    o_issue = Signal()
    o_end = Signal()                                       # the output register holds a head's last elements
    with m.If(tstate == TAIL["IDLE"]):
        with m.If(rd_full):
            m.d.sync += [*(ordr[j].eq(rd[j]) for j in cols), t_head.eq(rd_head), rd_full.eq(0),
                         tcnt.eq(0), ss_o.eq(0), tstate.eq(TAIL["SS"])]
    with m.If(tstate == TAIL["SS"]):
        m.d.sync += tcnt.eq(tcnt + 1)
        with m.If(tcnt < dh // L):
            m.d.comb += rotate.eq(1)
            m.d.sync += sq_v.eq(1)
        with m.If(tcnt == dh // L + 1):
            m.d.comb += tail_rq.eq(1)
            m.d.sync += tstate.eq(TAIL["RSQ"])
    with m.If(tstate == TAIL["RSQ"]):
        with m.If(rsqrt_o):
            m.d.sync += [tstate.eq(TAIL["OUT"]), ocol.eq(0)]
    with m.If(tstate == TAIL["OUT"]):
        m.d.comb += o_issue.eq((ocol < dh) & in_done)
        with m.If(o_issue & adv):
            m.d.comb += rotate.eq(1)
            m.d.sync += ocol.eq(ocol + L)
        with m.If(core.o.valid & core.o.ready & o_end):
            m.d.sync += tstate.eq(TAIL["IDLE"])
            m.d.comb += pos_done.eq((t_head == H - 1) if H > 1 else 1)
    # O0 issue (gate SRAM read: one word, the L indices of the transfer; ApplyMant inputs) | O1..O3
    # ApplyMant | O4 gain product | O5 rounded to X | O6 x sigmoid(z) | O7 output register; per lane,
    # every stage holds while the output register is full
    gaddr = Cat(ocol[lg_l:core.lg_dh], t_head[:hbits]) if H > 1 else ocol[lg_l:core.lg_dh]
    m.d.comb += [gt["re"].eq(o_issue & adv), gt["raddr"].eq(gaddr)]
    out_side_layout = StructLayout({"read": ArrayLayout(signed(S.bits), L), "end": 1, "last": 1})
    out_side0 = Signal(out_side_layout)
    m.d.comb += [out_side0.read.eq(Cat(*ordr[:L])), out_side0.end.eq(ocol == dh - L),
                 out_side0.last.eq((ocol == dh - L) & ((t_head == H - 1) if H > 1 else 1))]
    out_side3 = delay(m, adv, out_side0, ApplyMant.LATENCY, "out_side")
    gword3 = delay(m, adv, gt["rdata"], ApplyMant.LATENCY - 1, "gate")
    for k, apo in enumerate(core.apply_o):
        m.d.comb += [apo.en.eq(adv), apo.i_valid.eq(o_issue), apo.i.v.eq(ordr[k]), apo.i.mant.eq(mant_o),
                     apo.i.e.eq(e_o)]
        glane3 = gword3.word_select(k, gt_w)
        sigz3, w3 = field_of(glane3, gt_off, "sigz", P.bits, sgn=False), field_of(glane3, gt_off, "w", PARAM_BITS)
        gain_prod4 = Signal(signed(core.y_bits + PARAM_BITS + 2), name=f"gain_prod4_{k}")
        gained_x5 = Signal(signed(X.bits), name=f"gained_x5_{k}")
        gated_p6 = Signal(signed(X.bits + P.bits + 1), name=f"gated_p6_{k}")
        sigz5 = delay(m, adv, sigz3, 2, f"sigz_{k}")
        with m.If(adv):
            m.d.sync += [gain_prod4.eq(apo.o.y * ((1 << W_FRAC) + w3)),
                         gained_x5.eq(clamp(round_shift_const(gain_prod4, W_FRAC), X.lo, X.hi)),
                         gated_p6.eq(gained_x5 * sigz5),
                         core.o.payload.data[k].eq(clamp(round_shift_const(gated_p6, P.frac), X.lo, X.hi))]
    out_side6 = delay(m, adv, out_side3, 3, "out_side3")
    out_valid6 = delay(m, adv, core.apply_o[0].o_valid, 3, "out_valid")
    with m.If(adv):
        m.d.sync += [core.o.valid.eq(out_valid6), core.o.payload.read.eq(out_side6.read), core.o.payload.last.eq(out_side6.last),
                     o_end.eq(out_side6.end)]
