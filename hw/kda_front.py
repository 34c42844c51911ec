"""KDA front end: the engine's SRAMs and the ingest pipeline (one input transfer a cycle: conv window from
the history SRAM, taps, Sigmoid / kda_decay, SiLU, into the row buffer and gate SRAMs; beta registers; the
per-head sums of q^2 and k^2). Adds its logic to the engine's module (hw/kda_engine.py, stages E1..E13)."""
from __future__ import annotations

from amaranth.hdl import Cat, ClockSignal, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib.data import ArrayLayout, StructLayout

from hw.kda_params import A_FRAC, PARAM_BITS, TAP_FRAC, Sel, byte_width, in_layout, pack
from hw.lib.lut import Sigmoid, decay_table_input
from hw.lib.pipe import clamp, delay, eq_const, round_shift_const
from nano_k3.fxp_ops import ALPHA, UNIT, P, S, X


# Row stages of the row pipeline's write-backs (hw/kda_state.py; it reads the state row and the row
# buffer word at stage 0): the state row S', S'' and, in pass 1, k_hat / q_hat into the row buffer.
STATE_WB, HATS_WB = 4, 4


def _ports(name: str, aw: int, width: int) -> dict:
    return {n: Signal(w, name=f"{name}_{n}") for n, w in (
        ("we", 1), ("waddr", aw), ("wdata", width), ("wstrb", width // 8), ("re", 1), ("raddr", aw),
        ("rdata", width))}


def msh_sram(m: Module, name: str, depth: int, width: int) -> dict:
    """An msh_sram (SPEC §5) of at least 2 words in ``m``; returns its ports by name (we, waddr, ..., rdata)."""
    depth = max(2, depth)
    aw = (depth - 1).bit_length()
    ports = _ports(name, aw, width)
    m.submodules[name] = Instance(
        "msh_sram", p_DEPTH=depth, p_WIDTH=width, p_ADDRW=aw, i_clk=ClockSignal(),
        i_we=ports["we"], i_waddr=ports["waddr"], i_wdata=ports["wdata"], i_wstrb=ports["wstrb"],
        i_re=ports["re"], i_raddr=ports["raddr"], o_rdata=ports["rdata"])
    return ports


def banked_sram(m: Module, name: str, depth: int, width: int, stride: int) -> dict:
    """One array of ``depth`` words as two msh_srams ``<name>0`` / ``<name>1`` of depth / 2 (the same bits,
    SPEC §5), with msh_sram's ports. Address bit b, the lowest set bit of ``stride``, picks the bank: a
    read of address a + stride (any a) in the cycle that writes a always uses the other bank, as
    fakeram45 needs (one port: flow/orfs_storage.py drops a read issued beside a write). ``rdata`` comes from
    the bank of the last read, so it holds between reads as msh_sram's does."""
    if not isinstance(stride, int) or stride < 1:
        raise ValueError(f"{name}: stride must be a positive integer, got {stride!r}")
    b = (stride & -stride).bit_length() - 1
    if depth < 4 or depth % (2 << b):
        raise ValueError(f"{name}: depth {depth} cannot be banked on address bit {b} (stride {stride}): it must "
                         f"be a multiple of {2 << b} and at least 4")
    aw = (depth - 1).bit_length()
    ports = _ports(name, aw, width)
    banks = [msh_sram(m, f"{name}{k}", depth // 2, width) for k in range(2)]
    inner = lambda a: Cat(a[:b], a[b + 1:])                  # noqa: E731  the address within a bank
    for k, bank in enumerate(banks):
        m.d.comb += [bank["we"].eq(ports["we"] & (ports["waddr"][b] == k)), bank["waddr"].eq(inner(ports["waddr"])),
                     bank["wdata"].eq(ports["wdata"]), bank["wstrb"].eq(ports["wstrb"]),
                     bank["re"].eq(ports["re"] & (ports["raddr"][b] == k)), bank["raddr"].eq(inner(ports["raddr"]))]
    rbank = Signal(name=f"{name}_rbank")
    with m.If(ports["re"]):
        m.d.sync += rbank.eq(ports["raddr"][b])
    m.d.comb += ports["rdata"].eq(Mux(rbank, banks[1]["rdata"], banks[0]["rdata"]))
    return ports


def byte_fields(spec: dict) -> tuple[dict, int]:
    """Fields of a word, LSB first: ({name: (offset, width)}, word width)."""
    off, o = {}, 0
    for name, w in spec.items():
        off[name] = (o, w)
        o += w
    return off, o


def field_strb(off: dict, *names) -> int:
    """The byte-strobe mask of fields ``names``."""
    return sum(1 << b for n in names for b in range(off[n][0] // 8, (off[n][0] + off[n][1]) // 8))


def field_of(word, off: dict, name: str, bits: int, sgn: bool = True):
    """The low ``bits`` of field ``name`` of ``word`` (signed unless ``sgn`` is False)."""
    v = word[off[name][0]:off[name][0] + bits]
    return v.as_signed() if sgn else v


def every_lane(lanes: int, mask: int, w: int) -> int:
    """A byte-strobe mask of one lane's field, repeated in every lane of a w-bit-per-lane word."""
    return sum(mask << (k * w // 8) for k in range(lanes))


def storage(m: Module, ctx) -> None:
    """The state, history, row buffer and gate SRAMs (every array an msh_sram, SPEC §5) and their word
    layouts."""
    dh, L, K, p, H, Pw = ctx.dh, ctx.L, ctx.K, ctx.p, ctx.H, ctx.Pw
    # row buffer and gate SRAM words hold the L indices of one transfer, lane k at bits [k w, (k + 1) w)
    st_w = byte_width(dh * S.bits)
    hi_w = byte_width(L * (K - 1) * X.bits)
    fq = byte_width(max(X.bits, UNIT.bits))
    bf_off, bf_w = byte_fields({"k": fq, "v": byte_width(X.bits), "alpha": byte_width(ALPHA.bits)})
    gt_off, gt_w = byte_fields({"sigz": byte_width(P.bits), "w": PARAM_BITS})
    # Banked where a write and a read meet in one cycle: the row pipeline writes row r back while it reads
    # row r + STATE_WB (state) or r + HATS_WB (row buffer, L rows a word: HATS_WB / L words on); the
    # ingest writes a history word while it reads the next transfer's, the next address. q has an SRAM of its
    # own: its ingest may overlap the first pass (which writes k_hat into the row buffer), its reads (the
    # second pass) wait for every q.
    st = banked_sram(m, "kda_state_sram", p.max_layers * H * dh, st_w, STATE_WB)      # state rows
    hs = banked_sram(m, "kda_hist_sram", p.max_layers * 3 * Pw // L, hi_w, 1)        # conv histories (K-1 inputs)
    bf = banked_sram(m, "kda_buf_sram", Pw // L, L * bf_w, HATS_WB // L)     # k (then k_hat), v, alpha
    qb = msh_sram(m, "kda_q_sram", Pw // L, L * byte_width(X.bits))          # q
    gt = msh_sram(m, "kda_gate_sram", Pw // L, L * gt_w)                     # sigmoid(z), w (output pipeline)
    vars(ctx).update(st_w=st_w, hi_w=hi_w, fq=fq, bf_off=bf_off, bf_w=bf_w, gt_off=gt_off, gt_w=gt_w, st=st, hs=hs,
                     bf=bf, qb=qb, gt=gt)


def ingest(m: Module, ctx) -> None:
    """Stages E1..E13: the ingest pipeline (never stalls) into the history, row buffer and gate SRAMs and
    the beta registers; the per-head sums of squares for the L2 norms."""
    hs, ip, Pw, L, lg_l, take, p, hi_w = ctx.hs, ctx.ip, ctx.Pw, ctx.L, ctx.lg_l, ctx.take, ctx.p, ctx.hi_w
    one, dec, K, sig, bf_w, gt_w, fq = ctx.one, ctx.dec, ctx.K, ctx.sig, ctx.bf_w, ctx.gt_w, ctx.fq
    bf_off, H, beta, gt, in_done, core, ssq = ctx.bf_off, ctx.H, ctx.beta, ctx.gt, ctx.in_done, ctx.core, ctx.ssq
    ssk, qb = ctx.ssk, ctx.qb
    hist_addr = Signal.like(hs["raddr"])
    m.d.comb += [hist_addr.eq((ip.layer * 3 + Mux(ip.sel > Sel.V, 0, ip.sel)) * (Pw // L) + ip.idx[lg_l:]),
                 hs["re"].eq(take), hs["raddr"].eq(hist_addr)]
    xfer1_valid, xfer1, xfer1_hist_addr = Signal(), Signal(in_layout(p)), Signal.like(hist_addr)
    m.d.sync += [xfer1_valid.eq(take), xfer1.eq(ip), xfer1_hist_addr.eq(hist_addr)]
    hword = Signal(hi_w)
    m.d.comb += hword.eq(Mux(xfer1.restart, 0, hs["rdata"]))
    # side band of a transfer from E1 to the SRAM writes
    sb_layout = StructLayout({"v": 1, "sel": unsigned(3), "idx": len(ip.idx),
                              "w": ArrayLayout(signed(PARAM_BITS), L), "last": 1})
    sb1 = Signal(sb_layout)
    m.d.comb += [sb1.v.eq(xfer1_valid), sb1.sel.eq(xfer1.sel), sb1.idx.eq(xfer1.idx), sb1.w.eq(xfer1.w), sb1.last.eq(xfer1.last)]
    sb3 = delay(m, one, sb1, 2, "sb")
    sb4 = delay(m, one, sb3, 1, "sb3")
    sb9 = delay(m, one, sb4, Sigmoid.LATENCY, "sb4")
    sb11 = delay(m, one, sb9, 2, "sb9")
    dt = dec.lut

    def ingest_lane(k):
        """E1 .. E11 of lane k: returns its history window (K inputs), SiLU(conv) and table output."""
        window = [hword.word_select(k * (K - 1) + j, X.bits).as_signed() for j in range(K - 1)] + [xfer1.data[k]]
        # E2: conv products, f + dtb in X
        prod_w = X.bits + PARAM_BITS
        conv_prod2 = [Signal(signed(prod_w), name=f"conv_p{j}_{k}") for j in range(K)]
        f_dtb2, head_a2 = Signal(signed(X.bits + 2), name=f"f_dtb2_{k}"), Signal(unsigned(PARAM_BITS), name=f"head_a2_{k}")
        data2 = Signal(signed(X.bits), name=f"data2_{k}")
        m.d.sync += [*(conv_prod2[j].eq(window[j] * xfer1.taps[k * K + j]) for j in range(K)),
                     f_dtb2.eq(xfer1.data[k] + (xfer1.dtb[k] << (X.frac - TAP_FRAC))), head_a2.eq(xfer1.a[k]), data2.eq(xfer1.data[k])]
        # E3: conv sum; (f + dtb) A
        conv_sum3 = Signal(signed(prod_w + K.bit_length()), name=f"conv_sum3_{k}")
        decay_g3 = Signal(signed(X.bits + 3 + PARAM_BITS), name=f"decay_g3_{k}")
        data3 = Signal(signed(X.bits), name=f"data3_{k}")
        m.d.sync += [conv_sum3.eq(sum(conv_prod2[1:], conv_prod2[0])), decay_g3.eq(f_dtb2 * head_a2), data3.eq(data2)]
        # E4: into X: conv -> X.fit(frac + TAP_FRAC), F -> X.fit(frac + A_FRAC), B and Z as they are
        lut_x4 = Signal(signed(X.bits), name=f"lut_x4_{k}")
        m.d.sync += lut_x4.eq(Mux(sb3.sel <= Sel.V, clamp(round_shift_const(conv_sum3, TAP_FRAC), X.lo, X.hi),
                              Mux(sb3.sel == Sel.F, clamp(round_shift_const(decay_g3, A_FRAC), X.lo, X.hi), data3)))
        # E4 -> E9: sigmoid(x); kda_decay(x) one cycle later (E5 clamp, E6 table index), so both land at E9
        u5 = Signal(dt.index_bits + dt.interp_bits, name=f"decay_u5_{k}")
        m.d.comb += [sig[k].i.x.eq(lut_x4), sig[k].i_valid.eq(sb4.v),
                     u5.eq(decay_table_input(delay(m, one, lut_x4, 1, f"xg_{k}")))]
        m.d.sync += [dec.i[k].idx.eq(u5[dt.interp_bits:]), dec.i[k].r.eq(u5[:dt.interp_bits])]
        x9 = delay(m, one, lut_x4, Sigmoid.LATENCY, f"xs_{k}")
        # E10: SiLU product; table output by selector. E11: SiLU rounded to X
        silu10 = Signal(signed(X.bits + P.bits + 1), name=f"silu10_{k}")
        lut_y10 = Signal(P.bits, name=f"lut_y10_{k}")
        m.d.sync += [silu10.eq(x9 * sig[k].o.y), lut_y10.eq(Mux(sb9.sel == Sel.F, dec.o[k], sig[k].o.y))]
        conv_x11 = Signal(signed(X.bits), name=f"conv_x11_{k}")
        m.d.sync += conv_x11.eq(clamp(round_shift_const(silu10, P.frac), X.lo, X.hi))
        return window, conv_x11, delay(m, one, lut_y10, 1, f"lut_y10_{k}")

    windows, conv_x11, y11 = zip(*(ingest_lane(k) for k in range(L)))
    m.d.comb += [hs["we"].eq(xfer1_valid & (xfer1.sel <= Sel.V)), hs["waddr"].eq(xfer1_hist_addr),
                 hs["wdata"].eq(pack(*((w, X.bits) for win in windows for w in win[1:]))),
                 hs["wstrb"].eq((1 << (hi_w // 8)) - 1)]
    # E11: SRAM / register writes
    bword, gword = Signal(L * bf_w), Signal(L * gt_w)
    m.d.comb += [bword.eq(Cat(*(pack((conv_x11[k], fq), (conv_x11[k], byte_width(X.bits)),
                                      (y11[k], byte_width(ALPHA.bits))) for k in range(L)))),
                 gword.eq(Cat(*(pack((y11[k], byte_width(P.bits)), (sb11.w[k], PARAM_BITS)) for k in range(L))))]
    ing_we = sb11.v & ((sb11.sel == Sel.K) | (sb11.sel == Sel.V) | (sb11.sel == Sel.F))
    ing_strb = Mux(sb11.sel == Sel.K, every_lane(L, field_strb(bf_off, "k"), bf_w),
                   Mux(sb11.sel == Sel.V, every_lane(L, field_strb(bf_off, "v"), bf_w),
                       every_lane(L, field_strb(bf_off, "alpha"), bf_w)))
    m.d.comb += [qb["we"].eq(sb11.v & eq_const(sb11.sel, Sel.Q)), qb["waddr"].eq(sb11.idx[lg_l:]),
                 qb["wdata"].eq(Cat(*(pack((conv_x11[k], byte_width(X.bits))) for k in range(L)))),
                 qb["wstrb"].eq((1 << (L * byte_width(X.bits) // 8)) - 1)]
    for k in range(L):
        with m.If(sb11.v & (sb11.sel == Sel.B) & (sb11.idx + k < H)):
            m.d.sync += beta[sb11.idx + k].eq(y11[k])
    m.d.comb += [gt["we"].eq(sb11.v & (sb11.sel == Sel.Z)), gt["waddr"].eq(sb11.idx[lg_l:]), gt["wdata"].eq(gword),
                 gt["wstrb"].eq((1 << (L * gt_w // 8)) - 1)]
    with m.If(sb11.v & sb11.last):
        m.d.sync += in_done.eq(1)
    # E12: squares for the L2 norms; E13: per-head sums (the lanes of a transfer are in one head)
    l2_sq12 = [Signal(unsigned(2 * X.bits), name=f"l2_sq12_{k}") for k in range(L)]
    m.d.sync += [l2_sq12[k].eq(conv_x11[k] * conv_x11[k]) for k in range(L)]
    sb12 = delay(m, one, sb11, 1, "sb11")
    h12 = sb12.idx >> core.lg_dh
    clear_ss = Signal()
    with m.If(clear_ss):
        m.d.sync += [s.eq(0) for s in (*ssq, *ssk)]
    with m.Elif(sb12.v & eq_const(sb12.sel, Sel.Q)):
        m.d.sync += ssq[h12].eq(ssq[h12] + sum(l2_sq12))
    with m.Elif(sb12.v & (sb12.sel == Sel.K)):
        m.d.sync += ssk[h12].eq(ssk[h12] + sum(l2_sq12))
    vars(ctx).update(sb11=sb11, bword=bword, ing_we=ing_we, ing_strb=ing_strb, clear_ss=clear_ss)
