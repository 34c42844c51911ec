"""Stream adapters between the vector register file / parameter buffers and the engines' inputs.

* ``ElemFeeder``: reads elements of VRF slots together with the matching entries of the two
  parameter buffers (PRF a: int16 or a channel's conv taps, PRF b: int16), and emits one
  ``feed_layout`` transfer per element index, of one slot or of up to four slots side by side
  (elementwise ops, the MoE combine, the residual mixer's candidates); each slot's word is read once
  per ``LANES`` elements. Full rate under no back-pressure.
* ``WordFeeder``: whole VRF words (``LANES`` elements) of one slot, ``nw`` words from ``w0`` (MLA
  engine input, and both passes of ``hw.mac_input.MacInput``).
* ``Combine``: ``nano_k3.fixed.moe_combine`` and the residual add after it, ``lanes`` elements per transfer.
Both feeders issue their first read in the cycle they are started, read 1 cycle after issuing and keep a
2-entry output queue with credit accounting (a read is issued only if its data has a free entry), so they
never lose data under back-pressure. A VRF
read waits while ``vrf_wr`` is high (the VRF is written in that cycle): place and route implement the
VRF on single-ported fakeram45 macros, which drop a read beside a write (docs/pnr.md).
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.lib.pipe import clamp
from hw.params import log2
from hw.program import LANES, MAX_SRCS, PaMode, PbMode
from nano_k3.fxp_ops import RW, X
from nano_k3.tensors import PARAM_BITS


# Both feeders, no back-pressure: ``start`` in cycle c issues the first read in c (the counters of an idle
# feeder read as its first issue's), the read lands a cycle later and enters the output queue the cycle after:
# a feed of t transfers has ``busy`` high through c + t + FEED_LATENCY − 1 when its consumer takes a transfer
# every cycle and no VRF write holds a read. A read's transfer is on the output FEED_LATENCY cycles after it issues.
FEED_LATENCY = 2


def feed_layout(max_n: int, entries: int = MAX_SRCS, pa_params: int = 4, pb_params: int = 2) -> StructLayout:
    """One feed transfer: ``entries`` X elements, ``pa_params`` / ``pb_params`` int16 of PRF a / b."""
    return StructLayout({
        "data": ArrayLayout(signed(X.bits), entries),
        "pa": unsigned(pa_params * PARAM_BITS),  # PRF a: one int16 a lane, or conv_k int16 taps
        "pb": unsigned(pb_params * PARAM_BITS),  # PRF b: one int16 a lane
        "idx": unsigned(max(1, (max_n - 1).bit_length())),
        "final": unsigned(1),                    # last transfer of the feed
    })


class _Queue2:
    """Two-entry output queue fed by reads that land one cycle after issue (credit accounting)."""

    def __init__(self, m: Module, o, layout, push, push_data, inflight):
        self.q = [Signal(layout, name=f"q{k}") for k in range(2)]
        occ = self.occ = Signal(range(3))
        pop = Signal()
        self.room = Signal()
        m.d.comb += [pop.eq(o.valid & o.ready), o.valid.eq(occ != 0), o.payload.eq(self.q[0]),
                     self.room.eq(occ + inflight - pop < 2)]
        after = Signal(range(3))
        m.d.comb += after.eq(occ - pop)
        with m.If(pop):
            m.d.sync += self.q[0].eq(self.q[1])
        with m.If(push):
            with m.If(after == 0):
                m.d.sync += self.q[0].eq(push_data)
            with m.Else():
                m.d.sync += self.q[1].eq(push_data)
        m.d.sync += occ.eq(after + push)


class ElemFeeder(wiring.Component):
    """Element stream of VRF slots plus parameter-buffer entries (see the module docstring).

    Each source's VRF word is read once per ``LANES`` elements into a word register (``word_srcs`` of
    them: the most sources an op has), so a feed of ``ns`` sources takes ``n + (ns − 1)·⌈n / LANES⌉``
    cycles: ``ns`` reads at the first element of each word (the last of them with the word's first
    transfer), one cycle for every other element, and reads the VRF in ``ns·⌈n / LANES⌉`` of them. With
    ``lanes_log2`` = lg (K = 2^lg ≤ ``lanes``, n a multiple of K) a transfer carries K consecutive
    elements i .. i + K − 1 of every source: ``data[k·K + j]`` = source k, element i + j (so
    ns·K ≤ ``entries``), ``pa`` and ``pb`` the PRF a / b entries from element i on (LIN mode; the
    ``pa_params`` / ``pb_params`` int16 of a transfer), and the feed takes n/K cycles
    + (ns − 1)·⌈n/16⌉.
    """

    LATENCY = FEED_LATENCY

    def __init__(self, *, slot_bits: int, slot_words: int, vrf_abits: int, prf_width: int, prf_abits: int,
                 max_n: int, dh: int, conv_k: int, word_srcs: int = MAX_SRCS, lanes: int = 1,
                 entries: int = MAX_SRCS, pa_params: int = 4, pb_params: int = 2):
        if conv_k > 4 or dh & (dh - 1):
            self._MustUse__silence = True
            raise ValueError(f"ElemFeeder: conv_k must be <= 4 and dh a power of two, got {conv_k}, {dh}")
        if not 1 <= word_srcs <= MAX_SRCS:
            self._MustUse__silence = True
            raise ValueError(f"ElemFeeder: word_srcs must be in 1..{MAX_SRCS}, got {word_srcs}")
        self.slot_words, self.prf_width, self.max_n, self.dh, self.conv_k = slot_words, prf_width, max_n, dh, conv_k
        if lanes not in (1, 2, 4, 8, 16) or lanes > entries:
            self._MustUse__silence = True
            raise ValueError(f"ElemFeeder: lanes must be 1, 2, 4, 8 or 16 and at most entries={entries}, got {lanes}")
        if pa_params < conv_k or pb_params < 1:
            self._MustUse__silence = True
            raise ValueError(f"ElemFeeder: pa_params={pa_params} must hold conv_k={conv_k} taps and pb_params="
                             f"{pb_params} at least one int16")
        self.word_srcs, self.lanes, self.entries = word_srcs, lanes, entries
        self.pa_params, self.pb_params = pa_params, pb_params
        super().__init__({
            "start": In(1),
            "srcs": In(ArrayLayout(unsigned(slot_bits), MAX_SRCS)),
            "ns": In(range(MAX_SRCS + 1)),
            "n": In(range(max_n + 1)),
            "lanes_log2": In(range(log2(lanes) + 1)),
            "pa_mode": In(2),
            "pb_mode": In(1),
            "busy": Out(1),
            "vrf_re": Out(1), "vrf_raddr": Out(vrf_abits), "vrf_rdata": In(LANES * X.bits), "vrf_wr": In(1),
            "pa_re": Out(1), "pa_raddr": Out(prf_abits), "pa_rdata": In(prf_width),
            "pb_re": Out(1), "pb_raddr": Out(prf_abits), "pb_rdata": In(prf_width),
            "o": Out(stream.Signature(feed_layout(max_n, entries, pa_params, pb_params))),
        })

    def elaborate(self, platform):
        m = Module()
        lay = feed_layout(self.max_n, self.entries, self.pa_params, self.pb_params)
        PB = self.prf_width // 8
        LL = log2(LANES)
        active = Signal()
        i = Signal(range(self.max_n + 1))
        s = Signal(range(MAX_SRCS + 1))
        t_valid, t_push, t_read = Signal(), Signal(), Signal()
        t_lane = Signal(range(LANES))
        t_s = Signal(2)
        t_i = Signal.like(i)
        t_pa, t_pb = Signal(range(PB)), Signal(range(PB))
        t_final = Signal()
        words = [Signal(LANES * X.bits, name=f"word{k}") for k in range(self.word_srcs)]

        # the sources' words are read at the first element of each word (s = 0 .. ns − 1), the other
        # elements come from the word registers
        go = Signal()                         # an issue may happen: a feed runs or starts now
        m.d.comb += go.eq(active | self.start & (self.n != 0) & (self.ns != 0))
        i_now, s_now = Signal.like(i), Signal.like(s)       # the counters, as the first issue's when idle
        m.d.comb += [i_now.eq(Mux(active, i, 0)), s_now.eq(Mux(active, s, 0))]
        reads = Signal()                      # a word start: this issue reads source s's word
        pushes = Signal()
        m.d.comb += [reads.eq(i_now[:LL] == 0), pushes.eq(~reads | (s_now == self.ns - 1))]
        K = self.lanes
        vals: dict = {}

        def src_val(k: int, j: int):
            """Element t_lane + j of source k: the word being read (source k read now), else its register."""
            if (k, j) not in vals:
                lane = t_lane | j                     # t_lane is a multiple of the transfer's lanes
                read = self.vrf_rdata.word_select(lane, X.bits).as_signed()
                if k < self.word_srcs:
                    vals[k, j] = Mux((t_s == k) & t_read, read, words[k].word_select(lane, X.bits).as_signed())
                else:
                    vals[k, j] = Const(0, signed(X.bits))
            return vals[k, j]

        pdata = Signal(lay)
        for d in range(self.entries):                 # data[k·lanes + j] = source k, element i + j
            with m.Switch(self.lanes_log2):
                for lg in range(log2(K) + 1):
                    with m.Case(lg):
                        m.d.comb += pdata.data[d].eq(src_val(d >> lg, d & ((1 << lg) - 1)))
        m.d.comb += [pdata.pa.eq((self.pa_rdata >> (t_pa * 8))[:self.pa_params * PARAM_BITS]),
                     pdata.pb.eq((self.pb_rdata >> (t_pb * 8))[:self.pb_params * PARAM_BITS]),
                     pdata.idx.eq(t_i), pdata.final.eq(t_final)]
        q = _Queue2(m, self.o, lay, t_valid & t_push, pdata, t_valid & t_push)
        with m.If(t_valid & t_read):
            with m.Switch(t_s):
                for k in range(self.word_srcs):
                    with m.Case(k):
                        m.d.sync += words[k].eq(self.vrf_rdata)

        issue = Signal()
        m.d.comb += issue.eq(go & (~pushes | q.room) & ~(reads & self.vrf_wr))
        last_i = Signal()
        last_s = Signal()
        step = Signal(range(K + 1))
        m.d.comb += [step.eq(1 << self.lanes_log2), last_i.eq(i_now == self.n - step), last_s.eq(s_now == self.ns - 1)]
        slot = Signal.like(self.srcs[0])
        m.d.comb += slot.eq(self.srcs[s_now[:2]])
        pa_byte = Signal(range(self.max_n * 2 * max(4, self.conv_k) + 1))
        pb_byte = Signal(range(self.max_n * 2 + 1))
        lgdh = log2(self.dh)
        with m.Switch(self.pa_mode):
            with m.Case(PaMode.HEADMOD):
                m.d.comb += pa_byte.eq((i_now & (self.dh - 1)) << 1)
            with m.Case(PaMode.TAPS):
                m.d.comb += pa_byte.eq(i_now * (2 * self.conv_k))
            with m.Default():
                m.d.comb += pa_byte.eq(i_now << 1)
        m.d.comb += pb_byte.eq(Mux(self.pb_mode == PbMode.HEAD, (i_now >> lgdh) << 1, i_now << 1))
        m.d.comb += [
            self.vrf_re.eq(issue & reads), self.vrf_raddr.eq(slot * self.slot_words + (i_now >> LL)),
            self.pa_re.eq(issue), self.pa_raddr.eq(pa_byte >> log2(PB)),
            self.pb_re.eq(issue), self.pb_raddr.eq(pb_byte >> log2(PB)),
        ]
        final = Signal()
        m.d.comb += final.eq(last_i & (last_s | ~reads))
        m.d.sync += [t_valid.eq(issue), active.eq(go & ~(issue & final))]
        with m.If(issue):
            m.d.sync += [t_push.eq(pushes), t_read.eq(reads), t_lane.eq(i_now[:LL]), t_s.eq(s_now[:2]), t_i.eq(i_now),
                         t_pa.eq(pa_byte[:log2(PB)]), t_pb.eq(pb_byte[:log2(PB)]),
                         t_final.eq(final)]
            with m.If(last_s | ~reads):
                m.d.sync += [s.eq(0), i.eq(i_now + step)]
            with m.Else():
                m.d.sync += [s.eq(s_now + 1), i.eq(i_now)]
        with m.Elif(~active):                 # idle, or started and held: the first issue's counters
            m.d.sync += [i.eq(0), s.eq(0)]
        m.d.comb += self.busy.eq(active | t_valid | (q.occ != 0))
        return m


def word_out_layout() -> StructLayout:
    return StructLayout({"data": ArrayLayout(signed(X.bits), LANES), "last": unsigned(1)})


class WordFeeder(wiring.Component):
    """Words w0 .. w0 + nw − 1 of one VRF slot as a stream (see the module docstring)."""

    LATENCY = FEED_LATENCY

    def __init__(self, *, slot_bits: int, slot_words: int, vrf_abits: int):
        self.slot_words = slot_words
        super().__init__({
            "start": In(1),
            "slot": In(slot_bits),
            "w0": In(range(slot_words + 1)),
            "nw": In(range(slot_words + 1)),
            "busy": Out(1),
            "vrf_re": Out(1), "vrf_raddr": Out(vrf_abits), "vrf_rdata": In(LANES * X.bits), "vrf_wr": In(1),
            "o": Out(stream.Signature(word_out_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        lay = word_out_layout()
        active = Signal()
        w = Signal(range(self.slot_words + 1))
        t_valid, t_last = Signal(), Signal()
        pdata = Signal(lay)
        m.d.comb += [pdata.data.as_value().eq(self.vrf_rdata), pdata.last.eq(t_last)]
        q = _Queue2(m, self.o, lay, t_valid, pdata, t_valid)
        issue, go = Signal(), Signal()
        last = Signal()
        w_now = Signal.like(w)                # the word counter, as the first issue's when idle
        m.d.comb += [go.eq(active | self.start & (self.nw != 0)), w_now.eq(Mux(active, w, self.w0)),
                     issue.eq(go & q.room & ~self.vrf_wr), last.eq(w_now == self.w0 + self.nw - 1),
                     self.vrf_re.eq(issue), self.vrf_raddr.eq(self.slot * self.slot_words + w_now)]
        m.d.sync += [t_valid.eq(issue), active.eq(go & ~(issue & last))]
        with m.If(issue):
            m.d.sync += [t_last.eq(last), w.eq(w_now + 1)]
        with m.Elif(~active):                 # idle, or started and held: the first issue's word
            m.d.sync += w.eq(self.w0)
        m.d.comb += self.busy.eq(active | t_valid | (q.occ != 0))
        return m


class Combine(wiring.Component):
    """moe_combine plus the residual add on ``lanes`` elements per transfer: ``i[k][j]`` = element j of
    source k (0: the shared expert's output, 1..top_k: the chosen experts', top_k + 1: the residual p), all
    X; ``weights`` RW; ``o[j]`` = X.fit(p + moe_combine(...)) in X (``FixedModel.step``'s ``p + moe``)."""

    LATENCY = 4

    def __init__(self, *, top_k: int, lanes: int = 1):
        if not 1 <= top_k <= MAX_SRCS - 2:
            self._MustUse__silence = True
            raise ValueError(f"Combine: top_k must be in 1..{MAX_SRCS - 2} (shared + chosen + residual sources), "
                             f"got {top_k}")
        if lanes not in (1, 2, 4, 8):
            self._MustUse__silence = True
            raise ValueError(f"Combine: lanes must be 1, 2, 4 or 8, got {lanes}")
        self.top_k, self.lanes = top_k, lanes
        el = ArrayLayout(signed(X.bits), lanes)
        super().__init__({
            "i": In(stream.Signature(ArrayLayout(el, top_k + 2))),
            "weights": In(ArrayLayout(unsigned(RW.bits), top_k)),
            "o": Out(stream.Signature(el)),
        })

    def elaborate(self, platform):
        m = Module()
        k = self.top_k
        en = Signal()
        v = [Signal(name=f"cv{j}") for j in range(self.LATENCY - 1)]
        m.d.comb += [en.eq(~self.o.valid | self.o.ready), self.i.ready.eq(en)]
        with m.If(en):
            m.d.sync += [v[0].eq(self.i.valid), *[v[j + 1].eq(v[j]) for j in range(len(v) - 1)],
                         self.o.valid.eq(v[-1])]
        pw = X.bits + RW.bits + 1
        for lane in range(self.lanes):
            prods = [Signal(signed(pw), name=f"cprod{j}_{lane}") for j in range(k)]
            sh = Signal(signed(pw), name=f"cshared_{lane}")
            tot = Signal(signed(pw + 2), name=f"ctot_{lane}")
            moe = Signal(signed(X.bits), name=f"cmoe_{lane}")
            res = [Signal(signed(X.bits), name=f"cres{j}_{lane}") for j in range(3)]   # p beside the stages
            with m.If(en):
                m.d.sync += [sh.eq(self.i.payload[0][lane] << RW.frac), res[0].eq(self.i.payload[k + 1][lane]),
                             res[1].eq(res[0]), res[2].eq(res[1])]
                for j in range(k):
                    m.d.sync += prods[j].eq(self.i.payload[j + 1][lane] * self.weights[j].as_unsigned())
                total = sh
                for p in prods:
                    total = total + p
                m.d.sync += [tot.eq(total), moe.eq(clamp((tot + (1 << (RW.frac - 1))) >> RW.frac, X.lo, X.hi)),
                             self.o.payload[lane].eq(clamp(moe + res[2], X.lo, X.hi))]
        return m
