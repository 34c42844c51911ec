"""Row-local re-legalisation after cells changed width (sizing) or were added (repeaters).

Every standard cell stays in the row stretch it was placed in (so its orientation and its neighbours do
not change) and moves along the row as little as this simple scheme allows: the stretch's cells in x
order are pushed right where they overlap, then pushed back left from the stretch's end, on the site
grid. A cell outside every stretch (a new one) joins the stretch nearest to it that has room. A stretch
whose cells are wider than it raises ``PlaceError`` with the row and the widths.
"""
from __future__ import annotations

import bisect

from flow.place_flat import Floorplan, stretches_of
from flow.place_netlist import Design, PlaceError
from flow.row_legalize import pack


def _stretches(fp: Floorplan) -> dict[int, list[tuple[int, int]]]:
    """Each row's stretches (x0, x1), left to right."""
    rows: dict[int, list[tuple[int, int]]] = {}
    for s in stretches_of(fp.rows):
        rows.setdefault(s.y, []).append((s.x0, s.x1))
    return {y: sorted(v) for y, v in rows.items()}


def _home(rows: dict[int, list[tuple[int, int]]], starts: dict[int, list[int]], ys_sorted: list[int], x: int, y: int,
          w: int, room: dict[tuple[int, int], int]) -> tuple[int, int]:
    """The (row y, stretch index) a cell at (x, y) belongs to: its own, else the nearest with room.
    ``starts``: each row's stretches' left ends."""
    if y in rows:
        spans = rows[y]
        k = bisect.bisect_right(starts[y], x) - 1
        if k >= 0 and x < spans[k][1] and room[(y, k)] >= w:
            return y, k
    best = None
    j = bisect.bisect_left(ys_sorted, y)
    for yy in ys_sorted[max(0, j - 40): j + 40]:
        for k, (a, b) in enumerate(rows[yy]):
            if room[(yy, k)] >= w:
                dx = max(a - x, 0, x + w - b)
                cost = dx + abs(yy - y)
                if best is None or cost < best[0]:
                    best = (cost, yy, k)
    if best is None:
        raise PlaceError(f"no row near y={y} has room for a cell {w} dbu wide")
    return best[1], best[2]


def relegalize(d: Design, fp: Floorplan, xs: list[int], ys: list[int], orient: list[str]) -> dict:
    """Moves the standard cells of ``d`` (in place) to legal, non-overlapping sites; returns statistics."""
    rows = _stretches(fp)
    ys_sorted = sorted(rows)
    sw = fp.rows[0].step_x
    orient_of = {r.y: r.orient for r in fp.rows}
    room = {(y, k): b - a for y, spans in rows.items() for k, (a, b) in enumerate(spans)}
    starts = {y: [a for a, _ in spans] for y, spans in rows.items()}
    members: dict[tuple[int, int], list[int]] = {}
    for i in range(d.n_std):
        key = _home(rows, starts, ys_sorted, xs[i], ys[i], d.comp_w[i], room)
        members.setdefault(key, []).append(i)
        room[key] -= d.comp_w[i]
    moved, total = 0, 0
    for (y, k), cells in members.items():
        a, b = rows[y][k]
        if room[(y, k)] < 0:
            raise PlaceError(f"row y={y} stretch {a}..{b} dbu holds {b - a - room[(y, k)]} dbu of cells")
        cells.sort(key=lambda i: xs[i])
        pos = pack(cells, xs, d.comp_w, a, b, sw)
        for i, x in zip(cells, pos):
            shift = abs(x - xs[i]) + abs(y - ys[i])
            moved += shift > 0
            total += shift
            xs[i], ys[i], orient[i] = x, y, orient_of[y]
    return {"cells_moved": moved, "total_move_dbu": total}
