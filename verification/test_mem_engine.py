"""cocotb + Verilator tests of hw.mem_engine against the SPEC §3 memory model, and their pytest runner.

The testbench reads payload layouts and parameters from the ``config.json`` that ``rtl_gen.emit``
wrote next to the Verilog (path in $NANO_K3_RTL_CONFIG). Every stream has random idle cycles and the
output random back-pressure, except in the throughput test. Seeds are fixed and printed.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import ReadOnly, RisingEdge

from nano_k3.mem_timing import ELASTIC_RUN, LONG_RUN, SHORT_RUN, Timing
from verification.mem_model import BEAT, MemoryModel
from verification.tb import QueuedSource, RecordingSink, Stream, start_clock_and_reset

PROFILES = {                      # SPEC §3 timing profiles used here
    "b24_j12": LONG_RUN,
    "b24_j24_d5": SHORT_RUN,
    "b48_j24_d5": ELASTIC_RUN,
    "b48_j24": Timing(base=ELASTIC_RUN.base, jitter=ELASTIC_RUN.jitter),
}
IMAGE_BYTES = 70_001              # not a multiple of 16: memory is rounded up (SPEC §3)
WRITE_REGION = 0xC000             # reads stay below, writes at or above (no ordering between the two streams)
STATUS_ADDR = IMAGE_BYTES - IMAGE_BYTES % BEAT        # last beat of memory: the status block
MIN_RATE_B24 = 0.9                # beats/cycle required over a long range at base 24, J 12, no stalls


def ref_read_beats(image: bytes, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(data, last) of every beat a list of read ranges must produce (length rounded up to beats)."""
    out = []
    for addr, length in ranges:
        n = -(-length // BEAT)
        out += [(int.from_bytes(image[addr + BEAT * k:addr + BEAT * (k + 1)], "little"), int(k == n - 1))
                for k in range(n)]
    return out


def pack(fields: dict, **values: int) -> int:
    """Pack named fields into a payload integer using the layout from config.json ({name: [offset, width]})."""
    word = 0
    for name, v in values.items():
        off, width = fields[name]
        assert 0 <= v < 1 << width, f"{name}={v:#x} does not fit {width} bits"
        word |= v << off
    return word


def unpack(fields: dict, word: int) -> dict[str, int]:
    return {name: word >> off & ((1 << width) - 1) for name, (off, width) in fields.items()}


@dataclass
class Setup:
    timing: Timing
    seed: int
    cmd_idle: float = 0.3
    wr_idle: float = 0.3
    out_ready: float = 0.7


class TB:
    """Clock, reset, memory model, the three stream agents and the scoreboard helpers."""

    def __init__(self, dut, s: Setup):
        cfg = json.loads(Path(os.environ["NANO_K3_RTL_CONFIG"]).read_text())
        self.dut, self.cfg = dut, cfg
        self.params = cfg["derived"]
        self.streams = cfg["streams"]
        assert len(dut.mem__req_addr) == self.params["addr_width"]
        assert len(dut.mem__rsp_rdata) == self.params["beat_bits"] == 8 * BEAT
        self.rng = random.Random(s.seed)
        dut._log.info(f"seed {s.seed}, timing {s.timing}, params {self.params}")
        self.image = bytes(self.rng.randbytes(IMAGE_BYTES))
        self.mem = MemoryModel(dut, dut.clk, self.image, timing=s.timing, seed=s.seed, config="mem_engine",
                               prompt_index=0, prefix="mem__")
        self.ref_mem = bytearray(self.mem.mem)          # what memory must hold after the writes
        self.s = s

    async def start(self) -> None:
        dut = self.dut
        for port in (dut.rd_cmd__valid, dut.wr__valid, dut.o__ready, dut.mem__req_ready, dut.mem__rsp_valid):
            port.value = 0
        await start_clock_and_reset(dut.clk, dut.rst, cycles=16)     # SPEC §1: reset held 16 cycles
        # agents and memory start after reset, so nothing the flops held before it is taken as traffic
        self.cmd = QueuedSource(dut.clk, Stream.of(dut, "rd_cmd"), self.rng, self.s.cmd_idle)
        self.wr = QueuedSource(dut.clk, Stream.of(dut, "wr"), self.rng, self.s.wr_idle)
        self.out = RecordingSink(dut.clk, Stream.of(dut, "o"), self.rng, self.s.out_ready,
                                 lambda: self.mem.stats.cycles)
        self.mem.start()
        await RisingEdge(dut.clk)

    def read(self, addr: int, length: int) -> None:
        self.cmd.queue.append(pack(self.streams["rd_cmd"]["fields"], addr=addr, length=length))

    def write(self, addr: int, data: int, strb: int) -> None:
        self.wr.queue.append(pack(self.streams["wr"]["fields"], addr=addr, data=data, strb=strb))
        for i in range(BEAT):
            if strb >> i & 1:
                self.ref_mem[addr + i] = data >> (8 * i) & 0xFF

    async def wait_for(self, cond, what: str, limit: int = 50_000) -> None:
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            if cond():
                return
        d = self.dut
        state = {n: int(getattr(d, n).value) for n in ("rd_cmd__valid", "rd_cmd__ready", "mem__req_valid",
                                                      "mem__rsp_ready", "o__valid", "wr__valid", "idle")}
        raise AssertionError(f"timeout after {limit} cycles waiting for {what}: {len(self.out.items)} beats out, "
                             f"{len(self.cmd.queue)} ranges and {len(self.wr.queue)} writes queued, "
                             f"memory {self.mem.stats.as_dict()}, {len(self.mem.pending)} reads pending; {state}")

    def beats(self) -> list[tuple[int, int]]:
        f = self.streams["o"]["fields"]
        return [(v["data"], v["last"]) for v in (unpack(f, w) for _, w in self.out.items)]

    def check_beats(self, expect: list[tuple[int, int]]) -> None:
        got = self.beats()
        for k, (g, e) in enumerate(zip(got, expect)):
            assert g == e, (f"beat {k} of {len(expect)} differs: got data {g[0]:#034x} last {g[1]}, "
                            f"expected {e[0]:#034x} last {e[1]}")
        assert len(got) == len(expect), f"{len(got)} beats delivered, expected {len(expect)}"

    def check_clean(self) -> None:
        st = self.mem.stats
        assert st.addr_errors == 0, f"{st.addr_errors} address errors"
        if self.s.timing.ready_drop > 0:        # the hold monitor in the model really saw held requests
            assert st.req_blocked_cycles > 0, "no request ever waited on mem_req_ready: hold check not exercised"
        if self.s.out_ready < 1.0:
            assert self.out.stalls > 0, "output back-pressure never hit a valid beat"
        assert int(self.dut.rd_beats.value) == st.read_beats
        assert int(self.dut.wr_beats.value) == st.write_beats
        self.dut._log.info(f"memory stats {st.as_dict()}")


def random_ranges(rng: random.Random, n: int) -> list[tuple[int, int]]:
    """Read ranges below WRITE_REGION: single beats, odd beat counts, ragged lengths and 2 KB blocks."""
    out = []
    for _ in range(n):
        kind = rng.choice(["beat", "odd", "ragged", "2k"])
        length = {"beat": 16, "odd": 16 * rng.randrange(1, 40, 2), "ragged": rng.randrange(1, 700),
                  "2k": 2048}[kind]
        nbeats = -(-length // BEAT)
        out.append((BEAT * rng.randrange(0, WRITE_REGION // BEAT - nbeats), length))
    return out


def _seed_for(name: str) -> int:
    return int(os.environ.get("NANO_K3_SEED", "1")) * 1000 + sum(map(ord, name))




@cocotb.test()
@cocotb.parametrize(profile=["b24_j12", "b24_j24_d5", "b48_j24_d5"])
async def random_ranges_in_order(dut, profile: str) -> None:
    """Random range lists under each timing profile with downstream back-pressure: every beat, in order."""
    tb = TB(dut, Setup(PROFILES[profile], _seed_for(profile)))
    await tb.start()
    ranges = random_ranges(tb.rng, 60) + [(0, 0), (STATUS_ADDR - 2048 + BEAT, 2048)]
    for r in ranges:
        tb.read(*r)
    expect = ref_read_beats(tb.mem.mem, ranges)
    await tb.wait_for(lambda: len(tb.out.items) >= len(expect) and int(tb.dut.idle.value),
                      f"{len(expect)} beats and idle")
    tb.check_beats(expect)
    tb.check_clean()


@cocotb.test()
@cocotb.parametrize(profile=["b24_j12", "b48_j24"])
async def streaming_throughput(dut, profile: str) -> None:
    """One long range, no back-pressure anywhere: beats per cycle and first-beat latency."""
    tb = TB(dut, Setup(PROFILES[profile], _seed_for(profile), cmd_idle=0.0, out_ready=1.0))
    await tb.start()
    n_beats = 4096
    start = tb.mem.stats.cycles
    tb.read(0, n_beats * BEAT)
    await tb.wait_for(lambda: len(tb.out.items) >= n_beats, f"{n_beats} beats")
    tb.check_beats(ref_read_beats(tb.mem.mem, [(0, n_beats * BEAT)]))
    first, last = tb.out.items[0][0], tb.out.items[-1][0]
    rate = n_beats / (last - start + 1)
    steady = (n_beats - 1) / (last - first)
    lat = tb.mem.latencies
    dut._log.info(f"THROUGHPUT {profile}: {rate:.4f} beats/cycle over {n_beats} beats "
                  f"(steady state {steady:.4f}), first beat {first - start} cycles after the command, "
                  f"memory latency (incl. ordering) min {min(lat)} max {max(lat)}")
    tb.check_clean()
    if profile == "b24_j12":
        assert rate >= MIN_RATE_B24, f"throughput {rate:.4f} < {MIN_RATE_B24} beats/cycle at {profile}"


@cocotb.test()
@cocotb.parametrize(profile=["b24_j24_d5", "b48_j24_d5"])
async def writes_and_reads_share_the_port(dut, profile: str) -> None:
    """Writes with random strobes interleaved with reads: strobes honoured, write order kept,
    the status word is the last write and writes_drained means it has been accepted."""
    tb = TB(dut, Setup(PROFILES[profile], _seed_for("w" + profile)))
    await tb.start()
    rng = tb.rng
    ranges = random_ranges(rng, 30)
    for r in ranges:
        tb.read(*r)
    expect_reads = ref_read_beats(tb.mem.mem, ranges)
    n_writes = 400
    writes = []
    for k in range(n_writes):
        addr = BEAT * rng.randrange(WRITE_REGION // BEAT, STATUS_ADDR // BEAT)
        strb = rng.choice([0xFFFF, 0x000F, 0x0000, rng.randrange(1 << 16)])
        writes.append((addr, rng.getrandbits(128), strb))
    status = (STATUS_ADDR, 0x600DD00D, 0x000F)
    for w in writes + [status]:
        tb.write(*w)
    await tb.wait_for(lambda: tb.wr.empty and int(tb.dut.writes_drained.value), "writes drained")
    log = tb.mem.stats.writes
    assert len(log) == n_writes + 1, f"writes_drained high with {len(log)} of {n_writes + 1} writes accepted"
    assert [w[1:] for w in log] == writes + [status], "writes reached memory out of stream order"
    assert tb.mem.last_write[1:] == status, "status word is not the last write"
    await tb.wait_for(lambda: len(tb.out.items) >= len(expect_reads) and int(tb.dut.idle.value),
                      "reads done and idle")
    tb.check_beats(expect_reads)
    assert tb.mem.mem == tb.ref_mem, "memory after the writes differs from the reference " + _first_diff(
        tb.mem.mem, tb.ref_mem)
    # read back the written region through the engine (after writes_drained: ordered by contract)
    tb.out.items.clear()
    back = [(WRITE_REGION, STATUS_ADDR + BEAT - WRITE_REGION)]
    tb.read(*back[0])
    expect_back = ref_read_beats(tb.ref_mem, back)
    await tb.wait_for(lambda: len(tb.out.items) >= len(expect_back), "read-back")
    tb.check_beats(expect_back)
    tb.check_clean()


def _first_diff(a: bytes, b: bytes) -> str:
    k = next(i for i in range(len(a)) if a[i] != b[i])
    return f"first at byte {k:#x}: memory {a[k]:#04x}, reference {b[k]:#04x}"


# ------------------------------------------------------------------------------------------------
# pytest runner


# Reset modes of the runs: the normal build, and all flops from random values (SPEC §3 random-reset re-run).
RESET_MODES = {
    "zero-init": {"seed": 1, "build_args": [], "plusargs": []},
    "rand-reset": {"seed": 2, "build_args": ["--x-initial", "unique", "--x-assign", "unique"],
                   "plusargs": ["+verilator+rand+reset+2", "+verilator+seed+7"]},
}


@pytest.mark.parametrize("mode", list(RESET_MODES))
def test_mem_engine_cocotb(mode):
    from hw.params import preset
    from rtl_gen.emit import emit, read_filelist
    from flow.toolchain import work_root
    from verification.runner import run_cocotb

    rtl = emit("mem_engine", work_root() / "rtl" / "mem_engine", preset("nano"))
    m = RESET_MODES[mode]
    print(f"seed {m['seed']}, {mode}")
    result = run_cocotb(f"mem_engine-{mode}", read_filelist(rtl.filelist), rtl.top, "verification.test_mem_engine",
                        build_args=m["build_args"], plusargs=m["plusargs"],
                        extra_env={"NANO_K3_RTL_CONFIG": str(rtl.config), "NANO_K3_SEED": str(m["seed"])},
                        seed=m["seed"])
    for line in result.log_text().splitlines():
        if "THROUGHPUT" in line or "memory stats" in line:
            print(line.strip())
    assert result.passed and result.n_tests == 7, f"{result.n_failed} of {result.n_tests} failed"


def test_mem_engine_lint():
    """verilator --lint-only -Wall of the emitted engine: no errors and no warnings."""
    from hw.params import preset
    from rtl_gen.emit import emit, read_filelist
    from flow.toolchain import work_root
    from verification.runner import lint

    rtl = emit("mem_engine", work_root() / "rtl" / "mem_engine", preset("nano"))
    res = lint(read_filelist(rtl.filelist), rtl.top)
    assert res.errors == 0 and res.warnings == 0, res.output
