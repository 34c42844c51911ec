"""Legalisation after global placement: every cell to the nearest row, overflow spilled to neighbouring rows,
then each row stretch packed in x order with the least movement this simple scheme allows.

coloquinte's legaliser and detailed placement (its own legalisation first) moved the cells of the nano
chip's MAC region by up to 1.1 mm although its global placement had them spread below 0.7 of the rows
everywhere: the 2- and 3-pin nets' HPWL above 300 um went from 0.16 % after global placement to 2.0 %, the
region's HPWL from 14.2 to 21.7 m, and the worst path crossed the region nine times. This legaliser moves a
cell 1.1 um on average there (99 % under 5 um) and keeps the global placement's wire length (14.4 m).

1. A cell goes to the row whose y is nearest to its own and, in that row, to the stretch (rows stop at
   macro keep-outs) nearest to its x.
2. A stretch loaded above ``FILL`` of its length gives up the cells farthest from its row in y, each to the
   nearest stretch (in x + y distance, up to ``SPILL_ROWS`` rows away) that still has room.
3. Per stretch, in the cells' x order: pushed right where they overlap, then back left from the stretch's
   end (``pack``, which flow/relegalize.py shares), on the site grid.
Cells take their row's orientation. Whitespace stays where the global placement left it, in every row.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from flow.place_netlist import PlaceError

FILL = 0.95          # the share of a stretch's length its cells may take before some spill to other rows
SPILL_ROWS = 60      # how many rows away (each side) a spilled cell may go


@dataclass(frozen=True)
class Stretch:
    y: int
    x0: int
    x1: int
    orient: str


def pack(cells: list[int], xs: list[int], widths: list[int], a: int, b: int, step: int) -> list[int]:
    """x of each of ``cells`` (in x order of ``xs``) in the stretch ``a`` .. ``b`` on a grid of ``step``:
    pushed right where they overlap, then back left from ``b``. The cells must fit."""
    pos, edge = [], a
    for i in cells:
        x = max(a + (min(max(xs[i], a), b) - a) // step * step, edge)
        pos.append(x)
        edge = x + widths[i]
    edge = b
    for j in range(len(cells) - 1, -1, -1):
        pos[j] = min(pos[j], edge - widths[cells[j]])
        edge = pos[j]
    return pos


def apply_legal(legal: dict[int, tuple[int, int, str]], xs: list[int], ys: list[int], orient: list[str]) -> None:
    """Writes ``legalize_rows``' positions and orientations into ``xs``, ``ys``, ``orient`` (by cell index)."""
    for i, (x, y, o) in legal.items():
        xs[i], ys[i], orient[i] = x, y, o


def legalize_rows(stretches: list[Stretch], cells: list[int], xs: list[int], ys: list[int], widths: list[int],
                  step: int) -> tuple[dict[int, tuple[int, int, str]], dict]:
    """Legal (x, y, orientation) of each of ``cells`` (lower-left corners ``xs``/``ys`` in dbu, by cell index)
    over ``stretches``; statistics."""
    if not stretches:
        raise PlaceError("no rows to legalise into")
    by_row: dict[int, list[int]] = {}
    for k, s in enumerate(stretches):
        by_row.setdefault(s.y, []).append(k)
    row_ys = sorted(by_row)
    cap = [FILL * (s.x1 - s.x0) for s in stretches]
    load = [0.0] * len(stretches)
    members: list[list[int]] = [[] for _ in stretches]

    def nearest_stretch(y: int, x: int, w: int) -> tuple[int, int]:
        return min((max(stretches[k].x0 - x, 0, x + w - stretches[k].x1), k) for k in by_row[y])

    for i in cells:
        j = bisect.bisect_left(row_ys, ys[i])
        y = min(row_ys[max(j - 1, 0):j + 1], key=lambda yy: abs(yy - ys[i]))
        k = nearest_stretch(y, xs[i], widths[i])[1]
        members[k].append(i)
        load[k] += widths[i]

    spilled = 0
    for k in [k for k in range(len(stretches)) if load[k] > cap[k]]:
        s = stretches[k]
        j = row_ys.index(s.y)
        members[k].sort(key=lambda i: abs(ys[i] - s.y))
        while load[k] > cap[k]:
            i = members[k].pop()
            load[k] -= widths[i]
            best = None
            for dj in range(1, SPILL_ROWS + 1):
                if best is not None and best[0] <= abs(row_ys[min(j + dj, len(row_ys) - 1)] - s.y):
                    break
                for jj in (j - dj, j + dj):
                    if 0 <= jj < len(row_ys):
                        for kk in by_row[row_ys[jj]]:
                            t = stretches[kk]
                            if cap[kk] - load[kk] >= widths[i]:
                                cost = max(t.x0 - xs[i], 0, xs[i] + widths[i] - t.x1) + abs(t.y - ys[i])
                                if best is None or cost < best[0]:
                                    best = (cost, kk)
            if best is None:
                raise PlaceError(f"no row within {SPILL_ROWS} of y={s.y} dbu has room for a cell {widths[i]} dbu "
                                 f"wide: the rows are too full (lower the utilisation)")
            members[best[1]].append(i)
            load[best[1]] += widths[i]
            spilled += 1

    out: dict[int, tuple[int, int, str]] = {}
    moved = 0
    for k, s in enumerate(stretches):
        group = sorted(members[k], key=lambda i: xs[i])
        for i, x in zip(group, pack(group, xs, widths, s.x0, s.x1, step)):
            out[i] = (x, s.y, s.orient)
            moved += abs(x - xs[i]) + abs(s.y - ys[i])
    return out, {"cells_spilled": spilled, "mean_move_dbu": moved / max(1, len(cells))}
