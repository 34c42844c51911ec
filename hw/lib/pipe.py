"""Fixed-latency pipelines: the convention every LUT function and most engine stages follow, and the
register helpers they are built from.

Pipeline convention ("fixed latency, valid bit, enable"):

* members ``en`` (In, init 1), ``i_valid`` (In), ``i`` (In, a data layout), ``o_valid`` (Out), ``o`` (Out);
* when ``en`` is high every stage advances one step; when it is low every register holds (a stall).
  ``i`` is sampled at a clock edge with ``en`` high; the result appears on ``o`` exactly ``LATENCY``
  enabled edges later, with ``o_valid`` = the ``i_valid`` that went in. ``o`` is a register output
  (it holds while ``en`` is low). Throughput: one input per enabled cycle.
* inputs may come from combinational logic: each first stage holds at most a leading-zero count, an
  absolute value or a clamp (no multiplier sits behind an input port).
* ``Streamed(core)`` wraps any of them into a component with ``amaranth.lib.stream`` ports ``i`` / ``o``
  (``en = ~o.valid | o.ready``, ``i.ready = en``), which is what the block tests drive.
"""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


def reject(component, msg: str):
    """Raise ValueError(msg) for a component whose constructor refused its parameters."""
    component._MustUse__silence = True      # a rejected component is not an unused one
    raise ValueError(msg)


def round_shift_const(v, s: int):
    """``fxp_ops.round_shift`` by a constant: (v + 2^(s-1)) >> s (arithmetic), or v << -s."""
    if s > 0:
        return (v + (1 << (s - 1))) >> s
    return v << (-s) if s < 0 else v


def clamp(v, lo: int, hi: int):
    """Saturate a value to [lo, hi] (two comparators and a mux)."""
    return Mux(v < lo, lo, Mux(v > hi, hi, v))


def eq_const(v, k: int):
    """v == k, written as a reduction for k = 0 (Yosys prints ``v == 0`` as ``!v``, which Verilator flags)."""
    return ~v.any() if k == 0 else v == k


def delay(m: Module, en, sig, n: int, name: str):
    """``sig`` delayed by ``n`` enabled clock edges (a register chain that holds while ``en`` is low)."""
    for k in range(n):
        nxt = Signal.like(sig, name=f"{name}_d{k + 1}")
        with m.If(en):
            m.d.sync += nxt.eq(sig)
        sig = nxt
    return sig


def leading_one(m: Module, v, name: str):
    """(any, position of the highest set bit) of ``v``: a log-depth tree of 2:1 muxes, no priority chain."""
    def tree(lo: int, n: int):
        if n == 1:
            return v[lo], Const(0, 1)
        half = 1 << ((n - 1).bit_length() - 1)          # largest power of two below n
        lo_any, lo_pos = tree(lo, half)
        hi_any, hi_pos = tree(lo + half, n - half)
        width = max(1, (n - 1).bit_length())
        pos = Signal(width, name=f"{name}_p{lo}_{n}")
        m.d.comb += pos.eq(Mux(hi_any, hi_pos + half, lo_pos))
        return hi_any | lo_any, pos

    return tree(0, len(v))


class FixedPipe(wiring.Component):
    """Base of the fixed-latency pipelines (the convention of this module's docstring)."""

    LATENCY = 0

    def __init__(self, in_layout, out_layout):
        self.in_layout, self.out_layout = in_layout, out_layout
        super().__init__({
            "en": In(1, init=1),
            "i_valid": In(1),
            "i": In(in_layout),
            "o_valid": Out(1),
            "o": Out(out_layout),
        })

    def _valid_chain(self, m: Module) -> None:
        v = delay(m, self.en, self.i_valid, self.LATENCY, "valid")
        m.d.comb += self.o_valid.eq(v)


class Streamed(wiring.Component):
    """A ``FixedPipe`` behind stream ports: the pipeline advances when its output register is free.

    ``i.ready = en = ~o.valid | o.ready``; one transfer per cycle without back-pressure, latency
    ``core.LATENCY`` from the input handshake to ``o.valid``.
    """

    def __init__(self, core: FixedPipe):
        self.core = core
        self.LATENCY = core.LATENCY
        super().__init__({
            "i": In(stream.Signature(core.in_layout)),
            "o": Out(stream.Signature(core.out_layout)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        en = Signal()
        m.d.comb += [en.eq(~core.o_valid | self.o.ready), core.en.eq(en), self.i.ready.eq(en),
                     core.i_valid.eq(self.i.valid), core.i.eq(self.i.payload),
                     self.o.valid.eq(core.o_valid), self.o.payload.eq(core.o)]
        return m
