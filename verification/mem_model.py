"""The SPEC_NANO_KPU.md §3 memory, as a cocotb model of the far side of the chip's memory port.

It knows nothing of the chip's internals: give it the DUT handle, the clock and the port prefix
(``"mem_"`` for ``msh_chip_top``, ``"mem__"`` for a block whose port is a signature member ``mem``).

Per clock cycle ``k`` (cycle counter = rising edges seen since ``start()``):
* after edge k the model drives ``mem_req_ready`` (low with probability ``ready_drop``) and, if the
  oldest pending read is due (its time ≤ k), ``mem_rsp_valid``/``mem_rsp_rdata``;
* in the read-only phase of cycle k it samples the settled port, i.e. exactly what edge k+1 takes:
  - a request with valid & ready is accepted "at cycle k". A read copies its beat from memory now
    (so writes take effect in acceptance order) and is due at
    ``max(k + base + jitter, due time of the previous read + 1)``, jitter uniform in [0, J];
    any number of reads may be outstanding. A write is applied at once, byte i when ``wstrb[i]``;
  - a misaligned address or a beat not wholly inside memory counts an address error; such a read
    returns zeros and such a write is dropped;
  - a request seen with valid & ~ready must reappear unchanged (valid, write, addr, wdata, wstrb)
    in the next cycle (SPEC §3); a change raises ``MemProtocolError`` at once;
  - a response with valid & ready leaves the queue; otherwise it is presented again (data waits).
Memory is a bytearray of the image size rounded up to 16. Jitter and ready drops come from two
``random.Random`` streams seeded by 64-bit FNV-1a of ``"{seed}/{config}/{prompt_index}/{stream}"``.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import ReadOnly, RisingEdge

from nano_k3.mem_timing import LONG_RUN, Timing

BEAT = 16
FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3


def fnv1a64(data: bytes) -> int:
    h = FNV64_OFFSET
    for b in data:
        h = ((h ^ b) * FNV64_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def stream_seed(seed: int, config: str, prompt_index: int, stream: str) -> int:
    """Seed of one pseudo-random stream ("jitter" or "ready") of a run (SPEC §3)."""
    return fnv1a64(f"{seed}/{config}/{prompt_index}/{stream}".encode())


class MemProtocolError(AssertionError):
    """The chip broke the memory-port handshake (SPEC §3)."""


@dataclass
class MemStats:
    """Per-run statistics (SPEC §3) plus the write log."""

    cycles: int = 0
    read_beats: int = 0
    write_beats: int = 0
    addr_errors: int = 0
    stall_cycles: int = 0          # cycles with mem_req_ready low (injected stalls)
    req_blocked_cycles: int = 0    # cycles a request waited on a low mem_req_ready
    rsp_stall_cycles: int = 0      # cycles a response waited on a low mem_rsp_ready
    writes: list[tuple[int, int, int, int]] = field(default_factory=list)   # (cycle, addr, wdata, wstrb)

    def as_dict(self) -> dict:
        return {"cycles": self.cycles, "read_beats": self.read_beats, "write_beats": self.write_beats,
                "addr_errors": self.addr_errors, "stall_cycles": self.stall_cycles,
                "req_blocked_cycles": self.req_blocked_cycles, "rsp_stall_cycles": self.rsp_stall_cycles}


class MemoryModel:
    """SPEC §3 memory attached to ``dut``'s memory port (see the module docstring)."""

    PORTS = ("req_valid", "req_ready", "req_write", "req_addr", "req_wdata", "req_wstrb",
             "rsp_valid", "rsp_ready", "rsp_rdata")

    def __init__(self, dut, clk, image: bytes, *, timing: Timing = LONG_RUN, seed: int = 0,
                 config: str = "nano", prompt_index: int = 0, prefix: str = "mem_"):
        self.clk = clk
        self.timing = timing
        self.mem = bytearray(image) + bytes(-len(image) % BEAT)
        self.p = {name: getattr(dut, prefix + name) for name in self.PORTS}
        self.jitter_rng = random.Random(stream_seed(seed, config, prompt_index, "jitter"))
        self.ready_rng = random.Random(stream_seed(seed, config, prompt_index, "ready"))
        self.stats = MemStats()
        self.pending: deque[tuple[int, int]] = deque()     # (due cycle, data) of accepted reads, in order
        self.last_due = -1
        self.latencies: list[int] = []                      # acceptance -> due, per read (for reports)
        self._task = None

    # Memory access (also for the test: load inputs, read back outputs) ----------------------------
    def in_range(self, addr: int) -> bool:
        return addr % BEAT == 0 and 0 <= addr and addr + BEAT <= len(self.mem)

    def read_beat(self, addr: int) -> int:
        return int.from_bytes(self.mem[addr:addr + BEAT], "little")

    def write_beat(self, addr: int, data: int, strb: int) -> None:
        for i in range(BEAT):
            if strb >> i & 1:
                self.mem[addr + i] = data >> (8 * i) & 0xFF

    # Running ------------------------------------------------------------------------------------
    def start(self) -> None:
        """Drive idle outputs now and serve the port every cycle from here on.

        Call it once reset has been released: before that the chip's flops may hold anything
        (random-reset runs) and nothing on the port is a request.
        """
        self.p["req_ready"].value = 0
        self.p["rsp_valid"].value = 0
        self.p["rsp_rdata"].value = 0
        self._task = cocotb.start_soon(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        p, st = self.p, self.stats
        held = None
        cycle = 0
        while True:
            await RisingEdge(self.clk)
            cycle += 1
            st.cycles = cycle
            ready = self.ready_rng.random() >= self.timing.ready_drop
            p["req_ready"].value = int(ready)
            due = bool(self.pending) and self.pending[0][0] <= cycle
            p["rsp_valid"].value = int(bool(due))
            if due:
                p["rsp_rdata"].value = self.pending[0][1]
            await ReadOnly()
            if not ready:
                st.stall_cycles += 1
            valid = int(p["req_valid"].value)
            req = None
            if valid:
                req = (int(p["req_write"].value), int(p["req_addr"].value),
                       int(p["req_wdata"].value), int(p["req_wstrb"].value))
            if held is not None and req != held:
                raise MemProtocolError(
                    f"cycle {cycle}: request changed while mem_req_ready was low: "
                    f"held (write, addr, wdata, wstrb) = {_fmt(held)}, now {_fmt(req)}")
            held = req if valid and not ready else None
            if valid and not ready:
                st.req_blocked_cycles += 1
            if valid and ready:
                self._accept(cycle, *req)
            if due:
                if int(p["rsp_ready"].value):
                    self.pending.popleft()
                else:
                    st.rsp_stall_cycles += 1

    def _accept(self, cycle: int, write: int, addr: int, wdata: int, wstrb: int) -> None:
        st = self.stats
        ok = self.in_range(addr)
        if not ok:
            st.addr_errors += 1
        if write:
            st.write_beats += 1
            st.writes.append((cycle, addr, wdata, wstrb))
            if ok:
                self.write_beat(addr, wdata, wstrb)
            return
        st.read_beats += 1
        due = max(cycle + self.timing.base + self.jitter_rng.randint(0, self.timing.jitter), self.last_due + 1)
        self.last_due = due
        self.latencies.append(due - cycle)
        self.pending.append((due, self.read_beat(addr) if ok else 0))

    @property
    def last_write(self) -> tuple[int, int, int, int] | None:
        """(cycle, addr, wdata, wstrb) of the last write accepted, e.g. to check the status word."""
        return self.stats.writes[-1] if self.stats.writes else None


def _fmt(req) -> str:
    if req is None:
        return "no request"
    w, a, d, s = req
    return f"({w}, {a:#x}, {d:#034x}, {s:#06x})"
