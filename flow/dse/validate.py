"""``python -m flow.dse validate --top K``: the K fastest points of the front measured for real.

Per point: the chip's RTL under cocotb + Verilator on SPEC section 8's throughput run (the long profile, the
public seed; verification/chip_run.py): bit-exact against the fixed-point model and its cycles within
``verification.bench.MODEL_TOLERANCE`` (2 %) of the performance model's; and the preset's design synthesised
as one module (flow.synth ``--flatten``: optimised across engine boundaries), its priced area within
``AREA_TOLERANCE`` of the sweep's engine-by-engine sum. Both sides go into the results file's
``dse_validations`` and front.md. The nano chip flat took 33 minutes and 7.4 GB (peak resident) in one Yosys
process per point here.
"""
from __future__ import annotations

import time
from pathlib import Path

from flow.dse.front import changes, pareto
from flow.dse.space import DsePreset
from flow.dse.store import Results
from flow.dse.sweep import RESULTS_FILE, DseError, progress
from flow.dse.trial import _logged

AREA_TOLERANCE = 0.05        # issue 20: a full synthesis within 5 % of the sum of the engines


def _simulate(chip, preset: DsePreset, rec: dict, work: Path) -> dict:
    from rtl_gen.emit import emit, read_filelist
    from verification.chip_run import chip_sources, run_chip_sim
    from verification.chip_tb import PUBLIC_SEED, RunSpec
    t0 = time.monotonic()
    emitted = emit("chip", work / "rtl_chip", chip)
    run = RunSpec(seq_len=rec["seq_len"], profile="long", group=rec["group_size"], config=preset.chip,
                  seed=PUBLIC_SEED)
    res = run_chip_sim("dse-validate", chip_sources(read_filelist(emitted.filelist)), emitted.top, [run],
                       rtl_dir=emitted.config.parent, build_dir=work / "sim")
    report = res.reports.get(run.name) or {}
    cycles = report.get("cycles")
    return {"sim_run": run.name, "bit_exact": bool(report.get("bit_exact")), "sim_cycles": cycles,
            "cycles_error": None if not cycles else (rec["model_cycles"] - cycles) / cycles,
            "sim_s": round(time.monotonic() - t0, 1), "sim_log": str(res.log)}


def _full_synth(chip, preset: DsePreset, rec: dict, work: Path, jobs: int) -> dict:
    from flow.synth import synthesize
    from rtl_gen.emit import emit
    t0 = time.monotonic()
    rtl = emit(preset.design, work / "rtl_design", chip).config.parent
    r = synthesize(rtl, work / "synth_full", flatten=True, jobs=jobs, part_cache=work / "synth_full_cache")
    full = r["area"]["total_um2"]
    return {"parts_area_um2": rec["area_um2"], "full_area_um2": full, "area_error": (rec["area_um2"] - full) / full,
            "synth_s": round(time.monotonic() - t0, 1)}


def validate_point(preset: DsePreset, rec: dict, out: Path, jobs: int) -> dict:
    from verification.bench import MODEL_TOLERANCE
    chip = preset.params(rec["point"])
    work = Path(out).resolve() / "validate" / rec["key"]
    work.mkdir(parents=True, exist_ok=True)
    v = {"key": rec["key"], "preset": preset.name, "point": rec["point"], "model_cycles": rec["model_cycles"]}
    with _logged(work / "validate.log"):
        v |= _simulate(chip, preset, rec, work)
        v |= _full_synth(chip, preset, rec, work, jobs)
    reasons = []
    if not v["bit_exact"]:
        reasons.append(f"not bit-exact (see {v['sim_log']})")
    if v["cycles_error"] is None or abs(v["cycles_error"]) > MODEL_TOLERANCE:
        reasons.append(f"cycles: model {v['model_cycles']} vs RTL {v['sim_cycles']} (tolerance {MODEL_TOLERANCE:.0%})")
    if abs(v["area_error"]) > AREA_TOLERANCE:
        reasons.append(f"area: engines' sum {v['parts_area_um2']:,.0f} vs full {v['full_area_um2']:,.0f} um2 "
                       f"(tolerance {AREA_TOLERANCE:.0%})")
    return v | {"passed": not reasons, "reason": "; ".join(reasons) or None}


def validate(preset: DsePreset, out: Path, top: int, jobs: int = 1) -> list[dict]:
    """Validates the ``top`` fastest points of the front and records each in the results file."""
    if not isinstance(top, int) or top < 1:
        raise DseError(f"--top must be a positive integer, got {top!r}")
    results = Results(Path(out) / RESULTS_FILE)
    front = sorted(pareto(results.trials(preset.name)), key=lambda r: -r["tokens_per_s"])
    if not front:
        raise DseError(f"{results.path} has no measured trial of preset {preset.name!r} within the budgets: "
                       f"run `python -m flow.dse --preset {preset.name} --trials N --out {out}` first")
    done, before = [], {v["key"]: v for v in results.validations(preset.name)}
    for k, rec in enumerate(front[:top], 1):
        if rec["key"] in before:               # an interrupted validation goes on where it stopped
            progress(f"{k}/{min(top, len(front))}: trial {rec['number']} was validated before "
                     f"({'passed' if before[rec['key']]['passed'] else 'failed'}); delete its row to measure it again")
            done.append(before[rec["key"]])
            continue
        progress(f"validating {k}/{min(top, len(front))}: trial {rec['number']} [{changes(rec['point'], preset)}]")
        v = validate_point(preset, rec, out, jobs)
        results.add_validation(v)
        err = "-" if v["cycles_error"] is None else f"{v['cycles_error']:+.2%}"
        progress(f"  bit-exact {v['bit_exact']}, cycles model {v['model_cycles']:,} vs RTL {v['sim_cycles']} "
                 f"({err}), area engines {v['parts_area_um2'] / 1e6:.4f} vs full "
                 f"{v['full_area_um2'] / 1e6:.4f} mm2 ({v['area_error']:+.2%}): "
                 f"{'passed' if v['passed'] else 'FAILED: ' + v['reason']}")
        done.append(v)
    return done
