"""Op dispatch: the micro-program's ops one after another. DISPATCH starts an op once what it reads
is written (the matvec result queue of hw/chip_collect.py), its store records are prefetched and the
memory side is ready; each op's states then feed its engine until the op's last cycle loads the next op.
Matvec commands wait in a FIFO for the MAC array (``MV_QUEUE`` deep). These functions add their logic
to the chip core's module; the states belong to its control FSM.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib.data import View

from hw.chip_collect import MV_QUEUE
from hw.chip_load import ADDR_BITS, DESC_BANKS
from hw.params import log2
from hw.program import PRF_READERS, Opc
from nano_k3.image import STATUS_DONE, logits_stride


class RegFifo:
    """A first-word-fall-through FIFO of ``depth`` (a power of two) separate registers, so synthesis
    infers no memory (flow.synth allows only msh_sram / msh_rom arrays): ``w_en`` / ``w_rdy`` /
    ``w_data`` and ``r_en`` / ``r_rdy`` / ``r_data``."""

    LATENCY = 1          # a word pushed in cycle c can be read from c + 1 (the count ``n`` is a register)

    def __init__(self, m: Module, name: str, shape, depth: int):
        regs = Array(Signal(Shape.cast(shape).width, name=f"{name}_q{k}") for k in range(depth))
        rd, wr = Signal(range(depth), name=f"{name}_rd"), Signal(range(depth), name=f"{name}_wr")
        n = Signal(range(depth + 1), name=f"{name}_n")
        self.w_en, self.r_en = Signal(name=f"{name}_w_en"), Signal(name=f"{name}_r_en")
        self.w_data, self.r_data = Signal(shape, name=f"{name}_w_data"), Signal(shape, name=f"{name}_r_data")
        self.w_rdy, self.r_rdy = Signal(name=f"{name}_w_rdy"), Signal(name=f"{name}_r_rdy")
        push, pop = Signal(name=f"{name}_push"), Signal(name=f"{name}_pop")
        m.d.comb += [self.w_rdy.eq(n != depth), self.r_rdy.eq(n != 0), self.r_data.eq(regs[rd]),
                     push.eq(self.w_en & self.w_rdy), pop.eq(self.r_en & self.r_rdy)]
        with m.If(push):
            m.d.sync += [regs[wr].eq(self.w_data), wr.eq(wr + 1)]
        with m.If(pop):
            m.d.sync += rd.eq(rd + 1)
        m.d.sync += n.eq(n + push - pop)


def log2_sig(m: Module, v):
    """log2 of a power-of-two signal (priority encoder)."""
    out = Signal(range(len(v) + 1), name="fan_in_log2")
    for b in range(len(v)):
        with m.If(v[b]):
            m.d.comb += out.eq(b)
    return out


def op_issue(m: Module, ctx) -> None:
    """What DISPATCH hands work to: the feeders' starts (``ctx.start_ef`` / ``ctx.start_wf``), the matvec
    command FIFO ``ctx.cq`` and the descriptor prefetch (``ctx.pf_q``, ``ctx.pf_hit``; ``ctx.holding``);
    ``ctx.in_pos`` marks a position's cycles."""
    core, cfg, nrec, L, SW, op, op_layout = ctx.core, ctx.cfg, ctx.nrec, ctx.L, ctx.SW, ctx.op, ctx.op_layout
    rom_data, ef, wf, elem_lanes, is_op, mac = ctx.rom_data, ctx.ef, ctx.wf, ctx.elem_lanes, ctx.is_op, ctx.mac
    act_open, pld_busy, dq, group_log2, head = ctx.act_open, ctx.pld_busy, ctx.dq, ctx.group_log2, ctx.head
    choice, desc, bb = ctx.choice, ctx.desc, ctx.bb
    start_ef, start_wf = Signal(), Signal()
    m.d.comb += [ef.start.eq(start_ef), wf.start.eq(start_wf)]
    with m.Switch(op.opc):
        for c, k in elem_lanes.items():
            with m.Case(c):
                m.d.comb += ef.lanes_log2.eq(log2(k))
    # Matvec commands wait in a FIFO for the MAC array, so the sequencer moves on while the array
    # works through earlier ones. An MV's activations enter the array only with the FIFO empty (the
    # queued commands still need the array's present vector).
    cq = RegFifo(m, "mv_cmd", mac.i.payload.shape(), MV_QUEUE)
    mac_cmd = Signal(mac.i.payload.shape())
    # A PLD's copy goes first: the array takes no command while it runs (its readers come soon).
    m.d.comb += [cq.w_data.eq(mac_cmd), mac.i.payload.eq(cq.r_data), mac.i.valid.eq(cq.r_rdy & ~pld_busy),
                 cq.r_en.eq(mac.i.ready & ~pld_busy), act_open.eq(~cq.r_rdy)]
    fin_log2 = log2_sig(m, op.fan_in)
    m.d.comb += [mac_cmd.q_beat.eq(dq[0]), mac_cmd.s_beat.eq(dq[1]), mac_cmd.z_beat.eq(dq[2]),
                 mac_cmd.fan_in.eq(op.fan_in), mac_cmd.fan_out_log2.eq(op.fan_out_log2),
                 mac_cmd.group_log2.eq(Mux(group_log2 < fin_log2, group_log2, fin_log2)),
                 mac_cmd.fmt.eq(head)]
    def record_of(o, name: str) -> Signal:
        """The first of op ``o``'s three store records (.q, .s, .z): an expert op's follow the router's choice."""
        ch_sel = Signal.like(choice[0], name=f"{name}_choice")
        with m.Switch(o.expert):
            for j in range(cfg.top_k):
                with m.Case(j + 1):
                    m.d.comb += ch_sel.eq(choice[j])
        rec = Signal(range(nrec + 9 * cfg.n_experts), name=name)
        m.d.comb += rec.eq(o.rec + Mux(o.expert != 0, 9 * ch_sel, 0))
        return rec

    # Descriptor prefetch: in a position's cycles the banks are read for the three records of the op to
    # dispatch next (the ROM word at pc + 1; the loaded op itself while DISPATCH holds it), so an MV,
    # PLD or EMB finds its store beats in ``pf_q`` when it dispatches. ``pf_rec`` tags them: a
    # router choice made after the read only costs a re-read. A read issues only when neither the read
    # in flight nor (none in flight) ``pf_q`` already brings the target, so ``pf_q`` holds what reading
    # every cycle would give, and no read happens outside a position: the load phase writes the banks,
    # and fakeram45 drops a read beside a write (docs/pnr.md).
    rec_eff = record_of(op, "rec_eff")
    rec_next = record_of(View(op_layout, rom_data[:op_layout.size]), "rec_next")
    pf_q = [Signal(bb, name=f"pf_q{k}") for k in range(3)]
    pf_rec = Signal.like(rec_eff)
    pf_ok = Signal()
    pf_hit = Signal()
    m.d.comb += pf_hit.eq(pf_ok & (pf_rec == rec_eff))
    pf_target = Signal.like(rec_eff)
    rd_rec = Signal.like(rec_eff)              # the records read last cycle
    rd_ok = Signal()                           # a read issued last cycle
    holding = Signal()                         # DISPATCH keeps the loaded op waiting
    in_pos = Signal()
    desc_re = Signal()
    m.d.comb += [pf_target.eq(Mux(holding, rec_eff, rec_next)),
                 desc_re.eq(in_pos & ~Mux(rd_ok, rd_rec == pf_target, pf_ok & (pf_rec == pf_target)))]
    bsel = log2(DESC_BANKS)
    for b, bank in enumerate(desc):
        j = (b - pf_target[:bsel])[:bsel]           # record pf_target + j sits in bank b
        m.d.comb += [bank.r_en.eq(desc_re), bank.r_addr.eq((pf_target + j) >> bsel)]
    m.d.sync += [rd_rec.eq(pf_target), rd_ok.eq(desc_re), pf_ok.eq((pf_ok | rd_ok) & in_pos)]
    with m.If(rd_ok):
        m.d.sync += pf_rec.eq(rd_rec)
        with m.Switch(rd_rec[:bsel]):
            for r in range(DESC_BANKS):
                with m.Case(r):
                    m.d.sync += [pf_q[k].eq(desc[(r + k) % DESC_BANKS].r_data) for k in range(3)]
    nw_of_n = Signal(range(SW + 1))
    m.d.comb += nw_of_n.eq((op.n + (L - 1)) >> log2(L))
    m.d.comb += [wf.w0.eq(Mux(is_op(Opc.MLA), op.w0, 0)), wf.nw.eq(Mux(is_op(Opc.MLA), op.nw, nw_of_n))]
    with m.If(in_pos):
        m.d.sync += core.cycles_pos.eq(core.cycles_pos + 1)
    vars(ctx).update(start_ef=start_ef, start_wf=start_wf, cq=cq, pf_q=pf_q, pf_hit=pf_hit, holding=holding,
                     in_pos=in_pos)


def load_op(m: Module, ctx) -> None:
    """Load the op the ROM reads (pc in FETCH, pc + 1 otherwise) and go to DISPATCH."""
    m.d.sync += [ctx.op.eq(ctx.rom_data), ctx.col_cnt.eq(0), ctx.col_done.eq(0)]
    m.next = "DISPATCH"


def advance(m: Module, ctx) -> None:
    """The op's last cycle: the next op is loaded from the ROM (read at pc + 1) right away."""
    m.d.sync += ctx.pc.eq(ctx.pc + 1)
    load_op(m, ctx)


def pld_request(m: Module, ctx, start) -> None:
    """A PLD's copy requested from the weight store's stream reader (``start``: its first store beat); once
    taken it runs in the background (the PRF writer) and the op ends."""
    mac, op = ctx.mac, ctx.op
    m.d.comb += [mac.r_cmd.valid.eq(1), mac.r_cmd.payload.start.eq(start), mac.r_cmd.payload.count.eq(op.nbeats)]
    with m.If(mac.r_cmd.ready):
        m.d.sync += [ctx.pld_busy.eq(1), ctx.pld_prf.eq(op.prf), ctx.pld_cnt.eq(0)]
        advance(m, ctx)


def dispatch_states(m: Module, ctx) -> None:
    """FETCH (a position's first op) and DISPATCH (start the loaded op once nothing holds it)."""
    in_pos, fetching, holding, pld_busy, is_op = ctx.in_pos, ctx.fetching, ctx.holding, ctx.pld_busy, ctx.is_op
    col_target, op, head, fetch, lw, pf_hit = ctx.col_target, ctx.op, ctx.head, ctx.fetch, ctx.lw, ctx.pf_hit
    res_pending, src_queued, dst_queued, mvq_n = ctx.res_pending, ctx.src_queued, ctx.dst_queued, ctx.mvq_n
    dq, pf_q, start_wf, start_ef = ctx.dq, ctx.pf_q, ctx.start_wf, ctx.start_ef
    with m.State("FETCH"):               # the first op of a position
        m.d.comb += [in_pos.eq(1), fetching.eq(1)]
        load_op(m, ctx)
    with m.State("DISPATCH"):
        m.d.comb += [in_pos.eq(1), holding.eq(1)]
        # a PLD still copying holds up the next PLD and the PRF readers
        pld_hold = pld_busy & (is_op(Opc.PLD) | Cat(*[is_op(c) for c in PRF_READERS]).any())
        m.d.sync += col_target.eq(Mux(is_op(Opc.KDA), Mux(op.last, op.n_out, 0), op.n))
        feeds_only = (is_op(Opc.MV) & ~head | is_op(Opc.ROUTE)
                      | (is_op(Opc.KDA) | is_op(Opc.MLA)) & ~op.last)     # no VRF writes of its own
        writes_vrf = (is_op(Opc.RMS) | is_op(Opc.MIX) | is_op(Opc.EW) | is_op(Opc.COMB)
                      | (is_op(Opc.KDA) | is_op(Opc.MLA)) & op.last)
        needs_desc = is_op(Opc.MV) | is_op(Opc.PLD)
        # EMB waits for its row (fetched after the last position's argmax), the LM head for the last
        # position's logits to have left the logits writer
        io_hold = is_op(Opc.EMB) & ~fetch.valid | is_op(Opc.MV) & head & ~lw.drained
        # COMB waits for the router's weights (ROUTE ends with its experts)
        io_hold |= is_op(Opc.COMB) & ctx.route_w
        with m.If(~pld_hold & ~io_hold & (pf_hit | ~needs_desc) & ~(res_pending & ~is_op(Opc.PLD))
                  & ((is_op(Opc.MV) & op.keep) | is_op(Opc.PLD) | (feeds_only & ~src_queued)
                     | (writes_vrf & ~src_queued & ~dst_queued) | (mvq_n == 0))):
            m.d.comb += holding.eq(0)
            m.d.sync += [dq[k].eq(pf_q[k]) for k in range(3)]
            with m.Switch(op.opc):
                with m.Case(Opc.EMB):
                    m.next = "EMB_W"
                with m.Case(Opc.MV):
                    with m.If(op.keep):
                        m.next = "MV_CMD"
                    with m.Else():            # the block exponent of the slot, then its words
                        m.d.comb += [ctx.minp.load.eq(1), start_wf.eq(1)]
                        m.next = "MV_CONV"
                with m.Case(Opc.PLD):         # requested at once (its records are in pf_q), else in PLD_REQ
                    m.next = "PLD_REQ"
                    pld_request(m, ctx, pf_q[0])
                with m.Case(Opc.RMS, Opc.MIX, Opc.EW, Opc.ROUTE, Opc.COMB, Opc.KDA):
                    m.d.comb += start_ef.eq(1)
                    m.next = "ELEM"
                with m.Case(Opc.MLA):
                    m.d.comb += start_wf.eq(1)
                    m.next = "MLA"
                with m.Case(Opc.END):
                    m.next = "END"


def op_states(m: Module, ctx) -> None:
    """Each op's states after DISPATCH: PLD, EMB, MV (convert, command; the LM head's output),
    element ops, MLA, and END (the argmax word; the next position or the status word)."""
    in_pos, dq, op = ctx.in_pos, ctx.dq, ctx.op
    emb_we, fetch, col_cnt, emb_word = ctx.emb_we, ctx.fetch, ctx.col_cnt, ctx.emb_word
    cfg, L, minp, wf, cq, mvq_n = ctx.cfg, ctx.L, ctx.minp, ctx.wf, ctx.cq, ctx.mvq_n
    head, lw, mvq_push, mo, ef = ctx.head, ctx.lw, ctx.mvq_push, ctx.mo, ctx.ef
    col_done, col_last = ctx.col_done, ctx.col_last
    col_target, is_op, h, pos, seq_wr, wr = ctx.col_target, ctx.is_op, ctx.h, ctx.pos, ctx.seq_wr, ctx.wr
    end_taken, row_addr, pc, seq_len = ctx.end_taken, ctx.row_addr, ctx.pc, ctx.seq_len
    status_word = ctx.status_word
    # ---- PLD ---------------------------------------------------------------------------
    with m.State("PLD_REQ"):
        m.d.comb += in_pos.eq(1)
        pld_request(m, ctx, dq[0])

    # ---- EMB ---------------------------------------------------------------------------
    with m.State("EMB_W"):           # the fetched row, dequantised, one VRF word a cycle
        m.d.comb += [in_pos.eq(1), emb_we.eq(1), fetch.word_idx.eq(col_cnt), emb_word.eq(fetch.word)]
        m.d.sync += col_cnt.eq(col_cnt + 1)
        with m.If(col_cnt == (cfg.d_model // L) - 1):
            advance(m, ctx)

    # ---- MV ----------------------------------------------------------------------------
    def push_command() -> None:
        """The MV's command into the FIFO if it has room: the LM head's results follow, another MV ends."""
        m.d.comb += cq.w_en.eq(cq.w_rdy & (mvq_n != MV_QUEUE))
        with m.If(cq.w_en):
            with m.If(head):
                m.d.comb += lw.start.eq(1)
                m.next = "MV_OUT"
            with m.Else():
                m.d.comb += mvq_push.eq(1)
                advance(m, ctx)

    with m.State("MV_CONV"):          # the activations are in the array: the command, now or in MV_CMD
        m.d.comb += in_pos.eq(1)
        with m.If(~wf.busy & ~minp.o.valid):
            m.next = "MV_CMD"
            push_command()
    with m.State("MV_CMD"):
        m.d.comb += in_pos.eq(1)
        push_command()
    with m.State("MV_OUT"):           # the LM head: its results into the logits writer (argmax, memory)
        m.d.comb += [in_pos.eq(1), lw.i.valid.eq(mo.valid), mo.ready.eq(lw.i.ready)]
        with m.If(mo.valid & lw.i.ready & mo.payload.last):
            advance(m, ctx)

    # ---- element ops: an op that collects results ends in the cycle of its last one ----------------
    with m.State("ELEM"):
        m.d.comb += in_pos.eq(1)
        with m.If(~ef.busy & (col_done | col_last | (col_target == 0) & ~is_op(Opc.ROUTE))):
            advance(m, ctx)
    with m.State("MLA"):
        m.d.comb += in_pos.eq(1)
        with m.If(~wf.busy & (col_done | col_last | ~op.last)):
            advance(m, ctx)

    # ---- end of a position -----------------------------------------------------------------
    # The argmax word goes out ahead of the logits beats still in the writer; the next position's
    # fetch starts in the cycle the memory engine takes it (its reads follow the write, SPEC §3). In
    # generate mode (header word 32 = prompt length P > 0, nano_k3/image.py WORD_PROMPT_LEN) a position
    # t + 1 >= P takes this argmax as its token: TOKEN writes it into the token array first, and the
    # fetch starts when that write is taken.
    gen_next = Signal()
    m.d.comb += gen_next.eq((h.prompt_len != 0) & (pos + 1 >= h.prompt_len) & (pos + 1 != seq_len))

    def next_position() -> None:
        """Once ``end_taken``: the next position, or the status word after the last."""
        with m.If(end_taken):
            m.d.sync += [pos.eq(pos + 1), row_addr.eq(row_addr + logits_stride(cfg)), pc.eq(0)]
            with m.If(pos + 1 == seq_len):
                m.d.sync += status_word.eq(STATUS_DONE)
                m.next = "STATUS"
            with m.Else():
                m.next = "FETCH"

    def write_word(beat, slot, value) -> None:
        """One 32-bit word into slot ``slot`` of the 16-byte beat at byte address ``beat`` << 4."""
        m.d.comb += [seq_wr.eq(1), wr.valid.eq(1), wr.payload.addr.eq(Cat(Const(0, 4), beat)),
                     wr.payload.data.eq(value.as_unsigned() << (slot * 32)),
                     wr.payload.strb.eq(Const(0xF, 16) << (slot * 4))]

    with m.State("END"):
        m.d.comb += in_pos.eq(1)
        am_beat = Signal(ADDR_BITS - 4)
        m.d.comb += am_beat.eq((h.argmax_addr + (pos << 2))[4:])
        with m.If(lw.argmax_valid):
            write_word(am_beat, pos[:2], lw.argmax)
            with m.If(wr.ready & gen_next):
                m.next = "TOKEN"
            with m.Else():
                m.d.comb += end_taken.eq(wr.ready)
                next_position()
    with m.State("TOKEN"):
        m.d.comb += in_pos.eq(1)
        next_pos = Signal.like(pos)
        tok_beat = Signal(ADDR_BITS - 4)
        m.d.comb += [next_pos.eq(pos + 1), tok_beat.eq((h.tokens_addr + (next_pos << 2))[4:])]
        write_word(tok_beat, next_pos[:2], lw.argmax)
        m.d.comb += end_taken.eq(wr.ready)
        next_position()
