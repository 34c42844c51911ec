"""`make sim` for the whole chip: the SPEC_NANO_KPU.md runs of ``msh_chip_top`` and build/sim/summary.json.

    python -m verification.chip_sim --rtl build/rtl --out build/sim          # what `make sim` calls for block "chip"

Runs (nano, seed 20260706 unless ``--seed``), in one simulator build:
* ``nano-g128-s48-long``     the throughput run (SPEC §8 metric), prompt index 0;
* ``nano-g128-s16-short``    correctness stress (J = 24, 5 % ready drops), prompt index 1;
* ``nano-g128-s16-elastic``  the short run at base latency 48: elasticity = cycles(48) / cycles(24);
* ``nano-g64-s64-long``      group size 64 and the longest sequence;
* ``nano-g128-s16-short-randreset``  the short run with every flop random (+verilator+rand+reset+2);
  its output region must be byte-identical to the normal short run's.
Each run is checked by ``verification.chip_tb.check_run``. The summary holds per run: cycles,
cycles/token, tokens/s at 100 MHz, read/write beats, stall cycles, address errors, timeout, bit-exact
verdict (first divergence if not), min cosine, argmax agreement, every check; then elasticity,
the random-reset comparison, the pooled argmax agreement and lint counts, and the overall verdict.
"""
from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from pathlib import Path

from verification.chip_tb import ARGMAX_GATE, DEFAULT_MAX_CYCLES, PUBLIC_SEED, RunSpec, compare_output_regions

SIM_NAME = "make-sim-chip"
PROGRESS = re.compile(r"(PROGRESS|CHECK \S+ FAIL|RUN accepted|image and references|simulated \d+ cycles)")


def default_runs(seed: int = PUBLIC_SEED, max_cycles: int = DEFAULT_MAX_CYCLES, config: str = "nano") -> list[RunSpec]:
    kw = dict(config=config, seed=seed, max_cycles=max_cycles)
    return [RunSpec(seq_len=48, profile="long", group=128, **kw),
            RunSpec(seq_len=16, profile="short", group=128, **kw),
            RunSpec(seq_len=16, profile="elastic", group=128, **kw),
            RunSpec(seq_len=64, profile="long", group=64, **kw)]


class _Follow(threading.Thread):
    """Echo the progress lines of a running simulation's log (each run takes minutes)."""

    def __init__(self, log: Path, tag: str):
        super().__init__(daemon=True)
        self.log, self.tag, self.done = log, tag, threading.Event()

    def run(self) -> None:
        pos, partial = 0, ""
        while True:
            finished = self.done.is_set()
            if self.log.exists():
                size = self.log.stat().st_size
                if size < pos:
                    pos, partial = 0, ""
                with self.log.open(errors="replace") as f:
                    f.seek(pos)
                    text = f.read()
                    pos = f.tell()
                lines = (partial + text).split("\n")
                partial = lines.pop()
                for ln in lines:
                    if PROGRESS.search(ln):
                        msg = ln.split("cocotb.", 1)[-1].split(None, 1)[-1] if "cocotb." in ln else ln.strip()
                        print(f"  [{self.tag}] {msg.strip()}", flush=True)
            if finished:
                return
            self.done.wait(2.0)


def _simulate(name: str, sources, top: str, runs: list[RunSpec], *, rand_reset: bool, rtl_dir: Path, tag: str):
    from verification.runner import SIM_ROOT
    from verification.test_chip import run_chip_sim

    log = SIM_ROOT / name / "run.log"
    log.unlink(missing_ok=True)
    follower = _Follow(log, tag)
    follower.start()
    try:
        return run_chip_sim(name, sources, top, runs, rand_reset=rand_reset, rtl_dir=rtl_dir)
    finally:
        follower.done.set()
        follower.join()


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(summary: dict) -> None:
    head = f"{'run':34} {'cycles':>10} {'cyc/tok':>9} {'tok/s':>8} {'reads':>9} {'writes':>7} {'exact':>5} " \
           f"{'min cos':>10} {'agree':>6}  verdict"
    print(head)
    print("-" * len(head))
    for r in summary["runs"]:
        print(f"{r['name']:34} {_fmt(r['cycles'], 'd'):>10} {_fmt(r['cycles_per_token'], '.1f'):>9} "
              f"{_fmt(r['tokens_per_s'], '.0f'):>8} {_fmt(r['read_beats'], 'd'):>9} {_fmt(r['write_beats'], 'd'):>7} "
              f"{'yes' if r['bit_exact'] else 'NO':>5} {_fmt(r['min_cosine'], '.7f'):>10} "
              f"{_fmt(r['argmax_agreement'], '.3f'):>6}  {'PASS' if r['passed'] else 'FAIL'}")
        for c in r["checks"]:
            if not c["passed"]:
                print(f"    FAIL {c['name']}: {c['message']}")
    e, rr, ag = summary["elasticity"], summary["rand_reset"], summary["argmax_agreement_pooled"]
    if e:
        print(f"elasticity cycles(base 48) / cycles(base 24) = {_fmt(e['ratio'], '.4f')} (informational)")
    if rr:
        print(f"random initial state: {'PASS' if rr['passed'] else 'FAIL'} — {rr['message']}")
    if ag:
        print(f"argmax agreement pooled over {ag['runs']}: {_fmt(ag['value'], '.4f')} (gate {ARGMAX_GATE})")
    if summary.get("throughput"):
        t = summary["throughput"]
        print(f"throughput ({t['run']}): {t['cycles_per_token']:.1f} cycles/token = {t['tokens_per_s']:.0f} tokens/s at 100 MHz")


def run_chip(rtl: Path, out: Path, cfg: dict, *, runs: list[RunSpec] | None = None, rand_reset: bool = True,
             sim_name: str = SIM_NAME, macro_models: bool = True) -> dict:
    """Lint and simulate the emitted chip in ``rtl`` (its config.json is ``cfg``); return the summary.

    ``macro_models`` adds the project's msh_sram / msh_rom simulation models to the chip's file list
    (SPEC §1: the list names every file except those two macros)."""
    from rtl_gen import read_filelist
    from verification.lint import MAX_WARNINGS, passes
    from verification.runner import lint
    from verification.test_chip import chip_sources

    t0 = time.monotonic()
    runs = runs or default_runs()
    top = cfg["top"]
    listed = read_filelist(rtl / cfg["files"]["filelist"])
    sources = chip_sources(listed) if macro_models else listed
    print(f"sim: linting {top} ({len(sources)} files)", flush=True)
    lint_result = lint(sources, top)
    print(f"sim: lint {lint_result.errors} errors, {lint_result.warnings} warnings", flush=True)
    print(f"sim: {len(runs)} runs under Verilator: {', '.join(r.name for r in runs)}", flush=True)
    normal = _simulate(sim_name, sources, top, runs, rand_reset=False, rtl_dir=rtl, tag="sim")
    reports = [normal.reports.get(r.name) or _missing(r, normal.log) for r in runs]

    rr_summary, short = None, next((r for r in runs if r.profile == "short"), None)
    if rand_reset and short is not None:
        print(f"sim: random initial state re-run of {short.name}", flush=True)
        rr = _simulate(sim_name, sources, top, [short], rand_reset=True, rtl_dir=rtl, tag="randreset")
        name = short.name + "-randreset"
        reports.append(rr.reports.get(name) or _missing(short, rr.log, name))
        if name in rr.outputs and short.name in normal.outputs:
            from nano_k3.image import plan_layout
            c = compare_output_regions(normal.outputs[short.name], rr.outputs[name],
                                       plan_layout(short.model_config(), short.seq_len), f"{name} vs {short.name}")
            rr_summary = {"passed": c.passed, "message": c.message}
        else:
            rr_summary = {"passed": False, "message": "a run produced no output region to compare"}

    by_name = {r["name"]: r for r in reports}
    elastic = next((r for r in runs if r.profile == "elastic"), None)
    e_summary = None
    if elastic is not None and short is not None:
        c24, c48 = by_name[short.name]["cycles"], by_name[elastic.name]["cycles"]
        e_summary = {"short_run": short.name, "elastic_run": elastic.name, "cycles_base24": c24,
                     "cycles_base48": c48, "ratio": c48 / c24 if c24 and c48 else None}
    pooled = [by_name[r.name] for r in runs if r.profile in ("long", "short")]
    correct = sum(r["argmax_correct"] or 0 for r in pooled)
    rows = sum(r["rows"] or 0 for r in pooled)
    ag = {"runs": [r["name"] for r in pooled], "correct": correct, "rows": rows,
          "value": correct / rows if rows else None, "gate": ARGMAX_GATE,
          "passed": bool(rows) and correct / rows >= ARGMAX_GATE}
    long = next((by_name[r.name] for r in runs if r.profile == "long" and r.seq_len == 48), None)
    throughput = ({"run": long["name"], "cycles": long["cycles"], "cycles_per_token": long["cycles_per_token"],
                   "tokens_per_s": long["tokens_per_s"]} if long and long["cycles"] else None)
    lint_ok = passes(lint_result)
    passed = (all(r["passed"] for r in reports) and (rr_summary is None or rr_summary["passed"])
              and ag["passed"] and lint_ok)
    summary = {
        "schema": 1, "block": cfg["block"], "top": top, "params_hash": cfg.get("params_hash"),
        "verdict": "pass" if passed else "fail",
        "tests": len(reports), "failed": sum(not r["passed"] for r in reports),
        "details": [{"name": r["name"], "passed": r["passed"], "time_s": r.get("time_s", 0.0)} for r in reports],
        "runs": reports, "throughput": throughput, "elasticity": e_summary, "rand_reset": rr_summary,
        "argmax_agreement_pooled": ag,
        "lint": {"errors": lint_result.errors, "warnings": lint_result.warnings, "max_warnings": MAX_WARNINGS,
                 "by_rule": lint_result.by_rule},
        "seed": runs[0].seed, "runtime_s": round(time.monotonic() - t0, 1), "log": str(normal.log),
        "command": f"python -m verification.chip_sim --rtl {rtl} --out {out}",
    }
    print_table(summary)
    return summary


def _missing(run: RunSpec, log: Path, name: str | None = None) -> dict:
    """Placeholder report of a run the simulator never finished (build error, crash)."""
    return {"name": name or run.name, "run": run.to_dict(), "profile": run.profile, "passed": False,
            "cycles": None, "cycles_per_token": None, "tokens_per_s": None, "read_beats": None, "write_beats": None,
            "addr_errors": None, "stall_cycles": None, "timeout": None, "bit_exact": False, "first_divergence": None,
            "min_cosine": None, "argmax_correct": None, "rows": None, "argmax_agreement": None,
            "checks": [{"name": "simulation", "passed": False, "message": f"no report; see {log}"}]}


def main(argv: list[str] | None = None) -> int:
    from rtl_gen import read_config
    from verification.sim import write_summary

    ap = argparse.ArgumentParser(prog="python -m verification.chip_sim", description=__doc__.splitlines()[0])
    ap.add_argument("--rtl", type=Path, default=Path("build/rtl"))
    ap.add_argument("--out", type=Path, default=Path("build/sim"))
    ap.add_argument("--seed", type=int, default=PUBLIC_SEED)
    ap.add_argument("--config", default="nano")
    ap.add_argument("--max-cycles", type=int, default=DEFAULT_MAX_CYCLES)
    ap.add_argument("--run", action="append", default=[], metavar="GROUP,SEQ_LEN,PROFILE",
                    help="a run instead of the default set (repeatable), e.g. 128,48,long")
    ap.add_argument("--no-rand-reset", action="store_true", help="skip the random-initial-state re-run")
    args = ap.parse_args(argv)
    cfg_path = args.rtl / "config.json"
    if not cfg_path.exists():
        ap.error(f"{cfg_path} not found; run `make rtl BLOCK=chip` first")
    cfg, _ = read_config(cfg_path)
    try:
        runs = [RunSpec(seq_len=int(s), profile=p, group=int(g), config=args.config, seed=args.seed,
                        max_cycles=args.max_cycles) for g, s, p in (r.split(",") for r in args.run)] or \
            default_runs(args.seed, args.max_cycles, args.config)
    except ValueError as e:
        ap.error(str(e))
    (args.out / "summary.json").unlink(missing_ok=True)
    summary = run_chip(args.rtl, args.out, cfg, runs=runs, rand_reset=not args.no_rand_reset)
    path = write_summary(summary, args.out)
    print(f"sim: {summary['top']}: {summary['verdict'].upper()}; summary {path}")
    return 0 if summary["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
