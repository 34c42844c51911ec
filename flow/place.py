"""Placement of the synthesised netlist on Nangate45 rows with coloquinte, then post-placement timing.

    python -m flow.place [--synth build/synth] [--out build/place] [--utilization 0.6] [--effort 1]

Steps (ARCHITECTURE.md, "Physical implementation"):

1. netlist: Yosys (pyosys, in a child process) reads ``<top>.sta.il`` (the RTLIL twin of the STA netlist
   ``<top>.sta.v``) and the macros' empty modules ``<top>.macros.v`` as black boxes, and flattens the
   hierarchy; names stay those OpenSTA sees in ``<top>.sta.v`` (``lane0/_0644_``);
2. macros: every ``msh_sram`` becomes its grid of fakeram45 macros (flow/macro_map.py); every ``msh_rom``,
   and every ``msh_sram`` small enough to be cheaper as flip-flops, maps to logic that this netlist does
   not contain yet (its pins are left unplaced, and noted);
3. floorplan: the macros, each with a keep-out ring, are packed in shelves from the bottom-left corner
   (``FIXED``); the standard-cell rows fill the rest (a row stops at a keep-out and resumes after it),
   enough of them for ``--utilization``. The core is square when the macros allow it. Inputs are spread over the left and top edges, outputs over the
   right and bottom ones, in port order;
4. placement: coloquinte global placement; then (unless ``--no-repair``) every net with more than
   flow/repair.py's ``MAX_FANOUT`` sinks loses synthesis' buffer tree and gets one clustered by the
   sinks' global-placement positions, buffers sized by load (OpenROAD's repair_design, simplified);
   then legalisation and detailed placement on the rows (alternate rows flipped, ``FS``; cells widened
   to ``PLACER_DENSITY`` while placing so they spread evenly); x is then snapped to the site grid. Nets
   with more than ``MAX_PLACE_FANOUT`` pins (clock, reset) are not given to the placer, whose quadratic
   model they would dominate;
5. outputs: the placed flat netlist ``<top>.v`` (with the repaired trees; the DEF, SPEF and STA all use
   it), a placed DEF, wire parasitics estimated from the placed pins as SPEF (flow/parasitics.py),
   OpenSTA on every corner with them (flow/sta.py) and meanwhile a GDS of the placed cells and pictures
   (flow/gds.py), ``place.json`` and ``place.txt``.

Everything is written into ``<out>.tmp`` and replaces ``<out>`` when complete.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from flow.cli import die_with_parent, publish, report_stage
from flow.lefdef import DefComponent, DefPin, DefRow, Lef, LefError, read_lef, write_def
from flow.macro_map import MACRO_HALO_UM, MacroMapError, Mapping, map_instance, storage_lib, table
from flow.parasitics import NetPins, RcModel, spef_header, steiner_factor, write_dnet
from flow.repair import RepairError, RepairResult, input_caps, repair, verify, write_verilog
from flow.sta import StaError, run_sta
from flow.synth import liberty_areas
from pdk_config import PdkError, find_pdk
from pdk_config.nangate45 import CORNERS, SITE

REPO = Path(__file__).resolve().parent.parent
PLACER_DENSITY = 0.9          # cells widened to fill this share of the rows while placing (even spread)
MAX_PLACE_FANOUT = 1000        # nets above this many pins are ignored by the placer (still in DEF / SPEF)
CORE_MARGIN_SITES = 10         # gap between die edge and rows, in sites (x) ...
CORE_MARGIN_ROWS = 1           # ... and rows (y): room for the I/O pins
PIN_LAYERS = {"left": "metal3", "right": "metal3", "top": "metal2", "bottom": "metal2"}
MACRO_PIN = re.compile(r"^(msh_sram|msh_rom)_(\d+)x(\d+)$")
SRAM_SCALAR_PINS = ("clk", "we", "re")      # every other msh_sram pin is a bus (flow/synth.py _macro_module)


class PlaceError(RuntimeError):
    """Placement could not run; the message says what is missing or wrong."""


def progress(msg: str) -> None:
    print(f"[place] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- netlist

def flatten_worker(job_path: Path) -> int:
    """Child process: the STA netlist (RTLIL, with its macros as empty Verilog modules), flattened, as Yosys JSON."""
    from pyosys import libyosys as ys

    job = json.loads(job_path.read_text())
    d = ys.Design()
    ys.run_pass(f"read_liberty -lib {job['liberty']}", d)
    ys.run_pass(f"read_verilog -lib {job['macros']}", d)        # black boxes: macro instances survive `flatten`
    ys.run_pass(f"read_rtlil {job['netlist']}", d)
    ys.run_pass(f"hierarchy -top {job['top']}", d)
    ys.run_pass("flatten", d)
    ys.run_pass(f"write_json {job['json']}", d)
    return 0


def flatten(netlist: Path, macros: Path, top: str, liberty: Path, stage: Path) -> dict:
    job = {"netlist": str(netlist.resolve()), "macros": str(macros.resolve()), "top": top,
           "liberty": str(liberty.resolve()), "json": str((stage / "flat.json").resolve())}
    (stage / "flatten.job.json").write_text(json.dumps(job))
    with open(stage / "flatten.log", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "flow.place", "--flatten-worker", str(stage / "flatten.job.json")],
                              stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0:
        tail = (stage / "flatten.log").read_text(errors="replace").splitlines()[-10:]
        raise PlaceError(f"Yosys could not flatten {netlist} (exit {proc.returncode}):\n" + "\n".join(tail))
    progress(f"reading the flat netlist ({(stage / 'flat.json').stat().st_size / 1e6:,.0f} MB of Yosys JSON) ...")
    flat = json.loads((stage / "flat.json").read_text())
    (stage / "flat.json").unlink()                # large and derived: not kept
    return flat["modules"][top]


def _path(name: str, attrs: dict) -> str:
    """The instance / net path OpenSTA uses: hierarchy levels joined by '/'."""
    hdl = attrs.get("hdlname")
    return "/".join(hdl.split(" ")) if hdl else name


def _bit_names(module: dict) -> dict[int, str]:
    """Net name per bit: the name at the highest hierarchy level (then a visible, then the shortest one)."""
    best: dict[int, tuple] = {}
    for name, nn in module["netnames"].items():
        path = _path(name, nn.get("attributes", {}))
        bits, offset, upto = nn["bits"], nn.get("offset", 0), nn.get("upto", 0)
        for i, b in enumerate(bits):
            if not isinstance(b, int):
                continue
            idx = offset + (len(bits) - 1 - i if upto else i)
            full = path if len(bits) == 1 and offset == 0 else f"{path}[{idx}]"
            key = (path.count("/"), nn.get("hide_name", 0), len(full), full)
            if b not in best or key < best[b]:
                best[b] = key
    return {b: k[-1] for b, k in best.items()}


def port_bit_name(pname: str, width: int, j: int) -> str:
    return pname if width == 1 else f"{pname}[{j}]"


def net_names(module: dict) -> dict[int, str]:
    """A unique name per bit, as the flat netlist (flow/repair.py ``write_verilog``) declares it: a port
    bit is named after the port (inputs first), every other bit as ``_bit_names`` chooses."""
    names: dict[int, str] = {}
    for pname, p in sorted(module["ports"].items(), key=lambda kv: kv[1]["direction"] != "input"):
        for j, b in enumerate(p["bits"]):
            if isinstance(b, int):
                names.setdefault(b, port_bit_name(pname, len(p["bits"]), j))
    used = set(names.values())
    for b, name in _bit_names(module).items():
        if b not in names:
            while name in used:
                name = f"{name}_{b}"
            names[b] = name
            used.add(name)
    return names


@dataclass
class Design:
    """The flat netlist as placement objects. Components: standard cells (movable) then macro tiles
    (fixed); I/O pins separately. Each net pin: (object, pin name for DEF, offset x/y dbu, SPEF node or
    None when OpenSTA does not see it as a leaf pin, drives the net)."""
    top: str
    comp_name: list[str] = field(default_factory=list)
    comp_key: list[str] = field(default_factory=list)      # the cell's key in the flat Yosys module
    comp_master: list[str] = field(default_factory=list)
    comp_w: list[int] = field(default_factory=list)
    comp_h: list[int] = field(default_factory=list)
    comp_group: list[str] = field(default_factory=list)
    n_std: int = 0
    io_name: list[str] = field(default_factory=list)
    io_dir: list[str] = field(default_factory=list)
    net_name: list[str] = field(default_factory=list)
    net_pins: list[list[tuple]] = field(default_factory=list)
    mappings: list[Mapping] = field(default_factory=list)
    roms: list[str] = field(default_factory=list)
    flop_srams: list[str] = field(default_factory=list)


def _sram_pin(pin: str, j: int, m: Mapping) -> tuple[int, int, str]:
    """(tile row, tile column, fakeram pin) standing for bit ``j`` of msh_sram pin ``pin`` in wire estimates."""
    w, abits = m.macro.width, max(1, (m.macro.depth - 1).bit_length())
    table_ = {
        "clk": (0, 0, "clk"), "we": (0, 0, "we_in"), "re": (0, 0, "ce_in"),
        "waddr": (0, 0, f"addr_in[{j}]" if j < abits else "ce_in"),
        "raddr": (0, 0, f"addr_in[{j}]" if j < abits else "ce_in"),
        "wdata": (0, j // w, f"wd_in[{j % w}]"),
        "rdata": (0, j // w, f"rd_out[{j % w}]"),
        "wstrb": (0, (8 * j) // w, f"w_mask_in[{(8 * j) % w}]"),
    }
    if pin not in table_:
        raise PlaceError(f"msh_sram pin {pin!r} is not in SPEC section 5's port list")
    return table_[pin]


def build_design(module: dict, top: str, lef: Lef, sizes) -> Design:
    dbu = lef.dbu
    to_dbu = lambda um: int(round(um * dbu))       # noqa: E731
    d = Design(top)
    pins_of_bit: dict[int, list[tuple]] = {}

    def attach(bit, entry):
        if isinstance(bit, int):
            pins_of_bit.setdefault(bit, []).append(entry)

    macros = []
    for name, cell in module["cells"].items():
        ctype = cell["type"]
        if ctype == "$scopeinfo":
            continue
        path = _path(name, cell.get("attributes", {}))
        hdl = cell.get("attributes", {}).get("hdlname", "").split(" ")
        group = hdl[0] if len(hdl) > 1 else "(top)"
        if MACRO_PIN.match(ctype):
            macros.append((name, path, ctype, cell, group))
            continue
        master = lef.masters.get(ctype)
        if master is None:
            raise PlaceError(f"cell {path} is a {ctype}, which no LEF defines")
        i = len(d.comp_name)
        d.comp_name.append(path)
        d.comp_key.append(name)
        d.comp_master.append(ctype)
        d.comp_w.append(to_dbu(master.width_um))
        d.comp_h.append(to_dbu(master.height_um))
        d.comp_group.append(group)
        for pin, bits in cell["connections"].items():
            lp = master.pins.get(pin)
            if lp is None:
                raise PlaceError(f"{ctype} has no pin {pin} in the LEF (instance {path})")
            x, y = lp.center_um
            drv = cell["port_directions"].get(pin) == "output"
            attach(bits[0], (i, pin, to_dbu(x), to_dbu(y), f"{path}:{pin}", drv))
    d.n_std = len(d.comp_name)
    for name, path, ctype, cell, group in macros:
        kind, depth, width = MACRO_PIN.match(ctype).groups()
        m = map_instance(path, kind, int(depth), int(width), sizes)
        d.mappings.append(m)
        if m.macro is None:
            (d.flop_srams if m.impl == "flops" else d.roms).append(path)
            continue
        master = lef.masters[m.macro.name]
        first = len(d.comp_name)
        for r in range(m.rows):
            for c in range(m.cols):
                d.comp_name.append(f"{path}/ram_{r}_{c}")
                d.comp_key.append(name)
                d.comp_master.append(m.macro.name)
                d.comp_w.append(to_dbu(master.width_um))
                d.comp_h.append(to_dbu(master.height_um))
                d.comp_group.append(group)
        for pin, bits in cell["connections"].items():
            drv = cell["port_directions"].get(pin) == "output"
            for j, b in enumerate(bits):
                r, c, lpin = _sram_pin(pin, j, m)
                x, y = master.pins[lpin].center_um
                attach(b, (first + r * m.cols + c, lpin, to_dbu(x), to_dbu(y), None, drv))
    for pname, port in module["ports"].items():
        bits = port["bits"]
        for j, b in enumerate(bits):
            name = port_bit_name(pname, len(bits), j)
            k = len(d.io_name)
            d.io_name.append(name)
            d.io_dir.append(port["direction"])
            attach(b, (-1 - k, "PIN", 0, 0, name, port["direction"] == "input"))
    names = net_names(module)
    for b, pins in sorted(pins_of_bit.items()):
        if len(pins) >= 2:
            d.net_name.append(names.get(b, f"_net{b}_"))
            d.net_pins.append(pins)
    return d


# ---------------------------------------------------------------------------------------------- floorplan

@dataclass
class Floorplan:
    die: tuple[int, int, int, int]
    rows: list[DefRow]                         # one per free stretch of a row: rows stop at macro keep-outs
    row_height: int
    core: tuple[int, int, int, int]            # the area rows and macros share
    macro_xy: dict[int, tuple[int, int]]       # component index -> lower-left
    io_xy: list[tuple[int, int, str]]          # per I/O pin: x, y, edge


def _pack_shelves(sizes: list[tuple[int, int, int]], width: int, halo: int, x0: int, y0: int):
    """Shelf packing of (index, w, h) boxes, tallest first, into rows ``width`` wide from (x0, y0).
    Returns lower-left corners and the total height used."""
    xy, x, y, shelf_h = {}, x0, y0, 0
    for i, w, h in sorted(sizes, key=lambda t: (-t[2], -t[1], t[0])):
        if x + w + 2 * halo > x0 + width and x > x0:
            x, y, shelf_h = x0, y + shelf_h, 0
        xy[i] = (x + halo, y + halo)
        x += w + 2 * halo
        shelf_h = max(shelf_h, h + 2 * halo)
    return xy, (y + shelf_h - y0) if sizes else 0


def _free_stretches(x0: int, x1: int, y0: int, y1: int, blocked, sw: int, min_sites: int = 4):
    """Site-aligned [a, b) intervals of [x0, x1) not covered by any blocked box overlapping [y0, y1)."""
    cuts = sorted((bx0, bx1) for bx0, by0, bx1, by1 in blocked if by0 < y1 and by1 > y0)
    out, a = [], x0
    for bx0, bx1 in cuts + [(x1, x1)]:
        b = x0 + (min(bx0, x1) - x0) // sw * sw
        if b - a >= min_sites * sw:
            out.append((a, b))
        a = max(a, x0 + -(-(bx1 - x0) // sw) * sw)
    return out


def floorplan(d: Design, lef: Lef, utilization: float) -> Floorplan:
    site = lef.sites.get(SITE)
    if site is None:
        raise PlaceError(f"the tech LEF defines no SITE {SITE}")
    sw, rh = round(site.width_um * lef.dbu), round(site.height_um * lef.dbu)
    halo = round(MACRO_HALO_UM * lef.dbu)
    std_area = sum(w * h for w, h in zip(d.comp_w[:d.n_std], d.comp_h[:d.n_std]))
    macro_fp = sum((w + 2 * halo) * (h + 2 * halo) for w, h in zip(d.comp_w[d.n_std:], d.comp_h[d.n_std:]))
    widest = max([w + 2 * halo for w in d.comp_w[d.n_std:]], default=0)
    core_w = max(math.sqrt(std_area / utilization + macro_fp), widest, 20 * rh)
    core_w = math.ceil(core_w / sw) * sw
    mx, my = CORE_MARGIN_SITES * sw, CORE_MARGIN_ROWS * rh
    boxes = [(i, d.comp_w[i], d.comp_h[i]) for i in range(d.n_std, len(d.comp_name))]
    macro_xy, macro_h = _pack_shelves(boxes, core_w, halo, mx, my)
    blocked = [(x - halo, y - halo, x + d.comp_w[i] + halo, y + d.comp_h[i] + halo) for i, (x, y) in macro_xy.items()]
    rows, free, k = [], 0, 0
    while free < std_area / utilization or k * rh < macro_h or k < 2:
        y = my + k * rh
        for s, (a, b) in enumerate(_free_stretches(mx, mx + core_w, y, y + rh, blocked, sw)):
            rows.append(DefRow(f"ROW_{k}_{s}", SITE, a, y, "N" if k % 2 == 0 else "FS", (b - a) // sw, sw))
            free += (b - a) * rh
        k += 1
    core = (mx, my, mx + core_w, my + k * rh)
    die = (0, 0, core[2] + mx, core[3] + my)
    return Floorplan(die, rows, rh, core, macro_xy, _io_positions(d, die, sw))


def _io_positions(d: Design, die, pitch: int) -> list[tuple[int, int, str]]:
    """Inputs along the left edge (bottom-up) then the top edge; outputs along the right edge then the bottom."""
    W, H = die[2], die[3]
    out = [None] * len(d.io_name)
    for want, edges in (("input", ("left", "top")), ("output", ("right", "bottom"))):
        idx = [k for k, dr in enumerate(d.io_dir) if (dr == "input") == (want == "input")]
        n = len(idx)
        if not n:
            continue
        length = H + W                       # the two edges, walked as one path
        step = length / (n + 1)
        for j, k in enumerate(idx):
            s = (j + 1) * step
            on_first = s < H
            t = s if on_first else s - H
            t = round(t / pitch) * pitch
            edge = edges[0] if on_first else edges[1]
            xy = {"left": (0, t), "top": (t, H), "right": (W, H - t), "bottom": (W - t, 0)}[edge]
            out[k] = (*xy, edge)
    return out


# ---------------------------------------------------------------------------------------------- placement

def _circuit(d: Design, fp: Floorplan, start: tuple[list[int], list[int]] | None):
    """The coloquinte circuit of ``d``; cells start at the core centre, or at ``start`` (lower-left, dbu)."""
    import coloquinte as cq

    n_comp, n_io = len(d.comp_name), len(d.io_name)
    c = cq.Circuit(n_comp + n_io)
    c.cell_width = d.comp_w + [0] * n_io
    c.cell_height = d.comp_h + [0] * n_io
    fixed = [False] * d.n_std + [True] * (n_comp - d.n_std + n_io)
    c.cell_is_fixed = fixed
    c.cell_is_obstruction = [True] * n_comp + [False] * n_io
    c.cell_row_polarity = ([cq.CellRowPolarity.SAME] * d.n_std
                           + [cq.CellRowPolarity.ANY] * (n_comp - d.n_std + n_io))
    cx, cy = (fp.core[0] + fp.core[2]) // 2, (fp.core[1] + fp.core[3]) // 2
    if start is None:
        xs, ys = [cx] * n_comp, [cy] * n_comp
    else:
        xs, ys = list(start[0][:n_comp]), list(start[1][:n_comp])
    xs, ys = xs + [p[0] for p in fp.io_xy], ys + [p[1] for p in fp.io_xy]
    for i, (x, y) in fp.macro_xy.items():
        xs[i], ys[i] = x, y
    c.cell_x, c.cell_y = xs, ys
    c.cell_orientation = [cq.CellOrientation.N] * (n_comp + n_io)
    c.rows = [cq.Row(cq.Rectangle(r.x, r.x + r.num_x * r.step_x, r.y, r.y + fp.row_height),
                     cq.CellOrientation.N if r.orient == "N" else cq.CellOrientation.FS) for r in fp.rows]
    skipped = 0
    for pins in d.net_pins:
        if len(pins) > MAX_PLACE_FANOUT:
            skipped += 1
            continue
        c.add_net([p[0] if p[0] >= 0 else n_comp + (-1 - p[0]) for p in pins], [p[2] for p in pins],
                  [p[3] for p in pins])
    c.check()
    # Cells are widened for the placer so that they fill DENSITY of the rows: spread evenly, with room left
    # for legalisation (and routing); the DEF keeps their true widths.
    c.expand_cells_to_density(PLACER_DENSITY, 0.0)
    return c, skipped


def global_placement(d: Design, fp: Floorplan, effort: int) -> tuple[list[int], list[int], dict]:
    """Cell lower-left corners (dbu) after coloquinte's global placement: spread, not yet on rows."""
    import coloquinte as cq

    c, skipped = _circuit(d, fp, None)
    params = cq.ColoquinteParameters(effort)
    t0 = time.monotonic()
    state = {"n": 0}

    def callback(step):
        state["n"] += 1
        if state["n"] % 10 == 0:
            progress(f"  global placement step {state['n']} ({time.monotonic() - t0:.0f} s)")

    progress(f"global placement of {d.n_std:,} cells ({len(d.net_pins) - skipped:,} nets, effort {effort}) ...")
    c.place_global(params, callback)
    n_comp = len(d.comp_name)
    return list(c.cell_x[:n_comp]), list(c.cell_y[:n_comp]), {"nets_ignored_by_placer": skipped,
                                                               "global_s": time.monotonic() - t0}


def legalize(d: Design, fp: Floorplan, effort: int, xs: list[int], ys: list[int]) -> tuple[list[int], list[int], list[str], dict]:
    """Legalisation and detailed placement from the positions ``xs``, ``ys``."""
    import coloquinte as cq

    c, _ = _circuit(d, fp, (xs, ys))
    params = cq.ColoquinteParameters(effort)
    t0 = time.monotonic()
    progress("legalisation ...")
    c.legalize(params)
    progress(f"detailed placement ({time.monotonic() - t0:.0f} s) ...")
    c.place_detailed(params)
    n_comp = len(d.comp_name)
    orient = ["N" if o == cq.CellOrientation.N else "FS" for o in c.cell_orientation[:n_comp]]
    return (list(c.cell_x[:n_comp]), list(c.cell_y[:n_comp]), orient,
            {"coloquinte_hpwl_dbu": c.hpwl(), "legalize_s": time.monotonic() - t0})


# ---------------------------------------------------------------------------------------------- repair

def repair_nets(module: dict, d: Design, fp: Floorplan, xs: list[int], ys: list[int], lef: Lef, sizes,
                liberty: Path, rc: RcModel, clock: str) -> tuple[Design, list[int], list[int], RepairResult]:
    """Rebuilds the high-fanout buffer trees of ``module`` for the global placement ``xs``, ``ys``
    (flow/repair.py); returns the new design and start positions for legalisation (new buffers at the
    centres of their sinks)."""
    dbu = lef.dbu
    cell_xy: dict[str, tuple[float, float]] = {}
    for i, key in enumerate(d.comp_key):
        cell_xy.setdefault(key, ((xs[i] + d.comp_w[i] / 2) / dbu, (ys[i] + d.comp_h[i] / 2) / dbu))
    port_xy, k = {}, 0
    for port in module["ports"].values():
        for b in port["bits"]:
            port_xy[b] = (fp.io_xy[k][0] / dbu, fp.io_xy[k][1] / dbu)
            k += 1
    clock_bits = {b for b in module["ports"].get(clock, {}).get("bits", []) if isinstance(b, int)}
    text = liberty.read_text()
    res = repair(module, cell_xy, port_xy, input_caps(text), liberty_areas(liberty), (rc.c_h + rc.c_v) / 2,
                 steiner_factor, clock_bits, progress)
    try:
        verify(module, res)
    except RepairError as e:
        raise PlaceError(f"net repair broke the netlist: {e}") from None
    new = build_design(module, d.top, lef, sizes)
    pos = {name: (x, y) for name, x, y in zip(d.comp_name, xs, ys)}
    nxs, nys = [], []
    for i, name in enumerate(new.comp_name):
        if name in pos:
            x, y = pos[name]
        else:
            cx, cy = res.new_cells[new.comp_key[i]]
            x, y = round(cx * dbu - new.comp_w[i] / 2), round(cy * dbu - new.comp_h[i] / 2)
        nxs.append(x)
        nys.append(y)
    return new, nxs, nys, res


def snap_to_sites(d: Design, fp: Floorplan, xs: list[int], ys: list[int]) -> int:
    """Moves every standard cell onto the site grid of its row stretch without overlaps; returns the number moved."""
    stretches: dict[int, list[DefRow]] = {}
    for r in fp.rows:
        stretches.setdefault(r.y, []).append(r)
    groups: dict[tuple[int, int], list[int]] = {}
    for i in range(d.n_std):
        rs = stretches.get(ys[i])
        if not rs:
            raise PlaceError(f"cell {d.comp_name[i]} was placed off the rows (y={ys[i]})")
        centre = xs[i] + d.comp_w[i] // 2
        k = min(range(len(rs)), key=lambda k: 0 if rs[k].x <= centre < rs[k].x + rs[k].num_x * rs[k].step_x
                else min(abs(centre - rs[k].x), abs(centre - rs[k].x - rs[k].num_x * rs[k].step_x)))
        groups.setdefault((ys[i], k), []).append(i)
    moved = 0
    for (y, k), cells in groups.items():
        row = stretches[y][k]
        sw, x0, x1 = row.step_x, row.x, row.x + row.num_x * row.step_x
        cells.sort(key=lambda i: xs[i])
        new, end = [], x0
        for i in cells:
            x = max(x0 + round((xs[i] - x0) / sw) * sw, end)
            new.append(x)
            end = x + d.comp_w[i]
        limit = x1
        for n in range(len(cells) - 1, -1, -1):        # push back what ran over the right end
            i = cells[n]
            if new[n] + d.comp_w[i] > limit:
                new[n] = x0 + (limit - d.comp_w[i] - x0) // sw * sw
            limit = new[n]
        if new and new[0] < x0:
            raise PlaceError(f"row {row.name} overflows after snapping to sites (utilization too high?)")
        for n, i in enumerate(cells):
            moved += new[n] != xs[i]
            xs[i] = new[n]
    return moved


def pin_xy(d: Design, fp: Floorplan, xs, ys, orient, p) -> tuple[int, int]:
    obj, _, dx, dy = p[0], p[1], p[2], p[3]
    if obj < 0:
        x, y, _ = fp.io_xy[-1 - obj]
        return x, y
    if orient[obj] == "FS":
        dy = d.comp_h[obj] - dy
    return xs[obj] + dx, ys[obj] + dy


# ---------------------------------------------------------------------------------------------- outputs

def write_outputs(d: Design, fp: Floorplan, lef: Lef, xs, ys, orient, stage: Path, rc: RcModel) -> dict:
    dbu = lef.dbu
    comps = [DefComponent(d.comp_name[i], d.comp_master[i], xs[i], ys[i], orient[i], i >= d.n_std)
             for i in range(len(d.comp_name))]
    pins = []
    for k, name in enumerate(d.io_name):
        x, y, edge = fp.io_xy[k]
        pins.append(DefPin(name, name, "INPUT" if d.io_dir[k] == "input" else "OUTPUT", PIN_LAYERS[edge], x, y,
                           round(0.035 * dbu)))
    hpwl, wire, cap, nets = 0.0, 0.0, 0.0, []
    spef = stage / f"{d.top}.spef"
    with open(spef, "w") as f:
        f.write(spef_header(d.top))
        for name, pins_ in zip(d.net_name, d.net_pins):
            pts = [pin_xy(d, fp, xs, ys, orient, p) for p in pins_]
            px, py = [p[0] / dbu for p in pts], [p[1] / dbu for p in pts]
            hpwl += max(px) - min(px) + max(py) - min(py)
            nets.append((name, [("PIN", p[1]) if p[0] < 0 else (d.comp_name[p[0]], p[1]) for p in pins_]))
            net = NetPins(name, [p[4] for p in pins_], [p[0] < 0 for p in pins_], [p[5] for p in pins_], px, py)
            length, c = write_dnet(f, net, rc, flat=True)
            wire += length
            cap += c
    write_def(stage / f"{d.top}.def", d.top, dbu, fp.die, fp.rows, comps, pins, nets)
    return {"hpwl_um": hpwl, "wire_um": wire, "wire_cap_ff": cap, "nets": len(nets)}


# ---------------------------------------------------------------------------------------------- driver

def _read_lefs(pdk) -> Lef:
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


def place(synth: Path, out: Path, utilization: float = 0.6, effort: int = 1, corners: list[str] | None = None,
          period_ns: float = 10.0, clock: str = "clk", picture: bool = True,
          cache: Path = REPO / "build" / "pdk_cache", repair_fanout: bool = True) -> dict:
    t_start = time.monotonic()
    if not 0.1 <= utilization <= 0.9:
        raise PlaceError(f"--utilization must be within 0.1 .. 0.9, got {utilization}")
    if not 1 <= effort <= 9:
        raise PlaceError(f"--effort must be within 1 .. 9, got {effort}")
    sj = Path(synth) / "synth.json"
    if not sj.is_file():
        raise PlaceError(f"{sj} not found: run `make synth` (python -m flow.synth) first")
    s = json.loads(sj.read_text())
    top = s["top"]
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
    corners = list(corners or pdk.corners)
    out = Path(out)
    stage = out.with_name(out.name + ".tmp")
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    timing = {}

    t = time.monotonic()
    lef = _read_lefs(pdk)
    rc = RcModel.from_lef(lef)
    progress(f"{top}: flattening {netlist} ...")
    liberty = pdk.plain_liberty("typical", cache)
    macro_modules = macros_v.read_text()
    module = flatten(netlist, macros_v, top, liberty, stage)
    try:
        sizes = storage_lib(pdk, cache)
    except MacroMapError as e:
        raise PlaceError(str(e)) from None
    progress(f"placement objects for {len(module['cells']):,} instances ({time.monotonic() - t:.0f} s) ...")
    try:
        d = build_design(module, top, lef, sizes)
    except MacroMapError as e:
        raise PlaceError(str(e)) from None
    timing["netlist_s"] = time.monotonic() - t
    fp = floorplan(d, lef, utilization)
    dbu = lef.dbu
    progress(f"die {fp.die[2] / dbu:.1f} x {fp.die[3] / dbu:.1f} um, {len(fp.rows)} rows, "
             f"{d.n_std:,} cells, {len(d.comp_name) - d.n_std} macros, {len(d.io_name)} I/O pins")

    t = time.monotonic()
    xs, ys, pstats = global_placement(d, fp, effort)
    timing["global_place_s"] = time.monotonic() - t
    fixed = None
    if repair_fanout:
        t = time.monotonic()
        cells_before = d.n_std
        d, xs, ys, fixed = repair_nets(module, d, fp, xs, ys, lef, sizes, liberty, rc, clock)
        timing["repair_s"] = time.monotonic() - t
    t = time.monotonic()
    xs, ys, orient, lstats = legalize(d, fp, effort, xs, ys)
    pstats.update(lstats)
    moved = snap_to_sites(d, fp, xs, ys)
    timing["legalize_s"] = time.monotonic() - t

    t = time.monotonic()
    progress(f"writing the placed netlist {top}.v ...")
    with open(stage / f"{top}.v", "w") as f:
        write_verilog(f, module, top, net_names(module), lambda key, c: _path(key, c.get("attributes", {})),
                      macro_modules)
    del module
    timing["netlist_out_s"] = time.monotonic() - t

    t = time.monotonic()
    progress("writing DEF and SPEF ...")
    wires = write_outputs(d, fp, lef, xs, ys, orient, stage, rc)
    (stage / "macros.txt").write_text(table(d.mappings))
    timing["outputs_s"] = time.monotonic() - t

    files = {"netlist": f"{top}.v", "def": f"{top}.def", "spef": f"{top}.spef", "sta": "sta/sta.json",
             "macros": "macros.txt"}
    progress(f"post-placement STA at {corners}{', the layout meanwhile' if picture else ''} ...")
    # OpenSTA runs in child processes: this thread only waits for them, while the main one writes the layout.
    with ThreadPoolExecutor(max_workers=1) as pool:
        sta_run = pool.submit(run_sta, Path(synth), stage / "sta", corners, period_ns, clock, cache,
                              parasitics=stage / f"{top}.spef", netlist=stage / f"{top}.v")
        if picture:
            from flow.gds import write_gds, write_pictures
            t = time.monotonic()
            write_gds(stage / f"{top}.gds", pdk.cell_gds, d, fp, xs, ys, orient, lef)
            files.update({"gds": f"{top}.gds"})
            files.update(write_pictures(stage, top, d, fp, xs, ys, pdk.klayout_lyp, dbu))
            timing["layout_s"] = time.monotonic() - t
            progress(f"layout written ({timing['layout_s']:.0f} s); waiting for STA ...")
        try:
            sta = sta_run.result()
        except StaError as e:
            raise PlaceError(f"post-placement STA failed: {e}") from None
    timing["sta_s"] = sta["runtime_s"]

    die_w, die_h = fp.die[2] / dbu, fp.die[3] / dbu
    std_area = sum(w * h for w, h in zip(d.comp_w[:d.n_std], d.comp_h[:d.n_std])) / dbu ** 2
    macro_area = sum(w * h for w, h in zip(d.comp_w[d.n_std:], d.comp_h[d.n_std:])) / dbu ** 2
    core_area = sum(r.num_x * r.step_x for r in fp.rows) * fp.row_height / dbu ** 2     # the rows' area
    result = {
        "schema": "nano-k3/place/1",
        "top": top,
        "synth_config_sha256": s["rtl"]["config_sha256"],
        "die": {"width_um": round(die_w, 3), "height_um": round(die_h, 3), "area_um2": round(die_w * die_h, 3)},
        "core": {"x0_um": fp.core[0] / dbu, "y0_um": fp.core[1] / dbu, "x1_um": fp.core[2] / dbu,
                 "y1_um": fp.core[3] / dbu, "rows": len({r.y for r in fp.rows}), "row_stretches": len(fp.rows),
                 "site": SITE},
        "utilization": round(std_area / core_area, 4),
        "utilization_target": utilization,
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
        "placer": {"tool": "coloquinte", "effort": effort, "density": PLACER_DENSITY,
                   "nets_ignored_above_fanout": MAX_PLACE_FANOUT,
                   "nets_ignored": pstats["nets_ignored_by_placer"],
                   "cells_moved_to_site_grid": moved,
                   "coloquinte_hpwl_um": round(pstats["coloquinte_hpwl_dbu"] / dbu, 1)},
        "floorplan": {"macros": "packed in shelves from the bottom-left corner, FIXED, keep-out ring "
                                f"{MACRO_HALO_UM} um; rows around and above them",
                      "io": "inputs on the left then top edge, outputs on the right then bottom edge"},
        "macros": [m.as_dict() for m in d.mappings],
        "roms_as_logic": d.roms,
        "srams_as_flops": d.flop_srams,
        "repair": ({"enabled": True, **fixed.as_dict(), "cells_before": cells_before, "cells_after": d.n_std}
                   if fixed else {"enabled": False}),
        "parasitics": rc.as_dict(),
        "sta": {c: {k: v[k] for k in ("wns_ns", "tns_ns", "worst_hold_slack_ns", "min_period_ns", "fmax_mhz", "met")}
                for c, v in sta["corners"].items()},
        "period_ns": period_ns,
        "runtime_s": round(time.monotonic() - t_start, 2),
        "finished_unix": round(time.time(), 1),
        "runtime_by_step_s": {k: round(v, 2) for k, v in timing.items()},
        "files": files,
        "metrics": {
            "place__design__die__area": round(die_w * die_h, 3),
            "place__design__utilization": round(std_area / core_area, 4),
            "place__design__instance__count__stdcell": d.n_std,
            "place__design__instance__count__macros": len(d.comp_name) - d.n_std,
            "place__route__wirelength__estimated": round(wires["hpwl_um"], 1),
            **{f"place__timing__setup__ws__{c}": v["wns_ns"] for c, v in sta["corners"].items()},
            **{f"place__timing__min_period__{c}": v["min_period_ns"] for c, v in sta["corners"].items()},
        },
    }
    (stage / "place.json").write_text(json.dumps(result, indent=1) + "\n")
    (stage / "place.txt").write_text(summary_text(result))
    for f in ("flatten.job.json",):
        (stage / f).unlink(missing_ok=True)
    publish(stage, out)
    return result


def summary_text(r: dict) -> str:
    die = r["die"]
    lines = [
        f"placement of {r['top']} on Nangate45 (coloquinte effort {r['placer']['effort']})",
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
    for c, v in r["sta"].items():
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
    ap.add_argument("--effort", type=int, default=1, help="coloquinte effort 1..9 (1: the chip, 1.5M cells, in the least time)")
    ap.add_argument("--corners", nargs="+", default=list(CORNERS), choices=CORNERS)
    ap.add_argument("--period", type=float, default=10.0, help="clock period in ns")
    ap.add_argument("--clock", default="clk")
    ap.add_argument("--no-picture", action="store_true", help="skip the GDS and PNG")
    ap.add_argument("--no-repair", action="store_true", help="keep synthesis' buffer trees (flow/repair.py)")
    ap.add_argument("--flatten-worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.flatten_worker:
        die_with_parent()
        return flatten_worker(args.flatten_worker)
    return report_stage("flow.place", PlaceError,
                        lambda: place(args.synth, args.out, args.utilization, args.effort, args.corners, args.period,
                                      args.clock, not args.no_picture, repair_fanout=not args.no_repair),
                        summary_text, lambda r: [args.out / "place.json", args.out / r["files"]["def"]])


if __name__ == "__main__":
    sys.exit(main())
