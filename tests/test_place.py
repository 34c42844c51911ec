"""flow.place on the small MAC design: a legal placed DEF, parasitics, post-placement timing, GDS, PNG."""
import json
import random
from pathlib import Path

import pytest

from flow.lefdef import read_def_components, read_lef
from flow.parasitics import spef_escape, steiner_factor
from flow.place import PlaceError, place
from flow.place_out import DEFERRED, write_deferred
from flow.synth import synthesize
from pdk_config import find_pdk

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    base = tmp_path_factory.mktemp("place")
    synth = synthesize(DATA / "mac_sram", base / "synth")
    return base, synth, place(base / "synth", base / "place", utilization=0.6, effort=2)


def test_every_component_placed_inside_the_die_on_rows(placed):
    base, synth, r = placed
    out = base / "place"
    d = read_def_components(out / "mac_sram.def")
    pdk = find_pdk()
    lef = read_lef(pdk.cell_lef, read_lef(pdk.tech_lef))
    for ram in pdk.fakerams:
        read_lef(ram.lef, lef)
    x0, y0, x1, y1 = d["die"]
    comps = d["components"]
    std = [c for c in comps if c["status"] == "PLACED"]
    macros = [c for c in comps if c["status"] == "FIXED"]
    rep = r["repair"]                                       # buffers only (flow/repair.py)
    assert len(std) == r["cells_placed"] == synth["cells"]["count"] - rep["buffers_removed"] + rep["buffers_added"]
    assert [c["master"] for c in macros] == ["fakeram45_64x32"] and r["macros_placed"] == 1
    rows = {(row["y"], row["orient"]): row for row in d["rows"]}
    size = {c["name"]: (round(lef.masters[c["master"]].width_um * d["dbu"]),
                        round(lef.masters[c["master"]].height_um * d["dbu"])) for c in comps}
    for c in comps:
        w, h = size[c["name"]]
        assert x0 <= c["x"] and c["x"] + w <= x1 and y0 <= c["y"] and c["y"] + h <= y1, c
    for c in std:
        row = rows.get((c["y"], c["orient"]))            # on a row, with the row's orientation
        assert row is not None, c
        on_some = [rw for rw in d["rows"] if rw["y"] == c["y"] and rw["x"] <= c["x"]
                   and c["x"] + size[c["name"]][0] <= rw["x"] + rw["num_x"] * rw["step_x"]
                   and (c["x"] - rw["x"]) % rw["step_x"] == 0]
        assert on_some, f"{c['name']} at {c['x']},{c['y']} is not on a site of a row"
    # no two cells overlap: all cells of a sample of rows, plus every cell against the macro
    by_y = {}
    for c in std:
        by_y.setdefault(c["y"], []).append(c)
    for y in random.Random(1).sample(sorted(by_y), min(10, len(by_y))):
        cells = sorted(by_y[y], key=lambda c: c["x"])
        for a, b in zip(cells, cells[1:]):
            assert a["x"] + size[a["name"]][0] <= b["x"], (a, b)
    m = macros[0]
    mw, mh = size[m["name"]]
    for c in std:
        w, h = size[c["name"]]
        assert c["x"] + w <= m["x"] or c["x"] >= m["x"] + mw or c["y"] + h <= m["y"] or c["y"] >= m["y"] + mh, c


def test_report_numbers(placed):
    base, synth, r = placed
    assert json.loads((base / "place" / "place.json").read_text()) == json.loads(json.dumps(r))
    assert 0.5 <= r["utilization"] <= 0.65
    assert r["die"]["area_um2"] == pytest.approx(r["die"]["width_um"] * r["die"]["height_um"], rel=1e-6)
    assert r["die"]["area_um2"] > synth["area"]["logic_um2"] + r["macro_area_um2"]
    assert r["hpwl_um"] > 0 and r["steiner_wire_um"] >= r["hpwl_um"] * 0.99
    assert r["roms_as_logic"] == ["scale_rom"]
    assert r["io_pins"] == 1 + 1 + 1 + 8 + 8 + 6 + 1 + 6 + 32 + 24 + 24
    assert (base / "place" / "place.txt").read_text().startswith("placement of mac_sram")
    assert not (base / "place.tmp").exists()


def test_parasitics_and_post_placement_timing(placed):
    base, _, r = placed
    spef = (base / "place" / "mac_sram.spef").read_text()
    assert spef.startswith("*SPEF") and spef.count("*D_NET") > 1000
    assert "*D_NET lane0\\/prod\\[3\\]" in spef or "*I lane0\\/" in spef     # the flat netlist's names
    sta = json.loads((base / "place" / "sta" / "sta.json").read_text())
    assert set(sta["corners"]) == set(r["sta"]) == {"slow", "typical", "fast"}
    assert sta["constraints"]["parasitics"] and sta["constraints"]["wire_load"] is None
    for corner in ("slow", "typical", "fast"):
        c = r["sta"][corner]
        assert 0.5 < c["min_period_ns"] < 10.0 and c["met"], (corner, c)
        log = (base / "place" / "sta" / f"{corner}.log").read_text()
        assert "@@PARASITICS" in log and "Warning" not in log, log[:2000]
    assert r["sta"]["slow"]["min_period_ns"] > r["sta"]["typical"]["min_period_ns"] > r["sta"]["fast"]["min_period_ns"]


def test_placement_without_sta_is_timed_later_by_flow_sta(placed, tmp_path):
    """make demo's split: flow.place --no-sta leaves place.json's timing null, and flow.sta --place times the
    same placed netlist and SPEF into <place>/sta, with the numbers place's own STA gives."""
    from flow.sta import main as sta_main
    base, _, r = placed
    out = tmp_path / "place"
    quiet = place(base / "synth", out, utilization=0.6, effort=2, sta=False, picture=False)
    assert quiet["sta"] is None and "sta" not in quiet["files"] and not (out / "sta").exists()
    assert not any(k.startswith("place__timing") for k in quiet["metrics"])
    assert sta_main(["--synth", str(base / "synth"), "--place", str(out), "--jobs", "1"]) == 0
    later = json.loads((out / "sta" / "sta.json").read_text())
    assert later["constraints"]["parasitics"] and later["period_ns"] == quiet["period_ns"]
    for corner, c in r["sta"].items():
        assert later["corners"][corner]["wns_ns"] == pytest.approx(c["wns_ns"], abs=1e-4), corner


def test_deferred_outputs_are_written_from_the_state_by_flow_sta(placed, tmp_path):
    """make demo's placement: --defer-outputs writes the state sign-off reads, place.json and the floorplan;
    flow.sta --place then writes the netlist, DEF, SPEF and layout from the state (the same bytes as a
    placement that writes them at once) before it times them."""
    from flow.sta import main as sta_main
    base, _, r = placed
    out = tmp_path / "place"
    later = place(base / "synth", out, utilization=0.6, effort=2, sta=False, outputs=False)
    assert not {"netlist", "def", "spef", "gds", "placement_png"} & set(later["files"])
    assert later[DEFERRED]["written"] is False and "flow.place_out" in later[DEFERRED]["command"]
    assert not list(out.glob("*.def")) + list(out.glob("*.spef")) + list(out.glob("*.v"))
    for key in ("hpwl_um", "steiner_wire_um", "wire_cap_pf", "nets"):      # estimated without the SPEF
        assert later[key] == pytest.approx(r[key], rel=1e-9), key
    assert sta_main(["--synth", str(base / "synth"), "--place", str(out), "--jobs", "1"]) == 0
    done = json.loads((out / "place.json").read_text())
    assert done[DEFERRED]["written"] is True and done[DEFERRED]["runtime_s"] > 0
    for key in ("netlist", "def", "spef"):
        assert (out / done["files"][key]).read_bytes() == (base / "place" / r["files"][key]).read_bytes(), key
    for key in ("gds", "placement_png"):                # (the GDS header holds the time it was written)
        assert (out / done["files"][key]).stat().st_size > 10_000, key
    assert not (out / "outputs.tmp").exists()
    timed = json.loads((out / "sta" / "sta.json").read_text())
    for corner, c in r["sta"].items():
        assert timed["corners"][corner]["wns_ns"] == pytest.approx(c["wns_ns"], abs=1e-4), corner


def test_deferred_outputs_need_no_sta(placed, tmp_path):
    base, _, _ = placed
    with pytest.raises(PlaceError, match="--no-sta"):
        place(base / "synth", tmp_path / "place", sta=True, outputs=False)
    with pytest.raises(PlaceError, match="run `make place`"):
        write_deferred(tmp_path / "nowhere")


def test_gds_and_pictures(placed):
    base, _, r = placed
    import klayout.db as db
    out = base / "place"
    for key in ("gds", "png", "placement_png"):
        assert (out / r["files"][key]).stat().st_size > 10_000, key
    layout = db.Layout()
    layout.read(str(out / "mac_sram.gds"))
    top = layout.cell("mac_sram")
    assert top is not None and top.child_instances() == r["cells_placed"]
    assert (out / "mac_sram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_synth_says_run_synth(tmp_path):
    with pytest.raises(PlaceError, match="run `make synth`"):
        place(tmp_path / "nothing", tmp_path / "place")


def test_missing_pdk_is_reported(tmp_path, monkeypatch, placed):
    base, _, _ = placed
    monkeypatch.setenv("NANGATE45_PDK", str(tmp_path / "no_pdk"))
    monkeypatch.delenv("FLOW_HOME", raising=False)
    monkeypatch.delenv("ORFS_HOME", raising=False)
    with pytest.raises(PlaceError, match="Nangate45 PDK not found"):
        place(base / "synth", tmp_path / "place")


def test_bad_utilization_is_rejected(tmp_path):
    with pytest.raises(PlaceError, match="utilization must be within"):
        place(tmp_path, tmp_path / "place", utilization=1.5)


def test_spef_names_and_steiner_factor():
    assert spef_escape("lane0/prod[3]") == "lane0/prod[3]"
    assert spef_escape("$signal$11[4]") == "\\$signal\\$11[4]"
    assert spef_escape("lane0/prod[3]", flat=True) == "lane0\\/prod[3]"
    assert spef_escape("lane0/prod[3]", flat=True, bus=False) == "lane0\\/prod\\[3\\]"
    assert steiner_factor(2) == 1.0 and steiner_factor(4) > 1.0
    assert steiner_factor(100) > steiner_factor(50) > steiner_factor(10)
    assert steiner_factor(17) == pytest.approx(1.6899 + (1.8924 - 1.6899) * 2 / 5) and steiner_factor(50) == 2.7886
    rng = random.Random(5)                          # the fast escape is the rule: a backslash before every
    for _ in range(2000):                           # character but a letter, digit or '_' (non-ASCII too)
        name = "".join(rng.choice("ab_Z09/[]$.\\ é:") for _ in range(rng.randint(0, 12)))
        assert spef_escape(name, flat=True, bus=False) == "".join(
            c if (c.isascii() and c.isalnum()) or c == "_" else "\\" + c for c in name), name
