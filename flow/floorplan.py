"""Floorplan by hierarchy: a rectangular region per engine, its macros at its edge, talkative engines side by side.

The engines are synth.json's ``hierarchy.engines``: the children of the top, or of the one instance that
wraps them all (``core.mac``, ``core.kda``, ...). Everything else (the wrapper's and the top's own cells,
the sequencer when it is written there) is one more region, named as synthesis names that row
(``(core own logic)``). A placed cell belongs to the engine its instance path starts with, a fakeram45
tile to the engine whose hierarchy holds its ``msh_sram``.

1. size: a region's area is its standard-cell area / utilisation plus its macros' footprints (keep-out
   ring included); it is at least as wide and as tall as its largest macro with the ring;
2. arrangement (``arrange``): a slicing floorplan by recursive bisection. Each step splits the engines
   into two groups of balanced area (30..70 %, or the most balanced split there is) with the fewest nets
   between them (every split is tried), cuts the rectangle across its longer side in proportion to the
   groups' areas, and puts each group on the side nearer the engines and I/O pins it talks to outside the
   rectangle (terminal propagation, Dunlop & Kernighan 1985). Engines joined by many nets stay in one
   group until they are split last, and then share an edge. Cuts lie on the site grid (x), row grid (y);
3. macros: packed in shelves along the region edge that faces the fewest nets to other regions (the die
   edge when the region touches it), so the region's logic faces the engines it talks to;
4. rows: each region's rows stop at its shelves of macros (a shelf's macros and keep-out rings as one
   box, so no row stretch is left between two macros). A region left with too few rows for its cells
   (grid snapping, macro packing) gets more area and the arrangement is made again;
5. I/O pins: on the die edge next to the region their net reaches (most pins), in port order, at least one
   site apart.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from flow.lefdef import DefRow, Lef
from flow.macro_map import MACRO_KEEPOUT_UM
from flow.place_flat import (CORE_MARGIN_ROWS, CORE_MARGIN_SITES, MAX_PLACE_FANOUT, Floorplan, free_stretches,
                             pack_shelves)
from flow.place_netlist import Design, PlaceError
from pdk_config.nangate45 import SITE

BALANCE = 0.2              # a bisection's smaller side holds at least 50 - 20 = 30 % of the area when it can
EXHAUSTIVE_UP_TO = 16      # engines split by trying every bipartition (2^15 of them); beyond: greedy moves
FIT_SLACK = 1.03           # a region's rows may be up to 3 % fuller than the target utilisation
FIT_ROUNDS = 12            # arrangements tried while some region lacks rows or room for its macros
FIT_STEP = 1.2             # ... each time giving such a region at most this much more area
DISTORTION = 0.1           # a cut that changes a side's area by more than this is made the other way if it can
MIN_ROWS, MIN_SITES = 3, 30   # the smallest region: rows high, sites wide
TOP_OWN = "(top-level logic)"

Rect = tuple[int, int, int, int]


@dataclass
class Region:
    name: str
    cells: int = 0                                      # standard cells
    cell_area: int = 0                                  # dbu^2
    macros: list[int] = field(default_factory=list)     # component indices of its fakeram45 tiles
    synth_area_um2: float | None = None                 # synth.json's area of the engine
    target: float = 0.0                                 # area the arrangement gives it, dbu^2
    min_w: int = 0
    min_h: int = 0
    rect: Rect = (0, 0, 0, 0)
    macro_edge: str = ""
    rows: list[DefRow] = field(default_factory=list)

    def row_area(self, rh: int) -> int:
        return sum(r.num_x * r.step_x for r in self.rows) * rh


@dataclass
class RegionPlan:
    regions: list[Region]
    region_of: list[int]                        # per component (cells, then macro tiles): its region
    nets: dict[tuple[int, int], float]          # (a, b), a < b: nets between the two regions
    io_region: list[int]                        # per I/O pin: the region it sits next to
    fp: Floorplan                               # die, every region's rows, macros, I/O pins
    utilization: float
    rounds: int                                 # arrangements made until every region fitted


# ---------------------------------------------------------------------------------------------- engines

def engines_of(synth: dict) -> tuple[list[str], str, dict[str, float]]:
    """(engine instance paths with '/' (``core/mac``), the name of the rest's region, synth's area per name)."""
    rows = synth["hierarchy"]["engines"]
    names = [e["name"] for e in rows if not e["name"].startswith("(")]
    rest = next((e["name"] for e in rows if e["name"].startswith("(")), TOP_OWN)
    return [n.replace(".", "/") for n in names], rest, {e["name"].replace(".", "/"): e["area_um2"] for e in rows}


def assign(d: Design, engines: list[str], rest: str) -> tuple[list[str], list[int]]:
    """Region names (engines, then the rest) and each component's region index."""
    names = list(engines) + [rest]
    index = {n: k for k, n in enumerate(engines)}
    depths = sorted({n.count("/") + 1 for n in engines})
    region_of = []
    for path in d.comp_name:
        parts = path.split("/")
        k = next((index[key] for depth in depths if (key := "/".join(parts[:depth])) in index), len(engines))
        region_of.append(k)
    return names, region_of


def connectivity(d: Design, region_of: list[int], n: int) -> tuple[dict[tuple[int, int], float], list[list[int]]]:
    """Nets between regions (a net reaching k regions counts 1 / (k - 1) for each pair, so a two-region net
    counts 1) and, per I/O pin, its net's pins in each region. Nets the placer ignores (clock, reset) are left out."""
    nets: dict[tuple[int, int], float] = {}
    io_links = [[0] * n for _ in d.io_name]
    for pins in d.net_pins:
        if len(pins) > MAX_PLACE_FANOUT:
            continue
        regs = sorted({region_of[p[0]] for p in pins if p[0] >= 0})
        for p in pins:
            if p[0] < 0:
                for r in regs:
                    io_links[-1 - p[0]][r] += 1
        if len(regs) > 1:
            share = 1.0 / (len(regs) - 1)
            for pair in combinations(regs, 2):
                nets[pair] = nets.get(pair, 0.0) + share
    return nets, io_links


# ---------------------------------------------------------------------------------------------- arrangement

def bipartition(members: list[int], area: list[float], w: np.ndarray) -> tuple[list[int], list[int]]:
    """Two groups of balanced area with the fewest nets between them."""
    n = len(members)
    if n == 2:
        return [members[0]], [members[1]]
    a = np.array([area[m] for m in members], dtype=float)
    sub = w[np.ix_(members, members)]
    if n <= EXHAUSTIVE_UP_TO:
        masks = (np.arange(1, 2 ** (n - 1))[:, None] >> np.arange(n)) & 1        # last member always in B
        f = masks @ a / a.sum()
        cut = ((masks @ sub) * (1 - masks)).sum(axis=1)
        off = np.abs(f - 0.5)
        ok = off <= max(BALANCE, off.min() + 1e-9)
        best = min(np.flatnonzero(ok), key=lambda i: (round(cut[i], 9), off[i]))
        pick = masks[best].astype(bool)
    else:
        pick = _greedy_split(a, sub)
    return [m for m, s in zip(members, pick) if s], [m for m, s in zip(members, pick) if not s]


def _greedy_split(a: np.ndarray, sub: np.ndarray) -> np.ndarray:
    """Largest first onto the lighter side, then single moves that cut fewer nets while staying balanced."""
    pick = np.zeros(len(a), dtype=bool)
    for i in np.argsort(-a):
        pick[i] = a[pick].sum() < a[~pick].sum()
    def cut(p: np.ndarray) -> float:
        return sub[p][:, ~p].sum()

    while True:
        base, moved = cut(pick), False
        for i in range(len(a)):
            trial = pick.copy()
            trial[i] = not trial[i]
            if trial.any() and (~trial).any() and abs(a[trial].sum() / a.sum() - 0.5) <= BALANCE \
                    and cut(trial) < base - 1e-9:
                pick, base, moved = trial, cut(trial), True
        if not moved:
            return pick


def _split(rect: Rect, first: float, second: float, vertical: bool, grid: tuple[int, int], min_first: int,
           min_second: int) -> tuple[Rect, Rect]:
    """``rect`` cut in two in proportion ``first`` : ``second`` (vertical: a cut at some x), on the grid."""
    x0, y0, x1, y1 = rect
    lo, hi, g = (x0, x1, grid[0]) if vertical else (y0, y1, grid[1])
    c = lo + (hi - lo) * first / (first + second)
    c = lo + round((c - lo) / g) * g
    c = min(max(c, lo + -(-min_first // g) * g), hi - -(-min_second // g) * g)   # each side its minimum when it can
    c = min(max(c, lo + g), hi - g)
    return ((x0, y0, c, y1), (c, y0, x1, y1)) if vertical else ((x0, y0, x1, c), (x0, c, x1, y1))


def _centre(r: Rect) -> tuple[float, float]:
    return (r[0] + r[2]) / 2, (r[1] + r[3]) / 2


def arrange(area: list[float], w: np.ndarray, io_w: list[float], core: Rect, min_wh: list[tuple[int, int]],
            grid: tuple[int, int]) -> list[Rect]:
    """A rectangle per region, slicing ``core`` by recursive bisection (see the module's step 2)."""
    n = len(area)
    pos = [_centre(core)] * n
    out: list[Rect | None] = [None] * n
    queue = deque([(list(range(n)), core)])
    while queue:
        members, rect = queue.popleft()
        if len(members) == 1:
            out[members[0]] = rect
            continue
        a, b = bipartition(members, area, w)
        inside = set(members)
        ext = [j for j in range(n) if j not in inside]

        def cost(group, sub):
            cx, cy = _centre(sub)
            edge = min(sub[0] - core[0], core[2] - sub[2], sub[1] - core[1], core[3] - sub[3])
            return sum(w[i, j] * (abs(cx - pos[j][0]) + abs(cy - pos[j][1])) for i in group for j in ext) \
                + sum(io_w[i] for i in group) * edge

        def short(group, sub):
            mw = max(min_wh[i][0] for i in group)
            mh = max(min_wh[i][1] for i in group)
            return max(0, mw - (sub[2] - sub[0])) + max(0, mh - (sub[3] - sub[1]))

        whole = sum(area[i] for i in members)

        def distorted(group, sub):          # a side's minimum moved the cut: the groups lose their shares
            share = (sub[2] - sub[0]) * (sub[3] - sub[1]) / ((rect[2] - rect[0]) * (rect[3] - rect[1]))
            return abs(share / (sum(area[i] for i in group) / whole) - 1) > DISTORTION

        options = []
        longer_x = rect[2] - rect[0] >= rect[3] - rect[1]
        for vertical in (longer_x, not longer_x):
            for g1, g2 in ((a, b), (b, a)):
                k = 0 if vertical else 1
                r1, r2 = _split(rect, sum(area[i] for i in g1), sum(area[i] for i in g2), vertical, grid,
                                max(min_wh[i][k] for i in g1), max(min_wh[i][k] for i in g2))
                options.append((short(g1, r1) + short(g2, r2), distorted(g1, r1) or distorted(g2, r2),
                                vertical != longer_x, cost(g1, r1) + cost(g2, r2), (g1, r1), (g2, r2)))
        best = min(options, key=lambda o: o[:4])
        for group, sub in best[4:]:
            for i in group:
                pos[i] = _centre(sub)
            queue.append((group, sub))
    return out


def adjacent(r1: Rect, r2: Rect) -> bool:
    """The two rectangles share a stretch of edge (not just a corner)."""
    touch_x = r1[2] == r2[0] or r2[2] == r1[0]
    touch_y = r1[3] == r2[1] or r2[3] == r1[1]
    overlap_x = min(r1[2], r2[2]) - max(r1[0], r2[0])
    overlap_y = min(r1[3], r2[3]) - max(r1[1], r2[1])
    return (touch_x and overlap_y > 0) or (touch_y and overlap_x > 0)


# ---------------------------------------------------------------------------------------------- macros, rows

def _edge_cost(k: int, rect: Rect, rects: list[Rect], nets: np.ndarray) -> dict[str, float]:
    """Nets to the regions across each edge of region ``k``, in proportion to the length they share."""
    x0, y0, x1, y1 = rect
    out = {"bottom": 0.0, "top": 0.0, "left": 0.0, "right": 0.0}
    for j, (a0, b0, a1, b1) in enumerate(rects):
        if j == k or not nets[k, j]:
            continue
        ox, oy = min(x1, a1) - max(x0, a0), min(y1, b1) - max(y0, b0)
        for edge, hit, share in (("bottom", b1 == y0, ox / (x1 - x0)), ("top", b0 == y1, ox / (x1 - x0)),
                                 ("left", a1 == x0, oy / (y1 - y0)), ("right", a0 == x1, oy / (y1 - y0))):
            if hit and share > 0:
                out[edge] += nets[k, j] * share
    return out


def place_macros(d: Design, tiles: list[int], rect: Rect, halo: int, costs: dict[str, float]):
    """Lower-left corners of ``tiles`` packed along the cheapest edge of ``rect`` on which they fit, and that
    edge; None when they fit on no edge."""
    if not tiles:
        return {}, ""
    x0, y0, x1, y1 = rect
    order = sorted(costs, key=lambda e: (costs[e], -((x1 - x0) if e in ("bottom", "top") else (y1 - y0))))
    for edge in order:
        along_x = edge in ("bottom", "top")
        length, depth = (x1 - x0, y1 - y0) if along_x else (y1 - y0, x1 - x0)
        boxes = [(i, d.comp_w[i], d.comp_h[i]) if along_x else (i, d.comp_h[i], d.comp_w[i]) for i in tiles]
        if any(u + 2 * halo > length for _, u, _ in boxes):
            continue
        local, used = pack_shelves(boxes, length, halo, 0, 0)
        if used > depth:
            continue
        xy = {}
        for i, (u, v) in local.items():
            w, h = d.comp_w[i], d.comp_h[i]
            xy[i] = {"bottom": (x0 + u, y0 + v), "top": (x0 + u, y1 - v - h),
                     "left": (x0 + v, y0 + u), "right": (x1 - v - w, y0 + u)}[edge]
        return xy, edge
    return None


def shelf_blocks(d: Design, xy: dict[int, tuple[int, int]], halo: int, edge: str, rect: Rect) -> list[Rect]:
    """One keep-out box per shelf of macros (the box around its macros and their halos): rows stop at a
    shelf, not at each macro, so no short row stretches are left between macros. Every shelf but the
    innermost also runs the full length of ``rect`` along ``edge``: the stretch beside a shorter or
    staggered shelf is a pocket walled in by the shelves above and below it, and the placer fills such
    pockets with the overflow of the logic under the macros (one MAC lane's adder split between pockets
    1.4 mm apart on the nano chip). The innermost shelf's side stretches open onto the free rows."""
    shelves: dict[int, list[Rect]] = {}
    for i, (x, y) in xy.items():
        w, h = d.comp_w[i], d.comp_h[i]
        key = {"bottom": y, "top": y + h, "left": x, "right": x + w}[edge]
        shelves.setdefault(key, []).append((x - halo, y - halo, x + w + halo, y + h + halo))
    boxes = {k: (min(b[0] for b in bs), min(b[1] for b in bs), max(b[2] for b in bs), max(b[3] for b in bs))
             for k, bs in shelves.items()}
    if not boxes:
        return []
    inner = (max if edge in ("bottom", "left") else min)(boxes)
    along_x = edge in ("bottom", "top")
    return [box if k == inner else
            (rect[0], box[1], rect[2], box[3]) if along_x else (box[0], rect[1], box[2], rect[3])
            for k, box in boxes.items()]


def region_rows(k: int, rect: Rect, blocked: list[Rect], core_y0: int, rh: int, sw: int) -> list[DefRow]:
    """The rows of region ``k``: every row of the core inside ``rect``, stopping at macro keep-outs. Row
    orientation alternates with the row's index in the core, so abutting regions agree."""
    rows = []
    for j in range((rect[1] - core_y0) // rh, (rect[3] - core_y0) // rh):
        y = core_y0 + j * rh
        for s, (a, b) in enumerate(free_stretches(rect[0], rect[2], y, y + rh, blocked, sw)):
            rows.append(DefRow(f"ROW_{j}_{k}_{s}", SITE, a, y, "N" if j % 2 == 0 else "FS", (b - a) // sw, sw))
    return rows


def _fit(d: Design, regions: list[Region], rects: list[Rect], w: np.ndarray, halo: int, core: Rect, rh: int, sw: int,
         utilization: float) -> tuple[dict[int, tuple[int, int]], list[tuple[int, float]]]:
    """Puts every region in its rectangle (macros, rows); returns the macros' corners and, per region that
    does not fit, the factor its area should grow by."""
    macro_xy, short = {}, []
    for k, (r, rect) in enumerate(zip(regions, rects)):
        r.rect = rect
        packed = place_macros(d, r.macros, rect, halo, _edge_cost(k, rect, rects, w))
        if packed is None:
            short.append((k, FIT_STEP))
            continue
        xy, r.macro_edge = packed
        macro_xy.update(xy)
        blocked = shelf_blocks(d, xy, halo, r.macro_edge, rect)
        r.rows = region_rows(k, rect, blocked, core[1], rh, sw)
        if r.cells:
            room = r.row_area(rh)
            if room == 0:
                short.append((k, FIT_STEP))
            elif r.cell_area / room > utilization * FIT_SLACK:
                short.append((k, r.cell_area / room / utilization * 1.01))
    return macro_xy, short


def _sized_regions(d: Design, names: list[str], region_of: list[int], synth_area: dict, utilization: float,
                   halo: int, sw: int, rh: int) -> tuple[list[Region], list[int]]:
    """Regions with their cells, macros, target areas and smallest sides; regions with nothing to place
    (an engine of ROMs only, which are logic not in this netlist) are left out."""
    regions = [Region(n, synth_area_um2=synth_area.get(n)) for n in names]
    for i, k in enumerate(region_of):
        if i < d.n_std:
            regions[k].cells += 1
            regions[k].cell_area += d.comp_w[i] * d.comp_h[i]
        else:
            regions[k].macros.append(i)
    keep = [k for k, r in enumerate(regions) if r.cells or r.macros]
    new = {k: j for j, k in enumerate(keep)}
    regions = [regions[k] for k in keep]
    for r in regions:
        r.target = r.cell_area / utilization + sum((d.comp_w[i] + 2 * halo) * (d.comp_h[i] + 2 * halo) for i in r.macros)
        r.min_w = max([d.comp_w[i] + 2 * halo for i in r.macros] + [MIN_SITES * sw])
        r.min_h = max([d.comp_h[i] + 2 * halo for i in r.macros] + [MIN_ROWS * rh])
    return regions, [new[k] for k in region_of]


def region_floorplan(d: Design, lef: Lef, utilization: float, synth: dict) -> RegionPlan:
    """The floorplan of the module's docstring for the placement objects ``d`` of the design ``synth`` made."""
    site = lef.sites.get(SITE)
    if site is None:
        raise PlaceError(f"the tech LEF defines no SITE {SITE}")
    sw, rh = round(site.width_um * lef.dbu), round(site.height_um * lef.dbu)
    halo = round(MACRO_KEEPOUT_UM * lef.dbu)
    engines, rest, synth_area = engines_of(synth)
    names, region_of = assign(d, engines, rest)
    regions, region_of = _sized_regions(d, names, region_of, synth_area, utilization, halo, sw, rh)
    n = len(regions)
    nets, io_links = connectivity(d, region_of, n)
    w = np.zeros((n, n))
    for (a, b), v in nets.items():
        w[a, b] = w[b, a] = v
    io_w = [sum(links[k] for links in io_links) for k in range(n)]
    mx, my = CORE_MARGIN_SITES * sw, CORE_MARGIN_ROWS * rh
    for rounds in range(1, FIT_ROUNDS + 1):
        total = sum(r.target for r in regions)
        cw = max(math.ceil(math.sqrt(total) / sw) * sw, max(r.min_w for r in regions))
        core = (mx, my, mx + cw, my + math.ceil(total / cw / rh) * rh)
        rects = arrange([r.target for r in regions], w, io_w, core, [(r.min_w, r.min_h) for r in regions], (sw, rh))
        macro_xy, short = _fit(d, regions, rects, w, halo, core, rh, sw, utilization)
        if not short:
            break
        for k, factor in short:
            regions[k].target *= min(factor, FIT_STEP)
    else:
        raise PlaceError("no arrangement gives every region room for its cells and macros after "
                         f"{FIT_ROUNDS} rounds: " + ", ".join(regions[k].name for k, _ in short))
    die = (0, 0, core[2] + mx, core[3] + my)
    default = next((k for k, r in enumerate(regions) if r.name == rest), 0)
    io_xy, io_region = io_positions(regions, io_links, die, core, sw, default)
    fp = Floorplan(die, [row for r in regions for row in r.rows], rh, core, macro_xy, io_xy)
    return RegionPlan(regions, region_of, nets, io_region, fp, utilization, rounds)


# ---------------------------------------------------------------------------------------------- I/O pins

def _io_span(rect: Rect, core: Rect, die: Rect) -> tuple[str, int, int]:
    """The die edge a region's I/O pins go on (the longest edge it shares with the core's boundary, else the
    nearest one) and the stretch of it facing the region."""
    x0, y0, x1, y1 = rect
    gaps = {"left": x0 - core[0], "right": core[2] - x1, "bottom": y0 - core[1], "top": core[3] - y1}
    edge = min(gaps, key=lambda e: (gaps[e], -((x1 - x0) if e in ("bottom", "top") else (y1 - y0))))
    return (edge, x0, x1) if edge in ("bottom", "top") else (edge, y0, y1)


def io_positions(regions: list[Region], io_links: list[list[int]], die: Rect, core: Rect, pitch: int,
                 default: int) -> tuple[list[tuple[int, int, str]], list[int]]:
    """Per I/O pin its position on the die edge (x, y, edge) and its region (the one holding most of its
    net's pins; ``default`` for a net of no placed cell, e.g. the clock)."""
    W, H = die[2], die[3]
    io_region = [max(range(len(links)), key=lambda k: links[k]) if any(links) else default for links in io_links]
    start = {"bottom": lambda a: a, "right": lambda a: W + a, "top": lambda a: W + H + (W - a),
             "left": lambda a: 2 * W + H + (H - a)}
    wanted = []                                         # (perimeter coordinate, pin)
    for k, r in enumerate(regions):
        pins = [j for j, rk in enumerate(io_region) if rk == k]
        edge, a, b = _io_span(r.rect, core, die)
        for n, j in enumerate(pins):
            wanted.append((start[edge](a + (b - a) * (n + 0.5) / len(pins)), j))
    wanted.sort()
    out: list = [None] * len(io_links)
    last = -pitch
    for t, j in wanted:                                  # at least one pitch apart, in order round the die
        t = max(round(t / pitch) * pitch, last + pitch) % (2 * (W + H))
        last = t
        if t < W:
            out[j] = (t, 0, "bottom")
        elif t < W + H:
            out[j] = (W, t - W, "right")
        elif t < 2 * W + H:
            out[j] = (W - (t - W - H), H, "top")
        else:
            out[j] = (0, H - (t - 2 * W - H), "left")
    return out, io_region
