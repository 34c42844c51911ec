"""cocotb + Verilator test of the residual mixer (hw.res_mixer, Verilog top ``res_mixer``).

Every mixed vector and every softmax weight e is compared with ``nano_k3.fixed.residual_mix`` (the
reference, called here, never re-implemented), bit for bit, with random idle cycles on the three
input streams (``i``: elements j .. j + K − 1 of every candidate, ``w``, ``proj``: the same K
elements, on every transfer) and random back-pressure on both outputs (``o``: K elements per
transfer, ``e``). The unused candidate entries (k >= n) carry random values. Payload layouts, the
build maxima and K (``lanes``) come from the ``config.json`` that rtl_gen wrote next to the Verilog.
The pytest runner checks the block rtl_gen emits (K = 2) and K = 1 and K = 4 builds of the same maxima.

Environment read by the cocotb side: NANO_K3_RTL_CONFIG (config.json, required), NANO_K3_MIX_CASES
(random cases, default 1000), NANO_K3_SEED (default 20240917).
"""
from __future__ import annotations

import json
import os
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ReadOnly, RisingEdge

from nano_k3.fixed import residual_mix
from nano_k3.fxp_ops import X
from verification.tb import CycleCounter, start_clock_and_reset

CFG_ENV, CASES_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_MIX_CASES", "NANO_K3_SEED"
DEFAULT_SEED = 20240917
PARAM_LO, PARAM_HI = -(1 << 15), (1 << 15) - 1      # int16 w (Q2.13) and proj (Q4.11)


# ---- stimulus --------------------------------------------------------------------------------------------
@dataclass
class Case:
    tag: str
    cands: np.ndarray        # (n, d) X, oldest first
    w: np.ndarray            # (d,) Q2.13
    proj: np.ndarray         # (d,) Q4.11
    mixed: np.ndarray = field(init=False)   # (d,) X
    e: np.ndarray = field(init=False)       # (n,) P

    def __post_init__(self) -> None:
        self.mixed, self.e = residual_mix(self.cands, self.w, self.proj)


def v_max(d: int) -> int:
    """Largest |element| for which the reference's int64 sum of squares cannot wrap (see the report)."""
    return min(X.hi, int(np.sqrt(((1 << 63) - 1) / d)) - 1)


def rand_vec(rng: np.random.Generator, d: int, kind: str) -> np.ndarray:
    vm = v_max(d)
    if kind == "zero":
        return np.zeros(d, dtype=np.int64)
    if kind == "tiny":                                   # a few LSBs: eps dominates the norm
        return rng.integers(-4, 5, d)
    if kind == "large":                                  # up to the largest magnitude the reference holds
        return rng.integers(-vm, vm + 1, d)
    if kind == "onehot":                                 # |RN| reaches sqrt(d)
        v = np.zeros(d, dtype=np.int64)
        v[rng.integers(d)] = int(rng.choice([-vm, vm, rng.integers(-vm, vm + 1)]))
        return v
    bits = int(rng.integers(4, vm.bit_length()))         # "normal": a random magnitude class
    return rng.integers(-(1 << bits), (1 << bits) + 1, d)


def rand_params(rng: np.random.Generator, d: int, full: bool) -> tuple[np.ndarray, np.ndarray]:
    if full:
        return rng.integers(PARAM_LO, PARAM_HI + 1, d), rng.integers(PARAM_LO, PARAM_HI + 1, d)
    return rng.integers(-2048, 2049, d), rng.integers(-4096, 4097, d)       # |w| <= 0.25, |proj| <= 2


def random_case(rng: np.random.Generator, idx: int, max_n: int, max_d: int, lanes: int) -> Case:
    n = int(rng.choice(sorted({1, 2, 3, max_n} & set(range(1, max_n + 1)))))
    ds = [1 << k for k in range(1, max_d.bit_length()) if max(2, lanes) <= 1 << k <= max_d]
    d = int(rng.choice(ds, p=None))
    kinds = ["normal"] * 6 + ["tiny", "large", "onehot", "zero"]
    pick = int(rng.integers(4))
    if pick == 0:                       # every candidate the same
        v = rand_vec(rng, d, str(rng.choice(kinds)))
        cands = np.stack([v] * n)
        tag = "same"
    else:
        cands = np.stack([rand_vec(rng, d, str(rng.choice(kinds))) for _ in range(n)])
        tag = "mixed"
    w, proj = rand_params(rng, d, full=idx % 5 == 0)
    return Case(f"r{idx}-n{n}-d{d}-{tag}", cands, w, proj)


def edge_cases(rng: np.random.Generator, max_n: int, max_d: int, lanes: int) -> list[Case]:
    d, dm = max_d, lanes                # dm: the shortest vector, one transfer
    vm = v_max(d)
    z = np.zeros(d, dtype=np.int64)
    ones = np.ones(d, dtype=np.int64)
    nrm = lambda n: np.stack([rand_vec(rng, d, "normal") for _ in range(n)])   # noqa: E731
    w0, p0 = rand_params(rng, d, full=False)
    cases = [
        Case("zero-vectors-n2", np.stack([z, z]), w0, p0),
        Case(f"zero-vectors-n{max_n}", np.stack([z] * max_n), w0, p0),
        Case("identical-n2", np.stack([nrm(1)[0]] * 2), w0, p0),
        Case("single-candidate", nrm(1), w0, p0),
        Case("one-lsb", np.stack([ones, -ones]), w0, p0),
        Case("max-magnitude", np.stack([np.full(d, vm), np.full(d, -vm)]), w0, p0),
        Case("onehot-max", np.stack([np.eye(d, dtype=np.int64)[0] * vm, np.eye(d, dtype=np.int64)[d - 1] * -vm]), w0, p0),
        Case("w-min-gain-negative", nrm(2), np.full(d, PARAM_LO), p0),
        Case("w-max", nrm(2), np.full(d, PARAM_HI), p0),
        Case("proj-max-t-saturates", nrm(max_n), np.full(d, PARAM_HI), np.full(d, PARAM_HI)),
        Case("proj-min", nrm(max_n), w0, np.full(d, PARAM_LO)),
        Case("proj-zero-uniform-e", nrm(3), w0, np.zeros(d, dtype=np.int64)),
        Case("huge-vs-tiny", np.stack([rand_vec(rng, d, "large"), rand_vec(rng, d, "tiny")]), w0, p0),
        Case(f"d{dm}", np.stack([np.resize([5 << 20, 9 << 8], dm), np.resize([-3 << 10, 1], dm)]), w0[:dm], p0[:dm]),
        Case(f"d{dm}-n1", np.resize([-7 << 18, 3 << 17], (1, dm)), w0[:dm], p0[:dm]),
        Case(f"d{dm}-n{max_n}", np.stack([rand_vec(rng, dm, "normal") for _ in range(max_n)]), w0[:dm], p0[:dm]),
        Case(f"d{2 * dm}-max-n", np.stack([rand_vec(rng, 2 * dm, "normal") for _ in range(max_n)]),   # two transfers
             w0[:2 * dm], p0[:2 * dm]),
        Case("full-range-params", nrm(max_n), *rand_params(rng, d, full=True)),
        Case("x-extremes", np.stack([np.full(d, X.hi), np.full(d, X.lo)]) if v_max(d) >= X.hi
             else np.stack([np.full(d, vm), np.full(d, -vm)]), w0, p0),
    ]
    return cases


# ---- the testbench -------------------------------------------------------------------------------------
class TB:
    """Clock, reset, three input drivers (random idles), two output sinks (random ready), scoreboard."""

    def __init__(self, dut, cfg: dict, seed: int):
        self.dut, self.cfg = dut, cfg
        self.rng = random.Random(seed)
        self.max_cands, self.lanes = cfg["derived"]["max_cands"], cfg["derived"]["lanes"]
        self.fields = {name: s["fields"] for name, s in cfg["streams"].items()}
        self.widths = {name: s["payload_bits"] for name, s in cfg["streams"].items()}
        for name in ("i", "w", "proj", "o"):
            assert len(getattr(dut, f"{name}__payload")) == self.widths[name], name
        self.trace_e = "e" in cfg["streams"]
        self.idle_prob, self.ready_prob = 0.2, 0.7
        self.q_i: deque[int] = deque()
        self.q_w: deque[int] = deque()
        self.q_p: deque[int] = deque()
        self.pend_o: deque[tuple[int, Case]] = deque()
        self.pend_e: deque[tuple[int, Case]] = deque()
        self.mismatches: list[str] = []
        self.n_checked = 0
        self.cycle = CycleCounter(dut.clk)
        self.first_accept: int | None = None
        self.last_out: int | None = None

    def pack(self, stream: str, **values: int) -> int:
        word = 0
        for name, v in values.items():
            off, width = self.fields[stream][name]
            word |= (int(v) & ((1 << width) - 1)) << off
        return word

    def field(self, stream: str, word: int, name: str, signed: bool) -> int:
        off, width = self.fields[stream][name]
        v = (word >> off) & ((1 << width) - 1)
        return v - (1 << width) if signed and v >> (width - 1) else v

    async def start(self) -> None:
        dut = self.dut
        for s in ("i", "w", "proj"):
            getattr(dut, f"{s}__valid").value = 0
            getattr(dut, f"{s}__payload").value = 0
        dut.o__ready.value = 0
        if self.trace_e:
            dut.e__ready.value = 0
        await start_clock_and_reset(dut.clk, dut.rst)
        self.cycle.start()
        cocotb.start_soon(self._drive("i", self.q_i))
        cocotb.start_soon(self._drive("w", self.q_w))
        cocotb.start_soon(self._drive("proj", self.q_p))
        cocotb.start_soon(self._sink("o"))
        if self.trace_e:
            cocotb.start_soon(self._sink("e"))

    async def _drive(self, name: str, q: deque) -> None:
        dut = self.dut
        valid, payload, ready = (getattr(dut, f"{name}__{s}") for s in ("valid", "payload", "ready"))
        while True:
            if not q or self.rng.random() < self.idle_prob:
                valid.value = 0
                payload.value = self.rng.getrandbits(len(payload))       # ignored while idle
                await RisingEdge(dut.clk)
                continue
            payload.value = q[0]
            valid.value = 1
            while True:
                await ReadOnly()
                taken = bool(ready.value)
                if taken and name == "i" and self.first_accept is None:
                    self.first_accept = self.cycle()
                await RisingEdge(dut.clk)
                if taken:
                    q.popleft()
                    break

    async def _sink(self, name: str) -> None:
        dut = self.dut
        valid, payload, ready = (getattr(dut, f"{name}__{s}") for s in ("valid", "payload", "ready"))
        got: list[int] = []
        while True:
            ready.value = int(self.rng.random() < self.ready_prob)
            await ReadOnly()
            if valid.value and ready.value:
                word = payload.value.to_unsigned()
                if name == "o":             # K elements per transfer
                    got.extend(self.field(name, word, f"data.{l}", signed=True) for l in range(self.lanes))
                else:
                    got.append(self.field(name, word, "data", signed=False))
                if self.field(name, word, "last", signed=False):
                    self._score(name, got)
                    got = []
                    if name == "o":
                        self.last_out = self.cycle()
            await RisingEdge(dut.clk)

    def _score(self, name: str, got: list[int]) -> None:
        pend = self.pend_o if name == "o" else self.pend_e
        if not pend:
            self.mismatches.append(f"unexpected {name} vector {got}: no case pending")
            return
        idx, case = pend.popleft()
        want = case.mixed if name == "o" else case.e
        if len(got) != len(want):
            self.mismatches.append(f"case {idx} ({case.tag}) {name}: expected {len(want)} elements got {len(got)}")
        for j, (g, x) in enumerate(zip(got, want)):
            if g != int(x):
                msg = f"case {idx} ({case.tag}) {name} index {j}: expected {int(x)} got {g}"
                if len(self.mismatches) < 20:
                    self.dut._log.error(msg)
                self.mismatches.append(msg)
                break
        if name == "o":
            self.n_checked += 1

    def submit(self, idx: int, case: Case) -> None:
        n, d = case.cands.shape
        K = self.lanes
        assert d % K == 0, f"{case.tag}: d {d} is not a multiple of lanes {K}"
        for j in range(0, d, K):
            data = {f"data.{k}.{l}": case.cands[k, j + l] if k < n else self.rng.getrandbits(X.bits)  # k >= n: don't-care
                    for k in range(self.max_cands) for l in range(K)}
            self.q_i.append(self.pack("i", **data, n=n, last=j + K == d))
            self.q_w.append(self.pack("w", **{str(l): case.w[j + l] for l in range(K)}))
            self.q_p.append(self.pack("proj", **{str(l): case.proj[j + l] for l in range(K)}))
        self.pend_o.append((idx, case))
        if self.trace_e:
            self.pend_e.append((idx, case))

    async def run(self, cases: list[Case], *, max_pending: int = 4, phases: bool = False) -> None:
        for idx, case in enumerate(cases):
            if phases:
                self.ready_prob = (0.2, 0.7, 1.0)[(idx // 40) % 3]
            while len(self.pend_o) >= max_pending:
                await RisingEdge(self.dut.clk)
            self.submit(idx, case)
        for _ in range(200_000):
            if not self.pend_o and not self.pend_e:
                break
            await RisingEdge(self.dut.clk)
        for _ in range(16):                 # nothing may come out after the last expected result
            await RisingEdge(self.dut.clk)

    def verdict(self, n_cases: int) -> None:
        assert not self.pend_o, f"{len(self.pend_o)} cases produced no output (first: {self.pend_o[0][1].tag})"
        assert not self.pend_e, f"{len(self.pend_e)} cases produced no e trace (first: {self.pend_e[0][1].tag})"
        assert not self.mismatches, (f"{len(self.mismatches)} mismatches in {n_cases} cases; first: "
                                     + "; ".join(self.mismatches[:5]))
        assert self.n_checked == n_cases, (self.n_checked, n_cases)


def _setup():
    cfg = json.loads(open(os.environ[CFG_ENV]).read())
    seed = int(os.environ.get(SEED_ENV, DEFAULT_SEED))
    der = cfg["derived"]
    return cfg, seed, der["max_cands"], der["max_d"], der["lanes"]


@cocotb.test()
async def mix_edge_cases(dut):
    cfg, seed, max_n, max_d, lanes = _setup()
    dut._log.info("seed %d, lanes %d", seed, lanes)
    tb = TB(dut, cfg, seed)
    await tb.start()
    cases = edge_cases(np.random.default_rng(seed), max_n, max_d, lanes)
    await tb.run(cases)
    tb.verdict(len(cases))


@cocotb.test()
async def mix_random(dut):
    cfg, seed, max_n, max_d, lanes = _setup()
    n = int(os.environ.get(CASES_ENV, 1000))
    dut._log.info("seed %d, %d random cases, lanes %d", seed + 1, n, lanes)
    tb = TB(dut, cfg, seed + 1)
    await tb.start()
    rng = np.random.default_rng(seed + 1)
    cases = [random_case(rng, idx, max_n, max_d, lanes) for idx in range(n)]
    await tb.run(cases, phases=True)
    tb.verdict(n)


@cocotb.test()
async def mix_latency(dut):
    """No idles, no back-pressure: nano mixes (d = 64, every n in 1..max_cands) take the documented cycles."""
    cfg, seed, max_n, max_d, lanes = _setup()
    assert max_d >= 64, f"the documented latencies are for d = 64, the build has max_d {max_d}"
    tb = TB(dut, cfg, seed + 2)
    tb.idle_prob, tb.ready_prob = 0.0, 1.0
    await tb.start()
    rng = np.random.default_rng(seed + 2)
    d = 64
    documented = {n: lat for n, lat in enumerate(cfg["derived"]["latency_d64"], start=1)}
    assert documented[2] == cfg["derived"]["latency_n2_d64"], documented
    ns = range(1, max_n + 1)
    for n in ns:
        case = Case(f"nano-n{n}-d{d}", np.stack([rand_vec(rng, d, "normal") for _ in range(n)]),
                    *rand_params(rng, d, False))
        tb.first_accept = None
        await tb.run([case])
        cycles = tb.last_out - tb.first_accept + 1
        dut._log.info("LATENCY K=%d n=%d d=%d: %d cycles from first accepted transfer to last output "
                      "(documented %d)", lanes, n, d, cycles, documented[n])
        assert cycles == documented[n], f"K={lanes} n={n} d={d}: {cycles} cycles, documented {documented[n]}"
    tb.verdict(len(ns))


# ---- pytest runner -------------------------------------------------------------------------------------
@pytest.mark.parametrize("lanes", [2, 1, 4, 8], ids=["k2", "k1", "k4", "k8"])
def test_res_mixer_verilator(lanes):
    """K = 2: the block rtl_gen emits; K = 1, 4 (a design-space choice) and 8 (the nano chip's): the same
    maxima at one, four and eight elements per cycle, registered for this test only."""
    from dataclasses import replace
    from functools import partial
    from unittest import mock

    from hw.params import preset
    from hw.res_mixer import BLOCK_PARAMS, res_mixer_block, res_mixer_derived
    from hw.roms import ROM_SUBDIR, RTL_DIR
    from nano_k3.luts import write_roms
    from rtl_gen import BLOCKS, emit, read_filelist
    from verification.runner import MODELS, SIM_ROOT, lint, run_cocotb
    if lanes == BLOCK_PARAMS.lanes:
        name, extra = "res_mixer", {}
    else:
        name, params = f"res_mixer_k{lanes}", replace(BLOCK_PARAMS, lanes=lanes)
        extra = {name: replace(BLOCKS["res_mixer"], build=partial(res_mixer_block, params=params),
                               derived=partial(res_mixer_derived, params=params))}
    # emit as rtl/ in the simulator's working folder: msh_rom's INIT_FILE "rtl/roms/<table>.hex" resolves there
    with mock.patch.dict(BLOCKS, extra):
        out = emit(name, SIM_ROOT / name / RTL_DIR, preset("nano"))
    cfg = json.loads(out.config.read_text())
    assert cfg["derived"]["lanes"] == lanes and cfg["top"] == "res_mixer", cfg["derived"]
    write_roms(out.verilog.parent / ROM_SUBDIR)
    sources = [*read_filelist(out.filelist), MODELS / "msh_sram.v", MODELS / "msh_rom.v"]
    lint_result = lint(sources, out.top)
    assert lint_result.errors == 0, lint_result.output
    print(f"lint: {lint_result.errors} errors, {lint_result.warnings} warnings {lint_result.by_rule}")
    res = run_cocotb(name, sources, out.top, "verification.test_res_mixer",
                     extra_env={CFG_ENV: str(out.config)})
    for line in res.log_text().splitlines():
        if "LATENCY" in line:
            print(line.strip())
    assert res.passed and res.n_tests == 3, res
