"""cocotb + Verilator test of the KDA engine (hw.kda_engine, Verilog top ``kda_engine``).

Reference: nano_k3.fixed's KDA blocks (``kda_conv``, ``kda_beta``, ``kda_alpha``, ``l2norm``,
``kda_state_update``, ``gated_norm``) composed exactly as in ``FixedModel._kda`` (called, never
re-implemented). Every position's gated output and read-out (q_hat . S', which exposes the state
evolution) are compared bit for bit, every lane of every output transfer, under random input idle
cycles, random output back-pressure and two transfer orders: the chip's (K, V, B, F, Q, then Z,
sometimes held off until the outputs wait for it) and a random one (Z's before the state inputs too),
from a random initial SRAM state (Verilator ``--x-initial unique`` + ``+verilator+rand+reset+2``):
sequences start with ``restart``. Lanes the transfer does not use (B's beyond head H-1, fields of other
vectors) carry garbage. The build's dimensions, lanes and documented latencies come from the
``config.json`` rtl_gen wrote.

Speed: one coroutine drives the input, the back-pressure and the monitor with a single await per
active cycle: at the falling clock edge it reads ``o.valid``, ``o.payload`` and ``i.ready`` (registers,
stable until the next rising edge, which samples what it writes); while the engine computes (no input
can be taken, no output is valid) it sleeps until ``o.valid`` or ``i.ready`` rises instead of waking
every cycle.

Environment read by the cocotb side: NANO_K3_RTL_CONFIG (config.json from rtl_gen, required),
NANO_K3_KDA_POSITIONS (random positions, default 300; set in the environment of pytest, it replaces
every build's count below, for quick runs), NANO_K3_SEED (default 20240917).
"""
from __future__ import annotations

import os
import random
from collections import deque
from typing import Iterable, Iterator
from dataclasses import dataclass

import cocotb
import numpy as np
import pytest
from amaranth.hdl import Shape
from amaranth.lib.data import ArrayLayout
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer
from cocotb.utils import get_sim_time

from hw.kda_params import PARAM_BITS, KdaParams, Sel, in_layout, out_layout
from nano_k3.config import L2_EPS
from nano_k3.fixed import gated_norm, kda_alpha, kda_beta, kda_conv, kda_state_update
from nano_k3.fxp_math import l2norm
from nano_k3.fxp_ops import X
from verification.tb import start_clock_and_reset

CFG_ENV, POS_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_KDA_POSITIONS", "NANO_K3_SEED"
DEFAULT_SEED = 20240917
CLK_NS = 10
HANG_NS = 200_000          # no progress for this long: the engine is stuck


# ---- reference: one KDA layer's streams (histories, state) ----------------------------------------------
@dataclass
class LayerParams:
    taps: np.ndarray      # (3, P, K) Q4.11
    A: np.ndarray         # (H,) UQ8.8
    dtb: np.ndarray       # (P,) Q4.11
    w: np.ndarray         # (dh,) Q2.13


@dataclass
class PosInput:
    pre: np.ndarray       # (3, P) X: q~, k~, v~
    b: np.ndarray         # (H,) X
    f: np.ndarray         # (P,) X
    z: np.ndarray         # (P,) X


class RefLayer:
    def __init__(self, kp: KdaParams):
        self.kp = kp
        self.reset()

    def reset(self) -> None:
        kp = self.kp
        self.hist = np.zeros((3, kp.conv_k - 1, kp.width), np.int64)     # (3, K-1, P)
        self.state = np.zeros((kp.heads, kp.dh, kp.dh), np.int64)       # (H, dh, dh)

    def step(self, x: PosInput, lp: LayerParams) -> tuple[np.ndarray, np.ndarray]:
        H, dh = self.kp.heads, self.kp.dh
        window = np.concatenate([self.hist, x.pre[:, None, :]], axis=1)          # (3, K, P)
        q, k, v = (kda_conv(window[j], lp.taps[j]) for j in range(3))           # (P,) X each
        self.hist = window[:, 1:]
        beta = kda_beta(x.b)                                                     # (H,) P
        alpha = kda_alpha(x.f.reshape(H, dh), lp.A, lp.dtb.reshape(H, dh))      # (H, dh) ALPHA
        q_hat = l2norm(q.reshape(H, dh), X.frac, L2_EPS)
        k_hat = l2norm(k.reshape(H, dh), X.frac, L2_EPS)
        self.state, read = kda_state_update(self.state, q_hat, k_hat, v.reshape(H, dh), beta, alpha)
        gated = gated_norm(read, x.z.reshape(H, dh), lp.w).reshape(-1)          # (P,) X
        return gated, read.reshape(-1)


# ---- stimulus ---------------------------------------------------------------------------------------------
def xvec(rng, n, scale) -> np.ndarray:
    return np.clip(np.round(rng.normal(0, scale, n) * (1 << X.frac)), X.lo, X.hi).astype(np.int64)


def rand_params(rng, kp: KdaParams, full=False) -> LayerParams:
    P_, K = kp.width, kp.conv_k
    lo, hi = -(1 << (PARAM_BITS - 1)), (1 << (PARAM_BITS - 1)) - 1
    if full:     # taps of q, k limited to +-2 (see QK_MAX_SCALE); v's taps, A, dtb, w over their full range
        taps = rng.integers(lo, hi + 1, (3, P_, K))
        taps[:2] = rng.integers(-4096, 4096, (2, P_, K))
        return LayerParams(taps, rng.integers(0, 1 << PARAM_BITS, kp.heads),
                           rng.integers(lo, hi + 1, P_), rng.integers(-8192, 8192, kp.dh))
    taps = np.clip(np.round(rng.normal(0, 0.6, (3, P_, K)) * 2048), lo, hi).astype(np.int64)
    A = rng.integers(32, 2048, kp.heads)
    dtb = np.clip(np.round(rng.normal(0, 1.0, P_) * 2048), lo, hi).astype(np.int64)
    w = np.clip(np.round(rng.normal(0, 0.3, kp.dh) * 8192), -8192, 8191).astype(np.int64)
    return LayerParams(taps, A, dtb, w)


# q~, k~ stay within +-QK_MAX_SCALE sigma: the reference's sum of squares (fxp_ops.wide_dot with shift
# 2 X.frac - SQ_FRAC = 16) is a plain int64 einsum, which wraps once sum q^2 >= 2^63 (|q| ~ 2^31.5 / sqrt(dh)).
QK_MAX_SCALE = 2.0


def rand_input(rng, kp: KdaParams, scale: float) -> PosInput:
    P_ = kp.width
    qk = min(scale, QK_MAX_SCALE)
    return PosInput(np.stack([xvec(rng, P_, qk), xvec(rng, P_, qk), xvec(rng, P_, scale)]),
                    xvec(rng, kp.heads, 3.0), xvec(rng, P_, 2.0), xvec(rng, P_, 2.0))


# ---- the testbench ----------------------------------------------------------------------------------------
@dataclass
class Job:
    tag: str
    words: list[int | None]                # input payloads in transfer order; None: one cycle held off
    gated: np.ndarray                      # (P,) expected o.data
    read: np.ndarray                       # (P,) expected o.read


class TB:
    def __init__(self, dut, kp: KdaParams, seed: int):
        self.dut, self.kp = dut, kp
        self.rng = random.Random(seed)
        self.il, self.ol = in_layout(kp), out_layout(kp)
        assert len(dut.i__payload) == self.il.size, (len(dut.i__payload), self.il.size)
        assert len(dut.o__payload) == self.ol.size, (len(dut.o__payload), self.ol.size)
        self.idle_prob, self.ready_prob, self.shuffle_prob = 0.2, 0.7, 0.3
        self.mismatches: list[str] = []
        self.n_checked = 0
        self.t_in: list[int] = []                     # cycle numbers of the input transfers of a run
        self.t_last_out = 0                           # and of its latest last output

    async def start(self) -> None:
        dut = self.dut
        dut.i__valid.value = 0
        dut.i__payload.value = 0
        dut.o__ready.value = 0
        await start_clock_and_reset(dut.clk, dut.rst, period_ns=CLK_NS)
        await FallingEdge(dut.clk)

    @staticmethod
    def cycle() -> int:
        return int(get_sim_time("ns")) // CLK_NS

    def _lanes(self, word: int, name: str) -> list[int]:
        """The lanes of the output array field ``name`` (signed elements) of ``word``."""
        f = self.ol[name]
        width = Shape.cast(f.shape.elem_shape).width
        raws = [(word >> (f.offset + k * width)) & ((1 << width) - 1) for k in range(f.shape.length)]
        return [raw - (1 << width) if raw >> (width - 1) else raw for raw in raws]

    def _score(self, job: Job | None, got: list[int]) -> None:
        """Every lane of every output transfer of ``job``: lane k of transfer t is element t L + k."""
        L = self.kp.lanes
        if job is None:
            self.mismatches.append(f"unexpected output vector of {len(got)} transfers")
            return
        if len(got) * L != len(job.gated):
            self.mismatches.append(f"case {job.tag}: {len(got)} transfers of {L}, expected {len(job.gated)} elements")
            return
        elems = {"read": [v for w in got for v in self._lanes(w, "read")],
                 "gated": [v for w in got for v in self._lanes(w, "data")]}
        for idx in range(len(job.gated)):
            for what, exp in (("read", int(job.read[idx])), ("gated", int(job.gated[idx]))):
                val = elems[what][idx]
                if exp != val:
                    msg = f"case {job.tag} {what} index {idx}: expected {exp} got {val}"
                    if len(self.mismatches) < 20:
                        self.dut._log.error(msg)
                    self.mismatches.append(msg)
        self.n_checked += 1

    async def run(self, jobs: Iterable[Job]) -> None:
        """Send every job's words and check its output vector; returns when all outputs are in.

        Handles are looked up once and written only when their value changes (each access costs
        microseconds of cocotb overhead, per cycle)."""
        dut, rng, clk = self.dut, self.rng, self.dut.clk
        i_valid, i_payload, i_ready = dut.i__valid, dut.i__payload, dut.i__ready
        o_valid, o_payload, o_ready = dut.o__valid, dut.o__payload, dut.o__ready
        last_bit = 1 << self.ol["last"].offset
        jobs = iter(jobs)
        words: deque[int | None] = deque()
        self.t_in = []
        pending: deque[Job] = deque()
        got: list[int] = []
        wire_valid = False               # i.valid as last written
        held = False                     # words[0] is presented and not yet taken: it stays until taken
        ready_now = None
        more = True
        while True:
            if not words and more:
                job = next(jobs, None)
                if job is None:
                    more = False
                else:
                    words.extend(job.words)
                    pending.append(job)
            if not (words or pending):
                break
            ov = o_valid.value
            ir = bool(words) and i_ready.value
            if not ov and not ir:
                # the engine computes: sleep until it shows an output or takes input again
                if wire_valid and not held:
                    i_valid.value = wire_valid = False
                t0 = get_sim_time("ns")
                await First(RisingEdge(o_valid), RisingEdge(i_ready), Timer(HANG_NS, unit="ns"))
                assert get_sim_time("ns") - t0 < HANG_NS, \
                    f"engine stuck: {len(pending)} positions pending (first: {pending[0].tag if pending else '-'})"
                await FallingEdge(clk)
                continue
            if words and words[0] is None:
                words.popleft()
                if wire_valid:
                    i_valid.value = wire_valid = False
            elif words and (held or rng.random() >= self.idle_prob):
                if not wire_valid:
                    i_valid.value = wire_valid = True
                if not held:
                    i_payload.value = words[0]
                held = not ir
                if ir:
                    words.popleft()
                    self.t_in.append(self.cycle())
            elif wire_valid:
                i_valid.value = wire_valid = False
            ready = rng.random() < self.ready_prob
            if ready != ready_now:
                o_ready.value = ready_now = ready
            if ov and ready:
                w = o_payload.value.to_unsigned()
                got.append(w)
                if w & last_bit:
                    self.t_last_out = self.cycle()
                    self._score(pending.popleft() if pending else None, got)
                    got = []
            await FallingEdge(clk)
        i_valid.value = 0

    def verdict(self, n: int) -> None:
        assert not self.mismatches, f"{len(self.mismatches)} mismatches; first: " + "; ".join(self.mismatches[:5])
        assert self.n_checked == n, (self.n_checked, n)


def _setup():
    from rtl_gen import read_config
    cfg, _ = read_config(os.environ[CFG_ENV])
    der = cfg["derived"]
    kp = KdaParams(**{k: der[k] for k in ("heads", "dh", "conv_k", "max_layers", "lanes")})
    return cfg, kp, int(os.environ.get(SEED_ENV, DEFAULT_SEED))


def _put(word: int, shape, offset: int, value) -> int:
    """``word`` with the field of ``shape`` at bit ``offset`` set to ``value`` (a sequence for an array;
    a shorter one leaves the remaining elements as they were)."""
    if isinstance(shape, ArrayLayout):
        step = Shape.cast(shape.elem_shape).width
        for k, v in enumerate(value):
            word = _put(word, shape.elem_shape, offset + k * step, v)
        return word
    mask = (1 << Shape.cast(shape).width) - 1
    return (word & ~(mask << offset)) | ((int(value) & mask) << offset)


class Runner:
    """Builds jobs for sequences interleaved on the engine's layers; each sequence starts with restart."""

    def __init__(self, tb: TB, kp: KdaParams):
        self.tb, self.kp = tb, kp
        self.layers = [RefLayer(kp) for _ in range(kp.max_layers)]
        self.n = 0

    def job(self, tag: str, layer: int, x: PosInput, lp: LayerParams, restart: bool, z_gap: int = 0,
            q_gap: int = 0) -> Job:
        """``z_gap`` / ``q_gap``: cycles the input is held off before Z / Q (in the chip's order K, V, B, F, Q, Z; a
        shuffled job has none)."""
        if restart:
            self.layers[layer].reset()
        gated, read = self.layers[layer].step(x, lp)
        self.n += 1
        return Job(f"{tag}/p{self.n - 1}", self.words(x, lp, layer, restart, z_gap, q_gap), gated, read)

    def words(self, x: PosInput, lp: LayerParams, layer: int, restart: bool, z_gap: int,
              q_gap: int) -> list[int | None]:
        """The position's transfers, lane k of a transfer = element idx + k."""
        kp, rng, L = self.kp, self.tb.rng, self.kp.lanes
        chans = range(0, kp.width, L)
        def conv(s, vec):
            return [{"sel": s, "idx": c, "data": vec[c:c + L], "taps": lp.taps[s, c:c + L].reshape(-1)} for c in chans]
        items = conv(Sel.K, x.pre[1]) + conv(Sel.V, x.pre[2])
        items += [{"sel": Sel.B, "idx": h, "data": x.b[h:h + L]} for h in range(0, kp.heads, L)]
        items += [{"sel": Sel.F, "idx": c, "data": x.f[c:c + L], "a": lp.A[np.arange(c, c + L) // kp.dh],
                   "dtb": lp.dtb[c:c + L]} for c in chans]
        q_at = len(items)
        items += conv(Sel.Q, x.pre[0])
        items += [{"sel": Sel.Z, "idx": c, "data": x.z[c:c + L], "w": lp.w[np.arange(c, c + L) % kp.dh]}
                  for c in chans]
        shuffled = rng.random() < self.tb.shuffle_prob
        if shuffled:
            rng.shuffle(items)
        words: list[int | None] = []
        for n, it in enumerate(items):
            if not shuffled and n == q_at:
                words += [None] * q_gap
            if not shuffled and it["sel"] == Sel.Z and items[n - 1]["sel"] != Sel.Z:
                words += [None] * z_gap
            it.update(layer=layer, restart=int(restart), last=int(n == len(items) - 1))
            w = rng.getrandbits(self.tb.il.size)            # unused fields carry garbage
            for name, v in it.items():
                w = _put(w, self.tb.il[name].shape, self.tb.il[name].offset, v)
            words.append(w)
        return words


def random_jobs(tb: TB, run: Runner, kp: KdaParams, rng, n_pos: int, drain: int) -> Iterator[Job]:
    """Sequences of 4..40 positions per layer at one input scale, stall profile changing per sequence;
    one position in 8 holds Z off for up to twice the engine's drain."""
    done, s = 0, 0
    while done < n_pos:
        length = int(rng.integers(4, 40))
        scale = float(rng.choice([0.02, 0.3, 1.0, 4.0, 30.0]))
        lps = [rand_params(rng, kp, full=(s % 5 == 4)) for _ in range(kp.max_layers)]
        for t in range(length):
            for layer in range(kp.max_layers):
                if done == n_pos:
                    return
                # stall profile set when the job's words are queued (its first element)
                tb.ready_prob = (0.15, 0.7, 1.0)[s % 3]
                tb.idle_prob = (0.0, 0.2, 0.5)[(s // 3) % 3]
                z_gap = int(rng.integers(1, 2 * drain)) if rng.random() < 1 / 8 else 0
                yield run.job(f"s{s}-l{layer}-sc{scale}", layer, rand_input(rng, kp, scale), lps[layer], t == 0,
                              z_gap)
                done += 1
        s += 1


@cocotb.test()
async def kda_random(dut):
    cfg, kp, seed = _setup()
    n_pos = int(os.environ.get(POS_ENV, 300))
    dut._log.info("seed %d, %d random positions, H=%d dh=%d", seed, n_pos, kp.heads, kp.dh)
    tb = TB(dut, kp, seed)
    await tb.start()
    run = Runner(tb, kp)
    await tb.run(random_jobs(tb, run, kp, np.random.default_rng(seed), n_pos, cfg["derived"]["drain"]))
    tb.verdict(run.n)
    dut._log.info("kda_random: %d random positions bit-exact (H=%d dh=%d L=%d)", tb.n_checked, kp.heads, kp.dh,
                  kp.lanes)


def edge_jobs(run: Runner, kp: KdaParams, rng, drain: int) -> Iterator[Job]:
    P_, H = kp.width, kp.heads
    zero = PosInput(np.zeros((3, P_), np.int64), np.zeros(H, np.int64), np.zeros(P_, np.int64), np.zeros(P_, np.int64))
    lp = rand_params(rng, kp)
    for t in range(3):
        yield run.job("zero-inputs", 0, zero, lp, t == 0)
    # saturating state: large v, beta = 1 (large b), alpha near 1 (sigmoid(g) -> 0)
    lp_sat = rand_params(rng, kp)
    lp_sat.A[:] = 4096
    lp_sat.taps[2] = 2047
    for t in range(6):
        x = rand_input(rng, kp, 30.0)
        x.b[:] = X.hi
        x.f[:] = X.lo
        x.pre[2] = np.where(rng.random(P_) < 0.5, X.hi, X.lo)
        yield run.job("saturating-state-alpha1", 0, x, lp_sat, t == 0)
    # alpha near e^-5 (sigmoid(g) -> 1)
    for t in range(3):
        x = rand_input(rng, kp, 1.0)
        x.f[:] = X.hi
        yield run.job("alpha-e-5", 0, x, lp_sat, False)
    # restart mid-sequence clears the state and the histories (layer 0), while the last layer continues
    lp1 = rand_params(rng, kp, full=True)
    for t in range(3):
        yield run.job("layer1-full-range-params", kp.max_layers - 1, rand_input(rng, kp, 4.0), lp1, t == 0)
    for t in range(3):
        yield run.job("restart", 0, rand_input(rng, kp, 1.0), lp, t == 0)
    # extreme X inputs everywhere
    for t in range(2):
        pre = np.where(rng.random((3, P_)) < 0.5, X.hi, X.lo)
        pre[:2] = xvec(rng, (2, P_), QK_MAX_SCALE)
        x = PosInput(pre, np.full(H, X.lo), np.full(P_, X.hi), np.full(P_, X.lo))
        yield run.job("extreme-x", kp.max_layers - 1, x, lp1, False)
    # Z (in the chip's order) long after the state update: the outputs wait for it
    run.tb.shuffle_prob = 0.0
    for t in range(3):
        yield run.job("late-z", 0, rand_input(rng, kp, 1.0), lp, t == 0, 2 * drain)


@cocotb.test()
async def kda_edge_cases(dut):
    cfg, kp, seed = _setup()
    tb = TB(dut, kp, seed + 1)
    await tb.start()
    run = Runner(tb, kp)
    await tb.run(edge_jobs(run, kp, np.random.default_rng(seed + 1), cfg["derived"]["drain"]))
    tb.verdict(run.n)
    dut._log.info("kda_edge_cases: %d named edge-case positions bit-exact", tb.n_checked)


@cocotb.test()
async def kda_latency(dut):
    """No idles, no back-pressure, the chip's order K, V, B, F, Q, Z: one transfer a cycle, the last output
    ``drain`` cycles after the last F transfer (Q and Z right behind it; or P / L + ``q_drain`` where Q's
    norms come later than the first pass), ``q_drain`` after the last Q when Q is held off, ``z_drain`` after
    the last Z when Z is held off."""
    cfg, kp, seed = _setup()
    der = cfg["derived"]
    tb = TB(dut, kp, seed + 2)
    tb.idle_prob, tb.ready_prob, tb.shuffle_prob = 0.0, 1.0, 0.0
    await tb.start()
    rng = np.random.default_rng(seed + 2)
    run = Runner(tb, kp)
    lp = rand_params(rng, kp)
    await tb.run([run.job("latency", 0, rand_input(rng, kp, 1.0), lp, True)])
    ingest, drain = tb.t_in[-1] - tb.t_in[0] + 1, tb.t_last_out - tb.t_in[kp.row_transfers - 1]
    total = tb.t_last_out - tb.t_in[0] + 1
    await tb.run([run.job("latency-late-q", 0, rand_input(rng, kp, 1.0), lp, False, q_gap=der["drain"])])
    q_drain = tb.t_last_out - tb.t_in[kp.state_transfers - 1]
    await tb.run([run.job("latency-late-z", 0, rand_input(rng, kp, 1.0), lp, False, 2 * der["drain"])])
    z_drain = tb.t_last_out - tb.t_in[-1]
    tb.verdict(3)
    dut._log.info("LATENCY H=%d dh=%d L=%d: %d transfers in %d cycles (%d before the rows), last output %d cycles "
                  "after the last F transfer (documented drain %d), %d a position; Q late: %d after it (documented %d); "
                  "Z late: %d after it (documented %d)", kp.heads, kp.dh, kp.lanes, kp.transfers, ingest,
                  kp.row_transfers, drain, der["drain"], total, q_drain, der["q_drain"], z_drain, der["z_drain"])
    # Q's P / L transfers right behind F: its norms set the pace when they end later than the first pass
    after_f = max(der["drain"], kp.width // kp.lanes + der["q_drain"])
    assert (ingest, drain, q_drain, z_drain) == (kp.transfers, after_f, der["q_drain"], der["z_drain"]), \
        (ingest, drain, q_drain, z_drain)


# ---- pytest runners --------------------------------------------------------------------------------------
# build id: (chip preset, lanes, random positions): 1,000 random positions in total, plus 23 named
# edge-case positions per build; each run's count is printed by the cocotb log ("kda_random: N ...").
# Every build has two layers (the chip's model has one KDA layer): sequences interleave on them, so the
# layer's state and history addressing is tested too.
TEST_LAYERS = 2
BUILDS = {"tiny-l1": ("tiny", 1, 350), "tiny-l2": ("tiny", 2, 350), "nano-l2": ("nano", 2, 150),
          "nano-l1": ("nano", 1, 150)}


@pytest.mark.parametrize("build", list(BUILDS))
def test_kda_engine(build):
    """The chip preset's KDA dimensions at ``lanes`` elements a transfer on ``TEST_LAYERS`` layers,
    registered as a block for this test only."""
    from dataclasses import replace
    from functools import partial
    from unittest import mock

    from hw.kda_engine import kda_engine_block, kda_engine_derived, kda_params_for
    from hw.params import preset
    from hw.roms import ROM_SUBDIR, RTL_DIR
    from nano_k3.luts import write_roms
    from rtl_gen import BLOCKS, emit, read_filelist
    from verification.runner import MODELS, SIM_ROOT, lint, run_cocotb
    preset_name, lanes, positions = BUILDS[build]
    positions = int(os.environ.get(POS_ENV, positions))     # a quick run with fewer
    chip = preset(preset_name)
    name = f"kda_engine_{build.replace('-', '_')}"
    kp = replace(kda_params_for(chip), lanes=lanes, max_layers=TEST_LAYERS)
    extra = {name: replace(BLOCKS["kda_engine"], build=partial(kda_engine_block, params=kp),
                           derived=partial(kda_engine_derived, params=kp))}
    with mock.patch.dict(BLOCKS, extra):
        out = emit(name, SIM_ROOT / name / RTL_DIR, chip)
    write_roms(out.verilog.parent / ROM_SUBDIR)       # rtl/roms (SPEC §5), seen from the simulator's folder
    sources = [*read_filelist(out.filelist), MODELS / "msh_sram.v", MODELS / "msh_rom.v"]
    lint_result = lint(sources, out.top)
    assert lint_result.errors == 0, lint_result.output
    res = run_cocotb(name, sources, out.top, "verification.test_kda_engine",
                     build_args=["--x-initial", "unique"], plusargs=["+verilator+rand+reset+2"],
                     extra_env={CFG_ENV: str(out.config), POS_ENV: str(positions)})
    for line in res.log_text().splitlines():
        if "LATENCY" in line:
            print(line.strip())
    assert res.passed and res.n_tests == 3, res
    print(f"kda_engine {build}: {positions} random + 23 edge-case positions bit-exact; "
          f"lint {lint_result.errors} errors, {lint_result.warnings} warnings")
