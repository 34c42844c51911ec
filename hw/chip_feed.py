"""Op feeds: the element feeder (VRF sources side by side with PRF a / b parameters) into the norm
unit, residual mixer, element-wise unit, router, MoE combine or KDA engine, and the word feeder into
the MAC array's input or the MLA engine; the op's opcode picks the consumer. Adds its
logic to the chip core's module.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal

from hw.chip_glue import ElemFeeder, WordFeeder
from hw.chip_roms import TURNS
from hw.norm_unit import NormOp
from hw.program import INTERLEAVED, Opc
from nano_k3.tensors import PARAM_BITS as PB


def feeders(m: Module, ctx) -> None:
    """The two feeders and their routing: ``ctx.ef`` / ``ctx.wf``, ``ctx.is_op(opc)`` (the loaded op is
    ``opc``), ``ctx.act_open`` (the MAC array may take a new vector), ``ctx.sb`` (slot index bits)."""
    prog, SW, cfg, max_n, vrf, prf, prf_w = ctx.prog, ctx.SW, ctx.cfg, ctx.max_n, ctx.vrf, ctx.prf, ctx.prf_w
    elem_lanes, entries, KL, NL, ML, EL, CL = ctx.elem_lanes, ctx.entries, ctx.KL, ctx.NL, ctx.ML, ctx.EL, ctx.CL
    op, turn, norm, mixer, ew, router, comb = ctx.op, ctx.turn, ctx.norm, ctx.mixer, ctx.ew, ctx.router, ctx.comb
    kda, mla, mac, minp, max_cands, pos = ctx.kda, ctx.mla, ctx.mac, ctx.minp, ctx.max_cands, ctx.pos
    weights = ctx.weights
    sb = max(1, (prog.n_slots - 1).bit_length())
    ef = m.submodules.elem_feeder = ElemFeeder(slot_bits=sb, slot_words=SW, vrf_abits=vrf.abits,
                                               prf_width=prf_w, prf_abits=prf[0].abits, max_n=max_n,
                                               dh=cfg.kda_dh, conv_k=cfg.conv_k,
                                               word_srcs=max(len(o.srcs) for o in prog.ops
                                                             if o.opc in INTERLEAVED), lanes=max(elem_lanes.values()),
                                               entries=entries, pa_params=max(4, cfg.conv_k * KL, NL, ML),
                                               pb_params=max(2, ML))
    wf = m.submodules.word_feeder = WordFeeder(slot_bits=sb, slot_words=SW, vrf_abits=vrf.abits)
    for k in range(4):
        m.d.comb += ef.srcs[k].eq(getattr(op, f"s{k}"))
    m.d.comb += [ef.ns.eq(op.ns), ef.n.eq(op.n), ef.pa_mode.eq(op.pa), ef.pb_mode.eq(op.pb),
                 ef.vrf_rdata.eq(vrf.r_data), ef.pa_rdata.eq(prf[0].r_data), ef.pb_rdata.eq(prf[1].r_data),
                 prf[0].r_en.eq(ef.pa_re), prf[0].r_addr.eq(ef.pa_raddr),
                 prf[1].r_en.eq(ef.pb_re), prf[1].r_addr.eq(ef.pb_raddr),
                 wf.vrf_rdata.eq(vrf.r_data), wf.slot.eq(op.s0), ef.vrf_wr.eq(vrf.w_en), wf.vrf_wr.eq(vrf.w_en)]
    m.d.comb += [vrf.r_en.eq(ef.vrf_re | wf.vrf_re), vrf.r_addr.eq(Mux(ef.vrf_re, ef.vrf_raddr, wf.vrf_raddr))]
    fo = ef.o
    is_op = lambda c: op.opc == int(c)   # noqa: E731
    m.d.comb += [turn[u].eq(is_op(c)) for u, c in TURNS.items()]
    m.d.comb += turn["router_w"].eq(is_op(Opc.ROUTE) | ctx.route_w)

    # feed routing
    m.d.comb += [
        *[norm.i.payload.v[k].eq(fo.payload.data[k]) for k in range(NL)],
        *[norm.i.payload.w[k].eq(fo.payload.pa[PB * k:PB * k + PB]) for k in range(NL)],
        norm.i.payload.op.eq(NormOp.RMS), norm.i.payload.last.eq(fo.payload.final),
        *[mixer.i.payload.data[k][j].eq(fo.payload.data[k * ML + j]) for k in range(max_cands) for j in range(ML)],
        mixer.i.payload.n.eq(op.ns), mixer.i.payload.last.eq(fo.payload.final),
        *[mixer.w.payload[j].eq(fo.payload.pa[16 * j:16 * j + 16]) for j in range(ML)],
        *[mixer.proj.payload[j].eq(fo.payload.pb[16 * j:16 * j + 16]) for j in range(ML)],
        ew.i.payload.op.eq(op.ewop), *[ew.i.payload.a[k].eq(fo.payload.data[k]) for k in range(EL)],
        *[ew.i.payload.b[k].eq(fo.payload.data[EL + k]) for k in range(EL)],
        router.i.payload.logit.eq(fo.payload.data[0]), router.i.payload.bias.eq(fo.payload.pa[:16]),
        router.i.payload.top_k.eq(cfg.top_k), router.i.payload.last.eq(fo.payload.final),
        *[comb.i.payload[k][j].eq(fo.payload.data[k * CL + j]) for k in range(cfg.top_k + 2) for j in range(CL)],
        kda.i.payload.sel.eq(op.sel), kda.i.payload.idx.eq(fo.payload.idx),
        *[f.eq(v) for k in range(KL) for f, v in (
            (kda.i.payload.data[k], fo.payload.data[k]), (kda.i.payload.a[k], fo.payload.pb[:16]),   # one head
            (kda.i.payload.dtb[k], fo.payload.pa[PB * k:PB * k + PB]),
            (kda.i.payload.w[k], fo.payload.pa[PB * k:PB * k + PB]))],
        kda.i.payload.layer.eq(op.layer),
        kda.i.payload.restart.eq(pos == 0), kda.i.payload.last.eq(fo.payload.final & op.last),
    ]
    for j in range(cfg.conv_k * KL):                 # lane k's taps at k conv_k + j, as in the PRF
        m.d.comb += kda.i.payload.taps[j].eq(fo.payload.pa[16 * j:16 * j + 16])
    for j in range(cfg.top_k):
        m.d.comb += comb.weights[j].eq(weights[j])
    with m.Switch(op.opc):
        with m.Case(Opc.RMS):
            m.d.comb += [norm.i.valid.eq(fo.valid), fo.ready.eq(norm.i.ready)]
        with m.Case(Opc.MIX):
            m.d.comb += [mixer.i.valid.eq(fo.valid), mixer.w.valid.eq(fo.valid),
                         mixer.proj.valid.eq(fo.valid), fo.ready.eq(mixer.i.ready)]
        with m.Case(Opc.EW):
            m.d.comb += [ew.i.valid.eq(fo.valid), fo.ready.eq(ew.i.ready)]
        with m.Case(Opc.ROUTE):
            m.d.comb += [router.i.valid.eq(fo.valid), fo.ready.eq(router.i.ready)]
        with m.Case(Opc.COMB):
            m.d.comb += [comb.i.valid.eq(fo.valid), fo.ready.eq(comb.i.ready)]
        with m.Case(Opc.KDA):
            m.d.comb += [kda.i.valid.eq(fo.valid), fo.ready.eq(kda.i.ready)]

    # word feed routing: MAC input or the MLA engine
    wo = wf.o
    m.d.comb += [minp.i.payload.eq(wo.payload), minp.n.eq(op.n),
                 mla.i.payload.data.eq(wo.payload.data), mla.i.payload.pos.eq(pos)]
    act_open = Signal()                       # no queued command still needs the array's vector
    m.d.comb += [mac.act.payload.eq(minp.o.payload), mac.act.valid.eq(minp.o.valid & act_open),
                 minp.o.ready.eq(mac.act.ready & act_open)]
    with m.If(is_op(Opc.MLA)):
        m.d.comb += [mla.i.valid.eq(wo.valid), wo.ready.eq(mla.i.ready)]
    with m.Else():
        m.d.comb += [minp.i.valid.eq(wo.valid), wo.ready.eq(minp.i.ready)]
    vars(ctx).update(sb=sb, ef=ef, wf=wf, is_op=is_op, act_open=act_open)
