"""flow.regions through flow.place: the small five-engine design (tests/data/regions_small) placed one region
per engine and flat; every cell in its region, the same outputs as the flat flow, progress per region."""
import json
import re
from pathlib import Path

import pytest

from flow.floorplan import Region, RegionPlan
from flow.lefdef import read_def_components
from flow.place import place
from flow.place_flat import Floorplan
from flow.regions import log_name, nearest_point, reassign, region_jobs
from flow.synth import synthesize

DATA = Path(__file__).parent / "data"
TOP = "regions_small"


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    base = tmp_path_factory.mktemp("regions")
    synthesize(DATA / "regions_small", base / "synth")
    mp = pytest.MonkeyPatch()
    lines = []
    import flow.place_netlist as pn
    real = pn.progress
    mp.setattr(pn, "progress", lambda msg: (lines.append(msg), real(msg)))
    import flow.regions as rg
    mp.setattr(rg, "progress", pn.progress)
    try:
        regions = place(base / "synth", base / "regions", effort=1, jobs=2)
    finally:
        mp.undo()
    flat = place(base / "synth", base / "flat", effort=1, flat=True)
    return base, regions, flat, lines


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_same_outputs_as_the_flat_flow(both):
    base, regions, flat, _ = both
    logs = {f for f in _files(base / "regions") if f.startswith("regions/")}
    assert _files(base / "regions") - logs == _files(base / "flat")
    assert {log_name(r["name"]) for r in json.loads((base / "regions" / "floorplan.json").read_text())["regions"]} \
        == {Path(f).name for f in logs}
    assert regions["files"] == flat["files"]
    assert regions["placer"]["mode"] == "regions" and flat["placer"]["mode"] == "flat"
    assert regions["floorplan"]["regions"] == 6
    for key in ("top", "io_pins", "macros", "roms_as_logic", "srams_as_flops", "macro_area_um2"):
        assert regions[key] == flat[key], key
    for r in (regions, flat):
        assert set(r["sta"]) == {"slow", "typical", "fast"} and all(c["met"] for c in r["sta"].values())
        sta = json.loads((base / ("regions" if r is regions else "flat") / "sta" / "sta.json").read_text())
        assert sta["constraints"]["parasitics"]
    # the same cells (repair's buffers aside: their trees follow the placement)
    cells = lambda f: {c["name"]: c["master"] for c in read_def_components(f)["components"]   # noqa: E731
                       if not c["name"].startswith("repair_buf_")}
    assert cells(base / "regions" / f"{TOP}.def") == cells(base / "flat" / f"{TOP}.def")
    netlist = lambda f: sorted(ln for ln in f.read_text().splitlines() if "repair_buf_" not in ln)  # noqa: E731
    assert len(netlist(base / "regions" / f"{TOP}.v")) > 1000


def test_every_cell_lands_inside_its_region(both):
    base, regions, _, _ = both
    fj = json.loads((base / "regions" / "floorplan.json").read_text())
    d = read_def_components(base / "regions" / f"{TOP}.def")
    dbu = d["dbu"]
    rect = {r["name"]: [round(v * dbu) for v in r["rect_um"]] for r in fj["regions"]}
    engines = [n for n in rect if not n.startswith("(")]
    rest = next(n for n in rect if n.startswith("("))
    rows = {(row["y"], row["x"]): row for row in d["rows"]}
    assert len(rows) == fj["rows"]
    seen = set()
    for c in d["components"]:
        if c["status"] != "PLACED":
            continue
        name = c["name"]
        own = next((n for n in engines if name.startswith(n + "/")), rest)
        inside = [n for n, (x0, y0, x1, y1) in rect.items() if x0 <= c["x"] < x1 and y0 <= c["y"] < y1]
        if name.startswith("repair_buf_"):
            assert len(inside) == 1, c                     # a new buffer: in the region it landed in
        else:
            assert inside == [own], (c, inside)
        seen.add(inside[0])
    assert seen == set(rect)
    assert regions["cells_placed"] == sum(r["cells"] for r in fj["regions"])
    for m in fj["macros"]:
        x0, y0, x1, y1 = rect[m["region"]]
        mx0, my0, mx1, my1 = (round(v * dbu) for v in m["rect_um"])
        assert x0 <= mx0 and mx1 <= x1 and y0 <= my0 and my1 <= y1


def test_progress_per_region_with_elapsed_time(both):
    *_, lines = both
    done = [ln for ln in lines if re.match(r"region \S.*: global placement done in [\d.]+ s \(\d of 6 regions", ln)]
    assert len(done) == 6, lines
    assert any(re.match(r"legalised [\d,]+ cells into their regions' rows \(\d+ s", ln) for ln in lines), lines


def test_region_placement_is_no_longer_than_flat(both):
    _, regions, flat, _ = both
    # measured: 17.4 mm against 19.6 mm flat; a margin for the placer's own variation
    assert regions["hpwl_um"] < 1.05 * flat["hpwl_um"], (regions["hpwl_um"], flat["hpwl_um"])
    assert regions["die"] == flat["die"] or abs(regions["die"]["area_um2"] / flat["die"]["area_um2"] - 1) < 0.1


# ---------------------------------------------------------------------------------------------- units

def test_nearest_point_of_another_region():
    a = (0, 0, 100, 100)
    assert nearest_point(a, (100, 20, 200, 60)) == (100, 40)      # beside: middle of the shared stretch
    assert nearest_point(a, (150, 150, 200, 200)) == (150, 150)   # diagonal: the facing corner
    assert nearest_point(a, (-50, 100, 50, 180)) == (25, 100)     # above, half overlapping


class _D:
    """Just what region_jobs and reassign read of a Design: cells 0-2, a macro tile 3, one I/O pin."""
    def __init__(self, names, n_std):
        self.comp_name = names
        self.n_std = n_std
        self.comp_w = [10] * len(names)
        self.comp_h = [10] * len(names)
        self.net_pins = [[(0, "A", 1, 2, None, True), (1, "B", 3, 4, None, False), (-1, "PIN", 0, 0, "x", False)],
                         [(1, "Z", 0, 0, None, True), (2, "A", 0, 0, None, False), (3, "D", 5, 5, None, False)]]


def _plan():
    regions = [Region("core/a", rect=(0, 0, 100, 100)), Region("core/b", rect=(100, 0, 200, 100))]
    fp = Floorplan((0, 0, 210, 100), [], 10, (0, 0, 200, 100), {3: (150, 50)}, [(0, 50, "left")])
    return RegionPlan(regions, [0, 0, 1, 1], {(0, 1): 1.0}, [0], fp, 0.6, 1)


def test_outside_pins_become_terminals():
    d, plan = _D(["core/a/x", "core/a/y", "core/b/z", "core/b/ram/ram_0_0"], 3), _plan()
    a, b = region_jobs(d, plan, 1, d.net_pins)
    assert a["cells"] == [0, 1] and b["cells"] == [2] and b["macros"] == [(3, 150, 50, 10, 10)]
    # net 0 is inside a apart from the I/O pin; net 1 reaches b: b's pins gather at b's edge facing a
    assert a["terminals"] == [(0, 50), (100, 50)]
    assert a["nets"] == [([0, 1, -1], [1, 3, 0], [2, 4, 0]), ([1, -2, -2], [0, 0, 0], [0, 0, 0])]
    assert b["terminals"] == [(100, 50)] and b["nets"] == [([-1, 0, 1], [0, 0, 5], [0, 0, 5])]


def test_a_new_buffer_joins_the_region_it_landed_in():
    old, plan = _D(["core/a/x", "core/a/y", "core/b/z", "core/b/ram/ram_0_0"], 3), _plan()
    new = _D(["core/a/x", "core/a/y", "core/b/z", "repair_buf_0", "core/b/ram/ram_0_0"], 4)
    reassign(plan, old, new, [10, 20, 150, 170, 150], [10, 20, 20, 40, 50])
    assert plan.region_of == [0, 0, 1, 1, 1]
    assert [r.cells for r in plan.regions] == [2, 2]
