"""hw/emb_fetch.py: ``EmbFetch`` (Amaranth simulator) on a real image: the reads it requests, in order, only
after ``start``; the token it picks from the token beat; the dequantised row against
``nano_k3.fxp_ops.embed_row``. The memory answers in request order after a random latency, and ``rd.ready``
drops at random (back-pressure)."""
from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.emb_fetch import EmbFetch
from hw.program import LANES
from nano_k3.config import preset
from nano_k3.fixed import FixedModel
from nano_k3.fxp_ops import X, embed_row
from nano_k3.image import build_image
from nano_k3.weights import generate, generate_tokens

SEED = 20260717


def run_fetches(config: str, seq_len: int, rng: random.Random):
    """Fetch every position of a ``config`` image in turn; per position (requests, token, words)."""
    cfg = preset(config)
    weights = generate(cfg, SEED)
    tokens = generate_tokens(cfg, SEED, seq_len)
    image = build_image(weights, tokens)
    lay, mem = image.layout, image.data
    dut = EmbFetch(cfg.d_model, cfg.max_seq)
    got: list = []

    pending: deque = deque()                  # (due cycle, beat) of the reads taken, in order
    cycle = [0]

    async def step(ctx, start: int = 0, pos: int = 0):
        """One cycle: the fetcher's controls, the memory's side (``rd.ready`` drops 30 % of cycles, beats in
        request order 3..12 cycles after the read), then the clock edge."""
        cycle[0] += 1
        ctx.set(dut.start, start)
        ctx.set(dut.pos, pos)
        ready = rng.random() >= 0.3
        ctx.set(dut.rd.ready, ready)
        due = bool(pending) and pending[0][0] <= cycle[0]
        ctx.set(dut.beat.valid, due)
        ctx.set(dut.beat.payload.data, pending[0][1] if due else 0)
        if ctx.get(dut.rd.valid) and ready:
            a, n = ctx.get(dut.rd.payload.addr), ctx.get(dut.rd.payload.length)
            got[-1][0].append((a, n))
            for k in range(0, n, 16):
                when = max(cycle[0] + rng.randint(3, 12), pending[-1][0] + 1 if pending else 0)
                pending.append((when, int.from_bytes(mem[a + k:a + k + 16], "little")))
        if due:
            pending.popleft()
        await ctx.tick()

    async def bench(ctx):
        ctx.set(dut.tok_addr, lay.tokens_addr)
        for port, name in ((dut.q_addr, "emb.q"), (dut.s_addr, "emb.s"), (dut.z_addr, "emb.z")):
            ctx.set(port, lay.descriptor(name).addr)
        for t in range(seq_len):
            got.append(([], None, None))
            for _ in range(rng.randint(1, 4)):
                await step(ctx)
            assert not got[-1][0], f"position {t}: a read before start"
            await step(ctx, start=1, pos=t)
            for _ in range(500):
                if ctx.get(dut.valid):
                    break
                assert ctx.get(dut.busy)
                await step(ctx)
            words = []
            for w in range(cfg.d_model // LANES):
                ctx.set(dut.word_idx, w)
                v = ctx.get(dut.word)
                words += [X.element(v, j) for j in range(LANES)]
            got[-1] = (got[-1][0], ctx.get(dut.token), np.array(words))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return cfg, weights, tokens, lay, got


@pytest.mark.parametrize("config", ["tiny", "nano"])
def test_fetch_reads_the_positions_token_and_row(config):
    rng = random.Random(f"{SEED}-{config}")
    print(f"seed {SEED}")
    seq_len = 6
    cfg, weights, tokens, lay, got = run_fetches(config, seq_len, rng)
    q, s, z, g = FixedModel(weights).mats["emb"]
    addr = {n: lay.descriptor(n).addr for n in ("emb.q", "emb.s", "emb.z")}
    assert len(got) == seq_len
    for t, (reqs, token, words) in enumerate(got):
        v = int(tokens[t])
        assert token == v, f"position {t}: token {token}, image {v}"
        expect = [(lay.tokens_addr + 16 * (t // 4), 16), (addr["emb.s"] + 16 * (v // 8), 16),
                  (addr["emb.z"] + 16 * (v // 16), 16), (addr["emb.q"] + v * cfg.d_model // 2, cfg.d_model // 2)]
        assert reqs == expect, f"position {t}: reads {reqs}, expected {expect}"
        ref = embed_row(q[v], s[v], z[v], g)                                   # (d,) X
        assert np.array_equal(words, ref), f"position {t}: first difference at {np.flatnonzero(words != ref)[0]}"


def test_fetch_rejects_bad_parameters():
    with pytest.raises(ValueError, match="d_model must be a multiple of 32"):
        EmbFetch(48, 16)
    with pytest.raises(ValueError, match="d_model must be an integer in 32..64"):
        EmbFetch(128, 16)
