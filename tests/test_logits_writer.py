"""hw/logits_writer.py: ``ArgmaxTracker`` (Amaranth simulator) against numpy's argmax (lowest index on ties),
with random idle cycles between chunks, and the writer's parameter checks. The FIFO and its beats (an
msh_sram, which this simulator cannot run) are checked bit for bit by every chip run: logits rows and argmax
words against the fixed-point model, under request stalls (verification/test_chip.py, `make sim`)."""
from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.logits_writer import LOGIT_BITS, ArgmaxTracker, LogitsWriter

SEED = 20260716
LO, HI = -(1 << (LOGIT_BITS - 1)), (1 << (LOGIT_BITS - 1)) - 1


def rtl_argmax(rows: list[np.ndarray], lanes: int, rng: random.Random) -> list[tuple[int, int]]:
    """Each row through the tracker (one start, its chunks with random gaps); (argmax, cycles from the last
    chunk to done) per row."""
    dut = ArgmaxTracker(len(rows[0]), lanes=lanes)
    out: list[tuple[int, int]] = []

    async def bench(ctx):
        for row in rows:
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            chunks = row.reshape(-1, lanes)                                 # (chunks, lanes)
            for k, chunk in enumerate(chunks):
                for _ in range(rng.choice([0, 0, 0, 1, 3])):
                    await ctx.tick()
                ctx.set(dut.valid, 1)
                ctx.set(dut.last, int(k == len(chunks) - 1))
                for j, v in enumerate(chunk):
                    ctx.set(dut.y[j], int(v))
                await ctx.tick()
                ctx.set(dut.valid, 0)
                ctx.set(dut.last, 0)
            for wait in range(1, 6):
                if ctx.get(dut.done):
                    break
                await ctx.tick()
            out.append((ctx.get(dut.argmax), wait))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


def edge_rows(vocab: int) -> list[np.ndarray]:
    rows = [np.full(vocab, LO), np.full(vocab, HI), np.zeros(vocab, np.int64)]   # ties everywhere: index 0
    r = np.full(vocab, -5)
    r[[7, vocab - 1]] = 9                                                      # tie across chunks
    rows.append(r)
    r = np.full(vocab, LO)
    r[vocab - 1] = LO + 1                                                      # the last value only
    rows.append(r)
    r = np.arange(vocab)[::-1].copy()                                           # the first value
    rows.append(r)
    return rows


@pytest.mark.parametrize("vocab,lanes", [(512, 16), (64, 16), (64, 4)], ids=["v512-l16", "v64-l16", "v64-l4"])
def test_argmax_tracker_matches_numpy(vocab, lanes):
    rng = random.Random(f"{SEED}-{vocab}-{lanes}")
    nrng = np.random.default_rng(rng.getrandbits(32))
    print(f"seed {SEED}")
    rows = edge_rows(vocab)
    rows += [nrng.integers(-2**20, 2**20, vocab) for _ in range(20)]
    rows += [nrng.integers(-3, 3, vocab) for _ in range(10)]                   # many ties
    rows += [nrng.integers(LO, HI, vocab, endpoint=True) for _ in range(5)]
    got = rtl_argmax(rows, lanes, rng)
    for k, (row, (idx, wait)) in enumerate(zip(rows, got)):
        assert idx == int(np.argmax(row)), f"row {k}: argmax {idx}, numpy {int(np.argmax(row))}"
        assert wait == 2, f"row {k}: done {wait} cycles after the last chunk, documented 2"


def test_writer_rejects_bad_parameters():
    with pytest.raises(ValueError, match="vocab must be a multiple of lanes=16"):
        LogitsWriter(520)
    with pytest.raises(ValueError, match="depth must be a power of two"):
        LogitsWriter(512, depth=6)
    with pytest.raises(ValueError, match="lanes must be a power of two"):
        ArgmaxTracker(64, lanes=2)
    w = LogitsWriter(512)
    w._MustUse__silence = True                    # built for its size only
    assert w.sram_bits == LogitsWriter.DEPTH * 16 * 32
