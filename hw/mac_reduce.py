"""MAC array reduction: S2 group sums, the F1 / F2 fold of lanes of one column, S4's scale multiply
(scale_lanes columns a step), S5's accumulation across groups into the result buffer and R1..R3's
requantisation to ``o``. Adds its logic to the array's module (hw/mac_array.py)."""
from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib.data import StructLayout

from hw.mac_params import SCALE_BITS
from hw.params import log2


def group_sums(m: Module, ctx) -> None:
    """S2: per lane the group sum d = Σ (q − z)·x."""
    wd, W, gtag, adv, prod_valid, prod_glast, prod_tag, prod_gfirst = ctx.wd, ctx.W, ctx.gtag, ctx.adv, ctx.prod_valid, ctx.prod_glast, ctx.prod_tag, ctx.prod_gfirst
    qx_prod = ctx.qx_prod
    acc = [Signal(signed(wd.group_d_bits), name=f"acc_d{ln}") for ln in range(W)]
    sum_valid = Signal()
    sum_tag = Signal(gtag)
    with m.If(adv):
        m.d.sync += [sum_valid.eq(prod_valid & prod_glast)]
        with m.If(prod_valid):
            m.d.sync += sum_tag.eq(prod_tag)
            for ln in range(W):
                m.d.sync += acc[ln].eq(Mux(prod_gfirst, 0, acc[ln]) + qx_prod[ln])
    vars(ctx).update(acc=acc, sum_valid=sum_valid, sum_tag=sum_tag)


def fold_lanes(m: Module, W: int, LW: int, bits: int, src, levels, wlog, name: str) -> list:
    """Fold levels ``levels`` of W lanes: level l adds lane c + W/2^l into c while the block is narrow
    enough (``wlog`` <= LW − l); returns the lanes (combinational)."""
    cur = list(src)
    for lv in levels:
        h = W >> lv
        nxt = []
        for ln in range(W):
            if ln < h:
                s_ = Signal(signed(bits), name=f"{name}_l{lv}_{ln}")
                m.d.comb += s_.eq(Mux(wlog <= LW - lv, cur[ln] + cur[ln + h], cur[ln]))
                nxt.append(s_)
            else:
                nxt.append(cur[ln])
        cur = nxt
    return cur


def fold_and_scale(m: Module, ctx) -> None:
    """F1 / F2 fold a group's lanes into its columns; S4 scales them, K = scale_lanes a step; ``ctx.adv``
    / ``ctx.sadv`` hold the stages before S4 / S4 and S5."""
    LW, wd, W, gtag, adv, sum_valid, sum_tag, acc = ctx.LW, ctx.wd, ctx.W, ctx.gtag, ctx.adv, ctx.sum_valid, ctx.sum_tag, ctx.acc
    p, s_hold = ctx.p, ctx.s_hold
    l1 = (LW + 1) // 2
    fold1 = [Signal(signed(wd.group_d_bits), name=f"fold1_{ln}") for ln in range(W)]
    fold2 = [Signal(signed(wd.group_d_bits), name=f"fold2_{ln}") for ln in range(W)]
    fold_valid, scale_valid, sd_valid = Signal(), Signal(), Signal()
    fold_tag, scale_tag, sd_tag = Signal(gtag), Signal(gtag), Signal(gtag)
    with m.If(adv):
        m.d.sync += [fold_valid.eq(sum_valid), fold_tag.eq(sum_tag)]
        m.d.sync += [a.eq(b) for a, b in zip(fold1, fold_lanes(m, W, LW, wd.group_d_bits, acc, range(1, l1 + 1), sum_tag.wlog, "fa"))]

    # ---- S4: scale once per group, K = scale_lanes columns a step -----------------------------
    # A group enters S4 whole: f2 from the fold tree and s4 from s_hold (the next group's scale
    # reads may land there before this group's last step). Both are rings that shift down by K
    # lanes a step; the K multipliers read lanes 0..K−1. The fold leaves a block's 2^wlog valid
    # columns in lanes 0..2^wlog − 1, so a group takes max(1, 2^wlog / K) steps.
    K, LK = p.scale_lanes, log2(p.scale_lanes)
    scale_ring = [Signal(signed(SCALE_BITS), name=f"scale_ring{ln}") for ln in range(W)]
    scale_step = Signal(range(max(2, W // K)))    # the step S4 does this cycle
    s_last = Signal()                     # ... is its group's last
    m.d.comb += s_last.eq(((scale_step + 1) << LK) >= (Const(1, W.bit_length() + 1) << scale_tag.wlog))
    y_busy = Signal()                     # the result buffer holds a block that has not left yet
    sd_step = Signal.like(scale_step)
    sadv = Signal()                       # S4 and S5 move this cycle
    # S5 waits while a block's last group finds the result buffer still draining (at its first step);
    # the stages before S4 wait while a finished group in F2 finds S4 busy with the group ahead
    m.d.comb += [sadv.eq(~(sd_valid & sd_tag.blast & (sd_step == 0) & y_busy)), adv.eq(sadv & ~(fold_valid & scale_valid & ~s_last))]
    with m.If(adv & fold_valid):
        m.d.sync += [scale_valid.eq(1), scale_tag.eq(fold_tag), scale_step.eq(0)]
        m.d.sync += [a.eq(b) for a, b in zip(fold2, fold_lanes(m, W, LW, wd.group_d_bits, fold1, range(l1 + 1, LW + 1), fold_tag.wlog, "fb"))]
        m.d.sync += [a.eq(b) for a, b in zip(scale_ring, s_hold)]
    with m.Elif(sadv & scale_valid):
        with m.If(s_last):
            m.d.sync += [scale_valid.eq(0), scale_step.eq(0)]
        with m.Else():
            m.d.sync += scale_step.eq(scale_step + 1)
            m.d.sync += [fold2[ln].eq(fold2[ln + K]) for ln in range(W - K)]
            m.d.sync += [scale_ring[ln].eq(scale_ring[ln + K]) for ln in range(W - K)]
    sd = [Signal(signed(wd.out_bits), name=f"sd{j}") for j in range(K)]
    with m.If(sadv):
        m.d.sync += [sd_valid.eq(scale_valid), sd_tag.eq(scale_tag), sd_step.eq(scale_step)]
        m.d.sync += [sd[j].eq(scale_ring[j] * fold2[j]) for j in range(K)]
    vars(ctx).update(sd_valid=sd_valid, sd_tag=sd_tag, K=K, y_busy=y_busy, sd_step=sd_step, sadv=sadv, sd=sd)


def accumulate(m: Module, ctx) -> None:
    """S5: accumulate across groups; the block's last group fills the result buffer."""
    wd, W, gtag, K, sd_step, sd_tag, sd, sadv = ctx.wd, ctx.W, ctx.gtag, ctx.K, ctx.sd_step, ctx.sd_tag, ctx.sd, ctx.sadv
    sd_valid = ctx.sd_valid
    # Step k of a group adds its K products into columns kK .. kK + K − 1. The result buffer starts
    # draining (one out_lanes chunk a cycle) after the last group's step max(0, steps − chunks), so
    # every chunk is written before it is read and the last one leaves right after the last step.
    yacc = [Signal(signed(wd.out_bits), name=f"yacc{ln}") for ln in range(W)]
    y_out = [Signal(signed(wd.out_bits), name=f"y_out{ln}") for ln in range(W)]
    y_tag = Signal(gtag)
    y_done = Signal()                   # the result buffer's last chunk leaves this cycle
    n_steps = W // K
    total = [Signal(signed(wd.out_bits), name=f"total{j}") for j in range(K)]
    for j in range(K):
        prev = Array(yacc[k * K + j] for k in range(n_steps))[sd_step] if n_steps > 1 else yacc[j]
        m.d.comb += total[j].eq(Mux(sd_tag.bfirst, 0, prev) + sd[j])
    with m.If(sadv & sd_valid):
        with m.Switch(sd_step):
            for k in range(n_steps):
                with m.Case(k):
                    with m.If(sd_tag.blast):
                        m.d.sync += [y_out[k * K + j].eq(total[j]) for j in range(K)]
                    with m.Else():
                        m.d.sync += [yacc[k * K + j].eq(total[j]) for j in range(K)]
        with m.If(sd_tag.blast & (sd_step == 0)):
            m.d.sync += y_tag.eq(sd_tag)
    vars(ctx).update(y_out=y_out, y_tag=y_tag, y_done=y_done)


def requantise(m: Module, ctx) -> None:
    """R1..R3: the result buffer's out_lanes chunks rounded, shifted to the output format and saturated."""
    p, W, LW, sd_step, sd_tag, y_tag, core = ctx.p, ctx.W, ctx.LW, ctx.sd_step, ctx.sd_tag, ctx.y_tag, ctx.core
    y_done, y_busy, sadv, sd_valid, wd, sh_lo = ctx.y_done, ctx.y_busy, ctx.sadv, ctx.sd_valid, ctx.wd, ctx.sh_lo
    r_sh, sh_hi, y_out = ctx.r_sh, ctx.sh_hi, ctx.y_out
    OL = p.out_lanes
    n_chunks = W // OL
    y_fill = Signal()                   # S5's step lets the result buffer start draining
    fill = [max(0, p.scale_steps(1 << k) - max(1, (1 << k) // OL)) for k in range(LW + 1)]
    m.d.comb += y_fill.eq(sd_step == Array(Const(j, sd_step.shape()) for j in fill)[sd_tag.wlog])
    chunk = Signal(range(max(2, n_chunks)))
    last_chunk = Signal()
    m.d.comb += last_chunk.eq(((chunk + 1) << log2(OL)) >= (Const(1, W.bit_length() + 1) << y_tag.wlog))
    adv_o = Signal()
    m.d.comb += adv_o.eq(~core.o.valid | core.o.ready)
    m.d.comb += y_done.eq(y_busy & adv_o & last_chunk)
    with m.If(sadv & sd_valid & sd_tag.blast & y_fill):
        m.d.sync += y_busy.eq(1)
    with m.Elif(y_done):
        m.d.sync += y_busy.eq(0)
    with m.If(y_busy & adv_o):
        m.d.sync += chunk.eq(Mux(last_chunk, 0, chunk + 1))

    ybits = wd.out_bits
    lmax = max(0, -sh_lo)
    rounded = [Signal(signed(ybits + 1), name=f"rounded{j}") for j in range(OL)]
    shifted = [Signal(signed(ybits + 1 + lmax), name=f"shifted{j}") for j in range(OL)]
    round_valid, shift_valid = Signal(), Signal()
    ot = StructLayout({"count": unsigned(OL.bit_length()), "last": 1, "sh": r_sh.shape(), "fmt": 1})
    round_tag, shift_tag = Signal(ot), Signal(ot)
    sh_pos = Signal(range(max(2, sh_hi + 1)))
    m.d.comb += sh_pos.eq(Mux(y_tag.sh > 0, y_tag.sh, 0))
    sh_m1 = Signal.like(sh_pos)
    rnd = Signal(ybits + 1)
    m.d.comb += [sh_m1.eq(sh_pos - 1), rnd.eq(Mux(y_tag.sh > 0, Const(1, ybits + 1) << sh_m1, 0))]
    with m.If(adv_o):
        m.d.sync += [round_valid.eq(y_busy), shift_valid.eq(round_valid), core.o.valid.eq(shift_valid), shift_tag.eq(round_tag)]
        m.d.sync += [round_tag.count.eq(Mux(y_tag.wlog < log2(OL), Const(1, OL.bit_length()) << y_tag.wlog, OL)),
                     round_tag.last.eq(y_tag.last & last_chunk), round_tag.sh.eq(y_tag.sh), round_tag.fmt.eq(y_tag.fmt)]
        for j in range(OL):
            sel = Array(y_out[k * OL + j] for k in range(n_chunks))[chunk] if n_chunks > 1 else y_out[j]
            m.d.sync += rounded[j].eq(sel + rnd)
        # R2: shift by sh (right, rounding already added) or left by −sh
        shr = Signal(range(max(2, sh_hi + 1)))
        shl = Signal(range(max(2, lmax + 1)))
        m.d.comb += [shr.eq(Mux(round_tag.sh > 0, round_tag.sh, 0)), shl.eq(Mux(round_tag.sh < 0, -round_tag.sh, 0))]
        for j in range(OL):
            m.d.sync += shifted[j].eq(Mux(round_tag.sh > 0, rounded[j] >> shr, rounded[j] << shl))
        # R3: saturate to the output format
        fx, fl_ = p.out_fmts
        lo = Mux(shift_tag.fmt, fl_.lo, fx.lo)
        hi = Mux(shift_tag.fmt, fl_.hi, fx.hi)
        m.d.sync += [core.o.payload.count.eq(shift_tag.count), core.o.payload.last.eq(shift_tag.last)]
        for j in range(OL):
            m.d.sync += core.o.payload.y[j].eq(Mux(shifted[j] < lo, lo, Mux(shifted[j] > hi, hi, shifted[j])))
