"""The MLA attention engine: KV cache in msh_sram, scores, base-2 softmax and context, all heads at once.

Reference: ``nano_k3.fixed.mla_attention`` on the growing cache (FixedModel._mla), bit for bit.
The latent c = RN(h Wc, knorm) is the vector unit's RMSNorm (hw/vector_unit.py); the matvecs run
in the MAC array. This engine takes, per position t, the X vectors q (H x (dk+dr)), kc (H x dk),
the shared kr (dr) and v (H x dv), appends k and v to the cache and returns ctx (H x dv, X).

Input ``i`` (one beat = ``lanes`` X elements, ``pos`` read on the first beat of a position), beats in
this order, each segment padded to whole beats (lanes past the segment's end are ignored):
    for h: qc_h (ceil(dk/L) beats), qr_h (ceil(dr/L));  for h: kc_h (ceil(dk/L));  kr (ceil(dr/L));
    for h: v_h (ceil(dv/L)).
Positions must come in order 0, 1, ..., t (a new sequence restarts at 0): position t reads cache
rows 0..t only, all written in this sequence, so the result never depends on SRAM power-up state.
Runtime dims ``heads``, ``dk``, ``dr``, ``dv`` (1..build maxima) and ``score_const`` =
``mla_score_const(dk + dr)`` are static inputs (header registers), stable while the engine runs.

Output ``o``: per head, ceil(dv/L) beats of ``lanes`` X elements (lanes past dv read 0);
``last`` on the final beat of the final head. ``busy``: a position is under way (low only while
waiting for the first beat of the next position).

Storage (msh_sram, SPEC §5): the cache keeps k and v, not the latent, so nothing is re-expanded. It is
split into one bank per head, so that every head reads a word in every cycle: bank h (``kv_cache_<h>``)
holds per position a row of kc_h (ceil(dk/L) words) then v_h (ceil(dv/L)), rows ceil(max_dk/L) +
ceil(max_dv/L) words apart; kr (ceil(dr/L) words), shared by the heads, is stored once, in a region of
bank 0 after its rows. Words are L x X.bits. Nano (H 2, dk 32, dr 16, dv 32, L 16, X 32 bits, 64
positions): 320 + 256 words x 512 bits = 294,912 bits (the reference's per-head broadcast kr would cost
327,680; caching the latent c + kr instead, 144 values, would need the MAC array to re-expand every
position's k and v). Per head also a q buffer (ceil(dk/L) + ceil(dr/L) words, at least ceil(dv/L):
after the score pass it holds the head's ctx beats until they are output) and a score buffer
(max_seq x T.bits): 2 x (3 x 512 + 64 x 32) bits for nano.

Datapath: per head ``lanes`` multipliers (X.bits x X.bits), an adder tree and accumulators. In every
cycle each head reads the same word index of its own bank (a kr word is read once, from bank 0, and
meets every head's qr), so all heads advance together:
  score pass: for j in 0..t the ceil(dk/L) + ceil(dr/L) words of q_h . k_j go through products ->
    adder tree (two adder levels per register) -> word accumulator (exact) -> X.fit(dot, X.frac); the
    heads' scores of position j then take turns, one per cycle, through one x score_const (alone in
    its stage) -> T.fit -> the head's score buffer and running max (so a position takes at least H cycles).
  context pass, per L-wide chunk of v: for j in 0..t, max_h - t_j,h -> hw.lib.lut.Exp2Neg per head;
    e_j x v_j in the lane multipliers (the v read is issued late so it lands with e_j), per-lane
    accumulators and sum e (exact; summed in chunk 0 only, as it is the same for every chunk). A
    finished chunk's numerators, rounded to X.frac, move to holding registers (H x L x num_bits: 1,216
    bits for nano) and the next chunk accumulates at once, while the heads, each in L / norm_units
    cycles, go through ``norm_units`` hw.lib.lut.ApplyMant units, norm_units lanes per cycle (round,
    saturate to X), into the head's q buffer (byte strobes write the cycle's lane group). The reciprocal
    of sum e goes through one hw.lib.lut.Recip once, a head per cycle after chunk 0, and is kept per
    head for every chunk (H x 30 bits for nano). A chunk before the last lasts at least as long as its
    normalisation reads the holding registers (H L / norm_units cycles, after chunk 0 also the Recip
    latency), so that they are read before the next chunk's sums replace them.
    (An ApplyMant is ~8.6k um2 in Nangate45 and works once per chunk: nano shares 4 among 16 lanes.)
  output: the q buffers, head by head, one beat per cycle while ``o`` is ready, each beat as soon as
    its word is in the q buffer (read from the cycle after its last lane group is written): the earlier
    chunks' beats and the last chunk's earlier heads leave while the last chunk is still normalised, so
    the last beat leaves two cycles after the last normalisation write (if ceil(dv/L) <= L / norm_units).
exp2 tables: head k reads the k-th exp2 port of ``roms``; heads without one share msh_roms owned
here, two heads per ROM (its two read ports).
Latency (no stalls; MlaParams.cycles, checked by the test at every position): nano dims and build
t = 0: 63 cycles from the first input beat to the last output beat, t = 31: 206, t = 63: 366 (15 load
+ (t+1)(wk+wr) + 10 + max(t+1, H L / norm_units + 5) + (t+1) + 13 + H L / norm_units
+ (H-1) max(0, wv - L / norm_units): 5 cycles per cached position for both heads; norm_units = 16 would
save 5 cycles per position). Throughput is one q.k word or one e.v word per cycle for every head; more
lanes shorten both passes (L = 32: 245 cycles at t = 63) at the price of more multipliers.
"""
from __future__ import annotations

import dataclasses

from amaranth.hdl import Array, Cat, ClockSignal, Instance, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from nano_k3.fxp_ops import P, T, X

from hw.lib.lut import ApplyMant, Exp2Neg, Recip
from hw.lib.lut_rom import port_of, shared_rom
from hw.lib.pipe import clamp, delay, round_shift_const
from hw.mla_params import NUM_FRAC, MlaParams
from hw.mla_params import PRESETS as MLA_PRESETS
from hw.params import require_instance
from hw.roms import ROM_DIR


def in_layout(p: MlaParams) -> StructLayout:
    return StructLayout({"data": ArrayLayout(signed(X.bits), p.lanes), "pos": unsigned(p.seq_bits)})


def out_layout(p: MlaParams) -> StructLayout:
    return StructLayout({"data": ArrayLayout(signed(X.bits), p.lanes), "last": unsigned(1)})


class _Sram:
    """One msh_sram instance (SPEC §5): write port w_*, read port r_* (data the cycle after r_en).
    ``w_strb`` (byte write enables) is all ones unless driven."""

    def __init__(self, m: Module, name: str, depth: int, width: int):
        self.addr_bits = max(1, (depth - 1).bit_length())
        self.w_en, self.r_en = Signal(name=f"{name}_w_en"), Signal(name=f"{name}_r_en")
        self.w_addr = Signal(self.addr_bits, name=f"{name}_w_addr")
        self.r_addr = Signal(self.addr_bits, name=f"{name}_r_addr")
        self.w_data = Signal(width, name=f"{name}_w_data")
        self.w_strb = Signal(width // 8, init=(1 << (width // 8)) - 1, name=f"{name}_w_strb")
        self.r_data = Signal(width, name=f"{name}_r_data")
        m.submodules[name] = Instance(
            "msh_sram", p_DEPTH=depth, p_WIDTH=width, p_ADDRW=self.addr_bits,
            i_clk=ClockSignal(), i_we=self.w_en, i_waddr=self.w_addr, i_wdata=self.w_data,
            i_wstrb=self.w_strb,
            i_re=self.r_en, i_raddr=self.r_addr, o_rdata=self.r_data)


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


class MlaEngine(wiring.Component):
    """MLA cache + attention (see the module docstring for ports, order and timing)."""

    def __init__(self, params: MlaParams, *, rom_dir: str = ROM_DIR, roms=None):
        """``roms``: shared-ROM ports by table name (``hw.lib.lut_rom.shared_rom``; exp2 port k serves head k),
        else the engine owns its ROMs."""
        require_instance(self, params, MlaParams)
        if not isinstance(rom_dir, str) or not rom_dir:
            self._MustUse__silence = True
            raise ValueError(f"rom_dir must be a non-empty path string, got {rom_dir!r}")
        self.params = p = params
        self.rom_dir, self.roms = rom_dir, roms
        super().__init__({
            "i": In(stream.Signature(in_layout(p))),
            "o": Out(stream.Signature(out_layout(p))),
            "heads": In(p.dim_bits),
            "dk": In(p.dim_bits),
            "dr": In(p.dim_bits),
            "dv": In(p.dim_bits),
            "score_const": In(p.c_bits),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        L, lg, HM = p.lanes, p.lanes_log2, p.max_heads
        XB = X.bits
        head = unsigned(max(1, (HM - 1).bit_length()))     # a head index (at least one bit for the Verilog)
        seq, wb = p.seq_bits, 16        # wb: width of small word counters / offsets

        banks = [_Sram(m, f"kv_cache_{k}", p.bank_depth(k), p.word_bits) for k in range(HM)]
        qbufs = [_Sram(m, f"q_buf_{k}", p.qbuf_depth, p.word_bits) for k in range(HM)]
        tbufs = [_Sram(m, f"t_buf_{k}", p.max_seq, p.tbuf_bits) for k in range(HM)]
        addr_w = banks[0].addr_bits

        # Runtime geometry, registered from the static configuration inputs.
        H, dk, dr, dv = (Signal(p.dim_bits, name=n) for n in ("H", "dk_r", "dr_r", "dv_r"))
        wk, wr, wv, wq, ws = (Signal(wb, name=n) for n in ("wk", "wr", "wv", "wq", "ws"))
        c_r = Signal(p.c_bits)
        # ws: cycles per position of the score pass, the q.k words but at least H, since the shared
        # score scaling takes the heads' scores of a position one per cycle.
        m.d.sync += [H.eq(self.heads), dk.eq(self.dk), dr.eq(self.dr), dv.eq(self.dv), c_r.eq(self.score_const),
                     wk.eq((dk + L - 1) >> lg), wr.eq((dr + L - 1) >> lg), wv.eq((dv + L - 1) >> lg),
                     wq.eq(wk + wr), ws.eq(Mux(wk + wr > H, wk + wr, H))]

        def row(pos):                           # position pos's kc_h / v_h row in every bank
            return pos * p.row_words

        def kr_row(pos):                        # its kr in bank 0
            return p.kr_base + pos * p.words(p.max_dr)

        def head_by_head(start, name, groups_log2=0):
            """(step, valid): the heads 0 .. H-1, each in 2^groups_log2 steps, one step per cycle from the
            cycle after a ``start`` pulse; step = head << groups_log2 | group."""
            st, v = Signal(head.width + groups_log2, name=f"{name}_s"), Signal(name=f"{name}_v")
            with m.If(start):
                m.d.sync += [st.eq(0), v.eq(1)]
            with m.Elif(st == (H << groups_log2) - 1):
                m.d.sync += v.eq(0)
            with m.Elif(v):
                m.d.sync += st.eq(st + 1)
            return st, v

        t_r = Signal(seq)                       # current position

        # ---------------- load: q -> q buffers, k/v -> cache row t ---------------------------------
        h, w = Signal(p.dim_bits), Signal(wb)   # head and word-in-segment counters (load, ctx chunk, output)
        seg_d, seg_w = Signal(p.dim_bits), Signal(wb)
        seg_end = Signal()
        take = Signal()
        m.d.comb += [take.eq(self.i.valid & self.i.ready), seg_end.eq(w == seg_w - 1)]
        masked = Signal(ArrayLayout(signed(XB), L))
        for k in range(L):
            m.d.comb += masked[k].eq(Mux(((w << lg) + k) < seg_d, self.i.payload.data[k], 0))
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
        m.d.comb += o_end.eq(self.o.valid & self.o.ready & last_r)

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
                m.d.comb += [self.i.ready.eq(1), self.busy.eq(1), seg_d.eq(d), seg_w.eq(words)]
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
            m.d.comb += self.busy.eq(~first)
            with m.If(take & first):
                m.d.sync += t_r.eq(self.i.payload.pos)

        with in_state("SCORE"):
            # every head's q.k word n of position j per cycle: kc_h words, then the shared kr words
            m.d.comb += [self.busy.eq(1), s_iss.v.eq(n < wq), s_iss.first.eq(n == 0), s_iss.last.eq(n == wq - 1),
                         s_iss.kr.eq(n >= wk), s_iss.jlast.eq(j == t_r), s_iss.j.eq(j)]
            m.d.sync += n.eq(n + 1)
            with m.If(n == ws - 1):
                m.d.sync += [n.eq(0), j.eq(j + 1)]
                with m.If(j == t_r):
                    m.d.sync += j.eq(0)
                    _goto("SCORE_DRAIN")
        with in_state("SCORE_DRAIN"):
            m.d.comb += self.busy.eq(1)
            with m.If(score_done):
                m.d.sync += mode_ctx.eq(1)
                _goto("CTX")
        with in_state("CTX"):
            # every head's e_j x v_j of chunk w per cycle (n = j), then idle cycles up to c_end: the next
            # chunk's sums replace the holding registers only once this chunk's normalisation has read them
            m.d.comb += [self.busy.eq(1), c_iss.v.eq(n <= t_r), c_iss.first.eq(n == 0), c_iss.last.eq(n == t_r),
                         c_iss.w.eq(w)]
            m.d.sync += [n.eq(n + 1), j.eq(j + 1)]
            with m.If(n == c_end):
                m.d.sync += [n.eq(0), j.eq(0), w.eq(w + 1)]
                with m.If(w == wv - 1):
                    m.d.sync += w.eq(0)
                    _goto("CTX_OUT")
        with in_state("CTX_OUT"):
            # the last chunk is normalised while the output (below) runs; the next position once it is out
            m.d.comb += self.busy.eq(1)
            with m.If(o_end):
                _goto("QC")
        out_word = Array(q.r_data for q in qbufs)[o_h]
        m.d.comb += [self.o.payload.data.eq(out_word), self.o.payload.last.eq(last_r)]

        # ---------------- context-pass timing: the v read trails the t read by v_delay cycles ------------
        # t_j read (1) -> max - t_j register (1) -> Exp2Neg (LATENCY): e_j meets v_j at the multipliers.
        v_delay = 2 + Exp2Neg.LATENCY - 1
        c_addr = Signal(addr_w)
        m.d.comb += c_addr.eq(row(j) + wk + w)
        c_rd, c_rd_addr = delay(m, 1, c_iss.v, v_delay, "c_rd"), delay(m, 1, c_addr, v_delay, "c_addr")
        with m.If(mode_ctx):
            m.d.comb += [b.r_en.eq(c_rd) for b in banks] + [b.r_addr.eq(c_rd_addr) for b in banks]

        # ---------------- lane multipliers, one set per head -------------------------------------------
        # exp2 tables: the given shared-ROM ports first, then one msh_rom owned here per two heads.
        exp2_ports = [port_of(self.roms, "exp2", k) for k in range(HM)]
        own = [k for k, port in enumerate(exp2_ports) if port is None]
        for r in range(0, len(own), 2):
            for k, port in zip(own[r:r + 2], shared_rom(m, "exp2", self.rom_dir, f"exp2_rom_{r // 2}")):
                exp2_ports[k] = port
        exp2 = [Exp2Neg(t_bits=p.dt_bits, rom_dir=self.rom_dir, port=port) for port in exp2_ports]
        for k, e in enumerate(exp2):
            m.submodules[f"exp2_{k}"] = e
        f1 = Signal.like(s_iss)
        m.d.sync += f1.eq(s_iss)                       # f1 travels with the SRAM read data
        prod = [[Signal(signed(p.prod_bits), name=f"prod_{hd}_{k}") for k in range(L)] for hd in range(HM)]
        for hd in range(HM):
            q_word = qbufs[hd].r_data[:L * XB]
            k_word = Mux(f1.kr, banks[0].r_data, banks[hd].r_data)[:L * XB] if hd else banks[0].r_data[:L * XB]
            for k in range(L):
                a = Mux(mode_ctx, exp2[hd].o.y, q_word[k * XB:(k + 1) * XB].as_signed())
                m.d.sync += prod[hd][k].eq(a * k_word[k * XB:(k + 1) * XB].as_signed())

        # ---------------- score pass ------------------------------------------------------------------
        f2 = Signal.like(s_iss)
        m.d.sync += f2.eq(f1)                          # f2 travels with prod
        word_dots, depth = zip(*(_adder_tree(m, prod[hd], p.dot_bits, f"tree_{hd}") for hd in range(HM)))
        fd = delay(m, 1, f2, depth[0], "tree_f")       # travels with the word dots
        dots = [Signal(signed(p.dot_bits), name=f"dot_{hd}") for hd in range(HM)]
        with m.If(fd.v):
            m.d.sync += [dots[hd].eq(Mux(fd.first, 0, dots[hd]) + word_dots[hd]) for hd in range(HM)]
        fa = Signal.like(s_iss)
        m.d.sync += fa.eq(fd)
        # score = X.fit(dot, X.frac): round half up, saturate; held ws >= H cycles for the shared scaling
        fin = Signal()
        m.d.comb += fin.eq(fa.v & fa.last)
        scores = [Signal(signed(XB), name=f"score_{hd}") for hd in range(HM)]
        sj, sjl = Signal(seq), Signal()
        with m.If(fin):
            m.d.sync += [scores[hd].eq(clamp(round_shift_const(dots[hd], X.frac), X.lo, X.hi)) for hd in range(HM)]
            m.d.sync += [sj.eq(fa.j), sjl.eq(fa.jlast)]
        sh, sv = head_by_head(fin, "scale")
        # t = T.fit(score * c, X.frac + C_FRAC): the multiply alone, then round + saturate
        sc = Signal(signed(p.score_t_bits))
        mv, mh, mj, mjl = Signal(), Signal.like(sh), Signal(seq), Signal()
        m.d.sync += [mv.eq(sv), mh.eq(sh), mj.eq(sj), mjl.eq(sjl), sc.eq(Array(scores)[sh] * c_r)]
        t_val = Signal(signed(T.bits))
        tv, th, tj, tjl = Signal(), Signal.like(sh), Signal(seq), Signal()
        m.d.sync += [tv.eq(mv), th.eq(mh), tj.eq(mj), tjl.eq(mjl),
                     t_val.eq(clamp(round_shift_const(sc, p.t_shift), T.lo, T.hi))]
        t_max = [Signal(signed(T.bits), name=f"t_max_{hd}") for hd in range(HM)]
        head_max = Array(t_max)[th]
        for hd, tb in enumerate(tbufs):
            m.d.comb += [tb.w_en.eq(tv & (th == hd)), tb.w_addr.eq(tj), tb.w_data.eq(t_val)]
            with m.If(tv & (th == hd)):
                m.d.sync += t_max[hd].eq(Mux((tj == 0) | (t_val > head_max), t_val, head_max))
        m.d.comb += score_done.eq(tv & tjl & (th == H - 1))

        # ---------------- context pass -----------------------------------------------------------------
        n_g = v_delay + 3                               # g[k]: flags valid at issue + k + 1
        g = [Signal.like(c_iss, name=f"cx_f_{k}") for k in range(n_g)]
        m.d.sync += [g[0].eq(c_iss)] + [g[k].eq(g[k - 1]) for k in range(1, n_g)]
        # g[v_delay] travels with e (and the v words), g[v_delay+1] with prod, g[v_delay+2] with the sums
        ge, gp, gs = g[v_delay], g[v_delay + 1], g[v_delay + 2]
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

        # ---------------- recip(sum e): once per position, a head per cycle, kept for every chunk ---------
        # chunk 0's sum e is final one stage before its acc, so the reciprocals start a cycle early.
        rh, rv = head_by_head(gp.v & gp.last & (gp.w == 0), "recip")
        m.submodules.recip = recip = Recip(m_bits=p.sum_bits, frac_bits=max(1, P.frac.bit_length()),
                                           rom_dir=self.rom_dir, port=port_of(self.roms, "recip"))
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

        # ---------------- output: the ctx beats from the q buffers, head by head, each as soon as it is written
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
                          & ~(self.o.valid & last_r) & (~self.o.valid | self.o.ready))
        with m.If(rd):                          # q buffer reads of the score pass are over (s_iss.v is 0)
            m.d.comb += [q.r_en.eq(rd_h == k) for k, q in enumerate(qbufs)] + [q.r_addr.eq(rd_w) for q in qbufs]
            m.d.sync += [self.o.valid.eq(1), o_h.eq(rd_h), last_r.eq((rd_h == H - 1) & (rd_w == wv - 1)),
                         rd_w.eq(rd_w + 1)]
            with m.If(rd_w == wv - 1):
                m.d.sync += [rd_w.eq(0), rd_h.eq(Mux(rd_h == H - 1, 0, rd_h + 1))]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(o_end):                       # the position is out: no word of the next one is written yet
            m.d.sync += wr_v.eq(0)
        return m


# --- rtl_gen entry ----------------------------------------------------------------------------------
def mla_params_for(chip_params) -> MlaParams:
    """The MLA build maxima of a chip preset (nano maxima for every preset without its own)."""
    return MLA_PRESETS.get(chip_params.name, MLA_PRESETS["nano"])


def mla_engine_block(chip_params) -> MlaEngine:
    return MlaEngine(mla_params_for(chip_params))


def mla_engine_derived(chip_params) -> dict:
    p = mla_params_for(chip_params)
    return {
        "params": dataclasses.asdict(p),
        "row_words": p.row_words, "word_bits": p.word_bits, "cache_bits": p.cache_bits,
        "srams": {**{f"kv_cache_{h}": [p.bank_depth(h), p.word_bits] for h in range(p.max_heads)},
                  **{f"{name}_{h}": shape for h in range(p.max_heads)
                     for name, shape in (("q_buf", [p.qbuf_depth, p.word_bits]), ("t_buf", [p.max_seq, p.tbuf_bits]))}},
        "widths": {"dot": p.dot_bits, "prod": p.prod_bits, "acc": p.acc_bits, "num": p.num_bits,
                   "sum": p.sum_bits, "c": p.c_bits, "dim": p.dim_bits, "seq": p.seq_bits},
        "roms": ["exp2", "recip"],
    }
