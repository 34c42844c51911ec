"""Result collectors and VRF write arbitration: the element results of the op that runs, the matvec
results of every queued matvec (their own collector, behind the op's writes), the MLA engine's output,
the embedding row (EMB) and the router's experts (which end ROUTE) and weights (which COMB waits for,
collected after ROUTE); the PRF writer of a PLD; the LM head's results into
the logits writer. These functions add their logic to the chip core's module.
"""
from __future__ import annotations

import functools
import operator

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed

from hw.lib.pipe import clamp
from hw.params import log2
from hw.program import Opc
from nano_k3.fxp_ops import X

MV_QUEUE = 4               # matvecs issued and not yet written back (the MAC array returns them in order)


def collectors(m: Module, ctx) -> None:
    """Every VRF write: ``ctx.col_cnt`` / ``ctx.col_target`` / ``ctx.col_done`` count the op's own results;
    the matvec result queue (``ctx.mvq_push``, ``ctx.mvq_n``) and what DISPATCH checks against it
    (``ctx.src_queued``, ``ctx.dst_queued``, ``ctx.res_pending``); EMB's word (``ctx.emb_we``, ``ctx.emb_word``)."""
    max_n, L, SW, NL, ML, EL, CL, KL, op = ctx.max_n, ctx.L, ctx.SW, ctx.NL, ctx.ML, ctx.EL, ctx.CL, ctx.KL, ctx.op
    vrf, norm, mixer, ew, comb, kda, mla = ctx.vrf, ctx.norm, ctx.mixer, ctx.ew, ctx.comb, ctx.kda, ctx.mla
    mac, router, is_op, sb, choice, weights = ctx.mac, ctx.router, ctx.is_op, ctx.sb, ctx.choice, ctx.weights
    rcnt = ctx.rcnt
    col_cnt = Signal(range(max_n * 8 + 1))
    col_target = Signal.like(col_cnt)
    col_done = Signal()
    # element results: per op, the unit's output stream and the elements of one transfer
    results = {Opc.RMS: (norm.o, [norm.o.payload.y[k] for k in range(NL)]),
               Opc.MIX: (mixer.o, [mixer.o.payload.data[j] for j in range(ML)]),
               Opc.EW: (ew.o, [ew.o.payload.y[k] for k in range(EL)]),
               Opc.COMB: (comb.o, [comb.o.payload[j] for j in range(CL)]),
               Opc.KDA: (kda.o, [kda.o.payload.data[k] for k in range(KL)])}
    e_valid, e_step = Signal(), Signal(range(L + 1))
    e_word, e_mask = Signal(L * X.bits), Signal(L)           # the transfer repeated over the word, its lanes
    with m.Switch(op.opc):
        for opc, (port, vals) in results.items():
            with m.Case(opc):
                m.d.comb += [e_valid.eq(port.valid), port.ready.eq(1), e_step.eq(len(vals)),
                             e_word.eq(Cat(*vals * (L // len(vals)))), e_mask.eq((1 << len(vals)) - 1)]
    dst_base = Signal(vrf.abits)
    m.d.comb += dst_base.eq(op.dst * SW)
    emb_we = Signal()
    emb_word = Signal(L * X.bits)
    # An element op's transfers are gathered into a VRF word (``e_acc``; ``e_have``: its lanes so far) that
    # is written once, with the transfer that completes the word or the op: one VRF write a word, so the
    # single-ported VRF of place and route (docs/pnr.md) stays free for the feeders' reads and matvec results.
    LL = log2(L)
    e_acc, e_data = Signal(L * X.bits), Signal(L * X.bits)
    e_have, e_lanes, e_all = Signal(L), Signal(L), Signal(L)
    e_write = Signal()                        # this transfer completes its word or the op
    m.d.comb += [e_lanes.eq(e_mask << col_cnt[:LL]), e_all.eq(e_have | e_lanes),
                 e_data.eq(Cat(*[Mux(e_lanes[j], e_word.word_select(j, X.bits), e_acc.word_select(j, X.bits))
                                 for j in range(L)])),
                 e_write.eq(e_valid & ((col_cnt[:LL] + e_step)[LL] | (col_cnt + e_step == col_target)))]
    col_last = Signal()                       # the op's last result is written (collected) this cycle
    with m.If(e_valid):
        m.d.sync += [col_cnt.eq(col_cnt + e_step), e_acc.eq(e_data), e_have.eq(Mux(e_write, 0, e_all))]
        with m.If(col_cnt + e_step == col_target):
            m.d.comb += col_last.eq(1)
            m.d.sync += col_done.eq(1)
    with m.If(e_write):
        m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(dst_base + (col_cnt >> LL)), vrf.w_data.eq(e_data),
                     vrf.w_strb.eq(Cat(*[e_all[j].replicate(X.bits // 8) for j in range(L)]))]

    # MAC results: VRF words or the logits writer
    head = op.head
    mo = mac.o
    mla_o = mla.o
    # Matvec results are written by their own collector: a queue holds the destination slot of
    # every matvec queued and not yet written (in command order, as the MAC array returns them), so
    # the sequencer moves on once a (non-head) matvec is queued. While the queue is not empty, DISPATCH
    # starts a keep MV or a PLD at once; another op once none of its sources is a queued destination
    # and, if it writes the VRF, its destination is not one either; the LM head, EMB and END wait for
    # the queue to empty. The op's own VRF writes go first: a matvec result waits for a free cycle.
    # A residual matvec (``res``) writes X.fit(p + y): each result word first reads p's word (the VRF
    # read port is free: while one is queued, DISPATCH starts nothing but a PLD, which also keeps p's
    # slot from being rewritten before it is read).
    mvq = Array(Signal(sb, name=f"mvq{k}") for k in range(MV_QUEUE))
    mvq_res = Array(Signal(name=f"mvq_res{k}") for k in range(MV_QUEUE))
    mvq_rs = Array(Signal(sb, name=f"mvq_rs{k}") for k in range(MV_QUEUE))   # p's slot
    mvq_rd = Signal(range(MV_QUEUE), name="mvq_rd")
    mvq_wr = Signal(range(MV_QUEUE), name="mvq_wr")
    mvq_n = Signal(range(MV_QUEUE + 1), name="mvq_n")
    mvq_push = Signal(name="mvq_push")
    mvq_pop = Signal(name="mvq_pop")
    mv_col = Signal(range(SW + 1))
    queued = Signal(MV_QUEUE)                 # queue entries still to be written
    for e in range(MV_QUEUE):
        m.d.comb += queued[e].eq((e - mvq_rd)[:log2(MV_QUEUE)] < mvq_n)
    src_queued = Signal()                     # a source of the op is a queued destination
    m.d.comb += src_queued.eq(Cat(*[(k < op.ns) & queued[e] & (mvq[e] == getattr(op, f"s{k}"))
                                    for k in range(4) for e in range(MV_QUEUE)]).any())
    dst_queued = Signal()                     # the op's destination is a queued destination
    m.d.comb += dst_queued.eq(Cat(*[queued[e] & (mvq[e] == op.dst) for e in range(MV_QUEUE)]).any())
    res_pending = Signal()                    # a residual matvec is queued
    m.d.comb += res_pending.eq(Cat(*[queued[e] & mvq_res[e] for e in range(MV_QUEUE)]).any())
    vrf_taken = Signal()                      # the op's own results write the VRF this cycle
    head_res = Signal()
    res_got = Signal()                        # vrf.r_data holds p's word for the result in mo
    m.d.comb += head_res.eq(mvq_res[mvq_rd])
    with m.If(mvq_n != 0):
        with m.If(head_res & ~res_got):
            with m.If(mo.valid):
                m.d.comb += [vrf.r_en.eq(1), vrf.r_addr.eq(mvq_rs[mvq_rd] * SW + mv_col)]
                m.d.sync += res_got.eq(1)
        with m.Else():
            m.d.comb += mo.ready.eq(~vrf_taken)
        with m.If(mo.valid & ~vrf_taken & (~head_res | res_got)):
            ys = [mo.payload.y[j] for j in range(L)]
            sums = []
            for j in range(L):
                t = Signal(signed(X.bits + 1), name=f"res_sum{j}")
                m.d.comb += t.eq(ys[j] + vrf.r_data.word_select(j, X.bits).as_signed())
                sums.append(clamp(t, X.lo, X.hi)[:X.bits])
            m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(mvq[mvq_rd] * SW + mv_col),
                         vrf.w_data.eq(Mux(head_res, Cat(*sums), Cat(*ys))),
                         vrf.w_strb.eq((Const(1, 4 * L + 1) << (mo.payload.count * 4)) - 1)]
            m.d.sync += [mv_col.eq(mv_col + 1), res_got.eq(0)]
            with m.If(mo.payload.last):
                m.d.comb += mvq_pop.eq(1)
                m.d.sync += [mv_col.eq(0), mvq_rd.eq(mvq_rd + 1)]
    with m.If(mvq_push):
        m.d.sync += [mvq[mvq_wr].eq(op.dst), mvq_res[mvq_wr].eq(op.res), mvq_rs[mvq_wr].eq(op.s1),
                     mvq_wr.eq(mvq_wr + 1)]
    m.d.sync += mvq_n.eq(mvq_n + mvq_push - mvq_pop)
    with m.If(is_op(Opc.MLA) & op.last):
        m.d.comb += mla_o.ready.eq(1)
        with m.If(mla_o.valid):
            m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(dst_base + col_cnt),
                         vrf.w_data.eq(mla_o.payload.data.as_value()), vrf.w_strb.eq(-1)]
            m.d.sync += col_cnt.eq(col_cnt + 1)
            with m.If(mla_o.payload.last):
                m.d.comb += col_last.eq(1)
                m.d.sync += col_done.eq(1)
    m.d.comb += vrf_taken.eq(e_write | (is_op(Opc.MLA) & op.last & mla_o.valid) | emb_we)
    with m.If(emb_we):
        m.d.comb += [vrf.w_en.eq(1), vrf.w_addr.eq(dst_base + col_cnt), vrf.w_data.eq(emb_word),
                     vrf.w_strb.eq(-1)]

    # router results: the experts end ROUTE; its weights follow in the background (COMB waits for them)
    with m.If(router.choice_valid):
        m.d.sync += [choice[j].eq(router.choice[j]) for j in range(len(choice))] + [ctx.route_w.eq(1)]
        m.d.comb += col_last.eq(1)
        m.d.sync += col_done.eq(1)
    m.d.comb += router.o.ready.eq(1)
    with m.If(router.o.valid):
        m.d.sync += [weights[rcnt].eq(router.o.payload.weight), rcnt.eq(rcnt + 1)]
        with m.If(router.o.payload.last):
            m.d.sync += [rcnt.eq(0), ctx.route_w.eq(0)]
    vars(ctx).update(col_cnt=col_cnt, col_target=col_target, col_done=col_done, col_last=col_last, emb_we=emb_we,
                     emb_word=emb_word,
                     head=head, mo=mo, mvq_n=mvq_n, mvq_push=mvq_push, src_queued=src_queued,
                     dst_queued=dst_queued, res_pending=res_pending)


def slot_or(m: Module, ctx) -> None:
    """Per VRF slot, the OR of |v| over the elements written since its word 0 was, so an MV finds its
    vector's block exponent without a pass over it: the MAC input's ``orv`` is the op's source slot's
    (``hw.mac_input``). Every vector is written
    from its word 0, each word once (the element and MLA collectors, the matvec results, EMB), with byte
    strobes on its own elements only, so the OR covers exactly the vector an MV of the same length reads."""
    vrf, SW, L, prog = ctx.vrf, ctx.SW, ctx.L, ctx.prog
    lg = log2(SW)
    n_slots = max(2, prog.n_slots)
    ors = [Signal(X.bits, name=f"slot_or{k}") for k in range(n_slots)]
    word_or = Signal(X.bits)
    terms = []
    for j in range(L):
        v = vrf.w_data.word_select(j, X.bits).as_signed()
        terms.append(Mux(vrf.w_strb[j * X.bits // 8], Mux(v < 0, -v, v), 0)[:X.bits])
    m.d.comb += word_or.eq(functools.reduce(operator.or_, terms))
    first = vrf.w_addr[:lg] == 0 if lg else Const(1)
    for k, reg in enumerate(ors):
        with m.If(vrf.w_en & (vrf.w_addr >> lg == k)):
            m.d.sync += reg.eq(Mux(first, word_or, reg | word_or))
    m.d.comb += ctx.minp.orv.eq(Array(ors)[ctx.op.s0])


def prf_writer(m: Module, ctx) -> None:
    """A PLD's beats from the weight store's stream reader into PRF a or b, in the background
    (``ctx.pld_busy`` while it copies)."""
    mac, prf, prf_depth = ctx.mac, ctx.prf, ctx.prf_depth
    pld_busy = Signal()
    pld_prf = Signal()
    pld_cnt = Signal(range(prf_depth + 1))
    with m.If(pld_busy):
        m.d.comb += mac.r_data.ready.eq(1)
        for k in range(2):
            m.d.comb += [prf[k].w_en.eq(mac.r_data.valid & (pld_prf == k)), prf[k].w_addr.eq(pld_cnt),
                         prf[k].w_data.eq(mac.r_data.payload.data.as_value()), prf[k].w_strb.eq(-1)]
        with m.If(mac.r_data.valid):
            m.d.sync += pld_cnt.eq(pld_cnt + 1)
            with m.If(mac.r_data.payload.last):
                m.d.sync += pld_busy.eq(0)
    vars(ctx).update(pld_busy=pld_busy, pld_prf=pld_prf, pld_cnt=pld_cnt)


def head_results(m: Module, ctx) -> None:
    """The LM head's results (the MAC array's output during the head op) into the logits writer."""
    lw, mo, row_addr = ctx.lw, ctx.mo, ctx.row_addr
    m.d.comb += [lw.i.payload.y.eq(mo.payload.y.as_value()), lw.i.payload.last.eq(mo.payload.last),
                 lw.row.eq(row_addr)]
