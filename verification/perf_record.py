"""Recorded phase-monitor runs of the chip, keyed by the emitted RTL, for checks of the performance model.

    recorded_runs(rtl_dir, runs) -> {run name: {"report": chip_tb report, "phases": PhaseMonitor.result()}}

A record is what ``verification.bench.simulate`` measured for one ``RunSpec`` on one RTL: the run's
report (cycles, every SPEC §7 check) and the phase monitor's per-op cycle counts. Records live in
``build/perf_record/<digest>/``, where ``rtl_digest`` hashes every file the RTL's file list names and
every ROM file: a changed RTL has a new digest, finds no record and is simulated again (one Verilator
build for all its missing runs); an unchanged RTL reads its records in milliseconds. Only complete,
passing runs are recorded.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from verification.chip_tb import RunSpec
from flow.toolchain import named_files_digest, work_root

RECORD_ROOT = work_root() / "perf_record"
RECORD_FORMAT = 1


def rtl_digest(rtl_dir: Path) -> str:
    """SHA-256 over the names and contents of the file list's sources and the ROM files of ``rtl_dir``."""
    from hw.roms import ROM_SUBDIR
    from rtl_gen import read_config, read_filelist

    rtl_dir = Path(rtl_dir)
    cfg, _ = read_config(rtl_dir / "config.json")
    files = read_filelist(rtl_dir / cfg["files"]["filelist"]) + sorted((rtl_dir / ROM_SUBDIR).glob("*"))
    return named_files_digest(files)


def record_path(root: Path, digest: str, run: RunSpec) -> Path:
    return Path(root) / digest[:16] / f"{run.name}-seed{run.seed}.json"


def _read(path: Path, run: RunSpec, digest: str) -> dict | None:
    if not path.exists():
        return None
    d = json.loads(path.read_text())
    same = d.get("format") == RECORD_FORMAT and d.get("digest") == digest and d.get("run") == run.to_dict()
    return d if same else None


def recorded_runs(rtl_dir: Path, runs: Sequence[RunSpec], root: Path = RECORD_ROOT) -> dict[str, dict]:
    """Each run's record for the RTL in ``rtl_dir``, simulating (and recording) the runs that have none.
    Raises when a simulated run fails or its monitor is incomplete (such a run is never recorded)."""
    from verification.bench import simulate

    digest = rtl_digest(rtl_dir)
    got = {r.name: _read(record_path(root, digest, r), r, digest) for r in runs}
    missing = [r for r in runs if got[r.name] is None]
    if missing:
        print(f"perf_record: simulating {[r.name for r in missing]} for RTL {digest[:16]} (no record yet)")
        sim = simulate(Path(rtl_dir), missing, Path(root) / digest[:16] / "sim")
        for run in missing:
            rec = sim.runs[run.name]
            if not (rec["report"] and rec["report"]["passed"] and rec["phases"] and rec["phases"]["complete"]):
                raise RuntimeError(f"{run.name}: the recording run failed or is incomplete; see {sim.log}")
            got[run.name] = {"format": RECORD_FORMAT, "digest": digest, "run": run.to_dict(), **rec}
            path = record_path(root, digest, run)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(got[run.name]))
    return got
