"""Shared parts of the cocotb block testbenches: clock and reset, a cycle counter, random back-pressure,
a transfer monitor and a stream driver with random idle cycles, and :class:`StreamTB`, the usual block
testbench made of them (cocotbext-axi's ``TB`` pattern, cut down to what these tests use). The queued
agents at the end serve the memory-side tests, whose sources run as tasks of their own. Scoreboards,
payload layouts and stall profiles stay in the tests.

A stream is the valid/ready/payload triple of an Amaranth ``stream.Signature`` port as the Verilog
shows it (``<port>__valid`` ...); :meth:`Stream.of` finds it on the DUT.

Every random choice draws from the ``random.Random`` passed in, a fixed number of times per cycle and
in the order the agents were started, so one seed gives one stimulus. Probabilities are a number or a
function read every cycle (so that a test can run phases of heavy and light stalls).
"""
from __future__ import annotations

import random
from collections import deque
from typing import Callable, Iterable, NamedTuple, Union

import cocotb
from cocotb.clock import Clock
from cocotb.handle import SimHandleBase
from cocotb.triggers import ReadOnly, RisingEdge

Probability = Union[float, Callable[[], float]]
Cycle = Callable[[], int]


def _prob(p: Probability) -> float:
    return p() if callable(p) else p


class Stream(NamedTuple):
    valid: SimHandleBase
    ready: SimHandleBase
    payload: SimHandleBase

    @classmethod
    def of(cls, dut, port: str) -> Stream:
        """The stream port ``port`` of ``dut`` (signals ``<port>__valid``, ``__ready``, ``__payload``)."""
        return cls(*(getattr(dut, f"{port}__{s}") for s in ("valid", "ready", "payload")))


async def start_clock_and_reset(clk: SimHandleBase, rst: SimHandleBase, *, cycles: int = 4,
                                period_ns: float = 10, active_low: bool = False) -> None:
    """Start a ``period_ns`` clock on ``clk`` and hold the synchronous reset ``rst`` asserted (high, or
    low with ``active_low``) for ``cycles`` rising edges; returns just after the last of them."""
    if cycles < 1:
        raise ValueError(f"reset must last at least one cycle, got {cycles}")
    Clock(clk, period_ns, unit="ns").start()
    rst.value = int(not active_low)
    for _ in range(cycles):
        await RisingEdge(clk)
    rst.value = int(active_low)


class CycleCounter:
    """Rising edges of ``clk`` since :meth:`start`; call it for the current cycle number."""

    def __init__(self, clk: SimHandleBase):
        self.clk, self.now = clk, 0

    def start(self) -> CycleCounter:
        cocotb.start_soon(self._run())
        return self

    def __call__(self) -> int:
        return self.now

    async def _run(self) -> None:
        while True:
            await RisingEdge(self.clk)
            self.now += 1


class BackPressure:
    """Drives an output stream's ``ready`` high with probability ``prob``, drawn anew every cycle
    (one draw per cycle, at 0 and 1 too); ``ready`` is low until :meth:`start`."""

    def __init__(self, clk: SimHandleBase, ready: SimHandleBase, rng: random.Random, prob: Probability):
        self.clk, self.ready, self.rng, self.prob = clk, ready, rng, prob
        ready.value = 0

    def start(self) -> BackPressure:
        cocotb.start_soon(self._run())
        return self

    async def _run(self) -> None:
        while True:
            self.ready.value = int(self.rng.random() < _prob(self.prob))
            await RisingEdge(self.clk)


class TransferMonitor:
    """Calls ``callback(payload, cycle)`` for every transfer of ``stream`` (valid and ready at a rising
    edge), judged on the settled values of the cycle (ReadOnly)."""

    def __init__(self, clk: SimHandleBase, stream: Stream, callback: Callable[[int, int], None],
                 cycle: Cycle = lambda: 0):
        self.clk, self.stream, self.callback, self.cycle = clk, stream, callback, cycle

    def start(self) -> TransferMonitor:
        cocotb.start_soon(self._run())
        return self

    async def _run(self) -> None:
        valid, ready, payload = self.stream
        while True:
            await ReadOnly()
            if valid.value and ready.value:
                self.callback(payload.value.to_unsigned(), self.cycle())
            await RisingEdge(self.clk)


class StreamDriver:
    """Sends words on an input stream from the caller's coroutine. Before each word, idle cycles with
    probability ``idle`` each (valid low, a random payload the DUT must ignore); the word is then held
    with valid high until ready is seen at a rising edge. ``accept_cycles`` has the cycle of each transfer."""

    def __init__(self, clk: SimHandleBase, stream: Stream, rng: random.Random, idle: Probability,
                 cycle: Cycle = lambda: 0):
        self.clk, self.stream, self.rng, self.idle, self.cycle = clk, stream, rng, idle, cycle
        self.accept_cycles: list[int] = []
        stream.valid.value = 0
        stream.payload.value = 0

    async def send(self, words: Iterable[int], *, idle: bool = True) -> int:
        """Send ``words`` (no idle cycles at all with ``idle=False``); returns the last transfer's cycle."""
        valid, ready, payload = self.stream
        cyc = -1
        for word in words:
            while idle and self.rng.random() < _prob(self.idle):
                valid.value = 0
                payload.value = self.rng.getrandbits(len(payload))
                await RisingEdge(self.clk)
            payload.value = word
            valid.value = 1
            while True:
                await ReadOnly()
                taken = bool(ready.value)
                if taken:       # recorded in the handshake cycle, like TransferMonitor's cycles
                    cyc = self.cycle()
                    self.accept_cycles.append(cyc)
                await RisingEdge(self.clk)
                if taken:
                    break
        valid.value = 0
        return cyc


# ---- queued agents: each a task of its own that decides just after the rising edge -------------------
class QueuedSource:
    """Drives a stream from ``queue`` in a task of its own: each cycle a waiting word is presented with
    probability ``1 - idle``, then held until taken (no random payload while idle)."""

    def __init__(self, clk: SimHandleBase, stream: Stream, rng: random.Random, idle: float):
        self.clk, self.stream, self.rng, self.idle = clk, stream, rng, idle
        self.queue: deque[int] = deque()
        self.busy = False
        stream.valid.value = 0
        cocotb.start_soon(self._run())

    @property
    def empty(self) -> bool:
        return not self.queue and not self.busy

    async def _run(self) -> None:
        valid, ready, payload = self.stream
        current = None
        while True:
            await RisingEdge(self.clk)
            if current is None and self.queue and self.rng.random() >= self.idle:
                current = self.queue.popleft()
            self.busy = current is not None
            valid.value = int(self.busy)
            if self.busy:
                payload.value = current
            await ReadOnly()
            if self.busy and int(ready.value):
                current = None          # taken on the coming edge; valid held until then (stream rule)


class RecordingSink:
    """Takes a stream with ``ready`` high with probability ``ready_prob`` (no draw at 1), in a task of its
    own; ``items`` collects ``(cycle(), payload)``, ``stalls`` counts cycles a valid word was refused."""

    def __init__(self, clk: SimHandleBase, stream: Stream, rng: random.Random, ready_prob: float, cycle: Cycle):
        self.clk, self.stream, self.rng, self.ready_prob, self.cycle = clk, stream, rng, ready_prob, cycle
        self.items: deque[tuple[int, int]] = deque()
        self.stalls = 0
        stream.ready.value = 0
        cocotb.start_soon(self._run())

    async def _run(self) -> None:
        valid, ready, payload = self.stream
        while True:
            await RisingEdge(self.clk)
            r = self.ready_prob >= 1.0 or self.rng.random() < self.ready_prob
            ready.value = int(r)
            await ReadOnly()
            if int(valid.value):
                if r:
                    self.items.append((self.cycle(), int(payload.value)))
                else:
                    self.stalls += 1


# ---- the usual block testbench -----------------------------------------------------------------------
class StreamTB:
    """Clock, reset, a cycle counter, one :class:`StreamDriver` per input stream (``drivers[port]``) and
    back-pressure plus a :class:`TransferMonitor` on the output stream; every agent draws from ``rng``.
    Each output transfer goes to :meth:`on_output`, which by default records it in ``received`` and
    ``output_cycles``; a test's TB overrides it with its scoreboard."""

    def __init__(self, dut, rng: random.Random, idle: Probability, ready: Probability, *,
                 inputs: Iterable[str] = ("i",), output: str = "o"):
        self.dut, self.rng = dut, rng
        self.cycle = CycleCounter(dut.clk)
        self.drivers = {port: StreamDriver(dut.clk, Stream.of(dut, port), rng, idle, self.cycle) for port in inputs}
        out = Stream.of(dut, output)
        self.backpressure = BackPressure(dut.clk, out.ready, rng, ready)
        self.monitor = TransferMonitor(dut.clk, out, self.on_output, self.cycle)
        self.received: deque[int] = deque()
        self.output_cycles: list[int] = []

    async def start(self) -> None:
        await start_clock_and_reset(self.dut.clk, self.dut.rst)
        self.start_agents()

    def start_agents(self) -> None:
        """Start the counter, the back-pressure and the monitor (in this order: it fixes the order of the
        random draws within a cycle); :meth:`start` calls it after the reset."""
        self.cycle.start()
        self.backpressure.start()
        self.monitor.start()

    def on_output(self, word: int, cycle: int) -> None:
        self.received.append(word)
        self.output_cycles.append(cycle)
