"""Read the metrics an ORFS run wrote and keep the few numbers the report needs.

ORFS's tools write their metrics as flat JSON, one key per number named ``stage__category__metric``
(``finish__timing__setup__ws``, ``detailedroute__route__wirelength``). They are found in, by preference:

1. ``reports/<platform>/<design>/<variant>/metadata.json`` (``make metadata-generate``; older ORFS:
   ``metadata-<variant>.json``), every stage's metrics in one file;
2. ``logs/<platform>/<design>/<variant>/*.json``, the file each stage writes (``2_1_floorplan.json``
   ... ``6_report.json``), merged in name order (later stages win on a shared key).

Units are ORFS's for nangate45: um, um2, ns, W. A key missing from the run is reported as ``None``
and listed under ``missing``; nothing is guessed.
"""
from __future__ import annotations

import json
from pathlib import Path


class MetricsError(RuntimeError):
    """No metrics file, or one that is not ORFS's flat JSON."""


# (section, name) -> ORFS key
SCALARS = {
    ("area", "die_um2"): "finish__design__die__area",
    ("area", "core_um2"): "finish__design__core__area",
    ("area", "instance_um2"): "finish__design__instance__area",
    ("area", "stdcell_um2"): "finish__design__instance__area__stdcell",
    ("area", "macros_um2"): "finish__design__instance__area__macros",
    ("area", "utilization"): "finish__design__instance__utilization",
    ("area", "stdcell_utilization"): "finish__design__instance__utilization__stdcell",
    ("area", "instance_count"): "finish__design__instance__count",
    ("area", "macro_count"): "finish__design__instance__count__macros",
    ("route", "wirelength_um"): "detailedroute__route__wirelength",
    ("route", "drc_errors"): "detailedroute__route__drc_errors",
    ("route", "vias"): "detailedroute__route__vias",
    ("route", "antenna_violating_nets"): "detailedroute__antenna__violating__nets",
    ("power", "total_w"): "finish__power__total",
    ("clock", "fmax_hz"): "finish__timing__fmax",
    ("clock", "skew_setup_ns"): "finish__clock__skew__setup",
}
# The stages whose timing is kept, in flow order, and the timing keys of each.
STAGES = ("floorplan", "globalplace", "detailedplace", "cts", "globalroute", "finish")
TIMING = {"setup_ws": "timing__setup__ws", "setup_tns": "timing__setup__tns",
          "hold_ws": "timing__hold__ws", "hold_tns": "timing__hold__tns"}


def _number(v):
    """ORFS writes "N/A" / "ERR" for a value it could not extract; those count as missing."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return v
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _lookup(metrics: dict, key: str):
    """The value of ``key``; for a per-clock key (``finish__timing__fmax__clock:clk``) the first clock's."""
    if key in metrics:
        return _number(metrics[key])
    for k in sorted(metrics):
        if k.startswith(key + "__clock:"):
            return _number(metrics[k])
    return None


def find_sources(work: Path, platform: str, design: str, variant: str = "base") -> list[Path]:
    reports = work / "reports" / platform / design / variant
    for name in ("metadata.json", f"metadata-{variant}.json"):
        if (reports / name).is_file():
            return [reports / name]
    logs = work / "logs" / platform / design / variant
    found = sorted(logs.glob("*.json")) if logs.is_dir() else []
    if not found:
        raise MetricsError(f"no ORFS metrics: neither {reports}/metadata.json nor {logs}/*.json exists "
                           "(did the ORFS run finish? see orfs.log)")
    return found


def load_metrics(sources: list[Path]) -> dict:
    merged: dict = {}
    for src in sources:
        try:
            data = json.loads(src.read_text())
        except json.JSONDecodeError as e:
            raise MetricsError(f"{src} is not JSON: {e}") from None
        if not isinstance(data, dict):
            raise MetricsError(f"{src} is not ORFS's flat metrics object (top level is {type(data).__name__})")
        merged.update(data)
    return merged


def summarize(metrics: dict) -> dict:
    out: dict = {"area": {}, "route": {}, "power": {}, "clock": {}, "timing": {}, "missing": []}
    for (section, name), key in SCALARS.items():
        v = _lookup(metrics, key)
        out[section][name] = v
        if v is None:
            out["missing"].append(key)
    for stage in STAGES:
        row = {name: _lookup(metrics, f"{stage}__{suffix}") for name, suffix in TIMING.items()}
        out["missing"] += [f"{stage}__{TIMING[n]}" for n, v in row.items() if v is None]
        if any(v is not None for v in row.values()):
            out["timing"][stage] = row
    out["run"] = {k: metrics.get(k) for k in ("run__flow__design", "run__flow__platform", "run__flow__variant",
                                              "run__flow__openroad_version", "run__flow__scripts_commit")
                  if k in metrics}
    return out


def collect_metrics(work: Path, platform: str, design: str, variant: str = "base") -> dict:
    sources = find_sources(work, platform, design, variant)
    return {"schema": "nano-k3/orfs/1", "design": design, "platform": platform, "variant": variant,
            "sources": [str(s) for s in sources], **summarize(load_metrics(sources))}


def summary_text(r: dict) -> str:
    def f(v, nd=3):
        return "-" if v is None else f"{v:,.{nd}f}" if isinstance(v, float) else f"{v:,}"

    a, rt = r["area"], r["route"]
    lines = [f"ORFS {r['platform']}/{r['design']}/{r['variant']} ({len(r['sources'])} metrics file(s))",
             f"  die / core     {f(a['die_um2'], 1)} / {f(a['core_um2'], 1)} um2",
             f"  instances      {f(a['instance_um2'], 1)} um2 (cells {f(a['stdcell_um2'], 1)}, macros "
             f"{f(a['macros_um2'], 1)}), utilization {f(a['utilization'])}",
             f"  wirelength     {f(rt['wirelength_um'])} um, DRC errors {f(rt['drc_errors'])}",
             f"  power          {f(r['power']['total_w'], 4)} W",
             f"  {'stage':<14} {'setup WS':>9} {'setup TNS':>10} {'hold WS':>9} {'hold TNS':>9}  (ns)"]
    for stage, t in r["timing"].items():
        lines.append(f"  {stage:<14} {f(t['setup_ws']):>9} {f(t['setup_tns']):>10} {f(t['hold_ws']):>9} "
                     f"{f(t['hold_tns']):>9}")
    if r["missing"]:
        lines.append(f"  not in the run: {len(r['missing'])} key(s), e.g. {r['missing'][0]}")
    return "\n".join(lines) + "\n"
