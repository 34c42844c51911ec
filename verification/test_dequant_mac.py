"""cocotb + Verilator test of the INT4 dequant-MAC lane group (hw.dequant_mac, Verilog top ``dequant_mac``).

Every output is compared with nano_k3.int4.dequant_matvec (the reference, never re-implemented
here), bit for bit, under random input idle cycles and random output back-pressure. The pytest
functions at the bottom generate the Verilog with rtl_gen and run the cocotb tests through
verification.runner; one of them proves that a corrupted output bit is caught.

Environment read by the cocotb side: NANO_K3_RTL_CONFIG (config.json from rtl_gen, required),
NANO_K3_DMAC_CASES (number of random cases, default 1000), NANO_K3_SEED (default 20240917).
"""
from __future__ import annotations

import os
import random
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from hw.dequant_mac import in_layout
from hw.params import NIBBLE_MAX, ChipParams
from nano_k3.int4 import dequant_matvec, pack_nibbles
from verification.tb import StreamTB

CFG_ENV, CASES_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_DMAC_CASES", "NANO_K3_SEED"
DEFAULT_SEED = 20240917
FAN_INS = (32, 64, 128, 256, 512)
MISMATCH_RE = re.compile(r"case (\d+) \((\S+)\) lane (\d+): expected (-?\d+) got (-?\d+)")


# ---- stimulus: cases (numpy) and the beats that carry them ---------------------------------------------
@dataclass
class Case:
    tag: str
    x: np.ndarray           # (fan_in,) signed act_bits
    q: np.ndarray           # (fan_in, lanes) nibbles 0..15
    s: np.ndarray           # (G, lanes) int16 Q3.12
    z: np.ndarray           # (G, lanes) 0..15
    group: int
    expected: np.ndarray = field(init=False)   # (lanes,) int64

    def __post_init__(self) -> None:
        self.expected = dequant_matvec(self.x, self.q, self.s, self.z, self.group)


def make_case(rng: np.random.Generator, p: ChipParams, tag: str, fan_in: int, group: int, *,
              q=None, x=None, s=None, z=None) -> Case:
    lanes, n_groups = p.mac_lanes, -(-fan_in // group)
    (a_lo, a_hi), (s_lo, s_hi) = p.act_range, p.scale_range
    full = lambda v, shape: np.full(shape, v, dtype=np.int64)  # noqa: E731
    q = rng.integers(0, NIBBLE_MAX + 1, (fan_in, lanes)) if q is None else full(q, (fan_in, lanes))
    x = rng.integers(a_lo, a_hi + 1, fan_in) if x is None else full(x, fan_in)
    s = rng.integers(s_lo, s_hi + 1, (n_groups, lanes)) if s is None else full(s, (n_groups, lanes))
    z = rng.integers(0, NIBBLE_MAX + 1, (n_groups, lanes)) if z is None else full(z, (n_groups, lanes))
    return Case(tag, x, q, s, z, group)


def random_case(rng: np.random.Generator, p: ChipParams, idx: int) -> Case:
    """Mixes SPEC §11-like weights (z 6..9, s ≈ s0 ± s0/4) with full-range draws."""
    fan_ins = [f for f in FAN_INS if f <= p.max_fan_in]
    fan_in = int(rng.choice(fan_ins))
    groups = [1, 2] + ([4] if fan_in >= 128 and idx % 7 == 0 else [])
    group = fan_in // int(rng.choice(groups))
    case = make_case(rng, p, f"r{idx}-f{fan_in}-g{group}", fan_in, group)
    if idx % 2:   # benchmark-like value ranges
        s0 = 4096 / (4.61 * np.sqrt(fan_in))
        case.s = np.maximum(1, np.round(s0 + rng.uniform(-s0 / 4, s0 / 4, case.s.shape))).astype(np.int64)
        case.z = rng.integers(6, 10, case.z.shape)
        case.x = rng.integers(-4096, 4096, fan_in)
        case.__post_init__()
    return case


def edge_cases(rng: np.random.Generator, p: ChipParams) -> list[Case]:
    (a_lo, a_hi), (s_lo, s_hi) = p.act_range, p.scale_range
    n = p.max_fan_in
    cases = [
        make_case(rng, p, "q0-all-zero-nibbles", 64, 64, q=0),
        make_case(rng, p, "q15-all-15-nibbles", 128, 64, q=15),
        make_case(rng, p, "s1-unit-scale", 64, 32, s=1),
        make_case(rng, p, "s32767-max-scale", 128, 128, s=s_hi),
        make_case(rng, p, "s-32768-min-scale", 128, 64, s=s_lo),
        make_case(rng, p, "x-max-activation", 64, 64, x=a_hi),
        make_case(rng, p, "x-min-activation", 64, 32, x=a_lo),
        make_case(rng, p, "ragged-f96-g64", 96, 64),
        make_case(rng, p, "f2-single-beat", 2, 2),
        make_case(rng, p, "zero-x", 64, 64, x=0),
        make_case(rng, p, f"f{n}-g2-every-beat-a-group", n, 2),
        # the largest |y| the widths are sized for: every row contributes 15·2^(act−1)·2^(scale−1)
        make_case(rng, p, f"sat-max-pos-f{n}", n, n, q=15, z=0, x=a_lo, s=s_lo),
        make_case(rng, p, f"sat-max-neg-f{n}", n, n // 2, q=0, z=15, x=a_lo, s=s_lo),
        make_case(rng, p, f"sat-qmax-xmax-f{n}", n, n, q=15, z=0, x=a_hi, s=s_hi),
        make_case(rng, p, f"sat-qmax-xmin-smax-f{n}", n, n, q=15, z=0, x=a_lo, s=s_hi),
        make_case(rng, p, f"sat-z15-xmin-f{n}", n, n // 2, q=15, z=15, x=a_lo, s=s_lo),
    ]
    return cases


# ---- the testbench -------------------------------------------------------------------------------------
class TB(StreamTB):
    """Clock, reset, input driver (random idles), output back-pressure, monitor and scoreboard."""

    def __init__(self, dut, params: ChipParams, seed: int):
        self.idle_prob, self.ready_prob = 0.2, 0.7
        super().__init__(dut, random.Random(seed), lambda: self.idle_prob, lambda: self.ready_prob)
        self.p, self.lanes = params, params.mac_lanes
        layout = in_layout(params)
        self.off = {name: f.offset for name, f in layout}
        self.width = {name: f.width for name, f in layout}
        self.out_bits = params.out_bits
        # sizes come from the DUT, checked against the parameters the Verilog was generated from
        assert len(dut.i__payload) == layout.size, (len(dut.i__payload), layout.size)
        assert len(dut.o__payload) == self.lanes * self.out_bits, (len(dut.o__payload), self.lanes, self.out_bits)
        self.pending: deque[tuple[int, Case]] = deque()
        self.mismatches: list[str] = []
        self.n_checked = 0
    def on_output(self, word: int, cycle: int) -> None:
        self._score(word)
        self.output_cycles.append(cycle)

    def _score(self, word: int) -> None:
        if not self.pending:
            self.mismatches.append(f"unexpected output {word:#x}: no case pending")
            return
        idx, case = self.pending.popleft()
        mask, sign = (1 << self.out_bits) - 1, 1 << (self.out_bits - 1)
        for c in range(self.lanes):
            raw = (word >> (c * self.out_bits)) & mask
            got = raw - (1 << self.out_bits) if raw & sign else raw
            if got != int(case.expected[c]):
                msg = f"case {idx} ({case.tag}) lane {c}: expected {int(case.expected[c])} got {got}"
                if len(self.mismatches) < 20:
                    self.dut._log.error(msg)
                self.mismatches.append(msg)
        self.n_checked += 1

    def beats(self, case: Case) -> list[int]:
        """Payload words of a case (SPEC §4.3 packing); s/z are random on beats that do not end a group."""
        packed = pack_nibbles(case.q)                                    # (fan_in/2, lanes) bytes
        rows = packed.shape[0]
        (s_lo, s_hi), amask = self.p.scale_range, (1 << self.p.act_bits) - 1
        smask, zmask = (1 << self.p.scale_bits) - 1, (1 << self.p.zero_bits) - 1
        words = []
        for r in range(rows):
            end = (2 * r + 2) % case.group == 0 or r == rows - 1
            g = (2 * r) // case.group
            s = case.s[g] if end else [self.rng.randint(s_lo, s_hi) for _ in range(self.lanes)]
            z = case.z[g] if end else [self.rng.randint(0, NIBBLE_MAX) for _ in range(self.lanes)]
            w = int.from_bytes(packed[r].tobytes(), "little") << self.off["q"]
            w |= (int(case.x[2 * r]) & amask) << self.off["x"]
            w |= (int(case.x[2 * r + 1]) & amask) << (self.off["x"] + self.p.act_bits)
            for c in range(self.lanes):
                w |= (int(s[c]) & smask) << (self.off["s"] + c * self.p.scale_bits)
                w |= (int(z[c]) & zmask) << (self.off["z"] + c * self.p.zero_bits)
            w |= (int(r == 0) << self.off["first"]) | (int(end) << self.off["last_in_group"])
            w |= int(r == rows - 1) << self.off["last"]
            words.append(w)
        return words

    async def send(self, idx: int, case: Case) -> None:
        self.pending.append((idx, case))
        await self.drivers["i"].send(self.beats(case))

    async def drain(self, max_cycles: int = 10_000) -> None:
        for _ in range(max_cycles):
            if not self.pending:
                break
            await RisingEdge(self.dut.clk)
        for _ in range(8):      # nothing may come out after the last expected result
            await RisingEdge(self.dut.clk)

    def verdict(self, n_cases: int) -> None:
        assert not self.pending, f"{len(self.pending)} cases produced no output (first: {self.pending[0][1].tag})"
        assert not self.mismatches, (f"{len(self.mismatches)} lane mismatches in {n_cases} cases; first: "
                                     + "; ".join(self.mismatches[:5]))
        assert self.n_checked == n_cases, (self.n_checked, n_cases)


def _setup():
    from rtl_gen import read_config
    cfg, params = read_config(os.environ[CFG_ENV])
    seed = int(os.environ.get(SEED_ENV, DEFAULT_SEED))
    return cfg, params, seed


@cocotb.test()
async def dmac_edge_cases(dut):
    cfg, p, seed = _setup()
    dut._log.info("seed %d", seed)
    tb = TB(dut, p, seed)
    await tb.start()
    cases = edge_cases(np.random.default_rng(seed), p)
    for idx, case in enumerate(cases):
        await tb.send(idx, case)
    await tb.drain()
    tb.verdict(len(cases))


@cocotb.test()
async def dmac_random(dut):
    cfg, p, seed = _setup()
    n = int(os.environ.get(CASES_ENV, 1000))
    dut._log.info("seed %d, %d random cases", seed, n)
    tb = TB(dut, p, seed + 1)
    await tb.start()
    rng = np.random.default_rng(seed + 1)
    for idx in range(n):
        # phases of heavy and light back-pressure so that results pile up inside the pipeline
        tb.ready_prob = (0.15, 0.7, 1.0)[(idx // 50) % 3]
        await tb.send(idx, random_case(rng, p, idx))
    await tb.drain()
    tb.verdict(n)


@cocotb.test()
async def dmac_stream_timing(dut):
    """No idles, no back-pressure: one beat per cycle back to back, result LATENCY cycles after the last beat."""
    cfg, p, seed = _setup()
    tb = TB(dut, p, seed + 2)
    tb.idle_prob, tb.ready_prob = 0.0, 1.0
    await tb.start()
    rng = np.random.default_rng(seed + 2)
    cases = [make_case(rng, p, f"t{k}", f, f // 2) for k, f in enumerate((p.max_fan_in, 32, 64))]
    for idx, case in enumerate(cases):
        await tb.send(idx, case)
    await tb.drain()
    tb.verdict(len(cases))
    n_beats = sum(c.q.shape[0] // 2 for c in cases)
    span = tb.drivers["i"].accept_cycles[-1] - tb.drivers["i"].accept_cycles[0] + 1
    assert span == n_beats, f"{n_beats} beats took {span} cycles: the block does not take one beat per cycle"
    last_beat, ends = 0, []
    for c in cases:
        last_beat += c.q.shape[0] // 2
        ends.append(tb.drivers["i"].accept_cycles[last_beat - 1])
    latencies = [o - e for o, e in zip(tb.output_cycles, ends)]
    assert latencies == [cfg["derived"]["latency"]] * len(cases), f"latencies {latencies}, " \
        f"documented {cfg['derived']['latency']}"


# ---- pytest runners ------------------------------------------------------------------------------------
def _emit(name: str):
    from hw.params import preset
    from rtl_gen import emit, read_filelist
    from verification.runner import SIM_ROOT
    out = emit("dequant_mac", SIM_ROOT / name / "rtl", preset("nano"))
    return out, read_filelist(out.filelist)


def test_dequant_mac_verilator():
    from verification.runner import lint, run_cocotb
    out, sources = _emit("dequant_mac")
    lint_result = lint(sources, out.top)
    assert lint_result.clean, lint_result.output
    res = run_cocotb("dequant_mac", sources, out.top, "verification.test_dequant_mac",
                     extra_env={CFG_ENV: str(out.config)})
    assert res.passed and res.n_tests == 3, res


def test_dequant_mac_corrupted_output_is_caught():
    """The same testbench against a wrapper that flips one output bit: the run must fail and say where."""
    import json

    from verification.runner import run_cocotb
    out, sources = _emit("dequant_mac_corrupt")
    cfg = json.loads(out.config.read_text())
    lane, bit, out_bits = 3, 5, cfg["derived"]["widths"]["out"]
    wrapper = Path(__file__).resolve().parent / "wrappers" / "dequant_mac_corrupt.v"
    res = run_cocotb("dequant_mac_corrupt", [*sources, wrapper], "dequant_mac_corrupt",
                     "verification.test_dequant_mac", testcase="dmac_random", check=False,
                     defines={"CORRUPT_OUTPUT": 1},
                     parameters={"IW": cfg["streams"]["i"]["payload_bits"],
                                 "OW": cfg["streams"]["o"]["payload_bits"], "FLIP_BIT": lane * out_bits + bit},
                     extra_env={CFG_ENV: str(out.config), CASES_ENV: "20"})
    assert res.n_tests == 1 and res.n_failed == 1 and not res.passed, res
    hits = [m for m in MISMATCH_RE.finditer(res.log_text())]
    assert hits, f"no 'lane L: expected E got G' line in {res.log}"
    assert {int(m.group(3)) for m in hits} == {lane}, "only the corrupted lane may mismatch"
    assert all(abs(int(m.group(4)) - int(m.group(5))) == 1 << bit for m in hits), [m.group(0) for m in hits[:3]]
