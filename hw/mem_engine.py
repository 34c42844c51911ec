"""The memory engine: the chip's only master on the SPEC §1/§3 memory port.

Read side. ``rd_cmd`` takes read ranges ``{addr, length}`` (bytes). The start address must be a
multiple of 16 and is passed through unchanged, so a misaligned start shows up as an address error
at the memory port (SPEC §3: the run fails) instead of being silently rounded. The length is rounded
up to whole 16 B beats; a zero-length range is consumed and issues nothing (no beat, no ``last``).
One read request per cycle goes out on the shared request channel; ``o`` delivers the read beats in
request order, ``last`` marking the final beat of each range, and honours back-pressure.

Reads in flight. The response buffer has ``max_inflight`` slots. A slot is reserved when a read is
loaded into the request register (its ``last`` flag is written then), filled when the response
arrives, and freed when ``o`` hands the beat on. A read is only issued while a slot is free, so the
buffer can never overflow and ``mem_rsp_ready`` never has to drop for lack of space; it is high
whenever a read is outstanding. Streaming at one beat per cycle, SPEC §3 latency tends to base + J
(responses cannot overtake each other) and a slot is busy for that plus ~2 cycles here, so
measured with 64 slots (verification/test_mem_engine.py, 4096-beat range, no stalls):
base 24 / J 12: 0.990 beats/cycle (0.997 steady state), first beat 29 cycles after the command;
base 48 / J 24: 0.857 beats/cycle (0.870 ≈ 64/74 steady state), the informational elasticity run.
Full rate needs about max(base + J) + 2 slots: 38 at base 24, 74 at base 48 (by that estimate, not
measured). Trade-off: the slots are flops today (64 × 129 ≈ 8.3 k flops, ≈0.04 mm² of Nangate45
DFF_X1 alone plus the 64:1 read mux, against ≈0.008 mm² for the same bits as an ``msh_sram`` at the
SPEC §5 price), so any depth above a few entries should become an ``msh_sram`` plus a one-entry
output prefetch register; that is also when raising the depth to 128 for the base-48 run is cheap.

Write side. ``wr`` takes write beats ``{addr, data, strb}`` (logits rows, argmax words, the status
word) and sends them in stream order. Reads and writes share the request register. Arbitration is
round-robin over the last grant: when both sides want the register, the side that did not get the
previous grant wins, so under contention they alternate (writes get half the port while reads
stream, reads are never starved by a write burst); an uncontested side takes every cycle. There is
no ordering between the two streams: a client that reads back what it wrote must wait for
``writes_drained`` first.

Request register. ``mem_req_*`` come straight from flops that only load when the register is empty
or being accepted, so valid, address, data and strobes are held while ``mem_req_ready`` is low
(SPEC §3) and one request per cycle still flows.

Status. ``writes_drained``: no write beat is offered on ``wr`` and none waits in the request
register, i.e. every write taken so far has been accepted by the memory port (the sequencer raises
DONE only then, SPEC §2). ``idle``: additionally no read range is offered, active or in flight.
``rd_beats`` / ``wr_beats`` count requests accepted by the port (wrapping, for profiling).
"""
from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.data import StructLayout
from amaranth.lib.wiring import In, Out

SPEC_ADDR_WIDTH = 36       # SPEC §1 mem_req_addr
SPEC_BEAT_BITS = 128       # SPEC §1/§3: one 16 B beat per request


class MemPortSignature(wiring.Signature):
    """The SPEC §1 memory port, seen from the chip (requests out, responses in).

    Flattened by ``verilog.convert`` the members are named ``<member>__req_valid``...; the chip top
    exposes them under the SPEC names in ``SPEC_NAMES`` (``req_valid`` -> ``mem_req_valid``).
    """

    SPEC_NAMES = {name: f"mem_{name}" for name in (
        "req_valid", "req_ready", "req_write", "req_addr", "req_wdata", "req_wstrb",
        "rsp_valid", "rsp_ready", "rsp_rdata")}

    def __init__(self, addr_width: int = SPEC_ADDR_WIDTH, beat_bits: int = SPEC_BEAT_BITS):
        self.addr_width, self.beat_bits = addr_width, beat_bits
        super().__init__({
            "req_valid": Out(1),
            "req_ready": In(1),
            "req_write": Out(1),
            "req_addr": Out(addr_width),
            "req_wdata": Out(beat_bits),
            "req_wstrb": Out(beat_bits // 8),
            "rsp_valid": In(1),
            "rsp_ready": Out(1),
            "rsp_rdata": In(beat_bits),
        })

    def __eq__(self, other):
        return (isinstance(other, MemPortSignature) and other.addr_width == self.addr_width
                and other.beat_bits == self.beat_bits)

    def __repr__(self):
        return f"MemPortSignature({self.addr_width}, {self.beat_bits})"


def read_range_layout(addr_width: int, len_width: int) -> StructLayout:
    """``rd_cmd`` payload: byte address (multiple of 16) at bit 0, byte length above it."""
    return StructLayout({"addr": unsigned(addr_width), "length": unsigned(len_width)})


def read_beat_layout(beat_bits: int) -> StructLayout:
    """``o`` payload: one beat (byte i = bits 8i+7..8i), ``last`` = final beat of its range."""
    return StructLayout({"data": unsigned(beat_bits), "last": unsigned(1)})


def write_beat_layout(addr_width: int, beat_bits: int) -> StructLayout:
    """``wr`` payload: byte address (multiple of 16), beat data, per-byte write enables."""
    return StructLayout({"addr": unsigned(addr_width), "data": unsigned(beat_bits),
                         "strb": unsigned(beat_bits // 8)})


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in {lo}..{hi}, got {value!r}")


class MemEngine(wiring.Component):
    """Read ranges and write beats onto the one SPEC memory port (see the module docstring).

    Parameters: ``addr_width`` (36, SPEC §1), ``beat_bits`` (128, SPEC §1), ``max_inflight``
    (response-buffer slots = reads in flight, a power of two, default 64), ``len_width`` (bits of a
    range's byte length, default 24: ranges up to 16 MiB − 1), ``counter_width`` (beat counters).
    """

    COUNTER_WIDTH = 32
    # Pipeline depths (no stalls): a range taken on ``rd_cmd`` in cycle c loads the range walker, whose first
    # read enters the request register at the end of c + 1: on the port in c + 2. A response taken in cycle c
    # is written to its slot and offered on ``o`` in c + 1.
    REQ_LATENCY = 2
    RSP_LATENCY = 1

    def __init__(self, *, addr_width: int = SPEC_ADDR_WIDTH, beat_bits: int = SPEC_BEAT_BITS,
                 max_inflight: int = 64, len_width: int = 24, counter_width: int = COUNTER_WIDTH):
        try:
            self._validate(addr_width, beat_bits, max_inflight, len_width, counter_width)
        except ValueError:
            self._MustUse__silence = True       # rejected, so never elaborated: no "unused" warning
            raise
        self.beat_bytes = beat_bits // 8
        self.beat_shift = self.beat_bytes.bit_length() - 1
        self.addr_width, self.beat_bits = addr_width, beat_bits
        self.max_inflight, self.len_width, self.counter_width = max_inflight, len_width, counter_width
        super().__init__({
            "mem": Out(MemPortSignature(addr_width, beat_bits)),
            "rd_cmd": In(stream.Signature(read_range_layout(addr_width, len_width))),
            "o": Out(stream.Signature(read_beat_layout(beat_bits))),
            "wr": In(stream.Signature(write_beat_layout(addr_width, beat_bits))),
            "writes_drained": Out(1),
            "idle": Out(1),
            "rd_beats": Out(counter_width),
            "wr_beats": Out(counter_width),
        })
        # Not ports: visible to simulator tests (credit accounting).
        self.rd_inflight = Signal(range(max_inflight + 1))   # reserved slots (issued, not yet handed on)

    @staticmethod
    def _validate(addr_width, beat_bits, max_inflight, len_width, counter_width) -> None:
        _check_int("beat_bits", beat_bits, 8, 1024)
        if beat_bits & (beat_bits - 1):
            raise ValueError(f"beat_bits must be a power of two number of bits ≥ 8, got {beat_bits}")
        shift = (beat_bits // 8).bit_length() - 1
        _check_int("addr_width", addr_width, shift + 1, 64)
        _check_int("max_inflight", max_inflight, 2, 1024)
        if max_inflight & (max_inflight - 1):
            raise ValueError(f"max_inflight must be a power of two (wrapping slot pointers), got {max_inflight}")
        _check_int("len_width", len_width, shift + 1, addr_width + 1)
        _check_int("counter_width", counter_width, 1, 64)

    @property
    def params(self) -> dict:
        return {"addr_width": self.addr_width, "beat_bits": self.beat_bits, "max_inflight": self.max_inflight,
                "len_width": self.len_width, "counter_width": self.counter_width}

    def elaborate(self, platform):
        m = Module()
        mem, D = self.mem, self.max_inflight
        slot_bits = D.bit_length() - 1
        beats_width = self.len_width - self.beat_shift + 1

        # Request register (SPEC §3 hold): loads only when empty or being accepted.
        req_take = Signal()
        load = Signal()
        m.d.comb += [req_take.eq(mem.req_valid & mem.req_ready), load.eq(~mem.req_valid | mem.req_ready)]

        # Current read range.
        rd_active = Signal()
        rd_addr = Signal(self.addr_width)
        rd_left = Signal(beats_width)           # beats still to issue (≥ 1 while active)

        # Arbitration: alternate when both sides want the register.
        last_was_wr = Signal()
        want_rd = Signal()
        grant_wr, grant_rd = Signal(), Signal()
        m.d.comb += [
            want_rd.eq(rd_active & (self.rd_inflight != D)),
            grant_wr.eq(self.wr.valid & (~want_rd | ~last_was_wr)),
            grant_rd.eq(want_rd & ~grant_wr),
        ]
        rd_issue = Signal()
        m.d.comb += [rd_issue.eq(load & grant_rd), self.wr.ready.eq(load & grant_wr)]

        with m.If(load):
            m.d.sync += mem.req_valid.eq(grant_wr | grant_rd)
            with m.If(grant_wr):
                m.d.sync += [mem.req_write.eq(1), mem.req_addr.eq(self.wr.payload.addr),
                             mem.req_wdata.eq(self.wr.payload.data), mem.req_wstrb.eq(self.wr.payload.strb),
                             last_was_wr.eq(1)]
            with m.Elif(grant_rd):
                m.d.sync += [mem.req_write.eq(0), mem.req_addr.eq(rd_addr), mem.req_wstrb.eq(0),
                             last_was_wr.eq(0)]

        # Range walker; a new range may start in the cycle the previous one issues its last beat.
        m.d.comb += self.rd_cmd.ready.eq(~rd_active | (rd_issue & (rd_left == 1)))
        with m.If(rd_issue):
            m.d.sync += [rd_addr.eq(rd_addr + self.beat_bytes), rd_left.eq(rd_left - 1)]
            with m.If(rd_left == 1):
                m.d.sync += rd_active.eq(0)
        with m.If(self.rd_cmd.valid & self.rd_cmd.ready):
            beats = (self.rd_cmd.payload.length + (self.beat_bytes - 1)) >> self.beat_shift
            m.d.sync += [rd_addr.eq(self.rd_cmd.payload.addr), rd_left.eq(beats), rd_active.eq(beats != 0)]

        # Response buffer: flops for now (see module docstring); slot contents need no reset.
        data_slots = Array(Signal(self.beat_bits, name=f"rsp_data_{k}", reset_less=True) for k in range(D))
        last_slots = Array(Signal(name=f"rsp_last_{k}", reset_less=True) for k in range(D))
        issue_ptr = Signal(slot_bits + 1)       # next slot to reserve
        fill_ptr = Signal(slot_bits + 1)        # next slot to receive a response
        out_ptr = Signal(slot_bits + 1)         # next slot to hand on
        rsp_take, out_take = Signal(), Signal()
        m.d.comb += [
            mem.rsp_ready.eq(fill_ptr != issue_ptr),
            rsp_take.eq(mem.rsp_valid & mem.rsp_ready),
            self.o.valid.eq(out_ptr != fill_ptr),
            self.o.payload.data.eq(data_slots[out_ptr[:slot_bits]]),
            self.o.payload.last.eq(last_slots[out_ptr[:slot_bits]]),
            out_take.eq(self.o.valid & self.o.ready),
        ]
        with m.If(rd_issue):
            m.d.sync += issue_ptr.eq(issue_ptr + 1)
        with m.If(rsp_take):
            m.d.sync += fill_ptr.eq(fill_ptr + 1)
        # One-hot slot write enables (an Array on the left-hand side would emit D case statements of D arms).
        issue_sel, fill_sel = Signal(D), Signal(D)
        m.d.comb += [issue_sel.eq(Const(1, D) << issue_ptr[:slot_bits]),
                     fill_sel.eq(Const(1, D) << fill_ptr[:slot_bits])]
        for k in range(D):
            with m.If(rd_issue & issue_sel[k]):
                m.d.sync += last_slots[k].eq(rd_left == 1)
            with m.If(rsp_take & fill_sel[k]):
                m.d.sync += data_slots[k].eq(mem.rsp_rdata)
        with m.If(out_take):
            m.d.sync += out_ptr.eq(out_ptr + 1)
        with m.If(rd_issue & ~out_take):
            m.d.sync += self.rd_inflight.eq(self.rd_inflight + 1)
        with m.Elif(out_take & ~rd_issue):
            m.d.sync += self.rd_inflight.eq(self.rd_inflight - 1)

        # Status and profiling.
        wr_pending = Signal()
        m.d.comb += [
            wr_pending.eq(self.wr.valid | (mem.req_valid & mem.req_write)),
            self.writes_drained.eq(~wr_pending),
            self.idle.eq(~wr_pending & ~mem.req_valid & ~rd_active & ~self.rd_cmd.valid
                         & ~self.rd_inflight.any()),
        ]
        with m.If(req_take & mem.req_write):
            m.d.sync += self.wr_beats.eq(self.wr_beats + 1)
        with m.If(req_take & ~mem.req_write):
            m.d.sync += self.rd_beats.eq(self.rd_beats + 1)
        return m
