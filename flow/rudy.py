"""Routing demand of a placed design: RUDY per gcell against the routing tracks of metal2..metal6.

RUDY (Spindler & Johannes, "Fast and accurate routing demand estimation", DATE 2007) spreads each net's
expected wire length, its bounding box's half-perimeter, evenly over the box: a gcell gets the share of the
length that its overlap with the box is of the box's area. The capacity of a gcell is the wire length its
tracks hold: on each layer of ``LAYERS`` the gcell's area over the layer's pitch (tech LEF). Over a macro
only ``ABOVE_MACROS`` are free (fakeram45 blocks metal1..metal4). A gcell's demand / capacity over 1 means
a router would have to detour; the map shows where the placement is too dense to route.
"""
from __future__ import annotations

from dataclasses import dataclass

from pathlib import Path

import numpy as np

from flow.lefdef import Lef

LAYERS = ("metal2", "metal3", "metal4", "metal5", "metal6")
ABOVE_MACROS = ("metal5", "metal6")
GCELL_UM = 20.0


@dataclass
class Rudy:
    demand_um: np.ndarray          # (ny, nx) wire length wanted per gcell
    capacity_um: np.ndarray        # (ny, nx) track length available per gcell
    gcell_um: float
    layers: tuple[str, ...]

    @property
    def ratio(self) -> np.ndarray:
        return self.demand_um / np.maximum(self.capacity_um, 1e-9)

    def as_dict(self) -> dict:
        r = self.ratio
        return {"gcell_um": self.gcell_um, "gcells": int(r.size), "layers": list(self.layers),
                "peak_demand_over_capacity": round(float(r.max()), 4),
                "mean_demand_over_capacity": round(float(r.mean()), 4),
                "share_of_gcells_over_capacity": round(float((r > 1).mean()), 6),
                "demand_m": round(float(self.demand_um.sum()) / 1e6, 3),
                "capacity_m": round(float(self.capacity_um.sum()) / 1e6, 3),
                "model": "RUDY (Spindler & Johannes 2007): net HPWL spread over its bounding box; capacity "
                         "= gcell area / pitch per layer, metal5-6 only over macros"}


def _overlaps(lo: float, hi: float, g: float, n: int) -> tuple[int, np.ndarray]:
    """First gcell index and the overlap (um) of [lo, hi] with each gcell it touches along one axis."""
    i0, i1 = int(lo // g), min(int(hi // g), n - 1)
    i0 = min(max(i0, 0), n - 1)
    edges = np.arange(i0, i1 + 2) * g
    return i0, np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0.0, None)


def rudy(boxes: np.ndarray, die_um: tuple[float, float], macros_um: list[tuple[float, float, float, float]],
         lef: Lef, gcell_um: float = GCELL_UM) -> Rudy:
    """``boxes``: (n, 4) net bounding boxes x0, y0, x1, y1 in um; ``macros_um`` the same for macros."""
    nx, ny = max(1, int(np.ceil(die_um[0] / gcell_um))), max(1, int(np.ceil(die_um[1] / gcell_um)))
    pitch = {n: lef.layers[n].pitch_um for n in LAYERS}
    missing = [n for n, p in pitch.items() if not p]
    if missing:
        raise ValueError(f"the tech LEF gives no PITCH for {missing}")
    demand = np.zeros((ny, nx))
    min_w = min(pitch.values())
    w = np.maximum(boxes[:, 2] - boxes[:, 0], min_w)
    h = np.maximum(boxes[:, 3] - boxes[:, 1], min_w)
    density = (boxes[:, 2] - boxes[:, 0] + boxes[:, 3] - boxes[:, 1]) / (w * h)     # um of wire per um^2
    ix0, iy0 = (boxes[:, 0] // gcell_um).astype(int), (boxes[:, 1] // gcell_um).astype(int)
    ix1, iy1 = (boxes[:, 2] // gcell_um).astype(int), (boxes[:, 3] // gcell_um).astype(int)
    one = (ix0 == ix1) & (iy0 == iy1)
    np.add.at(demand, (np.clip(iy0[one], 0, ny - 1), np.clip(ix0[one], 0, nx - 1)), density[one] * w[one] * h[one])
    for k in np.nonzero(~one)[0]:
        x0, y0 = boxes[k, 0], boxes[k, 1]
        i, ox = _overlaps(x0, x0 + w[k], gcell_um, nx)
        j, oy = _overlaps(y0, y0 + h[k], gcell_um, ny)
        demand[j:j + len(oy), i:i + len(ox)] += density[k] * np.outer(oy, ox)
    per_um2 = sum(1 / p for p in pitch.values())
    above = sum(1 / pitch[n] for n in ABOVE_MACROS)
    capacity = np.full((ny, nx), per_um2 * gcell_um * gcell_um)
    for x0, y0, x1, y1 in macros_um:
        i, ox = _overlaps(x0, x1, gcell_um, nx)
        j, oy = _overlaps(y0, y1, gcell_um, ny)
        capacity[j:j + len(oy), i:i + len(ox)] -= (per_um2 - above) * np.outer(oy, ox)
    return Rudy(demand, np.maximum(capacity, 0.0), gcell_um, LAYERS)


def draw(r: Rudy, path, title: str) -> dict:
    """Draws the demand map into ``path`` (PNG) and what it shows (title, axis labels, legend) into
    ``<path>.json``, for the report that shows it; returns that."""
    import json

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ratio = r.ratio
    ny, nx = ratio.shape
    fig, ax = plt.subplots(figsize=(7, 6.2))
    im = ax.imshow(ratio, origin="lower", extent=(0, nx * r.gcell_um, 0, ny * r.gcell_um), cmap="inferno",
                   vmin=0, vmax=max(1.2, float(ratio.max())))
    fig.colorbar(im, ax=ax, label="routing demand / track capacity (1 = full)")
    if (ratio > 1).any():
        ax.contour(np.arange(nx) * r.gcell_um + r.gcell_um / 2, np.arange(ny) * r.gcell_um + r.gcell_um / 2,
                   ratio, levels=[1.0], colors="cyan", linewidths=0.6)
    legend = ["cyan line: demand = track capacity (metal2-6; metal5-6 over macros)"]
    ax.legend(handles=[Line2D([], [], color="cyan", lw=1, label=legend[0])], loc="upper right", fontsize=7)
    d = r.as_dict()
    ax.set_title(f"{title}\npeak {d['peak_demand_over_capacity']:.2f}, "
                 f"{100 * d['share_of_gcells_over_capacity']:.2f} % of {d['gcells']:,} gcells over capacity "
                 f"({r.gcell_um:g} um gcells, metal2-6)", fontsize=9)
    ax.set_xlabel("x (µm)")
    ax.set_ylabel("y (µm)")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    drawn = {"title": ax.get_title(), "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel(), "legend": legend}
    Path(f"{path}.json").write_text(json.dumps(drawn, indent=1) + "\n")
    return drawn
