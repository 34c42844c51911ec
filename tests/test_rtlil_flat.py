"""flow.rtlil_flat flattens a gate netlist exactly as Yosys' flatten + write_json do: the same cells, names,
hdlname attributes, net names and bit numbers (placement orders nets by bit, so equal numbers mean an equal
placement)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from flow.place import flatten
from flow.place_out import read_lefs
from flow.rtlil_flat import RtlilError, flatten_rtlil, read_rtlil
from flow.synth import synthesize
from pdk_config import find_pdk

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]

# Two levels; the child feeds an input straight through (a module-level connect), ties an output to a constant,
# and its cells take a slice, a concatenation with a repeated bit and a constant. One child port is unconnected.
HAND_RTLIL = r"""
module \child
  wire width 4 input 1 \a
  wire input 2 \en
  wire output 3 \thru
  wire output 4 \zero
  wire width 2 output 5 \q
  wire input 6 \spare
  wire \n1
  cell \leaf2 \g0
    connect \a \a [3]
    connect \b \en
    connect \y \n1
  end
  cell \leaf2 \g1
    connect \a { \n1 }
    connect \b \a [1]
    connect \y \q [0]
  end
  cell \leafcat \g2
    connect \i { \a [3:2] \n1 \n1 1'0 }
    connect \o \q [1]
  end
  connect \thru \en
  connect \zero 1'0
end
module \top
  wire width 4 input 1 \x
  wire input 2 \go
  wire width 2 output 3 \out
  wire output 4 \t
  wire output 5 \z
  wire \w
  cell \child \u0
    connect \a \x
    connect \en \go
    connect \thru \t
    connect \zero \z
    connect \q \out
  end
  cell \leaf2 \g
    connect \a \t
    connect \b \z
    connect \y \w
  end
end
"""
LEAF_VERILOG = ("module leaf2 (input a, input b, output y); endmodule\n"
                "module leafcat (input [4:0] i, output o); endmodule\n")
DIRECTIONS = {"leaf2": {"a": "input", "b": "input", "y": "output"}, "leafcat": {"i": "input", "o": "output"}}


def _yosys_flat(il: Path, top: str, lib_verilog: str, tmp_path: Path, liberty: Path | None = None) -> dict:
    """What flow.place did before: Yosys reads the netlist with black-box leaves, flattens it, writes JSON."""
    from pyosys import libyosys as ys
    lib = tmp_path / "lib.v"
    lib.write_text(lib_verilog)
    d = ys.Design()
    if liberty is not None:
        ys.run_pass(f"read_liberty -lib {liberty}", d)
    ys.run_pass(f"read_verilog -lib {lib}", d)
    ys.run_pass(f"read_rtlil {il}", d)
    ys.run_pass(f"hierarchy -top {top}", d)
    ys.run_pass("flatten", d)
    ys.run_pass(f"write_json {tmp_path / 'flat.json'}", d)
    return json.loads((tmp_path / "flat.json").read_text())["modules"][top]


def _used(m: dict) -> dict:
    """What placement reads of a flat module."""
    return {"ports": m["ports"],
            "cells": {k: (c["type"], c["connections"], c["port_directions"], c["attributes"].get("hdlname"))
                      for k, c in m["cells"].items() if c["type"] != "$scopeinfo"},
            "netnames": {k: (n["bits"], n["attributes"].get("hdlname"), n.get("hide_name", 0))
                         for k, n in m["netnames"].items()}}


def test_hand_written_netlist_equals_yosys(tmp_path):
    il = tmp_path / "hand.il"
    il.write_text(HAND_RTLIL)
    mine = flatten_rtlil(il, LEAF_VERILOG, "top", DIRECTIONS.__getitem__)
    theirs = _yosys_flat(il, "top", LEAF_VERILOG, tmp_path)
    assert _used(mine) == _used(theirs)
    assert list(mine["cells"]) == ["g", "u0.g0", "u0.g1", "u0.g2"]
    # the feed-through joins top's t with the child's en and go; the constant reaches z and g's b pin
    cells, ports = mine["cells"], mine["ports"]
    assert ports["t"]["bits"] == ports["go"]["bits"] == cells["u0.g0"]["connections"]["b"]
    assert ports["z"]["bits"] == ["0"] and cells["g"]["connections"]["b"] == ["0"]
    n1 = cells["u0.g0"]["connections"]["y"][0]
    x = ports["x"]["bits"]
    assert cells["u0.g2"]["connections"]["i"] == ["0", n1, n1, x[2], x[3]]     # least significant first
    assert mine["netnames"]["u0.spare"]["bits"][0] not in {b for p in ports.values() for b in p["bits"]}


def test_synthesised_design_equals_yosys(tmp_path):
    """regions_small through flow.synth (engines as submodules, a macro) and flow.place's reader (pin directions
    from the LEF): identical to Yosys' flat JSON (directions from the liberty)."""
    s = synthesize(DATA / "regions_small", tmp_path / "synth")
    synth = tmp_path / "synth"
    il, macros = synth / s["files"]["sta_rtlil"], synth / s["files"]["macro_modules"]
    pdk = find_pdk()
    theirs = _yosys_flat(il, s["top"], macros.read_text(), tmp_path,
                         pdk.plain_liberty("typical", REPO / "build" / "pdk_cache"))
    mine = flatten(il, macros, s["top"], read_lefs(pdk))
    assert len(mine["cells"]) > 1000
    assert any(c["type"].startswith("msh_sram_") for c in mine["cells"].values())
    assert _used(mine) == _used(theirs)
    assert list(mine["cells"]) == [k for k, c in theirs["cells"].items() if c["type"] != "$scopeinfo"]


@pytest.mark.parametrize("text, message", [
    ("module \\m\n  wire width 4 offset 2 \\w\nend\n", "wire option `offset`"),
    ("module \\m\n  process $p\n  end\nend\n", "`process` is not part of a gate netlist"),
    ("module \\m\n  cell \\leaf2 \\g\n    connect \\a \\nowire\n  end\nend\n", "does not declare"),
])
def test_what_a_gate_netlist_does_not_hold_is_refused(tmp_path, text, message):
    il = tmp_path / "bad.il"
    il.write_text(text)
    with pytest.raises(RtlilError, match=message):
        flatten_rtlil(il, LEAF_VERILOG, "m", DIRECTIONS.__getitem__)


def test_line_numbers_in_errors(tmp_path):
    il = tmp_path / "bad.il"
    il.write_text("module \\m\n  wire \\a\n  wire upto \\b\nend\n")
    with pytest.raises(RtlilError, match=r"bad\.il:3:"):
        read_rtlil(il)
