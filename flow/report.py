"""One report of what ran: simulation verdict, synthesis area and cells, timing per corner.

    python -m flow.report [--build build] [--out build/report] [--brief]

Reads whatever exists of ``build/sim/summary.json``, ``build/synth/synth.json`` and ``build/sta/sta.json``
and writes ``report.md`` + ``report.json`` (+ PNG plots, each captioned with the command that made
its data). An input that does not exist is listed as "not run", never left out. ``--brief`` prints a
few lines (verdict, area, cells, slack per corner) and writes nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# stage -> (file under the build folder, the command that produces it)
STAGES = {
    "sim": ("sim/summary.json", "make sim"),
    "synth": ("synth/synth.json", "python -m flow.synth --rtl build/rtl --out build/synth"),
    "sta": ("sta/sta.json", "python -m flow.sta --synth build/synth --out build/sta"),
}


def load(build: Path) -> dict:
    """stage -> {"status": "ok" | "not run" | "unreadable", "path", "command", "data"}."""
    out = {}
    for stage, (rel, cmd) in STAGES.items():
        path = build / rel
        entry = {"path": str(path), "command": cmd, "status": "not run", "data": None}
        if path.is_file():
            try:
                entry.update(status="ok", data=json.loads(path.read_text()))
            except (json.JSONDecodeError, OSError) as e:
                entry.update(status="unreadable", error=str(e))
        out[stage] = entry
    return out


def sim_verdict(sim: dict | None) -> str:
    if sim is None:
        return "not run"
    for key in ("verdict", "status", "result"):
        if key in sim:
            return str(sim[key])
    if "passed" in sim:
        return "PASS" if sim["passed"] else "FAIL"
    return "unknown (no verdict field)"


def summary(stages: dict) -> dict:
    """The headline numbers, None where the stage did not run."""
    syn, sta, sim = (stages[s]["data"] for s in ("synth", "sta", "sim"))
    return {
        "verdict": sim_verdict(sim),
        "top": (syn or sta or {}).get("top"),
        "logic_area_um2": syn["area"]["logic_um2"] if syn else None,
        "macro_area_um2": syn["area"]["macro_um2"] if syn else None,
        "total_area_um2": syn["area"]["total_um2"] if syn else None,
        "area_budget_used": syn["area"]["budget_used"] if syn else None,
        "cells": syn["cells"]["count"] if syn else None,
        "macro_bits": syn["macros"]["bits"] if syn else None,
        "period_ns": sta["period_ns"] if sta else None,
        "corners": {c: {"wns_ns": v["wns_ns"], "tns_ns": v["tns_ns"], "min_period_ns": v["min_period_ns"]}
                    for c, v in sta["corners"].items()} if sta else {},
    }


def brief(stages: dict) -> str:
    s = summary(stages)
    lines = [f"simulation : {s['verdict']}"]
    if s["total_area_um2"] is None:
        lines.append("synthesis  : not run")
    else:
        lines.append(f"area       : {s['total_area_um2'] / 1e6:.4f} mm2 = {s['logic_area_um2'] / 1e6:.4f} logic + "
                     f"{s['macro_area_um2'] / 1e6:.4f} macros ({100 * s['area_budget_used']:.1f} % of 4 mm2), "
                     f"{s['cells']:,} cells ({s['top']})")
    if not s["corners"]:
        lines.append("timing     : not run")
    for c, v in s["corners"].items():
        lines.append(f"timing {c:<8}: slack {v['wns_ns']} ns at {s['period_ns']} ns, "
                     f"shortest period {v['min_period_ns']} ns")
    return "\n".join(lines)


def _plots(stages: dict, out: Path) -> list[dict]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    syn, sta = stages["synth"]["data"], stages["sta"]["data"]
    if syn:
        parts = [(e["name"], e["area_um2"]) for e in syn["hierarchy"]["engines"]]
        parts += [(m["path"].rsplit(".", 1)[-1] + f" ({m['type']})", m["area_um2"]) for m in syn["macros"]["instances"]]
        parts = sorted(parts, key=lambda p: p[1])[-25:]
        fig, ax = plt.subplots(figsize=(7, 0.3 * len(parts) + 1.5))
        ax.barh([p[0] for p in parts], [p[1] / 1e3 for p in parts], color="tab:blue")
        ax.set_xlabel("area (1000 µm²)")
        ax.set_title(f"{syn['top']}: area by engine and macro (Nangate45 typical)")
        fig.tight_layout()
        fig.savefig(out / "area_by_module.png", dpi=100)
        plt.close(fig)
        figs.append({"file": "area_by_module.png", "command": stages["synth"]["command"],
                     "caption": "Standard-cell area per top-level instance, and macro area priced at 1 mm²/Mibit"})
    if sta:
        corners = list(sta["corners"])
        slack = [sta["corners"][c]["wns_ns"] or 0.0 for c in corners]
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.bar(corners, slack, color=["tab:green" if s >= 0 else "tab:red" for s in slack])
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylabel("worst setup slack (ns)")
        ax.set_title(f"{sta['top']}: slack at {sta['period_ns']} ns")
        fig.tight_layout()
        fig.savefig(out / "slack_by_corner.png", dpi=100)
        plt.close(fig)
        figs.append({"file": "slack_by_corner.png", "command": stages["sta"]["command"],
                     "caption": f"Worst setup slack per corner at {sta['period_ns']} ns ({sta['constraints']['wire_load']} wire load)"})
    return figs


def markdown(stages: dict, figs: list[dict]) -> str:
    s = summary(stages)
    md = ["# nano-K3 flow report", "", "## What ran", "", "| stage | status | source | produced by |", "|---|---|---|---|"]
    md += [f"| {k} | {v['status']} | `{v['path']}` | `{v['command']}` |" for k, v in stages.items()]
    md += ["", "## Simulation", "", f"Verdict: **{s['verdict']}**", ""]
    syn = stages["synth"]["data"]
    md += ["## Synthesis (Nangate45, typical corner)", ""]
    if syn:
        a = syn["area"]
        md += [f"Top `{syn['top']}`, {syn['options']['hierarchy']}.", "",
               "| quantity | value |", "|---|---|",
               f"| standard-cell area | {a['logic_um2']:,.1f} µm² (Yosys \"Chip area\" {a['yosys_chip_area_um2']}) |",
               f"| macro area ({syn['macros']['count']} macros, {syn['macros']['bits']:,} bits) | {a['macro_um2']:,.1f} µm² |",
               f"| total vs 4 mm² budget | {a['total_um2']:,.1f} µm² ({100 * a['budget_used']:.2f} %, "
               f"{'within' if a['within_budget'] else '**over**'}) |",
               f"| cells | {syn['cells']['count']:,} |",
               f"| ABC delay estimate | {syn.get('abc', {}).get('delay_ps')} ps |",
               f"| runtime | {syn['runtime_s']} s |", "",
               "| engine | module | area µm² | cells |", "|---|---|---|---|"]
        md += [f"| {e['name']} | {e['module']} | {e['area_um2']:,.1f} | {e['cells']:,} |" for e in syn["hierarchy"]["engines"]]
        md += [""]
    else:
        md += [stages["synth"]["status"], ""]
    sta = stages["sta"]["data"]
    md += ["## Timing (OpenSTA, pre-layout)", ""]
    if sta:
        c = sta["constraints"]
        md += [f"Clock {sta['period_ns']} ns on `{sta['clock']}`, I/O delays {c['io_delay_ns']} ns, wire load "
               f"{c['wire_load']}, macros: {c['macros']}.", "",
               "| corner | WNS ns | TNS ns | worst hold ns | shortest period ns | fmax MHz |", "|---|---|---|---|---|---|"]
        md += [f"| {k} | {v['wns_ns']} | {v['tns_ns']} | {v['worst_hold_slack_ns']} | {v['min_period_ns']} | {v['fmax_mhz']} |"
               for k, v in sta["corners"].items()]
        worst = min(sta["corners"].items(), key=lambda kv: kv[1]["wns_ns"] if kv[1]["wns_ns"] is not None else 1e9)
        md += ["", f"Worst paths at the {worst[0]} corner:", "", "| slack ns | arrival ns | start | end |", "|---|---|---|---|"]
        md += [f"| {p['slack_ns']} | {p['arrival_ns']} | `{p['start']}` | `{p['end']}` |" for p in worst[1]["paths"]]
        md += [""]
    else:
        md += [stages["sta"]["status"], ""]
    if figs:
        md += ["## Figures", ""]
        for f in figs:
            md += [f"![{f['caption']}]({f['file']})", "", f"*{f['caption']}. Data from `{f['command']}`.*", ""]
    return "\n".join(md) + "\n"


def write_report(build: Path, out: Path) -> dict:
    stages = load(build)
    out.mkdir(parents=True, exist_ok=True)
    figs = _plots(stages, out)
    report = {"schema": "nano-k3/report/1", "summary": summary(stages), "figures": figs,
              "stages": {k: {kk: vv for kk, vv in v.items() if kk != "data"} for k, v in stages.items()}}
    for name, text in (("report.json", json.dumps(report, indent=1) + "\n"), ("report.md", markdown(stages, figs))):
        tmp = out / (name + ".tmp")
        tmp.write_text(text)
        tmp.replace(out / name)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=Path("build"))
    ap.add_argument("--out", type=Path, default=Path("build/report"))
    ap.add_argument("--brief", action="store_true", help="print a few lines, write nothing")
    args = ap.parse_args(argv)
    if args.brief:
        print(brief(load(args.build)))
        return 0
    report = write_report(args.build, args.out)
    missing = [k for k, v in report["stages"].items() if v["status"] != "ok"]
    print(f"wrote {args.out / 'report.md'}" + (f" (not run: {', '.join(missing)})" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
