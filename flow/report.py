"""One report of what ran: correctness, speed, size and timing, with figures.

    python -m flow.report [--build build] [--out build/report] [--brief]

Reads whatever exists of the stage results under the build folder (table ``STAGES``: simulation summary,
synthesis, pre-layout STA, placement with its post-placement STA, the per-engine table, ORFS metrics, the
benchmark) and writes ``report.md`` + ``report.json`` + PNG figures (table ``FIGURES``) into ``--out``.
Every figure is captioned with the command that produced its data. An input that does not exist is
listed as "not run", never left out; one that exists but is not the producer's JSON is "unreadable".
Each output is written under a temporary name and renamed; a figure of an earlier report that this run
could not draw is deleted, so a stale picture never passes for a current one. ``--brief`` prints 5-8
lines (``make demo``) and writes nothing.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from flow.synth import AREA_BUDGET_UM2, SRAM_BUDGET_BITS, UM2_PER_MIBIT

# SPEC_NANO_KPU.md §8: tokens/s at 100 MHz on the long run (seed 20260706, group 128, 48 positions).
K3_TOKENS_PER_S = 8_721              # K3's chip: 550,420 cycles = 11,467 cycles/token
PORT_LIMIT_TOKENS_PER_S = 20_470     # reads + logits writes share one 16 B/cycle channel: ~4,886 beats/token
READ_ROOFLINE_TOKENS_PER_S = 21_022  # reads alone: 76,109 active bytes = 4,757 beats/token
COSINE_GATE, ARGMAX_GATE = 0.98, 0.99                  # SPEC §7
CHIP_SIM_COMMAND = "python -m verification.chip_sim --rtl {build}/rtl --out {build}/sim"

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
    "place_sta": ("place/sta/sta.json", "python -m flow.place --synth {build}/synth --out {build}/place",
                  ("top", "period_ns", "corners")),
}
FLOW_MINUTES_GOAL = 30       # synthesis + STA at three corners + placement of the chip on 2 cores (flow issue)


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


# ---------------------------------------------------------------------------------------------- summary
def correctness(sim: dict | None) -> dict:
    """Verdict and, for the chip (a summary with runs), bit-exactness, min cosine and argmax agreement."""
    keys = ("level", "top", "tests", "failed", "bit_exact", "bit_exact_runs", "min_cosine", "argmax_agreement",
            "elasticity")
    if sim is None:
        return {"verdict": "not run", **dict.fromkeys(keys)}
    runs = sim.get("runs") or []
    out = {**dict.fromkeys(keys), "verdict": str(sim["verdict"]).upper(), "level": "chip" if runs else "block",
           "top": sim.get("top"), "tests": sim.get("tests"), "failed": sim.get("failed")}
    if runs:
        exact = sum(bool(r.get("bit_exact")) for r in runs)
        cos = [r["min_cosine"] for r in runs if r.get("min_cosine") is not None]
        argmax = (sim.get("argmax_agreement_pooled") or {}).get("value")
        if argmax is None:
            argmax = min((r["argmax_agreement"] for r in runs if r.get("argmax_agreement") is not None), default=None)
        out.update(bit_exact=exact == len(runs), bit_exact_runs=f"{exact}/{len(runs)}",
                   min_cosine=min(cos, default=None), argmax_agreement=argmax,
                   elasticity=(sim.get("elasticity") or {}).get("ratio"))
    return out


def speed(stages: dict) -> dict:
    """Our tokens/s (the benchmark's if it ran, else the chip simulation's long run) next to SPEC §8's figures."""
    out = {"measured": False, "source": None, "command": None, "run": None, "cycles": None, "cycles_per_token": None,
           "tokens_per_s": None, "vs_k3": None, "k3_tokens_per_s": K3_TOKENS_PER_S,
           "port_limit_tokens_per_s": PORT_LIMIT_TOKENS_PER_S, "read_roofline_tokens_per_s": READ_ROOFLINE_TOKENS_PER_S}
    bench, sim = stages["bench"]["data"], stages["sim"]["data"]
    for source, t in (("bench", bench and bench.get("throughput", bench)), ("sim", sim and sim.get("throughput"))):
        if t and t.get("tokens_per_s"):
            out.update(measured=True, source=source, command=stages[source]["command"], run=t.get("run"),
                       cycles=t.get("cycles"), cycles_per_token=t.get("cycles_per_token"),
                       tokens_per_s=t["tokens_per_s"], vs_k3=t["tokens_per_s"] / K3_TOKENS_PER_S)
            break
    return out


def size(syn: dict | None) -> dict:
    keys = ("top", "logic_mm2", "macro_mm2", "total_mm2", "budget_used", "within_budget", "yosys_chip_area_um2",
            "cells", "sram_bits", "rom_bits", "macro_bits")
    out = {**dict.fromkeys(keys), "budget_mm2": AREA_BUDGET_UM2 / 1e6, "bits_budget": SRAM_BUDGET_BITS}
    if syn is None:
        return out
    a, inst = syn["area"], syn["macros"]["instances"]
    out.update(top=syn["top"], logic_mm2=a["logic_um2"] / 1e6, macro_mm2=a["macro_um2"] / 1e6,
               total_mm2=a["total_um2"] / 1e6, budget_used=a["budget_used"], within_budget=a.get("within_budget"),
               yosys_chip_area_um2=a.get("yosys_chip_area_um2"), cells=syn["cells"]["count"],
               sram_bits=sum(m["bits"] for m in inst if m["type"] == "msh_sram"),
               rom_bits=sum(m["bits"] for m in inst if m["type"] == "msh_rom"), macro_bits=syn["macros"]["bits"])
    return out


def _slack(v: dict | None) -> dict | None:
    if v is None:
        return None
    return {"wns_ns": v["wns_ns"], "tns_ns": v.get("tns_ns"), "min_period_ns": v.get("min_period_ns")}


def timing(stages: dict) -> dict:
    """Worst setup slack per corner before (OpenSTA, wire-load model) and after placement (placed-wire SPEF)."""
    sta, place, orfs = (stages[s]["data"] for s in ("sta", "place", "orfs"))
    pre, post = (sta or {}).get("corners", {}), (place or {}).get("sta", {})
    finish = (orfs or {}).get("timing", {}).get("finish") or {}
    corners = dict.fromkeys([*pre, *post])
    return {"period_ns": (sta or place or {}).get("period_ns"),
            "corners": {c: {"pre": _slack(pre.get(c)), "post": _slack(post.get(c))} for c in corners},
            "orfs_finish_setup_ws_ns": finish.get("setup_ws")}


def placement(place: dict | None) -> dict | None:
    if place is None:
        return None
    die = place.get("die", {})
    return {"top": place["top"], "die_mm2": die["area_um2"] / 1e6 if "area_um2" in die else None,
            "utilization": place.get("utilization"), "hpwl_um": place.get("hpwl_um"),
            "cells_placed": place.get("cells_placed"), "macros_placed": place.get("macros_placed")}


def warnings(stages: dict) -> list[str]:
    """Stages that describe different designs (a leftover of another BLOCK) make the headline a mix."""
    tops = {s: v["data"]["top"] for s, v in stages.items() if v["data"] and isinstance(v["data"].get("top"), str)}
    if len(set(tops.values())) > 1:
        return ["the stages describe different designs: " + ", ".join(f"{s} `{t}`" for s, t in tops.items())]
    return []


def summary(stages: dict) -> dict:
    """The headline numbers, None where the stage did not run."""
    return {"correctness": correctness(stages["sim"]["data"]), "speed": speed(stages),
            "size": size(stages["synth"]["data"]), "timing": timing(stages),
            "placement": placement(stages["place"]["data"]), "warnings": warnings(stages)}


# ---------------------------------------------------------------------------------------------- brief
def _f(v, fmt: str = ",.3f", none: str = "—") -> str:
    return none if v is None else format(v, fmt)


def _passed(c: dict, unit: str) -> str:
    """"3/3 tests" from a simulation summary's counts, "" when it has none."""
    return f"{c['tests'] - (c['failed'] or 0)}/{c['tests']} {unit}" if c["tests"] is not None else ""


def _slack_line(corners: dict, when: str) -> str:
    return " / ".join(f"{c} {v[when]['wns_ns']:.3f}" for c, v in corners.items()
                      if v[when] and v[when]["wns_ns"] is not None)


def brief(stages: dict) -> str:
    s = summary(stages)
    c, sp, z, t, p = s["correctness"], s["speed"], s["size"], s["timing"], s["placement"]
    if c["level"] == "chip":
        sim = (f"{c['verdict']}, chip `{c['top']}`: bit-exact {c['bit_exact_runs']} runs, min cosine "
               f"{_f(c['min_cosine'], '.6f')}, argmax {_f(c['argmax_agreement'], '.4f')}")
    else:
        sim = c["verdict"] + (f", {_passed(c, 'tests')} ({c['top']})" if c["level"] else "")
    refs = f"K3's {K3_TOKENS_PER_S:,}; port limit {PORT_LIMIT_TOKENS_PER_S:,}"
    lines = [f"simulation : {sim}",
             f"speed      : {_f(sp['cycles_per_token'], ',.0f')} cycles/token = {sp['tokens_per_s']:,.0f} tokens/s "
             f"({sp['vs_k3']:.2f}x {refs})" if sp["measured"] else
             f"speed      : not measured yet (K3 {K3_TOKENS_PER_S:,} tokens/s; port limit {PORT_LIMIT_TOKENS_PER_S:,})"]
    if z["total_mm2"] is None:
        lines.append("synthesis  : not run")
    else:
        lines.append(f"area       : {z['total_mm2']:.4f} mm2 = {z['logic_mm2']:.4f} logic + "
                     f"{z['macro_mm2']:.4f} macros "
                     f"({100 * z['budget_used']:.1f} % of 4 mm2), {z['cells']:,} cells ({z['top']})")
    pre, post = _slack_line(t["corners"], "pre"), _slack_line(t["corners"], "post")
    lines.append(f"timing pre : slack {pre} ns at {t['period_ns']} ns (OpenSTA, wire load)" if pre
                 else "timing     : not run")
    lines.append(f"timing post: slack {post} ns after placement (utilization {_f(p['utilization'], '.2f')})"
                 if post else "placement  : not run")
    if t["orfs_finish_setup_ws_ns"] is not None:
        lines.append(f"routed     : ORFS finish setup slack {t['orfs_finish_setup_ws_ns']:.3f} ns")
    lines += [f"warning    : {w}" for w in s["warnings"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- figures
def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _atomic(path: Path, write) -> None:
    """write(tmp) then rename: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    tmp.replace(path)


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    _atomic(path, lambda p: fig.savefig(p, format="png", dpi=100))
    _plt().close(fig)


def _engine_areas(stages: dict) -> tuple[list[tuple[str, float, float]], str | None]:
    """[(engine, logic µm², macro µm²)] from the synthesised hierarchy; from make blocks if the top is one module."""
    syn, blocks = stages["synth"]["data"], stages["blocks"]["data"]
    from_blocks = [(b["block"], b["area_um2"], (b["sram_bits"] + b["rom_bits"]) / 2**20 * UM2_PER_MIBIT)
                   for b in (blocks or {}).get("blocks", []) if "area_um2" in b]
    if from_blocks and (syn is None or len(syn["hierarchy"]["engines"]) == 1):
        return from_blocks, "blocks"
    if syn is None:
        return [], None
    macro: dict[str, float] = {}
    for m in syn["macros"]["instances"]:
        parts = m["path"].split(".")
        name = parts[1] if len(parts) > 2 else "(top-level logic)"       # a macro right under the top is top-level
        macro[name] = macro.get(name, 0.0) + m["area_um2"]
    rows = [(e["name"], e["area_um2"], macro.pop(e["name"], 0.0)) for e in syn["hierarchy"]["engines"]]
    return rows + [(n, 0.0, a) for n, a in macro.items()], "synth"


def _fig_area(stages: dict, path: Path) -> dict | None:
    rows, source = _engine_areas(stages)
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r[1] + r[2])
    if len(rows) > 25:
        rest = rows[:-24]
        rows = [("(others)", sum(r[1] for r in rest), sum(r[2] for r in rest))] + rows[-24:]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(rows) + 1.6))
    names, logic, macro = [r[0] for r in rows], [r[1] / 1e6 for r in rows], [r[2] / 1e6 for r in rows]
    ax.barh(names, logic, color="tab:blue", label="standard cells (typical corner)")
    ax.barh(names, macro, left=logic, color="tab:orange", label="macros at 1 mm²/Mibit")
    for y, (lg, mc) in enumerate(zip(logic, macro)):
        ax.text(lg + mc, y, f" {lg + mc:.3g}", va="center", fontsize=8)
    ax.set_xlabel("area (mm²)")
    ax.set_xlim(0, 1.7 * max(lg + mc for lg, mc in zip(logic, macro)))     # room for the labels and the legend
    ax.legend(loc="lower right", fontsize=8)
    total = sum(logic) + sum(macro)
    if source == "synth":
        ax.set_title(f"{stages['synth']['data']['top']}: area by engine, {total:.3g} mm² of 4 mm²", fontsize=10)
        caption = ("Area of each top-level instance of the synthesised design: standard cells plus its macros "
                   "priced at 1 mm²/Mibit")
    else:
        ax.set_title(f"engines synthesised one by one: {total:.3g} mm² together", fontsize=10)
        caption = ("Area of each engine synthesised on its own (the synthesised top is a single module or missing): "
                   "standard cells plus its SRAM/ROM bits priced at 1 mm²/Mibit")
    _save(fig, path)
    return {"caption": caption, "commands": [stages[source]["command"]]}


def _macro_bits(stages: dict) -> tuple[list[tuple[str, str, int]], str | None]:
    """[(label, msh_sram | msh_rom, bits)] per macro instance (per engine and type when there are many)."""
    syn, blocks = stages["synth"]["data"], stages["blocks"]["data"]
    if syn and syn["macros"]["bits"]:
        inst = syn["macros"]["instances"]
        if len(inst) <= 30:
            return [(m["path"].split(".", 1)[-1], m["type"], m["bits"]) for m in inst], "synth"
        grouped: dict[tuple[str, str], int] = {}
        for m in inst:
            key = (m["path"].split(".")[1] if m["path"].count(".") > 1 else "(top level)", m["type"])
            grouped[key] = grouped.get(key, 0) + m["bits"]
        return [(f"{e} ({t.removeprefix('msh_')}s)", t, b) for (e, t), b in grouped.items()], "synth"
    if blocks:
        kinds = (("msh_sram", "sram_bits"), ("msh_rom", "rom_bits"))
        rows = [(b["block"], t, b[k]) for b in blocks["blocks"] for t, k in kinds if b.get(k)]
        return rows, ("blocks" if rows else None)
    return [], None


def _fig_bits(stages: dict, path: Path) -> dict | None:
    rows, source = _macro_bits(stages)
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r[2])
    colors = {"msh_sram": "tab:purple", "msh_rom": "tab:olive"}
    plt = _plt()
    from matplotlib.patches import Patch
    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(rows) + 1.6))
    ax.barh([r[0] for r in rows], [r[2] for r in rows], color=[colors[r[1]] for r in rows])
    for y, (_, _, bits) in enumerate(rows):
        ax.text(bits, y, f" {bits:,} b = {bits / 2**20 * UM2_PER_MIBIT / 1e6:.3g} mm²", va="center", fontsize=8)
    total = sum(r[2] for r in rows)
    ax.set_xlabel("bits (DEPTH × WIDTH)")
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.set_xlim(0, 1.8 * rows[-1][2])                                     # room for the labels and the legend
    ax.legend(handles=[Patch(color=c, label=t) for t, c in colors.items()], loc="lower right", fontsize=8)
    ax.set_title(f"{total:,} bits = {total / 2**20:.3g} Mibit = {total / 2**20 * UM2_PER_MIBIT / 1e6:.3g} mm² "
                 f"({100 * total / SRAM_BUDGET_BITS:.2f} % of 4 MiB)", fontsize=10)
    _save(fig, path)
    what = "instance" if source == "synth" else "engine (make blocks)"
    return {"caption": f"SRAM and ROM bits by {what}, each priced at 1 Mibit = 1 mm² (SPEC §5)",
            "commands": [stages[source]["command"]]}


def _fig_slack(stages: dict, path: Path) -> dict | None:
    t = timing(stages)
    wire_load = ((stages["sta"]["data"] or {}).get("constraints") or {}).get("wire_load")
    wns = {w: {c: (v[w] or {}).get("wns_ns") for c, v in t["corners"].items()} for w in ("pre", "post")}
    series = [(f"pre-placement ({wire_load} wire load)", "sta", wns["pre"]),
              ("post-placement (placed-wire SPEF)", "place", wns["post"]),
              ("routed (ORFS finish, typical)", "orfs", {"typical": t["orfs_finish_setup_ws_ns"]})]
    series = [s for s in series if stages[s[1]]["data"] and any(v is not None for v in s[2].values())]
    if not series:
        return None
    corners = list(dict.fromkeys(c for s in series for c in s[2]))
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.9 * len(corners) + 2.5, 3.6))
    width = 0.8 / len(series)
    for i, (label, stage, vals) in enumerate(series):
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(corners))]
        ys = [vals.get(c) for c in corners]
        ax.bar([x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None], width, label=label,
               color={"sta": "tab:blue", "place": "tab:orange", "orfs": "tab:green"}[stage])
        for x, y in zip(xs, ys):
            ax.text(x, y or 0.0, "n/a" if y is None else f"{y:.2f}", ha="center",
                    va="bottom" if (y or 0.0) >= 0 else "top", fontsize=8)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(corners)), corners)
    ax.set_ylabel("worst setup slack (ns)")
    ax.margins(y=0.15)
    ax.legend(fontsize=8)
    data = stages[series[0][1]]["data"]
    ax.set_title(f"{data.get('top') or data.get('design')}: worst setup slack at {t['period_ns']} ns "
                 "(below 0 = fails)", fontsize=10)
    _save(fig, path)
    return {"caption": "Worst setup slack per corner: " + ", ".join(s[0] for s in series),
            "commands": [stages[s[1]]["command"] for s in series]}


def _fig_tokens(stages: dict, path: Path) -> dict:
    sp = speed(stages)
    bars = [("nano-K3 (ours)", sp["tokens_per_s"], "tab:blue"), ("K3's chip", K3_TOKENS_PER_S, "tab:gray"),
            ("streaming port limit", PORT_LIMIT_TOKENS_PER_S, "tab:red"),
            ("read roofline", READ_ROOFLINE_TOKENS_PER_S, "tab:pink")]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    for x, (label, v, c) in enumerate(bars):
        ax.bar(x, v or 0.0, color=c)
        ax.text(x, v or 0.0, "not measured yet" if v is None else f"{v:,.0f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars])
    ax.set_ylabel("tokens/s at 100 MHz")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.margins(y=0.12)
    ax.set_title("long run, 48 positions, group 128 (SPEC §8)", fontsize=10)
    _save(fig, path)
    build = Path(stages["sim"]["path"]).parent.parent
    if sp["measured"]:
        caption = f"Tokens/s of our {sp['run'] or sp['source']} run next to K3's chip, the port limit and the roofline"
        return {"caption": caption, "commands": [sp["command"]], "note": "reference bars: SPEC_NANO_KPU.md §8"}
    return {"caption": "Tokens/s: ours not measured yet (the chip's long run measures it); K3's chip, the port limit "
            "and the read roofline", "commands": [CHIP_SIM_COMMAND.format(build=build)],
            "note": "reference bars: SPEC_NANO_KPU.md §8; our bar is empty until that command has run"}


def _place_picture(key: str, what: str):
    def copy(stages: dict, path: Path) -> dict | None:
        place = stages["place"]["data"]
        src = place and place["files"].get(key) and Path(stages["place"]["path"]).parent / place["files"][key]
        if not src or not src.is_file():
            return None
        _atomic(path, lambda p: shutil.copyfile(src, p))
        return {"caption": what.format(top=place["top"]) + f" (copied from `{src}`)",
                "commands": [stages["place"]["command"]]}
    return copy


# file name in the report folder -> (report section, builder(stages, path) -> figure dict or None if no data)
FIGURES = {
    "tokens_per_s.png": ("speed", _fig_tokens),
    "area_by_engine.png": ("size", _fig_area),
    "memory_bits.png": ("size", _fig_bits),
    "slack_by_corner.png": ("timing", _fig_slack),
    "placement.png": ("placement", _place_picture("placement_png", "Placement of `{top}`, cells coloured by module")),
    "layout.png": ("placement", _place_picture("png", "Placed cells of `{top}` drawn from the GDS by KLayout")),
}


def make_figures(stages: dict, out: Path) -> list[dict]:
    figs = []
    for name, (section, build_fig) in FIGURES.items():
        fig = build_fig(stages, out / name)
        if fig is None:
            (out / name).unlink(missing_ok=True)
        else:
            figs.append({"file": name, "section": section, **fig})
    return figs


# ---------------------------------------------------------------------------------------------- markdown
def _embed(figs: list[dict], section: str) -> list[str]:
    md = []
    for f in figs:
        if f["section"] == section:
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
    rows = [("verdict", f"**{c['verdict']}** ({c['level']} `{c['top']}`, {_passed(c, unit)})" if unit else sim_nr),
            ("bit-exact with the fixed-point model", c["bit_exact_runs"] and f"{c['bit_exact_runs']} runs"),
            (f"min cosine with the float model (gate ≥ {COSINE_GATE})", _f(c["min_cosine"], ".6f", None)),
            (f"argmax agreement (gate ≥ {ARGMAX_GATE})", _f(c["argmax_agreement"], ".4f", None))]
    return [(q, v if v is not None else absent) for q, v in rows]


def _rows_speed(stages: dict, sp: dict) -> list[tuple[str, str]]:
    if not sp["measured"]:
        missing = f"not measured yet (`{CHIP_SIM_COMMAND.format(build=Path(stages['sim']['path']).parent.parent)}`)"
        return [("cycles/token (long run)", missing),
                ("tokens/s at 100 MHz",
                 f"{missing}; K3's chip {K3_TOKENS_PER_S:,}, port limit {PORT_LIMIT_TOKENS_PER_S:,}")]
    return [("cycles/token (long run)", _f(sp["cycles_per_token"], ",.1f")),
            ("tokens/s at 100 MHz", f"**{sp['tokens_per_s']:,.0f}** ({sp['vs_k3']:.2f}× K3's {K3_TOKENS_PER_S:,}; "
             f"port limit {PORT_LIMIT_TOKENS_PER_S:,}, read roofline {READ_ROOFLINE_TOKENS_PER_S:,})")]


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
            ('Yosys "Chip area"', f"{_f(z['yosys_chip_area_um2'], ',.1f')} µm²")]


def _rows_timing(stages: dict, t: dict) -> list[tuple[str, str]]:
    if not t["corners"]:
        rows = [("WNS per corner", _not_run(stages, "sta"))]
    else:
        rows = [(f"WNS {corner}, pre / post placement",
                 " / ".join(_f((v[w] or {}).get("wns_ns"), ".3f", "not run") for w in ("pre", "post")) + " ns")
                for corner, v in t["corners"].items()]
        worst = [max((v[w]["min_period_ns"] for v in t["corners"].values() if v[w] and v[w]["min_period_ns"] is not None),
                     default=None) for w in ("pre", "post")]
        rows.append(("shortest period, worst corner, pre / post",
                     " / ".join(_f(p, ".3f", "not run") for p in worst) + f" ns (clock {t['period_ns']} ns)"))
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
        md += [f"| {r['name']} | {r['passed']} | {_f(r.get('cycles'), ',')} | {_f(r.get('cycles_per_token'), ',.1f')} | "
               f"{_f(r.get('tokens_per_s'), ',.0f')} | {r.get('bit_exact')} | {_f(r.get('min_cosine'), '.6f')} | "
               f"{_f(r.get('argmax_agreement'), '.4f')} |" for r in sim["runs"]]
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
        md += _sta_table(place["sta"])
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


def _md_runtime(stages: dict) -> list[str]:
    """Wall-clock time of synthesis, STA and placement of the design, against the flow's 30-minute goal."""
    steps = [(k, stages[k]["data"].get("runtime_s") if stages[k]["data"] else None, stages[k]["command"])
             for k in ("synth", "sta", "place")]
    md = ["## Flow runtime", "", "| step | seconds | command |", "|---|---|---|"]
    md += [f"| {k} | {_f(t, ',.0f')} | `{cmd}` |" for k, t, cmd in steps]
    if all(t is not None for _, t, _ in steps):
        total = flow_seconds([stages[k]["data"] for k, _, _ in steps])
        verdict = "within" if total <= FLOW_MINUTES_GOAL * 60 else "over"
        md += [f"| total, wall clock | {total:,.0f} ({total / 60:.1f} min, {verdict} the {FLOW_MINUTES_GOAL}-minute "
               f"goal; steps that ran side by side count once) | |"]
    return md + [""]


def _md_place(stages: dict, figs: list[dict]) -> list[str]:
    p = placement(stages["place"]["data"])
    md = ["## Placement", ""]
    if p is None:
        return md + [_not_run(stages, "place"), ""]
    md += [f"`{p['top']}`: die {_f(p['die_mm2'], '.4f')} mm², utilization {_f(p['utilization'], '.3f')}, "
           f"{_f(p['cells_placed'], ',')} cells and {_f(p['macros_placed'], ',')} macros placed, "
           f"HPWL {_f(p['hpwl_um'], ',.0f')} µm.", ""]
    pics = _embed(figs, "placement")
    return md + (pics or ["No placement picture found next to place.json.", ""])


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
                 *(_f(r["wns_ns"].get(c), ".3f") for c in corners), r.get("tests", {}).get("status", "not run")]
        md.append("| " + " | ".join(cells) + " |")
    return md + [""]


def _md_orfs(stages: dict) -> list[str]:
    o = stages["orfs"]["data"]
    md = ["## Place and route (ORFS)", ""]
    if o is None:
        return md + [_not_run(stages, "orfs"), ""]
    a, rt = o["area"], o.get("route", {})
    md += [f"Die {_f(a.get('die_um2'), ',.1f')} µm², instances {_f(a.get('instance_um2'), ',.1f')} µm², utilization "
           f"{_f(a.get('utilization'))}; wirelength {_f(rt.get('wirelength_um'), ',.0f')} µm, DRC errors "
           f"{_f(rt.get('drc_errors'), ',')}; power {_f(o.get('power', {}).get('total_w'), '.4f')} W.", "",
           "| stage | setup WS ns | setup TNS ns | hold WS ns | hold TNS ns |", "|---|---|---|---|---|"]
    md += [f"| {s} | {_f(v.get('setup_ws'))} | {_f(v.get('setup_tns'))} | {_f(v.get('hold_ws'))} | {_f(v.get('hold_tns'))} |"
           for s, v in o["timing"].items()]
    return md + [""]


def markdown(stages: dict, figs: list[dict]) -> str:
    s = summary(stages)
    md = ["# nano-K3 flow report", ""]
    md += [f"> **Warning:** {w}." for w in s["warnings"]] + ([""] if s["warnings"] else [])
    md += ["## Headline", ""] + _headline(stages, s)
    md += ["## What ran", "", "| stage | status | source | produced by |", "|---|---|---|---|"]
    md += [f"| {k} | {v['status']}{' (' + v['error'] + ')' if v.get('error') else ''} | `{v['path']}` | `{v['command']}` |"
           for k, v in stages.items()] + [""]
    md += _md_sim(stages)
    md += ["## Speed (SPEC §8)", "", "tokens/s = 100 MHz / (RUN→DONE cycles of the long run / 48 positions).", ""]
    md += _embed(figs, "speed")
    md += _md_size(stages, figs) + _md_timing(stages, figs) + _md_place(stages, figs) + _md_runtime(stages)
    md += _md_blocks(stages) + _md_orfs(stages)
    return "\n".join(md) + "\n"


def write_report(build: Path, out: Path) -> dict:
    stages = load(build)
    out.mkdir(parents=True, exist_ok=True)
    figs = make_figures(stages, out)
    report = {"schema": "nano-k3/report/2", "summary": summary(stages), "figures": figs,
              "stages": {k: {kk: vv for kk, vv in v.items() if kk != "data"} for k, v in stages.items()}}
    for name, text in (("report.json", json.dumps(report, indent=1) + "\n"), ("report.md", markdown(stages, figs))):
        _atomic(out / name, lambda p, text=text: p.write_text(text))
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=Path("build"))
    ap.add_argument("--out", type=Path, default=Path("build/report"))
    ap.add_argument("--brief", action="store_true", help="print 5-8 lines, write nothing")
    args = ap.parse_args(argv)
    if args.brief:
        print(brief(load(args.build)))
        return 0
    report = write_report(args.build, args.out)
    missing = [k for k, v in report["stages"].items() if v["status"] != "ok"]
    print(f"wrote {args.out / 'report.md'} with {len(report['figures'])} figures"
          + (f" (not run: {', '.join(missing)})" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
