"""Electrical repair of the placed chip before timing repair (OpenROAD's ``repair_design``, simplified).

The design rules that sign-off checks (flow/design_rules.py) fail on nets whose load is more than their
driver may drive: mostly long nets between regions (a bus from the sequencer's own logic to an engine a
few millimetres away: 200 fF on a gate allowed 27 fF, 3.7 ns transitions at the slow corner; or an
``XOR2_X1``, allowed 25 fF, on a few sinks 100 um away). For every net with a max-capacitance violation
(and only those: placement's trees stay), in this order:

* a stronger size of its driver (``upsize_drivers``) when one can carry the load with a margin and the net
  is short enough that its own wire does not spoil the transitions (``UPSIZE_MAX_WIRE_UM``): no new cell;
* else flow/repair.py rebuilds it as a clustered buffer tree from the legal placement, with repeaters
  every ``REPEATER_SPACING_UM`` along each long edge (starting at the driver), and a buffer at the driver
  when the tree's first level is still more than the driver may drive (``drive_limits``) or the driver is
  a macro (its pin lies inside a macro field: the buffer goes to the nearest free row, the macro drives
  only the wire to it).

The wider and new cells are fitted into the rows (flow/relegalize.py); the nets that this lengthened past
their limit get a stronger driver, whatever their length (``SETTLE_MARGIN``), and the rows are fitted again
(``SETTLE_ROUNDS`` times at most: on the nano chip these nets were the ones sign-off's touch-up sized, and a
touch-up costs three more STA runs); then the netlist and SPEF are written again, so the timing repair that follows reads real
wires. Only buffers are added and removed, and drivers only change size (flow/repair.py ``verify``).
Sign-off runs it a second time after timing repair, keeping that repair's buffers, for the nets the sizing
and the re-legalisation pushed over.

Spacing: 250 um of wire is about 15 fF (metal3/metal4 at 0.058 fF/um), within the max_capacitance of
every Nangate45 X1 output but the weakest (about 10 fF), and a BUF_X4 drives it in about 0.1 ns at the
slow corner, so a repeated 3 mm net costs about as much as one badly loaded X1 stage.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from flow import design_rules
from flow.parasitics import steiner_factor
from flow.place import repair_positions
from flow.place_flat import PinTable
from flow.place_out import write_placed
from flow.place_netlist import build_design, net_names, progress
from flow.relegalize import relegalize
from flow.repair import repair, verify
from flow.resize import SIZED, size_ladders
from flow.sta import DRIVING_CELL

REPEATER_SPACING_UM = 250.0
UPSIZE_MARGIN = 1.25                # a stronger driver's limit over its load: room for the changes that follow
CAP_MARGIN = 0.85                   # the repair's target: this share of each driver's max capacitance
# A net longer than this gets repeaters even when a stronger driver could carry its load: its own RC slows
# the far sinks' transitions (metal3: 3.6 ohm/um, 0.052 fF/um; 1 mm alone is about 0.2 ns of transition,
# over the typical corner's 0.199 ns and the fast corner's 0.146 ns limits; 500 um is about 0.05 ns).
UPSIZE_MAX_WIRE_UM = 2 * REPEATER_SPACING_UM
GROUP = "(electrical repair)"       # the new buffers' group in the pictures
SETTLE_ROUNDS = 2                   # rounds of up-sizing for the nets re-legalisation pushed over, after it
# In those rounds any stronger size that carries the load takes the net, long or not: what they leave over a
# limit only sign-off's touch-up mends, by the same up-sizing (flow/touchup.py) after a full STA.
SETTLE_MARGIN = 1.0


def upsize_drivers(module: dict, d, violations: list[dict], limits: dict[tuple[str, str], float],
                   ladders: dict[str, list[int]], margin: float = UPSIZE_MARGIN,
                   max_wire_um: float | None = UPSIZE_MAX_WIRE_UM) -> dict[str, tuple[str, str]]:
    """Cell key -> (cell, stronger cell) for every driver of a net in ``violations`` (design_rules cap
    violations) that has a size of its function whose max capacitance is ``margin`` x the net's load, on
    every violating output pin, when the net's wire is at most ``max_wire_um`` (None: any length). Drivers
    without such a size (ports, macros, the strongest size already) and longer nets are left out: their
    nets get buffers and repeaters. ``module`` is edited in place."""
    key_of = dict(zip(d.comp_name, d.comp_key))
    need: dict[str, list[tuple[str, float]]] = {}
    for v in violations:
        if v["driver"] == "port":
            continue
        inst, pin = v["driver"].rsplit("/", 1)
        if inst in key_of and (max_wire_um is None or v["wire_um"] <= max_wire_um):
            need.setdefault(key_of[inst], []).append((pin, v["load_ff"] * margin))
    out = {}
    for key, pins in need.items():
        cell = module["cells"][key]["type"]
        m = SIZED.match(cell)
        if not m or m.group(1) not in ladders:
            continue
        fam, n = m.group(1), int(m.group(2))
        for k in (k for k in ladders[fam] if k > n):
            if all(limits.get((f"{fam}_X{k}", pin), 0.0) >= load for pin, load in pins):
                out[key] = (cell, f"{fam}_X{k}")
                module["cells"][key]["type"] = f"{fam}_X{k}"
                break
    return out


def _over_limit(module: dict, d, violations: list[dict]) -> dict:
    """The nets the repair leaves over their driver's real limit (not only over its ``CAP_MARGIN`` target):
    what sign-off's touch-up would have to size; a few examples with their driver's cell and wire."""
    cell_of = dict(zip(d.comp_name, d.comp_master))
    over = sorted((v for v in violations if v["load_ff"] * CAP_MARGIN > v["limit_ff"]),
                  key=lambda v: v["limit_ff"] / v["load_ff"])
    return {"count": len(over), "examples": [
        {**v, "limit_ff": round(v["limit_ff"] / CAP_MARGIN, 2),
         "cell": cell_of.get(v["driver"].rsplit("/", 1)[0], v["driver"])} for v in over[:5]]}


def drive_limits(module: dict, limits: dict[tuple[str, str], float]):
    """(driver cell key or None for an input port, bit) -> the max capacitance (fF) of the pin that drives
    the bit, or None where the liberty gives none (a macro)."""
    port_limit = limits.get(DRIVING_CELL)

    def limit(key: str | None, bit: int) -> float | None:
        if key is None:
            return port_limit
        c = module["cells"][key]
        pin = next((p for p, bits in c["connections"].items()
                    if c.get("port_directions", {}).get(p) == "output" and bit in bits), None)
        return limits.get((c["type"], pin))
    return limit


def rebuilt(module: dict, top: str, lef, sizes, d, fp, xs, ys, orient, new_cell):
    """The placed design rebuilt from ``module`` after cells changed size or were added: every cell of ``d``
    keeps its position and orientation (relegalize then fits the wider ones); ``new_cell(new, i, at)`` gives a
    new cell ``i`` of ``new`` its (x, y, orientation, group), ``at`` mapping the names of ``d`` to its indices.
    ``fp.macro_xy`` is re-keyed in place."""
    new = build_design(module, top, lef, sizes)
    at = {name: i for i, name in enumerate(d.comp_name)}
    nxs, nys, nor, groups = [], [], [], []
    for i, name in enumerate(new.comp_name):
        j = at.get(name)
        x, y, o, g = (xs[j], ys[j], orient[j], d.comp_group[j]) if j is not None else new_cell(new, i, at)
        nxs.append(x)
        nys.append(y)
        nor.append(o)
        groups.append(g)
    fp.macro_xy = {i: fp.macro_xy[at[new.comp_name[i]]] for i in range(new.n_std, len(new.comp_name))
                   if at.get(new.comp_name[i]) in fp.macro_xy}
    new.comp_group, new.group_kind = groups, d.group_kind
    return new, nxs, nys, nor


def resize_in_place(d, lef, changed: dict[str, tuple[str, str]]) -> None:
    """Gives the standard cells of ``d`` whose key is in ``changed`` (key -> (old cell, new cell), what
    ``upsize_drivers`` returns) their new master's width and pin offsets, as ``build_design`` would: a
    size change alone does not need the whole design built again. Positions stay (relegalize fits them).
    The design's pin table and sink capacitances (``Design.derived``) follow."""
    index = {key: i for i, key in enumerate(d.comp_key[:d.n_std])}
    new_of = {index[key]: cells[1] for key, cells in changed.items()}
    dbu = lef.dbu
    for i, cell in new_of.items():
        d.comp_master[i] = cell
        d.comp_w[i] = int(round(lef.masters[cell].width_um * dbu))
    table = PinTable.of(d)
    caps = d.derived().get("sink_caps")
    at = np.flatnonzero(np.isin(table.obj, np.fromiter(new_of, np.int64, len(new_of))))
    for f, k in zip(at.tolist(), (np.searchsorted(table.start, at, side="right") - 1).tolist()):
        pins = d.net_pins[k]
        j = f - int(table.start[k])
        p = pins[j]
        x, y = lef.masters[new_of[p[0]]].pins[p[1]].center_um
        pins[j] = (p[0], p[1], int(round(x * dbu)), int(round(y * dbu)), p[4], p[5])
        table.dx[f], table.dy[f] = pins[j][2], pins[j][3]
        if caps is not None and not p[5]:
            caps[1][f] = caps[0].get((new_of[p[0]], p[1]), 0.0)


def repair_design(module: dict, state: dict, lef, sizes, top: str, caps, limits, areas, rc, clock: str,
                  out: Path | None, keep: frozenset[str] = frozenset()) -> tuple[tuple, dict]:
    """Fixes every net of the placed ``state`` that breaks max capacitance: a stronger driver where one
    suffices (``upsize_drivers``), else the net is rebuilt as a buffer tree with repeaters (buffers in
    ``keep`` stay). Returns the new (design, xs, ys, orient) and a summary. With ``out``, writes
    ``<top>.v`` and ``.spef`` there when it changed anything (``summary["netlist"]``,
    ``summary["spef"]``). It repairs against ``CAP_MARGIN`` x each limit (the summary's counts are against
    that target): at the slow corner a driver at its limit with a slow input edge is already past its
    max transition (measured on the ci chip: 564 pins at 0.55 ns against 0.5 ns, every net within its
    capacitance limit)."""
    limits = {k: v * CAP_MARGIN for k, v in limits.items()}
    d, fp, xs, ys, orient = state["design"], state["floorplan"], state["xs"], state["ys"], state["orient"]
    dbu = lef.dbu
    before = design_rules.check(d, fp, xs, ys, orient, caps, limits, rc, dbu, {clock})
    ladders = size_ladders(list(areas))
    upsized = upsize_drivers(module, d, before.cap_violations, limits, ladders)
    bit_of = {name: b for b, name in net_names(module).items()}
    key_of = dict(zip(d.comp_name, d.comp_key))
    force = frozenset(bit_of[v["net"]] for v in before.cap_violations
                      if v["net"] in bit_of and key_of.get(v["driver"].rsplit("/", 1)[0]) not in upsized)
    upsize_area = sum(areas.get(new, 0.0) - areas.get(old, 0.0) for old, new in upsized.values())
    summary = {"cap_margin": CAP_MARGIN, "cap_violations_before": len(before.cap_violations),
               "drivers_upsized": len(upsized),
               "upsize_area_um2": round(upsize_area, 3), "nets_forced": len(force),
               "repeater_spacing_um": REPEATER_SPACING_UM, "upsize_margin": UPSIZE_MARGIN,
               "area_change_um2": round(upsize_area, 3)}
    if not force and not upsized:
        return (d, xs, ys, orient), summary
    progress(f"electrical repair: {len(before.cap_violations):,} nets over their driver's max capacitance; "
             f"{len(upsized):,} drivers up-sized, {len(force):,} nets to rebuild")
    new_cells = {}
    if force:
        cell_xy, port_xy, clock_bits = repair_positions(module, d, fp, xs, ys, dbu, clock)
        res = repair(module, cell_xy, port_xy, caps, areas, (rc.c_h + rc.c_v) / 2, steiner_factor, clock_bits,
                     progress, force=force, spacing_um=REPEATER_SPACING_UM, only_forced=True, keep=keep,
                     drive_limit=drive_limits(module, limits),
                     buffer_first=frozenset(d.comp_key[d.n_std:]))
        verify(module, res)
        new_cells = res.new_cells
        summary |= {**res.as_dict(), "area_change_um2": round(res.area_added_um2 - res.area_removed_um2
                                                              + upsize_area, 3)}
    def at_repair(new, i, _at):
        """A buffer of the repair: where flow/repair.py put it (its centre), in the electrical repair's group."""
        cx, cy = new_cells[new.comp_key[i]]
        return round(cx * dbu - new.comp_w[i] / 2), round(cy * dbu - new.comp_h[i] / 2), "N", GROUP

    new, nxs, nys, nor = rebuilt(module, top, lef, sizes, d, fp, xs, ys, orient, at_repair)
    moved = relegalize(new, fp, nxs, nys, nor)["cells_moved"]
    after = design_rules.check(new, fp, nxs, nys, nor, caps, limits, rc, dbu, {clock})
    settled, settle_area = 0, 0.0
    for _ in range(SETTLE_ROUNDS):        # re-legalisation lengthened some nets: stronger drivers for them
        more = upsize_drivers(module, new, after.cap_violations, limits, ladders, SETTLE_MARGIN, None)
        if not more:
            break
        settled += len(more)
        settle_area += sum(areas.get(b, 0.0) - areas.get(a, 0.0) for a, b in more.values())
        resize_in_place(new, lef, more)
        moved += relegalize(new, fp, nxs, nys, nor)["cells_moved"]
        after = design_rules.check(new, fp, nxs, nys, nor, caps, limits, rc, dbu, {clock})
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        # what the timing repair reads: the netlist and SPEF (no DEF: the sign-off writes the final one)
        write_placed(out, module, state["macro_modules"], new, fp, lef, nxs, nys, nor, rc, with_def=False)
        summary |= {"netlist": str(out / f"{top}.v"), "spef": str(out / f"{top}.spef")}
    summary |= {"cap_violations_after": len(after.cap_violations),
                "left_over_limit": _over_limit(module, new, after.cap_violations), "cells_moved": moved,
                "settle_upsized": settled, "area_change_um2": round(summary["area_change_um2"] + settle_area, 3)}
    progress(f"electrical repair: {len(upsized) + settled:,} drivers up-sized, {summary.get('nets_repaired', 0):,} "
             f"nets rebuilt, {summary.get('buffers_added', 0):,} buffers added ({summary.get('buffers_removed', 0):,} "
             f"removed); max-capacitance violations {len(before.cap_violations):,} -> {len(after.cap_violations):,}")
    return (new, nxs, nys, nor), summary
