"""Runs of the whole chip (``msh_chip_top``) under cocotb + Verilator: the cocotb test and its driver.

The cocotb side is one parametrized test, ``chip_run``: one test per ``RunSpec`` in $NANO_K3_CHIP_RUNS
(JSON, see ``chip_tb.runs_to_env``); each resets the chip, runs the image under its SPEC §3 timing
profile, applies every check of ``chip_tb.check_run`` and writes ``<run>.json`` plus the output region
``<run>.outputs.bin`` to $NANO_K3_CHIP_OUT.

The driver, ``run_chip_sim``, builds a design, computes the runs' references outside the simulator
(torch stays out of it), runs a cocotb test module over the runs (``chip_run`` here, or another with
the same environment, e.g. ``verification.phase_monitor``) and collects each run's report, output
region and wall-clock time. ``make sim`` (verification/chip_sim.py), ``make bench``
(verification/bench.py) and the chip's pytest files use it.

SPEC §10 lengths: ``run_length`` stretches a public length the SPEC's way and scales it to a preset's
``max_seq`` (nano's is the SPEC's 64, so nano lengths are the SPEC's own).
"""
from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import cocotb

from nano_k3.config import ModelConfig
from verification.chip_tb import (OUT_ENV, RAND_RESET_PLUSARG, RAND_RESET_SUFFIX, REFS_ENV, RUNS_ENV, ChipTB, RunSpec,
                                  check_run, prepare, reference, reference_path, runs_from_env, runs_to_env,
                                  save_reference, save_report)

TEST_MODULE = "verification.chip_run"
# One build serves the normal and the random-initial-state runs: with --x-initial unique every flop
# starts at zero unless +verilator+rand+reset+2 asks for random values (SPEC §3, §7).
BUILD_ARGS = ("--x-initial", "unique", "--x-assign", "unique", "-Wno-fatal")
RAND_RESET_SEED = 7                      # Verilator's seed for the random initial state unless a caller picks one
SPEC_MAX_SEQ = 64                        # SPEC §10: lengths are clamped to 8..64
SPEC_MIN_SEQ = 8
SEED_LIMIT = 2 ** 31                     # fresh seeds are below this (any seed >= 0 is valid)
# Logged as "RUN-BOUNDARY begin <run>" / "... end <run>" around each run, after the simulator's own output
# ($display, buffered by the C library apart from Python's log) is flushed: what the simulator printed
# during a run lies between its two markers in the log (verification/physical_macros.py scan_collisions).
RUN_BOUNDARY = "RUN-BOUNDARY"


def fresh_seed() -> int:
    """A new random seed for a run set (printed by the caller so that ``--seed`` replays it)."""
    return secrets.randbelow(SEED_LIMIT)


def run_length(cfg: ModelConfig, public_len: int, stretch: float = 1.0) -> int:
    """SPEC §10: public length s becomes max(8, min(64, round(s × stretch))); a preset whose ``max_seq``
    is not 64 gets that length scaled by max_seq / 64 (at least 1)."""
    s = public_len if stretch == 1.0 else max(SPEC_MIN_SEQ, min(SPEC_MAX_SEQ, round(public_len * stretch)))
    return max(1, round(s * cfg.max_seq / SPEC_MAX_SEQ))


def chip_sources(filelist: Sequence[Path]) -> list[Path]:
    """The chip's file list plus the project's simulation models of the SPEC §5 macros."""
    from verification.runner import MODELS
    models = [MODELS / "msh_sram.v", MODELS / "msh_rom.v"]
    names = {p.name for p in filelist}
    return list(filelist) + [m for m in models if m.name not in names]


# ------------------------------------------------------------------------------------------------
# cocotb side


def _runs() -> list[RunSpec]:
    text = os.environ.get(RUNS_ENV)
    # outside a simulation (the driver imports this module) the list is only needed to define the test
    return runs_from_env(text) if text else [RunSpec(seq_len=16, profile="short")]


def _run_boundary(dut, what: str, run: RunSpec) -> None:
    ctypes.CDLL(None).fflush(None)
    dut._log.info(f"{RUN_BOUNDARY} {what} {run.name}")


@cocotb.test()
@cocotb.parametrize(run=[cocotb.Param(r, name=r.name) for r in _runs()])
async def chip_run(dut, run: RunSpec):
    _run_boundary(dut, "begin", run)
    try:
        await _chip_run(dut, run)
    finally:
        _run_boundary(dut, "end", run)


async def _chip_run(dut, run: RunSpec):
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
# Driver


@dataclass(frozen=True)
class ChipSimResult:
    passed: bool                     # the cocotb process ran every run and all passed
    reports: dict[str, dict]         # run report name -> chip_tb.RunReport.as_dict()
    outputs: dict[str, bytes]        # run report name -> output region bytes
    times: dict[str, float]          # run report name -> seconds its cocotb test took (image, simulation, checks)
    build_s: float                   # seconds of Verilator build (and reference computation) before the tests
    reports_dir: Path                # where the test module wrote its per-run files
    log: Path
    n_tests: int
    n_failed: int


def case_times(results_xml: Path) -> dict[str, float]:
    """Seconds per parametrized test from cocotb's results file: ``<test>/run=<name>`` -> {name: time}."""
    if not results_xml.exists():
        return {}
    return {case.get("name", "").split("run=", 1)[-1]: float(case.get("time", 0.0))
            for case in ET.parse(results_xml).getroot().iter("testcase")}


def run_chip_sim(name: str, sources: Sequence[Path], toplevel: str, runs: Sequence[RunSpec], *,
                 test_module: str = TEST_MODULE, rand_reset: bool = False, rtl_dir: Path | None = None,
                 defines: Mapping[str, object] = {}, parameters: Mapping[str, object] = {},
                 plusargs: Sequence[str] = (), build_dir: Path | None = None, build_args: Sequence[str] = (),
                 build: bool = True, reset_seed: int = RAND_RESET_SEED, trace: Path | None = None) -> ChipSimResult:
    """Build ``sources`` into ``build_dir`` (default build/sim/<name>) and run ``runs`` (one cocotb test
    each of ``test_module``) there, normally or with every flop starting random (``rand_reset``).
    ``rtl_dir``: the emitted RTL folder, linked as ``rtl`` beside the simulator (its ROM files, SPEC §5);
    ``build_args`` go to Verilator after ``BUILD_ARGS``; ``build=False`` runs the binary built before;
    ``reset_seed``: Verilator's seed for the random initial state (with ``rand_reset``); ``trace``: record the top
    level's ports, every time step, into this VCD file (verification.replay reads it). Runs of the nano chip
    are built for simulation speed (``runner.model_opt``), others for build speed.
    Never raises for failing checks: the reports say."""
    from verification.runner import SIM_ROOT, link_rtl, model_opt, run_cocotb

    t0 = time.monotonic()
    # absolute: the test module runs in build_dir and finds its folders through the environment
    build_dir = (Path(build_dir) if build_dir is not None else SIM_ROOT / name).resolve()
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
    traced = ["--trace", "--trace-depth", "1"] if trace is not None else []
    res = run_cocotb(name, sources, toplevel, test_module, defines=defines, parameters=parameters,
                     build_args=[*BUILD_ARGS, *build_args, *traced], waves=trace is not None,
                     test_args=["--trace-file", str(Path(trace).resolve())] if trace is not None else [],
                     plusargs=[*plusargs, *((f"+{RAND_RESET_PLUSARG}", f"+verilator+seed+{reset_seed}")
                                            if rand_reset else ())],
                     extra_env={RUNS_ENV: runs_to_env(list(runs)), OUT_ENV: str(out), REFS_ENV: str(refs)},
                     check=False, build_dir=build_dir, build=build,
                     opt=model_opt(r.config for r in runs))
    suffix = RAND_RESET_SUFFIX if rand_reset else ""
    tested = case_times(res.results_xml)
    reports, outputs, times = {}, {}, {}
    for run in runs:
        report_name = run.name + suffix
        path = out / f"{report_name}.json"
        if path.exists():
            reports[report_name] = json.loads(path.read_text())
            outputs[report_name] = (out / f"{report_name}.outputs.bin").read_bytes()
        if run.name in tested:
            times[report_name] = tested[run.name]
    build_s = max(0.0, time.monotonic() - t0 - sum(tested.values()))
    return ChipSimResult(res.passed and len(reports) == len(runs), reports, outputs, times, build_s, out, res.log,
                         res.n_tests, res.n_failed)
