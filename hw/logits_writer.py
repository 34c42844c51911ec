"""``LogitsWriter``: the LM head's results to memory, and the position's argmax, decoupled from the writes.

The MAC array hands the head's logits over in chunks of ``lanes`` int32 values (a VRF word, 4 memory beats).
Its last column block's chunks come one a cycle, while the memory port takes one beat a cycle: written
straight through, the argmax — and with it the next position's token, which may only be read after the
argmax word (hw/emb_fetch.py) — would wait for the whole block's writes. Here the chunks go into a FIFO
(``depth`` chunks in one ``msh_sram`` of ``lanes`` × 32 bits a word), which drains to the write port in the
background, and the argmax is tracked as the chunks enter. ``argmax_valid`` rises two cycles after the last
chunk: the sequencer writes the argmax word then, ahead of the logits beats still in the FIFO, and the next
position's fetch starts while they drain (SPEC §4.5 only asks the status word to be the last write; the
status write waits for ``drained``).

Argmax (``ArgmaxTracker``): lowest index wins ties (SPEC §4.5), over int32 logits in column order. Stage 1 takes a chunk's
``lanes`` values down to 4 (two levels of compare-and-select, the later value only when strictly greater)
and registers them; stage 2 takes the 4 down to 1 and replaces the running best only when strictly greater.

FIFO on a synchronous-read SRAM without relying on ``rdata`` holding (SPEC §5 only promises it the cycle
after a read): the drain reads its head entry in every cycle but a push's, the next entry in the cycle it
pops the head, so ``rdata`` shows the head the cycle after each read; ``ready`` (registered) says the cycle
before read an entry that was already in the SRAM. A push cycle does not read (fakeram45 is single-ported
and drops a read beside a write, docs/pnr.md), so the drain offers no beat the cycle after a push: ``wr.valid``
can fall without a transfer (hw/mem_engine.py arbitrates each cycle afresh).
A chunk's beats go out at ``row + 64·chunk + 16·k``, k = 0..3; ``row`` is taken with ``start``, which the
sequencer raises only with the FIFO empty (one position's row in flight at a time).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.mem_engine import SPEC_ADDR_WIDTH, SPEC_BEAT_BITS, write_beat_layout
from hw.params import int_in, pow2_at_least
from hw.vrf import Sram

LOGIT_BITS = 32          # SPEC §4.5: int32 logits
BEAT_LOGITS = SPEC_BEAT_BITS // LOGIT_BITS


def chunk_layout(lanes: int) -> StructLayout:
    """``i`` payload: ``lanes`` logits in column order (the MAC array's ``o`` payload has these fields)."""
    return StructLayout({"y": ArrayLayout(signed(LOGIT_BITS), lanes), "last": 1})


def _max_pairs(m: Module, vals: list, idxs: list, name: str) -> tuple[list, list]:
    """One tree level: each pair to its larger value, the earlier (lower index) one unless the later is
    strictly greater."""
    ov, oi = [], []
    for k in range(0, len(vals), 2):
        v = Signal(signed(LOGIT_BITS), name=f"{name}_v{k // 2}")
        i = Signal(len(idxs[k]), name=f"{name}_i{k // 2}")
        gt = vals[k + 1] > vals[k]
        m.d.comb += [v.eq(Mux(gt, vals[k + 1], vals[k])), i.eq(Mux(gt, idxs[k + 1], idxs[k]))]
        ov.append(v)
        oi.append(i)
    return ov, oi


class ArgmaxTracker(wiring.Component):
    """The argmax of a row of int32 logits that arrives in chunks of ``lanes``, in column order, lowest index on
    ties (SPEC §4.5), two register stages (see the module docstring).

    Members: ``start`` (In: a new row), ``valid`` / ``y`` / ``last`` (In: a chunk enters; ``last`` on the row's
    final one), ``argmax`` (Out), ``done`` (Out: two cycles after the last chunk, until the next ``start``)."""

    def __init__(self, vocab: int, *, lanes: int = 16):
        try:
            pow2_at_least("lanes", lanes, 4, "a power of two, reduced to 4 in the first stage")
            int_in("vocab", vocab, lanes, 1 << 20)
            if vocab % lanes:
                raise ValueError(f"vocab must be a multiple of lanes={lanes} (whole chunks a row), got {vocab}")
        except ValueError:
            self._MustUse__silence = True
            raise
        self.vocab, self.lanes = vocab, lanes
        super().__init__({
            "start": In(1),
            "valid": In(1),
            "y": In(ArrayLayout(signed(LOGIT_BITS), lanes)),
            "last": In(1),
            "argmax": Out(range(vocab)),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        chunk = Signal(range(self.vocab // self.lanes), name="chunk")       # the chunk entering
        vals = [self.y[j] for j in range(self.lanes)]
        idxs = [Const(j, range(self.lanes)) for j in range(self.lanes)]
        while len(vals) > 4:
            vals, idxs = _max_pairs(m, vals, idxs, f"s1_{len(vals)}")
        s1_v = [Signal(signed(LOGIT_BITS), name=f"s1_v{k}") for k in range(4)]
        s1_i = [Signal(range(self.vocab), name=f"s1_i{k}") for k in range(4)]
        s1_valid, s1_last = Signal(), Signal()
        m.d.sync += [s1_valid.eq(self.valid), s1_last.eq(self.valid & self.last)]
        with m.If(self.valid):
            m.d.sync += [chunk.eq(chunk + 1)] + [s1_v[k].eq(vals[k]) for k in range(4)] \
                + [s1_i[k].eq(Cat(idxs[k], chunk)) for k in range(4)]
        v2, i2 = _max_pairs(m, *_max_pairs(m, s1_v, s1_i, "s2a"), "s2b")
        best = Signal(signed(LOGIT_BITS))
        with m.If(self.start):
            m.d.sync += [best.eq(-(1 << (LOGIT_BITS - 1))), self.argmax.eq(0), self.done.eq(0), chunk.eq(0)]
        with m.Elif(s1_valid):
            with m.If(v2[0] > best):
                m.d.sync += [best.eq(v2[0]), self.argmax.eq(i2[0])]
            with m.If(s1_last):
                m.d.sync += self.done.eq(1)
        return m


class LogitsWriter(wiring.Component):
    """Logits chunks → FIFO → memory write beats, argmax on the way in (see the module docstring).

    Members: ``i`` (In stream of ``chunk_layout(lanes)``; ``last`` on the row's final chunk), ``start``,
    ``row`` (In: a new row begins, its byte address; only while ``drained``), ``wr`` (Out stream of write
    beats for ``hw.mem_engine.MemEngine.wr``), ``argmax`` / ``argmax_valid`` (Out: the row's argmax once
    every chunk is compared, until the next ``start``), ``drained`` (Out: every beat handed to ``wr``)."""

    DEPTH = 16           # chunks: two column blocks of the nano head (128 lanes), so its chunks never wait
                         # (the drain loses a beat to every push, which reads nothing; with one block's
                         # depth the nano head waited 16 cycles a position)
    FIRST_BEAT = 2       # a chunk pushed in cycle c offers its first beat on ``wr`` in c + 2 (the chunk count,
                         # then ``ready``, are registers; the SRAM read of the head entry lands with ``ready``)

    def __init__(self, vocab: int, *, lanes: int = 16, depth: int = DEPTH, addr_width: int = SPEC_ADDR_WIDTH):
        try:
            pow2_at_least("lanes", lanes, BEAT_LOGITS, "whole beats a chunk; a power of two")
            pow2_at_least("depth", depth, 2, "the msh_sram model's minimum")
            int_in("vocab", vocab, lanes, 1 << 20)
            if vocab % lanes:
                raise ValueError(f"vocab must be a multiple of lanes={lanes} (whole chunks a row), got {vocab}")
        except ValueError:
            self._MustUse__silence = True
            raise
        self.vocab, self.lanes, self.depth = vocab, lanes, depth
        super().__init__({
            "i": In(stream.Signature(chunk_layout(lanes))),
            "start": In(1),
            "row": In(addr_width),
            "wr": Out(stream.Signature(write_beat_layout(addr_width, SPEC_BEAT_BITS))),
            "argmax": Out(range(vocab)),
            "argmax_valid": Out(1),
            "drained": Out(1),
        })

    @property
    def sram_bits(self) -> int:
        return self.depth * self.lanes * LOGIT_BITS

    def elaborate(self, platform):
        m = Module()
        W, D = self.lanes, self.depth
        beats = W // BEAT_LOGITS
        fifo = Sram(m, "logits_sram", D, W * LOGIT_BITS)
        n = Signal(range(D + 1))                 # chunks in the FIFO
        wp, rp = Signal(range(D)), Signal(range(D))
        push, pop = Signal(), Signal()
        m.d.comb += [self.i.ready.eq(n != D), push.eq(self.i.valid & self.i.ready),
                     fifo.w_en.eq(push), fifo.w_addr.eq(wp), fifo.w_data.eq(self.i.payload.y.as_value()),
                     fifo.w_strb.eq(-1), self.drained.eq(n == 0)]
        with m.If(push):
            m.d.sync += wp.eq(wp + 1)
        m.d.sync += n.eq(n + push - pop)

        # drain: the head entry's beats, one a cycle
        ready = Signal()                          # rdata holds the head entry
        re = Signal()
        sub = Signal(range(beats))
        chunk_w = Signal(range(self.vocab // W))  # the head entry's chunk in the row
        row = Signal.like(self.row, name="row_base")
        m.d.comb += [re.eq((n > pop) & ~push), fifo.r_en.eq(re), fifo.r_addr.eq(Mux(pop, rp + 1, rp)),
                     self.wr.valid.eq(ready),
                     self.wr.payload.addr.eq(row + (Cat(sub, chunk_w) << 4)),
                     self.wr.payload.data.eq(fifo.r_data.word_select(sub, SPEC_BEAT_BITS)),
                     self.wr.payload.strb.eq(-1),
                     pop.eq(self.wr.valid & self.wr.ready & (sub == beats - 1))]
        m.d.sync += ready.eq(re)
        with m.If(self.wr.valid & self.wr.ready):
            m.d.sync += sub.eq(sub + 1)
        with m.If(pop):
            m.d.sync += [rp.eq(rp + 1), chunk_w.eq(chunk_w + 1)]

        am = m.submodules.argmax = ArgmaxTracker(self.vocab, lanes=W)
        m.d.comb += [am.start.eq(self.start), am.valid.eq(push), am.y.eq(self.i.payload.y),
                     am.last.eq(self.i.payload.last), self.argmax.eq(am.argmax), self.argmax_valid.eq(am.done)]
        with m.If(self.start):
            m.d.sync += [chunk_w.eq(0), row.eq(self.row)]
        return m
