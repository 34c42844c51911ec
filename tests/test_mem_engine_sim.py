"""Fast Amaranth-simulator tests of hw.mem_engine: request hold, credit accounting, arbitration.

One Python loop per test plays memory and clients: each cycle it drives inputs, samples the settled
handshakes (what the next clock edge will take) and ticks. Seeds are fixed and printed.
"""
from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hw.mem_engine import MemEngine

BEAT = 16


def ref_read_beats(image: bytes, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(data, last) of every beat the engine must deliver for ``ranges`` (length rounded up to beats)."""
    out = []
    for addr, length in ranges:
        n = -(-length // BEAT)
        for k in range(n):
            a = addr + BEAT * k
            out.append((int.from_bytes(image[a:a + BEAT], "little"), int(k == n - 1)))
    return out


class SimMemory:
    """A minimal SPEC §3 memory inside the Amaranth testbench loop (fixed latency, ready drops)."""

    def __init__(self, dut: MemEngine, image: bytearray, *, latency: int, drop: float, rng: random.Random):
        self.dut, self.image, self.latency, self.drop, self.rng = dut, image, latency, drop, rng
        self.pending: list[tuple[int, int]] = []     # (available cycle, data)
        self.held = None                              # request seen valid & not ready last cycle
        self.writes: list[tuple[int, int, int]] = []
        self.accepted = 0

    def drive(self, ctx, cycle: int) -> None:
        mem = self.dut.mem
        ctx.set(mem.req_ready, int(self.rng.random() >= self.drop))
        head = self.pending[0] if self.pending and self.pending[0][0] <= cycle else None
        ctx.set(mem.rsp_valid, int(head is not None))
        ctx.set(mem.rsp_rdata, head[1] if head else 0)

    def sample(self, ctx, cycle: int) -> None:
        mem = self.dut.mem
        req = tuple(ctx.get(s) for s in (mem.req_valid, mem.req_write, mem.req_addr, mem.req_wdata, mem.req_wstrb))
        if self.held is not None:
            assert req == self.held, f"cycle {cycle}: request changed while not accepted: {self.held} -> {req}"
        valid, write, addr, wdata, wstrb = req
        ready = ctx.get(mem.req_ready)
        self.held = req if valid and not ready else None
        if valid and ready:
            self.accepted += 1
            assert addr % BEAT == 0 and addr + BEAT <= len(self.image), f"cycle {cycle}: bad address {addr:#x}"
            if write:
                self.writes.append((addr, wdata, wstrb))
                for i in range(BEAT):
                    if wstrb >> i & 1:
                        self.image[addr + i] = wdata >> (8 * i) & 0xFF
            else:
                t = max(cycle + self.latency, self.pending[-1][0] + 1 if self.pending else 0)
                self.pending.append((t, int.from_bytes(self.image[addr:addr + BEAT], "little")))
        if ctx.get(mem.rsp_valid) and ctx.get(mem.rsp_ready):
            self.pending.pop(0)


def run(dut: MemEngine, testbench) -> None:
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()


@pytest.mark.parametrize("drop", [0.0, 0.3], ids=["no-drop", "drop30"])
def test_reads_in_order_and_request_held(drop):
    seed = 11 if drop else 7
    print(f"seed {seed}")
    rng = random.Random(seed)
    dut = MemEngine(max_inflight=8, len_width=12)
    image = bytearray(rng.randbytes(4096))
    ranges = [(BEAT * rng.randrange(0, 200), rng.choice([1, 16, 17, 48, 100, 256])) for _ in range(12)]
    ranges.append((0, 0))                      # zero length: consumed, no beats
    ranges.append((4096 - BEAT, BEAT))         # last beat of memory
    expect = ref_read_beats(image, ranges)
    got: list[tuple[int, int]] = []

    async def tb(ctx):
        memory = SimMemory(dut, image, latency=6, drop=drop, rng=rng)
        todo = list(ranges)
        for cycle in range(4000):
            memory.drive(ctx, cycle)
            ctx.set(dut.rd_cmd.valid, int(bool(todo)))
            if todo:
                ctx.set(dut.rd_cmd.payload, {"addr": todo[0][0], "length": todo[0][1]})
            ctx.set(dut.o.ready, int(rng.random() < 0.7))
            memory.sample(ctx, cycle)
            assert ctx.get(dut.rd_inflight) <= dut.max_inflight
            if todo and ctx.get(dut.rd_cmd.ready):
                todo.pop(0)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                beat = ctx.get(dut.o.payload)
                got.append((beat.data, beat.last))
            await ctx.tick()
            if not todo and len(got) == len(expect):
                break
        assert ctx.get(dut.idle), "engine not idle after every beat was delivered"
        assert ctx.get(dut.rd_beats) == len(expect)

    run(dut, tb)
    for k, (g, e) in enumerate(zip(got, expect)):
        assert g == e, f"beat {k}: got data {g[0]:#034x} last {g[1]}, expected {e[0]:#034x} last {e[1]}"
    assert len(got) == len(expect), f"{len(got)} beats delivered, expected {len(expect)}"


def test_credits_bound_reads_in_flight():
    """With responses withheld exactly max_inflight reads go out; each beat handed on frees one credit."""
    dut = MemEngine(max_inflight=4, len_width=12)
    D = dut.max_inflight

    async def tb(ctx):
        ctx.set(dut.mem.req_ready, 1)
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.rd_cmd.payload, {"addr": 0x100, "length": 10 * BEAT})
        ctx.set(dut.rd_cmd.valid, 1)
        await ctx.tick()
        ctx.set(dut.rd_cmd.valid, 0)
        accepted = []
        for _ in range(20):                                 # no responses: issue must stop at D
            if ctx.get(dut.mem.req_valid) and ctx.get(dut.mem.req_ready):
                accepted.append(ctx.get(dut.mem.req_addr))
            await ctx.tick()
        assert accepted == [0x100 + BEAT * k for k in range(D)], accepted
        assert ctx.get(dut.rd_inflight) == D
        assert ctx.get(dut.mem.rsp_ready) == 1              # room is reserved for every outstanding read
        for k in range(D):                                  # all responses arrive, nobody takes them
            ctx.set(dut.mem.rsp_valid, 1)
            ctx.set(dut.mem.rsp_rdata, 1000 + k)
            await ctx.tick()
        ctx.set(dut.mem.rsp_valid, 0)
        for _ in range(5):
            assert not ctx.get(dut.mem.req_valid), "read issued without a free slot"
            assert ctx.get(dut.mem.rsp_ready) == 0          # nothing outstanding
            await ctx.tick()
        assert ctx.get(dut.rd_inflight) == D
        ctx.set(dut.o.ready, 1)                             # hand on one beat -> exactly one new read
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload).data == 1000
        await ctx.tick()
        ctx.set(dut.o.ready, 0)
        assert ctx.get(dut.rd_inflight) == D - 1
        await ctx.tick()
        assert ctx.get(dut.mem.req_valid) and ctx.get(dut.mem.req_addr) == 0x100 + BEAT * D
        await ctx.tick()
        assert ctx.get(dut.rd_inflight) == D and not ctx.get(dut.mem.req_valid)
        assert ctx.get(dut.rd_beats) == D + 1

    run(dut, tb)


def test_arbitration_alternates_and_writes_drain():
    """Both sides busy: grants alternate; writes go out in stream order; writes_drained after the last."""
    dut = MemEngine(max_inflight=16, len_width=12)
    writes = [(0x800 + BEAT * k, 0x1111 * (k + 1), 0xFFFF >> k) for k in range(6)]

    async def tb(ctx):
        ctx.set(dut.mem.req_ready, 1)
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.rd_cmd.payload, {"addr": 0, "length": 20 * BEAT})
        ctx.set(dut.rd_cmd.valid, 1)
        await ctx.tick()
        ctx.set(dut.rd_cmd.valid, 0)
        todo, kinds, seen = list(writes), [], []
        for cycle in range(40):
            ctx.set(dut.wr.valid, int(bool(todo)))
            if todo:
                ctx.set(dut.wr.payload, {"addr": todo[0][0], "data": todo[0][1], "strb": todo[0][2]})
            if ctx.get(dut.mem.req_valid):
                kinds.append("w" if ctx.get(dut.mem.req_write) else "r")
                if ctx.get(dut.mem.req_write):
                    seen.append((ctx.get(dut.mem.req_addr), ctx.get(dut.mem.req_wdata), ctx.get(dut.mem.req_wstrb)))
            if todo and ctx.get(dut.wr.ready):
                todo.pop(0)
            drained = ctx.get(dut.writes_drained)
            await ctx.tick()
            if len(seen) == len(writes):
                break
        assert seen == writes
        contested = "".join(kinds)                           # up to the last write, reads always wanted
        assert contested == "wr" * (len(writes) - 1) + "w", f"grants not alternating: {contested}"
        assert not drained                                   # the last write was still in the register
        assert ctx.get(dut.writes_drained)                   # accepted on the last edge
        assert ctx.get(dut.wr_beats) == len(writes)

    run(dut, tb)


@pytest.mark.parametrize("kwargs", [
    {"max_inflight": 48}, {"max_inflight": 1}, {"beat_bits": 96}, {"addr_width": 3},
    {"len_width": 2}, {"len_width": 40}, {"counter_width": 0}, {"max_inflight": True},
], ids=lambda k: "-".join(f"{a}{b}" for a, b in k.items()))
def test_bad_parameters_rejected(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        MemEngine(**kwargs)
