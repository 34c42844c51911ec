"""cocotb + Verilator tests of hw.mla_engine against nano_k3.fixed.mla_attention, and their pytest runner.

The reference is called on the growing cache exactly like FixedModel._mla: position t appends
k_t = [kc_h, kr] and v_t, then ctx = mla_attention(q_t, K[0..t], V[0..t], mla_score_const(dk + dr)).
Sizes and payload layouts come from the config.json written by rtl_gen.emit (path in
$NANO_K3_RTL_CONFIG). Every stream has random idle cycles (input) and back-pressure (output), except in
the cycle-count run. Padding lanes of the input beats carry random garbage (the engine must mask them).
The SRAM models start from random contents (--x-initial unique, +verilator+rand+reset+2).
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, RisingEdge

from nano_k3.fixed import mla_attention, mla_score_const
from nano_k3.fxp_ops import X
from hw.mla_params import MlaParams
from verification.tb import CycleCounter, QueuedSource, RecordingSink, Stream, start_clock_and_reset

CFG_ENV, SEED_ENV, STEPS_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_SEED", "NANO_K3_MLA_STEPS"
DEFAULT_SEED = 20261130
DIMS = {                                  # runtime (heads, dk, dr, dv)
    "tiny": (1, 16, 8, 16),
    "nano": (2, 32, 16, 32),
    "odd": (2, 24, 5, 20),                # not multiples of the lanes: padding, partial words
    "odd1": (1, 12, 3, 10),
}


# ---- payload packing (layout from config.json: {"field": [offset, width]}) ------------------------------
def to_u(v: int, width: int) -> int:
    return int(v) & ((1 << width) - 1)


def to_s(v: int, width: int) -> int:
    return v - (1 << width) if v >> (width - 1) else v


@dataclass
class Sequence:
    """One sequence of positions 0..T-1 with its inputs (all X integers)."""

    name: str
    dims: tuple[int, int, int, int]
    q: np.ndarray        # (T, H, dk+dr)
    kc: np.ndarray       # (T, H, dk)
    kr: np.ndarray       # (T, dr)
    v: np.ndarray        # (T, H, dv)


def rand_x(rng: np.random.Generator, shape, scale_bits: int) -> np.ndarray:
    """Random X values of magnitude ~2^scale_bits (scale relative to 1.0 = 2^X.frac), clipped to X."""
    v = rng.normal(0.0, 1.0, size=shape) * float(1 << (X.frac + scale_bits))
    return np.clip(np.rint(v), X.lo, X.hi).astype(np.int64)


def make_sequence(rng: np.random.Generator, name: str, dims, T: int, kind: str = "random") -> Sequence:
    H, dk, dr, dv = dims
    sb = int(rng.integers(-3, 3))          # element scale 2^-3 .. 2^2: scores from flat to peaked
    q, kc, kr, v = (rand_x(rng, (T, H, dk + dr), sb), rand_x(rng, (T, H, dk), sb), rand_x(rng, (T, dr), sb),
                    rand_x(rng, (T, H, dv), int(rng.integers(-2, 4))))
    if kind == "equal":                    # all keys equal: every score of a head ties
        kc[:], kr[:] = kc[0], kr[0]
    elif kind == "zero_q":                 # q = 0: scores 0, uniform softmax
        q[:] = 0
    elif kind == "huge":                   # scores far apart: most weights underflow exp2 to 0
        q = rand_x(rng, (T, H, dk + dr), 6)
        kc, kr = rand_x(rng, (T, H, dk), 6), rand_x(rng, (T, dr), 6)
    elif kind == "saturate":               # elements at the X limits: scores saturate X, t saturates T
        q = rng.choice([X.lo, X.hi], size=(T, H, dk + dr)).astype(np.int64)
        kc = rng.choice([X.lo, X.hi], size=(T, H, dk)).astype(np.int64)
        kr = rng.choice([X.lo, X.hi], size=(T, dr)).astype(np.int64)
        v = rng.choice([X.lo, X.hi, 0], size=(T, H, dv)).astype(np.int64)
    return Sequence(name, dims, q, kc, kr, v)


def reference(seq: Sequence) -> list[np.ndarray]:
    """ctx (H, dv) of every position: FixedModel._mla's cache order, mla_attention as the arithmetic."""
    H, dk, dr, dv = seq.dims
    T = seq.q.shape[0]
    c = mla_score_const(dk + dr)
    keys = np.concatenate([seq.kc, np.broadcast_to(seq.kr[:, None, :], (T, H, dr))], axis=-1)  # (T, H, dq)
    return [mla_attention(seq.q[t], keys[: t + 1], seq.v[: t + 1], c)[0] for t in range(T)]


class TB:
    """Clock, reset, configuration, the two stream agents and the scoreboard."""

    def __init__(self, dut, seed: int, in_idle: float = 0.3, out_ready: float = 0.6):
        cfg = json.loads(Path(os.environ[CFG_ENV]).read_text())
        self.dut, self.derived = dut, cfg["derived"]
        self.p = self.derived["params"]
        self.params = MlaParams(**self.p)
        self.L = self.p["lanes"]
        fields_i, fields_o = cfg["streams"]["i"]["fields"], cfg["streams"]["o"]["fields"]
        self.off_i = [fields_i[f"data.{k}"][0] for k in range(self.L)]
        self.pos_off, self.pos_bits = fields_i["pos"]
        self.off_o = [fields_o[f"data.{k}"][0] for k in range(self.L)]
        self.last_off = fields_o["last"][0]
        assert fields_i["data.0"][1] == X.bits, "X width of the build differs from the model's"
        fits = lambda d: (d[0] <= self.p["max_heads"] and d[1] <= self.p["max_dk"] and d[2] <= self.p["max_dr"]
                          and d[3] <= self.p["max_dv"])
        self.dims = [name for name, d in DIMS.items() if fits(d)]   # runtime dims this build takes
        self.seed = seed
        self.rng = random.Random(seed)
        self.nrng = np.random.default_rng(seed)
        self.in_idle, self.out_ready = in_idle, out_ready
        self.cycle = CycleCounter(dut.clk)
        self.steps = 0

    async def start(self) -> None:
        dut = self.dut
        dut.i__valid.value = 0
        dut.o__ready.value = 0
        await start_clock_and_reset(dut.clk, dut.rst)
        self.cycle.start()
        self.src = QueuedSource(dut.clk, Stream.of(dut, "i"), self.rng, self.in_idle)
        self.sink = RecordingSink(dut.clk, Stream.of(dut, "o"), self.rng, self.out_ready, self.cycle)

    def beats(self, t: int, seq: Sequence) -> list[int]:
        """The input beats of position t in the engine's order; padding lanes get random garbage."""
        H, dk, dr, dv = seq.dims
        segs = [s for h in range(H) for s in (seq.q[t, h, :dk], seq.q[t, h, dk:])]
        segs += [seq.kc[t, h] for h in range(H)] + [seq.kr[t]] + [seq.v[t, h] for h in range(H)]
        out = []
        for s in segs:
            for w in range(-(-len(s) // self.L)):
                word = to_u(t, self.pos_bits) << self.pos_off if not out else 0
                for k in range(self.L):
                    idx = w * self.L + k
                    val = int(s[idx]) if idx < len(s) else self.rng.randint(X.lo, X.hi)
                    word |= to_u(val, X.bits) << self.off_i[k]
                out.append(word)
        return out

    def unpack(self, word: int) -> tuple[list[int], int]:
        data = [to_s((word >> off) & ((1 << X.bits) - 1), X.bits) for off in self.off_o]
        return data, (word >> self.last_off) & 1

    async def configure(self, dims) -> None:
        H, dk, dr, dv = dims
        dut = self.dut
        dut.heads.value, dut.dk.value, dut.dr.value, dut.dv.value = H, dk, dr, dv
        dut.score_const.value = mla_score_const(dk + dr)
        await ClockCycles(dut.clk, 3)       # the engine registers its configuration

    async def run_sequence(self, seq: Sequence, positions: int | None = None) -> list[int]:
        """Feed positions 0..T-1, compare every ctx with the reference; returns cycles per position."""
        H, dk, dr, dv = seq.dims
        ref = reference(seq)
        T = seq.q.shape[0] if positions is None else positions
        wv = -(-dv // self.L)
        cycles = []
        await self.configure(seq.dims)
        for t in range(T):
            self.sink.items.clear()
            c0 = self.cycle()
            self.src.queue.extend(self.beats(t, seq))
            got = []
            for _ in range(200_000):
                await RisingEdge(self.dut.clk)
                while self.sink.items:
                    got.append(self.sink.items.popleft())
                if len(got) >= H * wv:
                    break
            assert len(got) == H * wv, f"{seq.name} t={t}: {len(got)} of {H * wv} output beats (timeout)"
            cycles.append(got[-1][0] - c0)
            for b, (_, word) in enumerate(got):
                h, w = divmod(b, wv)
                data, last = self.unpack(word)
                assert last == int(b == H * wv - 1), f"{seq.name} t={t} beat {b}: last={last}"
                for k in range(self.L):
                    d = w * self.L + k
                    exp = int(ref[t][h, d]) if d < dv else 0
                    assert data[k] == exp, (f"{seq.name} (seed {self.seed}) position {t} head {h} index {d}: "
                                            f"expected {exp} got {data[k]}")
            self.steps += 1
            await ClockCycles(self.dut.clk, self.rng.randint(0, 3))
        return cycles


def _seed() -> int:
    return int(os.environ.get(SEED_ENV, DEFAULT_SEED))


@cocotb.test()
async def mla_random(dut):
    """Random sequences, random lengths up to max_seq, tiny / nano / odd dims, random stalls."""
    seed = _seed()
    tb = TB(dut, seed)
    await tb.start()
    budget = int(os.environ.get(STEPS_ENV, "700"))
    n = 0
    while tb.steps < budget:
        name = tb.dims[n % len(tb.dims)]
        T = min(budget - tb.steps, int(tb.nrng.integers(1, tb.p["max_seq"] + 1)))
        seq = make_sequence(tb.nrng, f"random{n}-{name}-T{T}", DIMS[name], T)
        await tb.run_sequence(seq)
        n += 1
    dut._log.info(f"seed {seed}: {n} sequences, {tb.steps} position-steps bit-exact")


@cocotb.test()
async def mla_edges(dut):
    """t = 0 alone, tied scores, q = 0, huge score gaps (exp underflow), saturating scores, dims change."""
    seed = _seed() + 1
    tb = TB(dut, seed)
    await tb.start()
    cases = [("t0-only", "nano", 1, "random"), ("t0-only", "tiny", 1, "random"),
             ("equal", "nano", 12, "equal"), ("zero-q", "tiny", 9, "zero_q"),
             ("huge", "nano", 16, "huge"), ("huge", "odd", 10, "huge"), ("huge", "odd1", 7, "huge"),
             ("saturate", "nano", 6, "saturate"), ("saturate", "tiny", 5, "saturate"),
             ("t0-again", "odd", 1, "random")]
    cases = [c for c in cases if c[1] in tb.dims]
    for name, dims, T, kind in cases:
        seq = make_sequence(tb.nrng, f"{name}-{dims}-T{T}", DIMS[dims], T, kind)
        await tb.run_sequence(seq)
    dut._log.info(f"seed {seed}: {len(cases)} edge sequences, {tb.steps} position-steps bit-exact")


@cocotb.test()
async def mla_max_seq(dut):
    """A full max_seq sequence and three positions of every other dims without stalls, each position's
    latency equal to MlaParams.cycles; then a full sequence with heavy stalls."""
    seed = _seed() + 2
    tb = TB(dut, seed, in_idle=0.0, out_ready=1.0)
    await tb.start()
    T = tb.p["max_seq"]
    big = "nano" if "nano" in tb.dims else "tiny"
    latency = {}
    for name, n in [(big, T)] + [(d, 3) for d in tb.dims if d != big]:
        seq = make_sequence(tb.nrng, f"latency-{name}-T{n}", DIMS[name], n)
        latency[name] = await tb.run_sequence(seq)
        for t, got in enumerate(latency[name]):
            want = tb.params.cycles(t, *seq.dims)
            assert got == want, f"{seq.name} position {t}: {got} cycles, MlaParams.cycles gives {want}"
    cycles = latency[big]
    dut._log.info(f"{big} dims {DIMS[big]}, no stalls: cycles per position t=0 {cycles[0]}, "
                  f"t={T // 2 - 1} {cycles[T // 2 - 1]}, t={T - 1} {cycles[-1]} (each = MlaParams.cycles); "
                  f"total {sum(cycles)} for {T} positions")
    tb.src.idle, tb.sink.ready_prob = 0.5, 0.4
    await tb.run_sequence(make_sequence(tb.nrng, f"maxseq-stall-tiny-T{T}", DIMS["tiny"], T))
    dut._log.info(f"seed {seed}: {tb.steps} position-steps bit-exact")


# ---- pytest runner -------------------------------------------------------------------------------------
# Chip presets to build: nano (the chip's engine: 16 lanes, 4 normalisation units: 4 steps per head and
# chunk; nano maxima; tiny, nano and odd runtime dims) and tiny (the tiny model's maxima at max_seq 64, 8
# lanes, 8 units: one step per head, the unshared normalisation). Position-steps per build: random + 61
# edge + 2 x max_seq + 3 per other dims.
BUILDS = {"nano": 700, "tiny": 120}
TEST_BUILDS = {"tiny": {"max_seq": 64, "lanes": 8, "norm_units": 8}}     # changes to the chip preset's engine


def _emit(sim_name: str, chip: str = "nano"):
    from dataclasses import replace
    from functools import partial
    from unittest import mock

    from hw.mla_engine import mla_engine_block, mla_engine_derived, mla_params_for
    from hw.params import preset
    from nano_k3 import luts
    from rtl_gen.emit import BLOCKS, emit, read_filelist
    from hw.roms import ROM_SUBDIR, RTL_DIR
    from verification.runner import MODELS, SIM_ROOT
    mp = replace(mla_params_for(preset(chip)), **TEST_BUILDS.get(chip, {}))
    block = replace(BLOCKS["mla_engine"], build=partial(mla_engine_block, params=mp),
                    derived=partial(mla_engine_derived, params=mp))
    # emitted as rtl/ in the simulator's working folder: the ROMs' "rtl/roms/<table>.hex" resolves there
    with mock.patch.dict(BLOCKS, {"mla_engine": block}):
        out = emit("mla_engine", SIM_ROOT / sim_name / RTL_DIR, preset(chip))
    luts.write_roms(out.verilog.parent / ROM_SUBDIR)
    return out, [*read_filelist(out.filelist), MODELS / "msh_rom.v", MODELS / "msh_sram.v"]


def test_mla_params_rejected_with_value():
    from dataclasses import replace

    from hw.mla_engine import MlaEngine, mla_params_for
    from hw.params import preset
    for kw, text in (({"lanes": 12}, "got 12"), ({"max_seq": 1}, "got 1"), ({"max_heads": 0}, "got 0"),
                     ({"max_dk": "32"}, "got '32'"), ({"norm_units": 3}, "got 3"),
                     ({"norm_units": 32}, "in 1..16, got 32"), ({"lanes": 2}, "in 1..2, got 4")):
        with pytest.raises(ValueError, match=text):
            replace(mla_params_for(preset("nano")), **kw)
    with pytest.raises(TypeError, match="got 3"):
        MlaEngine(3)


def test_mla_engine_lint():
    from verification.runner import lint
    out, sources = _emit("mla_engine_lint")
    res = lint(sources, out.top)
    from verification.lint import block_passes
    assert block_passes(res), res.output


@pytest.mark.parametrize("chip", sorted(BUILDS))
def test_mla_engine_verilator(chip):
    from verification.runner import run_cocotb
    out, sources = _emit(f"mla_engine_{chip}", chip)
    res = run_cocotb(f"mla_engine_{chip}", sources, out.top, "verification.test_mla_engine",
                     build_args=["--x-initial", "unique"], plusargs=["+verilator+rand+reset+2"],
                     extra_env={CFG_ENV: str(out.config), STEPS_ENV: str(BUILDS[chip])})
    assert res.passed and res.n_tests == 3, res
