"""Placement of the synthesised netlist on Nangate45 rows with coloquinte, then post-placement timing.

    python -m flow.place [--synth build/synth] [--out build/place] [--utilization 0.6] [--effort 1]
                         [--flat] [--jobs N]

Steps (ARCHITECTURE.md, "Physical implementation"):

1. netlist (flow/place_netlist.py, flow/rtlil_flat.py): the STA netlist, flattened; every ``msh_sram`` becomes its grid of
   fakeram45 macros (flow/macro_map.py); every ``msh_rom``, and every ``msh_sram`` small enough to be
   cheaper as flip-flops, maps to logic that this netlist does not contain yet (its pins are left
   unplaced, and noted);
2. floorplan: by default one region per engine of the synthesis hierarchy, its macros at its edge,
   engines that share many nets side by side (flow/floorplan.py); with ``--flat`` one core with the
   macros packed from the lower-left corner (flow/place_flat.py). Either is written as
   ``floorplan.json`` and drawn as ``floorplan.png`` (flow/floorplan_out.py);
3. global placement: each region as its own coloquinte circuit with the other regions' pins as fixed
   terminals, ``--jobs`` regions at a time (flow/regions.py); ``--flat``: one circuit of everything. The
   placer sees logical nets: synthesis' buffer chains, which step 4 rebuilds, merged into the nets they
   drive (flow/place_nets.py). Cells are widened to ``PLACER_DENSITY`` of the rows so that they spread
   evenly. Nets with more than ``MAX_PLACE_FANOUT`` pins (clock, reset, pipeline enables) are not given to
   the placer, whose quadratic model they would dominate;
4. net repair (unless ``--no-repair``): every net with more than flow/repair.py's ``MAX_FANOUT`` sinks
   loses synthesis' buffer tree and gets one clustered by the sinks' global-placement positions, buffers
   sized by load (OpenROAD's repair_design, simplified); a new buffer belongs to the region it lands in;
5. legalisation on each region's rows (alternate rows flipped, ``FS``): each cell to its nearest row, in x
   order, moved as little as flow/row_legalize.py allows (coloquinte's legaliser moved cells up to a
   millimetre); x is then snapped to the site grid;
6. outputs: the placed flat netlist ``<top>.v`` (with the repaired trees; the DEF, SPEF and STA all use
   it), a placed DEF, wire parasitics estimated from the placed pins as SPEF (flow/parasitics.py),
   OpenSTA on every corner with them (flow/sta.py) and meanwhile a GDS of the placed cells and pictures
   (flow/gds.py), ``place.json`` and ``place.txt``.

Everything is written into ``<out>.tmp`` and replaces ``<out>`` when complete.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from flow.cli import collector_paused, job_count, publish, report_stage
from flow.fork import ForkError, beside
from flow.floorplan import RegionPlan, region_floorplan
from flow.floorplan_out import draw_floorplan, floorplan_json
from flow.lefdef import Lef
from flow.macro_map import MACRO_KEEPOUT_UM, MacroMapError, storage_lib, table
from flow.parasitics import RcModel, steiner_factor
from flow.place_flat import (MAX_PLACE_FANOUT, PLACER_DENSITY, Floorplan, PinPoints, RowSpots, floorplan,
                             global_placement, legalize, snap_to_sites)
from flow.place_netlist import Design, PlaceError, build_design, flatten, progress
from flow.place_out import (DEFERRED, STATE_FILE, copies_of, netlist_and_layout, read_lefs, save_state, wire_summary,
                             write_layout, write_outputs)
from flow.place_nets import placement_nets
from flow.regions import legalize_regions, place_regions, reassign
from flow.repair import RepairError, RepairResult, input_caps, repair, verify
from flow.sta import StaError, run_sta
from flow.synth import design_period_ns, liberty_areas
from pdk_config import PdkError, find_pdk
from pdk_config.nangate45 import CORNERS

REPO = Path(__file__).resolve().parent.parent
__all__ = ["PlaceError", "build_design", "flatten", "place"]     # flatten and build_design: tests/test_orfs.py


# ---------------------------------------------------------------------------------------------- repair

def repair_positions(module: dict, d: Design, fp: Floorplan, xs: list[int], ys: list[int], dbu: int,
                     clock: str) -> tuple[dict, dict, set[int]]:
    """What flow/repair.py needs of a placement: the position (um) per cell key (its centre; for an
    msh_sram, whose bits lie on different fakeram45 tiles, per (key, pin, bit): the pin on the tile that
    holds the bit, tiles being placed unflipped), the position per port bit, and the clock port's bits."""
    cell_xy: dict = {}
    for i, key in enumerate(d.comp_key):
        cell_xy.setdefault(key, ((xs[i] + d.comp_w[i] / 2) / dbu, (ys[i] + d.comp_h[i] / 2) / dbu))
    for sink, (i, _, ox, oy, *_) in d.macro_pins.items():
        cell_xy[sink] = ((xs[i] + ox) / dbu, (ys[i] + oy) / dbu)
    port_xy, k = {}, 0
    for port in module["ports"].values():
        for b in port["bits"]:
            port_xy[b] = (fp.io_xy[k][0] / dbu, fp.io_xy[k][1] / dbu)
            k += 1
    clock_bits = {b for b in module["ports"].get(clock, {}).get("bits", []) if isinstance(b, int)}
    return cell_xy, port_xy, clock_bits


def repair_nets(module: dict, d: Design, fp: Floorplan, xs: list[int], ys: list[int], lef: Lef, sizes,
                liberty: Path, rc: RcModel, clock: str) -> tuple[Design, list[int], list[int], RepairResult]:
    """Rebuilds the high-fanout buffer trees of ``module`` for the global placement ``xs``, ``ys``
    (flow/repair.py); returns the new design and start positions for legalisation (new buffers at the
    centres of their sinks)."""
    dbu = lef.dbu
    cell_xy, port_xy, clock_bits = repair_positions(module, d, fp, xs, ys, dbu, clock)
    text = liberty.read_text()
    res = repair(module, cell_xy, port_xy, input_caps(text), liberty_areas(liberty), (rc.c_h + rc.c_v) / 2,
                 steiner_factor, clock_bits, progress)
    try:
        verify(module, res)
    except RepairError as e:
        raise PlaceError(f"net repair broke the netlist: {e}") from None
    new = build_design(module, d.top, lef, sizes)
    pos = {name: (x, y) for name, x, y in zip(d.comp_name, xs, ys)}
    spots = RowSpots(fp)
    nxs, nys = [], []
    for i, name in enumerate(new.comp_name):
        if name in pos:
            x, y = pos[name]
        else:
            # a buffer at the centre of sinks on a macro's pins would start on the macro, off every row;
            # the legaliser then carried such buffers up to 1.4 mm away (the nano chip's worst max-cap nets)
            cx, cy = res.new_cells[new.comp_key[i]]
            x, y = spots.nearest(round(cx * dbu - new.comp_w[i] / 2), round(cy * dbu - new.comp_h[i] / 2),
                                 new.comp_w[i])
        nxs.append(x)
        nys.append(y)
    return new, nxs, nys, res


# ---------------------------------------------------------------------------------------------- driver

def _inputs(synth: Path, utilization: float, effort: int):
    """synth.json, the RTLIL netlist, the macros' empty modules and the PDK, checked."""
    if not 0.1 <= utilization <= 0.9:
        raise PlaceError(f"--utilization must be within 0.1 .. 0.9, got {utilization}")
    if not 1 <= effort <= 9:
        raise PlaceError(f"--effort must be within 1 .. 9, got {effort}")
    sj = Path(synth) / "synth.json"
    if not sj.is_file():
        raise PlaceError(f"{sj} not found: run `make synth` (python -m flow.synth) first")
    s = json.loads(sj.read_text())
    if not {"sta_rtlil", "macro_modules"} <= set(s["files"]):
        raise PlaceError(f"{sj} is from an older flow.synth (no RTLIL netlist): run `make synth` again")
    netlist, macros_v = (Path(synth) / s["files"][k] for k in ("sta_rtlil", "macro_modules"))
    for f in (netlist, macros_v):
        if not f.is_file():
            raise PlaceError(f"{f} not found (synth.json names it): run `make synth` again")
    try:
        pdk = find_pdk()
    except PdkError as e:
        raise PlaceError(str(e)) from None
    if pdk.cell_gds is None:
        raise PlaceError(f"the PDK at {pdk.root} has no gds/NangateOpenCellLibrary.gds (needed for the layout)")
    return s, netlist, macros_v, pdk


def _remap_macros(fp: Floorplan, old: Design, new: Design) -> None:
    """Macro positions keyed by the new design's component indices (repair changes the number of cells)."""
    by_name = {old.comp_name[i]: xy for i, xy in fp.macro_xy.items()}
    fp.macro_xy = {i: by_name[new.comp_name[i]] for i in range(new.n_std, len(new.comp_name))
                   if new.comp_name[i] in by_name}


def _place_cells(module: dict, d: Design, fp: Floorplan, plan: RegionPlan | None, effort: int, processes: int,
                 repair_args: tuple | None, timing: dict, log_dir: Path):
    """Global placement, net repair, legalisation into the rows and the site-grid check (``snap_to_sites``
    moves no cell after flow/row_legalize.py; place.json counts them): (design, xs, ys, orientations, stats,
    repair result)."""
    t = time.monotonic()
    nets, ignored = placement_nets(d, through_buffers=repair_args is not None)
    if plan is None:
        xs, ys, pstats = global_placement(d, fp, effort, nets)
    else:
        xs, ys, gstats = place_regions(d, plan, effort, processes, log_dir, nets)
        pstats = {"global_region_s": gstats["region_s"]}
    pstats["nets_ignored_by_placer"] = ignored
    timing["global_place_s"] = time.monotonic() - t
    fixed = None
    if repair_args is not None:
        t = time.monotonic()
        new, xs, ys, fixed = repair_nets(module, d, fp, xs, ys, *repair_args)
        _remap_macros(fp, d, new)
        if plan is not None:
            reassign(plan, d, new, xs, ys)
        d = new
        timing["repair_s"] = time.monotonic() - t
    t = time.monotonic()
    xs, ys, orient, lstats = legalize(d, fp, xs, ys) if plan is None else legalize_regions(d, plan, xs, ys)
    pstats.update(cells_spilled=lstats["cells_spilled"], mean_move_dbu=lstats["mean_move_dbu"])
    pstats["cells_moved_to_site_grid"] = snap_to_sites(d, fp, xs, ys)
    timing["legalize_s"] = time.monotonic() - t
    if plan is not None:
        d.comp_group = [plan.regions[k].name for k in plan.region_of]       # the pictures colour by region
        d.group_kind = "region (engine)"
    return d, xs, ys, orient, pstats, fixed


@collector_paused()
def place(synth: Path, out: Path, utilization: float = 0.6, effort: int = 1, corners: list[str] | None = None,
          period_ns: float | None = None, clock: str = "clk", picture: bool = True,
          cache: Path = REPO / "build" / "pdk_cache", repair_fanout: bool = True, flat: bool = False,
          jobs: int | None = None, sta: bool = True, outputs: bool = True) -> dict:
    """``sta=False``: no post-placement STA here (``python -m flow.sta --place <out>`` runs it, into
    ``<out>/sta``: make demo runs it after sign-off); place.json's ``sta`` is then null. ``outputs=False``
    (with ``sta=False``): only the state sign-off continues from, place.json and the floorplan; the placed
    netlist, DEF, SPEF and layout are written later from the state (flow/place_out.py ``write_deferred``,
    which ``flow.sta --place`` runs first), off the path from synthesis to sign-off."""
    t_start = time.monotonic()
    if sta and not outputs:
        raise PlaceError("the post-placement STA reads the placed netlist and SPEF: it needs the outputs "
                         "(drop --defer-outputs, or add --no-sta)")
    s, netlist, macros_v, pdk = _inputs(synth, utilization, effort)
    period_ns = design_period_ns(period_ns, s, PlaceError)      # None: the RTL's clock
    try:
        processes = job_count(jobs, "placement processes")
    except ValueError as e:
        raise PlaceError(str(e)) from None
    top = s["top"]
    corners = list(corners or pdk.corners)
    out = Path(out)
    stage = out.with_name(out.name + ".tmp")
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    timing = {}

    t = time.monotonic()
    lef = read_lefs(pdk)
    rc = RcModel.from_lef(lef)
    progress(f"{top}: reading and flattening {netlist} ...")
    liberty = pdk.plain_liberty("typical", cache)
    macro_modules = macros_v.read_text()
    module = flatten(netlist, macros_v, top, lef)
    progress(f"placement objects for {len(module['cells']):,} instances ({time.monotonic() - t:.0f} s) ...")
    try:
        sizes = storage_lib(pdk, cache)
        d = build_design(module, top, lef, sizes)
    except MacroMapError as e:
        raise PlaceError(str(e)) from None
    timing["netlist_s"] = time.monotonic() - t
    t = time.monotonic()
    plan = None if flat else region_floorplan(d, lef, utilization, s)
    fp = floorplan(d, lef, utilization) if flat else plan.fp
    timing["floorplan_s"] = time.monotonic() - t
    dbu = lef.dbu
    progress(f"die {fp.die[2] / dbu:.1f} x {fp.die[3] / dbu:.1f} um, "
             + ("one region" if flat else f"{len(plan.regions)} regions") + f", {len(fp.rows)} rows, "
             f"{d.n_std:,} cells, {len(d.comp_name) - d.n_std} macros, {len(d.io_name)} I/O pins")
    cells_before = d.n_std
    d, xs, ys, orient, pstats, fixed = _place_cells(
        module, d, fp, plan, effort, processes,
        (lef, sizes, liberty, rc, clock) if repair_fanout else None, timing, stage / "regions")

    t = time.monotonic()
    files = {"state": STATE_FILE, "macros": "macros.txt", "floorplan": "floorplan.json", "floorplan_png": "floorplan.png"}
    if outputs:
        progress(f"writing the placement state, {top}.v, DEF, SPEF, the floorplan"
                 + (" and the layout" if picture and not sta else "") + " (two processes) ...")
        files |= {"netlist": f"{top}.v", "def": f"{top}.def", "spef": f"{top}.spef"}
        # A forked copy writes the netlist (and the layout, when no STA waits for the files) while this
        # process writes the rest: independent reads of the same design, on two cores.
        side = beside(netlist_and_layout, stage, module, macro_modules, d, fp, xs, ys, orient, lef,
                      pdk if picture and not sta else None, copies=copies_of(d))
    else:
        progress("writing the placement state and the floorplan (the netlist, DEF, SPEF and layout later: "
                 f"python -m flow.place_out --place {out}) ...")
    save_state(stage / STATE_FILE, module, d, fp, xs, ys, orient, macro_modules)
    del module
    wires = (write_outputs(d, fp, lef, xs, ys, orient, stage, rc) if outputs
             else wire_summary(d, PinPoints.of(d, fp, xs, ys, orient), rc, dbu))
    (stage / "macros.txt").write_text(table(d.mappings))
    fj = floorplan_json(top, d, fp, dbu, utilization, plan)
    (stage / "floorplan.json").write_text(json.dumps(fj, indent=1) + "\n")
    draw_floorplan(fj, stage / "floorplan.png")
    if outputs:
        try:
            layout = side.result()
        except ForkError as e:
            raise PlaceError(f"writing {top}.v: {e}") from None
        files.update(layout.pop("files", {}))
        timing.update(layout)
    timing["outputs_s"] = time.monotonic() - t

    if sta:
        files["sta"] = "sta/sta.json"
        progress(f"post-placement STA at {corners}{', the layout meanwhile' if picture else ''} ...")
    # OpenSTA runs in child processes: this thread only waits for them, while the main one writes the layout.
    with ThreadPoolExecutor(max_workers=1) as pool:
        sta_run = pool.submit(run_sta, Path(synth), stage / "sta", corners, period_ns, clock, cache,
                              parasitics=stage / f"{top}.spef", netlist=stage / f"{top}.v") if sta else None
        if picture and sta:
            layout = write_layout(stage, d, fp, xs, ys, orient, lef, pdk)
            files.update(layout.pop("files"))
            timing.update(layout)
            progress(f"layout written ({timing['layout_s']:.0f} s); waiting for STA ...")
        try:
            sta = sta_run.result() if sta_run else None
        except StaError as e:
            raise PlaceError(f"post-placement STA failed: {e}") from None
    if sta:
        timing["sta_s"] = sta["runtime_s"]
    result = _result(s, d, fp, fj, dbu, wires, pstats, fixed, cells_before, sta, rc, timing, files,
                     {"utilization": utilization, "effort": effort, "period_ns": period_ns, "processes": processes,
                      "repair_fanout": repair_fanout, "t_start": t_start})
    if not outputs:
        result[DEFERRED] = {"layout": picture, "written": False,
                            "command": f"python -m flow.place_out --place {out}"}
    (stage / "place.json").write_text(json.dumps(result, indent=1) + "\n")
    (stage / "place.txt").write_text(summary_text(result))
    publish(stage, out)
    return result


def _result(s: dict, d: Design, fp: Floorplan, fj: dict, dbu: int, wires: dict, pstats: dict, fixed, cells_before,
            sta: dict, rc: RcModel, timing: dict, files: dict, opt: dict) -> dict:
    """place.json's content."""
    die_w, die_h = fp.die[2] / dbu, fp.die[3] / dbu
    std_area = sum(w * h for w, h in zip(d.comp_w[:d.n_std], d.comp_h[:d.n_std])) / dbu ** 2
    macro_area = sum(w * h for w, h in zip(d.comp_w[d.n_std:], d.comp_h[d.n_std:])) / dbu ** 2
    core_area = sum(r.num_x * r.step_x for r in fp.rows) * fp.row_height / dbu ** 2     # the rows' area
    regions = fj["mode"] == "regions"
    return {
        "schema": "nano-k3/place/1",
        "top": s["top"],
        "synth_config_sha256": s["rtl"]["config_sha256"],
        "die": {"width_um": round(die_w, 3), "height_um": round(die_h, 3), "area_um2": round(die_w * die_h, 3)},
        "core": {"x0_um": fp.core[0] / dbu, "y0_um": fp.core[1] / dbu, "x1_um": fp.core[2] / dbu,
                 "y1_um": fp.core[3] / dbu, "rows": len({r.y for r in fp.rows}), "row_stretches": len(fp.rows),
                 "site": fp.rows[0].site},
        "utilization": round(std_area / core_area, 4),
        "utilization_target": opt["utilization"],
        "die_utilization": round((std_area + macro_area) / (die_w * die_h), 4),
        "std_cell_area_um2": round(std_area, 3),
        "macro_area_um2": round(macro_area, 3),
        "cells_placed": d.n_std,
        "macros_placed": len(d.comp_name) - d.n_std,
        "io_pins": len(d.io_name),
        "nets": wires["nets"],
        "hpwl_um": round(wires["hpwl_um"], 1),
        "steiner_wire_um": round(wires["wire_um"], 1),
        "wire_cap_pf": round(wires["wire_cap_ff"] / 1e3, 3),
        "placer": {"tool": "coloquinte", "mode": fj["mode"], "effort": opt["effort"], "density": PLACER_DENSITY,
                   "processes": opt["processes"] if regions else 1,
                   "nets_ignored_above_fanout": MAX_PLACE_FANOUT,
                   "nets_ignored": pstats["nets_ignored_by_placer"],
                   "cells_moved_to_site_grid": pstats["cells_moved_to_site_grid"],
                   "nets_through_buffers": opt["repair_fanout"],
                   "legalizer": {"tool": "flow/row_legalize.py", "cells_spilled": pstats["cells_spilled"],
                                 "mean_move_um": round(pstats["mean_move_dbu"] / dbu, 3)},
                   **({"region_s": {"global": pstats["global_region_s"]}, "logs": "regions/<region>.log"}
                      if regions else {})},
        "floorplan": ({"mode": "regions", "regions": len(fj["regions"]),
                       "macros": "packed in shelves along the edge of their engine's region that faces the fewest "
                                 f"nets to other regions, FIXED, keep-out ring {MACRO_KEEPOUT_UM} um",
                       "io": "on the die edge next to the region their net reaches",
                       "file": files["floorplan"]} if regions else
                      {"mode": "flat",
                       "macros": "packed in shelves from the bottom-left corner, FIXED, keep-out ring "
                                 f"{MACRO_KEEPOUT_UM} um; rows around and above them",
                       "io": "inputs on the left then top edge, outputs on the right then bottom edge",
                       "file": files["floorplan"]}),
        "macros": [m.as_dict() for m in d.mappings],
        "roms_as_logic": d.roms,
        "srams_as_flops": d.flop_srams,
        "repair": ({"enabled": True, **fixed.as_dict(), "cells_before": cells_before, "cells_after": d.n_std}
                   if fixed else {"enabled": False}),
        "parasitics": rc.as_dict(),
        "sta": {c: {k: v[k] for k in ("wns_ns", "tns_ns", "worst_hold_slack_ns", "min_period_ns", "fmax_mhz", "met")}
                for c, v in sta["corners"].items()} if sta else None,
        "period_ns": opt["period_ns"],
        "runtime_s": round(time.monotonic() - opt["t_start"], 2),
        "finished_unix": round(time.time(), 1),
        "runtime_by_step_s": {k: round(v, 2) for k, v in timing.items()},
        "files": files,
        "metrics": {
            "place__design__die__area": round(die_w * die_h, 3),
            "place__design__utilization": round(std_area / core_area, 4),
            "place__design__instance__count__stdcell": d.n_std,
            "place__design__instance__count__macros": len(d.comp_name) - d.n_std,
            "place__route__wirelength__estimated": round(wires["hpwl_um"], 1),
            **{f"place__timing__setup__ws__{c}": v["wns_ns"] for c, v in (sta or {"corners": {}})["corners"].items()},
            **{f"place__timing__min_period__{c}": v["min_period_ns"]
               for c, v in (sta or {"corners": {}})["corners"].items()},
        },
    }

def summary_text(r: dict) -> str:
    die = r["die"]
    lines = [
        f"placement of {r['top']} on Nangate45 (coloquinte effort {r['placer']['effort']}, "
        + (f"one region per engine: {r['floorplan']['regions']} regions, {r['placer']['processes']} at a time)"
           if r["placer"]["mode"] == "regions" else "flat: one circuit)"),
        f"  die            {die['width_um']:.1f} x {die['height_um']:.1f} um = {die['area_um2'] / 1e6:.4f} mm2",
        f"  utilization    {100 * r['utilization']:.1f} % of the rows (target {100 * r['utilization_target']:.0f} %), "
        f"{100 * r['die_utilization']:.1f} % of the die with macros",
        f"  cells placed   {r['cells_placed']:,}   macros {r['macros_placed']}   I/O pins {r['io_pins']}",
        f"  wire length    HPWL {r['hpwl_um'] / 1e3:,.1f} mm, Steiner estimate {r['steiner_wire_um'] / 1e3:,.1f} mm, "
        f"{r['wire_cap_pf']:.1f} pF on {r['parasitics']['horizontal_layer']}/{r['parasitics']['vertical_layer']}",
        f"  runtime        {r['runtime_s']:.1f} s  {r['runtime_by_step_s']}",
        ("  net repair     " + (f"{r['repair']['nets_repaired']:,} nets rebuilt (largest fanout "
                                f"{r['repair']['largest_fanout']:,}): {r['repair']['buffers_removed']:,} buffers removed, "
                                f"{r['repair']['buffers_added']:,} added, {r['repair']['area_change_um2']:+,.1f} um2"
                                if r["repair"]["enabled"] else "off (--no-repair)")),
        "", f"post-placement timing at {r['period_ns']} ns (SPEF from placed wire lengths):",
        f"  {'corner':<8} {'WNS ns':>9} {'TNS ns':>10} {'hold ns':>9} {'min period ns':>14}",
    ]
    if r["sta"] is None:
        lines.append("  not run here (--no-sta): python -m flow.sta --place <this folder> times it")
    for c, v in (r["sta"] or {}).items():
        f = (lambda x: "-" if x is None else f"{x:.3f}")
        lines.append(f"  {c:<8} {f(v['wns_ns']):>9} {f(v['tns_ns']):>10} {f(v['worst_hold_slack_ns']):>9} "
                     f"{f(v['min_period_ns']):>14}")
    if r["macros"]:
        lines += ["", "storage mapping (flow/macro_map.py):"]
        lines += [f"  {m['path']:<36} {m['depth']}x{m['width']:<6} -> "
                  + (f"{m['count']} x {m['macro']}" if m["macro"] else m["impl"]) + f"  {m['note']}"
                  for m in r["macros"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.place", description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, default=Path("build/synth"), help="folder with synth.json")
    ap.add_argument("--out", type=Path, default=Path("build/place"))
    ap.add_argument("--utilization", type=float, default=0.6, help="standard-cell area / row area")
    ap.add_argument("--effort", type=int, default=1, help="coloquinte effort 1..9 (1: the chip, 1.9M cells, in the least time)")
    ap.add_argument("--flat", action="store_true",
                    help="one coloquinte placement of the whole design instead of one per engine region")
    ap.add_argument("--jobs", type=int, default=None,
                    help="regions placed at a time, each in its own process (default: the CPUs this process may use)")
    ap.add_argument("--corners", nargs="+", default=list(CORNERS), choices=CORNERS)
    ap.add_argument("--period", type=float, help="clock period in ns (default: the RTL's, params.clock_ns of its "
                                                 "config.json)")
    ap.add_argument("--clock", default="clk")
    ap.add_argument("--no-picture", action="store_true", help="skip the GDS and PNG")
    ap.add_argument("--no-repair", action="store_true", help="keep synthesis' buffer trees (flow/repair.py)")
    ap.add_argument("--no-sta", action="store_true", help="skip the post-placement STA (python -m flow.sta --place "
                                                          "<out> runs it later; make demo runs it after sign-off)")
    ap.add_argument("--defer-outputs", action="store_true",
                    help="with --no-sta: write only the state sign-off reads, place.json and the floorplan; the "
                         "netlist, DEF, SPEF and layout later (python -m flow.place_out --place <out>, or "
                         "flow.sta --place, which writes them first)")
    args = ap.parse_args(argv)
    return report_stage("flow.place", PlaceError,
                        lambda: place(args.synth, args.out, args.utilization, args.effort, args.corners, args.period,
                                      args.clock, not args.no_picture, repair_fanout=not args.no_repair,
                                      flat=args.flat, jobs=args.jobs, sta=not args.no_sta,
                                      outputs=not args.defer_outputs),
                        summary_text, lambda r: [args.out / "place.json", args.out / r["files"].get("def", STATE_FILE)])


if __name__ == "__main__":
    sys.exit(main())
