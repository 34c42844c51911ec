"""cocotb + Verilator test of the MoE router (hw.moe_router, Verilog top ``moe_router``).

Every case is compared with the fixed-point model, called here and never re-implemented:
``nano_k3.fixed.router_scores`` (sigmoid), ``router_select`` (biased, stable top-k) and
``router_weights`` (renormalised × 2.828 in RW). The RTL must return the same experts in the same
order with the same weights, bit for bit, under random idle cycles on ``i`` and random back-pressure
on ``o``, and announce the experts on ``choice`` (``choice_valid``) before the first pair. The pytest runner at the bottom emits the Verilog with rtl_gen as ``rtl/`` in the simulator's
working folder, writes the LUT ROMs into its ``roms/``, lints it and runs the cocotb tests.

Environment read by the cocotb side: NANO_K3_RTL_CONFIG (config.json from rtl_gen, required),
NANO_K3_ROUTER_CASES (random cases, default 2000), NANO_K3_SEED (default 20240917).
"""
from __future__ import annotations

import os
import random
from collections import deque
from dataclasses import dataclass, field

import cocotb
import numpy as np
from cocotb.triggers import ReadOnly, RisingEdge

from nano_k3.fixed import router_scores, router_select, router_weights
from nano_k3.fxp_ops import P, X
from verification.tb import StreamTB

CFG_ENV, CASES_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_ROUTER_CASES", "NANO_K3_SEED"
DEFAULT_SEED = 20240917
BIAS_LO, BIAS_HI = -(1 << 15), (1 << 15) - 1          # moe.bias: int16 Q4.11


# ---- stimulus and reference -------------------------------------------------------------------------------
@dataclass
class Case:
    tag: str
    logits: np.ndarray        # (E,) X
    bias: np.ndarray          # (E,) Q4.11
    k: int
    top: np.ndarray = field(init=False)        # (min(k, E),) expert indices, selection order
    weights: np.ndarray = field(init=False)    # (min(k, E),) RW

    def __post_init__(self) -> None:
        scores = router_scores(self.logits)                                   # (E,) P
        self.top = router_select(scores, self.bias, self.k)
        chosen = scores[self.top]
        self.weights = router_weights(chosen)      # all-zero chosen scores give zero weights


def x_of(real) -> np.ndarray:
    return np.clip(np.round(np.asarray(real, dtype=np.float64) * (1 << X.frac)), X.lo, X.hi).astype(np.int64)


def random_case(rng: np.random.Generator, idx: int, max_e: int, max_k: int) -> Case:
    """E in {2, 8, max} (and any size now and then), k in {1, 2, max}; logits and biases from a mix of
    ranges (near 0, past the sigmoid's ±16 saturation, the whole X range) and with duplicated
    (logit, bias) pairs so that equal keys occur often."""
    e = int(rng.choice([2, 8, max_e, int(rng.integers(1, max_e + 1))], p=[0.3, 0.3, 0.3, 0.1]))
    k = int(rng.choice([1, 2, max_k]))
    kind = idx % 4
    if kind == 0:
        logits = x_of(rng.normal(0, 2, e))
    elif kind == 1:
        logits = x_of(rng.uniform(-24, 24, e))                         # past the table range both ways
    elif kind == 2:
        logits = rng.integers(X.lo, X.hi + 1, e)                        # anything the container holds
    else:
        logits = x_of(rng.choice([-20.0, -1.0, 0.0, 0.5, 20.0], e))     # few distinct values: ties
    bias_kind = (idx // 4) % 3
    if bias_kind == 0:
        bias = rng.integers(-2048, 2049, e)                             # ±1.0
    elif bias_kind == 1:
        bias = rng.integers(BIAS_LO, BIAS_HI + 1, e)                    # full int16: bias dominates
    else:
        bias = rng.choice([-2048, 0, 0, 2048], e)                       # few values: ties
    if e > 1 and rng.random() < 0.4:                                    # duplicate some experts
        for _ in range(int(rng.integers(1, e))):
            a, b = rng.integers(0, e, 2)
            logits[b], bias[b] = logits[a], bias[a]
    return Case(f"r{idx}-e{e}-k{k}", logits.astype(np.int64), bias.astype(np.int64), k)


def edge_cases(max_e: int, max_k: int) -> list[Case]:
    big, one = 20 << X.frac, 1 << X.frac
    z = lambda n: np.zeros(n, dtype=np.int64)                                     # noqa: E731
    full = lambda n, v: np.full(n, v, dtype=np.int64)                               # noqa: E731
    dom = full(8, -5 * one)
    dom[5] = 5 * one
    cases = [
        Case("all-equal-keys-e8-k2", z(8), z(8), 2),
        Case(f"all-equal-keys-e{max_e}-k{max_k}", full(max_e, one), full(max_e, 100), max_k),
        Case(f"all-equal-saturated-e{max_e}-k{max_k}", full(max_e, big), z(max_e), max_k),
        # key ties between different (score, bias): σ = 1 with bias b equals σ = 0 with bias b + 1.0
        Case("tie-sat-hi-vs-sat-lo-plus-one", np.array([-big, big, -big, big], dtype=np.int64),
             np.array([2048, 0, 2048, 0], dtype=np.int64), 3),
        Case("saturated-x-extremes", np.array([X.hi, X.lo, X.hi, X.lo, 0, X.hi - 1, X.lo + 1, 1], dtype=np.int64),
             z(8), 2),
        Case("saturated-at-table-edge", np.array([(16 << X.frac) - 1, 16 << X.frac, -(16 << X.frac),
                                                  -(16 << X.frac) + 1], dtype=np.int64), z(4), 4),
        Case("one-expert-dominates-logit", dom, z(8), 2),
        Case("one-expert-dominates-bias", z(8), np.array([0, 0, 0, 0, 0, 0, 0, BIAS_HI], dtype=np.int64), 2),
        Case("min-bias-never-chosen", full(4, one), np.array([BIAS_LO, 0, BIAS_LO, 0], dtype=np.int64), 2),
        Case("dominant-with-zero-partner", np.array([-big, big, -big, -big], dtype=np.int64), z(4), 2),
        Case("ascending-keys", x_of(np.linspace(-3, 3, max_e)), z(max_e), max_k),
        Case("descending-keys", x_of(np.linspace(3, -3, max_e)), z(max_e), max_k),
        Case("e1-single-expert", x_of([0.3]), z(1), 1),
        Case(f"e2-k{max_k}-k-above-e", x_of([0.1, 0.2]), z(2), max_k),
        Case(f"e{max_e}-k1", x_of(np.linspace(-1, 1, max_e)[::-1]), z(max_e), 1),
        # outside the reference's domain (Σ chosen = 0): the documented RTL result is weight 0
        Case("sum-zero-all-saturated-low", full(8, -big), z(8), 2),
    ]
    return cases


# ---- the testbench ----------------------------------------------------------------------------------------
def pack(fields: dict, **values: int) -> int:
    word = 0
    for name, v in values.items():
        off, width = fields[name]
        word |= (int(v) & ((1 << width) - 1)) << off
    return word


def unpack(fields: dict, word: int) -> dict[str, int]:
    return {name: word >> off & ((1 << width) - 1) for name, (off, width) in fields.items()}


class TB(StreamTB):
    """Clock, reset, input driver (random idles), output back-pressure, monitor and scoreboard."""

    def __init__(self, dut, cfg: dict, seed: int):
        self.idle_prob, self.ready_prob = 0.25, 0.6
        super().__init__(dut, random.Random(seed), lambda: self.idle_prob, lambda: self.ready_prob)
        self.cfg = cfg
        self.fi, self.fo = cfg["streams"]["i"]["fields"], cfg["streams"]["o"]["fields"]
        assert len(dut.i__payload) == cfg["streams"]["i"]["payload_bits"], len(dut.i__payload)
        assert len(dut.o__payload) == cfg["streams"]["o"]["payload_bits"], len(dut.o__payload)
        self.pending: deque[tuple[int, Case]] = deque()
        self.got: list[tuple[int, int, int]] = []          # pairs of the case being received
        self.choices: deque[list[int]] = deque()           # ``choice`` at each choice_valid, in order
        self.choice_cycles: list[int] = []
        self.expert_bits = d_bits = max(1, (cfg["derived"]["max_experts"] - 1).bit_length())
        assert len(dut.choice) == d_bits * cfg["derived"]["max_top_k"], len(dut.choice)
        self.mismatches: list[str] = []
        self.n_checked = 0
    def start_agents(self) -> None:
        super().start_agents()
        cocotb.start_soon(self._watch_choice())

    async def _watch_choice(self) -> None:
        """Record ``choice`` (the sorted experts) in every cycle ``choice_valid`` is high."""
        b = self.expert_bits
        while True:
            await ReadOnly()
            if self.dut.choice_valid.value:
                word = self.dut.choice.value.to_unsigned()
                self.choices.append([word >> (j * b) & ((1 << b) - 1) for j in range(len(self.dut.choice) // b)])
                self.choice_cycles.append(self.cycle())
            await RisingEdge(self.dut.clk)

    def on_output(self, word: int, cycle: int) -> None:
        f = unpack(self.fo, word)
        self.got.append((f["expert"], f["weight"], f["last"]))
        self.output_cycles.append(cycle)
        if f["last"]:
            self._score()

    def _fail(self, msg: str) -> None:
        if len(self.mismatches) < 20:
            self.dut._log.error(msg)
        self.mismatches.append(msg)

    def _score(self) -> None:
        got, self.got = self.got, []
        if not self.pending:
            self._fail(f"unexpected output {got}: no case pending")
            return
        idx, case = self.pending.popleft()
        want = [(int(e), int(w)) for e, w in zip(case.top, case.weights)]
        # the experts were announced (``choice``) before the first pair, in the pairs' order
        chosen = self.choices.popleft()[:len(want)] if self.choices else None
        if chosen != [e for e, _ in want]:
            self._fail(f"case {idx} ({case.tag}): choice {chosen}, expected the experts {[e for e, _ in want]}")
        if len(got) != len(want):
            self._fail(f"case {idx} ({case.tag}): expected {len(want)} pairs {want}, got {len(got)} "
                       f"{[(e, w) for e, w, _ in got]}")
        for j, ((e, w, _), (we, ww)) in enumerate(zip(got, want)):
            if (e, w) != (we, ww):
                self._fail(f"case {idx} ({case.tag}) pair {j}: expected expert {we} weight {ww} "
                           f"got expert {e} weight {w}")
        self.n_checked += 1

    async def send(self, idx: int, case: Case) -> None:
        self.pending.append((idx, case))
        n = len(case.logits)
        k_bits = self.fi["top_k"][1]
        # top_k is read on `last` only: the other elements carry random values
        await self.drivers["i"].send(pack(self.fi, logit=case.logits[e], bias=case.bias[e], last=e == n - 1,
                                    top_k=case.k if e == n - 1 else self.rng.getrandbits(k_bits)) for e in range(n))

    async def drain(self, max_cycles: int = 10_000) -> None:
        for _ in range(max_cycles):
            if not self.pending:
                break
            await RisingEdge(self.dut.clk)
        for _ in range(8):
            await RisingEdge(self.dut.clk)

    def verdict(self, n_cases: int) -> None:
        assert not self.pending, f"{len(self.pending)} cases produced no output (first: {self.pending[0][1].tag})"
        assert not self.mismatches, (f"{len(self.mismatches)} mismatches in {n_cases} cases; first: "
                                     + "; ".join(self.mismatches[:5]))
        assert self.n_checked == n_cases, (self.n_checked, n_cases)


def _setup():
    from rtl_gen import read_config
    cfg, _ = read_config(os.environ[CFG_ENV])
    return cfg, int(os.environ.get(SEED_ENV, DEFAULT_SEED))


async def _run(dut, tb: TB, cases: list[Case]) -> None:
    await tb.start()
    for idx, case in enumerate(cases):
        await tb.send(idx, case)
    await tb.drain()
    tb.verdict(len(cases))


@cocotb.test()
async def router_edge_cases(dut):
    cfg, seed = _setup()
    d = cfg["derived"]
    dut._log.info("seed %d", seed)
    cases = edge_cases(d["max_experts"], d["max_top_k"])
    await _run(dut, TB(dut, cfg, seed), cases)


@cocotb.test()
async def router_random(dut):
    cfg, seed = _setup()
    d = cfg["derived"]
    n = int(os.environ.get(CASES_ENV, 2000))
    rng = np.random.default_rng(seed + 1)
    cases = [random_case(rng, idx, d["max_experts"], d["max_top_k"]) for idx in range(n)]
    zero_sum = sum(not router_scores(c.logits)[c.top].sum() for c in cases)
    dut._log.info("seed %d, %d random cases (%d with all chosen scores 0), %d key ties", seed + 1, n,
                  zero_sum, sum(_has_tie(c) for c in cases))
    tb = TB(dut, cfg, seed + 1)
    await tb.start()
    for idx, case in enumerate(cases):
        tb.ready_prob = (0.2, 0.6, 1.0)[(idx // 50) % 3]     # phases of heavy and light back-pressure
        await tb.send(idx, case)
    await tb.drain()
    tb.verdict(n)


def _has_tie(case: Case) -> bool:
    key = router_scores(case.logits) + (case.bias << (P.frac - 11))
    return len(set(key.tolist())) < len(key)


@cocotb.test()
async def router_timing(dut):
    """No idles, no back-pressure: one element per cycle, first pair after the documented latency,
    then one pair per cycle."""
    cfg, seed = _setup()
    d = cfg["derived"]
    tb = TB(dut, cfg, seed + 2)
    tb.idle_prob, tb.ready_prob = 0.0, 1.0
    rng = np.random.default_rng(seed + 2)
    cases = [Case(f"t{i}-e8-k2", x_of(rng.normal(0, 2, 8)), rng.integers(-512, 512, 8), 2) for i in range(3)]
    await _run(dut, tb, cases)
    for c in range(len(cases)):
        first_in = tb.drivers["i"].accept_cycles[8 * c]
        last_in = tb.drivers["i"].accept_cycles[8 * c + 7]
        o0, o1 = tb.output_cycles[2 * c], tb.output_cycles[2 * c + 1]
        assert last_in - first_in == 7, f"case {c}: 8 elements took {last_in - first_in + 1} cycles"
        assert o0 - first_in == d["latency_e8"], f"case {c}: latency {o0 - first_in}, documented {d['latency_e8']}"
        assert o1 == o0 + 1, f"case {c}: pairs {o0}, {o1} not back to back"
        ch = tb.choice_cycles[c] - first_in
        assert ch == d["choice_latency_e8"], f"case {c}: choice after {ch} cycles, documented {d['choice_latency_e8']}"
    dut._log.info("E=8, k=2: experts %d cycles and first pair %d cycles after the first element, vector done "
                  "in %d cycles", d["choice_latency_e8"], d["latency_e8"], d["latency_e8"] + 2)


# ---- pytest runner ------------------------------------------------------------------------------------


def _emit(sim_name: str):
    """Emit as rtl/ in the simulator's working folder, LUT ROMs in its roms/ (the default INIT_FILE path)."""
    from hw.params import preset
    from hw.roms import ROM_SUBDIR, RTL_DIR
    from nano_k3 import luts
    from rtl_gen import emit, read_filelist
    from verification.runner import MODELS, SIM_ROOT
    out = emit("moe_router", SIM_ROOT / sim_name / RTL_DIR, preset("nano"))
    luts.write_roms(out.verilog.parent / ROM_SUBDIR)
    return out, [*read_filelist(out.filelist), MODELS / "msh_rom.v"]


def test_moe_router_verilator():
    from verification.runner import lint, run_cocotb
    out, sources = _emit("moe_router")
    lint_result = lint(sources, out.top)
    from verification.lint import block_passes
    assert block_passes(lint_result), lint_result.output
    res = run_cocotb("moe_router", sources, out.top, "verification.test_moe_router",
                     extra_env={CFG_ENV: str(out.config)})
    assert res.passed and res.n_tests == 3, res


def test_moe_router_params_rejected():
    """Bad build parameters are refused at construction, and the message shows the bad value."""
    import pytest

    from hw.moe_router import MoeRouter, MoeRouterParams
    for kwargs, shown in (({"max_experts": 1}, "got 1"), ({"max_top_k": 0}, "got 0"),
                          ({"max_experts": 8, "max_top_k": 9}, "got 9"), ({"max_experts": "16"}, "got '16'")):
        with pytest.raises(ValueError, match=shown):
            MoeRouterParams(**kwargs)
    with pytest.raises(TypeError, match="got 16"):
        MoeRouter(16)
    with pytest.raises(ValueError, match="got ''"):
        MoeRouter(rom_dir="")
