"""cocotb + Verilator test of the weight store (hw.weight_store, reached through the ``mac_array`` top's
``w`` / ``r_cmd`` / ``r_data`` streams, the same Verilog the chip uses).

Random beats are written at every store index in a random order (random idles on ``w``), then read
back by random ``{start, count}`` commands: every start modulo ``banks`` (bank alignment and the
output rotation), counts from 1 to a few rows, reads that end at the last stored beat, random idles
on ``r_cmd`` and random back-pressure on ``r_data``. The reference is a Python list of the written
beats; a failing comparison prints the command, transfer, beat slot, expected and got. Writes that
overlap reads (rewrite then read back) are checked too.

Environment: NANO_K3_RTL_CONFIG (config.json from rtl_gen), NANO_K3_WS_CASES (read commands, default
1000), NANO_K3_SEED (default 20240917).
"""
from __future__ import annotations

import os
import random
from collections import deque

import cocotb
from cocotb.triggers import RisingEdge

from hw.mac_array import mac_array_params_for
from hw.weight_store import BEAT_BITS, read_cmd_layout, write_layout
from verification.tb import StreamTB
from verification.test_mac_array import SIM_WAIVERS, _fields, _pack

CFG_ENV, CASES_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_WS_CASES", "NANO_K3_SEED"
DEFAULT_SEED = 20240917


class TB(StreamTB):
    def __init__(self, dut, sp, seed: int):
        self.idle_prob, self.ready_prob = 0.25, 0.6
        super().__init__(dut, random.Random(seed), lambda: self.idle_prob, lambda: self.ready_prob,
                         inputs=("w", "r_cmd", "act", "i"), output="r_data")
        dut.o__ready.value = 1
        self.sp = sp
        self.f_w, self.f_r = _fields(write_layout(sp)), _fields(read_cmd_layout(sp))
        assert len(dut.r_data__payload) == sp.banks * BEAT_BITS + 1
        self.mem: list[int | None] = [None] * sp.beats
        self.expect: deque = deque()          # (cmd idx, transfer idx, [beats or None], last)
        self.mismatches: list[str] = []
        self.n_transfers = 0

    def on_output(self, word: int, cycle: int) -> None:
        self.output_cycles.append(cycle)
        nb, mask = self.sp.banks, (1 << BEAT_BITS) - 1
        if not self.expect:
            self.mismatches.append("unexpected r_data transfer")
            return
        idx, t, beats, last = self.expect.popleft()
        for j in range(nb):
            got = (word >> (j * BEAT_BITS)) & mask
            if beats[j] is not None and got != beats[j]:
                msg = f"read {idx} transfer {t} beat {j}: expected {beats[j]:#x} got {got:#x}"
                if len(self.mismatches) < 10:
                    self.dut._log.error(msg)
                self.mismatches.append(msg)
        if ((word >> (nb * BEAT_BITS)) & 1) != last:
            self.mismatches.append(f"read {idx} transfer {t}: last flag {not last} expected {last}")
        self.n_transfers += 1

    async def write(self, beat: int, data: int) -> None:
        await self.drivers["w"].send([_pack(self.f_w, {"beat": beat, "data": data})])
        self.mem[beat] = data

    async def read(self, idx: int, start: int, count: int) -> None:
        nb = self.sp.banks
        n_tr = -(-count // nb)
        for t in range(n_tr):
            beats = [self.mem[start + t * nb + j] if t * nb + j < count else None for j in range(nb)]
            self.expect.append((idx, t, beats, int(t == n_tr - 1)))
        await self.drivers["r_cmd"].send([_pack(self.f_r, {"start": start, "count": count})])

    async def drain(self) -> None:
        for _ in range(20_000):
            if not self.expect:
                break
            await RisingEdge(self.dut.clk)
        for _ in range(10):
            await RisingEdge(self.dut.clk)
        assert not self.expect, f"{len(self.expect)} read transfers never came"
        assert not self.mismatches, f"{len(self.mismatches)} mismatches; first: " + "; ".join(self.mismatches[:5])


def _setup():
    from rtl_gen import read_config
    cfg, chip = read_config(os.environ[CFG_ENV])
    return mac_array_params_for(chip).store, int(os.environ.get(SEED_ENV, DEFAULT_SEED))


@cocotb.test()
async def store_random(dut):
    sp, seed = _setup()
    n = int(os.environ.get(CASES_ENV, 1000))
    dut._log.info("seed %d: %d beats in %d banks, %d reads", seed, sp.beats, sp.banks, n)
    tb = TB(dut, sp, seed)
    await tb.start()
    order = list(range(sp.beats))
    tb.rng.shuffle(order)
    for beat in order:
        await tb.write(beat, tb.rng.getrandbits(BEAT_BITS))
    nb = sp.banks
    for idx in range(n):
        tb.ready_prob = (0.3, 0.9, 1.0)[(idx // 100) % 3]
        count = tb.rng.choice([1, nb, nb + 1, 2 * nb, tb.rng.randint(1, 8 * nb)])
        count = min(count, sp.beats)
        if idx % 10 == 0:
            start = sp.beats - count                       # ends at the last stored beat
        else:
            start = tb.rng.randrange(0, sp.beats - count + 1)       # every start % banks occurs
        if idx % 50 == 25:                                 # rewrite a beat, then read it back
            await tb.drain()
            await tb.write(start, tb.rng.getrandbits(BEAT_BITS))
        await tb.read(idx, start, count)
    await tb.drain()
    dut._log.info("%d reads, %d transfers checked", n, tb.n_transfers)


@cocotb.test()
async def store_stream_rate(dut):
    """No idles, no back-pressure: a long read delivers one transfer per cycle."""
    sp, seed = _setup()
    tb = TB(dut, sp, seed + 1)
    tb.idle_prob, tb.ready_prob = 0.0, 1.0
    await tb.start()
    count = min(sp.beats - 1, 32 * sp.banks)
    for beat in range(1, 1 + count):
        await tb.write(beat, tb.rng.getrandbits(BEAT_BITS))
    n_tr = -(-count // sp.banks)
    first = len(tb.output_cycles)
    await tb.read(0, 1, count)                     # unaligned start
    await tb.drain()
    span = tb.output_cycles[-1] - tb.output_cycles[first] + 1
    assert span == n_tr, f"{n_tr} transfers took {span} cycles"


# ---- pytest runner ---------------------------------------------------------------------------------------
def test_weight_store_tiny():
    from hw.params import preset
    from rtl_gen import emit, read_filelist
    from verification.runner import MODELS, SIM_ROOT, lint, run_cocotb
    name = "weight_store_tiny"
    out = emit("mac_array", SIM_ROOT / name / "rtl", preset("tiny"))
    sources = [*read_filelist(out.filelist), MODELS / "msh_sram.v"]
    lint_result = lint(sources, out.top)
    assert lint_result.errors == 0, lint_result.output
    res = run_cocotb(name, sources, out.top, "verification.test_weight_store",
                     build_args=["--x-initial", "unique", *SIM_WAIVERS], plusargs=["+verilator+rand+reset+2"],
                     extra_env={CFG_ENV: str(out.config)})
    assert res.passed and res.n_tests == 2, res
