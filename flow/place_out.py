"""What a placement writes and hands on (flow/place.py, flow/electrical.py, flow/signoff.py): the DEF and SPEF
(``write_outputs``, the SPEF's nets in slices written side by side), the placed netlist and the layout, the
placement state that sign-off continues from (``save_state`` / ``load_state``)."""
from __future__ import annotations

import pickle
import shutil
import time
from pathlib import Path

import numpy as np

from flow.fork import ForkError, beside
from flow.lefdef import DefComponent, DefPin, Lef, write_def
from flow.parasitics import MacroShadow, NetPins, macro_rects, RcModel, spef_header, write_dnet
from flow.place_flat import Floorplan, PinPoints
from flow.place_netlist import Design, PlaceError, write_placed_netlist

PIN_LAYERS = {"left": "metal3", "right": "metal3", "top": "metal2", "bottom": "metal2"}


# ---------------------------------------------------------------------------------------------- outputs

def _spef_nets(path: Path, d: Design, at: PinPoints, rc: RcModel, shadow: MacroShadow, dbu: int, nets: range,
               mode: str = "w") -> tuple[float, float, float]:
    """The *D_NETs of ``nets`` into ``path``; their (HPWL um, wire um, wire capacitance fF)."""
    lo, hi = at.start[nets.start], at.start[nets.stop]
    ux, uy = (at.x[lo:hi] / dbu).tolist(), (at.y[lo:hi] / dbu).tolist()
    start = (at.start[nets.start:nets.stop + 1] - lo).tolist()
    hpwl = wire = cap = 0.0
    with open(path, mode) as f:
        for k, n in enumerate(nets):
            pins = d.net_pins[n]
            px, py = ux[start[k]:start[k + 1]], uy[start[k]:start[k + 1]]
            hpwl += max(px) - min(px) + max(py) - min(py)
            net = NetPins(d.net_name[n], [p[4] for p in pins], [p[0] < 0 for p in pins], [p[5] for p in pins], px, py)
            length, c = write_dnet(f, net, rc, flat=True, shadow=shadow)
            wire += length
            cap += c
    return hpwl, wire, cap


SPEF_WRITERS = 2          # processes writing a SPEF's nets, the first of them this one
# What a forked writer copies per pin and cell of the design it reads (copies_of): on the ci chip (2.6 million
# pins and cells) the netlist writer copied 1.07 GB, the layout 0.96 GB, half the SPEF 0.44 GB.
COPY_BYTES_PER_PIN = 450


def write_outputs(d: Design, fp: Floorplan, lef: Lef, xs, ys, orient, stage: Path, rc: RcModel) -> dict:
    """The placement's DEF and SPEF into ``stage``: the SPEF's nets in ``SPEF_WRITERS`` slices of about equal
    pin counts, all but the first written by forked copies (flow.fork) while this process writes the first
    slice and the DEF, then joined in order."""
    dbu = lef.dbu
    at = PinPoints.of(d, fp, xs, ys, orient)
    shadow = MacroShadow(macro_rects(d, fp.macro_xy, dbu))
    spef = stage / f"{d.top}.spef"
    n = len(d.net_name)
    cuts = [0, *np.searchsorted(at.start, [at.start[-1] * k // SPEF_WRITERS for k in range(1, SPEF_WRITERS)]).tolist(),
            n]
    cuts = [min(max(c, 0), n) for c in cuts]
    parts = [stage / f"{d.top}.spef.part{k}" for k in range(1, SPEF_WRITERS)]
    sides = [beside(_spef_nets, part, d, at, rc, shadow, dbu, range(cuts[k], cuts[k + 1]),
                    copies=copies_of(d) // SPEF_WRITERS) for k, part in enumerate(parts, 1)]
    spef.write_text(spef_header(d.top))
    sums = [_spef_nets(spef, d, at, rc, shadow, dbu, range(cuts[0], cuts[1]), "a")]
    comps = [DefComponent(d.comp_name[i], d.comp_master[i], xs[i], ys[i], orient[i], i >= d.n_std)
             for i in range(len(d.comp_name))]
    pins = []
    for k, name in enumerate(d.io_name):
        x, y, edge = fp.io_xy[k]
        pins.append(DefPin(name, name, "INPUT" if d.io_dir[k] == "input" else "OUTPUT", PIN_LAYERS[edge], x, y,
                           round(0.035 * dbu)))
    nets = [(name, [("PIN", p[1]) if p[0] < 0 else (d.comp_name[p[0]], p[1]) for p in pins_])
            for name, pins_ in zip(d.net_name, d.net_pins)]
    write_def(stage / f"{d.top}.def", d.top, dbu, fp.die, fp.rows, comps, pins, nets)
    with open(spef, "ab") as f:
        for side, part in zip(sides, parts):
            try:
                sums.append(side.result())
            except ForkError as e:
                raise PlaceError(f"writing {part.name}: {e}") from None
            with open(part, "rb") as g:
                shutil.copyfileobj(g, f, 1 << 24)
            part.unlink()
    hpwl, wire, cap = (sum(x) for x in zip(*sums))
    return {"hpwl_um": hpwl, "wire_um": wire, "wire_cap_ff": cap, "nets": len(nets)}


def copies_of(d: Design) -> int:
    """About what a forked writer of ``d`` copies: the pages of the objects it reads (flow.fork)."""
    return COPY_BYTES_PER_PIN * (sum(map(len, d.net_pins)) + len(d.comp_name))


# ---------------------------------------------------------------------------------------------- state

STATE_FILE = "placed.pickle"
STATE_SCHEMA = "nano-k3/placed-state/1"


def save_state(path: Path, module: dict, d: Design, fp: Floorplan, xs, ys, orient, macro_modules: str) -> None:
    """The placement as flow/signoff.py continues from it: the flat netlist (Yosys JSON module), the
    placement objects, the floorplan and every cell's position and orientation. Derived, written with the
    other outputs into the stage folder, so it never outlives the placement it belongs to."""
    with open(path, "wb") as f:
        pickle.dump({"schema": STATE_SCHEMA, "module": module, "design": d, "floorplan": fp, "xs": list(xs),
                     "ys": list(ys), "orient": list(orient), "macro_modules": macro_modules}, f,
                    protocol=pickle.HIGHEST_PROTOCOL)


def load_state(path: Path) -> dict:
    if not path.is_file():
        raise PlaceError(f"{path} not found: run `make place` (python -m flow.place) first")
    with open(path, "rb") as f:
        state = pickle.load(f)
    if state.get("schema") != STATE_SCHEMA:
        raise PlaceError(f"{path} is {state.get('schema')!r}, not {STATE_SCHEMA}: run `make place` again")
    return state



def write_layout(stage: Path, d: Design, fp: Floorplan, xs, ys, orient, lef: Lef, pdk) -> dict:
    """The GDS and the placement pictures; {"files": their names, "layout_s": seconds}."""
    from flow.gds import write_gds, write_pictures
    t = time.monotonic()
    write_gds(stage / f"{d.top}.gds", pdk.cell_gds, d, fp, xs, ys, orient, lef)
    files = {"gds": f"{d.top}.gds", **write_pictures(stage, d.top, d, fp, xs, ys, pdk.klayout_lyp, lef.dbu)}
    return {"files": files, "layout_s": time.monotonic() - t}


def netlist_and_layout(stage: Path, module: dict, macro_modules: str, d: Design, fp: Floorplan, xs, ys, orient,
                        lef: Lef, pdk) -> dict:
    """In the forked writer: the placed netlist, then (``pdk`` given) the layout; the seconds each took."""
    t = time.monotonic()
    write_placed_netlist(stage / f"{d.top}.v", module, d.top, macro_modules)
    done = {"netlist_out_s": time.monotonic() - t}
    return done | (write_layout(stage, d, fp, xs, ys, orient, lef, pdk) if pdk is not None else {})


def write_placed(stage: Path, module: dict, macro_modules: str, d: Design, fp: Floorplan, lef: Lef, xs, ys, orient,
                 rc: RcModel) -> dict:
    """The placed design's netlist ({top}.v), DEF and SPEF into ``stage``: the netlist by a forked copy of this
    process (flow.fork) while this one writes the DEF and SPEF. Returns ``write_outputs``' wire summary."""
    netlist = beside(write_placed_netlist, stage / f"{d.top}.v", module, d.top, macro_modules, copies=copies_of(d))
    wires = write_outputs(d, fp, lef, xs, ys, orient, stage, rc)
    try:
        netlist.result()
    except ForkError as e:
        raise PlaceError(f"writing {d.top}.v: {e}") from None
    return wires
