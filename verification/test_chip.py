"""cocotb + Verilator tests of the whole chip (``msh_chip_top``) and their pytest runners.

The cocotb side is one parametrized test, ``chip_run``: one test per ``RunSpec`` in $NANO_K3_CHIP_RUNS
(JSON, see ``chip_tb.runs_to_env``); each resets the chip, runs the image under its SPEC §3 timing
profile, applies every check of ``chip_tb.check_run`` and writes ``<run>.json`` plus the output region
``<run>.outputs.bin`` to $NANO_K3_CHIP_OUT.

The pytest side has ``run_chip_sim`` (build + run a list of runs, collect the reports) used by
``verification/chip_sim.py`` (`make sim`), and tests that prove the checks work in both directions on
``verification/wrappers/protocol_fixture.v`` — test equipment that copies preloaded expected outputs
and computes nothing (never reported as the chip) — with the tiny config for speed. When the chip
block exists in ``rtl_gen.BLOCKS``, ``test_chip_nano_short`` runs the real chip on the short profile.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import cocotb
import pytest

from verification.chip_tb import (OUT_ENV, REFS_ENV, RUNS_ENV, ChipTB, RunSpec, check_run, compare_output_regions,
                                  prepare, reference, reference_path, runs_from_env, runs_to_env, save_reference,
                                  save_report)

FIXTURE = Path(__file__).resolve().parent / "wrappers" / "protocol_fixture.v"
FIXTURE_TOP = "protocol_fixture"
CHIP_TOP = "msh_chip_top"
# One build serves the normal and the random-initial-state runs: with --x-initial unique every flop
# starts at zero unless +verilator+rand+reset+2 asks for random values (SPEC §3, §7).
BUILD_ARGS = ("--x-initial", "unique", "--x-assign", "unique", "-Wno-fatal")
RAND_RESET_PLUSARGS = ("+verilator+rand+reset+2", "+verilator+seed+7")


def _runs() -> list[RunSpec]:
    text = os.environ.get(RUNS_ENV)
    # outside a simulation (pytest collection) the list is only needed to define the test
    return runs_from_env(text) if text else [RunSpec(seq_len=16, profile="short")]


@cocotb.test()
@cocotb.parametrize(run=[cocotb.Param(r, name=r.name) for r in _runs()])
async def chip_run(dut, run: RunSpec):
    t0 = time.monotonic()
    image, ref = prepare(run, Path(os.environ[REFS_ENV]) if os.environ.get(REFS_ENV) else None)
    dut._log.info(f"{run.name}: image and references ready in {time.monotonic() - t0:.1f} s")
    lay = image.layout
    dut._log.info(f"{run.name}: config {run.config} group {lay.cfg.group_size} seed {run.seed} seq_len {run.seq_len} "
                  f"timing {run.timing} prompt index {run.prompt_index} max cycles {run.max_cycles}")
    tb = ChipTB(dut, run, image)
    t1 = time.monotonic()
    obs = await tb.run()
    dut._log.info(f"{run.name}: simulated {obs.stats.get('cycles', 0)} cycles in {time.monotonic() - t1:.1f} s")
    mem = tb.final_memory()
    report = check_run(run, lay, mem, obs, ref)
    if os.environ.get(OUT_ENV):
        save_report(report, mem, lay, Path(os.environ[OUT_ENV]))
    for c in report.checks:
        dut._log.info(f"CHECK {run.name}: {'PASS' if c.passed else 'FAIL'} {c.name}: {c.message}")
    assert report.passed, f"{run.name}: " + "; ".join(report.failures())


# ------------------------------------------------------------------------------------------------
# pytest runner


@dataclass(frozen=True)
class ChipSimResult:
    passed: bool                     # the cocotb process ran every run and all passed
    reports: dict[str, dict]         # run report name -> chip_tb.RunReport.as_dict()
    outputs: dict[str, bytes]        # run report name -> output region bytes
    log: Path
    n_tests: int
    n_failed: int


def run_chip_sim(name: str, sources: Sequence[Path], toplevel: str, runs: Sequence[RunSpec], *,
                 rand_reset: bool = False, rtl_dir: Path | None = None, defines: Mapping[str, object] = {},
                 parameters: Mapping[str, object] = {}, plusargs: Sequence[str] = (),
                 build_dir: Path | None = None, build_args: Sequence[str] = (), build: bool = True) -> ChipSimResult:
    """Build ``sources`` into ``build_dir`` (default build/sim/<name>) and run ``runs`` (one cocotb test
    each) there, normally or with every flop starting random (``rand_reset``). ``rtl_dir``: the emitted RTL
    folder, linked as ``rtl`` beside the simulator (its ROM files, SPEC §5); ``build_args`` go to Verilator
    after ``BUILD_ARGS``; ``build=False`` runs the binary built before. Never raises for failing checks:
    the reports say."""
    from verification.runner import SIM_ROOT, SimFailure, link_rtl, run_cocotb

    build_dir = Path(build_dir) if build_dir is not None else SIM_ROOT / name
    out = build_dir / "reports"
    shutil.rmtree(out, ignore_errors=True)          # never read a stale report
    build_dir.mkdir(parents=True, exist_ok=True)
    if rtl_dir is not None:
        link_rtl(rtl_dir, build_dir)
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must be unique within one simulation, got {names}")
    refs = build_dir / "refs"                       # computed here, fresh: torch stays out of the simulator
    shutil.rmtree(refs, ignore_errors=True)
    for run in runs:
        save_reference(reference(run), reference_path(refs, run))
    try:
        res = run_cocotb(name, sources, toplevel, "verification.test_chip", defines=defines, parameters=parameters,
                         build_args=[*BUILD_ARGS, *build_args],
                         plusargs=[*plusargs, *(RAND_RESET_PLUSARGS if rand_reset else ())],
                         extra_env={RUNS_ENV: runs_to_env(list(runs)), OUT_ENV: str(out), REFS_ENV: str(refs)},
                         check=False, build_dir=build_dir, build=build)
    except SimFailure as e:                         # only raised with check=True; kept for clarity
        res = e.result
    reports, outputs = {}, {}
    for p in sorted(out.glob("*.json")) if out.exists() else []:
        d = json.loads(p.read_text())
        reports[d["name"]] = d
        outputs[d["name"]] = (out / f"{d['name']}.outputs.bin").read_bytes()
    return ChipSimResult(res.passed and len(reports) == len(runs), reports, outputs, res.log, res.n_tests,
                         res.n_failed)


def fixture_runs(seq_len: int = 16, profiles: Sequence[str] = ("long",), **kw) -> list[RunSpec]:
    return [RunSpec(seq_len=seq_len, profile=p, config="tiny", seed=7, expected_in_scratch=True, **kw)
            for p in profiles]


def _failed(report: dict) -> dict[str, str]:
    return {c["name"]: c["message"] for c in report["checks"] if not c["passed"]}


def test_fixture_passes_every_profile():
    """A protocol-correct run passes every check under each timing profile, and the random-initial-
    state re-run of the short run writes byte-identical outputs."""
    runs = fixture_runs(profiles=("long", "short", "elastic"))
    normal = run_chip_sim("chip-fixture", [FIXTURE], FIXTURE_TOP, runs)
    for name, r in normal.reports.items():
        print(f"{name}: {r['cycles']} cycles, {r['read_beats']} reads, {r['write_beats']} writes, "
              f"stalls {r['stall_cycles']}, min cos {r['min_cosine']:.6f}")
    assert normal.passed, {n: _failed(r) for n, r in normal.reports.items()} or f"no reports; see {normal.log}"
    short, elastic = normal.reports["tiny-g64-s16-short"], normal.reports["tiny-g64-s16-elastic"]
    assert short["stall_cycles"] > 0 and short["timing"]["ready_drop"] == 0.05
    assert elastic["cycles"] > short["cycles"], "base latency 48 must cost cycles on a one-read-at-a-time copier"
    rr = run_chip_sim("chip-fixture", [FIXTURE], FIXTURE_TOP, fixture_runs(profiles=("short",)),
                      rand_reset=True)
    assert rr.passed, {n: _failed(r) for n, r in rr.reports.items()} or f"no reports; see {rr.log}"
    (name, rep), = rr.reports.items()
    assert rep["rand_reset"] and name == "tiny-g64-s16-short-randreset"
    from nano_k3.config import TINY
    from nano_k3.image import plan_layout
    same = compare_output_regions(normal.outputs["tiny-g64-s16-short"], rr.outputs[name], plan_layout(TINY, 16))
    assert same.passed, same.message


# Each broken fixture must fail exactly the named check, with a message that names the problem. The
# faults are switched on by plusargs (same effect as the fixture's defines), so one build serves all.
VARIANTS = {
    "corrupt_logit": ("+CORRUPT_LOGIT", "bit_exact", "position 1, logit 8"),
    "status_early": ("+STATUS_EARLY", "status", "is not the status word"),
    "done_early": ("+DONE_EARLY", "done_after_status", "but the status write was accepted at cycle"),
    "misaligned": ("+MISALIGNED", "addr_errors", "address 0x8 (not 16-byte aligned)"),
    "below_floor": ("+SKIP_TENSORS", "dense_floor", "< the dense-tensor floor"),
    "hang": ("+HANG", "done", "timeout: no DONE within 40000 cycles"),
}
ALSO_FAILS = {"hang": {"done_after_status"}}   # no DONE: nothing to order either


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fixture_fault_is_caught(variant):
    plusarg, check, words = VARIANTS[variant]
    # the copy of tiny s16 takes ~10k cycles; a 40k limit keeps the hang variant short
    res = run_chip_sim("chip-fixture", [FIXTURE], FIXTURE_TOP, fixture_runs(max_cycles=40_000), plusargs=[plusarg])
    assert len(res.reports) == 1, f"no report; see {res.log}"
    (rep,) = res.reports.values()
    failed = _failed(rep)
    print(f"{variant}: {failed}")
    assert not res.passed and res.n_failed == 1
    assert set(failed) == {check} | ALSO_FAILS.get(variant, set()), failed
    assert words in failed[check], failed[check]


@pytest.mark.parametrize("defines", [{}, {"CORRUPT_LOGIT": 1, "STATUS_EARLY": 1, "DONE_EARLY": 1, "MISALIGNED": 1,
                                          "HANG": 1}, {"READ_TENSORS": 0}], ids=["plain", "all-faults", "no-tensors"])
def test_fixture_lint_clean(defines):
    """The fixture is hand-written Verilog: every rule on, no warnings, with and without its fault defines."""
    from verification.runner import lint
    args = [f"-G{k}={v}" if k == "READ_TENSORS" else f"-D{k}={v}" for k, v in defines.items()]
    r = lint([FIXTURE], FIXTURE_TOP, extra_args=args)
    assert r.clean, r.output


def test_chip_sim_summary_on_fixture(tmp_path):
    """The `make sim` driver end to end on the fixture: summary schema, elasticity, random-reset check."""
    import json
    from verification.chip_sim import run_chip
    from verification.sim import write_summary
    rtl = tmp_path / "rtl"
    rtl.mkdir()
    (rtl / "protocol_fixture.f").write_text(f"{FIXTURE}\n")
    cfg = {"block": "chip", "top": FIXTURE_TOP, "files": {"filelist": "protocol_fixture.f"}}
    summary = run_chip(rtl, tmp_path, cfg, runs=fixture_runs(profiles=("long", "short", "elastic")),
                       sim_name="chip-fixture", macro_models=False)
    d = json.loads(write_summary(summary, tmp_path).read_text())
    assert d["verdict"] == "pass", [r["checks"] for r in d["runs"] if not r["passed"]]
    assert [r["name"] for r in d["runs"]] == ["tiny-g64-s16-long", "tiny-g64-s16-short", "tiny-g64-s16-elastic",
                                              "tiny-g64-s16-short-randreset"]
    long = d["runs"][0]
    assert long["cycles_per_token"] == long["cycles"] / 16 and long["tokens_per_s"] == 1e8 / long["cycles_per_token"]
    assert d["elasticity"]["ratio"] > 1.0 and d["rand_reset"]["passed"]
    assert d["argmax_agreement_pooled"]["rows"] == 32 and d["lint"]["errors"] == 0


def test_chip_nano_short():
    """The real chip, nano short profile (16 positions)."""
    from hw.params import preset
    from rtl_gen import emit, read_filelist
    from verification.runner import REPO
    rtl = emit("chip", REPO / "build" / "rtl" / "chip", preset("nano"))
    sources = chip_sources(read_filelist(rtl.filelist))
    res = run_chip_sim("chip-nano-short", sources, rtl.top, [RunSpec(seq_len=16, profile="short")],
                       rtl_dir=rtl.verilog.parent)
    assert res.passed, {n: _failed(r) for n, r in res.reports.items()} or f"no reports; see {res.log}"


def chip_sources(filelist: Sequence[Path]) -> list[Path]:
    """The chip's file list plus the project's simulation models of the SPEC §5 macros."""
    from verification.runner import MODELS
    models = [MODELS / "msh_sram.v", MODELS / "msh_rom.v"]
    names = {p.name for p in filelist}
    return list(filelist) + [m for m in models if m.name not in names]
