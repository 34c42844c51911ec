"""cocotb + Verilator test of the weight store + INT4 dequant-MAC array (hw.mac_array, top ``mac_array``).

The store is loaded with the tensor block of a real image (nano_k3.weights.generate +
nano_k3.image.build_image); every matvec is checked against the fixed-point model's own function,
bit for bit: ``fxp_ops.matvec(*fxp_ops.mac_input(x, X.frac), q, s, z, g)`` (X results), or for
``fmt = 1`` ``fixed.logits_out(int4.dequant_matvec(...), frac + ACC_FRAC)`` (the LM head's LOGIT path).
Every tensor shape of the model is covered at group 64 and 128, with random idles on ``w``/``act``/``i``
and random back-pressure on ``o``; edge cases overwrite one tensor's q/s/z in the store with extreme
values (all-15 nibbles, ±32767/−32768 scales, zero points 0/15) and use zero and full-scale vectors.

Environment (cocotb side): NANO_K3_RTL_CONFIG (config.json from rtl_gen), NANO_K3_MAC_CASES (random
matvecs per group size, default 500), NANO_K3_SEED (default 20240917), NANO_K3_MAC_SCALE_LANES (set when
the simulated array has other ``scale_lanes`` than its preset's, see ``test_mac_array_tiny_scale_lanes``).
"""
from __future__ import annotations

import dataclasses
import os
import random
import re
from collections import deque

import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge

from hw.mac_array import MacArray, act_layout, cmd_layout, mac_array_params_for, out_layout, store_block
from hw.weight_store import BEAT_BYTES, write_layout
from nano_k3 import fxp_ops
from nano_k3.config import PRESETS
from nano_k3.fixed import FixedModel, logits_out
from nano_k3.image import build_image
from nano_k3.int4 import dequant_matvec, pack_nibbles
from nano_k3.tensors import MatSpec, tensor_specs
from nano_k3.weights import generate, generate_tokens
from verification.tb import StreamTB

CFG_ENV, CASES_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_MAC_CASES", "NANO_K3_SEED"
SCALE_LANES_ENV = "NANO_K3_MAC_SCALE_LANES"
DEFAULT_SEED = 20240917
# Amaranth-generated Verilog: incomplete case (default arms are assigned before the case), LOGNOT on
# multi-bit values (== 0 tests) and a constant compare of a parameter-sized field; lint reports them as
# warnings (zero errors), the simulation build must not stop on them.
SIM_WAIVERS = ("-Wno-CASEINCOMPLETE", "-Wno-WIDTHTRUNC", "-Wno-CMPCONST")
MISMATCH_RE = re.compile(r"case (\d+) \((\S+)\) column (\d+): expected (-?\d+) got (-?\d+)")


def _fields(layout) -> dict:
    return {name: (f.offset, f.width) for name, f in layout}


def _pack(fields: dict, values: dict) -> int:
    word = 0
    for name, v in values.items():
        off, width = fields[name]
        word |= (int(v) & ((1 << width) - 1)) << off
    return word


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) & 1 else v


class Case:
    """One matvec: tensor, activation vector, expected output (from the fixed-point model's functions)."""

    def __init__(self, tag: str, name: str, x: np.ndarray, mats: dict, fmt: int = 0):
        q, s, z, g = mats[name]
        self.tag, self.name, self.fmt = tag, name, fmt
        self.m, self.frac = fxp_ops.mac_input(x, fxp_ops.X.frac)                  # (fan_in,) A, exponent
        if fmt == 0:
            self.expected = fxp_ops.matvec(self.m, self.frac, q, s, z, g)           # (fan_out,) X
        else:
            self.expected = logits_out(dequant_matvec(self.m, q, s, z, g), self.frac + fxp_ops.ACC_FRAC)
        self.fan_in, self.fan_out, self.group = q.shape[0], q.shape[1], g


class TB(StreamTB):
    def __init__(self, dut, cfg: dict, params, seed: int):
        self.idle_prob, self.ready_prob = 0.2, 0.7
        super().__init__(dut, random.Random(seed), lambda: self.idle_prob, lambda: self.ready_prob,
                         inputs=("w", "r_cmd", "act", "i"))
        dut.r_data__ready.value = 1
        self.p = params
        self.f_w, self.f_act = _fields(write_layout(params.store)), _fields(act_layout(params))
        self.f_cmd, self.f_o = _fields(cmd_layout(params)), _fields(out_layout(params))
        assert len(dut.i__payload) == cmd_layout(params).size
        assert len(dut.o__payload) == out_layout(params).size
        self.ybits = params.out_bits
        self.pending: deque = deque()
        self.got: list[int] = []
        self.mismatches: list[str] = []
        self.n_checked = 0
        self.cmd_cycles: list[int] = []
        self.last_cycles: list[int] = []

    def on_output(self, word: int, cycle: int) -> None:
        off_y, _ = self.f_o["y"]
        off_c, w_c = self.f_o["count"]
        off_l, _ = self.f_o["last"]
        mask = (1 << self.ybits) - 1
        count = (word >> off_c) & ((1 << w_c) - 1)
        self.got += [_signed((word >> (off_y + j * self.ybits)) & mask, self.ybits) for j in range(count)]
        if (word >> off_l) & 1:
            self.last_cycles.append(cycle)
            self._score()

    def _score(self) -> None:
        got, self.got = self.got, []
        if not self.pending:
            self.mismatches.append(f"unexpected output ({len(got)} values): no case pending")
            return
        idx, case = self.pending.popleft()
        if len(got) != case.fan_out:
            self.mismatches.append(f"case {idx} ({case.tag}): {len(got)} results, expected {case.fan_out}")
            return
        for col in range(case.fan_out):
            if got[col] != int(case.expected[col]):
                msg = f"case {idx} ({case.tag}) column {col}: expected {int(case.expected[col])} got {got[col]}"
                if len(self.mismatches) < 20:
                    self.dut._log.error(msg)
                self.mismatches.append(msg)
        self.n_checked += 1

    async def load(self, block: bytes, base_beat: int = 0, idle: bool = True) -> None:
        words = [_pack(self.f_w, {"beat": base_beat + k,
                                  "data": int.from_bytes(block[k * BEAT_BYTES:(k + 1) * BEAT_BYTES], "little")})
                 for k in range(len(block) // BEAT_BYTES)]
        await self.drivers["w"].send(words, idle=idle)

    async def send(self, idx: int, case: Case, desc: dict, idle: bool = True) -> None:
        al = self.p.act_lanes
        a_bits = fxp_ops.A.bits
        off_m, _ = self.f_act["m"]
        words = []
        for k in range(0, case.fan_in, al):
            word = _pack(self.f_act, {"frac": case.frac, "last": int(k + al >= case.fan_in)})
            for j in range(al):
                word |= (int(case.m[k + j]) & ((1 << a_bits) - 1)) << (off_m + j * a_bits)
            words.append(word)
        await self.drivers["act"].send(words, idle=idle)
        q, s, z = (desc[f"{case.name}.{t}"] for t in "qsz")
        cmd = {"q_beat": q, "s_beat": s, "z_beat": z, "fan_in": case.fan_in,
               "fan_out_log2": case.fan_out.bit_length() - 1, "group_log2": case.group.bit_length() - 1,
               "fmt": case.fmt}
        self.pending.append((idx, case))
        self.cmd_cycles.append(await self.drivers["i"].send([_pack(self.f_cmd, cmd)], idle=idle))

    async def drain(self, max_cycles: int = 20_000) -> None:
        for _ in range(max_cycles):
            if not self.pending:
                break
            await RisingEdge(self.dut.clk)
        for _ in range(16):
            await RisingEdge(self.dut.clk)

    def verdict(self, n: int) -> None:
        assert not self.pending, f"{len(self.pending)} matvecs produced no output (first: {self.pending[0][1].tag})"
        assert not self.mismatches, f"{len(self.mismatches)} mismatches in {n} matvecs; first: " + \
            "; ".join(self.mismatches[:5])
        assert self.n_checked == n, (self.n_checked, n)


# ---- the model side --------------------------------------------------------------------------------------
class Model:
    """An image of the model at one group size: its tensor block, store beat indices and the int tensors."""

    def __init__(self, name: str, group: int, seed: int):
        self.cfg = PRESETS[name].with_group(group)
        self.weights = generate(self.cfg, seed)
        image = build_image(self.weights, generate_tokens(self.cfg, seed, 4))
        lay = image.layout
        _, self.base, end = store_block(self.cfg, group)                   # the block the chip's store holds
        self.block = image.data[self.base:end]                              # (no embedding table), 16 B aligned
        stored = [d for d in lay.descriptors if d.addr >= self.base]
        self.desc = {d.name: (d.addr - self.base) // BEAT_BYTES for d in stored}
        self.addr = {d.name: d.addr - self.base for d in stored}
        self.mats = FixedModel(self.weights).mats                          # name -> (q, s, z, g)
        self.names = [s.name for s in tensor_specs(self.cfg) if isinstance(s, MatSpec) and not s.emb]
        shapes: dict = {}
        for n in self.names:
            shapes.setdefault(self.mats[n][0].shape, []).append(n)
        self.by_shape = shapes                                              # (fan_in, fan_out) -> names


def random_x(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    """X vectors of varied magnitude (the mac_input exponent spans its range)."""
    X = fxp_ops.X
    if kind == 0:       # activations of typical size (|x| ~ 1)
        return rng.integers(-(1 << (X.frac + 1)), 1 << (X.frac + 1), n)
    if kind == 1:       # any magnitude
        b = int(rng.integers(1, X.bits))
        return rng.integers(-(1 << (b - 1)), 1 << (b - 1), n)
    if kind == 2:       # full range
        return rng.integers(X.lo, X.hi + 1, n)
    v = np.zeros(n, dtype=np.int64)   # sparse
    v[rng.integers(0, n, 3)] = rng.integers(X.lo, X.hi + 1, 3)
    return v


def model_cases(model: Model, rng: np.random.Generator, n: int, prefix: str) -> list[Case]:
    """n matvecs cycling over every tensor shape (then a random tensor of that shape)."""
    shapes = sorted(model.by_shape)
    cases = []
    for k in range(n):
        shape = shapes[k % len(shapes)]
        name = model.by_shape[shape][int(rng.integers(len(model.by_shape[shape])))]
        fmt = int(name == "head" and k % 2 == 1)
        x = random_x(rng, shape[0], int(rng.integers(4)))
        cases.append(Case(f"{prefix}{k}-{name}-{shape[0]}x{shape[1]}{'-logit' if fmt else ''}", name, x,
                          model.mats, fmt))
    return cases


def _setup():
    from rtl_gen import read_config
    cfg, chip = read_config(os.environ[CFG_ENV])
    p = mac_array_params_for(chip)
    if SCALE_LANES_ENV in os.environ:
        p = dataclasses.replace(p, scale_lanes=int(os.environ[SCALE_LANES_ENV]))
    return cfg, chip, p, int(os.environ.get(SEED_ENV, DEFAULT_SEED))


async def _random_run(dut, group: int, seed_off: int) -> None:
    cfg, chip, p, seed = _setup()
    n = int(os.environ.get(CASES_ENV, 500))
    dut._log.info("seed %d, group %d, %d matvecs", seed + seed_off, group, n)
    tb = TB(dut, cfg, p, seed + seed_off)
    await tb.start()
    model = Model(chip.name, group, seed + seed_off)
    await tb.load(model.block)
    rng = np.random.default_rng(seed + seed_off)
    desc = model.desc
    for idx, case in enumerate(model_cases(model, rng, n, f"g{group}-")):
        tb.ready_prob = (0.2, 0.8, 1.0)[(idx // 40) % 3]
        tb.idle_prob = (0.3, 0.0, 0.1)[(idx // 25) % 3]
        await tb.send(idx, case, desc)
    await tb.drain()
    tb.verdict(n)


@cocotb.test()
async def mac_random_group64(dut):
    await _random_run(dut, 64, 1)


@cocotb.test()
async def mac_random_group128(dut):
    await _random_run(dut, 128, 2)


def _extreme_tensor(model: Model, name: str, q_val: int, s_val: int, z_val: int) -> dict:
    """Overwrite a tensor's q/s/z in the model's mats and return the store bytes to write (per record)."""
    q, s, z, g = model.mats[name]
    q2 = np.full_like(q, q_val) if q_val >= 0 else q
    s2 = np.full_like(s, s_val)
    z2 = np.full_like(z, z_val)
    model.mats[name] = (q2, s2, z2, g)
    return {f"{name}.q": pack_nibbles(q2).tobytes(), f"{name}.s": s2.astype("<i2").tobytes(),
            f"{name}.z": z2.astype(np.uint8).tobytes()}


@cocotb.test()
async def mac_edge_cases(dut):
    cfg, chip, p, seed = _setup()
    tb = TB(dut, cfg, p, seed + 3)
    await tb.start()
    model = Model(chip.name, 128, seed + 3)
    await tb.load(model.block, idle=False)
    rng = np.random.default_rng(seed + 3)
    X = fxp_ops.X
    cases: list[Case] = []
    shapes = sorted(model.by_shape)
    vectors = {"zero": lambda n: np.zeros(n, np.int64), "xmax": lambda n: np.full(n, X.hi),
               "xmin": lambda n: np.full(n, X.lo), "alt": lambda n: np.where(np.arange(n) % 2, X.lo, X.hi),
               "one-lsb": lambda n: np.eye(1, n, n - 1, dtype=np.int64)[0]}
    # extreme weights: rewrite tensors in the store (exercises writes between matvecs)
    extremes = [(15, 32767, 0), (15, -32768, 0), (0, -32768, 15), (15, -32768, 15), (-1, 1, 9), (-1, -1, 0)]
    for k, shape in enumerate(shapes):
        name = model.by_shape[shape][-1]
        qv, sv, zv = extremes[k % len(extremes)]
        for rec, blob in _extreme_tensor(model, name, qv, sv, zv).items():
            pad = blob + bytes(-len(blob) % BEAT_BYTES)
            await tb.load(pad, model.desc[rec], idle=False)
        for vname in ("xmax", "xmin", "alt"):
            cases.append(Case(f"edge-{vname}-q{qv}s{sv}z{zv}-{name}", name, vectors[vname](shape[0]), model.mats))
        cases.append(Case(f"edge-rand-q{qv}s{sv}z{zv}-{name}", name, random_x(rng, shape[0], 2), model.mats))
        if name == "head":
            cases.append(Case(f"edge-xmax-logit-{name}", name, vectors["xmax"](shape[0]), model.mats, 1))
    # (after the rewrites: a shape with one tensor sees its extreme weights here too)
    for shape in shapes:
        name = model.by_shape[shape][0]
        for vname, fn in vectors.items():
            cases.append(Case(f"edge-{vname}-{name}", name, fn(shape[0]), model.mats))
    for idx, case in enumerate(cases):
        await tb.send(idx, case, model.desc)
    await tb.drain()
    tb.verdict(len(cases))
    dut._log.info("%d edge matvecs checked", len(cases))


@cocotb.test()
async def mac_timing(dut):
    """No idles, no back-pressure: cycles per matvec for every tensor shape, one at a time, against the
    MacArray docstring's formula: issue + LATENCY + max(scale steps, chunks) − 1 (− 1 with W columns)."""
    cfg, chip, p, seed = _setup()
    tb = TB(dut, cfg, p, seed + 4)
    tb.idle_prob, tb.ready_prob = 0.0, 1.0
    await tb.start()
    model = Model(chip.name, 64, seed + 4)
    await tb.load(model.block, idle=False)
    rng = np.random.default_rng(seed + 4)
    report = []
    for idx, shape in enumerate(sorted(model.by_shape)):
        name = model.by_shape[shape][0]
        case = Case(f"t{idx}-{name}", name, random_x(rng, shape[0], 0), model.mats)
        await tb.send(idx, case, model.desc, idle=False)
        await tb.drain()
        total = tb.last_cycles[-1] - tb.cmd_cycles[-1]
        g = model.cfg.group_of(shape[0])
        issue = p.issue_cycles(shape[0], shape[1], g)
        cols = min(shape[1], p.lanes)
        steps, chunks = p.scale_steps(shape[1]), -(-cols // p.out_lanes)
        expected = issue + MacArray.LATENCY + max(steps, chunks) - 1 - (cols == p.lanes)
        report.append((f"{shape[0]}->{shape[1]} g{g}: issue {issue}, command to last result {total}", total, expected))
    tb.verdict(len(report))
    for line, _, _ in report:
        dut._log.info("timing %s", line)
    bad = [f"{line} (formula {expected})" for line, total, expected in report if total != expected]
    assert not bad, "; ".join(bad)


# ---- pytest runners --------------------------------------------------------------------------------------
def _run(preset_name: str, cases: int, testcase=None, scale_lanes: int | None = None):
    from amaranth.back import rtlil
    from hw.params import preset
    from rtl_gen import emit, lint_clean, read_filelist
    from verification.runner import MODELS, SIM_ROOT, lint, model_opt, run_cocotb
    name = f"mac_array_{preset_name}" + (f"_s{scale_lanes}" if scale_lanes is not None else "")
    out = emit("mac_array", SIM_ROOT / name / "rtl", preset(preset_name))
    rtl, env = read_filelist(out.filelist), {CFG_ENV: str(out.config), CASES_ENV: str(cases)}
    if scale_lanes is not None:     # the preset's array with another number of s·d multipliers
        p = dataclasses.replace(mac_array_params_for(preset(preset_name)), scale_lanes=scale_lanes)
        rtl = [out.verilog.with_name(f"{out.top}_s{scale_lanes}.v")]
        rtl[0].write_text(lint_clean.to_verilog(rtlil.convert(MacArray(p), name=out.top, emit_src=False), out.top))
        env[SCALE_LANES_ENV] = str(scale_lanes)
    sources = [*rtl, MODELS / "msh_sram.v"]
    lint_result = lint(sources, out.top)
    assert lint_result.errors == 0, lint_result.output
    res = run_cocotb(name, sources, out.top, "verification.test_mac_array", testcase=testcase,
                     build_args=["--x-initial", "unique", *SIM_WAIVERS], plusargs=["+verilator+rand+reset+2"],
                     extra_env=env, opt=model_opt([preset_name]))
    assert res.passed and res.n_failed == 0, res
    return res


@pytest.mark.nano
def test_mac_array_nano():
    res = _run("nano", 500)
    assert res.n_tests == 4, res


def test_mac_array_tiny():
    res = _run("tiny", 150, ["mac_random_group64", "mac_edge_cases"])
    assert res.n_tests == 2, res


@pytest.mark.parametrize("scale_lanes", [1, 32])
def test_mac_array_tiny_scale_lanes(scale_lanes):
    """One s·d multiplier (a group's scale steps outlast its reads: S4 stalls the pipeline) and one per lane."""
    res = _run("tiny", 150, ["mac_random_group64", "mac_edge_cases"], scale_lanes)
    assert res.n_tests == 2, res
