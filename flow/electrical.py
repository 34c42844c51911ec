"""Electrical repair of the placed chip before timing repair (OpenROAD's ``repair_design``, simplified).

The design rules that sign-off checks (flow/design_rules.py) fail on nets whose load is more than their
driver may drive: mostly long nets between regions (a bus from the sequencer's own logic to an engine a
few millimetres away: 200 fF on a gate allowed 27 fF, 3.7 ns transitions at the slow corner). Every
logical net with a max-capacitance violation (and only those: placement's trees stay) is rebuilt by
flow/repair.py as a clustered buffer tree
from the legal placement, with repeaters every ``REPEATER_SPACING_UM`` along each long edge (starting
at the driver); the new buffers are fitted into the rows (flow/relegalize.py), and the netlist, DEF and
SPEF are written again, so the timing repair that follows reads real wires. Only buffers are added and
removed (flow/repair.py ``verify``).

Spacing: 250 um of wire is about 15 fF (metal3/metal4 at 0.058 fF/um), within the max_capacitance of
every Nangate45 X1 output but the weakest (about 10 fF), and a BUF_X4 drives it in about 0.1 ns at the
slow corner, so a repeated 3 mm net costs about as much as one badly loaded X1 stage.
"""
from __future__ import annotations

from pathlib import Path

from flow import design_rules
from flow.parasitics import steiner_factor
from flow.place import repair_positions, write_outputs
from flow.place_netlist import build_design, inst_path, net_names, progress
from flow.relegalize import relegalize
from flow.repair import repair, verify, write_verilog

REPEATER_SPACING_UM = 250.0
GROUP = "(electrical repair)"       # the new buffers' group in the pictures


def repair_design(module: dict, state: dict, lef, sizes, top: str, caps, limits, areas, rc, clock: str,
                  out: Path) -> tuple[tuple, dict]:
    """Rebuilds every net of the placed ``state`` that breaks max capacitance; returns the new
    (design, xs, ys, orient) and a summary. Writes ``<top>.v``, ``.def`` and ``.spef`` into ``out`` when it
    changed anything (``summary["netlist"]``, ``summary["spef"]``)."""
    d, fp, xs, ys, orient = state["design"], state["floorplan"], state["xs"], state["ys"], state["orient"]
    dbu = lef.dbu
    before = design_rules.check(d, fp, xs, ys, orient, caps, limits, rc, dbu, {clock})
    bit_of = {name: b for b, name in net_names(module).items()}
    force = frozenset(bit_of[v["net"]] for v in before.cap_violations if v["net"] in bit_of)
    summary = {"cap_violations_before": len(before.cap_violations), "nets_forced": len(force),
               "repeater_spacing_um": REPEATER_SPACING_UM}
    if not force:
        return (d, xs, ys, orient), summary
    progress(f"electrical repair: {len(before.cap_violations):,} nets over their driver's max capacitance")
    cell_xy, port_xy, clock_bits = repair_positions(module, d, fp, xs, ys, dbu, clock)
    res = repair(module, cell_xy, port_xy, caps, areas, (rc.c_h + rc.c_v) / 2, steiner_factor, clock_bits,
                 progress, force=force, spacing_um=REPEATER_SPACING_UM, only_forced=True)
    verify(module, res)
    new = build_design(module, top, lef, sizes)
    at = {name: i for i, name in enumerate(d.comp_name)}
    nxs, nys, nor, groups = [], [], [], []
    for i, name in enumerate(new.comp_name):
        j = at.get(name)
        if j is None:
            cx, cy = res.new_cells[new.comp_key[i]]
            nxs.append(round(cx * dbu - new.comp_w[i] / 2))
            nys.append(round(cy * dbu - new.comp_h[i] / 2))
            nor.append("N")
            groups.append(GROUP)
        else:
            nxs.append(xs[j])
            nys.append(ys[j])
            nor.append(orient[j])
            groups.append(d.comp_group[j])
    fp.macro_xy = {i: fp.macro_xy[at[new.comp_name[i]]] for i in range(new.n_std, len(new.comp_name))
                   if at.get(new.comp_name[i]) in fp.macro_xy}
    new.comp_group, new.group_kind = groups, d.group_kind
    legal = relegalize(new, fp, nxs, nys, nor)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{top}.v", "w") as f:
        write_verilog(f, module, top, net_names(module), lambda key, c: inst_path(key, c.get("attributes", {})),
                      state["macro_modules"])
    write_outputs(new, fp, lef, nxs, nys, nor, out, rc)
    after = design_rules.check(new, fp, nxs, nys, nor, caps, limits, rc, dbu, {clock})
    summary |= {**res.as_dict(), "cap_violations_after": len(after.cap_violations),
                "cells_moved": legal["cells_moved"], "netlist": str(out / f"{top}.v"),
                "spef": str(out / f"{top}.spef")}
    progress(f"electrical repair: {res.nets_repaired:,} nets rebuilt, {res.buffers_added:,} buffers added "
             f"({res.buffers_removed:,} removed); max-capacitance violations {len(before.cap_violations):,} -> "
             f"{len(after.cap_violations):,}")
    return (new, nxs, nys, nor), summary
