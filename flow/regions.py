"""Placement per region: each region of the floorplan (flow/floorplan.py) is placed as its own coloquinte
circuit on its own rows, in ``jobs`` processes at a time (largest region first).

coloquinte has no fences. A region's circuit therefore holds only its standard cells (movable), its macros
(fixed obstructions) and its rows; every net that reaches one of its cells is given with the pins outside
the region replaced by fixed, zero-size terminals that obstruct nothing:

one terminal per other region, at the point of that region nearest to this one (where its cells that talk
to this region will gather), and one per I/O pin at its place on the die edge.

The global positions of all regions are merged; after flow/repair.py's new buffer trees each region's cells
are legalised into its own rows (``legalize_regions``, flow/row_legalize.py), and the flat flow's outputs
(DEF, SPEF, STA, GDS) take the placement as it is. Each process prints a line when it starts a region and the
caller one when it is done, with the region's name and the time it took.
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path

from flow.cli import die_with_parent
from flow.floorplan import Rect, RegionPlan
from flow.place_flat import PLACER_DENSITY, stretches_of
from flow.place_netlist import Design, PlaceError, progress
from flow.row_legalize import apply_legal, legalize_rows


def nearest_point(src: Rect, dst: Rect) -> tuple[int, int]:
    """The point of ``dst`` nearest to ``src``: the middle of their overlap along an axis they share, else the
    corner of ``dst`` facing ``src``."""
    def axis(a0, a1, b0, b1):
        lo, hi = max(a0, b0), min(a1, b1)
        return (lo + hi) // 2 if lo <= hi else (b0 if b0 > a1 else b1)
    return axis(src[0], src[2], dst[0], dst[2]), axis(src[1], src[3], dst[1], dst[3])


def _inside(rect: Rect, x: int, y: int, w: int, h: int) -> tuple[int, int]:
    """A start position for a cell of size (w, h) moved into ``rect``."""
    return min(max(x, rect[0]), rect[2] - w), min(max(y, rect[1]), rect[3] - h)


def region_jobs(d: Design, plan: RegionPlan, effort: int, nets: list[list[tuple]]) -> list[dict]:
    """One global-placement job per region with cells, with the pin lists ``nets`` (flow/place_nets.py):
    outside pins on terminals per region."""
    fp, regions, region_of = plan.fp, plan.regions, plan.region_of
    jobs = []
    for k, r in enumerate(regions):
        jobs.append({"name": r.name, "effort": effort, "rect": r.rect, "row_height": fp.row_height,
                     "rows": [(row.x, row.x + row.num_x * row.step_x, row.y, row.orient) for row in r.rows],
                     "cells": [], "w": [], "h": [], "x": [], "y": [], "macros": [], "terminals": [], "nets": []})
    local: list[int] = [0] * len(d.comp_name)
    for i, k in enumerate(region_of):
        job = jobs[k]
        if i < d.n_std:
            local[i] = len(job["cells"])
            job["cells"].append(i)
            r = regions[k].rect
            job["x"].append(r[0] + (r[2] - r[0]) // 2)
            job["y"].append(r[1] + (r[3] - r[1]) // 2)
        else:
            local[i] = len(job["macros"])
            job["macros"].append((i, *fp.macro_xy[i], d.comp_w[i], d.comp_h[i]))
    terminal = [dict() for _ in regions]             # per region: position -> terminal index
    for pins in nets:
        regs = {region_of[p[0]] for p in pins if p[0] >= 0 and p[0] < d.n_std}
        for k in regs:
            job, n_cells = jobs[k], len(jobs[k]["cells"])
            objs, dxs, dys = [], [], []
            for p in pins:
                obj = p[0]
                if obj >= 0 and region_of[obj] == k:
                    objs.append(local[obj] if obj < d.n_std else n_cells + local[obj])
                    dxs.append(p[2])
                    dys.append(p[3])
                    continue
                pos = fp.io_xy[-1 - obj][:2] if obj < 0 else nearest_point(regions[k].rect, regions[region_of[obj]].rect)
                objs.append(-1 - terminal[k].setdefault(pos, len(terminal[k])))
                dxs.append(0)
                dys.append(0)
            job["nets"].append((objs, dxs, dys))
    for job, terms in zip(jobs, terminal):
        job["terminals"] = list(terms)
    return [j for j in jobs if j["cells"]]


@contextmanager
def _stdout_to(path: str | None):
    """coloquinte's own report (C++ on file descriptor 1) into ``path``: regions run side by side."""
    if path is None:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "a") as f:
        os.dup2(f.fileno(), 1)
        try:
            yield
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _circuit(job: dict):
    """The region's coloquinte circuit: cells (movable), macros (fixed obstructions), terminals (fixed, size 0)."""
    import coloquinte as cq

    n_cells, n_macros, n_terms = len(job["cells"]), len(job["macros"]), len(job["terminals"])
    n = n_cells + n_macros + n_terms
    c = cq.Circuit(n)
    c.cell_width = job["w"] + [m[3] for m in job["macros"]] + [0] * n_terms
    c.cell_height = job["h"] + [m[4] for m in job["macros"]] + [0] * n_terms
    c.cell_is_fixed = [False] * n_cells + [True] * (n_macros + n_terms)
    c.cell_is_obstruction = [True] * (n_cells + n_macros) + [False] * n_terms
    c.cell_row_polarity = [cq.CellRowPolarity.SAME] * n_cells + [cq.CellRowPolarity.ANY] * (n_macros + n_terms)
    c.cell_x = job["x"] + [m[1] for m in job["macros"]] + [t[0] for t in job["terminals"]]
    c.cell_y = job["y"] + [m[2] for m in job["macros"]] + [t[1] for t in job["terminals"]]
    c.cell_orientation = [cq.CellOrientation.N] * n
    rh = job["row_height"]
    c.rows = [cq.Row(cq.Rectangle(x0, x1, y, y + rh), cq.CellOrientation.N if o == "N" else cq.CellOrientation.FS)
              for x0, x1, y, o in job["rows"]]
    first_term = n_cells + n_macros
    for objs, dxs, dys in job["nets"]:
        c.add_net([o if o >= 0 else first_term + (-1 - o) for o in objs], dxs, dys)
    c.check()
    c.expand_cells_to_density(PLACER_DENSITY, 0.0)
    return c


def run_region(job: dict) -> dict:
    """In a worker process: one region's global placement; the cells' lower-left corners."""
    import coloquinte as cq

    t0 = time.monotonic()
    n_cells = len(job["cells"])
    progress(f"region {job['name']}: global placement of {n_cells:,} cells, {len(job['nets']):,} nets, "
             f"{len(job['terminals']):,} outside pins as terminals ...")
    with _stdout_to(job.get("log")):
        c = _circuit(job)
        c.place_global(cq.ColoquinteParameters(job["effort"]))
    return {"name": job["name"], "cells": job["cells"], "x": list(c.cell_x[:n_cells]), "y": list(c.cell_y[:n_cells]),
            "seconds": time.monotonic() - t0}


def _fill_sizes(d: Design, jobs: list[dict]) -> None:
    for job in jobs:
        job["w"] = [d.comp_w[i] for i in job["cells"]]
        job["h"] = [d.comp_h[i] for i in job["cells"]]


def run_jobs(d: Design, jobs: list[dict], processes: int) -> tuple[list[dict], float]:
    """Every job in ``processes`` worker processes, largest first; the results and the wall time."""
    _fill_sizes(d, jobs)
    jobs = sorted(jobs, key=lambda j: -len(j["cells"]))
    t0 = time.monotonic()
    results = []
    ctx = multiprocessing.get_context("spawn")        # a fork would copy the caller's netlist (gigabytes)
    with ProcessPoolExecutor(max_workers=min(processes, len(jobs)), mp_context=ctx,
                             initializer=die_with_parent) as pool:
        futures = {pool.submit(run_region, job): job["name"] for job in jobs}
        for fut in as_completed(futures):
            try:
                res = fut.result()
            except Exception as e:          # a worker's error or a crashed worker (BrokenProcessPool)
                raise PlaceError(f"placement of region {futures[fut]} failed: {type(e).__name__}: {e}") from None
            results.append(res)
            progress(f"region {res['name']}: global placement done in {res['seconds']:.1f} s "
                     f"({len(results)} of {len(jobs)} regions, {time.monotonic() - t0:.0f} s since the first)")
    return results, time.monotonic() - t0


def merge(d: Design, plan: RegionPlan, results: list[dict]) -> tuple[list[int], list[int]]:
    """Every component's lower-left corner: the regions' cells, then the macros."""
    n = len(d.comp_name)
    xs, ys = [0] * n, [0] * n
    for res in results:
        for i, x, y in zip(res["cells"], res["x"], res["y"]):
            xs[i], ys[i] = x, y
    for i, (x, y) in plan.fp.macro_xy.items():
        xs[i], ys[i] = x, y
    return xs, ys


def log_name(region: str) -> str:
    """A region's log file name: ``core/mac`` -> ``core.mac.log``, ``(core own logic)`` -> ``core_own_logic.log``."""
    return "".join(ch if ch.isalnum() or ch in "._-" else "." if ch == "/" else "_" for ch in region).strip("_") + ".log"


def place_regions(d: Design, plan: RegionPlan, effort: int, processes: int, log_dir: Path,
                  nets: list[list[tuple]]) -> tuple[list[int], list[int], dict]:
    """Global placement of every region with the pin lists ``nets``, merged: (xs, ys, stats). coloquinte's
    reports go to ``log_dir/<region>.log``."""
    jobs = region_jobs(d, plan, effort, nets)
    log_dir.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        job["log"] = str(log_dir / log_name(job["name"]))
    progress(f"global placement of {len(jobs)} regions, {min(processes, len(jobs))} at a time (coloquinte's "
             f"reports: {log_dir}/<region>.log) ...")
    results, wall = run_jobs(d, jobs, processes)
    xs, ys = merge(d, plan, results)
    return xs, ys, {"wall_s": wall, "region_s": {r["name"]: round(r["seconds"], 2) for r in results}}


def legalize_regions(d: Design, plan: RegionPlan, xs: list[int], ys: list[int]) -> tuple[list[int], list[int],
                                                                                         list[str], dict]:
    """Each region's standard cells legalised into its own rows (flow/row_legalize.py) from ``xs``, ``ys``
    (moved into the region first); macros as placed: (xs, ys, orientations, stats)."""
    t0 = time.monotonic()
    xs, ys = list(xs), list(ys)
    orient = ["N"] * len(d.comp_name)
    members: list[list[int]] = [[] for _ in plan.regions]
    for i in range(d.n_std):
        members[plan.region_of[i]].append(i)
    spilled, moved = 0, 0.0
    for r, cells in zip(plan.regions, members):
        if not cells:
            continue
        for i in cells:
            xs[i], ys[i] = _inside(r.rect, xs[i], ys[i], d.comp_w[i], d.comp_h[i])
        try:
            legal, st = legalize_rows(stretches_of(r.rows), cells, xs, ys, d.comp_w, r.rows[0].step_x)
        except PlaceError as e:
            raise PlaceError(f"legalisation of region {r.name}: {e}") from None
        apply_legal(legal, xs, ys, orient)
        spilled += st["cells_spilled"]
        moved += st["mean_move_dbu"] * len(cells)
    progress(f"legalised {d.n_std:,} cells into their regions' rows ({time.monotonic() - t0:.0f} s, "
             f"{spilled:,} to another row for room)")
    return xs, ys, orient, {"cells_spilled": spilled, "mean_move_dbu": moved / max(1, d.n_std),
                            "legalize_s": time.monotonic() - t0}


def reassign(plan: RegionPlan, old: Design, new: Design, xs: list[int], ys: list[int]) -> None:
    """``plan.region_of`` for ``new`` (the design after net repair): a cell keeps its region, a new buffer
    joins the region its global-placement position (``xs``, ``ys``, of ``new``) lies in, else the nearest."""
    by_name = {name: k for name, k in zip(old.comp_name, plan.region_of)}
    rects = [r.rect for r in plan.regions]

    def nearest(x: int, y: int) -> int:
        return min(range(len(rects)), key=lambda k: max(rects[k][0] - x, 0, x - rects[k][2])
                   + max(rects[k][1] - y, 0, y - rects[k][3]))

    region_of = []
    for i, name in enumerate(new.comp_name):
        k = by_name.get(name)
        region_of.append(k if k is not None else nearest(xs[i] + new.comp_w[i] // 2, ys[i] + new.comp_h[i] // 2))
    plan.region_of = region_of
    for r in plan.regions:
        r.cells, r.cell_area = 0, 0
    for i in range(new.n_std):
        r = plan.regions[region_of[i]]
        r.cells += 1
        r.cell_area += new.comp_w[i] * new.comp_h[i]
