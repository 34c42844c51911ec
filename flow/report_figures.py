"""The report's figures (table ``FIGURES``): tokens/s, area by engine, memory bits, slack by corner, and
the placement and layout pictures (flow/report_layout.py).

A builder takes the loaded stages and the PNG path and returns the figure's entry for report.json
(caption, the commands behind its data, an optional note, and what the picture holds: title, axis labels,
legend), ``None`` when its stage did not run, or ``{"skipped": why}`` when the data exists but the
picture cannot be drawn. Every figure has a title, axis labels with units and a legend.
"""
from __future__ import annotations

from pathlib import Path

from flow.report_engines import Engines, engine_areas
from flow.report_summary import (K3_TOKENS_PER_S, PORT_LIMIT_TOKENS_PER_S, READ_ROOFLINE_TOKENS_PER_S, placed_text,
                                 speed, timing)
from flow.synth import SRAM_BUDGET_BITS, UM2_PER_MIBIT

CHIP_SIM_COMMAND = "python -m verification.sim --rtl {build}/rtl --out {build}/sim"   # what `make sim` runs
MAX_BARS = 25                 # more rows than this: the smallest are summed into "(others)"
COLORS = {"logic": "tab:blue", "msh_sram": "tab:orange", "msh_rom": "tab:olive"}


def plt_():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def atomic(path: Path, write) -> None:
    """write(tmp) then rename: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    tmp.replace(path)


def save(fig, ax, path: Path, dpi: int = 100) -> dict:
    """Write the PNG; returns what it shows (title, axis labels, legend entries) for report.json."""
    legend = ax.get_legend() or (fig.legends[0] if fig.legends else None)
    drawn = {"title": ax.get_title(), "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel(),
             "legend": [t.get_text() for t in legend.get_texts()] if legend else []}
    fig.tight_layout()
    atomic(path, lambda p: fig.savefig(p, format="png", dpi=dpi, bbox_inches="tight"))   # legends outside the axes
    plt_().close(fig)
    return drawn


def area_text(um2: float) -> str:
    """mm² to 3 digits; µm² below 0.001 mm² (a block, a lone buffer) rather than 7.98e-07 mm²."""
    return f"{um2 / 1e6:.3g} mm²" if um2 >= 1e3 else f"{um2:,.1f} µm²"


# ---------------------------------------------------------------------------------------------- area
def _area_rows(stages: dict) -> tuple[list[tuple[str, float, float, float]], str | None]:
    """[(engine, logic, SRAM macro, ROM macro µm²)] from the synthesised hierarchy; from make blocks when
    the synthesised top is one module (no engines to split it into)."""
    syn, blocks = stages["synth"]["data"], stages["blocks"]["data"]
    per_mibit = UM2_PER_MIBIT / 2**20
    from_blocks = [(b["block"], b["area_um2"], b["sram_bits"] * per_mibit, b["rom_bits"] * per_mibit)
                   for b in (blocks or {}).get("blocks", []) if "area_um2" in b]
    if from_blocks and (syn is None or len(syn["hierarchy"]["engines"]) == 1):
        return from_blocks, "blocks"
    if syn is None:
        return [], None
    return [(r["engine"], r["logic_um2"], r["sram_um2"], r["rom_um2"]) for r in engine_areas(syn)], "synth"


def _stacked_barh(ax, rows: list[tuple], labels: list[str], colors: list[str], unit: float) -> None:
    """Horizontal bars of rows (name, part, part, ...) stacked part after part, the total written at the end."""
    names = [r[0] for r in rows]
    left = [0.0] * len(rows)
    for k, (label, color) in enumerate(zip(labels, colors), start=1):
        vals = [r[k] / unit for r in rows]
        ax.barh(names, vals, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, vals)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {area_text(total * unit)}", va="center", fontsize=8)
    ax.set_xlim(0, 1.5 * max(left, default=1.0) or 1.0)          # room for the labels and the legend


def fig_area(stages: dict, path: Path) -> dict | None:
    rows, source = _area_rows(stages)
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: sum(r[1:]))
    if len(rows) > MAX_BARS:
        rest = rows[:-(MAX_BARS - 1)]
        rows = [("(others)", *(sum(r[k] for r in rest) for k in (1, 2, 3)))] + rows[-(MAX_BARS - 1):]
    plt = plt_()
    fig, ax = plt.subplots(figsize=(8, 0.34 * len(rows) + 1.8))
    _stacked_barh(ax, rows, ["standard-cell logic (Nangate45 typical)", "msh_sram macros (1 mm²/Mibit)",
                             "msh_rom macros (1 mm²/Mibit)"], [COLORS["logic"], COLORS["msh_sram"], COLORS["msh_rom"]],
                  1e6)
    ax.set_xlabel("area (mm²)")
    ax.legend(loc="lower right", fontsize=8)
    total = sum(sum(r[1:]) for r in rows) / 1e6
    if source == "synth":
        syn = stages["synth"]["data"]
        wrapper = Engines.from_synth(syn).wrapper
        ax.set_ylabel(f"engine (instance under {syn['top']}{'.' + wrapper if wrapper else ''})")
        ax.set_title(f"{syn['top']}: area by engine, logic and macros, {total:.3g} mm² of 4 mm²", fontsize=10)
        caption = ("Area of each engine: its standard cells plus the msh_sram / msh_rom instances its hierarchy "
                   "holds, each priced at 1 mm²/Mibit (SPEC §5)")
    else:
        ax.set_ylabel("engine (synthesised on its own)")
        ax.set_title(f"engines synthesised one by one: {total:.3g} mm² together, logic and macros", fontsize=10)
        caption = ("Area of each engine synthesised on its own (the synthesised top is a single module or missing): "
                   "standard cells plus its SRAM / ROM bits priced at 1 mm²/Mibit")
    return {"caption": caption, "commands": [stages[source]["command"]], **save(fig, ax, path)}


# ---------------------------------------------------------------------------------------------- memory bits
def _macro_bits(stages: dict) -> tuple[list[tuple[str, str, int]], str | None]:
    """[(label, msh_sram | msh_rom, bits)] per macro instance (per engine and type when there are many)."""
    syn, blocks = stages["synth"]["data"], stages["blocks"]["data"]
    if syn and syn["macros"]["bits"]:
        inst = syn["macros"]["instances"]
        if len(inst) <= 30:
            return [(m["path"].split(".", 1)[-1], m["type"], m["bits"]) for m in inst], "synth"
        eng, grouped = Engines.from_synth(syn), {}
        for m in inst:
            key = (eng.of_macro(m["path"]), m["type"])
            grouped[key] = grouped.get(key, 0) + m["bits"]
        return [(f"{e}, {'SRAMs' if t == 'msh_sram' else 'ROMs'}", t, b) for (e, t), b in grouped.items()], "synth"
    if blocks:
        kinds = (("msh_sram", "sram_bits"), ("msh_rom", "rom_bits"))
        rows = [(b["block"], t, b[k]) for b in blocks["blocks"] for t, k in kinds if b.get(k)]
        return rows, ("blocks" if rows else None)
    return [], None


def fig_bits(stages: dict, path: Path) -> dict | None:
    rows, source = _macro_bits(stages)
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r[2])
    plt = plt_()
    from matplotlib.patches import Patch
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.8))
    ax.barh([r[0] for r in rows], [r[2] for r in rows], color=[COLORS[r[1]] for r in rows])
    for y, (_, _, bits) in enumerate(rows):
        ax.text(bits, y, f" {bits:,} b = {area_text(bits / 2**20 * UM2_PER_MIBIT)}", va="center", fontsize=8)
    total = sum(r[2] for r in rows)
    ax.set_xlabel("size (bits, DEPTH × WIDTH)")
    per_instance = source == "synth" and len(stages["synth"]["data"]["macros"]["instances"]) <= 30
    ax.set_ylabel("macro instance (path under the top)" if per_instance else "engine (macro type)")
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.set_xlim(0, 1.8 * rows[-1][2])                                     # room for the labels and the legend
    ax.legend(handles=[Patch(color=COLORS[t], label=t) for t in ("msh_sram", "msh_rom")], loc="lower right",
              fontsize=8)
    ax.set_title(f"on-chip memory: {total:,} bits = {total / 2**20:.3g} Mibit = "
                 f"{total / 2**20 * UM2_PER_MIBIT / 1e6:.3g} mm² ({100 * total / SRAM_BUDGET_BITS:.2f} % of 4 MiB)",
                 fontsize=10)
    what = "instance" if source == "synth" else "engine (make blocks)"
    return {"caption": f"SRAM and ROM bits by {what}, each priced at 1 Mibit = 1 mm² (SPEC §5)",
            "commands": [stages[source]["command"]], **save(fig, ax, path)}


# ---------------------------------------------------------------------------------------------- slack
def fig_slack(stages: dict, path: Path) -> dict | None:
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
    plt = plt_()
    fig, ax = plt.subplots(figsize=(1.9 * len(corners) + 2.5, 3.8))
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
    ax.set_xlabel("process corner (Nangate45 liberty)")
    ax.set_ylabel("worst setup slack (ns)")
    ax.margins(y=0.15)
    ax.legend(fontsize=8)
    data = stages[series[0][1]]["data"]
    ax.set_title(f"{data.get('top') or data.get('design')}: worst setup slack at {t['period_ns']} ns "
                 "(below 0 = fails)", fontsize=10)
    return {"caption": "Worst setup slack per corner: " + ", ".join(s[0] for s in series),
            "commands": [stages[s[1]]["command"] for s in series], **save(fig, ax, path)}


# ---------------------------------------------------------------------------------------------- tokens/s
def _tokens_bars(sp: dict) -> list[tuple[str, float | None, str, str, str]]:
    """(tick label, tokens/s or None, colour, text when None, legend entry) per bar."""
    p = sp["placed"]
    placed_label = (f"ours at the placed\nclock ({p['mhz']:.1f} MHz)" if p["status"] == "placed"
                    else "ours at the\nplaced clock")
    placed_none = {"no placement": "no placement\nresult", "no period": "no period\nafter placement"}.get(
        p["status"], "not measured yet")
    return [("ours at 100 MHz", sp["tokens_per_s"], "tab:blue", "not measured yet",
             f"ours, measured ({sp['source'] or 'not yet'}) at 100 MHz"),
            (placed_label, p.get("tokens_per_s"), "tab:cyan", placed_none,
             "ours, same cycles/token at the slowest corner's clock after "
             + ("sign-off's repair" if str(p.get("path", "")).endswith("signoff.json") else "placement")),
            ("K3's chip", K3_TOKENS_PER_S, "tab:gray", "", "K3's chip at 100 MHz (SPEC §8)"),
            ("port limit", PORT_LIMIT_TOKENS_PER_S, "tab:red", "",
             "port limit: weights read + logits written every token (SPEC §8)"),
            ("read roofline", READ_ROOFLINE_TOKENS_PER_S, "tab:pink", "",
             "read roofline: weights read every token (SPEC §8)")]


def fig_tokens(stages: dict, path: Path) -> dict:
    sp = speed(stages)
    bars = _tokens_bars(sp)
    plt = plt_()
    from matplotlib.patches import Patch
    fig, ax = plt.subplots(figsize=(9, 5.4))
    for x, (_, v, c, none, _) in enumerate(bars):
        ax.bar(x, v or 0.0, color=c)
        ax.text(x, v or 0.0, none if v is None else f"{v:,.0f}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_xlabel("design (SPEC §8 long run: 48 positions, group 128)")
    ax.set_ylabel("throughput (tokens/s)")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
    ax.set_ylim(0, 1.3 * max(b[1] or 0.0 for b in bars))
    ax.legend(handles=[Patch(color=b[2], label=b[4]) for b in bars], loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=2, fontsize=8, frameon=False)
    if sp["measured"]:
        ax.text(0.99, 0.97, "weights stay on chip after one load of the tensor block:\nper token the chip reads "
                "only the token's embedding row and\nwrites its logits; SPEC §8's port limit and roofline\nassume "
                "every weight streamed from memory each token", transform=ax.transAxes, ha="right", va="top",
                fontsize=7.5, bbox={"facecolor": "white", "edgecolor": "0.7"})
    ax.set_title("tokens/s: ours at 100 MHz and at the placed clock, next to SPEC §8's figures", fontsize=10)
    drawn = save(fig, ax, path)
    build = Path(stages["sim"]["path"]).parent.parent
    if sp["measured"]:
        caption = (f"Tokens/s of our {sp['run'] or sp['source']} run at 100 MHz and at the placed chip's clock, next "
                   "to K3's chip, the port limit and the read roofline")
        note = (f"reference bars: SPEC_NANO_KPU.md §8; {sp['why_faster']}; at the placed clock: "
                f"{placed_text(sp['placed'])}")
        commands = [sp["command"]] + ([sp["placed"]["command"]] if sp["placed"]["status"] == "placed" else [])
        return {"caption": caption, "commands": commands, "note": note, **drawn}
    return {"caption": "Tokens/s: ours not measured yet (the chip's long run measures it); K3's chip, the port limit "
            "and the read roofline", "commands": [CHIP_SIM_COMMAND.format(build=build)],
            "note": "reference bars: SPEC_NANO_KPU.md §8; our bars are empty until that command has run", **drawn}
