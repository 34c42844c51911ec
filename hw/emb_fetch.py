"""``EmbFetch``: one position's token id and embedding row, read from memory once that position may start.

A decoder cannot look ahead: position t + 1's token is only known once position t has produced its
output (a chip that feeds its own argmax back has no token array to read ahead of time). So the chip
reads nothing of position t + 1 — neither its entry of the token array nor its embedding row — before
position t's argmax word has been handed to the memory port. The sequencer raises ``start`` (with
``pos`` = t + 1) in the cycle its argmax write of position t is taken by the memory engine; the memory
engine's one request register then sends that write before any read of this fetch (SPEC §3: one request
channel, in order). Position 0 has no predecessor: its fetch starts with the tensor block's read in the
load phase.

A fetch is two dependent round trips through the memory port:

1. the token array's beat holding entry ``pos`` (16 B at ``tok_addr + 16·(pos // 4)``, one read);
2. once that token id is in: its ``.s`` beat (8 int16 scales a beat), its ``.z`` beat (16 uint8 zero
   points a beat) and its ``.q`` row (``d_model / 2`` bytes = ``d_model / 32`` beats), requested back to
   back (three ranges, one request a cycle; the port returns them in order).

Beats arrive on ``beat`` in request order (the sequencer routes the memory engine's read stream here
whenever the load phase is not reading); they are kept in registers (token, scale, zero point, the
packed row: ``16 + 16 + 4 + 4·d_model`` flops). ``valid`` rises once the last ``.q`` beat is in and stays
up until the next ``start``. ``word`` is VRF word ``word_idx`` of the dequantised row, ``LANES`` elements in
format X: ``s · (q − z)`` with the scale's 12 fraction bits (Q3.12, SPEC §4.3) shifted into X's
(``nano_k3.fxp_ops.embed_row``: the same exact product the MAC array would compute for a fan-in-1 matvec).

Limits (checked at construction): ``d_model`` a multiple of 32 and at most 64, so a row has one scale group
at both group sizes (SPEC §4.3: ``emb.s`` / ``emb.z`` hold one entry per token then).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.mem_engine import SPEC_ADDR_WIDTH, SPEC_BEAT_BITS, read_beat_layout, read_range_layout
from hw.params import int_in
from hw.program import LANES
from nano_k3.fxp_ops import X
from nano_k3.int4 import SCALE_BITS, SCALE_FRAC

TOKEN_BITS = 16          # token ids below 65,536 (the header's vocab is checked against the build's)
BEAT_BYTES = SPEC_BEAT_BITS // 8
TOK, ROW_S, ROW_Z, ROW_Q = range(4)      # the fetch's reads, in request (= arrival) order


class EmbFetch(wiring.Component):
    """Fetches position ``pos``'s token id and embedding row after ``start`` (see the module docstring).

    Members: ``start``, ``pos`` (In: sampled with ``start``), ``tok_addr`` (header word 24), ``q_addr`` /
    ``s_addr`` / ``z_addr`` (the ``emb.q`` / ``.s`` / ``.z`` records' addresses; all In, stable while busy);
    ``rd`` (Out stream: read ranges for ``hw.mem_engine.MemEngine.rd_cmd``); ``beat`` (In stream: its read
    beats, in order; always ready); ``busy`` (a read requested or a beat still to come), ``valid`` (the row
    is in), ``token`` (Out); ``word_idx`` (In) → ``word`` (Out: LANES X elements)."""

    def __init__(self, d_model: int, max_seq: int, *, addr_width: int = SPEC_ADDR_WIDTH, len_width: int = 24):
        try:
            int_in("d_model", d_model, 32, 64)
            if d_model % 32:
                raise ValueError(f"d_model must be a multiple of 32 (whole .q beats per row), got {d_model}")
            int_in("max_seq", max_seq, 1, 1 << 16)
        except ValueError:
            self._MustUse__silence = True
            raise
        self.d_model, self.max_seq = d_model, max_seq
        self.q_beats = d_model // 32                      # .q row: d_model nibbles = d_model / 2 bytes
        super().__init__({
            "start": In(1),
            "pos": In(range(max_seq)),
            "tok_addr": In(addr_width),
            "q_addr": In(addr_width),
            "s_addr": In(addr_width),
            "z_addr": In(addr_width),
            "rd": Out(stream.Signature(read_range_layout(addr_width, len_width))),
            "beat": In(stream.Signature(read_beat_layout(SPEC_BEAT_BITS))),
            "busy": Out(1),
            "valid": Out(1),
            "token": Out(TOKEN_BITS),
            "word_idx": In(range(max(2, d_model // LANES))),
            "word": Out(LANES * X.bits),
        })

    def elaborate(self, platform):
        m = Module()
        QB = self.q_beats
        pos = Signal.like(self.pos, name="fetch_pos")
        req = Signal(range(ROW_Q + 2))            # the next read to request (ROW_Q + 1: all requested)
        got = Signal(range(ROW_Q + QB + 1))       # beats in so far: token, .s, .z, then the .q beats
        active = Signal()                         # between start and the last beat
        scale = Signal(signed(SCALE_BITS))
        zero = Signal(4)
        row = Signal(BEAT_BYTES * 8 * QB)
        token = self.token
        m.d.comb += [self.valid.eq(~active & (got == ROW_Q + QB)), self.busy.eq(active),
                     self.beat.ready.eq(1)]

        # Requests: the token's beat at once (also in the cycle of ``start``, from ``pos`` itself: the memory
        # engine then sends it right after the write that raised ``start``), the row's three once the token is in.
        cur_pos = Mux(self.start, self.pos, pos)
        ranges = {TOK: (self.tok_addr + ((cur_pos >> 2) << 4), BEAT_BYTES),
                  ROW_S: (self.s_addr + ((token >> 3) << 4), BEAT_BYTES),
                  ROW_Z: (self.z_addr + ((token >> 4) << 4), BEAT_BYTES),
                  ROW_Q: (self.q_addr + token * (self.d_model // 2), BEAT_BYTES * QB)}
        want = Signal()
        m.d.comb += want.eq(self.start | active & ((req == TOK) | (req <= ROW_Q) & (got > TOK)))
        with m.Switch(Mux(self.start, TOK, req)):
            for k, (addr, length) in ranges.items():
                with m.Case(k):
                    m.d.comb += [self.rd.payload.addr.eq(addr), self.rd.payload.length.eq(length)]
        m.d.comb += self.rd.valid.eq(want)
        take = self.rd.valid & self.rd.ready
        with m.If(self.start):
            m.d.sync += [pos.eq(self.pos), active.eq(1), got.eq(0), req.eq(Mux(take, ROW_S, TOK))]
        with m.Elif(take):
            m.d.sync += req.eq(req + 1)

        # Beats, in request order: token, .s, .z, .q row.
        data = self.beat.payload.data
        with m.If(active & self.beat.valid):
            m.d.sync += got.eq(got + 1)
            with m.Switch(got):
                with m.Case(TOK):
                    m.d.sync += token.eq(data.word_select(pos[:2], 32)[:TOKEN_BITS])
                with m.Case(ROW_S):
                    m.d.sync += scale.eq(data.word_select(token[:3], 16))
                with m.Case(ROW_Z):
                    m.d.sync += zero.eq(data.word_select(token[:4], 8)[:4])
                for j in range(QB):
                    with m.Case(ROW_Q + j):
                        m.d.sync += row.word_select(j, BEAT_BYTES * 8).eq(data)
                        if j == QB - 1:
                            m.d.sync += active.eq(0)

        # Dequantised word: element i = lane j of word w is nibble i of the row (byte i // 2, low nibble first).
        els = []
        for j in range(LANES):
            byte = row.word_select(self.word_idx * (LANES // 2) + j // 2, 8)
            nib = byte[4 * (j % 2):4 * (j % 2) + 4]
            e = Signal(signed(X.bits), name=f"emb_e{j}")
            m.d.comb += e.eq((scale * (nib.as_unsigned() - zero.as_unsigned()).as_signed()) << (X.frac - SCALE_FRAC))
            els.append(e)
        m.d.comb += self.word.eq(Cat(*els))
        return m
