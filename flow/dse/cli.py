"""``python -m flow.dse``: the sweep, its validation and its outputs (see flow/dse/__init__.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flow.dse.front import write_outputs
from flow.dse.space import PRESETS, dse_preset
from flow.dse.store import Results
from flow.dse.sweep import RESULTS_FILE, DseError, progress, run_sweep

COMMANDS = ("sweep", "validate", "report", "reuse")


def _common(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--preset", default="nano", help=f"DSE preset, one of: {', '.join(sorted(PRESETS))}")
    ap.add_argument("--out", type=Path, default=Path("build/dse"), help="results file, plot and trials go here")


def parser(command: str) -> argparse.ArgumentParser:
    import flow.dse
    ap = argparse.ArgumentParser(prog=f"python -m flow.dse{'' if command == 'sweep' else ' ' + command}",
                                 description=flow.dse.__doc__.split("\n\n")[0])
    _common(ap)
    if command == "sweep":
        ap.add_argument("--trials", type=int, required=True, help="trials the results file holds at the end")
        ap.add_argument("--address", help="join the running Ray cluster at this address (default: a local Ray)")
        ap.add_argument("--resume", action="store_true", help="go on with the trials already in the results file")
        ap.add_argument("--cache", type=Path, default=Path("build/synth_cache"),
                        help="synthesis part cache, shared with `make synth` (default build/synth_cache)")
        ap.add_argument("--cpus", type=int, default=1, help="CPUs of the local Ray = trials at a time (default 1)")
        ap.add_argument("--object-store-mb", type=int, default=300, help="local Ray's object store (default 300)")
        ap.add_argument("--synth-jobs", type=int, default=1, help="Yosys processes per trial (default 1)")
        ap.add_argument("--seed", type=int, default=0, help="the search algorithm's seed (default 0)")
        ap.add_argument("--min-free-gb", type=float, default=6.0,
                        help="a trial waits before synthesis and STA while less memory is available (default 6)")
    elif command == "reuse":
        ap.add_argument("--set", nargs="+", required=True, metavar="FIELD=VALUE",
                        help="the point's changes to the current chip, e.g. norm_lanes=4")
    elif command == "validate":
        ap.add_argument("--top", type=int, default=3, help="validate the K fastest front points (default 3)")
        ap.add_argument("--synth-jobs", type=int, default=1, help="Yosys processes of the full synthesis")
    return ap


def outputs(preset_name: str, out: Path, command: str) -> list[Path]:
    preset = dse_preset(preset_name)
    results = Results(out / RESULTS_FILE)
    paths = write_outputs(results.trials(preset.name), preset, results.validations(preset.name), out, command)
    for p in paths:
        progress(f"wrote {p}")
    return paths


def _changes(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not value.lstrip("-").isdigit():
            raise DseError(f"--set takes FIELD=INTEGER, e.g. norm_lanes=4; got {item!r}")
        out[name] = int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv.pop(0) if argv and argv[0] in COMMANDS else "sweep"
    args = parser(command).parse_args(argv)
    try:
        preset = dse_preset(args.preset)
        if command == "sweep":
            for name in ("cpus", "object_store_mb", "synth_jobs"):
                if getattr(args, name) < 1:
                    raise DseError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
            run_sweep(preset, args.trials, args.out, args.cache, args.address, args.resume, args.cpus,
                      args.object_store_mb, args.synth_jobs, args.seed, args.min_free_gb)
        elif command == "validate":
            from flow.dse.validate import validate
            validate(preset, args.out, args.top, args.synth_jobs)
        elif command == "reuse":
            from flow.dse.reuse import report
            report(preset, _changes(args.set), args.out)
            return 0
        outputs(preset.name, args.out, f"python -m flow.dse --preset {preset.name} --out {args.out}")
    except (DseError, ValueError) as e:
        print(f"flow.dse: {e}", file=sys.stderr)
        return 2
    return 0
