"""One trial of the sweep: a point of the space to its measured numbers, without Ray (``evaluate``).

RTL generation (rtl_gen) -> cycles per token of the SPEC section 8 throughput run from the performance model
(perf/model.py) -> priced area of the preset's design from flow.synth (each engine a part, cached by the hash
of its own Verilog in the shared part cache, so a trial maps only the engines whose RTL changed; macros priced
per SPEC section 5 in synth.json) -> slow-corner setup slack before placement (flow/sta.py, wire-load model).

A trial that breaks a budget (SPEC section 9: 4 mm2 of logic + macros, 4 MiB of macro bits, the 100 MHz clock at
the slow corner) is recorded with every number and the reasons; an illegal point (a ChipParams check, or the
micro-program's lane divisibility) is recorded with the message that rejected it; a tool failure with its
error. Each trial works in ``<out>/trials/<key>/`` and leaves ``result.json`` there, which a later trial of
the same point (a resumed or repeated sweep) reuses instead of running again. The netlists are deleted once
timed (about 0.6 GB for the nano chip); synth.json, sta.json and the trial log stay.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import socket
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from flow.dse.space import DsePreset
from flow.synth.spec import AREA_BUDGET_UM2, SRAM_BUDGET_BITS

RECORD_SCHEMA = "nano-k3/dse-trial/1"
STA_CORNER = "slow"
# What the search algorithm is told for a point with no numbers (illegal, or a tool failed): no speed at twice
# the area budget, so that it is dominated by every measured point. The results file stores None instead.
PENALTY = {"tokens_per_s": 0.0, "area_mm2": 2 * AREA_BUDGET_UM2 / 1e6}
OBJECTIVES = {"tokens_per_s": "max", "area_mm2": "min"}


def trial_key(preset: DsePreset, point: dict) -> str:
    """The trial's name on disk and in the results file: preset, design and point (sorted JSON), hashed."""
    blob = json.dumps({"preset": preset.name, "chip": preset.chip, "design": preset.design, "point": point},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def throughput_run(chip) -> tuple[int, int]:
    """(group, positions) of SPEC section 8's throughput run on this chip's model (verification/chip_sim.py)."""
    from verification.chip_run import run_length
    from verification.chip_sim import PLAN
    run = PLAN[0]
    assert run.seed == "public" and run.profile == "long" and run.stretch == 1.0, run
    return run.group, run_length(chip.model, run.public_len)


def _emit(design: str, folder: Path, chip) -> Path:
    from rtl_gen.emit import emit
    return emit(design, folder, chip).config.parent


def emit_fresh(design: str, folder: Path, chip) -> Path:
    """rtl_gen's ``emit`` in a new process: the private names its Yosys passes give count on within a process
    (a Ray worker runs trial after trial), so only a fresh process emits the same text for the same point."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_emit, design, folder, chip).result()


def _perf(chip) -> dict:
    from perf.model import model_for
    group, seq = throughput_run(chip)
    model = model_for(chip, group)
    return {"group": group, "seq_len": seq, "model_cycles": model.total(seq),
            "cycles_per_token": model.cycles_per_token(seq), "tokens_per_s": model.tokens_per_s(seq)}


def _synth(rtl: Path, work: Path, cache: Path, jobs: int) -> dict:
    from flow.synth import synthesize
    t0 = time.monotonic()
    r = synthesize(rtl, work / "synth", jobs=jobs, part_cache=cache, keep_unused=None)
    a = r["area"]
    return {"logic_um2": a["logic_um2"], "macro_um2": a["macro_um2"], "area_um2": a["total_um2"],
            "area_mm2": a["total_um2"] / 1e6, "macro_bits": r["macros"]["bits"], "cells": r["cells"]["count"],
            "parts": len(r["parts"]), "parts_mapped": sum(not p["reused"] for p in r["parts"]),
            "engines": {e["name"]: e["area_um2"] for e in r["hierarchy"]["engines"]},
            "synth_s": round(time.monotonic() - t0, 1)}


def _sta(work: Path) -> dict:
    from flow.sta import run_sta
    t0 = time.monotonic()
    r = run_sta(work / "synth", work / "sta", [STA_CORNER], jobs=1)
    c = r["corners"][STA_CORNER]
    return {"period_ns": r["period_ns"], "slow_wns_ns": c["wns_ns"], "slow_min_period_ns": c["min_period_ns"],
            "sta_s": round(time.monotonic() - t0, 1)}


def budget_reasons(rec: dict) -> list[str]:
    """What a measured trial breaks of SPEC section 9 (area, macro bits, the clock at the slow corner)."""
    out = []
    if rec["area_um2"] > AREA_BUDGET_UM2:
        out.append(f"area {rec['area_um2'] / 1e6:.3f} mm2 > {AREA_BUDGET_UM2 / 1e6:.1f} mm2")
    if rec["macro_bits"] > SRAM_BUDGET_BITS:
        out.append(f"macro bits {rec['macro_bits']:,} > {SRAM_BUDGET_BITS:,}")
    if rec["slow_wns_ns"] is not None and rec["slow_wns_ns"] < 0:
        out.append(f"slow-corner WNS {rec['slow_wns_ns']} ns at {rec['period_ns']} ns")
    return out


def available_gb() -> float | None:
    """MemAvailable of /proc/meminfo in GB (None where there is none)."""
    try:
        kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                  if ln.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return None
    return kb / 2**20


def wait_for_memory(min_gb: float, poll_s: float = 30.0) -> None:
    """Before a synthesis or STA: waits while the machine has less than ``min_gb`` available (a sweep beside
    other jobs must not push them out of memory; the nano chip's engines need several GB each)."""
    while (avail := available_gb()) is not None and avail < min_gb:
        print(f"[dse] waiting: {avail:.1f} GB available, this trial waits for {min_gb} GB", flush=True)
        time.sleep(poll_s)


def _shrink(work: Path) -> None:
    """Deletes what only STA needed (the netlists, hundreds of MB for nano)."""
    synth = work / "synth"
    for p in [*synth.glob("*.v"), *synth.glob("*.il"), synth / ".design.json", synth / "yosys.log"]:
        p.unlink(missing_ok=True)


def _measure(preset: DsePreset, point: dict, work: Path, cache: Path, jobs: int, rec: dict,
             min_free_gb: float) -> None:
    """Fills ``rec`` stage by stage; a ValueError before synthesis marks the point illegal."""
    stage = "params"
    try:
        chip = preset.params(point)
        stage = "perf model"
        rec |= _perf(chip)
        stage = "rtl_gen"
        t0 = time.monotonic()
        rtl = emit_fresh(preset.design, work / "rtl", chip)
        rec["rtl_s"] = round(time.monotonic() - t0, 1)
    except ValueError as e:
        rec |= {"status": "illegal", "reason": f"{stage}: {e}"}
        return
    wait_for_memory(min_free_gb)
    rec |= _synth(rtl, work, cache, jobs)
    wait_for_memory(min_free_gb)
    rec |= _sta(work)
    _shrink(work)
    reasons = budget_reasons(rec)
    rec |= {"status": "ok", "within_budget": not reasons, "reason": "; ".join(reasons) or None}


@contextlib.contextmanager
def _logged(path: Path):
    """Everything this process and its children (Yosys, OpenSTA) print goes to ``path`` meanwhile."""
    import sys
    with open(path, "w") as log:
        sys.stdout.flush(), sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


def evaluate(preset: DsePreset, point: dict, out: Path, cache: Path, jobs: int = 1, min_free_gb: float = 0.0) -> dict:
    """The record of one trial (module docstring); never raises for a bad point or a failing tool."""
    key = trial_key(preset, point)
    work = Path(out).resolve() / "trials" / key
    done = work / "result.json"
    if done.is_file():
        rec = json.loads(done.read_text())
        if rec.get("schema") == RECORD_SCHEMA and rec.get("status") in ("ok", "illegal"):
            return rec | {"reused": True}
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    rec = {"schema": RECORD_SCHEMA, "key": key, "preset": preset.name, "chip": preset.chip, "design": preset.design,
           "point": point, "host": socket.gethostname(), "started_unix": round(time.time(), 1), "reused": False,
           "within_budget": False}
    with _logged(work / "trial.log"):
        try:
            _measure(preset, point, work, Path(cache).resolve(), jobs, rec, min_free_gb)
        except Exception as e:       # a tool failed: recorded with its error, the sweep goes on
            traceback.print_exc()
            rec |= {"status": "failed", "reason": f"{type(e).__name__}: {e}"[:2000]}
    rec |= {"wall_s": round(time.monotonic() - t0, 1), "log": str(work / "trial.log")}
    done.write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def objectives(rec: dict) -> dict[str, float]:
    """What the search algorithm optimises (``OBJECTIVES``); ``PENALTY`` for a point without numbers."""
    if rec.get("status") != "ok":
        return dict(PENALTY)
    return {"tokens_per_s": rec["tokens_per_s"], "area_mm2": rec["area_mm2"]}
