"""`make sim`: run the design emitted by `make rtl` under cocotb + Verilator and write a summary.

    python -m verification.sim --rtl build/rtl --out build/sim [--macros physical]

Reads ``config.json`` of the RTL folder to know which design it is, lints it, runs its cocotb
tests (RTL against the fixed-point reference) with a fresh random seed (printed; ``--seed N`` replays
it), and writes ``summary.json`` atomically: the verdict, test counts, lint counts, seed and runtime.
The whole chip has its own run set (verification/chip_sim.py: SPEC §10's variations over three seeds);
``--macros physical`` (chip only) simulates it with the storage macros place and route implements.
Exits non-zero when anything failed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from rtl_gen import read_config, read_filelist

from .chip_run import fresh_seed
from .physical_macros import PhysicalMacroError
from .runner import SimFailure, lint, run_cocotb


@dataclass(frozen=True)
class SimSpec:
    module: str        # cocotb test module
    config_env: str    # environment variable through which the tests find config.json
    seed_env: str = "NANO_K3_SEED"


SIMS = {
    "dequant_mac": SimSpec("verification.test_dequant_mac", "NANO_K3_RTL_CONFIG"),
    "mem_engine": SimSpec("verification.test_mem_engine", "NANO_K3_RTL_CONFIG"),
}

def _test_details(results_xml: Path) -> list[dict]:
    if not results_xml.exists():
        return []
    out = []
    for case in ET.parse(results_xml).getroot().iter("testcase"):
        failed = case.find("failure") is not None or case.find("error") is not None
        out.append({"name": case.get("name"), "passed": not failed, "sim_time_ns": float(case.get("sim_time_ns", 0)),
                    "time_s": float(case.get("time", 0))})
    return out


def run(rtl: Path, out: Path, seed: int, macros: str = "spec") -> dict:
    cfg_path = rtl / "config.json"
    if not cfg_path.exists():
        raise SystemExit(f"sim: {cfg_path} not found; run `make rtl` first")
    cfg, _ = read_config(cfg_path)
    block = cfg["block"]
    if block == "chip":         # the whole chip has its own runs, metrics and table (SPEC runs; chip_sim.py)
        from .chip_sim import run_chip, sim_name
        return run_chip(rtl, out, cfg, seed=seed, sim_name=sim_name(macros), macros=macros)
    if macros != "spec":
        raise SystemExit(f"sim: --macros {macros} is for the whole chip (block 'chip'); "
                         f"{rtl} holds block {block!r}")
    if block not in SIMS:
        raise SystemExit(f"sim: no simulation registered for block {block!r}; known: {', '.join(sorted(SIMS))}")
    spec = SIMS[block]
    sources = read_filelist(rtl / cfg["files"]["filelist"])
    t0 = time.monotonic()
    print(f"sim: linting {cfg['top']} ({len(sources)} files)", flush=True)
    lint_result = lint(sources, cfg["top"])
    print(f"sim: running {spec.module} under Verilator, seed {seed} (replay with --seed {seed})", flush=True)
    result = run_cocotb(f"make-sim-{block}", sources, cfg["top"], spec.module, seed=seed, check=False,
                        extra_env={spec.config_env: str(cfg_path.resolve()), spec.seed_env: str(seed)})
    tests = _test_details(result.results_xml)
    passed = result.passed and lint_result.errors == 0 and result.n_tests > 0
    return {
        "schema": 1, "block": block, "top": cfg["top"], "params_hash": cfg.get("params_hash"),
        "verdict": "pass" if passed else "fail",
        "tests": result.n_tests, "failed": result.n_failed, "details": tests,
        "lint": {"errors": lint_result.errors, "warnings": lint_result.warnings, "by_rule": lint_result.by_rule},
        "seed": seed, "runtime_s": round(time.monotonic() - t0, 1), "log": str(result.log),
        "command": f"python -m verification.sim --rtl {rtl} --out {out}",
    }


def write_summary(summary: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    dst = out / "summary.json"
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".summary.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(summary, f, indent=2)
    os.replace(tmp, dst)
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verification.sim", description=__doc__.splitlines()[0])
    ap.add_argument("--rtl", type=Path, default=Path("build/rtl"))
    ap.add_argument("--out", type=Path, default=Path("build/sim"))
    ap.add_argument("--seed", type=int, default=None, help="replay this seed (default: a fresh random one)")
    ap.add_argument("--macros", choices=("spec", "physical"), default="spec",
                    help="chip storage models: the SPEC models (default) or what place and route implements")
    args = ap.parse_args(argv)
    stale = args.out / "summary.json"
    stale.unlink(missing_ok=True)          # never leave an old verdict next to a failed run
    try:
        summary = run(args.rtl, args.out, fresh_seed() if args.seed is None else args.seed, args.macros)
    except SimFailure as e:
        print(f"sim: FAILED to build or run: {e}", file=sys.stderr)
        return 1
    except PhysicalMacroError as e:
        print(f"sim: cannot simulate with the physical macros: {e}", file=sys.stderr)
        return 1
    path = write_summary(summary, args.out)
    for t in summary["details"]:
        took = "no time recorded" if t.get("time_s") is None else f"{t['time_s']:.1f} s"
        print(f"  {'PASS' if t['passed'] else 'FAIL'}  {t['name']}  ({took})")
    print(f"sim: {summary['top']}: {summary['verdict'].upper()} — {summary['tests'] - summary['failed']}/"
          f"{summary['tests']} tests, lint {summary['lint']['errors']} errors / {summary['lint']['warnings']} warnings; "
          f"log {summary['log']}; summary {path}")
    return 0 if summary["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
