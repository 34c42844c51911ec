"""The flat floorplan and placement: one coloquinte circuit of the whole design (``python -m flow.place --flat``).

Floorplan: the macros, each with a keep-out ring, are packed in shelves from the bottom-left corner
(``FIXED``); the standard-cell rows fill the rest (a row stops at a keep-out and resumes after it), enough
of them for the utilisation. The core is square when the macros allow it. Inputs are spread over the left
and top edges, outputs over the right and bottom ones, in port order.

``Floorplan`` (die, rows, macros, I/O pins) is also what the region flow (flow/floorplan.py) hands to the
outputs, and ``snap_to_sites`` / ``pin_xy`` serve both flows.
"""
from __future__ import annotations

import bisect
import ctypes
import math
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from flow.lefdef import DefRow, Lef
from flow.macro_map import MACRO_KEEPOUT_UM
from flow.place_netlist import Design, PlaceError, progress
from flow.row_legalize import Stretch, apply_legal, legalize_rows
from pdk_config.nangate45 import SITE

PLACER_DENSITY = 0.9          # cells widened to fill this share of the rows while placing (even spread)
MAX_PLACE_FANOUT = 1000        # nets above this many pins are ignored by the placer (still in DEF / SPEF)
CORE_MARGIN_SITES = 10         # gap between die edge and rows, in sites (x) ...
CORE_MARGIN_ROWS = 1           # ... and rows (y): room for the I/O pins


@dataclass
class Floorplan:
    die: tuple[int, int, int, int]
    rows: list[DefRow]                         # one per free stretch of a row: rows stop at macro keep-outs
    row_height: int
    core: tuple[int, int, int, int]            # the area rows and macros share
    macro_xy: dict[int, tuple[int, int]]       # component index -> lower-left
    io_xy: list[tuple[int, int, str]]          # per I/O pin: x, y, edge


def pack_shelves(sizes: list[tuple[int, int, int]], width: int, halo: int, x0: int, y0: int):
    """Shelf packing of (index, w, h) boxes, tallest first, into rows ``width`` wide from (x0, y0),
    serpentine: every second shelf runs from the right end back, so the tiles of one macro that a shelf's
    end splits (they are consecutive: same size, index order) continue beside each other on the next shelf
    instead of across the whole width (on the nano chip a KDA state array's tiles lay 1.5 mm apart).
    Returns lower-left corners and the total height used."""
    xy, x, y, shelf_h, shelf = {}, x0, y0, 0, 0
    for i, w, h in sorted(sizes, key=lambda t: (-t[2], -t[1], t[0])):
        if x + w + 2 * halo > x0 + width and x > x0:
            x, y, shelf_h, shelf = x0, y + shelf_h, 0, shelf + 1
        left = x if shelf % 2 == 0 else x0 + width - (x - x0) - (w + 2 * halo)
        xy[i] = (left + halo, y + halo)
        x += w + 2 * halo
        shelf_h = max(shelf_h, h + 2 * halo)
    return xy, (y + shelf_h - y0) if sizes else 0


def free_stretches(x0: int, x1: int, y0: int, y1: int, blocked, sw: int, min_sites: int = 4):
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
    halo = round(MACRO_KEEPOUT_UM * lef.dbu)
    std_area = sum(w * h for w, h in zip(d.comp_w[:d.n_std], d.comp_h[:d.n_std]))
    macro_fp = sum((w + 2 * halo) * (h + 2 * halo) for w, h in zip(d.comp_w[d.n_std:], d.comp_h[d.n_std:]))
    widest = max([w + 2 * halo for w in d.comp_w[d.n_std:]], default=0)
    core_w = max(math.sqrt(std_area / utilization + macro_fp), widest, 20 * rh)
    core_w = math.ceil(core_w / sw) * sw
    mx, my = CORE_MARGIN_SITES * sw, CORE_MARGIN_ROWS * rh
    boxes = [(i, d.comp_w[i], d.comp_h[i]) for i in range(d.n_std, len(d.comp_name))]
    macro_xy, macro_h = pack_shelves(boxes, core_w, halo, mx, my)
    blocked = [(x - halo, y - halo, x + d.comp_w[i] + halo, y + d.comp_h[i] + halo) for i, (x, y) in macro_xy.items()]
    rows, free, k = [], 0, 0
    while free < std_area / utilization or k * rh < macro_h or k < 2:
        y = my + k * rh
        for s, (a, b) in enumerate(free_stretches(mx, mx + core_w, y, y + rh, blocked, sw)):
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


def _circuit(d: Design, fp: Floorplan, nets: list[list[tuple]]):
    """The coloquinte circuit of ``d`` with the pin lists ``nets`` (flow/place_nets.py); cells start at the
    core centre."""
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
    xs, ys = [cx] * n_comp + [p[0] for p in fp.io_xy], [cy] * n_comp + [p[1] for p in fp.io_xy]
    for i, (x, y) in fp.macro_xy.items():
        xs[i], ys[i] = x, y
    c.cell_x, c.cell_y = xs, ys
    c.cell_orientation = [cq.CellOrientation.N] * (n_comp + n_io)
    c.rows = [cq.Row(cq.Rectangle(r.x, r.x + r.num_x * r.step_x, r.y, r.y + fp.row_height),
                     cq.CellOrientation.N if r.orient == "N" else cq.CellOrientation.FS) for r in fp.rows]
    for pins in nets:
        c.add_net([p[0] if p[0] >= 0 else n_comp + (-1 - p[0]) for p in pins], [p[2] for p in pins],
                  [p[3] for p in pins])
    c.check()
    # Cells are widened for the placer so that they fill DENSITY of the rows: spread evenly, with room left
    # for legalisation (and routing); the DEF keeps their true widths.
    c.expand_cells_to_density(PLACER_DENSITY, 0.0)
    return c


@contextmanager
def coloquinte_report_as_progress():
    """coloquinte's own report (C++ on file descriptor 1: ``#3: UB ... Dist ... LB ...``) collected while
    it runs and then printed as progress lines on stderr, ``[place] coloquinte: #3: ...``: no line of it
    reaches the terminal or a log without the stage's prefix. A file, not a pipe: the C++ call may hold
    the interpreter lock, so nothing could drain a pipe while it runs."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile("w+", errors="replace") as report:
        os.dup2(report.fileno(), 1)
        try:
            yield
        finally:
            ctypes.CDLL(None).fflush(None)        # what the C library still buffers, before fd 1 is restored
            os.dup2(saved, 1)
            os.close(saved)
            report.seek(0)
            lines = [f"[place] coloquinte: {ln.rstrip()}\n" for ln in report if ln.strip()]
            sys.stderr.write("".join(lines))
            sys.stderr.flush()


def global_placement(d: Design, fp: Floorplan, effort: int, nets: list[list[tuple]]) -> tuple[list[int], list[int], dict]:
    """Cell lower-left corners (dbu) after coloquinte's global placement with the pin lists ``nets``
    (flow/place_nets.py): spread, not yet on rows."""
    import coloquinte as cq

    c = _circuit(d, fp, nets)
    params = cq.ColoquinteParameters(effort)
    t0 = time.monotonic()
    state = {"n": 0}

    def callback(step):
        state["n"] += 1
        if state["n"] % 10 == 0:
            progress(f"  global placement step {state['n']} ({time.monotonic() - t0:.0f} s)")

    progress(f"global placement of {d.n_std:,} cells ({len(nets):,} nets, effort {effort}) ...")
    with coloquinte_report_as_progress():
        c.place_global(params, callback)
    n_comp = len(d.comp_name)
    return list(c.cell_x[:n_comp]), list(c.cell_y[:n_comp]), {"global_s": time.monotonic() - t0}


def stretches_of(rows: list[DefRow]) -> list[Stretch]:
    """Row stretches for flow/row_legalize.py."""
    return [Stretch(r.y, r.x, r.x + r.num_x * r.step_x, r.orient) for r in rows]


def legalize(d: Design, fp: Floorplan, xs: list[int], ys: list[int]) -> tuple[list[int], list[int], list[str], dict]:
    """Legal positions of the standard cells from the global placement ``xs``, ``ys`` (flow/row_legalize.py);
    macros and I/O pins as they are."""
    t0 = time.monotonic()
    progress("legalisation (rows) ...")
    xs, ys = list(xs), list(ys)
    orient = ["N"] * len(d.comp_name)
    legal, stats = legalize_rows(stretches_of(fp.rows), list(range(d.n_std)), xs, ys, d.comp_w, fp.rows[0].step_x)
    apply_legal(legal, xs, ys, orient)
    return xs, ys, orient, {**stats, "legalize_s": time.monotonic() - t0}


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


@dataclass
class PinTable:
    """What every net pin's position is made from, besides the placement: net k's pins are
    ``[start[k], start[k + 1])``, in ``d.net_pins`` order; per pin its object (component index, or -1 - I/O pin
    index), its offset in the object (dbu) and whether it drives the net."""
    start: np.ndarray       # (nets + 1,) int64
    obj: np.ndarray         # (pins,) int64
    dx: np.ndarray
    dy: np.ndarray
    drives: np.ndarray      # bool

    @classmethod
    def of(cls, d: Design) -> "PinTable":
        """``d``'s table, made once per design (``Design.derived``): sign-off asks for it many times."""
        cache = d.derived()
        if "pin_table" not in cache:
            counts = np.fromiter(map(len, d.net_pins), np.int64, len(d.net_pins))
            start = np.zeros(len(counts) + 1, np.int64)
            np.cumsum(counts, out=start[1:])
            n = int(start[-1])
            flat = [p for pins in d.net_pins for p in pins]
            obj, dx, dy = (np.fromiter(map(itemgetter(c), flat), np.int64, n) for c in (0, 2, 3))
            cache["pin_table"] = cls(start, obj, dx, dy, np.fromiter(map(itemgetter(5), flat), bool, n))
        return cache["pin_table"]


@dataclass
class PinPoints:
    """Every net pin's position at once (``pin_xy`` for all of them, in numpy): net k's pins are
    ``x[start[k]:start[k + 1]]`` (dbu), in ``d.net_pins`` order; ``obj`` and ``drives`` per pin as there."""
    start: np.ndarray       # (nets + 1,) int64
    x: np.ndarray           # (pins,) int64
    y: np.ndarray
    obj: np.ndarray         # component index, or -1 - I/O pin index
    drives: np.ndarray      # bool

    @classmethod
    def of(cls, d: Design, fp: Floorplan, xs, ys, orient) -> "PinPoints":
        t = PinTable.of(d)
        obj, n = t.obj, len(t.obj)
        x, y = np.empty(n, np.int64), np.empty(n, np.int64)
        cell = obj >= 0
        k = obj[cell]
        flipped = np.fromiter((o == "FS" for o in orient), bool, len(orient))[k]
        x[cell] = np.asarray(xs, np.int64)[k] + t.dx[cell]
        y[cell] = np.asarray(ys, np.int64)[k] + np.where(flipped, np.asarray(d.comp_h, np.int64)[k] - t.dy[cell],
                                                         t.dy[cell])
        if (~cell).any():
            io = np.array([(px, py) for px, py, _ in fp.io_xy], np.int64).reshape(-1, 2)
            j = -1 - obj[~cell]
            x[~cell], y[~cell] = io[j, 0], io[j, 1]
        return cls(t.start, x, y, obj, t.drives)

    def boxes(self) -> np.ndarray:
        """(nets, 4) int64: each net's pin bounding box (x0, y0, x1, y1); a net without pins is all zeros."""
        out = np.zeros((len(self.start) - 1, 4), np.int64)
        full = np.flatnonzero(np.diff(self.start) > 0)
        at = self.start[full]
        for col, (v, ufunc) in enumerate(((self.x, np.minimum), (self.y, np.minimum), (self.x, np.maximum),
                                          (self.y, np.maximum))):
            out[full, col] = ufunc.reduceat(v, at)
        return out


class RowSpots:
    """The free row stretches of a floorplan by row, for moving a start position onto the nearest of them."""

    def __init__(self, fp: Floorplan):
        self.rh = fp.row_height
        self.by_y: dict[int, list[tuple[int, int]]] = {}
        for r in fp.rows:
            self.by_y.setdefault(r.y, []).append((r.x, r.x + r.num_x * r.step_x))
        for spans in self.by_y.values():
            spans.sort()
        self.ys = sorted(self.by_y)
        self.starts = {y: [s[0] for s in spans] for y, spans in self.by_y.items()}

    def _in_row(self, y: int, x: int, w: int) -> tuple[int, int] | None:
        """(distance, x) of the nearest legal lower-left x for a cell ``w`` wide in row ``y``."""
        spans, starts = self.by_y[y], self.starts[y]
        k = bisect.bisect_right(starts, x)
        best = None
        for x0, x1 in spans[max(0, k - 1):k + 1]:
            if x1 - x0 < w:
                continue
            nx = min(max(x, x0), x1 - w)
            if best is None or abs(nx - x) < best[0]:
                best = (abs(nx - x), nx)
        return best

    def nearest(self, x: int, y: int, w: int) -> tuple[int, int]:
        """The lower-left nearest (Manhattan) to ``(x, y)`` where a cell ``w`` wide lies inside a free row
        stretch; ``(x, y)`` itself when it already does (its row is the one its y falls in)."""
        k = bisect.bisect_right(self.ys, y) - 1
        best: tuple[int, int, int] | None = None
        for step in range(len(self.ys)):
            cands = {i for i in (k - step, k + step + 1) if 0 <= i < len(self.ys)}
            if not cands:
                break
            for i in sorted(cands):
                ry = self.ys[i]
                if best is not None and abs(ry - y) >= best[0]:
                    continue
                hit = self._in_row(ry, x, w)
                if hit is not None:
                    d = hit[0] + (0 if ry <= y < ry + self.rh else abs(ry - y))
                    if best is None or d < best[0]:
                        best = (d, hit[1], ry)
            if best is not None and step * self.rh > best[0]:
                break
        if best is None:
            raise PlaceError("the floorplan has no row stretch wide enough for a buffer")
        return best[1], best[2]
