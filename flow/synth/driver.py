"""``synthesize``: the RTL folder to a Nangate45 netlist and synth.json, part by part, reusing what is cached."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

from flow.cli import job_count, publish, report_stage
from flow.synth import worker
from flow.synth.cache import KEEP_UNUSED, PartCache, part_digests, pyosys_version
from flow.synth.inputs import RtlInput, abc_period_ps, load_rtl
from flow.synth.partition import partition, whole
from flow.synth.results import RESULT_SCHEMA, build_result, merge_parts, summary_text
from flow.synth.runner import REPO, run_parts, run_plan
from flow.synth.sources import part_source, read_source
from flow.synth.spec import CORNER, MACRO_STUBS, SynthError, progress
from pdk_config import PdkError, find_pdk
from pdk_config.nangate45 import DONT_USE


def _inputs_key(job: dict, rtl: RtlInput, liberty: Path) -> str:
    """A digest of everything the whole result depends on: the Verilog, the liberty, the options, the worker
    (Yosys and ABC scripts), the Yosys (pyosys) version and the result schema."""
    h = hashlib.sha256(json.dumps([RESULT_SCHEMA, {k: v for k, v in job.items() if k != "out"}, MACRO_STUBS,
                                   pyosys_version()], sort_keys=True).encode())
    for f in (*rtl.files, liberty, worker.FA_MAP, Path(worker.__file__)):
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _up_to_date(out: Path, key: str) -> dict | None:
    """The previous result in ``out`` when it was made from the same inputs and its files are all there."""
    try:
        prev = json.loads((out / "synth.json").read_text())
    except (OSError, ValueError):
        return None
    if prev.get("inputs_sha256") != key:
        return None
    if not all((out / f).is_file() for f in prev.get("files", {}).values() if isinstance(f, str)):
        return None
    return prev


def _reuse(out: Path, done: dict, rtl: RtlInput) -> dict:
    progress(f"{rtl.top}: up to date ({out / 'synth.json'} has the same inputs: RTL, liberty, options, "
             f"scripts); remove {out} to synthesize again")
    if done["rtl"]["config_sha256"] != rtl.config_sha256:
        # the same Verilog under a config.json that changed in what the netlist does not depend on (a
        # recorded parameter): the netlist stands, the record names the config it now belongs to
        done["rtl"] |= {"dir": str(rtl.rtl_dir), "config_sha256": rtl.config_sha256, "config": rtl.config}
        tmp = out / "synth.json.tmp"
        tmp.write_text(json.dumps(done, indent=1) + "\n")
        tmp.replace(out / "synth.json")
    return done


def part_cache_dir(synth_dir: Path, recorded: str) -> Path:
    """The part cache a synth.json names (``part_cache``): relative to the synthesis folder, or absolute; records
    written before it was relative named it from the working folder of the run, and then the cache is flow.synth's
    default one, beside the synthesis folder."""
    path = Path(recorded)
    if path.is_absolute():
        return path
    here = (Path(synth_dir) / path).resolve()
    return here if here.is_dir() else Path(synth_dir).resolve().with_name(Path(synth_dir).name + "_cache")


def synthesize(rtl_dir: Path, out: Path, top: str | None = None, flatten: bool = False, full_adders: bool = False,
               jobs: int | None = None, cache: Path = REPO / "build" / "pdk_cache",
               part_cache: Path | None = None, keep_unused: int | None = KEEP_UNUSED) -> dict:
    """Synthesises the RTL folder ``rtl_dir`` into ``out`` (default part cache: ``<out>_cache`` beside it);
    ``keep_unused``: cache entries this run did not use that survive it (``PartCache.prune``)."""
    try:
        jobs = job_count(jobs, "Yosys processes")
    except ValueError as e:
        raise SynthError(str(e)) from None
    try:
        pdk = find_pdk()
    except PdkError as e:
        raise SynthError(str(e)) from None
    rtl = load_rtl(Path(rtl_dir), top)
    liberty = pdk.plain_liberty(CORNER, cache).resolve()
    out = Path(out)
    stage = out.with_name(out.name + ".tmp")
    job = {"top": rtl.top, "files": [str(f) for f in rtl.files], "include_dirs": [str(d) for d in rtl.include_dirs],
           "defines": list(rtl.defines), "liberty": str(liberty), "dont_use": list(DONT_USE),
           "flatten": flatten, "full_adders": full_adders, "abc_period_ps": abc_period_ps(rtl),
           "out": str(stage.resolve())}
    key = _inputs_key(job, rtl, liberty)
    done = _up_to_date(out, key)
    if done is not None:
        return _reuse(out, done, rtl)
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    (stage / "macro_stubs.v").write_text(MACRO_STUBS)
    (stage / "abc.script").write_text(worker.ABC_SCRIPT)
    (stage / "abc.constr").write_text(worker.ABC_CONSTR)
    t0 = time.monotonic()
    store = PartCache(Path(part_cache) if part_cache else out.with_name(out.name + "_cache"))
    source = read_source(list(rtl.files), list(rtl.include_dirs))
    if source.modules is None:
        progress(f"{rtl.top}: the source is not split by module ({source.why}); every part reads all files")
    plan = run_plan(job, stage, store, source)
    parts = whole(plan, rtl.top) if flatten else partition(plan, rtl.top)
    texts = [part_source(source, p, plan) for p in parts]
    digests = part_digests(job, parts, texts, source)
    progress(f"{rtl.top}: {len(rtl.files)} file(s) from {rtl.filelist}; {len(parts)} part(s), "
             f"{min(jobs, len(parts))} Yosys process(es) at a time; part cache {store.root}; log: {out / 'yosys.log'}")
    runs = run_parts(job, parts, texts, digests, stage, jobs, store)
    chip_areas = merge_parts(stage, rtl.top, parts, [r.entry for r in runs])
    runtime = time.monotonic() - t0
    result = build_result(rtl, stage, liberty, pdk, flatten, full_adders, runtime, chip_areas)
    result["parts"] = [{"top": p.top, "black_boxes": list(p.blackbox), "size_estimate": p.weight,
                        "reused": r.reused, "digest": r.digest, "reads": "all files" if t is None else "own modules",
                        "runtime_s": round(r.runtime_s, 2), "mapped_in_s": round(r.mapped_in_s, 2)}
                       for p, r, t in zip(parts, runs, texts)]
    # relative to the synthesis folder (part_cache_dir), so it resolves whatever the reader's working folder
    result["part_cache"] = os.path.relpath(store.root.resolve(), out.resolve())
    result["options"]["jobs"] = jobs
    result["inputs_sha256"] = key
    (stage / "synth.json").write_text(json.dumps(result, indent=1) + "\n")
    (stage / "synth.txt").write_text(summary_text(result))
    (stage / "design.json").rename(stage / ".design.json")     # internal hand-over file, kept for debugging
    for d in ("parts", "plan"):
        shutil.rmtree(stage / d, ignore_errors=True)
    publish(stage, out)
    store.prune(set(digests), keep_unused)
    return result


def main(argv: list[str] | None = None) -> int:
    import flow.synth
    ap = argparse.ArgumentParser(prog="python -m flow.synth", description=flow.synth.__doc__.split("\n\n")[0])
    ap.add_argument("--rtl", type=Path, default=Path("build/rtl"), help="folder with config.json + file list")
    ap.add_argument("--out", type=Path, default=Path("build/synth"))
    ap.add_argument("--cache", type=Path, default=None,
                    help="folder of the per-part cache (default: <out>_cache beside --out, e.g. build/synth_cache)")
    ap.add_argument("--top", help="top module (default: 'top' of config.json)")
    ap.add_argument("--flatten", action="store_true", help="map the design flat (no per-module breakdown)")
    ap.add_argument("--full-adders", action="store_true",
                    help="adders of multipliers and sums on FA_X1/HA_X1: ~30%% fewer cells, ~9%% more area, "
                         "high-fanout nets ABC does not buffer (see flow/synth/worker.py FULL_ADDER_STEPS)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="Yosys processes at a time, each mapping a part of the design (default: the CPUs this "
                         "process may use). The chip needs about 17 GB in one process, less per part")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)      # the Yosys children (flow/synth/runner.py)
    ap.add_argument("--plan", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker or args.plan:
        return worker.main("part", args.worker) if args.worker else worker.main("plan", args.plan)
    return report_stage("flow.synth", SynthError,
                        lambda: synthesize(args.rtl, args.out, args.top, args.flatten, args.full_adders, args.jobs,
                                           part_cache=args.cache),
                        summary_text, lambda r: [args.out / "synth.json", args.out / r["files"]["netlist"]])
