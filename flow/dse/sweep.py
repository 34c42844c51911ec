"""The sweep on Ray Tune: a search algorithm proposes points, Ray runs ``flow.dse.trial.evaluate`` on them,
the driver records every trial in the results file as it finishes.

Search: Optuna's TPE sampler (multi-objective: tokens/s up, priced mm2 down) through Ray Tune's
``OptunaSearch``. Its study lives in ``<out>/search.sqlite`` (Optuna's own tables), so a resumed sweep's sampler
knows every point told to it before; the sweep's first point is the preset's current chip. Ray: a local
instance with ``cpus`` CPUs and a small object store unless ``address`` names a running cluster (every node
must run this checkout at the same path with its .venv: ``.venv/bin/ray start --address ...``). A trial asks
for one CPU, so a machine runs as many trials at a time as the CPUs it gives Ray.
"""
from __future__ import annotations

import json
import math
import socket
import sys
import time
from pathlib import Path

from flow.dse.front import changes
from flow.dse.space import DsePreset, dse_preset
from flow.dse.store import Results
from flow.dse.trial import OBJECTIVES, evaluate, objectives, trial_key

RESULTS_FILE = "results.sqlite"
SEARCH_FILE = "search.sqlite"
STALL_ROUNDS = 5          # rounds in a row without a new point before the sweep gives up


class DseError(RuntimeError):
    """The sweep cannot start or run; the message says why and what to do."""


def progress(msg: str) -> None:
    print(f"[dse] {msg}", file=sys.stderr, flush=True)


def _metric(name: str) -> str:
    return f"objective_{name}"


def trainable(preset_name: str, out: str, cache: str, synth_jobs: int, min_free_gb: float):
    """The function Ray runs per trial (module-level names only, so a worker on another node imports it)."""
    def run(config: dict) -> None:
        import ray
        from ray import tune
        rec = evaluate(dse_preset(preset_name), dict(config), Path(out), Path(cache), synth_jobs, min_free_gb)
        rec["ray_node"] = ray.get_runtime_context().get_node_id()
        tune.report({**{_metric(k): v for k, v in objectives(rec).items()}, "record": json.dumps(rec)})
    return run


def _line(rec: dict, number: int, total: int, preset: DsePreset) -> str:
    head = f"trial {number}/{total} [{changes(rec['point'], preset)}]"
    if rec["status"] != "ok":
        return f"{head}: {rec['status']}: {rec['reason']}"
    return (f"{head}: {rec['tokens_per_s']:,.0f} tok/s, {rec['area_mm2']:.3f} mm2, slow WNS {rec['slow_wns_ns']} ns, "
            f"{rec['parts_mapped']}/{rec['parts']} parts mapped, {rec['wall_s']:.0f} s"
            + (" (reused)" if rec.get("reused") else "") + ("" if rec["within_budget"] else f"; over: {rec['reason']}"))


def _callback(results: Results, preset: DsePreset, total: int):
    from ray.tune import Callback

    class Record(Callback):
        """Writes each finished trial into the results file and prints one line for it."""

        def on_trial_start(self, iteration, trials, trial, **info):
            point = {k: trial.config[k] for k in preset.space()}
            progress(f"trial started [{changes(point, preset)}] ({len(trials)} so far this round)")

        def on_trial_result(self, iteration, trials, trial, result, **info):
            rec = json.loads(result["record"])
            progress(_line(rec, results.add_trial(rec), total, preset))

        def on_trial_error(self, iteration, trials, trial, **info):
            point = {k: trial.config[k] for k in preset.space()}
            rec = {"key": trial_key(preset, point), "preset": preset.name, "chip": preset.chip,
                   "design": preset.design, "point": point, "status": "failed", "within_budget": False,
                   "reason": f"Ray trial error: {trial.error_file}"}
            progress(_line(rec, results.add_trial(rec), total, preset))

    return Record()


def _reachable(address: str) -> None:
    """A ``host:port`` address must accept a connection within seconds (ray.init retries for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return                                  # "auto" or a ray:// URL: left to Ray
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as e:
        raise DseError(f"cannot join a Ray cluster at {address!r}: {e}. Start one with `.venv/bin/ray start --head "
                       "--port 6379` (and --address 127.0.0.1:6379), or leave out --address for a local Ray") from None


def _worker_env() -> dict:
    """What a trial's process needs of this one's environment on any node: the PDK folder, absolute (the trial
    runs in Ray's working directory, not this one)."""
    from pdk_config import pdk_from_env
    pdk = pdk_from_env()
    return {"env_vars": {"NANGATE45_PDK": str(pdk)}} if pdk else {}


def _ray_init(address: str | None, cpus: int, object_store_mb: int) -> None:
    import ray
    if address:
        progress(f"joining the Ray cluster at {address}")
        _reachable(address)
        try:
            ray.init(address=address, log_to_driver=False, runtime_env=_worker_env())
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise DseError(f"cannot join a Ray cluster at {address!r}: {e}. A cluster with token authentication (a "
                           "head started where ~/.ray/auth_token exists, or with RAY_AUTH_MODE=token) needs "
                           "RAY_AUTH_MODE=token here too and its token in ~/.ray/auth_token or RAY_AUTH_TOKEN; "
                           "without --address the sweep starts a local Ray") from None
    else:
        progress(f"starting a local Ray: {cpus} CPU(s), {object_store_mb} MB object store")
        # "local": a new instance even where /tmp/ray names a cluster started before (ray.init would join it)
        ray.init(address="local", num_cpus=cpus, object_store_memory=object_store_mb * 2**20, include_dashboard=False,
                 log_to_driver=False, runtime_env=_worker_env())
    progress(f"Ray resources: {ray.cluster_resources()}")


def _searcher(preset: DsePreset, out: Path, seed: int, measured: list[dict]):
    import optuna
    from ray.tune.search.optuna import OptunaSearch
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    current = preset.current()
    return OptunaSearch(metric=[_metric(k) for k in OBJECTIVES], mode=list(OBJECTIVES.values()),
                        sampler=optuna.samplers.TPESampler(seed=seed),
                        storage=optuna.storages.RDBStorage(f"sqlite:///{out / SEARCH_FILE}"),
                        study_name=f"dse-{preset.name}",
                        points_to_evaluate=None if any(r["point"] == current for r in measured) else [current])


def space_size(preset: DsePreset) -> int:
    return math.prod(len(v) for v in preset.space().values())


def _round(preset: DsePreset, total: int, n: int, out: Path, cache: Path, synth_jobs: int, min_free_gb: float,
           seed: int, results: Results) -> None:
    """One Tuner run of ``n`` trials."""
    from ray import tune
    run = tune.with_resources(trainable(preset.name, str(out), str(cache), synth_jobs, min_free_gb), {"cpu": 1})
    tuner = tune.Tuner(
        run, param_space={k: tune.choice(list(v)) for k, v in preset.space().items()},
        tune_config=tune.TuneConfig(search_alg=_searcher(preset, out, seed, results.trials(preset.name)),
                                    num_samples=n),
        run_config=tune.RunConfig(name=f"{preset.name}-{time.strftime('%Y%m%d-%H%M%S')}",
                                  storage_path=str(out / "ray"), verbose=0,
                                  callbacks=[_callback(results, preset, total)]))
    tuner.fit()


def run_sweep(preset: DsePreset, trials: int, out: Path, cache: Path, address: str | None = None,
              resume: bool = False, cpus: int = 1, object_store_mb: int = 300, synth_jobs: int = 1,
              seed: int = 0, min_free_gb: float = 0.0) -> Results:
    """Runs the sweep until the results file holds ``trials`` trials of ``preset``."""
    if not isinstance(trials, int) or not 1 <= trials <= space_size(preset):
        raise DseError(f"--trials must be an integer in 1..{space_size(preset)} (the points of preset "
                       f"{preset.name!r}'s space {preset.space()}), got {trials!r}")
    out, cache = Path(out).resolve(), Path(cache).resolve()
    results = Results(out / RESULTS_FILE)
    rows = results.trials(preset.name)
    if rows and not resume:
        raise DseError(f"{results.path} already holds {len(rows)} trial(s) of preset {preset.name!r}: pass "
                       f"--resume to go on until it holds --trials, or another --out")
    todo = trials - len(rows)
    if todo <= 0:
        progress(f"{results.path} already holds {len(rows)} trial(s) of {preset.name!r} (asked for {trials})")
        return results
    progress(f"preset {preset.name!r} ({preset.doc}); space {preset.space()}; {todo} trial(s) to run, "
             f"{len(rows)} recorded; part cache {cache}; results {results.path}")
    _ray_init(address, cpus, object_store_mb)
    t0 = time.monotonic()
    try:
        # the sampler may propose a point measured before (the trial reuses its result): go on until the file
        # holds ``trials`` different points, or STALL_ROUNDS rounds in a row add none
        stalled = 0
        while (have := results.count(preset.name)) < trials and stalled < STALL_ROUNDS:
            _round(preset, trials, trials - have, out, cache, synth_jobs, min_free_gb, seed + have + 1000 * stalled,
                   results)
            stalled = stalled + 1 if results.count(preset.name) == have else 0
        if stalled:
            progress(f"{STALL_ROUNDS} rounds proposed only points measured before; stopping at {have} trial(s)")
    finally:
        import ray
        ray.shutdown()
    progress(f"{todo} trial(s) in {time.monotonic() - t0:.0f} s; {results.count(preset.name)} recorded")
    return results
