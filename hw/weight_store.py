"""The weight store: every tensor of the image on chip, in ``banks`` msh_sram banks of 16 B beats.

Addressing. The loader streams the image's tensor block (from the first tensor's address to the end
of the last one, SPEC §4.2 order) into the store; store beat index ``w = (byte_addr − tensor_base) / 16``.
Beat ``w`` lives in bank ``w % banks`` at row ``w // banks`` (``banks`` is a power of two, so both are
bit slices), hence any ``banks`` consecutive beats sit in different banks and are read in one cycle.

Unaligned reads. A read of ``banks`` beats may start at any beat: bank ``b`` reads row
``start // banks + (b < start % banks)`` and the outputs are rotated by ``start % banks`` so that
``data[j]`` is beat ``start + j`` (a ``banks``:1 mux per beat slot after the macros' output registers;
the rotation amount is registered with the read, so the data and its order hold together while the
read port is idle). Beats past the end of the store read whatever the macro returns (callers mask).

Ports.
* ``w`` (In stream ``{beat, data}``): one 16 B beat per cycle from the loader; always ready.
* ``r`` (``WeightReadPort``, the MAC array's raw port): ``en``/``beat`` issue a read of ``banks`` beats
  from ``beat``; ``data`` holds them from the next cycle until the next read (any master's).
  ``lock`` = the MAC array owns the macros' read ports (it may keep un-consumed data in the macro
  output registers while it stalls), so the stream reader below issues nothing while it is high.
* ``i`` (In stream ``{start, count}``) / ``o`` (Out stream ``{data, last}``): the stream reader for
  small int16 parameters (norm weights, conv taps, biases, A, dtb) and anything else read as beats:
  ``count`` beats from ``start`` come out ``banks`` per transfer (the last transfer may carry up to
  ``banks − 1`` beats past ``count``: don't-care); ``last`` marks the final transfer; ``count = 0``
  is consumed and produces nothing. Full rate (one transfer per cycle) under no back-pressure: a
  2-entry output queue with credit accounting (a read is issued only if its data has a free slot).

Latency: ``r`` data one cycle after ``en``; ``o`` valid two cycles after a command is taken.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import ClockSignal, Const, Instance, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import ArrayLayout, StructLayout
from amaranth.lib.wiring import In, Out

from hw.mem_engine import SPEC_BEAT_BITS
from hw.params import require_instance

BEAT_BYTES = SPEC_BEAT_BITS // 8      # SPEC §1/§3 memory beat; one msh_sram word
BEAT_BITS = 8 * BEAT_BYTES


def _pow2(name: str, value: object, lo: int, hi: int) -> None:
    if (not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi
            or value & (value - 1)):
        raise ValueError(f"{name} must be a power of two in {lo}..{hi}, got {value!r}")


@dataclass(frozen=True)
class WeightStoreParams:
    """``banks`` msh_sram banks of ``BEAT_BITS``; ``beats`` = capacity (the build's largest tensor block)."""

    banks: int = 4
    beats: int = 8494          # nano at group 64: 135,904 B of tensors (the larger of the two group sizes)

    def __post_init__(self) -> None:
        _pow2("banks", self.banks, 1, 64)
        if not isinstance(self.beats, int) or isinstance(self.beats, bool) or not 2 <= self.beats <= 1 << 24:
            raise ValueError(f"beats must be an integer in 2..{1 << 24}, got {self.beats!r}")

    @property
    def bank_shift(self) -> int:
        return self.banks.bit_length() - 1

    @property
    def depth(self) -> int:
        """Rows per bank (msh_sram DEPTH), at least 2 (SPEC §5 model minimum)."""
        return max(2, -(-self.beats // self.banks))

    @property
    def row_bits(self) -> int:
        return max(1, (self.depth - 1).bit_length())

    @property
    def beat_bits(self) -> int:
        """Bits of a beat index: rows × banks addresses (a read may start at any stored beat)."""
        return self.row_bits + self.bank_shift

    @property
    def sram_bits(self) -> int:
        return self.banks * self.depth * BEAT_BITS


def write_layout(p: WeightStoreParams) -> StructLayout:
    return StructLayout({"beat": unsigned(p.beat_bits), "data": unsigned(BEAT_BITS)})


def read_cmd_layout(p: WeightStoreParams) -> StructLayout:
    return StructLayout({"start": unsigned(p.beat_bits), "count": unsigned(p.beat_bits + 1)})


def read_data_layout(p: WeightStoreParams) -> StructLayout:
    return StructLayout({"data": ArrayLayout(unsigned(BEAT_BITS), p.banks), "last": unsigned(1)})


class WeightReadPort(wiring.Signature):
    """Raw read port of the store, seen from its master (the MAC array)."""

    def __init__(self, p: WeightStoreParams):
        self.p = p
        super().__init__({
            "en": Out(1),
            "beat": Out(p.beat_bits),
            "lock": Out(1),
            "data": In(ArrayLayout(unsigned(BEAT_BITS), p.banks)),
        })

    def __eq__(self, other):
        return isinstance(other, WeightReadPort) and other.p == self.p

    def __repr__(self):
        return f"WeightReadPort({self.p!r})"


class WeightStore(wiring.Component):
    """Banked on-chip tensor storage (see the module docstring)."""

    def __init__(self, params: WeightStoreParams):
        require_instance(self, params, WeightStoreParams)
        self.params = params
        super().__init__({
            "w": In(stream.Signature(write_layout(params))),
            "r": In(WeightReadPort(params)),
            "i": In(stream.Signature(read_cmd_layout(params))),
            "o": Out(stream.Signature(read_data_layout(params))),
        })

    def elaborate(self, platform):
        m = Module()
        p = self.params
        nb, sh = p.banks, p.bank_shift

        # Read issue: the MAC array's raw port, else the stream reader.
        re, rbeat = Signal(), Signal(p.beat_bits)
        rd_issue, rd_beat = Signal(), Signal(p.beat_bits)
        m.d.comb += [re.eq(self.r.en | rd_issue), rbeat.eq(Mux(self.r.en, self.r.beat, rd_beat))]
        base_row, lo = rbeat[sh:], rbeat[:sh] if sh else Const(0, 1)
        rot = Signal(max(1, sh))                     # start % banks of the data now in the macros
        with m.If(re):
            m.d.sync += rot.eq(lo)

        bank_out = []
        m.d.comb += self.w.ready.eq(1)
        wbank = self.w.payload.beat[:sh] if sh else Const(0, 1)
        for b in range(nb):
            raddr, rdata = Signal(p.row_bits, name=f"bank{b}_raddr"), Signal(BEAT_BITS, name=f"bank{b}_rdata")
            m.d.comb += raddr.eq(base_row + (lo > b) if sh else base_row)
            m.submodules[f"bank{b}"] = Instance(
                "msh_sram", p_DEPTH=p.depth, p_WIDTH=BEAT_BITS, p_ADDRW=p.row_bits,
                i_clk=ClockSignal(), i_we=self.w.valid & (wbank == b), i_waddr=self.w.payload.beat[sh:],
                i_wdata=self.w.payload.data, i_wstrb=Const((1 << BEAT_BYTES) - 1, BEAT_BYTES),
                i_re=re, i_raddr=raddr, o_rdata=rdata)
            bank_out.append(rdata)
        for j in range(nb):
            if nb == 1:
                m.d.comb += self.r.data[j].eq(bank_out[0])
            else:
                with m.Switch(rot):
                    for r in range(nb):
                        with m.Case(r):
                            m.d.comb += self.r.data[j].eq(bank_out[(r + j) % nb])

        # Stream reader: command register, 2-entry output queue with credits.
        busy = Signal()
        left = Signal(p.beat_bits + 1)              # beats still to read of the current command
        m.d.comb += self.i.ready.eq(~busy)
        with m.If(self.i.valid & ~busy & (self.i.payload.count != 0)):
            m.d.sync += [busy.eq(1), rd_beat.eq(self.i.payload.start), left.eq(self.i.payload.count)]

        q_data = [Signal(ArrayLayout(unsigned(BEAT_BITS), nb), name=f"rq{k}_data") for k in range(2)]
        q_last = [Signal(name=f"rq{k}_last") for k in range(2)]
        occ = Signal(range(3))
        inflight, inflight_last = Signal(), Signal()
        pop = Signal()
        m.d.comb += [pop.eq(self.o.valid & self.o.ready), self.o.valid.eq(occ != 0),
                     self.o.payload.data.eq(q_data[0]), self.o.payload.last.eq(q_last[0])]
        room = Signal()
        m.d.comb += [room.eq(occ + inflight - pop < 2),
                     rd_issue.eq(busy & ~self.r.lock & ~self.r.en & room)]
        is_last = Signal()
        m.d.comb += is_last.eq(left <= nb)
        m.d.sync += [inflight.eq(rd_issue), inflight_last.eq(is_last)]
        with m.If(rd_issue):
            m.d.sync += [rd_beat.eq(rd_beat + nb), left.eq(left - nb)]
            with m.If(is_last):
                m.d.sync += busy.eq(0)
        # queue: entry 0 is the head; pushes go to the first free entry after the pop
        occ_after_pop = Signal(range(3))
        m.d.comb += occ_after_pop.eq(occ - pop)
        with m.If(pop):
            m.d.sync += [q_data[0].eq(q_data[1]), q_last[0].eq(q_last[1])]
        with m.If(inflight):
            with m.If(occ_after_pop == 0):
                m.d.sync += [q_data[0].eq(self.r.data), q_last[0].eq(inflight_last)]
            with m.Else():
                m.d.sync += [q_data[1].eq(self.r.data), q_last[1].eq(inflight_last)]
        m.d.sync += occ.eq(occ_after_pop + inflight)
        return m
