"""KDA state update: the rsqrt requests (the 2H L2 norms, then the tails' gated norms), the row pipeline
(per head two passes over the state rows: decay and kS, then S'' and the read-out) and the row issue
controller. The rows start once K, V, B and F are in; q (its norm, q_hat) is needed from the second pass
on, so Q may arrive while the first pass runs. Adds its logic to the engine's module (hw/kda_engine.py, row stages 0..7)."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib.data import StructLayout

from hw.kda_front import HATS_WB, STATE_WB, field_of, field_strb
from hw.kda_params import Sel, byte_width, pack
from hw.lib.lut import Rsqrt
from hw.lib.pipe import clamp, delay, eq_const, round_shift_const
from nano_k3.fxp_ops import ALPHA, UNIT, P, S, X


def rsqrt_requests(m: Module, ctx) -> None:
    """One Rsqrt for every norm: the L2 norms of k per head once K, V, B, F are in (tags 2h), of q once Q is
    in (tags 2h + 1; k's first when both wait), then the tails' gated norms (tag 2H); results into the
    mantissa / exponent registers, ``q_ready`` once the last q norm is back."""
    H, rsq, ssq, ssk, core, one, mant_o = ctx.H, ctx.rsq, ctx.ssq, ctx.ssk, ctx.core, ctx.one, ctx.mant_o
    e_o, mant_q, e_q, mant_k, e_k = ctx.e_o, ctx.mant_q, ctx.e_q, ctx.mant_k, ctx.e_k
    k_rq = Signal(range(H + 1), init=H)                   # next k norm's head; H = none pending
    q_rq = Signal(range(H + 1), init=H)                   # next q norm's head
    q_ready = Signal()                                     # every q norm is back (the second pass may start)
    tail_rq = Signal()
    rq_m, rq_frac = Signal.like(rsq.i.m), Signal.like(rsq.i.frac)
    rq_v, rq_tag = Signal(), Signal(range(2 * H + 1))      # tag 2H: the tail's gated norm
    k_pend, q_pend = k_rq < H, q_rq < H
    l2_pend = k_pend | q_pend
    l2_tag = Mux(k_pend, k_rq << 1, (q_rq << 1) | 1)
    l2_ss = Mux(k_pend, ssk[k_rq], ssq[q_rq])
    ss_o = Signal(core.rn_bits)
    m.d.sync += [rq_v.eq(l2_pend | tail_rq), rq_tag.eq(Mux(l2_pend, l2_tag, 2 * H)),
                 rq_m.eq(Mux(l2_pend, round_shift_const(l2_ss, core.l2_sq_shift) + core.l2_eps,
                             round_shift_const(ss_o, core.rn_sq_shift) + core.rn_eps)),
                 rq_frac.eq(Mux(l2_pend, core.l2_frac, core.rn_frac))]
    with m.If(k_pend):
        m.d.sync += k_rq.eq(k_rq + 1)
    with m.Elif(q_pend):
        m.d.sync += q_rq.eq(q_rq + 1)
    m.d.comb += [rsq.i_valid.eq(rq_v), rsq.i.m.eq(rq_m), rsq.i.frac.eq(rq_frac)]
    rs_tag = delay(m, one, rq_tag, Rsqrt.LATENCY, "rsq_tag")
    rsqrt_o = Signal()                                     # the tail's result is on rsq.o
    with m.If(rsq.o_valid):
        with m.If(rs_tag == 2 * H):
            m.d.comb += rsqrt_o.eq(1)
            m.d.sync += [mant_o.eq(rsq.o.mant), e_o.eq(rsq.o.e)]
        with m.Elif(rs_tag[0]):
            m.d.sync += [mant_q[rs_tag >> 1].eq(rsq.o.mant), e_q[rs_tag >> 1].eq(rsq.o.e)]
            with m.If(rs_tag == 2 * H - 1):
                m.d.sync += q_ready.eq(1)
        with m.Else():
            m.d.sync += [mant_k[rs_tag >> 1].eq(rsq.o.mant), e_k[rs_tag >> 1].eq(rsq.o.e)]
    vars(ctx).update(k_rq=k_rq, q_rq=q_rq, q_ready=q_ready, tail_rq=tail_rq, ss_o=ss_o, rsqrt_o=rsqrt_o)


def row_pipeline(m: Module, ctx) -> None:
    """The row pipeline: one state row a cycle, pass 1 (S alpha, kS) and pass 2 (S'', read), the column
    products and accumulators; ``ctx.rd`` / ``ctx.rd_full`` hand a head's read-out to the tail."""
    dh, H, core, layer, lg_l, hbits, st = ctx.dh, ctx.H, ctx.core, ctx.layer, ctx.lg_l, ctx.hbits, ctx.st
    bf, restart, lane_of, bf_w, bf_off, apk = ctx.bf, ctx.restart, ctx.lane_of, ctx.bf_w, ctx.bf_off, ctx.apk
    mant_k, e_k, apq, mant_q, e_q, head = ctx.mant_k, ctx.e_k, ctx.apq, ctx.mant_q, ctx.e_q, ctx.head
    beta, one, st_w, fq, L, ing_we, sb11 = ctx.beta, ctx.one, ctx.st_w, ctx.fq, ctx.L, ctx.ing_we, ctx.sb11
    bword, ing_strb, qb = ctx.bword, ctx.ing_strb, ctx.qb
    ctl_layout = StructLayout({"v": 1, "p2": 1, "first": 1, "last": 1, "row": range(dh), "head": range(max(2, H))})
    ctl = [Signal(ctl_layout, name=f"row_ctl{k}") for k in range(core.R_ACC + 2)]
    m.d.sync += [ctl[k].eq(ctl[k - 1]) for k in range(1, len(ctl))]
    st_base = lambda c: layer * (H * dh) + c.head * dh                 # noqa: E731
    # row buffer word of a row (index head dh + row)
    bf_addr = lambda c: Cat(c.row[lg_l:], c.head[:hbits]) if H > 1 else c.row[lg_l:]  # noqa: E731
    m.d.comb += [st["re"].eq(ctl[0].v), st["raddr"].eq(st_base(ctl[0]) + ctl[0].row),
                 bf["re"].eq(ctl[0].v), bf["raddr"].eq(bf_addr(ctl[0])),
                 qb["re"].eq(ctl[0].v & ctl[0].p2), qb["raddr"].eq(bf_addr(ctl[0]))]
    c1 = ctl[1]
    cols = range(dh)
    srow = [Mux(restart & ~c1.p2, 0, st["rdata"][j * S.bits:(j + 1) * S.bits].as_signed()) for j in cols]
    bword1 = bf["rdata"].word_select(lane_of(c1.row), bf_w)
    b_k, b_khat = field_of(bword1, bf_off, "k", X.bits), field_of(bword1, bf_off, "k", UNIT.bits)
    b_q = qb["rdata"].word_select(lane_of(c1.row), byte_width(X.bits))[:X.bits].as_signed()
    b_v = field_of(bword1, bf_off, "v", X.bits)
    b_alpha = field_of(bword1, bf_off, "alpha", ALPHA.bits, sgn=False)
    # stage 1 -> 4: k_hat (pass 1, into the row buffer for pass 2), q_hat (pass 2)
    m.d.comb += [apk.i_valid.eq(c1.v & ~c1.p2), apk.i.v.eq(b_k), apk.i.mant.eq(mant_k[c1.head]),
                 apk.i.e.eq(e_k[c1.head]),
                 apq.i_valid.eq(c1.v & c1.p2), apq.i.v.eq(b_q), apq.i.mant.eq(mant_q[c1.head]),
                 apq.i.e.eq(e_q[c1.head])]
    vl = Array(Signal(signed(X.bits), name=f"v_{j}") for j in cols)
    with m.If(c1.v & ~c1.p2):
        m.d.sync += vl[c1.row].eq(b_v)
    # stage 1: operand B of lane product A, one register broadcast to every column (alpha in pass 1,
    # k_hat in pass 2, beta the cycle u is captured); the state row registered as operand A's source
    u_l = [Signal(signed(S.bits), name=f"u_{j}") for j in cols]
    bu = [Signal(signed(S.bits + 1), name=f"bu_{j}") for j in cols]
    pa_b_bits = max(ALPHA.bits, P.bits, UNIT.bits - 1) + 1
    col_prod_a = [Signal(signed(S.bits + 1 + pa_b_bits), name=f"col_prod_a{j}") for j in cols]
    u_hold, u_op, bu_hold = Signal(), Signal(), Signal()   # u_l captured / operand A is u / pa holds u beta
    u_head = Signal.like(head)
    op_b = Signal(signed(pa_b_bits), name="col_prod_a_b")
    m.d.sync += op_b.eq(Mux(u_hold, beta[u_head], Mux(c1.p2, b_khat, b_alpha)))
    srow2 = [Signal(signed(S.bits), name=f"srow2_{j}") for j in cols]
    m.d.sync += [srow2[j].eq(srow[j]) for j in cols]
    # stage 2: lane product A: S alpha (pass 1), bu k_hat (pass 2), u beta (between the passes)
    c2, c3, c4, c5 = ctl[2], ctl[3], ctl[STATE_WB], ctl[5]
    m.d.sync += [col_prod_a[j].eq(Mux(u_op, u_l[j], Mux(c2.p2, bu[j], srow2[j])) * op_b) for j in cols]
    srow3 = [delay(m, one, srow2[j], 1, f"srow3_{j}") for j in cols]
    qhat = delay(m, one, apq.o.y, 1, "qhat")               # stage 5 (pass 2)
    khat = delay(m, one, apk.o.y, 1, "khat")               # stage 5 (pass 1)
    # stage 3: S' = round(S alpha) (pass 1) or S'' = sat(S' + round(k_hat bu)) (pass 2); written back at 4
    s3 = [Signal(signed(S.bits), name=f"srow4_{j}") for j in cols]
    m.d.sync += [s3[j].eq(Mux(c3.p2, clamp(srow3[j] + round_shift_const(col_prod_a[j], UNIT.frac), S.lo, S.hi),
                              round_shift_const(col_prod_a[j], ALPHA.frac))) for j in cols]
    with m.If(bu_hold):
        m.d.sync += [bu[j].eq(round_shift_const(col_prod_a[j], P.frac)) for j in cols]
    m.d.comb += [st["we"].eq(c4.v), st["waddr"].eq(st_base(c4) + c4.row), st["wdata"].eq(Cat(*s3)),
                 st["wstrb"].eq((1 << (st_w // 8)) - 1)]
    s5 = [delay(m, one, s3[j], 1, f"srow5_{j}") for j in cols]
    # stage 4: k_hat into the row buffer (pass 1); stage 5: lane product B
    c_hw = ctl[HATS_WB]
    hats4 = pack((apk.o.y, fq))
    hats4_strb = Const(field_strb(bf_off, "k"), L * bf_w // 8) << (lane_of(c_hw.row) * (bf_w // 8))
    m.d.comb += [bf["we"].eq(Mux(c_hw.v & ~c_hw.p2, 1, ing_we)),
                 bf["waddr"].eq(Mux(c_hw.v & ~c_hw.p2, bf_addr(c_hw), sb11.idx[lg_l:])),
                 bf["wdata"].eq(Mux(c_hw.v & ~c_hw.p2, pack(*((hats4, bf_w) for _ in range(L))), bword)),
                 bf["wstrb"].eq(Mux(c_hw.v & ~c_hw.p2, hats4_strb, ing_strb))]
    pb_w = S.bits + UNIT.bits
    col_prod_b = [Signal(signed(pb_w), name=f"col_prod_b{j}") for j in cols]
    hat5 = Mux(c5.p2, qhat, khat)
    m.d.sync += [col_prod_b[j].eq(s5[j] * hat5) for j in cols]
    # stage 6: accumulators (the first row of a pass loads them)
    c6, c7 = ctl[6], ctl[core.R_ACC]
    acc = [Signal(signed(pb_w + core.lg_dh + 1), name=f"acc_{j}") for j in cols]
    with m.If(c6.v):
        m.d.sync += [acc[j].eq(Mux(c6.first, col_prod_b[j], acc[j] + col_prod_b[j])) for j in cols]
    # stage 7 of a pass's last row: u = sat(v - kS) (pass 1) or read = sat(q_hat . S'') (pass 2)
    rd = [Signal(signed(S.bits), name=f"read_{j}") for j in cols]
    rd_full, rd_head = Signal(), Signal.like(head)
    m.d.sync += [u_hold.eq(c7.v & c7.last & ~c7.p2), u_op.eq(u_hold), bu_hold.eq(u_op), u_head.eq(c7.head)]
    with m.If(c7.v & c7.last & ~c7.p2):
        m.d.sync += [u_l[j].eq(clamp((vl[j] << (S.frac - X.frac)) - round_shift_const(acc[j], UNIT.frac),
                                     S.lo, S.hi)) for j in cols]
    with m.If(c7.v & c7.last & c7.p2):
        m.d.sync += [rd[j].eq(clamp(round_shift_const(acc[j], UNIT.frac), S.lo, S.hi)) for j in cols]
        m.d.sync += [rd_full.eq(1), rd_head.eq(c7.head)]
    vars(ctx).update(ctl=ctl, cols=cols, rd=rd, rd_full=rd_full, rd_head=rd_head)


def row_issue(m: Module, ctx) -> None:
    """The issue controller: INGEST counts the K, V, B, F transfers, DRAIN waits for the sums and head 0's
    k rsqrt, P1 / BU / P2 issue a head's rows (P2 once every q norm is back), FINISH waits for the last
    output. Beside it the Q transfers are counted: E_SUMS - 2 cycles after the last, the q norms are
    requested."""
    head, H, one, ctl, row, dh, take, ip = ctx.head, ctx.H, ctx.one, ctx.ctl, ctx.row, ctx.dh, ctx.take, ctx.ip
    accept, state, ISSUE, layer, restart = ctx.accept, ctx.state, ctx.ISSUE, ctx.layer, ctx.restart
    n_state, p, cnt, core, k_rq, rd_full = ctx.n_state, ctx.p, ctx.cnt, ctx.core, ctx.k_rq, ctx.rd_full
    pos_done, clear_ss, in_done, q_rq, q_ready = ctx.pos_done, ctx.clear_ss, ctx.in_done, ctx.q_rq, ctx.q_ready
    first = Signal()
    last_head = (head == H - 1) if H > 1 else one
    m.d.comb += [ctl[0].row.eq(row), ctl[0].head.eq(head), ctl[0].first.eq(first), ctl[0].last.eq(row == dh - 1)]
    with m.If(take & ip.last):
        m.d.sync += accept.eq(0)
    # Q: counted whenever it comes; its sums are complete E_SUMS cycles after its last transfer
    n_q = Signal(range(p.width // p.lanes))
    q_cnt, q_wait = Signal(range(core.E_SUMS)), Signal()
    with m.If(take & eq_const(ip.sel, Sel.Q)):
        m.d.sync += n_q.eq(n_q + 1)
        with m.If(n_q == p.width // p.lanes - 1):
            m.d.sync += [n_q.eq(0), q_wait.eq(1), q_cnt.eq(0)]
    with m.If(q_wait):
        m.d.sync += q_cnt.eq(q_cnt + 1)
        with m.If(q_cnt == core.E_SUMS - 2):
            m.d.sync += [q_rq.eq(0), q_wait.eq(0)]
    with m.If(state == ISSUE["INGEST"]):
        with m.If(take & (ip.sel != Sel.Z)):
            m.d.sync += [layer.eq(ip.layer), restart.eq(ip.restart)]
        with m.If(take & (ip.sel != Sel.Z) & (ip.sel != Sel.Q)):
            m.d.sync += n_state.eq(n_state + 1)
            with m.If(n_state == p.row_transfers - 1):
                m.d.sync += [state.eq(ISSUE["DRAIN"]), cnt.eq(0), n_state.eq(0)]
    with m.If(state == ISSUE["DRAIN"]):
        # the sums of squares are complete E_SUMS cycles after the last K/V/B/F transfer; head 0's k
        # rsqrt result Rsqrt.LATENCY + 2 cycles after that (k_hat needs it at row stage 1)
        m.d.sync += cnt.eq(cnt + 1)
        with m.If(cnt == core.E_SUMS - 2):
            m.d.sync += k_rq.eq(0)
        with m.If(cnt == core.E_SUMS + Rsqrt.LATENCY):
            m.d.sync += [state.eq(ISSUE["P1"]), row.eq(0), head.eq(0), first.eq(1)]
    for name, nxt in (("P1", "BU"), ("P2", None)):
        with m.If(state == ISSUE[name]):
            m.d.comb += [ctl[0].v.eq(1), ctl[0].p2.eq(name == "P2")]
            m.d.sync += [row.eq(row + 1), first.eq(0)]
            with m.If(row == dh - 1):
                m.d.sync += [row.eq(0), first.eq(1), cnt.eq(0)]
                if nxt:
                    m.d.sync += state.eq(ISSUE[nxt])
                else:
                    with m.If(last_head):
                        m.d.sync += state.eq(ISSUE["FINISH"])
                    with m.Else():
                        m.d.sync += [head.eq(head + 1), state.eq(ISSUE["P1"])]
    with m.If(state == ISSUE["BU"]):
        # bu lands BU_GAP cycles after the last pass-1 row; read (captured at the end of pass 2)
        # must have been taken over by the tail, and q_hat needs every q norm (cnt stops at the gap)
        with m.If(cnt < core.BU_GAP - 2):
            m.d.sync += cnt.eq(cnt + 1)
        with m.If((cnt >= core.BU_GAP - 2) & ~rd_full & q_ready):
            m.d.sync += state.eq(ISSUE["P2"])
    with m.If(state == ISSUE["FINISH"]):
        with m.If(pos_done):
            m.d.comb += clear_ss.eq(1)
            m.d.sync += [state.eq(ISSUE["INGEST"]), head.eq(0), accept.eq(1), in_done.eq(0), q_ready.eq(0)]
