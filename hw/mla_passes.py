"""MLA engine datapath: the controller (load of q, k, v; the score and context passes' issue), the lane
multipliers, the score pass (q.k, scaling into T, the t buffers and the running max), the context pass
(e = 2^(t - max), sum e, e.v accumulators, holding registers), recip(sum e), the normalisation and the
output. These functions add their logic to the engine's module (hw/mla_engine.py describes the engine)."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib.data import ArrayLayout, StructLayout

from hw.lib.lut import ApplyMant, Exp2Neg, Recip
from hw.lib.lut_rom import port_of, shared_rom
from hw.lib.pipe import clamp, delay, round_shift_const
from hw.mla_params import LANE_MUL_LATENCY, NUM_FRAC
from nano_k3.fxp_ops import P, T, X


def _adder_tree(m: Module, level: list, bits: int, name: str):
    """Sum of ``level`` in ``bits``-wide registers, two adder levels (four terms) per register;
    returns (sum, registers deep)."""
    depth = 0
    while len(level) > 1:
        nxt = []
        for g0 in range(0, len(level), 4):
            grp = level[g0:g0 + 4]
            total = Signal(signed(bits), name=f"{name}_{len(level)}_{g0}")
            m.d.sync += total.eq(sum(grp[1:], grp[0]))
            nxt.append(total)
        level, depth = nxt, depth + 1
    return level[0], depth


def controller(m: Module, ctx) -> None:
    """The load of a position's q (into the q buffers) and k / v (into cache row t), the compute counters
    and the controller's states QC .. CTX_OUT, with the score / context issue flags ``ctx.s_iss`` / ``ctx.c_iss``."""
    p, wb, core, XB, L, lg, banks, qbufs = ctx.p, ctx.wb, ctx.core, ctx.XB, ctx.L, ctx.lg, ctx.banks, ctx.qbufs
    seq, tbufs, wk, row, kr_row, head, H = ctx.seq, ctx.tbufs, ctx.wk, ctx.row, ctx.kr_row, ctx.head, ctx.H
    dk, dr, wr, t_r, dv, wv, wq, ws = ctx.dk, ctx.dr, ctx.wr, ctx.t_r, ctx.dv, ctx.wv, ctx.wq, ctx.ws
    h, w = Signal(p.dim_bits), Signal(wb)   # head and word-in-segment counters (load, ctx chunk, output)
    seg_d, seg_w = Signal(p.dim_bits), Signal(wb)
    seg_end = Signal()
    take = Signal()
    m.d.comb += [take.eq(core.i.valid & core.i.ready), seg_end.eq(w == seg_w - 1)]
    masked = Signal(ArrayLayout(signed(XB), L))
    for k in range(L):
        m.d.comb += masked[k].eq(Mux(((w << lg) + k) < seg_d, core.i.payload.data[k], 0))
    m.d.comb += [s.w_data.eq(masked.as_value()) for s in banks + qbufs]

    # ---------------- compute counters ---------------------------------------------------------
    j = Signal(seq)
    n = Signal(wb)                          # cycle within a position of the score pass
    mode_ctx = Signal()                     # context pass: multiplier A = e (else q), bank reads trail t reads

    # Score-pass issue flags and context-pass issue flags.
    s_iss = Signal(StructLayout({"v": 1, "first": 1, "last": 1, "kr": 1, "jlast": 1, "j": seq}))
    chunk = unsigned(max(1, (p.words(p.max_dv) - 1).bit_length()))      # a context chunk index
    c_iss = Signal(StructLayout({"v": 1, "first": 1, "last": 1, "w": chunk}))
    m.d.comb += [q.r_addr.eq(n) for q in qbufs] + [q.r_en.eq(s_iss.v) for q in qbufs]
    m.d.comb += [tb.r_addr.eq(j) for tb in tbufs] + [tb.r_en.eq(c_iss.v) for tb in tbufs]
    s_addr = Mux(n < wk, row(j) + n, kr_row(j) + n - wk)
    for k, b in enumerate(banks):           # the kr words come from bank 0 alone
        m.d.comb += [b.r_en.eq(s_iss.v & ~s_iss.kr if k else s_iss.v), b.r_addr.eq(s_addr)]

    score_done = Signal()
    c_end = Signal(wb)                      # the chunk's last cycle in CTX
    last_r = Signal()                       # o holds the final beat of the position
    o_h = Signal(head)                      # the head whose q buffer o reads
    o_end = Signal()                        # the final beat of the position is taken
    m.d.comb += o_end.eq(core.o.valid & core.o.ready & last_r)

    # The controller: a state register with one If per state (no casez over an FSM register, so
    # the generated Verilog lints clean without CASEINCOMPLETE waivers).
    states = ("QC", "QR", "KC", "KR", "V", "SCORE", "SCORE_DRAIN", "CTX", "CTX_OUT")
    code = {name: k + 1 for k, name in enumerate(states)}     # no state 0: `state == 0` lints as `!state`
    state = Signal(range(len(states) + 1), init=code["QC"])

    def in_state(name):
        return m.If(state == code[name])

    def _goto(name):
        m.d.sync += state.eq(code[name])

    def load_state(name, d, words, srams, addr, nxt, after_last_head=None):
        """Take a segment of ``words`` beats (elements from ``d`` on masked) into srams[h] at ``addr``;
        then ``nxt``, or for a segment per head: the next head and ``nxt``, ``after_last_head`` after H-1."""
        with in_state(name):
            m.d.comb += [core.i.ready.eq(1), core.busy.eq(1), seg_d.eq(d), seg_w.eq(words)]
            m.d.comb += [s.w_en.eq(take & (h == k)) for k, s in enumerate(srams)]
            m.d.comb += [s.w_addr.eq(addr) for s in srams]
            with m.If(take):
                m.d.sync += w.eq(w + 1)
                with m.If(seg_end):
                    m.d.sync += w.eq(0)
                    if after_last_head is None:
                        nxt()
                    else:
                        with m.If(h == H - 1):
                            m.d.sync += h.eq(0)
                            after_last_head()
                        with m.Else():
                            m.d.sync += h.eq(h + 1)
                            nxt()

    def start_scores():
        m.d.sync += mode_ctx.eq(0)
        _goto("SCORE")

    load_state("QC", dk, wk, qbufs, w, lambda: _goto("QR"))
    load_state("QR", dr, wr, qbufs, wk + w, lambda: _goto("QC"), lambda: _goto("KC"))
    load_state("KC", dk, wk, banks, row(t_r) + w, lambda: _goto("KC"), lambda: _goto("KR"))
    load_state("KR", dr, wr, banks[:1], kr_row(t_r) + w, lambda: _goto("V"))     # h is 0 here
    load_state("V", dv, wv, banks, row(t_r) + wk + w, lambda: _goto("V"), start_scores)
    with in_state("QC"):                    # the first beat of a position carries pos
        first = (h == 0) & (w == 0)
        m.d.comb += core.busy.eq(~first)
        with m.If(take & first):
            m.d.sync += t_r.eq(core.i.payload.pos)

    with in_state("SCORE"):
        # every head's q.k word n of position j per cycle: kc_h words, then the shared kr words
        m.d.comb += [core.busy.eq(1), s_iss.v.eq(n < wq), s_iss.first.eq(n == 0), s_iss.last.eq(n == wq - 1),
                     s_iss.kr.eq(n >= wk), s_iss.jlast.eq(j == t_r), s_iss.j.eq(j)]
        m.d.sync += n.eq(n + 1)
        with m.If(n == ws - 1):
            m.d.sync += [n.eq(0), j.eq(j + 1)]
            with m.If(j == t_r):
                m.d.sync += j.eq(0)
                _goto("SCORE_DRAIN")
    with in_state("SCORE_DRAIN"):
        m.d.comb += core.busy.eq(1)
        with m.If(score_done):
            m.d.sync += mode_ctx.eq(1)
            _goto("CTX")
    with in_state("CTX"):
        # every head's e_j x v_j of chunk w per cycle (n = j), then idle cycles up to c_end: the next
        # chunk's sums replace the holding registers only once this chunk's normalisation has read them
        m.d.comb += [core.busy.eq(1), c_iss.v.eq(n <= t_r), c_iss.first.eq(n == 0), c_iss.last.eq(n == t_r),
                     c_iss.w.eq(w)]
        m.d.sync += [n.eq(n + 1), j.eq(j + 1)]
        with m.If(n == c_end):
            m.d.sync += [n.eq(0), j.eq(0), w.eq(w + 1)]
            with m.If(w == wv - 1):
                m.d.sync += w.eq(0)
                _goto("CTX_OUT")
    with in_state("CTX_OUT"):
        # the last chunk is normalised while the output (below) runs; the next position once it is out
        m.d.comb += core.busy.eq(1)
        with m.If(o_end):
            _goto("QC")
    out_word = Array(q.r_data for q in qbufs)[o_h]
    m.d.comb += [core.o.payload.data.eq(out_word), core.o.payload.last.eq(last_r)]
    vars(ctx).update(w=w, j=j, mode_ctx=mode_ctx, s_iss=s_iss, chunk=chunk, c_iss=c_iss, score_done=score_done,
                     c_end=c_end, last_r=last_r, o_h=o_h, o_end=o_end)


def lane_multipliers(m: Module, ctx) -> None:
    """The context pass's bank reads (trailing the t reads by ``v_delay``), the exp2 units and every head's
    L lane multipliers (q.k in the score pass, e.v in the context pass)."""
    addr_w, row, j, wk, w, c_iss, mode_ctx = ctx.addr_w, ctx.row, ctx.j, ctx.wk, ctx.w, ctx.c_iss, ctx.mode_ctx
    banks, core, HM, p, s_iss, L, qbufs = ctx.banks, ctx.core, ctx.HM, ctx.p, ctx.s_iss, ctx.L, ctx.qbufs
    XB = ctx.XB
    # t_j read (1) -> max - t_j register (1) -> Exp2Neg (LATENCY): e_j meets v_j at the multipliers.
    v_delay = 2 + Exp2Neg.LATENCY - 1
    c_addr = Signal(addr_w)
    m.d.comb += c_addr.eq(row(j) + wk + w)
    c_rd, c_rd_addr = delay(m, 1, c_iss.v, v_delay, "c_rd"), delay(m, 1, c_addr, v_delay, "c_addr")
    with m.If(mode_ctx):
        m.d.comb += [b.r_en.eq(c_rd) for b in banks] + [b.r_addr.eq(c_rd_addr) for b in banks]

    # ---------------- lane multipliers, one set per head -------------------------------------------
    # exp2 tables: the given shared-ROM ports first, then one msh_rom owned here per two heads.
    exp2_ports = [port_of(core.roms, "exp2", k) for k in range(HM)]
    own = [k for k, port in enumerate(exp2_ports) if port is None]
    for r in range(0, len(own), 2):
        for k, port in zip(own[r:r + 2], shared_rom(m, "exp2", core.rom_dir, f"exp2_rom_{r // 2}")):
            exp2_ports[k] = port
    exp2 = [Exp2Neg(t_bits=p.dt_bits, rom_dir=core.rom_dir, port=port) for port in exp2_ports]
    for k, e in enumerate(exp2):
        m.submodules[f"exp2_{k}"] = e
    rd_flags = Signal.like(s_iss)
    m.d.sync += rd_flags.eq(s_iss)        # travels with the SRAM read data
    # LANE_MUL_LATENCY stages: operand registers (the pass select's fan-out to every lane and the SRAM
    # read data's wires stay out of the multiply), the two half products a x b_lo and a x b_hi, their sum.
    mul_flags = delay(m, 1, rd_flags, LANE_MUL_LATENCY, "mul_flags")    # travels with prod
    half = XB // 2
    prod = [[Signal(signed(p.prod_bits), name=f"prod_{hd}_{k}") for k in range(L)] for hd in range(HM)]
    for hd in range(HM):
        q_word = qbufs[hd].r_data[:L * XB]
        k_word = Mux(rd_flags.kr, banks[0].r_data, banks[hd].r_data)[:L * XB] if hd else banks[0].r_data[:L * XB]
        for k in range(L):
            a = Signal(signed(p.mul_a_bits), name=f"op_a_{hd}_{k}")
            b = Signal(signed(XB), name=f"op_b_{hd}_{k}")
            m.d.sync += [a.eq(Mux(mode_ctx, exp2[hd].o.y, q_word[k * XB:(k + 1) * XB].as_signed())),
                         b.eq(k_word[k * XB:(k + 1) * XB].as_signed())]
            lo = Signal(signed(p.mul_a_bits + half), name=f"prod_lo_{hd}_{k}")
            hi = Signal(signed(p.mul_a_bits + XB - half), name=f"prod_hi_{hd}_{k}")
            m.d.sync += [lo.eq(a * b[:half]), hi.eq(a * b[half:].as_signed())]
            m.d.sync += prod[hd][k].eq(lo + (hi << half))
    vars(ctx).update(v_delay=v_delay, exp2=exp2, mul_flags=mul_flags, prod=prod)


def score_pass(m: Module, ctx) -> None:
    """Score pass: the word dots summed per position, scaled into T (shared by the heads, one a cycle),
    written to the t buffers with each head's running max."""
    s_iss, mul_flags, prod, p, HM, XB, seq = ctx.s_iss, ctx.mul_flags, ctx.prod, ctx.p, ctx.HM, ctx.XB, ctx.seq
    head_by_head, c_r, tbufs, score_done, H = ctx.head_by_head, ctx.c_r, ctx.tbufs, ctx.score_done, ctx.H
    word_dots, depth = zip(*(_adder_tree(m, prod[hd], p.dot_bits, f"tree_{hd}") for hd in range(HM)))
    dot_flags = delay(m, 1, mul_flags, depth[0], "dot_flags")        # travels with the word dots
    dots = [Signal(signed(p.dot_bits), name=f"dot_{hd}") for hd in range(HM)]
    with m.If(dot_flags.v):
        m.d.sync += [dots[hd].eq(Mux(dot_flags.first, 0, dots[hd]) + word_dots[hd]) for hd in range(HM)]
    score_flags = Signal.like(s_iss)
    m.d.sync += score_flags.eq(dot_flags)
    # score = X.fit(dot, X.frac): round half up, saturate; held ws >= H cycles for the shared scaling
    fin = Signal()
    m.d.comb += fin.eq(score_flags.v & score_flags.last)
    scores = [Signal(signed(XB), name=f"score_{hd}") for hd in range(HM)]
    score_pos, score_pos_last = Signal(seq), Signal()
    with m.If(fin):
        m.d.sync += [scores[hd].eq(clamp(round_shift_const(dots[hd], X.frac), X.lo, X.hi)) for hd in range(HM)]
        m.d.sync += [score_pos.eq(score_flags.j), score_pos_last.eq(score_flags.jlast)]
    sh, sv = head_by_head(fin, "scale")
    # t = T.fit(score * c, X.frac + C_FRAC): the multiply alone, then round + saturate
    scaled_score = Signal(signed(p.score_t_bits))
    scaled_valid, scaled_head, scaled_pos, scaled_pos_last = Signal(), Signal.like(sh), Signal(seq), Signal()
    m.d.sync += [scaled_valid.eq(sv), scaled_head.eq(sh), scaled_pos.eq(score_pos), scaled_pos_last.eq(score_pos_last), scaled_score.eq(Array(scores)[sh] * c_r)]
    t_val = Signal(signed(T.bits))
    t_valid, t_head, t_pos, t_pos_last = Signal(), Signal.like(sh), Signal(seq), Signal()
    m.d.sync += [t_valid.eq(scaled_valid), t_head.eq(scaled_head), t_pos.eq(scaled_pos), t_pos_last.eq(scaled_pos_last),
                 t_val.eq(clamp(round_shift_const(scaled_score, p.t_shift), T.lo, T.hi))]
    t_max = [Signal(signed(T.bits), name=f"t_max_{hd}") for hd in range(HM)]
    head_max = Array(t_max)[t_head]
    for hd, tb in enumerate(tbufs):
        m.d.comb += [tb.w_en.eq(t_valid & (t_head == hd)), tb.w_addr.eq(t_pos), tb.w_data.eq(t_val)]
        with m.If(t_valid & (t_head == hd)):
            m.d.sync += t_max[hd].eq(Mux((t_pos == 0) | (t_val > head_max), t_val, head_max))
    m.d.comb += score_done.eq(t_valid & t_pos_last & (t_head == H - 1))
    vars(ctx).update(t_max=t_max)


def context_pass(m: Module, ctx) -> None:
    """Context pass: dt = max − t, e = 2^−dt, sum e (chunk 0's) and the e.v accumulators; a finished chunk
    is held (rounded) so the next accumulates meanwhile."""
    v_delay, c_iss, p, HM, L, t_max, tbufs = ctx.v_delay, ctx.c_iss, ctx.p, ctx.HM, ctx.L, ctx.t_max, ctx.tbufs
    exp2, prod, chunk = ctx.exp2, ctx.prod, ctx.chunk
    n_g = v_delay + LANE_MUL_LATENCY + 2            # g[k]: flags valid at issue + k + 1
    g = [Signal.like(c_iss, name=f"cx_f_{k}") for k in range(n_g)]
    m.d.sync += [g[0].eq(c_iss)] + [g[k].eq(g[k - 1]) for k in range(1, n_g)]
    # g[v_delay] travels with e (and the v words), g[v_delay+LANE_MUL_LATENCY] with prod, the next with the sums
    ge, gp, gs = g[v_delay], g[v_delay + LANE_MUL_LATENCY], g[v_delay + LANE_MUL_LATENCY + 1]
    sum_e = [Signal(p.sum_bits, name=f"sum_e_{hd}") for hd in range(HM)]
    acc = [[Signal(signed(p.acc_bits), name=f"acc_{hd}_{k}") for k in range(L)] for hd in range(HM)]
    for hd in range(HM):
        dt = Signal(p.dt_bits, name=f"dt_{hd}")      # max - t_j >= 0
        m.d.sync += dt.eq(t_max[hd] - tbufs[hd].r_data[:T.bits].as_signed())
        m.d.comb += [exp2[hd].i.t.eq(dt), exp2[hd].i_valid.eq(g[1].v)]
        with m.If(ge.v & (ge.w == 0)):           # sum e is the same in every chunk: chunk 0's is kept
            m.d.sync += sum_e[hd].eq(Mux(ge.first, 0, sum_e[hd]) + exp2[hd].o.y)
        with m.If(gp.v):
            m.d.sync += [acc[hd][k].eq(Mux(gp.first, 0, acc[hd][k]) + prod[hd][k]) for k in range(L)]
    chunk_done = Signal()
    m.d.comb += chunk_done.eq(gs.v & gs.last)      # acc final (for one cycle if the next chunk follows)

    # ---------------- holding registers: a finished chunk, so the next one accumulates meanwhile -----
    # The numerators are held already rounded to X.frac (num_bits, not acc_bits), with their chunk index.
    held = [[Signal(signed(p.num_bits), name=f"held_{hd}_{k}") for k in range(L)] for hd in range(HM)]
    held_w = Signal(chunk)
    with m.If(chunk_done):
        m.d.sync += [held[hd][k].eq(round_shift_const(acc[hd][k], p.num_shift))
                     for hd in range(HM) for k in range(L)]
        m.d.sync += held_w.eq(gs.w)
    vars(ctx).update(gp=gp, gs=gs, sum_e=sum_e, chunk_done=chunk_done, held=held, held_w=held_w)


def normalise(m: Module, ctx) -> None:
    """recip(sum e) once per position, a head per cycle; the held numerators through norm_units ApplyMants
    into the q buffers (the chunk's ctx beats)."""
    head_by_head, gp, p, core, sum_e, HM = ctx.head_by_head, ctx.gp, ctx.p, ctx.core, ctx.sum_e, ctx.HM
    chunk_done, gs, wb, H, w, c_end, wv = ctx.chunk_done, ctx.gs, ctx.wb, ctx.H, ctx.w, ctx.c_end, ctx.wv
    t_r, XB, held, held_w, qbufs = ctx.t_r, ctx.XB, ctx.held, ctx.held_w, ctx.qbufs
    # chunk 0's sum e is final one stage before its acc, so the reciprocals start a cycle early.
    rh, rv = head_by_head(gp.v & gp.last & (gp.w == 0), "recip")
    m.submodules.recip = recip = Recip(m_bits=p.sum_bits, frac_bits=max(1, P.frac.bit_length()),
                                       rom_dir=core.rom_dir, port=port_of(core.roms, "recip"))
    m.d.comb += [recip.i.m.eq(Array(sum_e)[rh]), recip.i.frac.eq(P.frac), recip.i_valid.eq(rv)]
    ro_h = delay(m, 1, rh, Recip.LATENCY, "recip_h")      # the head of recip.o
    r_mant = [Signal(len(recip.o.mant), name=f"r_mant_{hd}") for hd in range(HM)]
    r_e = [Signal(recip.o.e.shape(), name=f"r_e_{hd}") for hd in range(HM)]
    for hd in range(HM):
        with m.If(recip.o_valid & (ro_h == hd)):
            m.d.sync += [r_mant[hd].eq(recip.o.mant), r_e[hd].eq(recip.o.e)]

    # ---------------- normalisation: apply_mant on the held numerators, norm_units lanes a cycle ------
    # Step s = head << gl | group takes lanes group*U .. group*U + U-1 of the head. Chunk 0 starts as
    # head 0's reciprocal is kept (head h's is kept by its first step, as h <= h*G); later chunks at once.
    U, G, gl = p.norm_units, p.norm_steps, p.norm_steps_log2
    ns, nv = head_by_head((recip.o_valid & (ro_h == 0)) | (chunk_done & (gs.w != 0)), "norm", gl)
    # A chunk before the last lasts (CTX) at least as long as its normalisation reads the holding
    # registers (H x G steps; chunk 0's start Recip.LATENCY later), so that the next chunk's sums
    # replace them only after the last step has read them. span, c_end: last cycle indices.
    span = Signal(wb)
    m.d.comb += [span.eq((H << gl) - 1 + Mux(w == 0, Recip.LATENCY, 0)),
                 c_end.eq(Mux((w == wv - 1) | (t_r > span), t_r, span))]
    apply = [ApplyMant(v_bits=p.num_bits, v_frac=NUM_FRAC, out_frac=X.frac, out_bits=XB,
                       e_range=p.recip_e_range, mant_bits=len(recip.o.mant)) for _ in range(U)]
    for u, am in enumerate(apply):
        m.submodules[f"apply_{u}"] = am
        lane = Array(held[hd][g * U + u] for hd in range(HM) for g in range(G))[ns]     # index = step
        m.d.comb += [am.i.v.eq(lane), am.i.mant.eq(Array(r_mant)[ns >> gl]), am.i.e.eq(Array(r_e)[ns >> gl]),
                     am.i_valid.eq(nv)]
    a_s, done = delay(m, 1, ns, ApplyMant.LATENCY, "apply_s"), apply[0].o_valid
    a_w = delay(m, 1, held_w, ApplyMant.LATENCY, "apply_w")
    # the group's U results go to every group's place in the word; the byte strobes write one group
    group_bytes = U * XB // 8
    strobe = Cat(((a_s & (G - 1)) == g).replicate(group_bytes) for g in range(G))
    for hd, q in enumerate(qbufs):                  # the chunk's ctx beat waits in the head's q buffer
        with m.If(done & ((a_s >> gl) == hd)):
            m.d.comb += [q.w_en.eq(1), q.w_addr.eq(a_w), q.w_strb.eq(strobe),
                         q.w_data.eq(Cat(am.o.y for am in apply).replicate(G))]
    vars(ctx).update(G=G, gl=gl, a_s=a_s, done=done, a_w=a_w)


def output(m: Module, ctx) -> None:
    """The ctx beats from the q buffers, head by head, each once it is written; ``o``."""
    chunk, head, done, a_s, G, a_w, gl = ctx.chunk, ctx.head, ctx.done, ctx.a_s, ctx.G, ctx.a_w, ctx.gl
    core, last_r, qbufs, o_h, H, wv, o_end = ctx.core, ctx.last_r, ctx.qbufs, ctx.o_h, ctx.H, ctx.wv, ctx.o_end
    # The normalisation completes the words chunk by chunk, in each chunk head by head; (wr_c, wr_h) is
    # the last completed word (wr_v: any of this position), so beat (rd_h, rd_w) is in its q buffer once
    # rd_w < wr_c, or rd_w == wr_c and rd_h <= wr_h. Its read is issued from the cycle after that write
    # (registered read, no read-during-write) and only when o is free or being taken.
    wr_v, wr_c, wr_h = Signal(), Signal(chunk), Signal(head)
    with m.If(done & ((a_s & (G - 1)) == G - 1)):
        m.d.sync += [wr_v.eq(1), wr_c.eq(a_w), wr_h.eq(a_s >> gl)]
    rd_h, rd_w = Signal(head), Signal(chunk)    # the next beat to read
    rd = Signal()
    m.d.comb += rd.eq(wr_v & ((rd_w < wr_c) | ((rd_w == wr_c) & (rd_h <= wr_h)))
                      & ~(core.o.valid & last_r) & (~core.o.valid | core.o.ready))
    with m.If(rd):                          # q buffer reads of the score pass are over (s_iss.v is 0)
        m.d.comb += [q.r_en.eq(rd_h == k) for k, q in enumerate(qbufs)] + [q.r_addr.eq(rd_w) for q in qbufs]
        m.d.sync += [core.o.valid.eq(1), o_h.eq(rd_h), last_r.eq((rd_h == H - 1) & (rd_w == wv - 1)),
                     rd_w.eq(rd_w + 1)]
        with m.If(rd_w == wv - 1):
            m.d.sync += [rd_w.eq(0), rd_h.eq(Mux(rd_h == H - 1, 0, rd_h + 1))]
    with m.Elif(core.o.ready):
        m.d.sync += core.o.valid.eq(0)
    with m.If(o_end):                       # the position is out: no word of the next one is written yet
        m.d.sync += wr_v.eq(0)
