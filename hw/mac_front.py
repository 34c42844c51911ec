"""MAC array front: the activation register file, the read sequencer (stage I: the store reads of each
(block, group), z, q beats, s), the activation window and stage D's (q − z)·x products. Adds its logic to
the array's module (hw/mac_array.py)."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib.data import StructLayout

from hw.mac_params import Q, S0, S1, SCALE_BITS, ZERO_BITS, Z, act_layout, cmd_layout
from hw.params import log2, signed_bits
from hw.weight_store import BEAT_BYTES
from nano_k3 import fxp_ops


def activation_regs(m: Module, ctx) -> None:
    """The activation register file: ``act`` transfers into pairs of int-A elements and the vector's
    exponent ``frac``; ``ctx.active`` while a command's reads run."""
    p, abits, core = ctx.p, ctx.abits, ctx.core
    P = p.pairs
    pair_a = [Signal(signed(abits), name=f"act{2 * k}") for k in range(P)]
    pair_b = [Signal(signed(abits), name=f"act{2 * k + 1}") for k in range(P)]
    frac = Signal(act_layout(p).members["frac"])
    act_ptr = Signal(range(max(2, p.max_fan_in // p.act_lanes)))    # transfer index in the vector
    active = Signal()
    m.d.comb += core.act.ready.eq(~active)
    per = p.act_lanes // 2
    with m.If(core.act.valid & core.act.ready):
        m.d.sync += act_ptr.eq(Mux(core.act.payload.last, 0, act_ptr + 1))
        with m.If(core.act.payload.last):
            m.d.sync += frac.eq(core.act.payload.frac)
        for k in range(P):
            with m.If(act_ptr == k // per):
                m.d.sync += [pair_a[k].eq(core.act.payload.m[2 * (k % per)]),
                             pair_b[k].eq(core.act.payload.m[2 * (k % per) + 1])]
    vars(ctx).update(P=P, pair_a=pair_a, pair_b=pair_b, frac=frac, act_ptr=act_ptr, active=active)


def read_sequencer(m: Module, ctx) -> None:
    """Stage I: a command's registers and the store reads of every (block, group): Z (zero points), the
    q beats, S0 / S1 (scales); the tags of each read (group first / last, block last)."""
    p, core, LW, P, W, active, act_ptr = ctx.p, ctx.core, ctx.LW, ctx.P, ctx.W, ctx.active, ctx.act_ptr
    frac, NB, port, adv = ctx.frac, ctx.NB, ctx.port, ctx.adv
    bb = p.store.beat_bits
    c = core.i.payload
    n_w = cmd_layout(p).members["fan_out_log2"]
    sh_lo, sh_hi = p.shift_range
    r_n, r_ls, r_fl, r_wlog, r_vb = (Signal(range(log2(p.max_fan_out) + 2 + LW), name=nm)
                                     for nm in ("n", "lane_shift", "fold_log", "wlog", "vb_log"))
    r_gmask = Signal(range(P + 1))            # pairs per group − 1
    r_half = Signal(range(P + 1))             # pairs per block (fan_in / 2)
    r_s2 = Signal()                           # the block's scales need two reads
    r_blocks_m1 = Signal(range(max(2, p.max_fan_out // W + 1)))
    r_qinc = Signal(bb + 1)
    r_sbase, r_zbase = Signal(bb), Signal(bb)
    r_sh = Signal(signed(signed_bits(sh_lo, sh_hi)))
    r_fmt = Signal()
    r_colw = Signal(range(p.max_fan_out + 1))  # N (element step of s/z per group)

    phase = Signal(2)
    r0 = Signal(range(P + 1))
    qa, qblk = Signal(bb), Signal(bb)
    szcol, szblk = Signal(range(p.max_fan_out * (p.max_fan_in // 2 + 1))), Signal(range(p.max_fan_out + W + 1))
    blk = Signal.like(r_blocks_m1)
    gfirst, bfirst, blk_end = Signal(), Signal(), Signal()

    m.d.comb += core.i.ready.eq(~active & (act_ptr == 0) & ~core.act.valid)
    with m.If(core.i.valid & core.i.ready):
        n = c.fan_out_log2
        glog = c.group_log2
        fold = n < LW
        fl = Signal(range(LW + 1))
        gp_log = Signal.like(glog)             # log2 of the pairs per group
        m.d.comb += [gp_log.eq(glog - 1), fl.eq(Mux(fold, Mux(LW - n < gp_log, LW - n, gp_log), 0))]
        fr = [f.frac for f in p.out_fmts]
        m.d.sync += [
            active.eq(1), phase.eq(Z), r0.eq(0), qa.eq(c.q_beat), qblk.eq(c.q_beat),
            szcol.eq(0), szblk.eq(0), blk.eq(0), gfirst.eq(1), bfirst.eq(1),
            r_n.eq(n), r_ls.eq(Mux(fold, n, LW)), r_fl.eq(fl), r_wlog.eq(Mux(fold, n, LW)),
            r_vb.eq(Mux(fl + n < LW, fl + n, LW)),
            r_gmask.eq((Const(1, P.bit_length() + 1) << gp_log) - 1), r_half.eq(c.fan_in >> 1),
            r_s2.eq(~fold), r_blocks_m1.eq(Mux(fold, 0, ((Const(1, n_w.width + 12) << n) >> LW) - 1)),
            r_qinc.eq((Const(1, bb + 1) << (fl + n)) >> 4),
            r_sbase.eq(c.s_beat), r_zbase.eq(c.z_beat), r_fmt.eq(c.fmt),
            r_sh.eq(frac + fxp_ops.ACC_FRAC - Mux(c.fmt, fr[1], fr[0])),
            r_colw.eq(Const(1, p.max_fan_out.bit_length()) << n),
        ]

    # tags of the read issued this cycle, registered into stage D with the read
    step = Signal(range(P + 1))
    next_r0 = Signal(range(2 * P + 1))
    g_last, b_last = Signal(), Signal()
    m.d.comb += [step.eq(Const(1, P.bit_length() + 1) << r_fl), next_r0.eq(r0 + step),
                 g_last.eq((next_r0 & r_gmask) == 0), b_last.eq(next_r0 == r_half)]
    rd_beat = Signal(bb)
    with m.Switch(phase):
        with m.Case(Q):
            m.d.comb += rd_beat.eq(qa)
        with m.Case(Z):
            m.d.comb += rd_beat.eq(r_zbase + (szcol >> 4))
        with m.Case(S0):
            m.d.comb += rd_beat.eq(r_sbase + (szcol >> 3))
        with m.Case(S1):
            m.d.comb += rd_beat.eq(r_sbase + (szcol >> 3) + NB)
    m.d.comb += [port.en.eq(active & adv), port.beat.eq(rd_beat)]

    with m.If(active & adv):
        with m.Switch(phase):
            with m.Case(Z):
                m.d.sync += phase.eq(Q)
            with m.Case(Q):
                m.d.sync += [qa.eq(qa + r_qinc), r0.eq(next_r0), gfirst.eq(g_last)]
                with m.If(g_last):
                    m.d.sync += [phase.eq(S0), blk_end.eq(b_last)]
            with m.Case(S0, S1):
                done = Signal()
                m.d.comb += done.eq((phase == S1) | ~r_s2)
                with m.If(~done):
                    m.d.sync += phase.eq(S1)
                with m.Else():
                    m.d.sync += [phase.eq(Z), bfirst.eq(blk_end)]
                    with m.If(~blk_end):
                        m.d.sync += szcol.eq(szcol + r_colw)
                    with m.Elif(blk == r_blocks_m1):
                        m.d.sync += active.eq(0)
                    with m.Else():
                        m.d.sync += [blk.eq(blk + 1), szcol.eq(szblk + W), szblk.eq(szblk + W),
                                     qblk.eq(qblk + NB), qa.eq(qblk + NB), r0.eq(0)]
    vars(ctx).update(sh_lo=sh_lo, sh_hi=sh_hi, r_ls=r_ls, r_wlog=r_wlog, r_vb=r_vb, r_blocks_m1=r_blocks_m1,
                     r_sh=r_sh, r_fmt=r_fmt, phase=phase, r0=r0, szcol=szcol, blk=blk, gfirst=gfirst,
                     bfirst=bfirst, g_last=g_last, b_last=b_last)


def stage_d(m: Module, ctx) -> None:
    """Each lane block's operand pair for the next read, chosen from the activation window, and stage D's
    registers of the read's tags."""
    p, abits, r0, P, adv, pair_a, pair_b = ctx.p, ctx.abits, ctx.r0, ctx.P, ctx.adv, ctx.pair_a, ctx.pair_b
    r_ls, r_vb, r_wlog, r_sh, active, phase = ctx.r_ls, ctx.r_vb, ctx.r_wlog, ctx.r_sh, ctx.active, ctx.phase
    gfirst, g_last, szcol, bfirst, b_last, blk = ctx.gfirst, ctx.g_last, ctx.szcol, ctx.bfirst, ctx.b_last, ctx.blk
    r_blocks_m1, r_fmt, port, core = ctx.r_blocks_m1, ctx.r_fmt, ctx.port, ctx.core
    # activation window: slot j = pair r0 + j (r0 is a multiple of the window size 2^fold_log > j). A block of
    # 2^kmin lanes takes slot (u << kmin) >> lane_shift; that choice is made here, so stage D's registers are
    # each block's own operands and D itself has no decode or window multiplexer in front of its multipliers.
    # Lanes from 2^vb_log on hold no valid column and multiply by 0: vb_log >= kmin whenever a Case below
    # is taken (vb_log = min(fold_log + n, LW), n = lane_shift or n >= LW), so the test is per block and
    # made here too, not by one register fanning out to every lane's operand multiplexer.
    S, W, LW = p.window, ctx.W, ctx.LW
    window_a, window_b = [], []
    for j in range(S):
        bl = j.bit_length()
        idx = r0 >> bl
        opts = list(range(j, P, 1 << bl))
        window_a.append(Array(pair_a[k] for k in opts)[idx])
        window_b.append(Array(pair_b[k] for k in opts)[idx])
    kmin = log2(p.min_fan_out)
    nblk = W >> kmin                       # lane blocks sharing one slot in every mode
    xa_blk = [Signal(signed(abits), name=f"xa_blk{u}") for u in range(nblk)]
    xb_blk = [Signal(signed(abits), name=f"xb_blk{u}") for u in range(nblk)]
    with m.If(adv):
        for u in range(nblk):
            with m.If((Const(u << kmin, LW + 1) >> r_vb) != 0):
                m.d.sync += [xa_blk[u].eq(0), xb_blk[u].eq(0)]
            with m.Else():
                with m.Switch(r_ls):
                    for k in range(kmin, LW + 1):
                        slot = (u << kmin) >> k
                        with m.Case(k):
                            a, b = (window_a[slot], window_b[slot]) if slot < S else (0, 0)
                            m.d.sync += [xa_blk[u].eq(a), xb_blk[u].eq(b)]
                    with m.Default():
                        m.d.sync += [xa_blk[u].eq(0), xb_blk[u].eq(0)]

    # stage D registers (the read data itself sits in the macros' output registers)
    d_valid = Signal()
    d_kind, d_gfirst, d_glast = Signal(2), Signal(), Signal()
    d_wlog = Signal.like(r_wlog)
    d_offset = Signal(4)
    gtag = StructLayout({"bfirst": 1, "blast": 1, "last": 1, "wlog": r_wlog.shape(),
                         "sh": r_sh.shape(), "fmt": 1})
    d_tag = Signal(gtag)
    with m.If(adv):
        m.d.sync += [d_valid.eq(active), d_kind.eq(phase), d_gfirst.eq(gfirst), d_glast.eq(g_last),
                     d_wlog.eq(r_wlog),
                     d_offset.eq(Mux(phase == Z, szcol[:4], Cat(Const(0, 1), szcol[:3]))),
                     d_tag.bfirst.eq(bfirst), d_tag.blast.eq(b_last), d_tag.last.eq(b_last & (blk == r_blocks_m1)),
                     d_tag.wlog.eq(r_wlog), d_tag.sh.eq(r_sh), d_tag.fmt.eq(r_fmt)]
    m.d.comb += [port.lock.eq(active | d_valid), core.busy.eq(active | d_valid)]
    vars(ctx).update(kmin=kmin, xa_blk=xa_blk, xb_blk=xb_blk, d_valid=d_valid, d_kind=d_kind, d_gfirst=d_gfirst, d_glast=d_glast, d_wlog=d_wlog,
                     d_offset=d_offset, gtag=gtag, d_tag=d_tag)


def products(m: Module, ctx) -> None:
    """Stage D: the zero points and scales captured per lane; S1 (q − z)·x per weight pair."""
    W, port, NB, d_valid, d_kind, d_offset, adv, d_wlog = ctx.W, ctx.port, ctx.NB, ctx.d_valid, ctx.d_kind, ctx.d_offset, ctx.adv, ctx.d_wlog
    LW, kmin, xa_blk, xb_blk = ctx.LW, ctx.kmin, ctx.xa_blk, ctx.xb_blk
    wd, gtag, d_gfirst, d_glast, d_tag = ctx.wd, ctx.gtag, ctx.d_gfirst, ctx.d_glast, ctx.d_tag
    flat = Signal(W * 8)
    m.d.comb += flat.eq(Cat(*[port.data[j] for j in range(NB)]))
    isq = d_valid & (d_kind == Q)
    # z / s capture (sub-beat offsets only occur when the block is narrower than one beat). A group's
    # z read comes before its q beats, so z_hold holds this group's zero points while its beats pass D;
    # lane ln takes the zero point of its column, ln mod 2^wlog (lanes of one column share it).
    z_hold = [Signal(ZERO_BITS, name=f"z_hold{ln}") for ln in range(W)]
    s_hold = [Signal(signed(SCALE_BITS), name=f"s_hold{ln}") for ln in range(W)]
    beat0 = Signal(8 * BEAT_BYTES)
    m.d.comb += beat0.eq(port.data[0] >> (d_offset * 8))
    z_byte = [(beat0 if j < BEAT_BYTES else flat)[8 * j:8 * j + ZERO_BITS] for j in range(W)]
    with m.If(adv & d_valid & (d_kind == Z)):
        with m.Switch(d_wlog):
            for k in range(LW + 1):
                with m.Case(k):
                    m.d.sync += [z_hold[ln].eq(z_byte[ln % (1 << k)]) for ln in range(W)]
    half = W // 2
    with m.If(adv & d_valid & (d_kind == S0)):
        for ln in range(half):
            src = beat0 if 2 * ln < BEAT_BYTES else flat
            m.d.sync += s_hold[ln].eq(src[16 * ln:16 * ln + 16])
    with m.If(adv & d_valid & (d_kind == S1)):
        for ln in range(half):
            m.d.sync += s_hold[half + ln].eq(flat[16 * ln:16 * ln + 16])

    # (q − z)·x per weight: the zero point comes off the nibble (−15..15), so a lane's group sum is d
    # itself and no lane keeps Σx or multiplies it by z
    qx_prod = [Signal(signed(wd.beat_d_bits), name=f"qx_prod{ln}") for ln in range(W)]
    prod_valid, prod_gfirst, prod_glast = Signal(), Signal(), Signal()
    prod_tag = Signal(gtag)
    with m.If(adv):
        m.d.sync += [prod_valid.eq(isq), prod_gfirst.eq(d_gfirst), prod_glast.eq(d_glast), prod_tag.eq(d_tag)]
    for ln in range(W):
        xa, xb = xa_blk[ln >> kmin], xb_blk[ln >> kmin]
        dq = [Signal(signed(ZERO_BITS + 1), name=f"dq{h}_{ln}") for h in range(2)]   # q − z, low / high
        m.d.comb += [dq[h].eq(flat[8 * ln + 4 * h:8 * ln + 4 * h + 4] - z_hold[ln]) for h in range(2)]
        with m.If(adv):
            m.d.sync += qx_prod[ln].eq(dq[0] * xa + dq[1] * xb)
    vars(ctx).update(s_hold=s_hold, qx_prod=qx_prod, prod_valid=prod_valid, prod_gfirst=prod_gfirst, prod_glast=prod_glast, prod_tag=prod_tag)
