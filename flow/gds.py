"""A GDS of the placed design and pictures of it.

* GDS: the Nangate45 cell library GDS is read with KLayout and a top cell is added holding one instance
  of each placed cell (``FS`` rows mirrored about x). fakeram45 comes without a GDS, so a macro is a box
  on the ``comment`` layer (239/0) with its instance name; the die outline is on the same layer.
* ``<top>.png``: the GDS drawn by KLayout (``klayout.lay.LayoutView``, offscreen) with the PDK's
  FreePDK45 layer properties: what the layout looks like.
* ``<top>_placement.png``: the placement drawn with matplotlib, each cell a rectangle coloured by its
  top-level instance (or, when the design is one module, by cell kind), macros as labelled boxes.
"""
from __future__ import annotations

from pathlib import Path

COMMENT_LAYER = (239, 0)


def write_gds(path: Path, cell_gds: Path, d, fp, xs, ys, orient, lef) -> None:
    import klayout.db as db

    layout = db.Layout()
    layout.read(str(cell_gds))
    scale = 1.0 / (layout.dbu * lef.dbu)           # DEF units -> GDS database units
    top = layout.create_cell(d.top)
    comment = layout.layer(*COMMENT_LAYER)
    s = lambda v: int(round(v * scale))            # noqa: E731
    for i in range(d.n_std):
        cell = layout.cell(d.comp_master[i])
        if cell is None:
            raise RuntimeError(f"{cell_gds} has no cell {d.comp_master[i]}")
        if orient[i] == "FS":
            t = db.Trans(db.Trans.M0, s(xs[i]), s(ys[i] + d.comp_h[i]))
        else:
            t = db.Trans(db.Trans.R0, s(xs[i]), s(ys[i]))
        top.insert(db.CellInstArray(cell.cell_index(), t))
    for i in range(d.n_std, len(d.comp_name)):
        box = db.Box(s(xs[i]), s(ys[i]), s(xs[i] + d.comp_w[i]), s(ys[i] + d.comp_h[i]))
        top.shapes(comment).insert(box)
        top.shapes(comment).insert(db.Text(f"{d.comp_name[i]} ({d.comp_master[i]})",
                                           db.Trans(box.left + s(lef.dbu), box.center().y)))
    die = db.Box(*(s(v) for v in fp.die))
    top.shapes(comment).insert(db.Path([db.Point(die.left, die.bottom), db.Point(die.left, die.top),
                                        db.Point(die.right, die.top), db.Point(die.right, die.bottom),
                                        db.Point(die.left, die.bottom)], s(lef.dbu // 2)))
    opts = db.SaveLayoutOptions()
    opts.format = "GDS2"
    opts.select_cell(top.cell_index())             # the top cell and the library cells it uses
    layout.write(str(path), opts)


def _groups(d) -> tuple[list[str], str]:
    """Colour key per standard cell: its group (top-level instance, or its region in the region flow), or cell
    kind for a one-module design."""
    names = d.comp_group[:d.n_std]
    if len(set(names)) > 1:
        return names, d.group_kind
    kinds = []
    for m in d.comp_master[:d.n_std]:
        kinds.append("flip-flop" if m.startswith(("DFF", "SDFF", "DLH", "DLL")) else
                     "buffer / inverter" if m.startswith(("BUF", "INV", "CLKBUF")) else
                     "tie" if m.startswith("LOGIC") else
                     "xor / xnor" if m.startswith(("XOR", "XNOR")) else
                     "adder" if m.startswith(("FA_", "HA_")) else "logic")
    return kinds, "cell kind"


def placement_png(path: Path, d, fp, xs, ys, dbu: int, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Rectangle

    groups, key = _groups(d)
    labels = sorted(set(groups))
    cmap = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    W, H = fp.die[2] / dbu, fp.die[3] / dbu
    fig, ax = plt.subplots(figsize=(10, 10 * H / W + 0.8), dpi=160)
    ax.add_patch(Rectangle((0, 0), W, H, fill=False, lw=1.0, ec="black"))
    cx0, cy0, cx1, cy1 = (v / dbu for v in fp.core)
    ax.add_patch(Rectangle((cx0, cy0), cx1 - cx0, cy1 - cy0, fill=True, fc="#f4f4f4", ec="#999999", lw=0.5))
    for k, lab in enumerate(labels):
        idx = [i for i in range(d.n_std) if groups[i] == lab]
        polys = [[(xs[i] / dbu, ys[i] / dbu), ((xs[i] + d.comp_w[i]) / dbu, ys[i] / dbu),
                  ((xs[i] + d.comp_w[i]) / dbu, (ys[i] + d.comp_h[i]) / dbu), (xs[i] / dbu, (ys[i] + d.comp_h[i]) / dbu)]
                 for i in idx]
        ax.add_collection(PolyCollection(polys, facecolors=cmap(k % cmap.N), edgecolors="none",
                                         label=f"{lab} ({len(idx):,})"))
    for i in range(d.n_std, len(d.comp_name)):
        x, y, w, h = xs[i] / dbu, ys[i] / dbu, d.comp_w[i] / dbu, d.comp_h[i] / dbu
        ax.add_patch(Rectangle((x, y), w, h, fc="#c9d6e8", ec="#1f3a60", lw=0.8))
        ax.text(x + w / 2, y + h / 2, f"{d.comp_name[i]}\n{d.comp_master[i]}", ha="center", va="center",
                fontsize=6, color="#1f3a60")
    io = [p for p in fp.io_xy]
    ax.scatter([p[0] / dbu for p in io], [p[1] / dbu for p in io], s=1.5, c="crimson", marker="s", label="I/O pins")
    ax.set_xlim(-0.02 * W, 1.02 * W)
    ax.set_ylim(-0.02 * H, 1.02 * H)
    ax.set_aspect("equal")
    ax.set_xlabel("um")
    ax.set_ylabel("um")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title=key, title_fontsize=7,
              markerscale=4, frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def klayout_png(path: Path, gds: Path, lyp: Path | None, size: int = 2000) -> None:
    import klayout.lay as lay

    view = lay.LayoutView()
    view.load_layout(str(gds), True)
    if lyp is not None:
        view.load_layer_props(str(lyp))
    view.max_hier()
    view.zoom_fit()
    view.set_config("background-color", "#ffffff")
    view.set_config("grid-visible", "false")
    view.set_config("text-visible", "false")          # the library's pin and cell labels would bury the cells
    view.save_image(str(path), size, size)


def write_pictures(stage: Path, top: str, d, fp, xs, ys, lyp: Path | None, dbu: int) -> dict:
    files = {}
    W, H = fp.die[2] / dbu, fp.die[3] / dbu
    placement_png(stage / f"{top}_placement.png", d, fp, xs, ys, dbu,
                  f"{top}: {d.n_std:,} cells, {len(d.comp_name) - d.n_std} macros on {W:.0f} x {H:.0f} um "
                  "(Nangate45, coloquinte)")
    files["placement_png"] = f"{top}_placement.png"
    klayout_png(stage / f"{top}.png", stage / f"{top}.gds", lyp)
    files["png"] = f"{top}.png"
    return files
