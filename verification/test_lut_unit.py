"""cocotb + Verilator test of the LUT unit (hw.lut_unit.LutUnit, Verilog top ``lut_unit``), and its runner.

Every result is compared bit for bit with the fixed-point model's functions (nano_k3.fxp_math:
sigmoid, silu, exp2_neg, kda_decay, rsqrt, recip, apply_mant; called here, never re-implemented),
under random input idle cycles and random output back-pressure. Payload layouts come from the
``config.json`` rtl_gen wrote beside the Verilog; the msh_rom banks are the hex files
``nano_k3.luts.write_roms`` writes into ``<emitted dir>/roms``, the emitted dir being ``rtl/`` in the
simulator's working directory, so the default INIT_FILEs ``rtl/roms/<table>_even.hex`` and
``rtl/roms/<table>_odd.hex`` resolve (SPEC §5).

Environment read by the cocotb side: NANO_K3_RTL_CONFIG (config.json, required), NANO_K3_LUT_CASES
(random beats per test, default 1200), NANO_K3_SEED (default 20241130).
"""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from nano_k3 import fxp_math, luts
from nano_k3.fxp_ops import X, Fmt
from verification.tb import StreamTB

CFG_ENV, CASES_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_LUT_CASES", "NANO_K3_SEED"
DEFAULT_SEED = 20241130


# ---- payload packing from config.json's {field: [offset, width]} ----------------------------------
def pack(fields: dict, values: dict) -> int:
    word = 0
    for name, v in values.items():
        off, width = fields[name]
        word |= (int(v) & ((1 << width) - 1)) << off
    return word


def unpack(fields: dict, word: int, signed: set[str] = frozenset()) -> dict[str, int]:
    out = {}
    for name, (off, width) in fields.items():
        v = word >> off & ((1 << width) - 1)
        out[name] = v - (1 << width) if name in signed and v >> (width - 1) else v
    return out


# ---- the testbench: verification.tb.StreamTB, waiting for a number of outputs --------------------------
class LutTB(StreamTB):
    def __init__(self, dut, seed: int, idle_prob: float = 0.25, ready_prob: float = 0.7):
        super().__init__(dut, random.Random(seed), idle_prob, ready_prob)

    async def wait_outputs(self, n: int, max_cycles: int = 100_000) -> None:
        for _ in range(max_cycles):
            if len(self.received) >= n:
                break
            await RisingEdge(self.dut.clk)
        for _ in range(8):          # nothing may come out after the last expected result
            await RisingEdge(self.dut.clk)


# ---- stimulus and the reference -----------------------------------------------------------------------
RESULTS = ("sigmoid", "silu", "exp2", "decay", "rsqrt_mant", "rsqrt_e", "recip_mant", "recip_e", "apply")
SIGNED_IN = {"x", "g", "v", "e"}
SIGNED_OUT = {"silu", "rsqrt_e", "recip_e", "apply"}


def _width(cfg: dict, port: str, name: str) -> int:
    return cfg["streams"][port]["fields"][name][1]


def random_cases(rng: np.random.Generator, cfg: dict, n: int) -> dict[str, np.ndarray]:
    """n beats; each field drawn from a mix of full-range and interesting sub-ranges."""
    d = cfg["derived"]
    sig_lim = luts.SIGMOID_RANGE << X.frac
    dec_lim = luts.DECAY_RANGE << X.frac
    pick = lambda *opts: np.select([rng.integers(0, len(opts), n) == k for k in range(len(opts))], opts)  # noqa: E731
    x = pick(rng.integers(X.lo, X.hi + 1, n), rng.integers(-sig_lim - 1000, sig_lim + 1000, n),
             rng.integers(-(4 << X.frac), 4 << X.frac, n))
    tw = _width(cfg, "i", "t")
    t_frac = d["exp2_t_frac"]
    t = pick(rng.integers(0, 1 << min(tw, 62), n, dtype=np.int64), rng.integers(0, 30 << t_frac, n),
             rng.integers(0, 2 << t_frac, n))
    g = pick(rng.integers(X.lo, X.hi + 1, n), rng.integers(-dec_lim - 1000, dec_lim + 1000, n))
    mw, fw = _width(cfg, "i", "m"), _width(cfg, "i", "frac")
    mbits = rng.integers(1, mw + 1, n)
    m = np.array([int(rng.integers(1 << (b - 1), 1 << b, dtype=np.uint64)) if b < 64 else 0 for b in mbits],
                 dtype=np.int64)
    frac = rng.integers(0, 1 << fw, n)
    e_lo, e_hi = d["apply_e_range"]
    v = pick(rng.integers(X.lo, X.hi + 1, n), rng.integers(-(1 << 12), 1 << 12, n))
    mant = rng.integers(1 << 22, 1 << 24, n)
    e = rng.integers(e_lo, e_hi + 1, n)
    return {"x": x, "t": t, "g": g, "m": m, "frac": frac, "v": v, "mant": mant, "e": e}


def edge_cases(cfg: dict) -> dict[str, np.ndarray]:
    """Named edge values per field; shorter lists are cycled so every value meets the others."""
    d = cfg["derived"]
    sig_lim, dec_lim = luts.SIGMOID_RANGE << X.frac, luts.DECAY_RANGE << X.frac
    t_frac = d["exp2_t_frac"]
    tw, mw, fw = _width(cfg, "i", "t"), _width(cfg, "i", "m"), _width(cfg, "i", "frac")
    e_lo, e_hi = d["apply_e_range"]
    interp_half = lambda name: 1 << (luts.tables()[name].interp_bits - 1)   # noqa: E731  exact-tie rounding
    vals = {
        "x": [0, 1, -1, X.lo, X.hi, sig_lim, -sig_lim, sig_lim - 1, -sig_lim + 1, interp_half("sigmoid"),
              -interp_half("sigmoid"), 1 << X.frac, -(1 << X.frac), 3 * interp_half("sigmoid")],
        "t": [0, 1, (1 << tw) - 1, 1 << t_frac, (24 << t_frac) + 1, 25 << t_frac, 26 << t_frac, 40 << t_frac,
              (41 << t_frac) - 1, interp_half("exp2"), (1 << t_frac) - 1, (23 << t_frac) | 0x7FFF],
        "g": [0, X.lo, X.hi, dec_lim, -dec_lim, dec_lim - 1, -dec_lim - 1, interp_half("kda_decay"), -1],
        "m": [1, 2, 3, (1 << mw) - 1, 1 << (mw - 1), 1 << 23, (1 << 24) - 1, (1 << 24) + 1, 12345, 1 << 40],
        "frac": [0, 1, (1 << fw) - 1, 32, 39, 33, 7],
        "v": [0, X.lo, X.hi, 1, -1, 1 << 12, -(1 << 12)],
        "mant": [1 << 23, (1 << 24) - 1, 1 << 22, 12345678],
        "e": [e_lo, e_hi, 0, -1, 1, 23, -23],
    }
    rng = np.random.default_rng(7)
    n = 160           # each list once in order, then random pairings of the named values
    return {k: np.array([v[i] if i < len(v) else v[int(rng.integers(len(v)))] for i in range(n)], dtype=np.int64)
            for k, v in vals.items()}


def reference(cfg: dict, c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    d = cfg["derived"]
    rs_m, rs_e = fxp_math.rsqrt(c["m"], c["frac"])
    rc_m, rc_e = fxp_math.recip(c["m"], c["frac"])
    out = Fmt("apply_out", _width(cfg, "o", "apply"), d["apply_out_frac"])
    return {
        "sigmoid": fxp_math.sigmoid(c["x"]), "silu": fxp_math.silu(c["x"]), "exp2": fxp_math.exp2_neg(c["t"]),
        "decay": fxp_math.kda_decay(c["g"]), "rsqrt_mant": rs_m, "rsqrt_e": rs_e, "recip_mant": rc_m,
        "recip_e": rc_e,
        "apply": out.fit(fxp_math.apply_mant(c["v"], d["apply_v_frac"], c["mant"], c["e"], out.frac), out.frac),
    }


async def run_cases(dut, cfg: dict, cases: dict[str, np.ndarray], tag: str, seed: int,
                    idle_prob: float = 0.25, ready_prob: float = 0.7) -> None:
    fields_i, fields_o = cfg["streams"]["i"]["fields"], cfg["streams"]["o"]["fields"]
    n = len(cases["x"])
    exp = {k: np.empty(n, dtype=np.int64) for k in RESULTS}
    ref = reference(cfg, {**cases, "frac": cases["frac"]}) if np.all(cases["frac"] == cases["frac"][0]) else None
    if ref is None:     # frac is a scalar argument of rsqrt/recip: group the beats by frac
        ref = {k: np.empty(n, dtype=np.int64) for k in RESULTS}
        for f in np.unique(cases["frac"]):
            sel = cases["frac"] == f
            part = reference(cfg, {k: (v[sel] if k != "frac" else int(f)) for k, v in cases.items()})
            for k in RESULTS:
                ref[k][sel] = part[k]
    exp.update(ref)
    tb = LutTB(dut, seed, idle_prob, ready_prob)
    await tb.start()
    words = [pack(fields_i, {k: int(v[j]) for k, v in cases.items()}) for j in range(n)]
    await tb.drivers["i"].send(words)
    await tb.wait_outputs(n)
    assert len(tb.received) == n, f"{tag}: {n} beats in, {len(tb.received)} out"
    bad = []
    for j, word in enumerate(tb.received):
        got = unpack(fields_o, word, SIGNED_OUT)
        for k in RESULTS:
            if got[k] != int(exp[k][j]):
                inputs = {f: int(cases[f][j]) for f in cases}
                bad.append(f"case {tag}-{j} {k}: expected {int(exp[k][j])} got {got[k]} (inputs {inputs})")
    for msg in bad[:20]:
        dut._log.error(msg)
    assert not bad, f"{len(bad)} mismatches in {n} beats; first: {bad[0]}"
    dut._log.info("%s: %d beats x %d functions bit-exact", tag, n, len(RESULTS))
    return tb


def _setup():
    from rtl_gen import read_config
    cfg, _ = read_config(os.environ[CFG_ENV])
    return cfg, int(os.environ.get(SEED_ENV, DEFAULT_SEED))


@cocotb.test()
async def lut_edge_cases(dut):
    cfg, seed = _setup()
    dut._log.info("seed %d", seed)
    await run_cases(dut, cfg, edge_cases(cfg), "edge", seed)


@cocotb.test()
async def lut_random(dut):
    cfg, seed = _setup()
    n = int(os.environ.get(CASES_ENV, 1200))
    dut._log.info("seed %d, %d random beats", seed + 1, n)
    await run_cases(dut, cfg, random_cases(np.random.default_rng(seed + 1), cfg, n), "rand", seed + 1,
                    idle_prob=0.3, ready_prob=0.5)


@cocotb.test()
async def lut_throughput(dut):
    """No idles, no back-pressure: one beat per cycle, results exactly LATENCY cycles after each input."""
    cfg, seed = _setup()
    cases = random_cases(np.random.default_rng(seed + 2), cfg, 64)
    tb = await run_cases(dut, cfg, cases, "thru", seed + 2, idle_prob=0.0, ready_prob=1.0)
    span = tb.drivers["i"].accept_cycles[-1] - tb.drivers["i"].accept_cycles[0] + 1
    assert span == 64, f"64 beats took {span} cycles"
    lat = {o - a for o, a in zip(tb.output_cycles, tb.drivers["i"].accept_cycles)}
    assert lat == {cfg["derived"]["latency"]}, f"latencies {lat}, documented {cfg['derived']['latency']}"


# ---- pytest runner --------------------------------------------------------------------------------------
def emit_with_roms(block_name: str, sim_name: str):
    """Emit a block as ``rtl/`` in the simulator's working directory, the LUT ROM files in its roms/."""
    from hw.params import preset
    from hw.roms import ROM_SUBDIR, RTL_DIR
    from rtl_gen import emit, read_filelist
    from verification.runner import MODELS, SIM_ROOT
    out = emit(block_name, SIM_ROOT / sim_name / RTL_DIR, preset("nano"))
    luts.write_roms(out.verilog.parent / ROM_SUBDIR)
    return out, [*read_filelist(out.filelist), MODELS / "msh_rom.v", MODELS / "msh_sram.v"]


def lint_ok(res) -> bool:
    from verification.lint import block_passes
    return block_passes(res)


def test_lut_unit_verilator():
    from verification.runner import lint, run_cocotb
    out, sources = emit_with_roms("lut_unit", "lut_unit")
    lint_result = lint(sources, out.top)
    assert lint_ok(lint_result), lint_result.output
    res = run_cocotb("lut_unit", sources, out.top, "verification.test_lut_unit",
                     extra_env={CFG_ENV: str(out.config)})
    assert res.passed and res.n_tests == 3, res
