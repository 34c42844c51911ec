"""Residual mixer datapath: the candidate buffer and ingest (Σc² and the score dot Σc·h per candidate),
the controller of the per-candidate steps and the combine pass over the buffer, the lanes (the K squares and
dot products; the dot's multipliers form the combine's e·c), the score and to_log2 and the running max, and
the combine into ``o``. These functions add their logic to the mixer's module
(hw/res_mixer.py describes the mixer)."""
from __future__ import annotations

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, signed

from hw.lib.lut import ApplyMant, Recip
from hw.lib.pipe import clamp, delay, eq_const, round_shift_const
from nano_k3 import fxp_math
from nano_k3.fxp_ops import SQ_FRAC, P, T, X

W_FRAC = fxp_math.NORM_FRAC            # norm offset w (Q2.13): gain = 2^W_FRAC + w (fxp_math.rmsnorm)

STATES = {name: k + 1 for k, name in enumerate((
    "IDLE", "RSQRT", "RSQRT_WAIT", "SCORE", "LOG2_WAIT",
    "EXP", "EXP_WAIT", "RECIP", "RECIP_WAIT", "COMBINE", "COMBINE_WAIT"))}

# A combine word's products e_k·c_kj: the word in the lanes' operand registers, then their product registers
# (the score dot's multipliers, which the combine borrows).
LANE_LATENCY = 2
# The combine's first read, in cycles after the Recip issue: its products leave the lanes (a read cycle and
# LANE_LATENCY later) in the cycle 1 / Σe is first held (Recip.LATENCY + 1), not before.
COMBINE_LEAD = max(1, Recip.LATENCY - LANE_LATENCY)


def select(m: Module, regs: list, sel, name: str):
    """regs[sel] (regs[0] when sel is out of range): a mux over per-candidate registers."""
    out = Signal.like(regs[0], name=name)
    m.d.comb += out.eq(regs[0])
    for k in range(1, len(regs)):
        with m.If(sel == k):
            m.d.comb += out.eq(regs[k])
    return out


def buffer_and_ingest(m: Module, ctx) -> None:
    """The candidate buffer (word a holds element groups K·a .. K·a + K − 1) and the ingest of a mix:
    candidates into the buffer; h_j = (2^W_FRAC + w_j) · proj_j beside them for the lanes' score dots."""
    A, unit, nc, xb, kb_w, K = ctx.A, ctx.unit, ctx.nc, ctx.xb, ctx.kb_w, ctx.K
    we, re = Signal(), Signal()
    waddr, raddr = Signal(A), Signal(A)
    wdata, rdata = Signal(unit.word_bits), Signal(unit.word_bits)
    m.submodules.cand_sram = Instance(
        "msh_sram", p_DEPTH=unit.sram_words, p_WIDTH=unit.word_bits, p_ADDRW=A,
        i_clk=ClockSignal(), i_we=we, i_waddr=waddr, i_wdata=wdata,
        i_wstrb=Const((1 << (unit.word_bits // 8)) - 1, unit.word_bits // 8),
        i_re=re, i_raddr=raddr, o_rdata=rdata)

    def group(l):
        return rdata.word_select(l, unit.group_bits)

    def slot(k, l):
        return group(l).word_select(k, unit.slot_bits)[:xb].as_signed()

    # ---- ingest -----------------------------------------------------------------------------
    j_in = Signal(unit.cnt_bits)        # transfer (word) being received
    n_in_m1 = Signal(kb_w)              # n - 1 of the mix being received
    dm1 = Signal(A)                     # d / K - 1 of the current mix
    log2d = Signal(range(unit.log2_max_d + 1))
    # round_shift(Σc², sq_shift) + eps·d = (Σc² + ss_const) >> sq_shift: one add (eps·2^s is a multiple of 2^s)
    sh = unit.sq_shift
    ss_consts = [((1 << (sh - 1)) + (e << sh)) if sh > 0 else e for e in unit.eps]
    ss_const = Signal(range(max(ss_consts) + 1))
    hold = Signal()                     # the mix is complete: wait until its combine read every word
    ss_ready = Signal()                 # every Σc² of the received mix is final, not yet taken
    a1_valid, a1_last, a2_valid, a2_last = Signal(), Signal(), Signal(), Signal()
    a1_v = [[Signal(signed(xb), name=f"a1_v_{k}_{l}") for l in range(K)] for k in range(nc)]   # (nc, K)
    a1_h = [Signal(signed(unit.h_bits), name=f"a1_h_{l}") for l in range(K)]                  # (K,)

    ip = unit.i.payload
    take = Signal()
    m.d.comb += [
        unit.i.ready.eq(~hold & unit.w.valid & unit.proj.valid),
        unit.w.ready.eq(~hold & unit.i.valid & unit.proj.valid),
        unit.proj.ready.eq(~hold & unit.i.valid & unit.w.valid),
        take.eq(unit.i.valid & unit.i.ready),
        we.eq(take), waddr.eq(j_in[:A]),
        wdata.eq(Cat(*[Cat(ip.data[k][l], ip.data[k][l][-1].replicate(unit.slot_bits - xb))
                       for l in range(K) for k in range(nc)])),
    ]
    m.d.sync += [a1_valid.eq(take), a1_last.eq(ip.last), a2_valid.eq(a1_valid), a2_last.eq(a1_last)]
    m.d.sync += [a1_h[l].eq((unit.w.payload[l] + (1 << W_FRAC)) * unit.proj.payload[l]) for l in range(K)]
    with m.If(a2_valid & a2_last):          # the lanes' accumulators hold Σc² from the next cycle on
        m.d.sync += ss_ready.eq(1)
    with m.If(take):
        m.d.sync += j_in.eq(j_in + 1)
        with m.If(~j_in.any()):
            m.d.sync += n_in_m1.eq(ip.n - 1)
        with m.If(ip.last):
            m.d.sync += [j_in.eq(0), dm1.eq(j_in), hold.eq(1)]
            for l in range(A + 1):          # 2^l words: d = 2^(l + log2 K)
                with m.If(eq_const(j_in, (1 << l) - 1)):
                    ld = l + unit.log2_lanes
                    m.d.sync += [log2d.eq(ld), ss_const.eq(ss_consts[ld])]
    vars(ctx).update(re=re, raddr=raddr, group=group, slot=slot, n_in_m1=n_in_m1, dm1=dm1,
                     log2d=log2d, sh=sh, ss_const=ss_const, hold=hold, ss_ready=ss_ready, a2_valid=a2_valid,
                     a2_last=a2_last, a1_v=a1_v, a1_h=a1_h, ip_data=ip.data)


def controller(m: Module, ctx) -> None:
    """The per-candidate steps (rsqrt, score, exp, recip) and the combine pass over the buffer that feeds
    the lanes, one state register with one If per state (``STATES``)."""
    kb_w, unit, rsqrt, nc, recip, exp2 = ctx.kb_w, ctx.unit, ctx.rsqrt, ctx.nc, ctx.recip, ctx.exp2
    log2d, re, raddr, A, ss_ready, a2_valid = ctx.log2d, ctx.re, ctx.raddr, ctx.A, ctx.ss_ready, ctx.a2_valid
    a2_last, n_in_m1, ss_const, sh, dm1, p = ctx.a2_last, ctx.n_in_m1, ctx.ss_const, ctx.sh, ctx.dm1, ctx.p
    kb, kc, nb_m1 = Signal(kb_w), Signal(kb_w), Signal(kb_w)   # issue / collect counters; n - 1
    m_rs, rs_valid = Signal(unit.ss_bits), Signal()
    mant_rs = [Signal(rsqrt.o.mant.shape(), name=f"mant_rs_{k}") for k in range(nc)]
    e_rs = [Signal(rsqrt.o.e.shape(), name=f"e_rs_{k}") for k in range(nc)]
    mant_rc, e_rc = Signal(recip.o.mant.shape()), Signal(recip.o.e.shape())
    jp = Signal(unit.cnt_bits)                # combine read address
    # lane k's accumulators after the ingest: Σc²_k and the score dot Σ_j c_kj·h_j
    acc = [Signal(signed(unit.acc_bits + 1), name=f"acc_{k}") for k in range(nc)]
    dacc = [Signal(signed(unit.dot_bits), name=f"dacc_{k}") for k in range(nc)]
    t_regs = [Signal(signed(unit.t_bits), name=f"t_{k}") for k in range(nc)]
    t_max = Signal(signed(unit.t_bits))
    e_regs = [Signal(exp2.o.y.shape(), name=f"e_{k}") for k in range(nc)]
    esum = Signal(unit.esum_bits)
    e_busy, e_cnt = Signal(), Signal(kb_w)
    o_done = Signal()
    cmb = Signal()                            # the combine owns the lanes' multipliers (RECIP .. last o)
    sc_issue, cb_issue = Signal(), Signal()
    lg_last = Signal()                        # the last candidate's t_k is being stored
    adv = Signal()                            # the combine pipeline moves (output free or taken)
    m.d.comb += adv.eq(~unit.o.valid | unit.o.ready)
    for core in (rsqrt, exp2, recip):
        m.d.comb += core.en.eq(1)
    m.d.comb += [rsqrt.i_valid.eq(rs_valid), rsqrt.i.m.eq(m_rs), rsqrt.i.frac.eq(SQ_FRAC + log2d),
                 recip.i.m.eq(esum), recip.i.frac.eq(P.frac),
                 re.eq(cb_issue & adv), raddr.eq(jp[:A])]
    m.d.comb += [am.en.eq(adv) for am in unit.apply_o]
    acc_sel = select(m, acc, kb, "acc_sel")
    dacc_sel = select(m, dacc, kb, "dacc_sel")
    t_sel = select(m, t_regs, kb, "t_sel")
    m.d.comb += exp2.i.t.eq(t_max - t_sel)
    m.d.sync += rs_valid.eq(0)

    # one state register, states numbered from 1 (a compare with 0 lints as a width warning)
    state = Signal(range(len(STATES) + 1), init=STATES["IDLE"])
    with m.If(state == STATES["IDLE"]):
        with m.If(ss_ready | (a2_valid & a2_last)):
            m.d.sync += [ss_ready.eq(0), nb_m1.eq(n_in_m1), kb.eq(0), kc.eq(0), state.eq(STATES["RSQRT"])]
    with m.If(state == STATES["RSQRT"]):
        ss_in = acc_sel[:unit.acc_bits]
        ss = ((ss_in + ss_const) >> sh) if sh > 0 else ((ss_in << -sh) + ss_const)
        m.d.sync += [m_rs.eq(ss), rs_valid.eq(1), kb.eq(kb + 1)]
        with m.If(kb == nb_m1):
            m.d.sync += state.eq(STATES["RSQRT_WAIT"])
    with m.If(state == STATES["RSQRT_WAIT"]):
        with m.If(rsqrt.o_valid & (kc == nb_m1)):
            m.d.sync += [kb.eq(0), state.eq(STATES["SCORE"])]
    with m.If(state == STATES["SCORE"]):
        # one candidate a cycle: score_k = its rsqrt × its dot (``unit.score_apply``), then to_log2
        m.d.comb += sc_issue.eq(1)
        m.d.sync += kb.eq(kb + 1)
        with m.If(kb == nb_m1):
            m.d.sync += state.eq(STATES["LOG2_WAIT"])
    with m.If(state == STATES["LOG2_WAIT"]):
        with m.If(lg_last):
            m.d.sync += [kb.eq(0), kc.eq(0), esum.eq(0)] + [e.eq(0) for e in e_regs]
            m.d.sync += state.eq(STATES["EXP"])
    with m.If(state == STATES["EXP"]):
        m.d.comb += exp2.i_valid.eq(1)
        m.d.sync += kb.eq(kb + 1)
        with m.If(kb == nb_m1):
            m.d.sync += state.eq(STATES["EXP_WAIT"])
    with m.If(state == STATES["EXP_WAIT"]):
        with m.If(exp2.o_valid & (kc == nb_m1)):
            m.d.sync += state.eq(STATES["RECIP"])
    lead = Signal(range(COMBINE_LEAD + 1))      # cycles since the Recip issue
    with m.If(state == STATES["RECIP"]):
        m.d.comb += recip.i_valid.eq(1)
        m.d.sync += [e_busy.eq(int(p.trace_e)), e_cnt.eq(0), jp.eq(0), o_done.eq(0), lead.eq(1), cmb.eq(1)]
        m.d.sync += state.eq(STATES["COMBINE"] if COMBINE_LEAD == 1 else STATES["RECIP_WAIT"])
    with m.If(state == STATES["RECIP_WAIT"]):
        m.d.sync += lead.eq(lead + 1)
        with m.If(lead == COMBINE_LEAD - 1):
            m.d.sync += state.eq(STATES["COMBINE"])
    with m.If(recip.o_valid):                   # in RECIP_WAIT or COMBINE, before the first word needs it
        m.d.sync += [mant_rc.eq(recip.o.mant), e_rc.eq(recip.o.e)]
    with m.If(state == STATES["COMBINE"]):
        m.d.comb += cb_issue.eq(1)
        with m.If(adv):
            m.d.sync += jp.eq(jp + 1)
            with m.If(jp[:A] == dm1):
                m.d.sync += state.eq(STATES["COMBINE_WAIT"])
    with m.If(state == STATES["COMBINE_WAIT"]):
        with m.If(o_done & ~e_busy):
            m.d.sync += state.eq(STATES["IDLE"])

    # Rsqrt and Exp2Neg results arrive in issue order (never both in flight)
    with m.If(rsqrt.o_valid):
        m.d.sync += kc.eq(kc + 1)
        for k in range(nc):
            with m.If(eq_const(kc, k)):
                m.d.sync += [mant_rs[k].eq(rsqrt.o.mant), e_rs[k].eq(rsqrt.o.e)]
    with m.If(exp2.o_valid):
        m.d.sync += [kc.eq(kc + 1), esum.eq(esum + exp2.o.y)]
        for k in range(nc):
            with m.If(eq_const(kc, k)):
                m.d.sync += e_regs[k].eq(exp2.o.y)
    vars(ctx).update(kb=kb, nb_m1=nb_m1, mant_rs=mant_rs, e_rs=e_rs, mant_rc=mant_rc, e_rc=e_rc, jp=jp, acc=acc,
                     dacc=dacc, t_regs=t_regs, t_max=t_max, e_regs=e_regs, e_busy=e_busy, e_cnt=e_cnt,
                     o_done=o_done, sc_issue=sc_issue, cb_issue=cb_issue, lg_last=lg_last, adv=adv, dacc_sel=dacc_sel,
                     cmb=cmb)


def lanes(m: Module, ctx) -> None:
    """The K lanes of every candidate: c_kj² and c_kj·h_j in the ingest, summed into the candidate's two
    accumulators. The combine borrows the dot's operand and product registers for the exact e_k·c_kj (a
    buffer word in, e_k for h_j; they move with the combine's ``adv`` from RECIP until its last ``o``, when
    the next mix's ingest may start)."""
    jp, A, dm1, adv, cb_issue, cmb = ctx.jp, ctx.A, ctx.dm1, ctx.adv, ctx.cb_issue, ctx.cmb
    unit, K, nc, a2_valid, a2_last, slot = ctx.unit, ctx.K, ctx.nc, ctx.a2_valid, ctx.a2_last, ctx.slot
    e_regs, a1_v, a1_h, acc, dacc, ip_data = ctx.e_regs, ctx.a1_v, ctx.a1_h, ctx.acc, ctx.dacc, ctx.ip_data
    lane_en = Signal()
    m.d.comb += lane_en.eq(~cmb | adv)
    c1_valid, c1_last = Signal(), Signal()
    with m.If(adv):
        m.d.sync += [c1_valid.eq(cb_issue), c1_last.eq(jp[:A] == dm1)]
    p_valid = delay(m, adv, c1_valid, LANE_LATENCY, "p_valid")     # the combine's products are held
    fresh = Signal(init=1)                    # the next ingest word starts a new mix: load the accumulators
    with m.If(a2_valid):
        m.d.sync += fresh.eq(a2_last)
    prods = []
    for k in range(nc):
        sq = [Signal(signed(2 * X.bits), name=f"sq_{k}_{l}") for l in range(K)]
        dp = [Signal(signed(X.bits + unit.h_bits), name=f"dp_{k}_{l}") for l in range(K)]
        with m.If(lane_en):
            m.d.sync += [a1_v[k][l].eq(Mux(cmb, slot(k, l), ip_data[k][l])) for l in range(K)]
            m.d.sync += [dp[l].eq(a1_v[k][l] * Mux(cmb, e_regs[k], a1_h[l])) for l in range(K)]
        m.d.sync += [sq[l].eq(a1_v[k][l] * a1_v[k][l]) for l in range(K)]
        with m.If(a2_valid):
            m.d.sync += [acc[k].eq(sum(sq, Mux(fresh, 0, acc[k]))), dacc[k].eq(sum(dp, Mux(fresh, 0, dacc[k])))]
        prods.append(dp)
    vars(ctx).update(c1_last=c1_last, p_valid=p_valid, prods=prods)


def running_max(m: Module, ctx) -> None:
    """Each candidate's score (its dot rounded to ``MIX_DOT_FRAC``, × its rsqrt, in X: ``score_apply``) and
    to_log2 of it, one candidate per cycle, and the running max."""
    unit, dacc_sel, kb_w, xb, sc_issue, kb = ctx.unit, ctx.dacc_sel, ctx.kb_w, ctx.xb, ctx.sc_issue, ctx.kb
    lg_last, nb_m1, nc, t_regs, t_max = ctx.lg_last, ctx.nb_m1, ctx.nc, ctx.t_regs, ctx.t_max
    mant_rs, e_rs, sam = ctx.mant_rs, ctx.e_rs, unit.score_apply
    m.d.comb += [sam.en.eq(1), sam.i_valid.eq(sc_issue),
                 sam.i.v.eq(round_shift_const(dacc_sel, unit.dot_shift)),
                 sam.i.mant.eq(select(m, mant_rs, kb, "mant_sel")), sam.i.e.eq(select(m, e_rs, kb, "e_sel"))]
    s_k = delay(m, Const(1), kb, ApplyMant.LATENCY, "score_k")
    lo_bits = unit.log2e_lo_bits
    c_lo, c_hi = fxp_math.LOG2E_Q24 & ((1 << lo_bits) - 1), fxp_math.LOG2E_Q24 >> lo_bits
    l2_valid, l3_valid = Signal(), Signal()
    l2_k, l3_k = Signal(kb_w), Signal(kb_w)
    plo = Signal(signed(xb + lo_bits + 1))
    phi = Signal(signed(xb + c_hi.bit_length() + 1))
    t_cur = Signal(signed(unit.t_bits))
    m.d.sync += [l2_valid.eq(sam.o_valid), l2_k.eq(s_k), plo.eq(sam.o.y * c_lo), phi.eq(sam.o.y * c_hi),
                 l3_valid.eq(l2_valid), l3_k.eq(l2_k),
                 t_cur.eq(clamp(round_shift_const((phi << lo_bits) + plo, unit.t_shift), T.lo, T.hi))]
    m.d.comb += lg_last.eq(l3_valid & (l3_k == nb_m1))
    with m.If(l3_valid):
        for k in range(nc):
            with m.If(eq_const(l3_k, k)):
                m.d.sync += t_regs[k].eq(t_cur)
        with m.If(~l3_k.any() | (t_cur > t_max)):
            m.d.sync += t_max.eq(t_cur)


def combine(m: Module, ctx) -> None:
    """Combine (stalls with the output): per element Σ_k of the lanes' e_k·c_kj, ApplyMant by 1 / Σe, ``o``;
    the last ``o`` frees the lanes and the buffer for the next mix; the e trace."""
    unit, mant_rc, e_rc, adv, prods = ctx.unit, ctx.mant_rc, ctx.e_rc, ctx.adv, ctx.prods
    c1_last, o_done, p, e_regs, e_cnt, e_busy = ctx.c1_last, ctx.o_done, ctx.p, ctx.e_regs, ctx.e_cnt, ctx.e_busy
    nb_m1 = ctx.nb_m1
    for l, apo in enumerate(unit.apply_o):
        num = Signal(signed(unit.num_bits), name=f"num_{l}")
        total = sum((dp[l] for dp in prods[1:]), prods[0][l])
        m.d.comb += [num.eq(round_shift_const(total, unit.num_shift)),
                     apo.i_valid.eq(ctx.p_valid), apo.i.v.eq(num),
                     apo.i.mant.eq(mant_rc), apo.i.e.eq(e_rc),
                     unit.o.payload.data[l].eq(apo.o.y)]
    o_last = delay(m, adv, c1_last, LANE_LATENCY + ApplyMant.LATENCY, "o_last")
    m.d.comb += [unit.o.valid.eq(unit.apply_o[0].o_valid), unit.o.payload.last.eq(o_last)]
    with m.If(unit.o.valid & unit.o.ready & unit.o.payload.last):
        m.d.sync += [o_done.eq(1), ctx.cmb.eq(0), ctx.hold.eq(0)]

    # ---- e trace ------------------------------------------------------------------------------
    if p.trace_e:
        e_sel = select(m, e_regs, e_cnt, "e_sel")
        m.d.comb += [unit.e.valid.eq(e_busy), unit.e.payload.data.eq(e_sel),
                     unit.e.payload.last.eq(e_cnt == nb_m1)]
        with m.If(unit.e.valid & unit.e.ready):
            m.d.sync += e_cnt.eq(e_cnt + 1)
            with m.If(unit.e.payload.last):
                m.d.sync += e_busy.eq(0)
