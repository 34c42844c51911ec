"""flow/electrical.py and the repeaters of flow/repair.py: nets over their driver's max capacitance become
buffer trees with repeaters along long edges, the logic stays the same."""
import copy
from pathlib import Path

import numpy as np
import pytest

from flow import design_rules
from flow.design_rules import output_limits
from flow.electrical import CAP_MARGIN, REPEATER_SPACING_UM, repair_design
from flow.macro_map import storage_lib
from flow.parasitics import RcModel, steiner_factor
from flow.place import place
from flow.place_flat import PinTable
from flow.place_out import load_state, read_lefs
from flow.repair import TreeBuilder, _Node, input_caps
from flow.synth import liberty_areas, synthesize
from pdk_config import find_pdk

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]
CAPS = {("BUF_X1", "A"): 0.9, ("BUF_X4", "A"): 3.4}


def _chain(node: _Node) -> list[_Node]:
    out = [node]
    while node.children and not node.children[0].sink:
        node = node.children[0]
        out.append(node)
    return out


def test_repeaters_follow_the_route_at_the_spacing():
    sink = _Node(600.0, 400.0, 1.0, sink=("g", "A", 0))
    far = _Node(600.0, 400.0, 1.0, children=[sink], master="BUF_X1")          # a cluster buffer 1000 um away
    near = _Node(20.0, 10.0, 1.0, children=[_Node(25.0, 10.0, 1.0, sink=("h", "A", 0))], master="BUF_X1")
    b = TreeBuilder(CAPS, 0.058, steiner_factor)
    top = b.repeaters(0.0, 0.0, [far, near], 250.0)
    assert top[1] is near                                          # 30 um away: no repeater
    chain = _chain(top[0])
    assert [(n.x, n.y) for n in chain] == [(250.0, 0.0), (500.0, 0.0), (600.0, 150.0), (600.0, 400.0), (600.0, 400.0)]
    assert chain[-1] is far and all(n.master for n in chain)


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    base = tmp_path_factory.mktemp("electrical")
    synthesize(DATA / "regions_small", base / "synth")
    place(base / "synth", base / "place", utilization=0.6, effort=1, jobs=1, picture=False)
    return base


def test_nets_over_a_tightened_limit_are_rebuilt_and_keep_the_logic(placed, tmp_path, monkeypatch):
    """regions_small meets the library's limits, so they are cut to a fifth: the nets then over them are
    rebuilt with repeaters, fewer break the cut limits afterwards, and the netlist is still the synthesised
    logic (Yosys equivalence)."""
    from test_repair import equivalent                   # tests/ is on sys.path (no package)
    pdk = find_pdk()
    cache = placed / "pdk_cache"
    lef, sizes = read_lefs(pdk), storage_lib(pdk, cache)
    state = load_state(placed / "place" / "placed.pickle")
    unsettled = copy.deepcopy(state)
    slow = pdk.plain_liberty("slow", cache)
    limits = {k: v / 5 for k, v in output_limits(slow.read_text()).items()}
    caps = input_caps(pdk.plain_liberty("typical", cache).read_text())
    (d, xs, ys, orient), s = repair_design(state["module"], state, lef, sizes, "regions_small", caps, limits,
                                           liberty_areas(slow), RcModel.from_lef(lef), "clk", tmp_path / "out")
    print(s)
    assert s["cap_violations_before"] > 0 and s["nets_repaired"] > 0 and s["buffers_added"] > 0
    assert s["drivers_upsized"] > 0 and s["nets_forced"] + s["drivers_upsized"] <= s["cap_violations_before"]
    assert s["cap_violations_after"] < s["cap_violations_before"]
    assert s["repeater_spacing_um"] == REPEATER_SPACING_UM and len(d.comp_name) == len(xs) == len(ys)
    assert len(design_rules.check(d, state["floorplan"], xs, ys, orient, caps,
                                  {k: v * CAP_MARGIN for k, v in limits.items()}, RcModel.from_lef(lef), lef.dbu,
                                  {"clk"}).cap_violations) == s["cap_violations_after"]
    ok, log = equivalent(tmp_path, pdk.plain_liberty("typical", cache), placed / "synth" / "regions_small.sta.v",
                         Path(s["netlist"]), "regions_small")
    assert ok, log
    # without the up-sizing after re-legalisation, more nets stay over the limits
    monkeypatch.setattr("flow.electrical.SETTLE_ROUNDS", 0)
    _, s0 = repair_design(unsettled["module"], unsettled, lef, sizes, "regions_small", caps, limits,
                          liberty_areas(slow), RcModel.from_lef(lef), "clk", None)
    assert s["settle_upsized"] > 0 and s0["settle_upsized"] == 0
    assert s["cap_violations_after"] < s0["cap_violations_after"], (s, s0)
    assert s["left_over_limit"]["count"] <= s0["left_over_limit"]["count"] <= s0["cap_violations_after"], (s, s0)
    assert all(e["load_ff"] > e["limit_ff"] for e in s0["left_over_limit"]["examples"]), s0["left_over_limit"]


class _Design:
    def __init__(self, names: list[str]):
        self.comp_name, self.comp_key = names, [f"key_{n}" for n in names]


def test_upsize_drivers_takes_the_smallest_size_that_carries_the_load():
    """The smallest stronger size whose limit is UPSIZE_MARGIN x the load on every violating pin; a long net,
    a port and a cell without a stronger size are left to the buffers."""
    from flow.electrical import UPSIZE_MARGIN, UPSIZE_MAX_WIRE_UM, upsize_drivers
    limits = {("XOR2_X1", "Z"): 25.0, ("XOR2_X2", "Z"): 50.0, ("NAND2_X1", "ZN"): 59.0, ("NAND2_X2", "ZN"): 118.0,
              ("NAND2_X4", "ZN"): 236.0, ("FA_X1", "S"): 60.0, ("FA_X1", "CO"): 60.0}
    ladders = {"XOR2": [1, 2], "NAND2": [1, 2, 4]}
    names = ["x", "n", "far", "fa", "top"]
    module = {"cells": {f"key_{n}": {"type": t} for n, t in
                        zip(names, ["XOR2_X1", "NAND2_X1", "NAND2_X1", "FA_X1", "XOR2_X2"])}}
    v = [{"net": "a", "driver": "x/Z", "load_ff": 30.0, "wire_um": 80.0},
         {"net": "b", "driver": "n/ZN", "load_ff": 100.0, "wire_um": 200.0},      # X2 118 < 125: X4
         {"net": "c", "driver": "far/ZN", "load_ff": 70.0, "wire_um": UPSIZE_MAX_WIRE_UM + 1},
         {"net": "d", "driver": "fa/S", "load_ff": 70.0, "wire_um": 10.0},       # FA has one size
         {"net": "e", "driver": "top/Z", "load_ff": 55.0, "wire_um": 10.0},      # XOR2_X2 is the largest
         {"net": "f", "driver": "port", "load_ff": 99.0, "wire_um": 10.0}]
    out = upsize_drivers(module, _Design(names), v, limits, ladders)
    assert out == {"key_x": ("XOR2_X1", "XOR2_X2"), "key_n": ("NAND2_X1", "NAND2_X4")}
    assert module["cells"]["key_n"]["type"] == "NAND2_X4" and module["cells"]["key_far"]["type"] == "NAND2_X1"
    assert 100.0 * UPSIZE_MARGIN > 118.0


def test_settle_rounds_take_any_length_at_no_margin():
    """After re-legalisation (``SETTLE_MARGIN``, no wire limit) a long net's driver is up-sized too, to the
    smallest size that carries the load itself."""
    from flow.electrical import SETTLE_MARGIN, UPSIZE_MAX_WIRE_UM, upsize_drivers
    limits = {("NAND2_X1", "ZN"): 59.0, ("NAND2_X2", "ZN"): 118.0, ("NAND2_X4", "ZN"): 236.0}
    module = {"cells": {"key_far": {"type": "NAND2_X1"}, "key_n": {"type": "NAND2_X1"}}}
    v = [{"net": "c", "driver": "far/ZN", "load_ff": 70.0, "wire_um": 4 * UPSIZE_MAX_WIRE_UM},
         {"net": "b", "driver": "n/ZN", "load_ff": 100.0, "wire_um": 200.0}]
    out = upsize_drivers(module, _Design(["far", "n"]), v, limits, {"NAND2": [1, 2, 4]}, SETTLE_MARGIN, None)
    assert out == {"key_far": ("NAND2_X1", "NAND2_X2"), "key_n": ("NAND2_X1", "NAND2_X2")}


def test_resize_in_place_equals_a_rebuilt_design(placed):
    """The settle rounds' shortcut: cells given a stronger size in place have the width and pin offsets a
    design built again from the edited netlist has, and nothing else changes."""
    from flow.electrical import resize_in_place
    from flow.place_netlist import build_design
    from flow.resize import SIZED
    pdk = find_pdk()
    lef, sizes = read_lefs(pdk), storage_lib(pdk, placed / "pdk_cache")
    state = load_state(placed / "place" / "placed.pickle")
    module, d = state["module"], state["design"]
    changed = {}
    for key in d.comp_key[:d.n_std]:                  # every NAND2 / INV / BUF of size 1 to size 2
        cell = module["cells"][key]["type"]
        m = SIZED.match(cell)
        if m and m.group(1) in ("NAND2", "INV", "BUF") and m.group(2) == "1":
            changed[key] = (cell, f"{m.group(1)}_X2")
            module["cells"][key]["type"] = f"{m.group(1)}_X2"
    assert len(changed) > 10
    caps = input_caps(pdk.plain_liberty("typical", placed / "pdk_cache").read_text())
    before = design_rules.sink_caps(d, caps).copy()          # the arrays kept on the design, made before ...
    resize_in_place(d, lef, changed)                         # ... and updated in place
    fresh = build_design(module, "regions_small", lef, sizes)
    assert d.comp_key == fresh.comp_key and d.comp_master == fresh.comp_master
    assert d.comp_w == fresh.comp_w and d.comp_h == fresh.comp_h
    assert d.net_name == fresh.net_name and d.net_pins == fresh.net_pins
    kept, made = PinTable.of(d), PinTable.of(fresh)
    for name in ("start", "obj", "dx", "dy", "drives"):
        assert np.array_equal(getattr(kept, name), getattr(made, name)), name
    now = design_rules.sink_caps(d, caps)
    assert np.array_equal(now, design_rules.sink_caps(fresh, caps)) and not np.array_equal(now, before)
    assert any(lef.masters[new].width_um != lef.masters[old].width_um for old, new in changed.values())


def _reference_check(d, fp, xs, ys, orient, caps, limits, rc, dbu, clock_nets):
    """design_rules.check written as one loop over nets and pins (what the numpy version must equal)."""
    from flow.place_flat import pin_xy
    rep = design_rules.RuleReport()
    for name, pins in zip(d.net_name, d.net_pins):
        if name in clock_nets or len(pins) < 2:
            continue
        rep.nets_checked += 1
        drivers = [p for p in pins if p[5]]
        pts = [pin_xy(d, fp, xs, ys, orient, p) for p in pins]
        px, py = [x for x, _ in pts], [y for _, y in pts]
        length = (max(px) - min(px) + max(py) - min(py)) / dbu * steiner_factor(len(pins))
        load = length * ((rc.c_h + rc.c_v) / 2) + sum(caps.get((d.comp_master[p[0]], p[1]), 0.0)
                                                     for p in pins if not p[5] and p[0] >= 0)
        if len(pins) - len(drivers) > design_rules.MAX_FANOUT:
            rep.fanout_violations.append({"net": name, "fanout": len(pins) - len(drivers)})
        for p in drivers:
            limit = (limits.get(design_rules.DRIVING_CELL) if p[0] < 0 else design_rules.MACRO_MAX_CAP_FF
                     if p[0] >= d.n_std else limits.get((d.comp_master[p[0]], p[1])))
            if limit is not None and load > limit:
                rep.cap_violations.append({"net": name, "load_ff": round(load, 2), "limit_ff": limit,
                                           "wire_um": round(length, 1),
                                           "driver": "port" if p[0] < 0 else d.comp_name[p[0]] + "/" + p[1]})
    return rep


def test_rule_check_equals_the_loop_over_every_pin(placed):
    """The numpy rule check finds the same nets, loads and drivers as a plain loop, at the library's limits
    and at limits cut to a fifth (hundreds of violations), and PinPoints puts every pin where pin_xy does."""
    from flow.place_flat import PinPoints, pin_xy
    pdk = find_pdk()
    state = load_state(placed / "place" / "placed.pickle")
    d, fp, xs, ys, orient = (state[k] for k in ("design", "floorplan", "xs", "ys", "orient"))
    pts = PinPoints.of(d, fp, xs, ys, orient)
    flat = [p for pins in d.net_pins for p in pins]
    assert list(zip(pts.x.tolist(), pts.y.tolist())) == [pin_xy(d, fp, xs, ys, orient, p) for p in flat]
    caps = input_caps(pdk.plain_liberty("typical", placed / "pdk_cache").read_text())
    limits = output_limits(pdk.plain_liberty("slow", placed / "pdk_cache").read_text())
    rc, dbu = RcModel.from_lef(read_lefs(pdk)), read_lefs(pdk).dbu
    for scale in (1.0, 0.2):
        cut = {k: v * scale for k, v in limits.items()}
        fast = design_rules.check(d, fp, xs, ys, orient, caps, cut, rc, dbu, {"clk"})
        ref = _reference_check(d, fp, xs, ys, orient, caps, cut, rc, dbu, {"clk"})
        assert fast.nets_checked == ref.nets_checked > 100
        assert fast.fanout_violations == ref.fanout_violations
        assert [(v["net"], v["driver"], v["limit_ff"], v["wire_um"]) for v in fast.cap_violations] == \
            [(v["net"], v["driver"], v["limit_ff"], v["wire_um"]) for v in ref.cap_violations]
        assert [v["load_ff"] for v in fast.cap_violations] == pytest.approx([v["load_ff"] for v in ref.cap_violations],
                                                                            abs=0.011)
        if scale < 1:
            assert len(fast.cap_violations) > 20
