"""What a placement writes and hands on (flow/place.py, flow/electrical.py, flow/signoff.py): the DEF and SPEF
(``write_outputs``, the SPEF's nets in slices written side by side), the placed netlist and the layout, the
placement state that sign-off continues from (``save_state`` / ``load_state``).

    python -m flow.place_out --place build/place

writes the netlist, DEF, SPEF and layout of a ``flow.place --defer-outputs`` placement from its state
(``write_deferred``; ``flow.sta --place`` does it first when they are missing): make demo places that way, so
that sign-off starts without waiting for files only the diagnostics and the pictures read."""
from __future__ import annotations

import argparse
import json
import pickle
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from flow.fork import ForkError, beside
from flow.cli import collector_paused, report_stage
from flow.lefdef import DefComponent, DefPin, Lef, LefError, read_lef, write_def
from flow.parasitics import MacroShadow, NetPins, macro_rects, RcModel, spef_header, steiner_factor, write_dnet
from flow.place_flat import Floorplan, PinPoints
from flow.place_netlist import Design, PlaceError, progress, write_placed_netlist
from pdk_config import PdkError, find_pdk

PIN_LAYERS = {"left": "metal3", "right": "metal3", "top": "metal2", "bottom": "metal2"}
DEFERRED = "deferred_outputs"     # place.json's record of outputs flow.place --defer-outputs left for later


def read_lefs(pdk) -> Lef:
    """The technology, cell and fakeram45 LEFs of ``pdk`` in one Lef."""
    try:
        lef = read_lef(pdk.tech_lef)
        read_lef(pdk.cell_lef, lef)
        for ram in pdk.fakerams:
            read_lef(ram.lef, lef)
    except LefError as e:
        raise PlaceError(str(e)) from None
    if not lef.dbu:
        raise PlaceError(f"{pdk.tech_lef} has no UNITS DATABASE MICRONS")
    return lef


# ---------------------------------------------------------------------------------------------- outputs

def _spef_nets(path: Path, d: Design, at: PinPoints, rc: RcModel, shadow: MacroShadow, dbu: int, nets: range,
               mode: str = "w") -> None:
    """The *D_NETs of ``nets`` into ``path``."""
    lo, hi = at.start[nets.start], at.start[nets.stop]
    ux, uy = (at.x[lo:hi] / dbu).tolist(), (at.y[lo:hi] / dbu).tolist()
    start = (at.start[nets.start:nets.stop + 1] - lo).tolist()
    with open(path, mode) as f:
        for k, n in enumerate(nets):
            pins = d.net_pins[n]
            px, py = ux[start[k]:start[k + 1]], uy[start[k]:start[k + 1]]
            net = NetPins(d.net_name[n], [p[4] for p in pins], [p[0] < 0 for p in pins], [p[5] for p in pins], px, py)
            write_dnet(f, net, rc, flat=True, shadow=shadow)


def _write_def(d: Design, fp: Floorplan, xs, ys, orient, stage: Path, dbu: int) -> None:
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


def wire_summary(d: Design, at: PinPoints, rc: RcModel, dbu: int) -> dict:
    """The placed nets' HPWL, Steiner wire length (um) and wire capacitance (fF), as the SPEF's *D_NETs
    estimate them (flow/parasitics.py ``net_rc``: bounding box times the Steiner factor of the pin count),
    without writing them."""
    box = at.boxes() / dbu
    dx, dy = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
    pins = np.diff(at.start)
    counts = np.unique(pins)
    k = np.array([steiner_factor(int(c)) for c in counts])[np.searchsorted(counts, pins)]
    return {"hpwl_um": float((dx + dy).sum()), "wire_um": float(((dx + dy) * k).sum()),
            "wire_cap_ff": float(((dx * rc.c_h + dy * rc.c_v) * k).sum()), "nets": len(d.net_name)}


SPEF_WRITERS = 2          # processes writing a SPEF's nets, the first of them this one
# What a forked writer copies per pin and cell of the design it reads (copies_of): on the ci chip (2.6 million
# pins and cells) the netlist writer copied 1.07 GB, the layout 0.96 GB, half the SPEF 0.44 GB.
COPY_BYTES_PER_PIN = 450


def write_outputs(d: Design, fp: Floorplan, lef: Lef, xs, ys, orient, stage: Path, rc: RcModel,
                  with_def: bool = True) -> dict:
    """The placement's DEF (unless not ``with_def``) and SPEF into ``stage``: the SPEF's nets in
    ``SPEF_WRITERS`` slices of about equal pin counts, all but the first written by forked copies (flow.fork)
    while this process writes the first slice and the DEF, then joined in order."""
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
    _spef_nets(spef, d, at, rc, shadow, dbu, range(cuts[0], cuts[1]), "a")
    if with_def:
        _write_def(d, fp, xs, ys, orient, stage, dbu)
    with open(spef, "ab") as f:
        for side, part in zip(sides, parts):
            try:
                side.result()
            except ForkError as e:
                raise PlaceError(f"writing {part.name}: {e}") from None
            with open(part, "rb") as g:
                shutil.copyfileobj(g, f, 1 << 24)
            part.unlink()
    return wire_summary(d, at, rc, dbu)


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
                 rc: RcModel, with_def: bool = True, pdk=None) -> tuple[dict, dict]:
    """The placed design's netlist ({top}.v), DEF (unless not ``with_def``) and SPEF into ``stage``, and with
    ``pdk`` its layout: the netlist and layout by a forked copy of this process (flow.fork) while this one writes
    the DEF and SPEF. Returns ``write_outputs``' wire summary and what ``netlist_and_layout`` returned."""
    side = beside(netlist_and_layout, stage, module, macro_modules, d, fp, xs, ys, orient, lef, pdk,
                  copies=copies_of(d))
    wires = write_outputs(d, fp, lef, xs, ys, orient, stage, rc, with_def)
    try:
        return wires, side.result()
    except ForkError as e:
        raise PlaceError(f"writing {d.top}.v: {e}") from None


# ---------------------------------------------------------------------------------------------- deferred

@collector_paused()
def write_deferred(place_dir: Path) -> dict:
    """The netlist, DEF, SPEF (and, if the placement wanted pictures, the layout) of a placement made with
    ``--defer-outputs``, written from its state into a stage folder, moved beside place.json, which then
    lists them (written last, by rename: a half-finished run leaves it saying they are missing). Returns
    place.json's content; a placement with nothing deferred is returned as it is."""
    pj = place_dir / "place.json"
    if not pj.is_file():
        raise PlaceError(f"{pj} not found: run `make place` (python -m flow.place) first")
    placed = json.loads(pj.read_text())
    later = placed.get(DEFERRED)
    if not later or later["written"]:
        return placed
    t0 = time.monotonic()
    try:
        pdk = find_pdk()
    except PdkError as e:
        raise PlaceError(str(e)) from None
    lef = read_lefs(pdk)
    progress(f"{placed['top']}: writing the deferred netlist, DEF, SPEF{' and layout' if later['layout'] else ''} "
             f"of {place_dir} from its state ...")
    state = load_state(place_dir / placed["files"]["state"])
    d, fp, xs, ys, orient = (state[k] for k in ("design", "floorplan", "xs", "ys", "orient"))
    stage = place_dir / "outputs.tmp"
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    _, layout = write_placed(stage, state["module"], state["macro_modules"], d, fp, lef, xs, ys, orient,
                             RcModel.from_lef(lef), pdk=pdk if later["layout"] else None)
    files = {"netlist": f"{d.top}.v", "def": f"{d.top}.def", "spef": f"{d.top}.spef", **layout.pop("files", {})}
    for name in files.values():
        (stage / name).replace(place_dir / name)
    shutil.rmtree(stage)
    placed["files"] |= files
    placed[DEFERRED] |= {"written": True, "runtime_s": round(time.monotonic() - t0, 2),
                         "finished_unix": round(time.time(), 1),
                         "runtime_by_step_s": {k: round(v, 2) for k, v in layout.items()}}
    tmp = pj.with_name(pj.name + ".tmp")
    tmp.write_text(json.dumps(placed, indent=1) + "\n")
    tmp.replace(pj)
    return placed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flow.place_out", description=__doc__.split("\n\n")[-1])
    ap.add_argument("--place", type=Path, default=Path("build/place"), help="a flow.place --defer-outputs folder")
    args = ap.parse_args(argv)
    return report_stage("flow.place_out", PlaceError, lambda: write_deferred(args.place),
                        lambda r: f"{r['top']}: " + ", ".join(f"{k} {v}" for k, v in sorted(r["files"].items())) + "\n",
                        lambda r: [args.place / "place.json"])


if __name__ == "__main__":
    sys.exit(main())
