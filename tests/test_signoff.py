"""flow.signoff on the small region design: sizing, hold repair, re-legalisation, sign-off STA, design rules,
routing demand; and the pieces it is made of."""
import json
import re
from pathlib import Path

import numpy as np
import pytest

from flow import hold, rebuffer, rudy
from flow.design_rules import output_limits
from flow.lefdef import DefRow, Layer, Lef
from flow.place import place
from flow.place_flat import Floorplan
from flow.place_netlist import Design, PlaceError
from flow.place_out import DEFERRED
from flow.relegalize import relegalize
from flow.resize import LOAD_PER_DRIVE_FF, bigger, parse_stages, size_ladders
from flow.signoff import HOLD_UNCERTAINTY_NS, SETUP_UNCERTAINTY_NS, signoff
from flow.synth import synthesize
from pdk_config import find_pdk

DATA = Path(__file__).parent / "data"

REPORT = """\
Startpoint: core/mul1/_964_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: core/mul1/_947_ (rising edge-triggered flip-flop clocked by clk)
Path Group: clk
Path Type: max

     Cap    Delay     Time   Description
-----------------------------------------------------------
            0.000    0.000   clock clk (rise edge)
                     0.000    0.000   clock network delay (ideal)
            0.000    0.000 ^ core/mul1/_964_/CK (DFF_X1)
  17.951    0.422    0.422 ^ core/mul1/_964_/Q (DFF_X1)
            0.000    0.423 ^ core/mul1/_627_/A1 (NAND2_X1)
   5.390    0.100    0.523 v core/mul1/_627_/ZN (NAND2_X1)
            0.000    0.523 v core/mul1/_947_/D (DFF_X1)
                     0.523   data arrival time
"""


def test_parse_stages_reads_each_driver_with_its_load_and_delay():
    (path,) = parse_stages(REPORT)
    assert [(s.inst, s.pin, s.cell, s.load_ff, s.delay_ns) for s in path] == [
        ("core/mul1/_964_", "Q", "DFF_X1", 17.951, 0.422), ("core/mul1/_627_", "ZN", "NAND2_X1", 5.390, 0.100)]


def test_bigger_sizes_by_load_per_drive_and_stops_at_the_largest():
    ladders = size_ladders(["NAND2_X1", "NAND2_X2", "NAND2_X4", "FA_X1", "FILLCELL_X2", "FILLCELL_X4", "BUF_X1"])
    assert ladders == {"NAND2": [1, 2, 4]}                       # one-size cells and fillers are not sized
    assert bigger("NAND2_X1", 3 * LOAD_PER_DRIVE_FF, 0.05, ladders) == "NAND2_X4"
    assert bigger("NAND2_X1", 1.5 * LOAD_PER_DRIVE_FF, 0.05, ladders) == "NAND2_X2"
    assert bigger("NAND2_X1", 0.5 * LOAD_PER_DRIVE_FF, 0.05, ladders) is None       # light load, fast stage
    assert bigger("NAND2_X1", 0.5 * LOAD_PER_DRIVE_FF, 0.5, ladders) == "NAND2_X2"  # light load, slow stage
    assert bigger("NAND2_X4", 100.0, 1.0, ladders) is None
    assert bigger("FA_X1", 100.0, 1.0, ladders) is None


def _rows_design(widths: list[int], xs: list[int], y: int = 0):
    d = Design("t", comp_name=[f"c{i}" for i in range(len(widths))], comp_w=list(widths),
               comp_h=[1400] * len(widths), n_std=len(widths))
    rows = [DefRow("R0", "core", 0, 0, "N", 20, 190), DefRow("R1", "core", 0, 1400, "FS", 20, 190)]
    fp = Floorplan((0, 0, 3800, 2800), rows, 1400, (0, 0, 3800, 2800), {}, [])
    return d, fp, list(xs), [y] * len(widths), ["N"] * len(widths)


def test_relegalize_removes_overlaps_on_the_site_grid_inside_the_row():
    d, fp, xs, ys, orient = _rows_design([380, 570, 380, 760], [0, 190, 380, 3420])   # overlaps; one off the end
    relegalize(d, fp, xs, ys, orient)
    spans = sorted((x, x + w) for x, w in zip(xs, d.comp_w))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert all(x % 190 == 0 and 0 <= x and x + w <= 3800 for x, w in zip(xs, d.comp_w))
    assert set(ys) == {0}


def test_relegalize_moves_a_cell_to_a_row_with_room_and_refuses_an_overfull_design():
    d, fp, xs, ys, orient = _rows_design([1900, 1900, 760], [0, 1900, 0])
    relegalize(d, fp, xs, ys, orient)
    assert ys[2] == 1400 and orient[2] == "FS"
    d, fp, xs, ys, orient = _rows_design([3800, 3800, 380], [0, 0, 0])
    with pytest.raises(PlaceError, match="no row"):
        relegalize(d, fp, xs, ys, orient)


def test_hold_apply_puts_the_buffers_between_net_and_pin_in_order():
    module = {"cells": {"ff": {"type": "DFF_X1", "connections": {"D": [5], "CK": [2], "Q": [6]},
                               "port_directions": {"D": "input", "CK": "input", "Q": "output"}}},
              "netnames": {}}
    res = hold.HoldResult(inserted=[("hold_buf_0", "u/ff", "D"), ("hold_buf_1", "u/ff", "D")])
    hold.apply(module, res, {"u/ff": "ff"})
    b0, b1 = module["cells"]["hold_buf_0"], module["cells"]["hold_buf_1"]
    assert b0["connections"]["A"] == [5] and b1["connections"]["A"] == b0["connections"]["Z"]
    assert module["cells"]["ff"]["connections"]["D"] == b1["connections"]["Z"]
    assert b0["type"] == b1["type"] == hold.HOLD_BUFFER


def test_rudy_spreads_each_net_over_its_box_and_counts_tracks():
    lef = Lef(dbu=1000, layers={n: Layer(n, pitch_um=p) for n, p in
                                (("metal2", 0.19), ("metal3", 0.14), ("metal4", 0.28), ("metal5", 0.28),
                                 ("metal6", 0.28))})
    boxes = np.array([[0.0, 0.0, 40.0, 20.0], [5.0, 5.0, 6.0, 6.0]])           # HPWL 60 and 2 um
    r = rudy.rudy(boxes, (40.0, 40.0), [(20.0, 20.0, 40.0, 40.0)], lef, gcell_um=20.0)
    assert r.demand_um.sum() == pytest.approx(62.0)
    assert r.demand_um[0, 0] == pytest.approx(32.0) and r.demand_um[0, 1] == pytest.approx(30.0)
    per_um2 = sum(1 / lef.layers[n].pitch_um for n in rudy.LAYERS)
    above = sum(1 / lef.layers[n].pitch_um for n in rudy.ABOVE_MACROS)
    assert r.capacity_um[0, 0] == pytest.approx(per_um2 * 400)
    assert r.capacity_um[1, 1] == pytest.approx(above * 400)                     # under a macro: metal5-6


def test_output_limits_reads_max_capacitance_of_output_pins():
    lib = ('cell (INV_X1) { area : 0.5; pin (A) { direction : input; capacitance : 1.7; }\n'
           'pin (ZN) { direction : output; max_capacitance : 60.73; function : "!A"; } }\n'
           'cell (BUF_X2) { pin (A) { direction : input; } pin (Z) { direction : output; max_capacitance : 121.2; } }')
    assert output_limits(lib) == {("INV_X1", "ZN"): 60.73, ("BUF_X2", "Z"): 121.2}


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    base = tmp_path_factory.mktemp("signoff")
    synthesize(DATA / "regions_small", base / "synth")
    place(base / "synth", base / "place", utilization=0.6, effort=1, jobs=1, picture=False)
    return base


def test_signoff_at_10ns_meets_every_check(placed):
    r = signoff(placed / "place", placed / "synth", placed / "signoff", period_ns=10.0)
    assert r["signed_off"], r["corners"]
    assert all(v["wns_ns"] >= 0 for v in r["corners"].values())
    assert r["corners"]["fast"]["worst_hold_slack_ns"] >= 0
    assert r["clock"]["setup_uncertainty_ns"] == SETUP_UNCERTAINTY_NS
    assert r["clock"]["hold_uncertainty_ns"] == HOLD_UNCERTAINTY_NS
    sta = json.loads((placed / "signoff" / "sta" / "sta.json").read_text())
    assert sta["constraints"]["clock_uncertainty_ns"] == {"setup": SETUP_UNCERTAINTY_NS, "hold": HOLD_UNCERTAINTY_NS}
    netlist = (placed / "signoff" / r["files"]["netlist"]).read_text()
    assert netlist.count(f"{hold.HOLD_BUFFER} hold_buf_") == r["hold_repair"]["buffers_added"]
    assert r["routing_demand"]["gcells"] > 0 and 0 < r["routing_demand"]["peak_demand_over_capacity"]
    assert (placed / "signoff" / "rudy.png").stat().st_size > 0


def test_signoff_of_a_placement_that_deferred_its_files(placed, tmp_path):
    """make demo's placement (--no-sta --defer-outputs) writes no netlist or SPEF: sign-off reads its state,
    and, when the electrical repair leaves nothing to write, the placement's files, which it has written
    first. The verdict and slacks are those of the same placement with its files."""
    later = place(placed / "synth", tmp_path / "place", utilization=0.6, effort=1, jobs=1, picture=False, sta=False,
                  outputs=False)
    assert "spef" not in later["files"]
    r = signoff(tmp_path / "place", placed / "synth", tmp_path / "signoff", period_ns=10.0)
    ref = signoff(placed / "place", placed / "synth", tmp_path / "reference", period_ns=10.0)
    assert r["signed_off"] and ref["signed_off"]
    for corner, v in ref["corners"].items():
        assert r["corners"][corner]["wns_ns"] == pytest.approx(v["wns_ns"], abs=1e-4), corner
    written = json.loads((tmp_path / "place" / "place.json").read_text())
    repaired = "cells_moved" in r["electrical_repair"]           # (it wrote its own netlist and SPEF)
    assert repaired != written[DEFERRED]["written"]


def test_sizing_at_a_tight_clock_improves_slack_and_sign_off_agrees(placed):
    """At 3.2 ns the slow corner fails after placement. Sizing must raise the worst slack or leave it, and
    the sign-off STA (a fresh process on the written netlist and SPEF, after re-legalisation) must see
    what the sizing session saw, within what re-legalisation can move (measured: a few ps)."""
    r = signoff(placed / "place", placed / "synth", placed / "signoff-tight", period_ns=3.2)
    passes = r["sizing"]["passes"]
    assert passes[0]["wns_ns"] < 0
    assert passes[-1]["wns_ns"] >= passes[0]["wns_ns"]
    assert r["corners"]["slow"]["wns_ns"] == pytest.approx(passes[-1]["wns_ns"], abs=0.03)
    assert r["sizing"]["cells_resized"] > 0 and r["sizing"]["area_change_um2"] > 0


def test_boundaries_flags_logic_on_either_side_of_a_crossing():
    """Region a: flip-flop fa -> net n1 -> region b flip-flop fb (registered); a's NAND g -> n2 -> b's
    flip-flop (logic out); a's flip-flop -> n3 -> b's NAND h (logic in); a buffer between is transparent."""
    from flow.boundaries import classify, md_boundaries
    names = ["fa", "g", "fb", "h", "buf", "fc"]
    masters = ["DFF_X1", "NAND2_X1", "DFF_X1", "NAND2_X1", "BUF_X1", "DFF_X1"]
    groups = ["a", "a", "b", "b", "a", "b"]
    pin = lambda i, p, drv: (i, p, 0, 0, f"{names[i]}:{p}", drv)          # noqa: E731
    nets = [[pin(0, "Q", True), pin(4, "A", False)],                        # fa -> buf (inside a)
            [pin(4, "Z", True), pin(2, "D", False)],                        # buf -> fb: registered
            [pin(1, "ZN", True), pin(5, "D", False)],                       # g -> fc: logic out
            [pin(0, "Q", True), pin(3, "A1", False)]]                       # fa -> h: logic in
    d = Design("t", comp_name=names, comp_master=masters, comp_group=groups, comp_w=[1] * 6, comp_h=[1] * 6,
               n_std=6, net_name=["n0", "n1", "n2", "n3"], net_pins=nets)
    r = classify(d)
    (pair,) = r["pairs"]
    assert (pair["from"], pair["to"], pair["nets"]) == ("a", "b", 3)
    assert (pair["logic_out"], pair["logic_in"], r["unregistered"]) == (1, 1, 2)
    assert sorted(pair["examples"]) == ["n2", "n3"]
    assert sorted(pair["buses"]) == [["n2", 1], ["n3", 1]]
    assert r["registers_to_add"] == 2              # a flip-flop after g (n2 leaves logic), one before h (n3)
    md = "\n".join(md_boundaries(r, "cmd"))
    assert "| a | b | 3 | 2 | 1 | 1 | `n2` 1, `n3` 1 |" in md and "would add 2 flip-flops" in md
    assert "Not measured: `cmd`" in "\n".join(md_boundaries(None, "cmd"))


def test_boundaries_names_a_bus_by_the_signal_behind_its_buffers():
    """A bit of bus v leaves logic g of region a through a buffer (in a) into NAND h of region b: the bus is v."""
    from flow.boundaries import classify
    names, masters, groups = ["g", "buf", "h"], ["NAND2_X1", "BUF_X4", "NAND2_X1"], ["a", "a", "b"]
    pin = lambda i, p, drv: (i, p, 0, 0, f"{names[i]}:{p}", drv)          # noqa: E731
    nets = [[pin(0, "ZN", True), pin(1, "A", False)], [pin(1, "Z", True), pin(2, "A1", False)]]
    d = Design("t", comp_name=names, comp_master=masters, comp_group=groups, comp_w=[1] * 3, comp_h=[1] * 3,
               n_std=3, net_name=["v[7]", "repair_net_1"], net_pins=nets)
    (pair,) = classify(d)["pairs"]
    assert pair["buses"] == [["v", 1]] and pair["examples"] == ["repair_net_1"]


ISOLATION_REPORT = """\
Startpoint: core/mla/_608_ (rising edge-triggered flip-flop clocked by clk)
Endpoint: core/mla/_674_ (rising edge-triggered flip-flop clocked by clk)
Path Group: clk
Path Type: max

      Cap     Delay      Time   Description
----------------------------------------------------------------------
             0.0000    0.0000 ^ core/mla/_608_/CK (DFF_X2)
   8.8259    0.1959    0.1959 ^ core/mla/_608_/Q (DFF_X2)
             0.0001    0.1960 ^ core/mla/_703_/A (XOR2_X2)
  68.9070    0.8536    1.0496 ^ core/mla/_703_/Z (XOR2_X2)
             0.0002    1.0498 ^ core/mla/_704_/B2 (AOI21_X4)
  66.5177    0.2216    1.2714 v core/mla/_704_/ZN (AOI21_X4)
             0.0001    1.2715 v core/mla/_674_/D (DFF_X1)
"""


def test_rebuffer_candidates_are_slow_heavy_stages_with_their_critical_sink():
    (c,) = rebuffer.candidates(ISOLATION_REPORT)       # the DFF is light, the AOI fast: only the XOR qualifies
    assert (c.driver, c.critical, c.load_ff, c.delay_ns) == ("core/mla/_703_/Z", "core/mla/_704_/B2", 68.907, 0.8536)
    assert rebuffer._pin("core/u/ram/wdata[15]") == "{core\\/u\\/ram/wdata\\[15\\]}"


def test_rebuffer_apply_moves_the_sinks_onto_the_new_buffer():
    module = {"cells": {"x": {"type": "XOR2_X2", "connections": {"A": [3], "B": [4], "Z": [7]}},
                        "a": {"type": "AOI21_X4", "connections": {"B2": [7], "A": [5], "ZN": [8]}},
                        "n": {"type": "NAND2_X1", "connections": {"A1": [7], "A2": [5], "ZN": [9]}}},
              "netnames": {}}
    move = rebuffer.Move("u/x/Z", "rebuf_0", "BUF_X4", "rebuf_net_0", ["u/n/A1"], (1.0, 2.0))
    rebuffer.apply(module, rebuffer.RebufferResult(moves=[move]), {"u/x": "x", "u/a": "a", "u/n": "n"})
    buf = module["cells"]["rebuf_0"]
    assert buf["type"] == "BUF_X4" and buf["connections"]["A"] == [7]
    assert module["cells"]["n"]["connections"]["A1"] == buf["connections"]["Z"] != [7]
    assert module["cells"]["a"]["connections"]["B2"] == [7]                     # the critical sink stays
    with pytest.raises(ValueError, match="not on rebuf_1's input net"):
        rebuffer.apply(module, rebuffer.RebufferResult(moves=[rebuffer.Move("u/x/Z", "rebuf_1", "BUF_X1",
                       "rebuf_net_1", ["u/a/A"], (0.0, 0.0))]), {"u/x": "x", "u/a": "a", "u/n": "n"})


def test_load_isolation_at_a_tight_clock_keeps_the_logic(placed, tmp_path):
    """At 2.6 ns sizing stops short on regions_small; load isolation adds buffers (measured: 10, slow WNS
    -0.968 -> -0.889 ns against sizing alone), and the signed-off netlist is still the synthesised logic
    (Yosys equivalence, as for flow/repair.py's trees)."""
    from test_repair import equivalent           # tests/ is on sys.path (no package)
    r = signoff(placed / "place", placed / "synth", placed / "signoff-isolate", period_ns=2.6)
    iso = r["load_isolation"]
    assert iso["buffers_added"] > 0 and iso["sinks_moved"] >= iso["buffers_added"]
    assert iso["area_added_um2"] > 0 and any(k["kept"] for k in iso["rounds"] if "kept" in k)
    netlist = placed / "signoff-isolate" / r["files"]["netlist"]
    assert len(re.findall(r"^\s*BUF_X\d+ rebuf_\d+ \(", netlist.read_text(), re.M)) == iso["buffers_added"]
    liberty = find_pdk().plain_liberty("typical", placed / "pdk_cache")
    ok, log = equivalent(tmp_path, liberty, placed / "synth" / "regions_small.sta.v", netlist, "regions_small")
    assert ok, log
    _repaired_check_agrees_and_catches_edits(placed / "synth", netlist, tmp_path)


def _repaired_check_agrees_and_catches_edits(synth, netlist, tmp_path):
    """verification.repaired (the structural check that scales to the nano chip, where Yosys' equivalence does
    not) agrees with Yosys on the signed-off netlist, and each of four edits of it is named: a buffer fed from
    another net, a gate of another function, a gate removed, two inputs swapped."""
    from flow.place_out import read_lefs
    from verification.repaired import RepairedError, compare, signed_off, synthesised
    lef = read_lefs(find_pdk())
    gold, text = synthesised(synth, lef), netlist.read_text()
    rec = compare(gold, signed_off(netlist, lef))
    assert rec["equal"] and rec["buffers_signed_off"] > rec["buffers_synthesised"] and rec["cells_compared"] > 1_000
    bufs = re.findall(r"^  BUF_X\d+ \S+ \(\.A\(([^)]*)\), \.Z\(([^)]*)\)\);$", text, re.M)
    other = next(a for a, _ in bufs if a != bufs[0][0] and not a.startswith("repair_net"))
    nand = re.search(r"^  NAND2_X\d+ .*$", text, re.M)[0]
    edits = {"buffer": text.replace(f".A({bufs[0][0]}), .Z({bufs[0][1]})", f".A({other}), .Z({bufs[0][1]})", 1),
             "function": text.replace(nand, nand.replace("NAND2_X", "NOR2_X"), 1),
             "removed": text.replace(nand + "\n", "", 1),
             "swapped": text.replace(nand, re.sub(r"\.A1\(([^)]*)\), \.A2\(([^)]*)\)", r".A1(\2), .A2(\1)", nand), 1)}
    for what, edited in edits.items():
        assert edited != text, what
        (tmp_path / f"{what}.v").write_text(edited)
        with pytest.raises(RepairedError, match="not the synthesised one"):
            compare(gold, signed_off(tmp_path / f"{what}.v", lef))
