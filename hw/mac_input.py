"""MAC-array input: block floating point of an X vector, bit-exact to ``nano_k3.fxp_ops.mac_input``.

The block exponent comes from ``orv``, the OR of |v| over the vector's elements (its bit length equals that
of max|v|; the chip keeps it for every VRF slot as the slot is written, ``hw.chip_collect.slot_or``): a
cycle with ``load`` registers shift = max(bit_length(max|v|) − (A.bits − 1), X.frac − MAC_FRAC_MAX) (the
floor also for a zero vector). The vector then streams in once as VRF words (``i``: ``lanes`` X elements
per transfer, ``last`` on the final word; lanes at element index >= ``n`` are ignored): every element
becomes A.fit(round_shift(v, shift)) (round half up, saturate) and leaves on ``o`` with
``frac = X.frac − shift`` (the MAC array's ``act`` payload). Widths come from ``fxp_ops`` (X, A,
MAC_FRAC_MAX) at construction.
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from nano_k3.fxp_ops import MAC_FRAC_MAX, A, X


def word_layout(lanes: int) -> StructLayout:
    return StructLayout({"data": ArrayLayout(signed(X.bits), lanes), "last": unsigned(1)})


class MacInput(wiring.Component):
    """Block-floating-point converter of one pass, its exponent from ``orv`` (see the module docstring)."""

    LATENCY = 1          # a word taken on ``i`` in cycle c (convert pass) is on ``o`` in c + 1 (``o`` is a register)

    def __init__(self, act_layout: StructLayout, *, lanes: int = 16, max_n: int = 128):
        if not isinstance(lanes, int) or lanes < 1 or lanes & (lanes - 1):
            self._MustUse__silence = True
            raise ValueError(f"lanes must be a power of two, got {lanes!r}")
        if act_layout.members["m"].length != lanes:
            self._MustUse__silence = True
            raise ValueError(f"the act payload carries {act_layout.members['m'].length} mantissas, "
                             f"the VRF word {lanes}")
        self.lanes, self.max_n = lanes, max_n
        self.floor = X.frac - MAC_FRAC_MAX
        self.top = X.bits - (A.bits - 1)           # bit_length(|v|) <= X.bits
        super().__init__({
            "i": In(stream.Signature(word_layout(lanes))),
            "o": Out(stream.Signature(act_layout)),
            "orv": In(X.bits),        # OR of |v| over the vector, taken when ``load``
            "load": In(1),
            "n": In(range(max_n + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        L = self.lanes
        lg = L.bit_length() - 1
        word = Signal(range(self.max_n // L + 2))
        shift = Signal(signed(8))
        take = Signal()
        m.d.comb += take.eq(self.i.valid & self.i.ready)
        with m.If(take):
            m.d.sync += word.eq(Mux(self.i.payload.last, 0, word + 1))

        # the block exponent
        bl = Signal(range(X.bits + 1))
        for b in range(X.bits):
            with m.If(self.orv[b]):
                m.d.comb += bl.eq(b + 1)
        with m.If(self.load):
            m.d.sync += shift.eq(Mux(bl - (A.bits - 1) > self.floor, bl - (A.bits - 1), self.floor))

        # the conversion: registered output, stall-able
        adv = Signal()
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv)]
        sr = Signal(range(max(2, self.top + 1)))
        sl = Signal(range(max(2, -self.floor + 1)))
        rnd = Signal(X.bits + 1)
        sm1 = Signal.like(sr)
        m.d.comb += [sr.eq(Mux(shift > 0, shift, 0)), sl.eq(Mux(shift < 0, -shift, 0)), sm1.eq(sr - 1),
                     rnd.eq(Mux(shift > 0, Const(1, X.bits + 1) << sm1, 0))]
        with m.If(adv):
            m.d.sync += self.o.valid.eq(take)
            with m.If(take):
                m.d.sync += [self.o.payload.frac.eq(X.frac - shift), self.o.payload.last.eq(self.i.payload.last)]
                for j in range(L):
                    v = self.i.payload.data[j]
                    ok = ((word << lg) + j) < self.n
                    r = Signal(signed(X.bits + 2 - self.floor), name=f"conv{j}")
                    m.d.comb += r.eq(((v + rnd.as_signed()) >> sr) << sl)
                    sat = Mux(r > A.hi, A.hi, Mux(r < A.lo, A.lo, r))
                    m.d.sync += self.o.payload.m[j].eq(Mux(ok, sat, 0))
        return m
