"""Timing repair after placement and sign-off of the placed chip.

    python -m flow.signoff [--place build/place] [--synth build/synth] [--out build/signoff]
                           [--period NS] [--budget 900]

Continues from ``make place`` (its ``placed.pickle``: the flat netlist, the placement and the floorplan):

0. electrical repair (flow/electrical.py): nets over their driver's max capacitance get a stronger driver
   (short nets) or become buffer trees with repeaters, fitted into the rows; netlist, DEF and SPEF are
   written again for what follows;
1. sizing (flow/resize.py): one OpenSTA process at the slow corner, with the placed wires' SPEF and the
   sign-off clock uncertainty, sizes up the drivers on the violating paths until the worst slack is met,
   stops improving or ``--budget`` seconds are used;
   then, where sizing stops, load isolation (flow/rebuffer.py): a critical stage keeps its critical sink and
   hands its other sinks to a new buffer, and sizing runs again;
2. hold (flow/hold.py): a second OpenSTA process at the fast corner takes the same buffers and sizes and
   puts delay buffers in front of the data pins whose hold check fails;
3. the sized cells and the new buffers go into the netlist; the placement is re-legalised row by row
   (flow/relegalize.py: stronger cells are wider, a buffer starts at its sink); the electrical repair runs
   again for the nets that sizing and re-legalisation pushed over max capacitance (the isolation and hold
   buffers stay); netlist, DEF and SPEF are written again from the new positions;
4. sign-off STA (flow/sta.py) at slow, typical and fast with that SPEF and a clock uncertainty of
   ``SETUP_UNCERTAINTY_NS`` (setup) and ``HOLD_UNCERTAINTY_NS`` (hold) in place of a clock tree's skew and
   jitter (no clock tree is built): setup WNS/TNS per corner, hold at every corner, max-transition
   violations (OpenSTA), max-capacitance and max-fanout violations (flow/design_rules.py);
   when setup fails at a corner or a pin is over a transition or capacitance limit, a touch-up
   (flow/touchup.py) sizes cells in an OpenSTA session on the written netlist and SPEF, the placement is
   re-legalised and written again, and step 4 runs again (at most ``TOUCHUPS`` times);
5. the routing demand of the final placement (flow/rudy.py), drawn as ``rudy.png``.

``signoff.json`` says whether the chip signs off: setup met at every corner, hold met at the fast
corner, and no transition, capacitance or fanout violation. Written into ``<out>.tmp``, then moved.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from flow import design_rules, hold, rebuffer, rudy, touchup
from flow.cli import collector_paused, publish, report_stage
from flow.macro_map import MacroMapError, storage_lib
from flow.parasitics import RcModel, macro_rects
from flow.place_out import STATE_FILE, load_state, read_lefs, write_deferred, write_placed
from flow.place_flat import PinPoints
from flow.place_netlist import PROGRESS_TAG, PlaceError, progress
from flow.relegalize import relegalize
from flow.electrical import rebuilt, repair_design
from flow.repair import RepairError, input_caps
from flow.resize import measure, resize, size_ladders, swap
from flow.sta import StaError, constraints_tcl, memory_jobs, run_sta
from flow.sta_session import StaSession, StaSessionError
from flow.synth import liberty_areas
from flow.toolchain import ToolError
from pdk_config import PdkError, find_pdk
from pdk_config.nangate45 import CORNERS

REPO = Path(__file__).resolve().parent.parent
SETUP_UNCERTAINTY_NS = 0.3
HOLD_UNCERTAINTY_NS = 0.05
SIZING_CORNER = "slow"
ALTERNATIONS = 4                # turns of load isolation then sizing after the first sizing
TOUCHUPS = 2                    # sign-off STA, touch-up (flow/touchup.py), sign-off STA ... at most this often
TOUCHUP_BUDGET_S = 300.0        # seconds each touch-up's sizing may take
HOLD_CORNER = "fast"


class SignoffError(RuntimeError):
    """Sign-off could not run; the message says why and what to run first."""


def _session(stage: Path, corner: str, liberty: Path, netlist: Path, spef: Path, top: str, clock: str,
             period_ns: float, log: str | None = None, ahead: bool = False) -> StaSession:
    """An OpenSTA session with the design read and constrained. ``ahead``: returns at once, the session
    reading and then timing the design (min and max) on its own core while the caller goes on."""
    sta = StaSession(stage / (log or f"{corner}_session.log"))
    progress(f"{corner} corner: reading {netlist.name} and {spef.name} into OpenSTA"
             + (" beside the sizing ..." if ahead else " ..."))
    load = (f"read_liberty {{{liberty}}}\nread_verilog {{{netlist}}}\nlink_design {{{top}}}\n"
            + constraints_tcl(clock, period_ns, (SETUP_UNCERTAINTY_NS, HOLD_UNCERTAINTY_NS))
            + f"\nread_spef {{{spef}}}")
    if ahead:
        sta.submit(load)
        sta.submit("sta::worst_slack_cmd min")
    else:
        sta.run(load)
    return sta


def _repair(pdk, cache: Path, netlist: Path, spef: Path, module: dict, top: str, clock: str, period_ns: float,
            budget_s: float, stage: Path, rb_geometry: tuple):
    """Sizing at the slow corner, load isolation on the paths sizing leaves failing, sizing again; then hold
    buffers at the fast corner on that netlist. The fast corner's session reads the design beside the
    sizing when memory holds two sessions (``memory_jobs``), and takes the sizing's changes after it.
    ``rb_geometry``: (cell centre um, cell type, input pin caps, wire fF per um) for flow/rebuffer.py."""
    slow = pdk.plain_liberty(SIZING_CORNER, cache).resolve()
    fast = pdk.plain_liberty(HOLD_CORNER, cache).resolve()
    ladders = size_ladders(list(liberty_areas(slow)))
    taken = set(module["cells"])
    t0 = time.monotonic()
    with ExitStack() as later:
        early = None
        if memory_jobs(netlist, spef, 2) >= 2:
            early = later.enter_context(_session(stage, HOLD_CORNER, fast, netlist, spef, top, clock, period_ns,
                                                 ahead=True))
        with _session(stage, SIZING_CORNER, slow, netlist, spef, top, clock, period_ns) as sta:
            sized = resize(sta, ladders, 0.0, budget_s, progress)
            wns, tns = measure(sta)
            rb = rebuffer.Rebuffer(sta, *rb_geometry, taken)
            moved = rebuffer.RebufferResult()
            for _ in range(ALTERNATIONS):          # isolation and sizing in turn, while a turn improves the slack
                more, wns_rb, tns = rebuffer.rebuffer(rb, lambda: measure(sta), wns, tns, 0.0, progress)
                moved.moves += more.moves
                moved.rounds += more.rounds
                left = budget_s - (time.monotonic() - t0)
                if not more.moves or wns_rb >= 0 or left <= 0:
                    wns = wns_rb
                    break
                sized.merge(resize(sta, ladders, 0.0, left, progress))
                wns_now, tns = measure(sta)
                if wns_now <= wns + rebuffer.MIN_GAIN_NS:
                    wns = wns_now
                    break
                wns = wns_now
        sta = early or later.enter_context(_session(stage, HOLD_CORNER, fast, netlist, spef, top, clock, period_ns))
        rebuffer.replay(sta, moved)
        swap(sta, sized.replaced)
        held = hold.fix_hold(sta, taken, progress)
    return sized, moved, held


def _rebuild(module: dict, top: str, lef, sizes, d, fp, xs, ys, orient, held: hold.HoldResult,
             moved: rebuffer.RebufferResult):
    """The placement objects of the repaired netlist, with the placed positions; a hold buffer starts at
    its sink's place, a load-isolation buffer at the centre of its sinks (flow/relegalize.py finds each a
    site, in the region of the cell nearest to it). The macros' floorplan positions are re-keyed."""
    sink_of = {buf: inst for buf, inst, _ in held.inserted}
    near = {m.buffer: (m.moved[0].rsplit("/", 1)[0], m.xy) for m in moved.moves}

    def new_cell(new, i: int, at: dict[str, int]):
        name = new.comp_name[i]
        if name in near:
            # the placed cell a load-isolation buffer takes its orientation and group from: its first moved
            # sink's, through the buffers of earlier rounds that a later round moved
            (cx, cy), src = near[name][1], name
            while src in near:
                src = near[src][0]
            k = at[src]
            return round(cx * lef.dbu - new.comp_w[i] / 2), round(cy * lef.dbu - new.comp_h[i] / 2), orient[k], \
                d.comp_group[k]
        src = sink_of[name]
        while src in sink_of:                    # a chain: the buffer next to the flip-flop first
            src = sink_of[src]
        k = at[src]
        return xs[k], ys[k], orient[k], d.comp_group[k]

    return rebuilt(module, top, lef, sizes, d, fp, xs, ys, orient, new_cell)


def _net_boxes(d, fp, xs, ys, orient, dbu: int) -> np.ndarray:
    return PinPoints.of(d, fp, xs, ys, orient).boxes() / dbu


def _write_and_time(stage: Path, module: dict, state: dict, top: str, synth: Path, period_ns: float, clock: str,
                    cache: Path, d, fp, xs, ys, orient, lef, rc, caps, limits):
    """Writes the netlist, DEF and SPEF of the placed design into ``stage`` and signs them off: STA at every
    corner (into ``stage/sta``) and the design rules. Returns (wire summary, STA result, RuleReport)."""
    wires, _ = write_placed(stage, module, state["macro_modules"], d, fp, lef, xs, ys, orient, rc)
    progress(f"sign-off STA at {list(CORNERS)} with clock uncertainty setup {SETUP_UNCERTAINTY_NS} ns, "
             f"hold {HOLD_UNCERTAINTY_NS} ns ...")
    try:
        sta = run_sta(synth, stage / "sta", list(CORNERS), period_ns, clock, cache, parasitics=stage / f"{top}.spef",
                      netlist=stage / f"{top}.v", uncertainty=(SETUP_UNCERTAINTY_NS, HOLD_UNCERTAINTY_NS))
    except StaError as e:
        raise SignoffError(f"sign-off STA: {e}") from None
    rules = design_rules.check(d, fp, xs, ys, orient, caps, limits, rc, lef.dbu, {clock})
    return wires, sta, rules


def _setup_met(sta: dict) -> bool:
    return all(v["wns_ns"] is None or v["wns_ns"] >= 0 for v in sta["corners"].values())


def _clean(sta: dict, rules) -> bool:
    """Setup met at every corner and no max-transition or max-capacitance violation: what the touch-up
    can mend (it sizes cells; hold and fanout are repaired before it, and the verdict checks them too)."""
    return (_setup_met(sta) and not any(v["max_transition_violations"] for v in sta["corners"].values())
            and not rules.cap_violations)


@collector_paused()
def signoff(place_dir: Path, synth: Path, out: Path, period_ns: float | None = None, clock: str = "clk",
            budget_s: float = 900.0, cache: Path = REPO / "build" / "pdk_cache") -> dict:
    t_start = time.monotonic()
    PROGRESS_TAG["stage"] = "signoff"
    pj = place_dir / "place.json"
    if not pj.is_file():
        raise SignoffError(f"{pj} not found: run `make place` (python -m flow.place) first")
    placed = json.loads(pj.read_text())
    period_ns = placed["period_ns"] if period_ns is None else period_ns   # the placement's: the RTL's clock
    if "state" not in placed.get("files", {}):
        raise SignoffError(f"{place_dir} is from an older flow.place (no {STATE_FILE}): run `make place` again")
    try:
        pdk = find_pdk()
        lef = read_lefs(pdk)
        sizes = storage_lib(pdk, cache)
        state = load_state(place_dir / STATE_FILE)
    except (PdkError, PlaceError, MacroMapError) as e:
        raise SignoffError(str(e)) from None
    top, module, d, fp = placed["top"], state["module"], state["design"], state["floorplan"]
    xs, ys, orient = state["xs"], state["ys"], state["orient"]
    rc, dbu = RcModel.from_lef(lef), lef.dbu
    stage = out.with_name(out.name + ".tmp")
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    timing = {}

    t = time.monotonic()
    typical = pdk.plain_liberty("typical", cache).read_text()
    caps = input_caps(typical)
    slow = pdk.plain_liberty(SIZING_CORNER, cache)
    limits = design_rules.output_limits(slow.read_text())
    try:
        (d, xs, ys, orient), electrical = repair_design(module, state, lef, sizes, top, caps, limits,
                                                        liberty_areas(slow), rc, clock, stage / "electrical")
    except (RepairError, PlaceError) as e:
        raise SignoffError(f"electrical repair: {e}") from None
    if "netlist" not in electrical:             # nothing to repair: timing reads the placement's own files
        try:
            placed = write_deferred(place_dir)      # (a --defer-outputs placement has not written them yet)
        except PlaceError as e:
            raise SignoffError(str(e)) from None
    netlist, spef = ((Path(electrical[k]) if k in electrical else place_dir / placed["files"][k]).resolve()
                     for k in ("netlist", "spef"))
    timing["electrical_s"] = time.monotonic() - t

    t = time.monotonic()
    cell_xy = {name: ((xs[i] + d.comp_w[i] / 2) / dbu, (ys[i] + d.comp_h[i] / 2) / dbu)
               for i, name in enumerate(d.comp_name)}
    geometry = (cell_xy, dict(zip(d.comp_name, d.comp_master)), caps, (rc.c_h + rc.c_v) / 2)
    try:
        sized, moved, held = _repair(pdk, cache, netlist, spef, module, top, clock, period_ns, budget_s, stage,
                                     geometry)
    except (StaSessionError, ToolError) as e:
        raise SignoffError(f"timing repair: {e}") from None
    timing["repair_s"] = time.monotonic() - t

    t = time.monotonic()
    key_of = dict(zip(d.comp_name, d.comp_key))
    rebuffer.apply(module, moved, key_of)
    for inst, cell in sized.replaced.items():
        module["cells"][key_of[inst]]["type"] = cell
    hold.apply(module, held, key_of)
    d, xs, ys, orient = _rebuild(module, top, lef, sizes, d, fp, xs, ys, orient, held, moved)
    try:
        legal = relegalize(d, fp, xs, ys, orient)
    except PlaceError as e:
        raise SignoffError(f"re-legalisation after repair: {e}") from None
    timing["relegalize_s"] = time.monotonic() - t
    progress(f"re-legalised: {legal['cells_moved']:,} cells moved, {legal['total_move_dbu'] / dbu:,.0f} um in all")

    t = time.monotonic()
    kept = frozenset([m.buffer for m in moved.moves] + [buf for buf, _, _ in held.inserted])
    try:
        (d, xs, ys, orient), final_drv = repair_design(
            module, {**state, "design": d, "xs": xs, "ys": ys, "orient": orient}, lef, sizes, top, caps, limits,
            liberty_areas(slow), rc, clock, None, keep=kept)
    except (RepairError, PlaceError) as e:
        raise SignoffError(f"electrical repair after timing repair: {e}") from None
    timing["final_electrical_s"] = time.monotonic() - t

    t = time.monotonic()
    wires, sta, rules = _write_and_time(stage, module, state, top, synth, period_ns, clock, cache, d, fp, xs, ys,
                                        orient, lef, rc, caps, limits)
    timing["sta_s"] = time.monotonic() - t
    touched = []
    while not _clean(sta, rules) and len(touched) < TOUCHUPS:
        t = time.monotonic()
        over = touchup.overshoots([stage / "sta" / c["files"]["max_transition"] for c in sta["corners"].values()],
                                  rules.cap_violations)
        if touched and _setup_met(sta) and set(over) <= set(touched[-1]["unmendable_pins"]):
            break                                     # what is left, the last touch-up could not size away
        try:
            with _session(stage, SIZING_CORNER, slow.resolve(), stage / f"{top}.v", stage / f"{top}.spef", top, clock,
                          period_ns, log=f"touchup{len(touched) + 1}_session.log") as session:
                done = touchup.touch_up(session, size_ladders(list(liberty_areas(slow))), over, TOUCHUP_BUDGET_S,
                                        progress)
        except (StaSessionError, ToolError) as e:
            raise SignoffError(f"touch-up: {e}") from None
        touched.append(done.as_dict(liberty_areas(slow)) | {"corners_before": {
            c: {"wns_ns": v["wns_ns"], "max_transition_violations": v["max_transition_violations"]}
            for c, v in sta["corners"].items()}, "cap_violations_before": len(rules.cap_violations)})
        if not done.sizing.replaced:
            break
        key_of = dict(zip(d.comp_name, d.comp_key))
        for inst, cell in done.sizing.replaced.items():
            module["cells"][key_of[inst]]["type"] = cell
        d, xs, ys, orient = _rebuild(module, top, lef, sizes, d, fp, xs, ys, orient, hold.HoldResult(),
                                     rebuffer.RebufferResult())
        try:
            touched[-1]["cells_moved"] = relegalize(d, fp, xs, ys, orient)["cells_moved"]
        except PlaceError as e:
            raise SignoffError(f"re-legalisation after the touch-up: {e}") from None
        wires, sta, rules = _write_and_time(stage, module, state, top, synth, period_ns, clock, cache, d, fp, xs, ys,
                                            orient, lef, rc, caps, limits)
        timing[f"touchup{len(touched)}_s"] = time.monotonic() - t

    t = time.monotonic()
    macros = macro_rects(d, fp.macro_xy, dbu)
    demand = rudy.rudy(_net_boxes(d, fp, xs, ys, orient, dbu), (fp.die[2] / dbu, fp.die[3] / dbu), macros, lef)
    rudy.draw(demand, stage / "rudy.png", f"{top}: routing demand after sign-off placement")
    timing["checks_s"] = time.monotonic() - t

    result = _result(top, placed, (electrical, final_drv), sized, moved, held, liberty_areas(slow), legal, dbu,
                     wires, sta, rules, demand, timing, period_ns, t_start, touched)
    (stage / "signoff.json").write_text(json.dumps(result, indent=1) + "\n")
    (stage / "signoff.txt").write_text(summary_text(result))
    publish(stage, out)
    return result


def _result(top, placed, drv: tuple[dict, dict], sized, moved, held, areas, legal, dbu, wires, sta, rules, demand,
            timing, period_ns, t_start, touched: list[dict]) -> dict:
    """signoff.json; ``drv``: the summaries of the electrical repair before and after timing repair;
    ``touched``: one summary per touch-up (flow/touchup.py)."""
    electrical, final_drv = drv
    corners = {c: {k: v[k] for k in ("wns_ns", "tns_ns", "worst_hold_slack_ns", "min_period_ns",
                                     "max_transition_violations")} | {"worst_path": (v["paths"] or [None])[0],
                                                                      "worst_hold_path": v["worst_hold_path"]}
               for c, v in sta["corners"].items()}
    r = rules.as_dict()
    setup_met = _setup_met({"corners": corners})
    fast = corners.get("fast", {})
    hold_met = fast.get("worst_hold_slack_ns") is None or fast["worst_hold_slack_ns"] >= 0
    slew = sum(v["max_transition_violations"] or 0 for v in corners.values())
    clean = not (slew or r["max_capacitance_violations"] or r["max_fanout_violations"])
    sizing = sized.as_dict(areas)
    holding = held.as_dict(areas)
    isolating = moved.as_dict(areas)
    return {
        "schema": "nano-k3/signoff/1",
        "top": top,
        "synth_config_sha256": placed["synth_config_sha256"],
        "period_ns": period_ns,
        "clock": {"model": "ideal (no clock tree)", "setup_uncertainty_ns": SETUP_UNCERTAINTY_NS,
                  "hold_uncertainty_ns": HOLD_UNCERTAINTY_NS},
        "signed_off": setup_met and hold_met and clean,
        "setup_met_all_corners": setup_met,
        "hold_met_fast": hold_met,
        "electrical_clean": clean,
        "corners": corners,
        "sizing": sizing,
        "electrical_repair": {k: v for k, v in electrical.items() if k not in ("netlist", "spef")},
        "final_electrical_repair": final_drv,
        "load_isolation": isolating,
        "hold_repair": holding,
        "touch_ups": touched,
        "relegalize": {"cells_moved": legal["cells_moved"], "total_move_um": round(legal["total_move_dbu"] / dbu, 1)},
        "std_cell_area_um2": round(placed["std_cell_area_um2"] + electrical.get("area_change_um2", 0.0)
                                   + final_drv.get("area_change_um2", 0.0) + sizing["area_change_um2"]
                                   + isolating["area_added_um2"] + holding["area_added_um2"]
                                   + sum(t["sizing"]["area_change_um2"] for t in touched), 3),
        "std_cell_area_before_um2": placed["std_cell_area_um2"],
        "hpwl_um": round(wires["hpwl_um"], 1),
        "design_rules": r,
        "routing_demand": demand.as_dict(),
        "runtime_s": round(time.monotonic() - t_start, 1),
        "finished_unix": round(time.time(), 1),
        "runtime_by_step_s": {k: round(v, 1) for k, v in timing.items()},
        "files": {"netlist": f"{top}.v", "def": f"{top}.def", "spef": f"{top}.spef", "sta": "sta/sta.json",
                  "rudy_png": "rudy.png", "sizing_log": "resize.log"},
        "metrics": {**{f"signoff__timing__setup__ws__{c}": v["wns_ns"] for c, v in corners.items()},
                    **{f"signoff__timing__hold__ws__{c}": v["worst_hold_slack_ns"] for c, v in corners.items()},
                    "signoff__design__instance__resized": sizing["cells_resized"],
                    "signoff__design__instance__hold_buffers": holding["buffers_added"],
                    "signoff__design__instance__isolation_buffers": isolating["buffers_added"],
                    "signoff__route__demand__peak": demand.as_dict()["peak_demand_over_capacity"]},
    }


def summary_text(r: dict) -> str:
    f = (lambda x: "-" if x is None else f"{x:.3f}")
    s = r["sizing"]
    dr = r["design_rules"]
    rd = r["routing_demand"]
    lines = [
        f"sign-off of {r['top']} at {r['period_ns']} ns ({r['clock']['model']}, uncertainty setup "
        f"{r['clock']['setup_uncertainty_ns']} ns / hold {r['clock']['hold_uncertainty_ns']} ns; placed wires, not routed)",
        f"  verdict        {'SIGNED OFF' if r['signed_off'] else 'NOT signed off'}: setup "
        + ("met at every corner" if r["setup_met_all_corners"] else "VIOLATED at " + ", ".join(
            c for c, v in r["corners"].items() if v["wns_ns"] is not None and v["wns_ns"] < 0)) + ", hold at fast "
        f"{'met' if r['hold_met_fast'] else 'VIOLATED'}, design rules {'clean' if r['electrical_clean'] else 'VIOLATED'}",
        f"  sizing         {s['cells_resized']:,} cells up-sized in {len(s['passes']) - 1} passes, "
        f"{s['area_change_um2']:+,.1f} um2; stopped: {s['stopped']}",
        f"  electrical     {r['electrical_repair'].get('drivers_upsized', 0):,} drivers up-sized, "
        f"{r['electrical_repair'].get('nets_repaired', 0):,} nets over max capacitance rebuilt "
        f"({r['electrical_repair'].get('buffers_added', 0):,} buffers), violations "
        f"{r['electrical_repair']['cap_violations_before']:,} -> "
        f"{r['electrical_repair'].get('cap_violations_after', r['electrical_repair']['cap_violations_before']):,}",
        f"  after timing   {r['final_electrical_repair'].get('drivers_upsized', 0):,} drivers up-sized, "
        f"{r['final_electrical_repair'].get('nets_repaired', 0):,} nets rebuilt "
        f"({r['final_electrical_repair'].get('buffers_added', 0):,} buffers) for max capacitance, violations "
        f"{r['final_electrical_repair']['cap_violations_before']:,} -> "
        f"{r['final_electrical_repair'].get('cap_violations_after', r['final_electrical_repair']['cap_violations_before']):,}",
        *(f"  touch-up {k + 1}     {t['drivers_upsized']:,} drivers up-sized for transition/capacitance, "
          f"{t['sizing']['cells_resized']:,} cells sized in all ({t['sizing']['area_change_um2']:+,.1f} um2), "
          f"slow WNS {t['wns_before_ns']:+.3f} -> {t['wns_after_ns']:+.3f} ns in its session"
          for k, t in enumerate(r.get("touch_ups", []))),
        f"  load isolation {r['load_isolation']['buffers_added']:,} buffers take "
        f"{r['load_isolation']['sinks_moved']:,} sinks off critical stages, {r['load_isolation']['area_added_um2']:+,.1f} um2",
        f"  hold repair    {r['hold_repair']['buffers_added']:,} x {r['hold_repair']['buffer']} on "
        f"{r['hold_repair']['endpoints']:,} endpoints, {r['hold_repair']['area_added_um2']:+,.1f} um2",
        f"  re-legalised   {r['relegalize']['cells_moved']:,} cells moved ({r['relegalize']['total_move_um']:,.0f} um)",
        f"  cell area      {r['std_cell_area_um2']:,.0f} um2 (placed {r['std_cell_area_before_um2']:,.0f})",
        f"  design rules   max transition {sum(v['max_transition_violations'] or 0 for v in r['corners'].values())}, "
        f"max capacitance {dr['max_capacitance_violations']}, max fanout {dr['max_fanout_violations']} "
        f"(limit {dr['max_fanout']}) violations",
        f"  routing demand peak {rd['peak_demand_over_capacity']:.2f} of capacity, "
        f"{100 * rd['share_of_gcells_over_capacity']:.2f} % of gcells over ({rd['gcell_um']:g} um gcells)",
        f"  runtime        {r['runtime_s']:.0f} s {r['runtime_by_step_s']}",
        "", f"  {'corner':<8} {'WNS ns':>9} {'TNS ns':>10} {'hold ns':>9} {'min period ns':>14}  worst path",
    ]
    for c, v in r["corners"].items():
        p = v["worst_path"]
        lines.append(f"  {c:<8} {f(v['wns_ns']):>9} {f(v['tns_ns']):>10} {f(v['worst_hold_slack_ns']):>9} "
                     f"{f(v['min_period_ns']):>14}  " + (f"{p['start']} -> {p['end']}" if p else "-"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.signoff", description=__doc__.split("\n\n")[0])
    ap.add_argument("--place", type=Path, default=Path("build/place"), help="folder of `make place`")
    ap.add_argument("--synth", type=Path, default=Path("build/synth"), help="folder with synth.json")
    ap.add_argument("--out", type=Path, default=Path("build/signoff"))
    ap.add_argument("--period", type=float, help="clock period in ns (default: the placement's, place.json period_ns)")
    ap.add_argument("--clock", default="clk")
    ap.add_argument("--budget", type=float, default=900.0, help="seconds the sizing passes may take")
    args = ap.parse_args(argv)
    return report_stage("flow.signoff", SignoffError,
                        lambda: signoff(args.place, args.synth, args.out, args.period, args.clock, args.budget),
                        summary_text, lambda r: [args.out / "signoff.json", args.out / "rudy.png"])


if __name__ == "__main__":
    sys.exit(main())
