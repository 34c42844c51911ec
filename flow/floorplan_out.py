"""The floorplan as JSON (``floorplan.json``: regions, macros, I/O pins, nets between regions) and as a
picture (``floorplan.png``), for the region flow (flow/floorplan.py) and the flat one (a single region)."""
from __future__ import annotations

from pathlib import Path

from flow.floorplan import RegionPlan, adjacent
from flow.place_flat import Floorplan
from flow.place_netlist import Design

SCHEMA = "nano-k3/floorplan/1"
FLAT = "(flat: the whole design)"
LINKS_DRAWN = 12          # the busiest pairs of regions get a line in the picture


def floorplan_json(top: str, d: Design, fp: Floorplan, dbu: int, utilization: float,
                   plan: RegionPlan | None = None) -> dict:
    """Everything in micrometres; ``plan`` None: the flat floorplan, one region over the core."""
    um = lambda v: round(v / dbu, 3)                                 # noqa: E731
    rh = fp.row_height
    if plan is None:
        area = sum(d.comp_w[i] * d.comp_h[i] for i in range(d.n_std))
        rows = sum(r.num_x * r.step_x for r in fp.rows) * rh
        regions = [{"name": FLAT, "rect_um": [um(v) for v in fp.core], "cells": d.n_std,
                    "cell_area_um2": round(area / dbu ** 2, 3), "synth_area_um2": None,
                    "row_area_um2": round(rows / dbu ** 2, 3), "utilization": round(area / rows, 4) if rows else None,
                    "macros": len(d.comp_name) - d.n_std, "macro_edge": "bottom (shelves from the lower-left corner)",
                    "io_pins": len(d.io_name), "neighbours": []}]
        region_of, io_region, nets, mode = [0] * len(d.comp_name), [0] * len(d.io_name), {}, "flat"
    else:
        regions = []
        for k, r in enumerate(plan.regions):
            room = r.row_area(rh)
            regions.append({
                "name": r.name, "rect_um": [um(v) for v in r.rect], "cells": r.cells,
                "cell_area_um2": round(r.cell_area / dbu ** 2, 3), "synth_area_um2": r.synth_area_um2,
                "row_area_um2": round(room / dbu ** 2, 3), "utilization": round(r.cell_area / room, 4) if room else None,
                "macros": len(r.macros), "macro_edge": r.macro_edge or None,
                "io_pins": plan.io_region.count(k),
                "neighbours": [o.name for j, o in enumerate(plan.regions) if j != k and adjacent(r.rect, o.rect)]})
        region_of, io_region, nets, mode = plan.region_of, plan.io_region, plan.nets, "regions"
    names = [r["name"] for r in regions]
    return {
        "schema": SCHEMA, "top": top, "mode": mode, "utilization_target": utilization,
        "die_um": [um(v) for v in fp.die], "core_um": [um(v) for v in fp.core],
        "row_height_um": um(rh), "rows": len(fp.rows),
        "regions": regions,
        "nets_between_regions": [{"a": names[a], "b": names[b], "nets": round(v, 2),
                                  "adjacent": adjacent(plan.regions[a].rect, plan.regions[b].rect)}
                                 for (a, b), v in sorted(nets.items(), key=lambda kv: -kv[1])] if plan else [],
        "macros": [{"name": d.comp_name[i], "master": d.comp_master[i], "region": names[region_of[i]],
                    "rect_um": [um(x), um(y), um(x + d.comp_w[i]), um(y + d.comp_h[i])]}
                   for i, (x, y) in sorted(fp.macro_xy.items())],
        "io": [{"name": d.io_name[k], "direction": d.io_dir[k], "x_um": um(x), "y_um": um(y), "edge": edge,
                "region": names[io_region[k]]} for k, (x, y, edge) in enumerate(fp.io_xy)],
    }


def _short(name: str) -> str:
    """A region's label: the engine's own instance name (``core/mac`` -> ``mac``)."""
    return name if name.startswith("(") else name.rsplit("/", 1)[-1]


def draw_floorplan(fj: dict, path: Path) -> dict:
    """Regions coloured by engine (legend: cells, area, utilisation), macros, I/O pins, the busiest links;
    returns what it shows (title, axis labels, legend entries)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    x0, y0, x1, y1 = fj["die_um"]
    W, H = x1 - x0, y1 - y0
    fig, ax = plt.subplots(figsize=(11, max(4.0, 8.5 * H / W) + 0.8), dpi=150)
    cmap = plt.get_cmap("tab20")
    ax.add_patch(Rectangle((x0, y0), W, H, fill=False, ec="black", lw=1.0))
    handles, centre = [], {}
    for k, r in enumerate(fj["regions"]):
        a0, b0, a1, b1 = r["rect_um"]
        colour = cmap((2 * k) % 20 + (2 * k) // 20 % 2)         # tab20's dark hues first, then the light ones
        ax.add_patch(Rectangle((a0, b0), a1 - a0, b1 - b0, fc=colour, ec="#333333", lw=0.8, alpha=0.55))
        centre[r["name"]] = ((a0 + a1) / 2, (b0 + b1) / 2)
        util = "-" if r["utilization"] is None else f"{100 * r['utilization']:.0f} %"
        ax.text(*centre[r["name"]], _short(r["name"]), ha="center", va="center", fontsize=7, clip_on=True)
        handles.append(Patch(fc=colour, ec="#333333", alpha=0.55,
                             label=f"{r['name']}: {r['cells']:,} cells, {r['cell_area_um2'] / 1e3:,.1f}k µm², "
                                   f"rows {util}, {r['macros']} macros"))
    for m in fj["macros"]:
        a0, b0, a1, b1 = m["rect_um"]
        ax.add_patch(Rectangle((a0, b0), a1 - a0, b1 - b0, fc="#b0b8c8", ec="#1f3a60", lw=0.6, hatch="///"))
    links = fj["nets_between_regions"][:LINKS_DRAWN]
    top_nets = max((ln["nets"] for ln in links), default=1.0)
    for ln in links:
        (ax_, ay), (bx, by) = centre[ln["a"]], centre[ln["b"]]
        ax.plot([ax_, bx], [ay, by], color="black", alpha=0.5, lw=0.5 + 4 * ln["nets"] / top_nets,
                solid_capstyle="round")
    for direction, marker, colour in (("input", ">", "tab:green"), ("output", "<", "crimson")):
        pts = [(p["x_um"], p["y_um"]) for p in fj["io"] if p["direction"] == direction]
        if pts:
            ax.scatter(*zip(*pts), s=6, marker=marker, c=colour, zorder=3)
            handles.append(Line2D([], [], ls="", marker=marker, color=colour, label=f"{len(pts)} {direction} pins"))
    handles.append(Patch(fc="#b0b8c8", ec="#1f3a60", hatch="///", label=f"{len(fj['macros'])} fakeram45 macros"))
    if links:
        handles.append(Line2D([], [], color="black", alpha=0.5, lw=3,
                              label=f"nets between regions (busiest {len(links)}; widest {top_nets:,.0f})"))
    ax.set_xlim(x0 - 0.02 * W, x1 + 0.02 * W)
    ax.set_ylim(y0 - 0.02 * H, y1 + 0.02 * H)
    ax.set_aspect("equal")
    ax.set_xlabel("x (µm)")
    ax.set_ylabel("y (µm)")
    ax.set_title(f"{fj['top']}: floorplan ({'one region per engine' if fj['mode'] == 'regions' else 'flat'}), "
                 f"die {W:,.0f} × {H:,.0f} µm, row utilisation target {100 * fj['utilization_target']:.0f} %",
                 fontsize=10)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False,
              title="region (engine)", title_fontsize=8)
    fig.savefig(path, format="png", bbox_inches="tight")         # with the legend beside the die
    plt.close(fig)
    return {"title": ax.get_title(), "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel(),
            "legend": [h.get_label() for h in handles]}
