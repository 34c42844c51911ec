"""`make sim` for the whole chip: the SPEC_NANO_KPU.md §10 variations of ``msh_chip_top`` and build/sim/summary.json.

    python -m verification.sim --rtl build/rtl --out build/sim [--seed N] [--macros physical]  # `make sim`
    python -m verification.chip_sim --rtl build/rtl --out build/sim [--seed N] [--run G,S,PROFILE[,SEED]]
                                    [--macros spec|physical]

Every invocation draws a fresh random seed (printed; ``--seed N`` replays it) and runs ``PLAN`` in one
simulator build: three seeds (SPEC §8's public seed, the fresh one, the fresh one + 1), each at both
group sizes; the public lengths 48 (long) and 16 (short) and lengths stretched the SPEC §10 way
(``chip_run.run_length``; a preset other than nano scales them to its ``max_seq``); the SPEC §3
profiles (``long``: J = 12; ``short``: J = 24 and 5 % request stalls; ``elastic``: the short run at base
latency 48, reported as cycles(elastic) / cycles(short)); then the first short run again in a simulator
started with every flop random (+verilator+rand+reset+2), whose output region must be byte-identical
to the normal run's. The first run (public seed, group 128, 48 positions, long) is the SPEC §8
throughput run. Each run is checked by ``verification.chip_tb.check_run`` (bit-exact against the
fixed-point model, every SPEC §7 check, the decoder order). The summary holds per run: its seed,
cycles, cycles/token, tokens/s at 100 MHz, read/write beats, stall cycles, address errors, timeout,
bit-exact verdict (first divergence if not), min cosine, argmax agreement, every check and the
seconds it took; then the seeds, elasticity, the random-reset comparison, the pooled argmax
agreement, lint counts and the overall verdict.

``--macros`` picks the storage models: ``spec`` (default) the SPEC §5 models of verification/models/;
``physical`` what place and route implements (verification/physical_macros.py: flow/orfs_storage.py's
fakeram45 wrappers, flip-flop arrays and ROM case tables, built in ``<out>/make-sim-chip-physical``). With
``physical`` every run also gets the check ``macro_collisions``: the wrappers drop a read issued in a cycle
that writes the same msh_sram, so any such collision fails the run (the implemented chip would differ from
the simulated one); the summary's ``macros`` holds the mapping and the collisions per storage instance.
Lint always reads the chip with the SPEC models: the wrappers are the flow's, not the emitted RTL.
"""
from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from verification.chip_run import RAND_RESET_SUFFIX, SEED_LIMIT, chip_sources, fresh_seed, run_chip_sim, run_length
from verification.chip_tb import ARGMAX_GATE, DEFAULT_MAX_CYCLES, PUBLIC_SEED, RunSpec, compare_output_regions
from verification.physical_macros import (OUTSIDE_RUNS, PhysicalMacroError, PhysicalMacros, collision_check,
                                          physical_sources, scan_collisions)

SIM_NAME = "make-sim-chip"
# Storage models of a chip simulation: the SPEC §5 models, the physical macros (verification/physical_macros.py),
# or none (the file list defines msh_sram / msh_rom itself, e.g. a hand-written fixture).
MACRO_MODELS = ("spec", "physical", "none")
PROGRESS = re.compile(r"(PROGRESS|CHECK \S+ FAIL|RUN accepted|image and references|simulated \d+ cycles)")
FIRST_LINE_OF_RUN = "image and references"
LONG_LEN, SHORT_LEN = 48, 16            # SPEC §8's public lengths: the long run and the short run


@dataclass(frozen=True)
class Planned:
    """One run of ``PLAN``: which of the three seeds, group size, public length, SPEC §10 stretch, profile."""

    seed: str                # "public", "fresh" or "fresh+1" (``seeds``)
    group: int
    public_len: int
    stretch: float
    profile: str


PLAN = (
    Planned("public", 128, LONG_LEN, 1.0, "long"),      # SPEC §8 throughput run
    Planned("public", 64, LONG_LEN, 4 / 3, "long"),     # group 64 at the longest sequence (64)
    Planned("fresh", 128, SHORT_LEN, 1.0, "short"),     # request stalls; re-run from a random initial state
    Planned("fresh", 128, SHORT_LEN, 1.0, "elastic"),   # the same at base latency 48
    Planned("fresh", 64, SHORT_LEN, 1.5, "short"),      # stretched (24), stalls
    Planned("fresh+1", 128, LONG_LEN, 0.5, "long"),     # stretched below the public length (24)
    Planned("fresh+1", 64, SHORT_LEN, 1.0, "short"),
)


def sim_name(macros: str) -> str:
    """The simulator build folder under ``--out``: one per storage model, so neither rebuilds the other's."""
    return SIM_NAME if macros == "spec" else f"{SIM_NAME}-{macros}"


def seeds(fresh: int) -> dict[str, int]:
    """The three seeds of a run set: SPEC §8's public seed, the fresh one and the next."""
    return {"public": PUBLIC_SEED, "fresh": fresh, "fresh+1": (fresh + 1) % SEED_LIMIT}


def default_runs(config: str, fresh: int, max_cycles: int = DEFAULT_MAX_CYCLES) -> list[RunSpec]:
    """``PLAN`` for preset ``config`` with fresh seed ``fresh``."""
    from nano_k3.config import preset
    cfg, by_role = preset(config), seeds(fresh)
    return [RunSpec(seq_len=run_length(cfg, p.public_len, p.stretch), profile=p.profile, group=p.group,
                    config=config, seed=by_role[p.seed], max_cycles=max_cycles) for p in PLAN]


def preset_of(cfg: dict) -> str:
    """The model preset of an emitted chip (its config.json's params)."""
    name = cfg.get("params", {}).get("name")
    if not name:
        raise SystemExit(f"sim: config.json of {cfg.get('top')!r} names no preset (params.name); run `make rtl` again")
    return name


class _Follow(threading.Thread):
    """Echo the progress lines of a running simulation's log (each run takes minutes), each headed
    "run k of n" (a run's first line is its image's), so make demo's status line counts the runs."""

    def __init__(self, log: Path, tag: str, first: int, total: int):
        super().__init__(daemon=True)
        self.log, self.tag, self.done = log, tag, threading.Event()
        self.run_no, self.total = first, total

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
                        self.run_no += FIRST_LINE_OF_RUN in msg
                        print(f"  [{self.tag}] run {max(self.run_no, 1)} of {self.total}: {msg.strip()}", flush=True)
            if finished:
                return
            self.done.wait(2.0)


def simulate_with_progress(name: str, sources, top: str, runs: list[RunSpec], *, rand_reset: bool, rtl_dir: Path,
                           tag: str, build_dir: Path, count: tuple[int, int]):
    """``count``: (runs before these, runs in all) for the progress lines."""
    log = build_dir / "run.log"
    log.unlink(missing_ok=True)
    follower = _Follow(log, tag, *count)
    follower.start()
    try:
        return run_chip_sim(name, sources, top, runs, rand_reset=rand_reset, rtl_dir=rtl_dir, build_dir=build_dir)
    finally:
        follower.done.set()
        follower.join()


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(summary: dict) -> None:
    head = f"{'run':34} {'seed':>10} {'cycles':>10} {'cyc/tok':>9} {'tok/s':>8} {'reads':>9} {'writes':>7} " \
           f"{'exact':>5} {'min cos':>10} {'agree':>6} {'time s':>7}  verdict"
    print(head)
    print("-" * len(head))
    for r in summary["runs"]:
        print(f"{r['name']:34} {r['seed']:>10} {_fmt(r['cycles'], 'd'):>10} {_fmt(r['cycles_per_token'], '.1f'):>9} "
              f"{_fmt(r['tokens_per_s'], '.0f'):>8} {_fmt(r['read_beats'], 'd'):>9} {_fmt(r['write_beats'], 'd'):>7} "
              f"{'yes' if r['bit_exact'] else 'NO':>5} {_fmt(r['min_cosine'], '.7f'):>10} "
              f"{_fmt(r['argmax_agreement'], '.3f'):>6} {_fmt(r['time_s'], '.1f'):>7}  "
              f"{'PASS' if r['passed'] else 'FAIL'}")
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
    mac = summary["macros"]
    if mac["kind"] == "physical":
        hits = ", ".join(f"{p} {n}" for p, n in mac["collisions"].items()) or "none"
        print(f"physical macros ({', '.join(mac['fakerams'])}): {mac['collisions_total']} read/write collisions: "
              f"{hits}")
    print(f"seeds {summary['seeds']}; replay: {summary['replay']}")


def _same_image(a: RunSpec, b: RunSpec) -> bool:
    return (a.config, a.seed, a.model_config().group_size, a.seq_len) == \
        (b.config, b.seed, b.model_config().group_size, b.seq_len)


def _rand_reset(normal, rr, short: RunSpec) -> dict:
    """The random-initial-state re-run's output region against the normal run's."""
    from nano_k3.image import plan_layout
    name = short.name + RAND_RESET_SUFFIX
    if name not in rr.outputs or short.name not in normal.outputs:
        return {"run": name, "passed": False, "message": "a run produced no output region to compare"}
    c = compare_output_regions(normal.outputs[short.name], rr.outputs[name],
                               plan_layout(short.model_config(), short.seq_len), f"{name} vs {short.name}")
    return {"run": name, "passed": c.passed, "message": c.message}


def _elasticity(runs: list[RunSpec], by_name: dict) -> dict | None:
    """cycles(elastic) / cycles(short) of the first elastic run and the short run of the same image."""
    for e in (r for r in runs if r.profile == "elastic"):
        short = next((r for r in runs if r.profile == "short" and _same_image(r, e)), None)
        if short is not None:
            c24, c48 = by_name[short.name]["cycles"], by_name[e.name]["cycles"]
            return {"short_run": short.name, "elastic_run": e.name, "cycles_base24": c24, "cycles_base48": c48,
                    "ratio": c48 / c24 if c24 and c48 else None}
    return None


def _throughput(runs: list[RunSpec], by_name: dict) -> dict | None:
    """SPEC §8's run: public seed, group 128, the long length, long profile."""
    for r in runs:
        if (r.profile, r.seed, r.model_config().group_size, r.seq_len) == \
                ("long", PUBLIC_SEED, 128, run_length(r.model_config(), LONG_LEN)):
            rep = by_name[r.name]
            if rep["cycles"]:
                return {"run": r.name, "cycles": rep["cycles"], "cycles_per_token": rep["cycles_per_token"],
                        "tokens_per_s": rep["tokens_per_s"]}
    return None


def _storage_sources(rtl: Path, cfg: dict, macros: str, build_dir: Path):
    """(lint sources, simulation sources, PhysicalMacros or None) for the storage models ``macros``."""
    from rtl_gen import read_filelist
    if macros not in MACRO_MODELS:
        raise ValueError(f"macros must be one of {MACRO_MODELS}, got {macros!r}")
    listed = read_filelist(rtl / cfg["files"]["filelist"])
    spec = listed if macros == "none" else chip_sources(listed)
    if macros != "physical":
        return spec, spec, None
    phys = physical_sources(rtl, build_dir / "physical")
    print(f"sim: physical macros: {len(phys.storage.mappings)} storage instances, fakeram45 "
          f"{', '.join(phys.storage.fakerams) or 'none'} ({build_dir / 'physical'})", flush=True)
    return spec, list(phys.sources), phys


def _collisions(phys: PhysicalMacros, log: Path, into: dict[str, Counter], suffix: str = "") -> None:
    """Add the collisions of a simulation log to ``into`` (report name -> instance -> count; report names are
    the markers' run names + ``suffix``)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    for name, counts in scan_collisions(text, phys.chip.top).items():
        into.setdefault(name if name == OUTSIDE_RUNS else name + suffix, Counter()).update(counts)


def _macros_summary(macros: str, phys: PhysicalMacros | None, collisions: dict[str, Counter]) -> dict:
    if phys is None:
        return {"kind": macros}
    per_instance = sum(collisions.values(), Counter())
    return {"kind": macros, **phys.as_dict(), "collisions": dict(sorted(per_instance.items())),
            "collisions_by_run": {r: dict(sorted(c.items())) for r, c in collisions.items()},
            "collisions_total": sum(per_instance.values())}


def run_chip(rtl: Path, out: Path, cfg: dict, *, runs: list[RunSpec] | None = None, seed: int | None = None,
             rand_reset: bool = True, sim_name: str = SIM_NAME, macros: str = "spec") -> dict:
    """Lint and simulate the emitted chip in ``rtl`` (its config.json is ``cfg``); return the summary.

    ``runs`` default to ``default_runs`` with fresh seed ``seed`` (a new one when None); the simulator
    is built in ``out/<sim_name>``. ``macros`` (``MACRO_MODELS``) picks the msh_sram / msh_rom models added
    to the chip's file list (SPEC §1: the list names every file except those two macros)."""
    from verification.lint import MAX_WARNINGS, passes
    from verification.runner import lint

    t0 = time.monotonic()
    seed = fresh_seed() if seed is None else seed
    runs = runs or default_runs(preset_of(cfg), seed)
    top, build_dir = cfg["top"], out / sim_name
    lint_sources, sources, phys = _storage_sources(rtl, cfg, macros, build_dir)
    print(f"sim: seed {seed} (replay with --seed {seed}); run seeds {sorted({r.seed for r in runs})}", flush=True)
    print(f"sim: linting {top} ({len(lint_sources)} files)", flush=True)
    lint_result = lint(lint_sources, top)
    print(f"sim: lint {lint_result.errors} errors, {lint_result.warnings} warnings", flush=True)
    short = next((r for r in runs if r.profile == "short"), None) if rand_reset else None
    names = [r.name for r in runs] + ([short.name + RAND_RESET_SUFFIX] if short else [])
    print(f"sim: {len(names)} runs under Verilator: {', '.join(names)}", flush=True)
    normal = simulate_with_progress(sim_name, sources, top, runs, rand_reset=False, rtl_dir=rtl, tag="sim",
                                    build_dir=build_dir, count=(0, len(names)))
    collisions: dict[str, Counter] = {}
    if phys:
        _collisions(phys, normal.log, collisions)          # before the re-run writes its log there
    reports = [normal.reports.get(r.name) or _missing(r, normal.log) for r in runs]
    times = dict(normal.times)
    rr_summary = None
    if short is not None:
        print(f"sim: random initial state re-run of {short.name}", flush=True)
        rr = simulate_with_progress(sim_name, sources, top, [short], rand_reset=True, rtl_dir=rtl,
                                    tag="randreset", build_dir=build_dir, count=(len(runs), len(names)))
        rr_name = short.name + RAND_RESET_SUFFIX
        if phys:
            _collisions(phys, rr.log, collisions, RAND_RESET_SUFFIX)
        reports.append(rr.reports.get(rr_name) or _missing(short, rr.log, rr_name))
        times.update(rr.times)
        rr_summary = _rand_reset(normal, rr, short)
    for r in reports:
        r["seed"], r["time_s"] = r["run"]["seed"], times.get(r["name"])
        if phys:               # a collision fails the run: the implemented chip differs from the simulated one
            check = collision_check(collisions.get(r["name"], {}))
            r["checks"].append(check)
            r["passed"] = r["passed"] and check["passed"]
    macros_summary = _macros_summary(macros, phys, collisions)

    by_name = {r["name"]: r for r in reports}
    pooled = [by_name[r.name] for r in runs if r.profile in ("long", "short")]
    correct = sum(r["argmax_correct"] or 0 for r in pooled)
    rows = sum(r["rows"] or 0 for r in pooled)
    ag = {"runs": [r["name"] for r in pooled], "correct": correct, "rows": rows,
          "value": correct / rows if rows else None, "gate": ARGMAX_GATE,
          "passed": bool(rows) and correct / rows >= ARGMAX_GATE}
    lint_ok = passes(lint_result)
    passed = (all(r["passed"] for r in reports) and (rr_summary is None or rr_summary["passed"])
              and ag["passed"] and lint_ok and not macros_summary.get("collisions_total"))
    replay = f"python -m verification.sim --rtl {rtl} --out {out}" + (" --macros physical" if phys else "")
    summary = {
        "schema": 2, "block": cfg["block"], "top": top, "params_hash": cfg.get("params_hash"),
        "verdict": "pass" if passed else "fail",
        "tests": len(reports), "failed": sum(not r["passed"] for r in reports),
        "details": [{"name": r["name"], "passed": r["passed"], "seed": r["seed"], "time_s": r["time_s"]}
                    for r in reports],
        "runs": reports, "throughput": _throughput(runs, by_name), "elasticity": _elasticity(runs, by_name),
        "rand_reset": rr_summary, "argmax_agreement_pooled": ag, "macros": macros_summary,
        "lint": {"errors": lint_result.errors, "warnings": lint_result.warnings, "max_warnings": MAX_WARNINGS,
                 "by_rule": lint_result.by_rule},
        "seed": seed, "seeds": sorted({r.seed for r in runs}),
        "replay": f"{replay} --seed {seed}",
        "build_s": round(normal.build_s, 1), "runtime_s": round(time.monotonic() - t0, 1), "log": str(normal.log),
        "command": replay,
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


def parse_run(text: str, config: str, seed: int, max_cycles: int) -> RunSpec:
    """``GROUP,SEQ_LEN,PROFILE[,SEED]`` (the seed defaults to the run set's fresh seed)."""
    fields = text.split(",")
    if len(fields) not in (3, 4):
        raise ValueError(f"--run takes GROUP,SEQ_LEN,PROFILE[,SEED], got {text!r}")
    g, s, p = fields[:3]
    return RunSpec(seq_len=int(s), profile=p, group=int(g), config=config,
                   seed=int(fields[3]) if len(fields) == 4 else seed, max_cycles=max_cycles)


def main(argv: list[str] | None = None) -> int:
    from rtl_gen import read_config
    from verification.sim import write_summary

    ap = argparse.ArgumentParser(prog="python -m verification.chip_sim", description=__doc__.splitlines()[0])
    ap.add_argument("--rtl", type=Path, default=Path("build/rtl"))
    ap.add_argument("--out", type=Path, default=Path("build/sim"))
    ap.add_argument("--seed", type=int, default=None, help="the fresh seed to replay (default: a new one)")
    ap.add_argument("--max-cycles", type=int, default=DEFAULT_MAX_CYCLES)
    ap.add_argument("--run", action="append", default=[], metavar="GROUP,SEQ_LEN,PROFILE[,SEED]",
                    help="a run instead of the default set (repeatable), e.g. 128,48,long")
    ap.add_argument("--no-rand-reset", action="store_true", help="skip the random-initial-state re-run")
    ap.add_argument("--macros", choices=MACRO_MODELS[:2], default="spec",
                    help="storage models: the SPEC models (default) or the physical macros of place and route")
    args = ap.parse_args(argv)
    cfg_path = args.rtl / "config.json"
    if not cfg_path.exists():
        ap.error(f"{cfg_path} not found; run `make rtl BLOCK=chip` first")
    cfg, _ = read_config(cfg_path)
    seed = fresh_seed() if args.seed is None else args.seed
    config = preset_of(cfg)
    try:
        runs = [parse_run(r, config, seed, args.max_cycles) for r in args.run] or \
            default_runs(config, seed, args.max_cycles)
    except ValueError as e:
        ap.error(str(e))
    (args.out / "summary.json").unlink(missing_ok=True)
    try:
        summary = run_chip(args.rtl, args.out, cfg, runs=runs, seed=seed, rand_reset=not args.no_rand_reset,
                           sim_name=sim_name(args.macros), macros=args.macros)
    except PhysicalMacroError as e:
        print(f"sim: cannot simulate with the physical macros: {e}", file=sys.stderr)
        return 1
    path = write_summary(summary, args.out)
    print(f"sim: {summary['top']}: {summary['verdict'].upper()}; summary {path}")
    return 0 if summary["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
