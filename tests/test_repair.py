"""flow/repair.py: clustered buffer trees for high-fanout nets; the logic stays the same (Yosys equivalence)."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import flow.repair as repair_mod
from flow.parasitics import steiner_factor
from flow.place import place
from flow.repair import RepairError, _Node, _split, input_caps, repair, verify
from flow.synth import liberty_areas, synthesize
from pdk_config import find_pdk

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def liberty():
    return find_pdk().plain_liberty("typical", REPO / "build" / "pdk_cache")


def test_split_respects_count_and_span():
    rng = random.Random(3)
    print("seed 3")
    nodes = [_Node(rng.uniform(0, 400), rng.uniform(0, 400), 1.0) for _ in range(1000)]
    groups = _split(nodes, 12, 60.0)
    assert sorted(id(n) for g in groups for n in g) == sorted(id(n) for n in nodes)
    for g in groups:
        xs, ys = [n.x for n in g], [n.y for n in g]
        assert len(g) <= 12 and (len(g) == 1 or max(xs) - min(xs) + max(ys) - min(ys) <= 60.0)
    assert len(groups) < 1000 / 4            # clusters are filled, not split down to single sinks


def chain_module(n_sinks: int) -> dict:
    """A flip-flop whose Q reaches ``n_sinks`` NAND inputs through a chain of BUF_X1 (ABC's shape), plus a
    clock port and an output port driven through a buffer."""
    cells, nn = {}, {}
    cells["ff"] = {"type": "DFF_X1", "port_directions": {"CK": "input", "D": "input", "Q": "output"},
                   "connections": {"CK": [2], "D": [3], "Q": [10]}}
    bit, nxt = 10, 11
    for k in range(n_sinks):
        if k % 15 == 14:
            cells[f"b{k}"] = {"type": "BUF_X1", "port_directions": {"A": "input", "Z": "output"},
                              "connections": {"A": [bit], "Z": [nxt]}}
            bit, nxt = nxt, nxt + 1
        cells[f"g{k}"] = {"type": "NAND2_X1", "port_directions": {"A1": "input", "A2": "input", "ZN": "output"},
                          "connections": {"A1": [bit], "A2": [3000 + k], "ZN": [1000 + k]}}
    cells["obuf"] = {"type": "BUF_X2", "port_directions": {"A": "input", "Z": "output"},
                     "connections": {"A": [bit], "Z": [4]}}
    ports = {"clk": {"direction": "input", "bits": [2]}, "d": {"direction": "input", "bits": [3]},
             "q": {"direction": "output", "bits": [4]}}
    return {"ports": ports, "cells": cells, "netnames": nn}


def test_repair_rebuilds_a_chain_as_a_clustered_tree(liberty):
    module = chain_module(300)
    rng = random.Random(5)
    print("seed 5")
    xy = {k: (rng.uniform(0, 300), rng.uniform(0, 300)) for k in module["cells"]}
    caps = input_caps(liberty.read_text())
    assert caps[("BUF_X16", "A")] > caps[("BUF_X1", "A")] > 0.5
    res = repair(module, xy, {2: (0, 0), 3: (0, 0), 4: (300, 300)}, caps, liberty_areas(liberty), 0.2,
                 steiner_factor, {2})
    verify(module, res)
    assert res.nets_repaired == 1 and res.largest_fanout == 301            # 300 NANDs + the output buffer
    assert res.buffers_removed == 300 // 15 and not any(k.startswith("b") for k in module["cells"])
    fanout = {}
    for c in module["cells"].values():
        for pin, bits in c["connections"].items():
            if c["port_directions"][pin] == "input":
                fanout[bits[0]] = fanout.get(bits[0], 0) + 1
    assert max(n for b, n in fanout.items() if b not in (2, 3)) <= repair_mod.MAX_FANOUT
    assert fanout[10] == 1                              # the flip-flop drives one (large) buffer
    assert module["cells"]["obuf"]["connections"]["Z"] == [4]               # the port keeps its driver
    depth = 0
    bit = module["cells"]["g0"]["connections"]["A1"][0]
    drivers = {c["connections"]["Z"][0]: c for c in module["cells"].values() if "Z" in c["connections"]}
    while bit != 10:
        bit, depth = drivers[bit]["connections"]["A"][0], depth + 1
    assert 2 <= depth <= 4, depth                       # log-depth, not a chain of 20


def test_verify_catches_a_wrong_connection(liberty):
    module = chain_module(40)
    xy = {k: (float(i), 0.0) for i, k in enumerate(module["cells"])}
    res = repair(module, xy, {2: (0, 0), 3: (0, 0), 4: (0, 0)}, input_caps(liberty.read_text()),
                 liberty_areas(liberty), 0.2, steiner_factor, {2})
    module["cells"]["g7"]["connections"]["A1"] = [3]
    with pytest.raises(RepairError, match="g7.A1"):
        verify(module, res)


def test_sink_without_a_position_stays_on_the_driver(liberty):
    """An instance outside the placement (an msh_rom, mapped to logic elsewhere) on a rebuilt net."""
    module = chain_module(60)
    module["cells"]["rom"] = {"type": "msh_rom_16x8", "port_directions": {"raddr1": "input", "rdata1": "output"},
                              "connections": {"raddr1": [10], "rdata1": [5000]}}
    xy = {k: (float(i), 0.0) for i, k in enumerate(module["cells"]) if k != "rom"}
    res = repair(module, xy, {2: (0, 0), 3: (0, 0), 4: (0, 0)}, input_caps(liberty.read_text()),
                 liberty_areas(liberty), 0.2, steiner_factor, {2})
    verify(module, res)
    assert res.nets_repaired == 1 and module["cells"]["rom"]["connections"]["raddr1"] == [10]


def test_clock_net_is_left_alone(liberty):
    module = chain_module(5)
    for k in range(40):
        module["cells"][f"f{k}"] = {"type": "DFF_X1", "port_directions": {"CK": "input", "D": "input", "Q": "output"},
                                    "connections": {"CK": [2], "D": [3], "Q": [2000 + k]}}
    xy = {k: (float(i), 0.0) for i, k in enumerate(module["cells"])}
    res = repair(module, xy, {2: (0, 0), 3: (0, 0), 4: (0, 0)}, input_caps(liberty.read_text()),
                 liberty_areas(liberty), 0.2, steiner_factor, {2})
    assert all(c["connections"]["CK"] == [2] for k, c in module["cells"].items() if k.startswith("f"))
    assert res.nets_repaired == 1          # the data input d (41 flip-flops) is rebuilt, the clock is not


# ---------------------------------------------------------------------------------------------- end to end

MACRO_MODELS = """\
module msh_rom_64x8 (input [5:0] raddr1, output [7:0] rdata1, input [5:0] raddr2, output [7:0] rdata2);
  assign rdata1 = {raddr1, raddr1} ^ {8{^raddr2}}; assign rdata2 = {raddr2, raddr2};
endmodule
module msh_sram_64x32 (input clk, input we, input [5:0] waddr, input [31:0] wdata, input [3:0] wstrb, input re,
                       input [5:0] raddr, output [31:0] rdata);
  assign rdata = wdata ^ {raddr, waddr, wstrb, we, re, raddr, waddr, wstrb};
endmodule
"""

# Gold: synthesis' hierarchical STA netlist; gate: the placed, repaired flat netlist. The macros get the same
# stand-in logic on both sides, the liberty gives every cell its function, and `flatten -separator /` names
# the gold's objects as the flat netlist does, so that equiv_make pairs the flip-flops.
EQUIV = """\
import sys
from pyosys import libyosys as ys
lib, gold, gate, top, macros = sys.argv[1:6]
d = ys.Design()
for name, f in (("gold", gold), ("gate", gate)):
    for cmd in (f"read_liberty -ignore_miss_func {lib}", f"read_verilog {f}", f"read_verilog -overwrite {macros}",
                f"hierarchy -top {top}", "flatten -separator /", "opt_clean", f"rename {top} {name}",
                f"design -stash {name}"):
        ys.run_pass(cmd, d)
for cmd in ("design -copy-from gold -as gold gold", "design -copy-from gate -as gate gate",
            "equiv_make gold gate equiv", "hierarchy -top equiv", "equiv_simple -seq 2", "equiv_induct",
            "equiv_status -assert"):
    ys.run_pass(cmd, d)
"""


def equivalent(tmp: Path, liberty: Path, gold: Path, gate: Path, top: str) -> tuple[bool, str]:
    (tmp / "equiv.py").write_text(EQUIV)
    (tmp / "macros.v").write_text(MACRO_MODELS)
    p = subprocess.run([sys.executable, str(tmp / "equiv.py"), str(liberty), str(gold), str(gate), top,
                        str(tmp / "macros.v")], capture_output=True, text=True, cwd=REPO)
    return p.returncode == 0 and "Equivalence successfully proven" in p.stdout, p.stdout[-3000:]


@pytest.fixture(scope="module")
def placed_small_fanout(tmp_path_factory):
    """mac_sram placed with a fanout limit of 4, so that most of its nets are rebuilt."""
    base = tmp_path_factory.mktemp("repair")
    synthesize(DATA / "mac_sram", base / "synth")
    mp = pytest.MonkeyPatch()
    mp.setattr(repair_mod, "MAX_FANOUT", 4)
    try:
        r = place(base / "synth", base / "place", effort=1, picture=False, corners=["typical"])
    finally:
        mp.undo()
    return base, r


def test_repaired_netlist_is_equivalent_to_synthesis(placed_small_fanout, liberty, tmp_path):
    base, r = placed_small_fanout
    rep = r["repair"]
    assert rep["enabled"] and rep["nets_repaired"] > 50 and rep["buffers_added"] > rep["buffers_removed"] > 0
    assert rep["cells_after"] == rep["cells_before"] - rep["buffers_removed"] + rep["buffers_added"] == r["cells_placed"]
    gate = base / "place" / r["files"]["netlist"]
    ok, log = equivalent(tmp_path, liberty, base / "synth" / "mac_sram.sta.v", gate, "mac_sram")
    assert ok, log
    # the check has teeth: one inserted buffer turned into an inverter is found
    text = gate.read_text()
    assert "BUF_X2 repair_buf_" in text
    bad = tmp_path / "bad.v"
    i = text.index("BUF_X2 repair_buf_")
    bad.write_text(text[:i] + "INV_X2 " + text[i + 7:].replace(".Z(", ".ZN(", 1))
    ok, _ = equivalent(tmp_path, liberty, base / "synth" / "mac_sram.sta.v", bad, "mac_sram")
    assert not ok


def test_sta_times_the_repaired_netlist(placed_small_fanout):
    base, r = placed_small_fanout
    sta = json.loads((base / "place" / "sta" / "sta.json").read_text())
    assert Path(sta["netlist"]).name == r["files"]["netlist"]
    log = (base / "place" / "sta" / "typical.log").read_text()
    assert "@@PARASITICS" in log and "Warning" not in log, log[:2000]
    assert r["sta"]["typical"]["met"]


def test_kept_buffers_stay_and_end_the_rebuilt_net(liberty):
    """A buffer in ``keep`` (sign-off's hold and isolation buffers) is not removed: the rebuilt net ends at
    it, and the net it drives (its sinks, the chain's next buffer) is its own, not rebuilt with the forced one."""
    module = chain_module(60)
    rng = random.Random(6)
    print("seed 6")
    xy = {k: (rng.uniform(0, 300), rng.uniform(0, 300)) for k in module["cells"]}
    behind = [k for k, c in module["cells"].items() if c["connections"].get("A1") == [module["cells"]["b14"]["connections"]["Z"][0]]]
    res = repair(module, xy, {2: (0, 0), 3: (0, 0), 4: (300, 300)}, input_caps(liberty.read_text()),
                 liberty_areas(liberty), 0.2, steiner_factor, {2}, force=frozenset({10}), only_forced=True,
                 keep=frozenset({"b14"}))
    verify(module, res)
    assert res.nets_repaired == 1 and res.buffers_removed == 0 and res.largest_fanout == 15   # g0..g13, b14
    assert "b14" in module["cells"] and "b29" in module["cells"]
    assert behind and all(module["cells"][k]["connections"]["A1"] == module["cells"]["b14"]["connections"]["Z"]
                          for k in behind)


def test_a_weak_driver_gets_a_buffer_at_its_side(liberty):
    """A NOR4_X1 (max capacitance 10.5 fF) with one sink 600 um away: the repeaters every 250 um leave it 250 um
    of wire (about 15 fF) and a buffer, too much for it; one more buffer at the driver takes that load. With
    no limit, or a strong driver, the chain starts 250 um out as before."""
    def module():
        cells = {"nor": {"type": "NOR4_X1", "port_directions": {"A1": "input", "A2": "input", "A3": "input",
                                                                "A4": "input", "ZN": "output"},
                         "connections": {"A1": [3], "A2": [3], "A3": [3], "A4": [3], "ZN": [10]}},
                 "g": {"type": "INV_X1", "port_directions": {"A": "input", "ZN": "output"},
                       "connections": {"A": [10], "ZN": [11]}}}
        return {"ports": {"d": {"direction": "input", "bits": [3]}, "q": {"direction": "output", "bits": [11]}},
                "cells": cells, "netnames": {}}
    xy = {"nor": (0.0, 0.0), "g": (600.0, 0.0)}
    caps = input_caps(liberty.read_text())
    for limit, first_x in ((10.46, 0.0), (None, 250.0)):
        m = module()
        res = repair(m, xy, {3: (0, 0), 11: (600, 0)}, caps, liberty_areas(liberty), 0.058, steiner_factor, set(),
                     force=frozenset({10}), spacing_um=250.0, only_forced=True,
                     drive_limit=lambda key, bit: limit if key == "nor" else None)
        verify(m, res)
        first = [k for k, c in m["cells"].items() if c["connections"].get("A") == [10]]
        assert len(first) == 1 and res.new_cells[first[0]] == (first_x, 0.0), (limit, res.new_cells)


def test_a_macro_pin_is_reached_at_its_own_tile(liberty):
    """An msh_sram's bits lie on different fakeram45 tiles: a rebuilt net to bit 40 of its w_data ends at
    that bit's tile (its position under (cell key, pin, bit)), not at the cell's first tile. On the nano
    chip the first tile stood for every bit, and the repeaters led 1.5 mm away from a tile on the next
    macro row: 852 max-capacitance violations at sign-off, wires of about 1,560 um."""
    cells = {"ff": {"type": "DFF_X1", "port_directions": {"CK": "input", "D": "input", "Q": "output"},
                    "connections": {"CK": [2], "D": [3], "Q": [10]}},
             "ram": {"type": "msh_sram_32x64", "port_directions": {"w_data": "input"},
                     "connections": {"w_data": [3] * 40 + [10] + [3] * 23}}}
    module = {"ports": {"clk": {"direction": "input", "bits": [2]}, "d": {"direction": "input", "bits": [3]}},
              "cells": cells, "netnames": {}}
    xy = {"ff": (600.0, 0.0), "ram": (1200.0, 0.0), ("ram", "w_data", 40): (0.0, 0.0)}
    res = repair(module, xy, {2: (0, 0), 3: (0, 0)}, input_caps(liberty.read_text()), liberty_areas(liberty),
                 0.058, steiner_factor, {2}, force=frozenset({10}), spacing_um=250.0, only_forced=True)
    verify(module, res)
    last = [k for k, c in module["cells"].items() if c["connections"].get("Z") == [cells["ram"]["connections"]["w_data"][40]]]
    assert len(last) == 1 and last[0] in res.new_cells, res.new_cells
    x, y = res.new_cells[last[0]]
    assert abs(x - 0.0) + abs(y) < 250.0, (x, y)        # the chain runs towards x = 0, where the bit's tile is
    assert all(cx <= 600.0 for cx, _ in res.new_cells.values())


def test_an_output_port_far_from_its_driver_gets_repeaters(liberty):
    """A NAND2_X1 drives an output port 900 um away and one gate beside it (the nano sign-off's rsp_valid: an
    X1 gate on 900 um, 60 fF of a 16 fF limit). Forced by the electrical repair, the gate's output moves to
    a new bit, and a chain of buffers at most 250 um apart carries it to a buffer that drives the port's bit."""
    cells = {"g": {"type": "NAND2_X1", "port_directions": {"A1": "input", "A2": "input", "ZN": "output"},
                   "connections": {"A1": [3], "A2": [3], "ZN": [10]}},
             "s": {"type": "INV_X1", "port_directions": {"A": "input", "ZN": "output"},
                   "connections": {"A": [10], "ZN": [11]}}}
    m = {"ports": {"d": {"direction": "input", "bits": [3]}, "q": {"direction": "output", "bits": [10]},
                   "r": {"direction": "output", "bits": [11]}}, "cells": cells, "netnames": {}}
    xy = {"g": (0.0, 0.0), "s": (5.0, 0.0)}
    res = repair(m, xy, {3: (0, 0), 10: (900, 0), 11: (5, 0)}, input_caps(liberty.read_text()),
                 liberty_areas(liberty), 0.058, steiner_factor, set(), force=frozenset({10}), spacing_um=250.0,
                 only_forced=True)
    verify(m, res)
    drive = m["cells"]["g"]["connections"]["ZN"][0]
    assert drive != 10 and res.moved == {10: drive}
    port_buf = [k for k, c in m["cells"].items() if c["connections"].get("Z") == [10]]
    assert len(port_buf) == 1 and res.new_cells[port_buf[0]][0] > 600          # near the port
    xs = sorted(x for x, _ in res.new_cells.values())
    assert len(xs) >= 3 and all(b - a <= 250.0 + 1e-9 for a, b in zip([0.0] + xs, xs + [900.0]))
    first = [res.new_cells[k] for k, c in m["cells"].items() if c["connections"].get("A") == [drive]]
    assert first and all(x <= 250.0 for x, _ in first)          # the gate drives nothing far (verify: s reaches it)


def test_a_macro_output_starts_its_rebuilt_net_with_a_buffer_at_its_pin(liberty):
    """A macro's output bit (r_data 5, on a tile at x = 0) drives a sink 600 um away. Its rebuilt net starts
    with one buffer at that pin, not at the cell's first tile (x = 900) and not 250 um out: on the nano chip
    the first repeaters of a weight-store pin inside the macro field were moved to the field's edges, and the
    fakeram drove 1,701 um of wire (104 fF over its 100 fF). Without ``buffer_first`` the chain starts 250 um
    out, as for any driver within its limit."""
    def module():
        cells = {"ram": {"type": "msh_sram_32x64", "port_directions": {"r_data": "output"},
                         "connections": {"r_data": [20 + j for j in range(5)] + [10] + [30 + j for j in range(58)]}},
                 "g": {"type": "INV_X1", "port_directions": {"A": "input", "ZN": "output"},
                       "connections": {"A": [10], "ZN": [11]}}}
        return {"ports": {"q": {"direction": "output", "bits": [11]}}, "cells": cells, "netnames": {}}
    xy = {"ram": (900.0, 0.0), ("ram", "r_data", 5): (0.0, 0.0), "g": (600.0, 0.0)}
    for first, first_x in ((frozenset({"ram"}), 0.0), (frozenset(), 250.0)):
        m = module()
        res = repair(m, xy, {11: (600, 0)}, input_caps(liberty.read_text()), liberty_areas(liberty), 0.058,
                     steiner_factor, set(), force=frozenset({10}), spacing_um=250.0, only_forced=True,
                     drive_limit=lambda key, bit: None, buffer_first=first)
        verify(m, res)
        head = [k for k, c in m["cells"].items() if c["connections"].get("A") == [10]]
        assert len(head) == 1 and res.new_cells[head[0]] == (first_x, 0.0), (first, res.new_cells)
