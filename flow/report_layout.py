"""The report's two pictures of the placed design, drawn from the files flow/place.py writes.

* ``placement.png``: the placed DEF, each standard cell's footprint painted into a raster (a pixel takes the
  colour of the engine covering most of it, paler where the rows are sparse), so a chip of 1.5 M cells
  draws as fast as a block; engines are synth.json's (flow/report_engines.py). Macros are boxes in their
  engine's colour, labelled with their instance name where the name fits and clashes with no other label.
* ``layout.png``: the placed GDS drawn by KLayout with the PDK's FreePDK45 layer colours, exactly the die
  (plus a margin), framed with µm axes, a scale bar and a legend of the layers it holds.

Both need the PDK (cell and macro sizes from its LEF files; the KLayout layer properties): without it they
are skipped with the reason, never drawn from guesses.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from flow.report_engines import OUTSIDE, Engines
from flow.report_figures import plt_, save
from pdk_config import PdkError, find_pdk

RASTER_PIXELS = 1000          # the raster's longer side; a pixel is never smaller than MIN_PIXEL_UM
MIN_PIXEL_UM = 0.2
# tab20 without its greys (14, 15), dark shades first: greys are for what is outside the engines
ENGINE_COLOURS = (0, 2, 4, 6, 8, 10, 12, 16, 18, 1, 3, 5, 7, 9, 11, 13, 17, 19)
OUTSIDE_GREYS = {OUTSIDE: 0.45, "(others)": 0.6, "(net-repair buffers)": 0.15}      # anything else "(...)": 0.72
LAYOUT_PIXELS = 1600          # KLayout image, longer side
MARGIN = 0.02                 # around the die, of its size
PLACED = re.compile(r"\+ (?:PLACED|FIXED) \( (-?\d+) (-?\d+) \)")
TILE = re.compile(r"/ram_\d+_\d+$")         # flow/place.py names an msh_sram's fakeram45 tiles <path>/ram_<r>_<c>
REPAIR_BUFFER = "repair_buf_"                 # flow/repair.py's name for the buffers it adds (top level)


def _lef_sizes(pdk) -> dict[str, tuple[float, float]]:
    """MACRO name -> (width, height) µm, from the cell LEF and every fakeram45 LEF."""
    sizes, name = {}, None
    for lef in (pdk.cell_lef, *(r.lef for r in pdk.fakerams)):
        for line in Path(lef).read_text().splitlines():
            t = line.split()
            if t[:1] == ["MACRO"]:
                name = t[1]
            elif t[:1] == ["SIZE"] and name and len(t) >= 4:
                sizes[name] = (float(t[1]), float(t[3]))
    return sizes


def read_def(path: Path) -> dict:
    """DIEAREA, COMPONENTS (name, master, x, y in DEF units) and the placed PINS of flow/place.py's DEF, as lists."""
    out = {"dbu": None, "die": None, "names": [], "masters": [], "xs": [], "ys": [], "pins": []}
    section = None
    with open(path) as f:
        for line in f:
            t = line.split()
            if not t:
                continue
            if t[0] == "UNITS":
                out["dbu"] = int(t[3])
            elif t[0] == "DIEAREA":
                out["die"] = (int(t[2]), int(t[3]), int(t[6]), int(t[7]))
            elif t[0] in ("COMPONENTS", "PINS", "NETS"):
                section = t[0]
            elif t[0] == "END":
                section = None
            elif section == "COMPONENTS" and t[0] == "-":
                out["names"].append(t[1].replace("\\", ""))
                out["masters"].append(t[2])
                out["xs"].append(int(t[6]))
                out["ys"].append(int(t[7]))
            elif section == "PINS" and (m := PLACED.search(line)):
                out["pins"].append((int(m.group(1)), int(m.group(2))))
    if out["dbu"] is None or out["die"] is None:
        raise ValueError(f"{path} has no UNITS or DIEAREA")
    return out


def _grouping(stages: dict, top: str):
    """(engine of a DEF instance name, how the cells are grouped) from synth.json when it describes this top;
    the buffers placement's net repair added (tens of thousands on the chip) are a group of their own."""
    syn = stages["synth"]["data"]
    if syn and syn["top"] == top:
        eng = Engines.from_synth(syn)
        of, key = (lambda name: eng.of(name, "/")), "engine (synthesis hierarchy)"
    else:
        of, key = (lambda name: name.split("/")[0] if "/" in name else OUTSIDE), "top-level instance (no synth.json)"
    return (lambda name: "(net-repair buffers)" if name.startswith(REPAIR_BUFFER) else of(name)), key


def _colours(names: list[str]) -> dict[str, tuple]:
    """A distinct colour per engine, in the order given (largest first); greys for what is outside them."""
    cmap = plt_().get_cmap("tab20")
    engines, out = iter(ENGINE_COLOURS), {}
    for n in names:
        grey = OUTSIDE_GREYS.get(n, 0.72)
        out[n] = (grey, grey, grey, 1.0) if n.startswith("(") else cmap(next(engines))
    return out


def _raster(x0, y0, w, h, groups, n_groups: int, shape: tuple[int, int], px: float):
    """Per pixel: the group covering most of it, and the covered fraction (all groups)."""
    import numpy as np
    ny, nx = shape
    best = np.zeros(nx * ny)
    best_idx = np.full(nx * ny, -1)
    total = np.zeros(nx * ny)
    for g in range(n_groups):
        sel = groups == g
        gx0, gy0, gx1, gy1 = x0[sel], y0[sel], x0[sel] + w[sel], y0[sel] + h[sel]
        ix0, iy0 = np.floor(gx0 / px).astype(int), np.floor(gy0 / px).astype(int)
        ix1, iy1 = np.floor(gx1 / px).astype(int), np.floor(gy1 / px).astype(int)
        cover = np.zeros(nx * ny)
        for dx in range(int((ix1 - ix0).max(initial=0)) + 1):
            ox = np.minimum(gx1, (ix0 + dx + 1) * px) - np.maximum(gx0, (ix0 + dx) * px)
            for dy in range(int((iy1 - iy0).max(initial=0)) + 1):
                oy = np.minimum(gy1, (iy0 + dy + 1) * px) - np.maximum(gy0, (iy0 + dy) * px)
                k = (ox > 0) & (oy > 0) & (ix0 + dx < nx) & (iy0 + dy < ny)
                idx = (iy0[k] + dy) * nx + ix0[k] + dx
                cover += np.bincount(idx, weights=ox[k] * oy[k] / px**2, minlength=nx * ny)
        total += cover
        better = cover > best
        best[better], best_idx[better] = cover[better], g
    return best_idx.reshape(ny, nx), np.minimum(total, 1.0).reshape(ny, nx)


def _scale_bar(ax, width_um: float) -> None:
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar
    size = 10 ** math.floor(math.log10(width_um / 5))
    size *= max(m for m in (1, 2, 5) if m * size <= width_um / 5)
    ax.add_artist(AnchoredSizeBar(ax.transData, size, f"{size:g} µm", "lower right", pad=0.4, frameon=True,
                                  size_vertical=width_um / 400, fontproperties={"size": 8}))


def _label_macros(fig, ax, boxes: list[tuple[str, float, float, float, float]]) -> int:
    """Write each macro's name inside its box, horizontally or vertically, where it fits and overlaps no
    label already written; returns how many were written."""
    renderer = fig.canvas.get_renderer()
    placed, written = [], 0
    for text, x, y, w, h in sorted(boxes, key=lambda b: -b[3] * b[4]):
        box = ax.transData.transform([(x, y), (x + w, y + h)])
        for rotation in (0, 90):
            t = ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=7, rotation=rotation,
                        color="black", clip_on=True)
            e = t.get_window_extent(renderer)
            inside = box[0][0] <= e.x0 and e.x1 <= box[1][0] and box[0][1] <= e.y0 and e.y1 <= box[1][1]
            if inside and not any(e.overlaps(p) for p in placed):
                placed.append(e)
                written += 1
                break
            t.remove()
    return written


def fig_placement(stages: dict, path: Path) -> dict | None:
    place = stages["place"]["data"]
    if place is None:
        return None
    def_file = Path(stages["place"]["path"]).parent / place["files"].get("def", f"{place['top']}.def")
    if not def_file.is_file():
        return {"skipped": f"{def_file} (the placed DEF place.json names) not found"}
    try:
        sizes = _lef_sizes(find_pdk())
    except (PdkError, OSError) as e:
        return {"skipped": f"the cell and macro sizes come from the PDK's LEF files: {e}"}
    import numpy as np
    d = read_def(def_file)
    unknown = sorted({m for m in d["masters"] if m not in sizes})
    if unknown:
        return {"skipped": f"{def_file} places masters no PDK LEF defines: {unknown[:5]}"}
    dbu, (dx0, dy0, dx1, dy1) = d["dbu"], d["die"]
    engine_of, key = _grouping(stages, place["top"])
    folders: dict[str, str] = {}                # instance folder -> engine: one lookup per folder, not per cell

    def group(name: str) -> str:
        folder = name.rpartition("/")[0]
        if not folder:                          # top level: repair buffers or not, name by name
            return engine_of(name)
        if folder not in folders:
            folders[folder] = engine_of(name)
        return folders[folder]
    eng = [group(n) for n in d["names"]]
    is_macro = np.array([m.startswith("fakeram") for m in d["masters"]])
    w = np.array([sizes[m][0] for m in d["masters"]])
    h = np.array([sizes[m][1] for m in d["masters"]])
    x0, y0 = (np.array(d["xs"]) - dx0) / dbu, (np.array(d["ys"]) - dy0) / dbu
    area: dict[str, float] = {}
    for e, a, mac in zip(eng, w * h, is_macro):
        area[e] = area.get(e, 0.0) + (0.0 if mac else a)
    order = sorted(area, key=lambda e: (e.startswith("("), -area[e]))       # the engines, then what is outside them
    named = [e for e in order if not e.startswith("(")]
    if len(named) > len(ENGINE_COLOURS):                                      # the smallest share one grey
        rest = set(named[len(ENGINE_COLOURS) - 1:])
        eng = [e if e not in rest else "(others)" for e in eng]
        order = [e for e in order if e not in rest] + ["(others)"]
    index = {e: i for i, e in enumerate(order)}
    groups = np.array([index[e] for e in eng])
    W, H = (dx1 - dx0) / dbu, (dy1 - dy0) / dbu
    px = max(max(W, H) / RASTER_PIXELS, MIN_PIXEL_UM)
    shape = (math.ceil(H / px), math.ceil(W / px))
    std = ~is_macro
    best, cover = _raster(x0[std], y0[std], w[std], h[std], groups[std], len(order), shape, px)
    colours = _colours(order)
    palette = np.array([colours[e][:3] for e in order] + [(1.0, 1.0, 1.0)])
    alpha = np.where(best >= 0, 0.35 + 0.65 * cover, 0.0)[..., None]
    img = 1.0 - alpha * (1.0 - palette[best])              # best = -1 (nothing) picks white
    plt = plt_()
    from matplotlib.patches import Patch, Rectangle
    fig, ax = plt.subplots(figsize=(11, max(4.0, 8.0 * H / W) + 0.8))
    ax.imshow(img, origin="lower", extent=(0, shape[1] * px, 0, shape[0] * px), interpolation="nearest")
    ax.add_patch(Rectangle((0, 0), W, H, fill=False, lw=1.0, ec="black"))
    boxes, tiles = [], {}
    for i in np.flatnonzero(is_macro):
        ax.add_patch(Rectangle((x0[i], y0[i]), w[i], h[i], fc=colours[eng[i]], alpha=0.45, ec="black", lw=0.5,
                               hatch="///"))
        tiles.setdefault(TILE.sub("", d["names"][i]), []).append(i)
    for inst, idx in tiles.items():
        i = idx[0]
        name = inst.split("/")[-1] + (f" ×{len(idx)}" if len(idx) > 1 else "")
        boxes.append((name, x0[i], y0[i], w[i], h[i]))
    if d["pins"]:
        ax.scatter([(x - dx0) / dbu for x, _ in d["pins"]], [(y - dy0) / dbu for _, y in d["pins"]], s=2,
                   c="crimson", marker="s", label="I/O pins")
    ax.set_xlim(-MARGIN * W, (1 + MARGIN) * W)
    ax.set_ylim(-MARGIN * H, (1 + MARGIN) * H)
    ax.set_aspect("equal")
    ax.set_xlabel("x (µm)")
    ax.set_ylabel("y (µm)")
    _scale_bar(ax, W)
    n_cells, n_macros = int(std.sum()), int(is_macro.sum())
    ax.set_title(f"{place['top']}: placement, {n_cells:,} cells coloured by engine, {n_macros} macros, "
                 f"die {W:,.0f} × {H:,.0f} µm", fontsize=10)
    cells = {e: int(((groups == index[e]) & std).sum()) for e in order}
    macros = {e: int(((groups == index[e]) & is_macro).sum()) for e in order}
    handles = [Patch(color=colours[e], label=f"{e}: {cells[e]:,} cells"
                     + (f", {macros[e]} macros" if macros[e] else "")) for e in order]
    handles.append(Patch(fc="white", ec="black", hatch="///", label="macro (fakeram45), in its engine's colour"))
    handles += [h_ for h_ in ax.get_legend_handles_labels()[0]]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title=key,
              title_fontsize=8, frameon=False)
    written = _label_macros(fig, ax, boxes)
    drawn = save(fig, ax, path, dpi=110)
    labels = ("" if not boxes else f", all {written} labelled" if written == len(boxes) else
              f", {written} of {len(boxes)} labelled (the rest have no room for their name)")
    return {"caption": f"Placement of `{place['top']}` ({def_file.name}): standard cells coloured by engine, paler "
                       f"where the rows are sparse, greys outside the engines (net-repair buffers darkest); "
                       f"macros hatched in their engine's colour{labels}",
            "commands": [stages["place"]["command"]], **drawn}


def _used_layers(view, layout) -> list[tuple[str, str]]:
    """(name, fill colour) of the layer properties whose layer holds shapes in the top cell."""
    top = layout.top_cell()
    out = []
    it = view.begin_layers()
    while not it.at_end():
        lp = it.current()
        li = lp.layer_index()
        if li >= 0 and lp.visible and not top.bbox(li).empty():
            name = lp.name or lp.source
            out.append((name, f"#{lp.fill_color & 0xFFFFFF:06x}"))
        it.next()
    return out


def fig_layout(stages: dict, path: Path) -> dict | None:
    place = stages["place"]["data"]
    if place is None:
        return None
    gds = Path(stages["place"]["path"]).parent / place["files"].get("gds", f"{place['top']}.gds")
    if "gds" not in place["files"] or not gds.is_file():
        return {"skipped": f"no GDS ({gds} not found: flow.place ran with --no-picture?)"}
    try:
        lyp = find_pdk().klayout_lyp
    except PdkError as e:
        return {"skipped": f"the layer colours come from the PDK's KLayout layer properties: {e}"}
    if lyp is None:
        return {"skipped": "the PDK has no klayout/*.lyp layer properties to draw the layers with"}
    import klayout.db as db
    import klayout.lay as lay
    W, H = place["die"]["width_um"], place["die"]["height_um"]
    view = lay.LayoutView()
    view.load_layout(str(gds), True)
    view.load_layer_props(str(lyp))
    view.max_hier()
    for k, v in (("background-color", "#ffffff"), ("grid-visible", "false"), ("text-visible", "false")):
        view.set_config(k, v)
    box = db.DBox(-MARGIN * W, -MARGIN * H, (1 + MARGIN) * W, (1 + MARGIN) * H)
    scale = LAYOUT_PIXELS / max(box.width(), box.height())
    px_w, px_h = round(box.width() * scale), round(box.height() * scale)
    raw = path.with_name(f".{path.stem}.klayout.png")
    view.save_image_with_options(str(raw), px_w, px_h, 0, 0, 0, box, False)
    layers = _used_layers(view, view.active_cellview().layout())
    plt = plt_()
    from matplotlib.patches import Patch
    img = plt.imread(str(raw))
    raw.unlink()
    fig, ax = plt.subplots(figsize=(11, max(4.0, 8.0 * H / W) + 0.8))
    ax.imshow(img, extent=(box.left, box.right, box.bottom, box.top), interpolation="antialiased")
    ax.set_xlabel("x (µm)")
    ax.set_ylabel("y (µm)")
    _scale_bar(ax, W)
    ax.set_title(f"{place['top']}: layout of the placed cells (GDS drawn by KLayout), die {W:,.0f} × {H:,.0f} µm",
                 fontsize=10)
    ax.legend(handles=[Patch(color=c, label=n) for n, c in layers], loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, title="GDS layer (FreePDK45 colours)",
              title_fontsize=8, frameon=False)
    drawn = save(fig, ax, path, dpi=110)
    return {"caption": f"Layout of `{place['top']}` from {gds.name}: the Nangate45 cells' own layers where placement "
                       "put them; fakeram45 has no GDS, so each macro is an outline on the comment layer",
            "commands": [stages["place"]["command"]], **drawn}
