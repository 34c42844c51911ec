"""One report of what ran: correctness, speed, size and timing, with figures.

    python -m flow.report [--build build] [--out build/report] [--brief [--runtime build/logs/runtime.json]]

Reads whatever exists of the stage results under the build folder (table ``STAGES``: simulation summary,
synthesis, pre-layout STA, placement with its post-placement STA, the per-engine table, ORFS metrics, the
benchmark) and writes ``report.md`` + ``report.json`` + PNG figures (table ``FIGURES``) into ``--out``.
Every figure is titled, has axis labels with units and a legend, and is captioned with the command that
produced its data. An input that does not exist is listed as "not run", never left out; one that exists
but is not the producer's JSON is "unreadable"; a figure whose data exists but cannot be drawn is listed
with the reason. Each output is written under a temporary name and renamed; a figure of an earlier report
that this run could not draw is deleted, so a stale picture never passes for a current one. ``--brief``
prints 6-12 lines (``make demo``'s closing summary: results, with ``--runtime`` each step's wall time from
flow/runlog.py's record, and where the report in ``--out`` is) and writes nothing.

The parts: flow/report_summary.py (headline numbers, the brief), flow/report_figures.py (bar charts),
flow/report_layout.py (placement and layout pictures), flow/report_engines.py (which engine holds what).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flow.boundaries import COMMAND as BOUNDARIES_COMMAND
from flow.boundaries import md_boundaries
from flow.report_dse import md_dse
from flow.report_figures import CHIP_SIM_COMMAND, atomic, fig_area, fig_bits, fig_slack, fig_tokens
from flow.place_out import DEFERRED
from flow.report_layout import fig_layout, fig_placement
from flow.report_signoff import SIGNOFF_COMMAND, fig_floorplan, fig_routing_demand, md_signoff
from flow.report_power import fig_chip_power, fig_power_by_engine, md_power
from flow.report_summary import (ARGMAX_GATE, COSINE_GATE, K3_TOKENS_PER_S, PORT_LIMIT_TOKENS_PER_S,
                                 READ_ROOFLINE_TOKENS_PER_S, brief, fmt, passed, placed_corners, placed_text,
                                 placement, summary)
from verification.equiv import md_equiv
from verification.replay import md_replay

# stage -> (file under the build folder, the command that produces it, top-level keys the report reads).
# A producer that records its own "command" in the file is quoted by that instead.
STAGES = {
    "sim": ("sim/summary.json", "make sim", ("verdict",)),
    "synth": ("synth/synth.json", "python -m flow.synth --rtl {build}/rtl --out {build}/synth",
              ("top", "area", "cells", "macros", "hierarchy")),
    "sta": ("sta/sta.json", "python -m flow.sta --synth {build}/synth --out {build}/sta",
            ("top", "period_ns", "corners")),
    "place": ("place/place.json", "python -m flow.place --synth {build}/synth --out {build}/place",
              ("top", "sta", "files")),
    "blocks": ("blocks/blocks.json", "python -m flow.blocks --out {build}/blocks", ("blocks",)),
    "orfs": ("orfs/orfs.json", "python -m flow.orfs --synth {build}/synth --rtl {build}/rtl --out {build}/orfs --run",
             ("area", "timing")),
    "bench": ("bench/bench.json", "make bench", ()),
    # written by flow.place itself, or (make demo, flow.place --no-sta) by this command after it
    "place_sta": ("place/sta/sta.json", "python -m flow.sta --synth {build}/synth --place {build}/place",
                  ("top", "period_ns", "corners")),
    "signoff": ("signoff/signoff.json", SIGNOFF_COMMAND, ("top", "corners", "signed_off", "std_cell_area_um2")),
    "generate": ("generate/generate.json", "make generate", ("texts", "perplexity")),
    "power": ("power/power.json", "make power", ("total_mW", "engines", "scope")),
    "chip_power": ("chip_power/chip_power.json", "make chip-power", ("total_mW", "engines", "logic", "macros")),
    "equiv": ("equiv/equiv.json", "make equiv", ("blocks",)),
    "replay": ("replay/replay.json", "make replay", ("equal", "cycles", "compared")),
    "boundaries": ("place/boundaries.json", BOUNDARIES_COMMAND.format(place="{build}/place"),
                   ("pairs", "unregistered", "registers_to_add")),
}
FLOW_MINUTES_GOAL = 30       # synthesis through sign-off of the chip on 2 cores (issue 17 point 6)


def load(build: Path) -> dict:
    """stage -> {"status": "ok" | "not run" | "unreadable", "path", "command", "data"[, "error"]}."""
    out = {}
    for stage, (rel, cmd, keys) in STAGES.items():
        path = build / rel
        entry = {"path": str(path), "command": cmd.format(build=build), "status": "not run", "data": None}
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except (json.JSONDecodeError, OSError, UnicodeDecodeError) as e:
                entry.update(status="unreadable", error=str(e))
            else:
                missing = [k for k in keys if k not in data] if isinstance(data, dict) else ["a JSON object"]
                if missing:
                    entry.update(status="unreadable", error=f"no {', '.join(missing)} in it")
                else:
                    entry.update(status="ok", data=data, command=data.get("command") or entry["command"])
        out[stage] = entry
    return out


# file name in the report folder -> (report section, builder(stages, path) -> figure dict, None if its stage did not
# run, or {"skipped": why} if it cannot be drawn)
FIGURES = {
    "tokens_per_s.png": ("speed", fig_tokens),
    "area_by_engine.png": ("size", fig_area),
    "memory_bits.png": ("size", fig_bits),
    "slack_by_corner.png": ("timing", fig_slack),
    "placement.png": ("placement", fig_placement),
    "layout.png": ("placement", fig_layout),
    "floorplan.png": ("floorplan", fig_floorplan),
    "routing_demand.png": ("signoff", fig_routing_demand),
    "chip_power_by_engine.png": ("chip_power", fig_chip_power),
    "power_by_engine.png": ("power", fig_power_by_engine),
}


def make_figures(stages: dict, out: Path) -> list[dict]:
    """Every figure that can be drawn; one that cannot is deleted from ``out`` (a stale picture never passes
    for a current one) and listed with the reason when its data exists."""
    figs = []
    for name, (section, build_fig) in FIGURES.items():
        fig = build_fig(stages, out / name)
        if fig is None or "skipped" in fig:
            (out / name).unlink(missing_ok=True)
        if fig is not None:
            figs.append({"file": name, "section": section, **fig})
    return figs


# ---------------------------------------------------------------------------------------------- markdown
def _embed(figs: list[dict], section: str) -> list[str]:
    """Each figure of ``section`` with its one-line caption; one that could not be drawn, with the reason."""
    md = []
    for f in figs:
        if f["section"] != section:
            continue
        if "skipped" in f:
            md += [f"*`{f['file']}` not drawn: {f['skipped']}.*", ""]
            continue
        data = " and ".join(f"`{c}`" for c in f["commands"])
        md += [f"![{f['caption']}]({f['file']})", "",
               f"*{f['caption']}. Data from {data}" + (f"; {f['note']}" if f.get("note") else "") + ".*", ""]
    return md


def _not_run(stages: dict, stage: str) -> str:
    e = stages[stage]
    return f"{e['status']}" + (f" ({e['error']})" if e.get("error") else "") + f": `{e['command']}`"


def _rows_correctness(stages: dict, c: dict) -> list[tuple[str, str]]:
    sim_nr = _not_run(stages, "sim")
    unit = {"chip": "runs", "block": "tests"}.get(c["level"])
    # a chip summary has every number; a block's tests compare it with its reference bit for bit instead
    absent = {"chip": "—", "block": "— (the block's tests compare it with its reference bit for bit)"}.get(
        c["level"], sim_nr)
    rows = [("verdict", f"**{c['verdict']}** ({c['level']} `{c['top']}`, {passed(c, unit)})" if unit else sim_nr),
            ("bit-exact with the fixed-point model", c["bit_exact_runs"] and f"{c['bit_exact_runs']} runs"),
            (f"min cosine with the float model (gate ≥ {COSINE_GATE})", fmt(c["min_cosine"], ".6f", None)),
            (f"argmax agreement (gate ≥ {ARGMAX_GATE})", fmt(c["argmax_agreement"], ".4f", None))]
    return [(q, v if v is not None else absent) for q, v in rows]


def _rows_speed(stages: dict, sp: dict) -> list[tuple[str, str]]:
    if not sp["measured"]:
        missing = f"not measured yet (`{CHIP_SIM_COMMAND.format(build=Path(stages['sim']['path']).parent.parent)}`)"
        return [("cycles/token (long run)", missing),
                ("tokens/s at 100 MHz",
                 f"{missing}; K3's chip {K3_TOKENS_PER_S:,}, port limit {PORT_LIMIT_TOKENS_PER_S:,}")]
    return [("cycles/token (long run)", fmt(sp["cycles_per_token"], ",.1f")),
            ("tokens/s at 100 MHz", f"**{sp['tokens_per_s']:,.0f}** ({sp['vs_k3']:.2f}× K3's {K3_TOKENS_PER_S:,}; "
             f"port limit {PORT_LIMIT_TOKENS_PER_S:,}, read roofline {READ_ROOFLINE_TOKENS_PER_S:,})"),
            ("why it can beat SPEC §8's limits", sp["why_faster"]),
            ("tokens/s at the placed chip's clock", placed_text(sp["placed"])),
            ("power, energy per token", _energy_text(stages, sp["tokens_per_s"]))]


def _energy_text(stages: dict, tokens_per_s: float) -> str:
    """The chip's measured power (make chip-power) and the energy per token at the long run's tokens/s."""
    pw = stages["chip_power"]["data"]
    if pw is None:
        return _not_run(stages, "chip_power")
    w = pw["total_mW"] * 1e-3
    return (f"{pw['total_mW']:.1f} mW (typical corner, the netlist's activity in the gate-level short run): "
            f"**{w / tokens_per_s * 1e6:.3f} µJ/token**, {tokens_per_s / w:,.0f} tokens/s/W")


def _rows_size(stages: dict, z: dict) -> list[tuple[str, str]]:
    if z["top"] is None:
        return [("area", _not_run(stages, "synth"))]
    bits = (f"{z['macro_bits']:,} bits: SRAM {z['sram_bits']:,}, ROM {z['rom_bits']:,}; "
            f"{100 * z['macro_bits'] / z['bits_budget']:.2f} % of 4 MiB")
    within = "within" if z["within_budget"] is not False else "**over**"
    return [("standard cells (Nangate45 typical)", f"{z['logic_mm2']:.4f} mm² ({z['cells']:,} cells)"),
            ("macros at 1 mm²/Mibit", f"{z['macro_mm2']:.4f} mm² ({bits})"),
            (f"total vs {z['budget_mm2']:g} mm² budget",
             f"**{z['total_mm2']:.4f} mm²** ({100 * z['budget_used']:.2f} %, {within})"),
            ('Yosys "Chip area"', f"{fmt(z['yosys_chip_area_um2'], ',.1f')} µm²")]


def _rows_timing(stages: dict, t: dict) -> list[tuple[str, str]]:
    if not t["corners"]:
        rows = [("WNS per corner", _not_run(stages, "sta"))]
    else:
        rows = [(f"WNS {corner}, pre / post placement",
                 " / ".join(fmt((v[w] or {}).get("wns_ns"), ".3f", "not run") for w in ("pre", "post")) + " ns")
                for corner, v in t["corners"].items()]
        worst = [max((v[w]["min_period_ns"] for v in t["corners"].values() if v[w] and v[w]["min_period_ns"] is not None),
                     default=None) for w in ("pre", "post")]
        rows.append(("shortest period, worst corner, pre / post",
                     " / ".join(fmt(p, ".3f", "not run") for p in worst) + f" ns (clock {t['period_ns']} ns)"))
    if t["orfs_finish_setup_ws_ns"] is not None:
        rows.append(("setup WNS after routing (ORFS finish)", f"{t['orfs_finish_setup_ws_ns']:.3f} ns"))
    return rows


def _headline(stages: dict, s: dict) -> list[str]:
    """One table: correctness, speed, size, timing."""
    groups = (("correctness", _rows_correctness(stages, s["correctness"])), ("speed", _rows_speed(stages, s["speed"])),
              ("size", _rows_size(stages, s["size"])), ("timing", _rows_timing(stages, s["timing"])))
    return (["| | quantity | value |", "|---|---|---|"]
            + [f"| {g} | {q} | {v} |" for g, rows in groups for q, v in rows] + [""])


def _sta_table(corners: dict) -> list[str]:
    return (["| corner | WNS ns | TNS ns | worst hold ns | shortest period ns | fmax MHz |", "|---|---|---|---|---|---|"]
            + [f"| {k} | {v['wns_ns']} | {v.get('tns_ns')} | {v.get('worst_hold_slack_ns')} | "
               f"{v.get('min_period_ns')} | {v.get('fmax_mhz')} |" for k, v in corners.items()] + [""])


def _md_sim(stages: dict) -> list[str]:
    sim = stages["sim"]["data"]
    md = ["## Correctness", ""]
    if sim is None:
        return md + [_not_run(stages, "sim"), ""]
    lint = sim.get("lint", {})
    md += [f"Verdict **{str(sim['verdict']).upper()}** for `{sim.get('top')}`; lint {lint.get('errors')} errors, "
           f"{lint.get('warnings')} warnings; seed {sim.get('seed')}.", ""]
    if sim.get("runs"):
        md += ["| run | passed | cycles | cycles/token | tokens/s | bit-exact | min cosine | argmax |",
               "|---|---|---|---|---|---|---|---|"]
        md += [f"| {r['name']} | {r['passed']} | {fmt(r.get('cycles'), ',')} | {fmt(r.get('cycles_per_token'), ',.1f')} | "
               f"{fmt(r.get('tokens_per_s'), ',.0f')} | {r.get('bit_exact')} | {fmt(r.get('min_cosine'), '.6f')} | "
               f"{fmt(r.get('argmax_agreement'), '.4f')} |" for r in sim["runs"]]
        e = sim.get("elasticity") or {}
        if e.get("ratio") is not None:
            md += ["", f"Elasticity: cycles at base latency 48 / at 24 = {e['ratio']:.4f}."]
        return md + [""]
    md += ["| test | passed | time s |", "|---|---|---|"]
    md += [f"| {d['name']} | {d['passed']} | {d.get('time_s')} |" for d in sim.get("details", [])]
    return md + [""]


def _md_size(stages: dict, figs: list[dict]) -> list[str]:
    syn = stages["synth"]["data"]
    md = ["## Size (Nangate45, typical corner)", ""]
    if syn is None:
        md += [_not_run(stages, "synth"), ""]
    else:
        a = syn["area"]
        md += [f"Top `{syn['top']}`, {syn.get('options', {}).get('hierarchy')}; ABC delay estimate "
               f"{syn.get('abc', {}).get('delay_ps')} ps; runtime {syn.get('runtime_s')} s.", "",
               "| quantity | value |", "|---|---|",
               f"| standard-cell area | {a['logic_um2']:,.1f} µm² (Yosys \"Chip area\" {a.get('yosys_chip_area_um2')}) |",
               f"| macro area ({syn['macros'].get('count', len(syn['macros']['instances']))} macros, "
               f"{syn['macros']['bits']:,} bits) | {a['macro_um2']:,.1f} µm² |",
               f"| total vs 4 mm² budget | {a['total_um2']:,.1f} µm² ({100 * a['budget_used']:.2f} %) |",
               f"| cells | {syn['cells']['count']:,} |", "",
               "| engine | module | area µm² | cells |", "|---|---|---|---|"]
        md += [f"| {e['name']} | {e['module']} | {e['area_um2']:,.1f} | {e['cells']:,} |" for e in syn["hierarchy"]["engines"]]
        md += [""]
        if syn["macros"]["instances"]:
            md += ["| macro instance | type | depth × width | bits | µm² |", "|---|---|---|---|---|"]
            md += [f"| `{m['path']}` | {m['type']} | {m.get('depth')} × {m.get('width')} | {m['bits']:,} | "
                   f"{m['area_um2']:,.1f} |" for m in syn["macros"]["instances"]]
            md += [""]
        else:
            md += ["No msh_sram / msh_rom instances: 0 macro bits.", ""]
    return md + _embed(figs, "size")


def _worst_paths(corners: dict) -> list[str]:
    """The worst corner's ten worst paths, and by how much each corner misses the clock (if it does)."""
    worst = min(corners.items(), key=lambda kv: kv[1]["wns_ns"] if kv[1]["wns_ns"] is not None else 1e9)
    missed = [f"{c} by {-v['wns_ns']:.3f} ns (TNS {v.get('tns_ns')} ns)" for c, v in corners.items()
              if v["wns_ns"] is not None and v["wns_ns"] < 0]
    md = [f"Misses the clock: {'; '.join(missed)}.", ""] if missed else []
    if worst[1].get("paths"):
        md += [f"Worst paths at the {worst[0]} corner:", "", "| slack ns | arrival ns | start | end |",
               "|---|---|---|---|"]
        md += [f"| {p['slack_ns']} | {p['arrival_ns']} | `{p['start']}` | `{p['end']}` |" for p in worst[1]["paths"]]
        md += [""]
    return md


def _md_timing(stages: dict, figs: list[dict]) -> list[str]:
    sta, place, place_sta = stages["sta"]["data"], stages["place"]["data"], stages["place_sta"]["data"]
    md = ["## Timing", "", "### Pre-layout (OpenSTA)", ""]
    if sta:
        c = sta.get("constraints", {})
        md += [f"Clock {sta['period_ns']} ns on `{sta.get('clock')}`, I/O delays {c.get('io_delay_ns')} ns, wire load "
               f"{c.get('wire_load')}, macros: {c.get('macros')}.", ""] + _sta_table(sta["corners"])
        md += _worst_paths(sta["corners"])
    else:
        md += [_not_run(stages, "sta"), ""]
    md += ["### After placement (OpenSTA with placed-wire parasitics)", ""]
    if place:
        corners = placed_corners(stages)
        md += _sta_table(corners) if corners else [_not_run(stages, "place_sta"), ""]
        md += _worst_paths(place_sta["corners"]) if place_sta else []
    else:
        md += [_not_run(stages, "place"), ""]
    return md + _embed(figs, "timing")


def flow_seconds(stages: list[dict]) -> float:
    """Wall-clock seconds of ``stages`` (each with ``runtime_s``, and ``finished_unix`` when it ran): the
    union of their run intervals, so steps that ran side by side (`make demo` times and places at once)
    count once. A stage without ``finished_unix`` counts its whole runtime."""
    spans = sorted((s["finished_unix"] - s["runtime_s"], s["finished_unix"]) for s in stages if "finished_unix" in s)
    total, end = sum(s["runtime_s"] for s in stages if "finished_unix" not in s), float("-inf")
    for a, b in spans:
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


CHAIN = ("synth", "place", "signoff")       # what makes the signed-off chip, each step on the result of the last


def _md_runtime(stages: dict) -> list[str]:
    """Wall-clock time of synthesis through sign-off against the flow's 30-minute goal, and apart from it the
    diagnostics that nothing in the chain reads (`make demo` runs them after sign-off): the STAs, and the
    placement's own netlist, DEF, SPEF and pictures when it deferred them (``flow.place --defer-outputs``)."""
    place = stages["place"]["data"] or {}
    apart = place.get("sta", {}) is None     # flow.place --no-sta, then flow.sta --place
    time_of = {k: stages[k]["data"].get("runtime_s") if stages[k]["data"] else None for k in CHAIN}
    md = ["## Flow runtime", "", "| step | seconds | command |", "|---|---|---|"]
    md += [f"| {k} | {fmt(time_of[k], ',.0f')} | `{stages[k]['command']}` |" for k in CHAIN]
    ran = [k for k in CHAIN if time_of[k] is not None]
    if ran:
        total = flow_seconds([stages[k]["data"] for k in ran])
        verdict = "within" if total <= FLOW_MINUTES_GOAL * 60 else "over"
        missing = [k for k in CHAIN if time_of[k] is None]
        md += [f"| synthesis through sign-off, wall clock | {total:,.0f} ({total / 60:.1f} min, {verdict} the "
               f"{FLOW_MINUTES_GOAL}-minute goal{'; not run: ' + ', '.join(missing) if missing else ''}) | |"]
    # (row, its stage record or None, command) of each diagnostic
    diagnostics = [("sta (diagnostic: timing that no later step reads)", stages["sta"]["data"],
                    stages["sta"]["command"])]
    if place.get(DEFERRED):
        later = place[DEFERRED]
        diagnostics.append(("placement's netlist, DEF, SPEF and pictures (diagnostic: deferred past sign-off, "
                            "which reads the placement state)", later if later["written"] else None,
                            later["command"]))
    if apart:
        diagnostics.append(("place_sta (diagnostic: timing that no later step reads)", stages["place_sta"]["data"],
                            stages["place_sta"]["command"]))
    md += [f"| {row} | {fmt(data.get('runtime_s') if data else None, ',.0f')} | `{cmd}` |"
           for row, data, cmd in diagnostics]
    done = [data for _, data, _ in diagnostics if data and data.get("runtime_s") is not None]
    if done:
        md += [f"| diagnostics, wall clock (side by side) | {flow_seconds(done):,.0f} | |"]
    return md + [""]


def _md_place(stages: dict, figs: list[dict]) -> list[str]:
    p = placement(stages["place"]["data"])
    md = ["## Placement", ""]
    if p is None:
        return md + [_not_run(stages, "place"), ""]
    md += [f"`{p['top']}`: die {fmt(p['die_mm2'], '.4f')} mm², utilization {fmt(p['utilization'], '.3f')}, "
           f"{fmt(p['cells_placed'], ',')} cells and {fmt(p['macros_placed'], ',')} macros placed, "
           f"HPWL {fmt(p['hpwl_um'], ',.0f')} µm.", ""]
    return md + _embed(figs, "placement") + md_boundaries(stages["boundaries"]["data"], stages["boundaries"]["command"])


def _md_blocks(stages: dict) -> list[str]:
    b = stages["blocks"]["data"]
    md = ["## Engines one by one (make blocks)", ""]
    if b is None:
        return md + [_not_run(stages, "blocks"), ""]
    corners = b.get("corners") or sorted({c for r in b["blocks"] for c in r.get("wns_ns", {})})
    head = ["engine", "cells", "area µm²", "SRAM bits", "ROM bits", *(f"WNS {c} ns" for c in corners), "tests"]
    md += ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in b["blocks"]:
        if "error" in r:                      # the block stopped in emit, synthesis or STA: say where
            md.append(f"| {r['block']} | {r['error']} |" + " |" * (len(head) - 2))
            continue
        cells = [r["block"], f"{r['cells']:,}", f"{r['area_um2']:,.1f}", f"{r['sram_bits']:,}", f"{r['rom_bits']:,}",
                 *(fmt(r["wns_ns"].get(c), ".3f") for c in corners), r.get("tests", {}).get("status", "not run")]
        md.append("| " + " | ".join(cells) + " |")
    return md + [""]


def _md_orfs(stages: dict) -> list[str]:
    o = stages["orfs"]["data"]
    md = ["## Place and route (ORFS)", ""]
    if o is None:
        return md + [_not_run(stages, "orfs"), ""]
    a, rt = o["area"], o.get("route", {})
    md += [f"Die {fmt(a.get('die_um2'), ',.1f')} µm², instances {fmt(a.get('instance_um2'), ',.1f')} µm², utilization "
           f"{fmt(a.get('utilization'))}; wirelength {fmt(rt.get('wirelength_um'), ',.0f')} µm, DRC errors "
           f"{fmt(rt.get('drc_errors'), ',')}; power {fmt(o.get('power', {}).get('total_w'), '.4f')} W.", "",
           "| stage | setup WS ns | setup TNS ns | hold WS ns | hold TNS ns |", "|---|---|---|---|---|"]
    md += [f"| {s} | {fmt(v.get('setup_ws'))} | {fmt(v.get('setup_tns'))} | {fmt(v.get('hold_ws'))} | {fmt(v.get('hold_tns'))} |"
           for s, v in o["timing"].items()]
    return md + [""]


def _md_generate(stages: dict) -> list[str]:
    g = stages["generate"]["data"]
    md = ["## The chip writes text (make generate)", ""]
    if g is None:
        return md + [_not_run(stages, "generate"), ""]
    ppl = g["perplexity"]
    md += ["Held-out perplexity of the trained nano-K3 (nano_k3/trained/train.json, `python -m nano_k3.train`):", "",
           "| model | perplexity |", "|---|---|",
           f"| float, K3 recipe (Per-Head Muon, Quantile Balancing) | {fmt(ppl.get('float'), '.3f')} |",
           f"| INT4-dequantised float (the image) | {fmt(ppl.get('int4_float'), '.3f')} |",
           f"| fixed-point (the chip's arithmetic) | {fmt(ppl.get('fixed'), '.3f')} |",
           f"| float, plain AdamW, same budget | {fmt(ppl.get('adamw_float'), '.3f')} |", "",
           f"Greedy generation, {g['n']} tokens after {g['prompt_tokens']} prompt tokens, {g['profile']} profile: "
           f"{'every check passed' if g['passed'] else 'FAILED: ' + (', '.join(g['failed_checks']) or 'chip text differs')}; "
           f"{fmt(g.get('tokens_per_s'), ',.0f')} tokens/s at 100 MHz; chip vs float: "
           + ("identical" if g["chip_vs_float_first_difference"] is None
              else f"first difference at generated token {g['chip_vs_float_first_difference']}") + ".", ""]
    for name, text in g["texts"].items():
        md += [f"{name}:", "", "```python", g["prompt"] + text, "```", ""]
    return md


def markdown(stages: dict, figs: list[dict]) -> str:
    s = summary(stages)
    md = ["# nano-K3 flow report", ""]
    md += [f"> **Warning:** {w}." for w in s["warnings"]] + ([""] if s["warnings"] else [])
    md += ["## Headline", ""] + _headline(stages, s)
    md += ["## What ran", "", "| stage | status | source | produced by |", "|---|---|---|---|"]
    md += [f"| {k} | {v['status']}{' (' + v['error'] + ')' if v.get('error') else ''} | `{v['path']}` | `{v['command']}` |"
           for k, v in stages.items()] + [""]
    md += _md_sim(stages)
    md += ["## Speed (SPEC §8)", "", "tokens/s = 100 MHz / (RUN→DONE cycles of the long run / 48 positions); at the "
           "placed chip's clock, the same cycles/token at the slowest corner's shortest period after placement.", ""]
    md += _embed(figs, "speed")
    md += _md_size(stages, figs) + _md_timing(stages, figs) + _md_place(stages, figs)
    md += md_signoff(stages, lambda section: _embed(figs, section)) + _md_runtime(stages)
    md += md_power(stages, lambda section: _embed(figs, section)) + md_equiv(stages["equiv"]["data"],
                                                                               stages["equiv"]["command"])
    md += md_replay(stages["replay"]["data"], stages["replay"]["command"])
    md += _md_blocks(stages) + _md_orfs(stages) + _md_generate(stages)
    return "\n".join(md) + "\n"


def write_report(build: Path, out: Path) -> dict:
    stages = load(build)
    out.mkdir(parents=True, exist_ok=True)
    figs = make_figures(stages, out)
    report = {"schema": "nano-k3/report/3", "summary": summary(stages), "figures": figs,
              "stages": {k: {kk: vv for kk, vv in v.items() if kk != "data"} for k, v in stages.items()}}
    md = markdown(stages, figs) + "\n".join(md_dse(build, out)) + "\n"
    for name, text in (("report.json", json.dumps(report, indent=1) + "\n"), ("report.md", md)):
        atomic(out / name, lambda p, text=text: p.write_text(text))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=Path("build"))
    ap.add_argument("--out", type=Path, default=Path("build/report"))
    ap.add_argument("--brief", action="store_true", help="print 6-12 lines, write nothing")
    ap.add_argument("--runtime", type=Path, help="with --brief: the steps' wall times recorded by flow.runlog")
    args = ap.parse_args(argv)
    if args.brief:
        runtime = None
        if args.runtime:
            try:
                runtime = json.loads(args.runtime.read_text())
            except (OSError, ValueError) as e:
                print(f"flow.report: error: cannot read the runtime record {args.runtime}: {e}", file=sys.stderr)
                return 1
        print(brief(load(args.build), runtime, args.out / "report.md"))
        return 0
    report = write_report(args.build, args.out)
    missing = [k for k, v in report["stages"].items() if v["status"] != "ok"]
    drawn = [f["file"] for f in report["figures"] if "skipped" not in f]
    skipped = [f"{f['file']}: {f['skipped']}" for f in report["figures"] if "skipped" in f]
    print(f"wrote {args.out / 'report.md'} with {len(drawn)} figures"
          + (f" (not run: {', '.join(missing)})" if missing else "")
          + "".join(f"\n  not drawn: {s}" for s in skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
