"""The INT4 dequant-MAC lane group: one packed ``.q`` beat (two input rows × ``mac_lanes`` columns) per cycle.

Arithmetic (nano_k3.int4.dequant_matvec restricted to ``mac_lanes`` output columns, exact):

    y[c] = Σ_g s[g,c] · (Σ_{k∈g} q[k,c]·x[k] − z[g,c] · Σ_{k∈g} x[k])

Beat layout (SPEC §4.3): byte c of ``q`` (bits 8c..8c+7) holds input row 2r in its low nibble and row
2r+1 in its high nibble for output column c; ``x[0]``/``x[1]`` are the activations of rows 2r / 2r+1.

Stream protocol of ``i`` (one beat = two input rows):
* ``first``: the beat starts a new output vector (clears the group and output accumulators);
* ``last_in_group``: the beat ends a group; ``s``/``z`` of this beat are the group's scale and zero
  point (they are ignored on every other beat). ``last`` implies the end of a group;
* ``last``: the beat ends the output vector; ``o`` then carries the ``mac_lanes`` results.
Groups must hold a whole number of beats (an even number of rows), total fan-in ≤ max_fan_in.

Pipeline (every register advances together when the output register is free or being taken, so
``i.ready`` = ``~o.valid | o.ready`` and one beat per cycle flows with no back-pressure):
    S1 per-beat products q·x, Σx      (4×act_bits multiplies)
    S2 group sums Σqx, Σx             (one add per lane)
    S3 d = Σqx − z·Σx                 (4-bit × group_x multiply, subtract)
    S4 s·d                            (scale_bits × group_d multiply: registered on its own)
    S5 y += s·d, output register
``LATENCY`` = 5: if the ``last`` beat is taken in cycle n, ``o.valid`` is high from cycle n+5.
Widths (ChipParams, nano: act 16 bit, fan-in 512): beat Σqx 21, Σx 17; group Σqx 29, Σx 25, d 29;
y 44 bits, from exact bounds (hw.params), so no sum can wrap.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.params import NIBBLE_BITS, ChipParams, require_instance


def in_layout(p: ChipParams) -> StructLayout:
    """Payload of one input beat; field order fixes the bit offsets (first field at bit 0)."""
    return StructLayout({
        "q": unsigned(8 * p.mac_lanes),                         # byte c = column c, rows 2r|2r+1
        "x": ArrayLayout(signed(p.act_bits), 2),                # x[2r], x[2r+1]
        "s": ArrayLayout(signed(p.scale_bits), p.mac_lanes),    # Q3.12 group scale per column
        "z": ArrayLayout(unsigned(p.zero_bits), p.mac_lanes),   # group zero point per column
        "first": unsigned(1),
        "last_in_group": unsigned(1),
        "last": unsigned(1),
    })


def out_layout(p: ChipParams) -> StructLayout:
    return StructLayout({"y": ArrayLayout(signed(p.out_bits), p.mac_lanes)})


class DequantMacLanes(wiring.Component):
    """``mac_lanes`` INT4 dequant-MAC lanes with a shared Σx accumulator (see module docstring)."""

    LATENCY = 5

    def __init__(self, params: ChipParams):
        require_instance(self, params, ChipParams)
        self.params = params
        super().__init__({
            "i": In(stream.Signature(in_layout(params))),
            "o": Out(stream.Signature(out_layout(params))),
        })

    def elaborate(self, platform):
        m = Module()
        p, lanes = self.params, self.params.mac_lanes
        ip = self.i.payload

        adv = Signal()          # the whole pipeline moves one step this cycle
        m.d.comb += [adv.eq(~self.o.valid | self.o.ready), self.i.ready.eq(adv)]

        # S1: per-beat products; data registers load unconditionally, v1 says whether they hold a beat.
        v1, first1, end1, last1 = Signal(), Signal(), Signal(), Signal()
        qx1 = [Signal(signed(p.beat_qx_bits), name=f"qx1_{c}") for c in range(lanes)]
        sx1 = Signal(signed(p.beat_x_bits))
        s1 = Signal(ArrayLayout(signed(p.scale_bits), lanes))
        z1 = Signal(ArrayLayout(unsigned(p.zero_bits), lanes))
        with m.If(adv):
            m.d.sync += [v1.eq(self.i.valid), first1.eq(ip.first), end1.eq(ip.last_in_group | ip.last),
                         last1.eq(ip.last), sx1.eq(ip.x[0] + ip.x[1]), s1.eq(ip.s), z1.eq(ip.z)]
            for c in range(lanes):
                q_lo = ip.q[8 * c:8 * c + NIBBLE_BITS]              # row 2r
                q_hi = ip.q[8 * c + NIBBLE_BITS:8 * c + 8]          # row 2r+1
                m.d.sync += qx1[c].eq(q_lo * ip.x[0] + q_hi * ip.x[1])

        # S2: group sums. `fresh` = the previous beat closed a group, so this one starts the next.
        fresh, done2, gfirst2, last2 = Signal(init=1), Signal(), Signal(), Signal()
        acc_qx = [Signal(signed(p.group_qx_bits), name=f"acc_qx_{c}") for c in range(lanes)]
        acc_x = Signal(signed(p.group_x_bits))
        s2 = Signal.like(s1)
        z2 = Signal.like(z1)
        start = Signal()
        m.d.comb += start.eq(fresh | first1)
        with m.If(adv):
            m.d.sync += done2.eq(v1 & end1)
            with m.If(v1):
                m.d.sync += [acc_x.eq(Mux(start, 0, acc_x) + sx1), fresh.eq(end1), last2.eq(last1),
                             s2.eq(s1), z2.eq(z1)]
                m.d.sync += [acc_qx[c].eq(Mux(start, 0, acc_qx[c]) + qx1[c]) for c in range(lanes)]
                with m.If(start):
                    m.d.sync += gfirst2.eq(first1)

        # S3: zero point once per group.
        v3, first3, last3 = Signal(), Signal(), Signal()
        d3 = [Signal(signed(p.group_d_bits), name=f"d3_{c}") for c in range(lanes)]
        s3 = Signal.like(s1)
        with m.If(adv):
            m.d.sync += [v3.eq(done2), first3.eq(gfirst2), last3.eq(last2), s3.eq(s2)]
            m.d.sync += [d3[c].eq(acc_qx[c] - z2[c] * acc_x) for c in range(lanes)]

        # S4: scale once per group; the widest multiply gets a cycle of its own (timing cut).
        v4, first4, last4 = Signal(), Signal(), Signal()
        sd4 = [Signal(signed(p.out_bits), name=f"sd4_{c}") for c in range(lanes)]
        with m.If(adv):
            m.d.sync += [v4.eq(v3), first4.eq(first3), last4.eq(last3)]
            m.d.sync += [sd4[c].eq(s3[c] * d3[c]) for c in range(lanes)]

        # S5: output accumulator across groups; it is also the output register.
        y = self.o.payload.y
        with m.If(adv):
            m.d.sync += self.o.valid.eq(v4 & last4)
            with m.If(v4):
                m.d.sync += [y[c].eq(Mux(first4, 0, y[c]) + sd4[c]) for c in range(lanes)]
        return m
