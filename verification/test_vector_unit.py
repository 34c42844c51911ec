"""cocotb + Verilator test of the vector unit (hw.vector_unit.VectorUnit, Verilog top ``vector_unit``).

Three streams are driven at once, each with random idle cycles and random back-pressure:
``ew`` (element-wise ADD / MUL_P / SWIGLU against Fmt.fit and fixed.expert_hidden), ``norm``
(fxp_math.rmsnorm / fxp_math.l2norm per vector) and ``softmax`` (fxp_math.softmax_exp of
fxp_math.to_log2). References are the fixed-point model's functions, called here, never copied.

Environment read by the cocotb side: NANO_K3_RTL_CONFIG (config.json, required), NANO_K3_VEC_CASES
(random cases per function, default 1000), NANO_K3_SEED (default 20241130).
"""
from __future__ import annotations

import os
import random

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from nano_k3 import fixed, fxp_math
from nano_k3.fxp_ops import P, X
from verification.tb import StreamTB, start_clock_and_reset
from verification.test_lut_unit import pack, unpack

CFG_ENV, CASES_ENV, SEED_ENV = "NANO_K3_RTL_CONFIG", "NANO_K3_VEC_CASES", "NANO_K3_SEED"
DEFAULT_SEED = 20241130


class Port(StreamTB):
    """One stream pair of the DUT (``<name>_i`` / ``<name>_o``) with its own generator: driver with idles,
    monitor with back-pressure. The clock and reset are shared: started once, then each port's agents."""

    def __init__(self, dut, name: str, rng: random.Random, idle: float, ready: float):
        super().__init__(dut, rng, idle, ready, inputs=(f"{name}_i",), output=f"{name}_o")
        self.driver = self.drivers[f"{name}_i"]

    async def send(self, words: list[int]) -> None:
        await self.driver.send(words)

    async def wait(self, n: int, max_cycles: int = 2_000_000) -> None:
        for _ in range(max_cycles):
            if len(self.received) >= n:
                break
            await RisingEdge(self.dut.clk)


# ---- element-wise ---------------------------------------------------------------------------------------
def ew_cases(rng: np.random.Generator, ops: dict, n: int) -> list[tuple[str, int, int, int]]:
    """(tag, op, a, b): a, b full-range and small; MUL_P's b in P; plus named edges."""
    cases = []
    edges_x = [0, 1, -1, X.lo, X.hi, 1 << X.frac, -(1 << X.frac)]
    for op in ops:
        bs = [0, 1, 1 << P.frac, P.hi] if op == "MUL_P" else edges_x
        cases += [(f"edge-{op}", ops[op], a, b) for a in edges_x for b in bs]
        for k in range(n):
            a = int(rng.integers(X.lo, X.hi + 1)) if k % 2 else int(rng.integers(-(8 << X.frac), 8 << X.frac))
            if op == "MUL_P":
                b = int(rng.integers(0, P.hi + 1))
            else:
                b = int(rng.integers(X.lo, X.hi + 1)) if k % 3 == 0 else int(rng.integers(-(8 << X.frac), 8 << X.frac))
            cases.append((f"rand-{op}-{k}", ops[op], a, b))
    return cases


def ew_transfers(cases: list, lanes: int) -> list[tuple[int, list]]:
    """Element-wise cases as input transfers: up to ``lanes`` cases of one op each (unused lanes are 0)."""
    out = []
    for op in dict.fromkeys(c[1] for c in cases):
        same = [c for c in cases if c[1] == op]
        out += [(op, same[k:k + lanes]) for k in range(0, len(same), lanes)]
    return out


def ew_expected(op_name: str, a: int, b: int) -> int:
    if op_name == "ADD":
        return int(X.fit(np.int64(a) + b, X.frac))
    if op_name == "MUL_P":
        return int(X.fit(np.int64(a) * b, X.frac + P.frac))
    return int(fixed.expert_hidden(np.array([a]), np.array([b]))[0])


# ---- norm ----------------------------------------------------------------------------------------------
def ref_amp_bits(n: int) -> int:
    """Largest amplitude (bits) for which the reference's int64 sum of squares is exact: n·v² < 2^63.

    fxp_math.sum_squares uses a plain int64 einsum when 2·v_frac − SQ_FRAC <= 16 (fxp_ops.wide_dot), so
    n full-range X values would overflow the reference (the hardware accumulator is exact for them).
    """
    return min(X.bits - 1, (63 - max(1, n).bit_length()) // 2)


def norm_vectors(rng: np.random.Generator, max_len: int, n: int, lanes: int) -> list[tuple[str, int, np.ndarray, np.ndarray]]:
    """(tag, op, v, w): RMS vectors have power-of-two lengths, L2 any multiple of ``lanes`` up to max_len."""
    lens = [1 << k for k in range(lanes.bit_length() - 1, max_len.bit_length())]
    out = []
    for k in range(n):
        op = k % 2
        ln = int(rng.choice(lens[:6])) if k % 8 else int(rng.choice(lens))
        if op == 1 and k % 4 == 1:
            ln = lanes * int(rng.integers(1, min(max_len, 40) // lanes + 1))
        scale = min(int(rng.choice([X.frac + 7, X.frac + 2, X.frac - 6, X.frac - 16])), ref_amp_bits(ln))
        v = rng.integers(-(1 << scale), 1 << scale, ln)
        w = rng.integers(-(1 << 15), 1 << 15, ln) if k % 3 == 0 else rng.integers(-2000, 2000, ln)
        out.append((f"rand{k}-{'rms' if op == 0 else 'l2'}-n{ln}", op, v, w))
    return out


def norm_edges(max_len: int, lanes: int) -> list[tuple[str, int, np.ndarray, np.ndarray]]:
    """Edge vectors; the short ones (1, 2 elements) only where a transfer of ``lanes`` fits them."""
    z = lambda n: np.zeros(n, dtype=np.int64)   # noqa: E731
    full = lambda n, x: np.full(n, x, dtype=np.int64)   # noqa: E731
    big = (1 << ref_amp_bits(max_len)) - 1          # X.hi where the reference allows it
    spike = z(max_len)
    spike[5] = X.hi
    out = []
    for op, tag in ((0, "rms"), (1, "l2")):
        out += [(f"zero-{tag}-n64", op, z(64), z(64)),
                (f"big-{tag}-n{max_len}", op, full(max_len, big), full(max_len, 32767)),
                (f"bigneg-{tag}-n{max_len}", op, full(max_len, -big), full(max_len, -32768)),
                (f"xmax-{tag}-n2", op, full(2, X.hi), full(2, 32767)),
                (f"xmin-{tag}-n2", op, full(2, X.lo), full(2, -32768)),
                (f"spike-xmax-{tag}-n{max_len}", op, spike, full(max_len, 32767)),
                (f"one-{tag}-n1", op, full(1, 1), full(1, 0)),
                (f"lsb-{tag}-n2", op, np.array([1, -1]), np.array([0, 0])),
                (f"alt-{tag}-n{max_len}", op, np.array([big, -big] * (max_len // 2)), z(max_len))]
    return [c for c in out if len(c[2]) % lanes == 0]


def norm_word(fields: dict, lanes: int, op: int, v, w, last: bool) -> int:
    """One norm-unit input transfer: ``lanes`` consecutive elements and their offsets."""
    vals = {"op": op, "last": int(last)}
    for k in range(lanes):
        vals[f"v.{k}"], vals[f"w.{k}"] = int(v[k]), int(w[k])
    return pack(fields, vals)


def norm_elements(fields: dict, lanes: int, words) -> list[dict]:
    """Norm-unit output transfers as elements {"y", "last"} (``last`` on the final element of the vector)."""
    out = []
    for word in words:
        t = unpack(fields, word, {f"y.{k}" for k in range(lanes)})
        out += [{"y": t[f"y.{k}"], "last": t["last"] if k == lanes - 1 else 0} for k in range(lanes)]
    return out


def norm_expected(op: int, v: np.ndarray, w: np.ndarray) -> np.ndarray:
    return fxp_math.rmsnorm(v, X.frac, w) if op == 0 else fxp_math.l2norm(v, X.frac)


# ---- softmax ------------------------------------------------------------------------------------------
def softmax_vectors(rng: np.random.Generator, max_len: int, s_frac: int, n: int) -> list[tuple[str, np.ndarray]]:
    out = []
    for k in range(n):
        ln = int(rng.integers(1, max_len + 1)) if k % 4 == 0 else int(rng.integers(1, 9))
        kind = k % 5
        if kind == 0:
            s = rng.integers(X.lo, X.hi + 1, ln)                       # saturating exponents
        elif kind == 1:
            s = rng.integers(-(4 << s_frac), 4 << s_frac, ln)
            s[rng.integers(0, ln)] = s.max()                         # a tie for the maximum
        else:
            s = rng.integers(-(30 << s_frac), 30 << s_frac, ln)
        out.append((f"rand{k}-n{ln}", s))
    return out


def softmax_edges(max_len: int) -> list[tuple[str, np.ndarray]]:
    return [("equal-n8", np.full(8, 12345)), ("one-n1", np.array([7])),
            ("extremes-n4", np.array([X.lo, X.hi, 0, X.hi])), ("zeros-nmax", np.zeros(max_len, dtype=np.int64)),
            ("spread-n16", np.arange(16) * (3 << X.frac) - (24 << X.frac)),
            ("lsb-n3", np.array([0, -1, 1]))]


def softmax_expected(s: np.ndarray, s_frac: int, c: int) -> np.ndarray:
    return fxp_math.softmax_exp(fxp_math.to_log2(s, s_frac, c))


# ---- the test ------------------------------------------------------------------------------------------
def _setup():
    from rtl_gen import read_config
    cfg, _ = read_config(os.environ[CFG_ENV])
    return cfg, int(os.environ.get(SEED_ENV, DEFAULT_SEED))


def _fields(cfg: dict, port: str) -> dict:
    return cfg["streams"][port]["fields"]


async def run_all(dut, n_cases: int, seed: int, edges_only: bool) -> None:
    cfg, _ = _setup()
    d = cfg["derived"]
    rng_py = random.Random(seed)
    rng = np.random.default_rng(seed)
    ports = {name: Port(dut, name, random.Random(rng_py.getrandbits(32)), idle=0.25, ready=0.6)
             for name in ("ew", "norm", "softmax")}
    await start_clock_and_reset(dut.clk, dut.rst)
    for p in ports.values():
        p.start_agents()

    ops = d["ew_ops"]
    ew = ew_cases(rng, ops, 0 if edges_only else n_cases)
    names = {v: k for k, v in ops.items()}
    nmax, smax, nl = d["norm"]["max_len"], d["softmax"]["max_len"], d["norm"]["lanes"]
    norms = norm_edges(nmax, nl) + ([] if edges_only else norm_vectors(rng, nmax, 2 * n_cases, nl))
    smx = softmax_edges(smax) + ([] if edges_only else softmax_vectors(rng, smax, d["softmax"]["s_frac"], n_cases))

    fi = {k: _fields(cfg, f"{k}_i") for k in ports}
    el = d["ew_lanes"]
    ew_tr = ew_transfers(ew, el)
    ew_words = [pack(fi["ew"], {"op": op, **{f"{x}.{j}": c[2 + (x == "b")] for j, c in enumerate(cases) for x in "ab"}})
                for op, cases in ew_tr]
    norm_words = [norm_word(fi["norm"], nl, op, v[j:j + nl], w[j:j + nl], j + nl == len(v))
                  for _, op, v, w in norms for j in range(0, len(v), nl)]
    smx_words = [pack(fi["softmax"], {"s": int(s[j]), "last": int(j == len(s) - 1)}) for _, s in smx for j in range(len(s))]
    sends = [cocotb.start_soon(ports["ew"].send(ew_words)), cocotb.start_soon(ports["norm"].send(norm_words)),
             cocotb.start_soon(ports["softmax"].send(smx_words))]
    for s in sends:
        await s
    await ports["ew"].wait(len(ew_words))
    await ports["norm"].wait(len(norm_words))
    await ports["softmax"].wait(len(smx_words))
    for _ in range(30):
        await RisingEdge(dut.clk)

    bad: list[str] = []
    # element-wise
    fo = _fields(cfg, "ew_o")
    rx = list(ports["ew"].received)
    if len(rx) != len(ew_tr):
        bad.append(f"ew: {len(ew_tr)} input transfers, {len(rx)} outputs")
    for (op, cases), word in zip(ew_tr, rx):
        out = unpack(fo, word, {f"y.{j}" for j in range(el)})
        for j, (tag, _, a, b) in enumerate(cases):
            got, exp = out[f"y.{j}"], ew_expected(names[op], a, b)
            if got != exp:
                bad.append(f"case ew {tag} lane {j} (a={a}, b={b}): expected {exp} got {got}")
    # vectors: outputs carry ``last``; check lengths and values
    for port, vecs, ref in (("norm", norms, lambda c: norm_expected(c[1], c[2], c[3])),
                            ("softmax", smx, lambda c: softmax_expected(c[1], d["softmax"]["s_frac"],
                                                                        d["softmax"]["c"]))):
        fo = _fields(cfg, f"{port}_o")
        val = "y" if port == "norm" else "e"
        rx = (norm_elements(fo, nl, ports[port].received) if port == "norm"
              else [unpack(fo, w) for w in ports[port].received])
        pos = 0
        for case in vecs:
            exp = ref(case)
            got = rx[pos:pos + len(exp)]
            pos += len(exp)
            if len(got) != len(exp):
                bad.append(f"{port} {case[0]}: expected {len(exp)} outputs, got {len(got)}")
                break
            for j, (e_j, g_j) in enumerate(zip(exp, got)):
                if g_j[val] != int(e_j) or g_j["last"] != int(j == len(exp) - 1):
                    bad.append(f"case {port} {case[0]} index {j}: expected {int(e_j)} got {g_j[val]} "
                               f"(last {g_j['last']})")
                    break
        if pos != len(rx):
            bad.append(f"{port}: {len(rx) - pos} extra outputs")
    for msg in bad[:20]:
        dut._log.error(msg)
    assert not bad, f"{len(bad)} mismatches; first: {bad[0]}"
    dut._log.info("bit-exact: %d element-wise cases, %d norm vectors (%d transfers of %d), %d softmax vectors "
                  "(%d elements)", len(ew), len(norms), len(norm_words), nl, len(smx), len(smx_words))


@cocotb.test()
async def vector_edge_cases(dut):
    _, seed = _setup()
    dut._log.info("seed %d", seed)
    await run_all(dut, 0, seed, edges_only=True)


@cocotb.test()
async def vector_random(dut):
    _, seed = _setup()
    n = int(os.environ.get(CASES_ENV, 1000))
    dut._log.info("seed %d, %d random cases per function", seed + 1, n)
    await run_all(dut, n, seed + 1, edges_only=False)


@cocotb.test()
async def vector_latency(dut):
    """No idles, no back-pressure: one 64-element vector through each unit; cycles measured and bounded."""
    cfg, seed = _setup()
    d = cfg["derived"]
    ports = {name: Port(dut, name, random.Random(seed), idle=0.0, ready=1.0) for name in ("ew", "norm", "softmax")}
    await start_clock_and_reset(dut.clk, dut.rst)
    for p in ports.values():
        p.start_agents()
    rng = np.random.default_rng(seed + 3)
    n, nl = 64, d["norm"]["lanes"]
    v = rng.integers(-(1 << X.frac), 1 << X.frac, n)
    fi = {k: _fields(cfg, f"{k}_i") for k in ports}
    await ports["norm"].send([norm_word(fi["norm"], nl, 0, v[j:j + nl], np.zeros(nl, np.int64), j + nl == n)
                              for j in range(0, n, nl)])
    await ports["norm"].wait(n // nl)
    await ports["softmax"].send([pack(fi["softmax"], {"s": int(v[j]), "last": int(j == n - 1)}) for j in range(n)])
    await ports["softmax"].wait(n)
    el = d["ew_lanes"]
    await ports["ew"].send([pack(fi["ew"], {"op": 1, **{f"a.{k}": int(v[j + k]) for k in range(el)}})
                            for j in range(0, n, el)])
    await ports["ew"].wait(n // el)
    report = {}
    for name, p in ports.items():
        acc, out = p.driver.accept_cycles, p.output_cycles
        t = n // {"norm": nl, "ew": el}.get(name, 1)
        assert acc[-1] - acc[0] + 1 == t and out[-1] - out[0] + 1 == t, f"{name}: not one transfer per cycle"
        report[name] = (out[0] - acc[-1], out[-1] - acc[0] + 1)
        dut._log.info("%s: first output %d cycles after the last input; %d-element vector in %d cycles",
                      name, out[0] - acc[-1], n, out[-1] - acc[0] + 1)
    assert report["norm"][0] == d["norm_gap"], f"norm gap {report['norm'][0]}, documented {d['norm_gap']}"
    assert report["softmax"][0] == d["softmax_gap"], f"softmax gap {report['softmax'][0]}, documented {d['softmax_gap']}"
    assert report["ew"][1] == n // el + d["ew_latency"], report["ew"]


# ---- pytest runner --------------------------------------------------------------------------------------
def test_vector_unit_verilator():
    from verification.runner import lint, run_cocotb
    from verification.test_lut_unit import emit_with_roms, lint_ok
    out, sources = emit_with_roms("vector_unit", "vector_unit")
    lint_result = lint(sources, out.top)
    assert lint_ok(lint_result), lint_result.output
    res = run_cocotb("vector_unit", sources, out.top, "verification.test_vector_unit",
                     extra_env={CFG_ENV: str(out.config)})
    assert res.passed and res.n_tests == 3, res
