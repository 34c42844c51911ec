"""The report's floorplan and sign-off parts (issue 17 point 5): the floorplan by engine, the per-corner
table after repair, what the repair added and what it costs in area, the design rules and the routing
demand.

The floorplan is drawn again from ``place/floorplan.json`` (flow/floorplan_out.py); the routing-demand map
is the one sign-off drew (``signoff/rudy.png``, with what it shows in ``rudy.png.json``: the grid itself is
not kept), copied into the report.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from flow.floorplan_out import draw_floorplan
from flow.report_figures import atomic
from flow.report_summary import fmt

SIGNOFF_COMMAND = "python -m flow.signoff --place {build}/place --synth {build}/synth --out {build}/signoff"
BUDGET_MM2 = 4.0            # SPEC's area budget, logic at the typical corner plus the macros' price


def fig_floorplan(stages: dict, path: Path) -> dict | None:
    place = stages["place"]["data"]
    if place is None:
        return None
    fj_path = Path(stages["place"]["path"]).parent / "floorplan.json"
    if not fj_path.is_file():
        return {"skipped": f"{fj_path} not found (a placement with --flat, or from an older flow.place)"}
    fj = json.loads(fj_path.read_text())
    drawn = {}
    atomic(path, lambda p: drawn.update(draw_floorplan(fj, p)))
    return {"caption": f"Floorplan of `{place['top']}`: a region per engine sized from its cell area, macros on the "
                       "region edge facing the fewest nets to other regions, I/O pins, lines between the regions "
                       "that share the most nets", "commands": [stages["place"]["command"]], **drawn}


def fig_routing_demand(stages: dict, path: Path) -> dict | None:
    so = stages["signoff"]["data"]
    if so is None:
        return None
    src = Path(stages["signoff"]["path"]).parent / so["files"].get("rudy_png", "rudy.png")
    meta = Path(f"{src}.json")
    if not (src.is_file() and meta.is_file()):
        return {"skipped": f"{src} or {meta.name} not found (a sign-off from an older flow.signoff: run it again)"}
    atomic(path, lambda p: shutil.copyfile(src, p))
    return {"caption": "Routing demand of the signed-off placement: RUDY per gcell over the metal2-metal6 tracks of "
                       "the tech LEF (metal5-6 only over macros)", "commands": [stages["signoff"]["command"]],
            **json.loads(meta.read_text())}


def priced_mm2(so: dict, synth: dict | None) -> float | None:
    """Standard cells after repair (typical corner) plus the macros' SPEC price, in mm²."""
    if synth is None:
        return None
    return (so["std_cell_area_um2"] + synth["area"]["macro_um2"]) / 1e6


def _repair_rows(so: dict) -> list[str]:
    e, f = so.get("electrical_repair", {}), so.get("final_electrical_repair", {})
    s, i, h = so["sizing"], so["load_isolation"], so["hold_repair"]

    def drv(x: dict) -> str:
        return (f"{x.get('drivers_upsized', 0):,} drivers up-sized, {x.get('nets_repaired', 0):,} nets rebuilt with "
                f"{x.get('buffers_added', 0):,} buffers ({x.get('buffers_removed', 0):,} removed); max-cap "
                f"violations {fmt(x.get('cap_violations_before'), ',')} → "
                f"{fmt(x.get('cap_violations_after', x.get('cap_violations_before')), ',')}"
                + (f" ({x['left_over_limit']['count']:,} over the limit itself)" if "left_over_limit" in x else ""))
    rows = [("electrical repair (before timing)", drv(e), e.get("area_change_um2")),
            ("sizing (slow corner)", f"{s['cells_resized']:,} cells up-sized; stopped: {s['stopped']}",
             s["area_change_um2"]),
            ("load isolation", f"{i['buffers_added']:,} buffers take {i['sinks_moved']:,} sinks off critical stages",
             i["area_added_um2"]),
            ("hold (fast corner)", f"{h['buffers_added']:,} × {h['buffer']} on {h['endpoints']:,} endpoints",
             h["area_added_um2"])]
    if f:
        rows.append(("electrical repair (after timing)", drv(f), f.get("area_change_um2")))
    for k, t in enumerate(so.get("touch_ups", []), 1):
        before = ", ".join(f"{c} WNS {fmt(v['wns_ns'])} ns / {fmt(v['max_transition_violations'], ',')} transition"
                           for c, v in t["corners_before"].items())
        rows.append((f"touch-up {k} (after sign-off STA)",
                     f"sign-off STA found {before}, {t['cap_violations_before']:,} max-cap; "
                     f"{t['drivers_upsized']:,} violating nets' drivers up-sized ({t['unsizable_drivers']:,} could "
                     f"not be), {t['sizing']['cells_resized']:,} cells sized in all; slow WNS "
                     f"{fmt(t['wns_before_ns'])} → {fmt(t['wns_after_ns'])} ns in its session",
                     t["sizing"]["area_change_um2"]))
    md = ["| step | what it did | area µm² |", "|---|---|---|"]
    return md + [f"| {a} | {b} | {fmt(c, '+,.1f')} |" for a, b, c in rows]


def md_signoff(stages: dict, embed) -> list[str]:
    """The sign-off section; ``embed(section)`` gives the section's figures."""
    so, synth = stages["signoff"]["data"], stages["synth"]["data"]
    md = ["## Sign-off after repair (make signoff)", ""]
    if so is None:
        e = stages["signoff"]
        return md + [f"{e['status']}: `{e['command']}`", ""] + embed("floorplan")
    clk, dr = so["clock"], so["design_rules"]
    verdict = "**signed off**" if so["signed_off"] else "**not signed off**"
    md += [f"`{so['top']}` at {so['period_ns']} ns: {verdict} (setup at every corner "
           f"{'met' if so['setup_met_all_corners'] else 'violated'}, hold at fast "
           f"{'met' if so['hold_met_fast'] else 'violated'}, design rules "
           f"{'clean' if so['electrical_clean'] else 'violated'}). Clock: {clk['model']}, uncertainty "
           f"{clk['setup_uncertainty_ns']} ns setup / {clk['hold_uncertainty_ns']} ns hold standing in for a clock "
           "tree's skew and jitter; wires: estimated from the placement (not routed).", "",
           "| corner | setup WNS ns | TNS ns | hold WNS ns | shortest period ns | max-transition violations | worst path |",
           "|---|---|---|---|---|---|---|"]
    for c, v in so["corners"].items():
        p = v.get("worst_path")
        md.append(f"| {c} | {fmt(v['wns_ns'])} | {fmt(v['tns_ns'])} | {fmt(v['worst_hold_slack_ns'])} | "
                  f"{fmt(v['min_period_ns'])} | {fmt(v['max_transition_violations'], ',')} | "
                  + (f"`{p['start']}` → `{p['end']}` |" if p else "— |"))
    priced = priced_mm2(so, synth)
    md += ["", f"Design rules: {fmt(dr['max_capacitance_violations'], ',')} max-capacitance and "
               f"{fmt(dr['max_fanout_violations'], ',')} max-fanout (limit {dr['max_fanout']}) violations "
               f"({dr['model']}).", "", *_repair_rows(so), "",
           f"Standard cells after repair: {so['std_cell_area_um2']:,.0f} µm² (placed "
           f"{so['std_cell_area_before_um2']:,.0f} µm²); priced with the macros: "
           + (f"**{priced:.3f} mm²** ({'within' if priced <= BUDGET_MM2 else 'over'} the {BUDGET_MM2:g} mm² budget)."
              if priced is not None else "unknown (no synthesis result for the macros' price)."),
           f"Routing demand: peak {so['routing_demand']['peak_demand_over_capacity']:.2f} of capacity, "
           f"{100 * so['routing_demand']['share_of_gcells_over_capacity']:.2f} % of gcells over. Sign-off took "
           f"{so['runtime_s']:,.0f} s.", ""]
    return md + embed("floorplan") + embed("signoff")
