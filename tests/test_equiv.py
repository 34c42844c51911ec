"""verification.equiv on a design small enough to prove in seconds: a 2-bit register that accumulates by XOR
under an enable, with synchronous reset, as RTL and as a hand-mapped Nangate45 netlist (INV, XOR2, MUX2, AND2,
DFF per bit). The right netlist is proven (the register pairs by name, so induction closes the loop); the same
netlist with one XOR2 swapped for an OR2 is not; a synthesis folder without synth.json is refused by name."""
from __future__ import annotations

import json

import pytest

from verification.equiv import EquivError, check

RTL = """module acc(input clk, input rst, input [1:0] d, input e, output reg [1:0] q);
  always @(posedge clk) if (rst) q <= 2'b0; else if (e) q <= q ^ d;
endmodule
"""


def _bit(i: int, xor: str) -> str:
    return f"""  {xor} x{i} (.A{'1' if xor == 'OR2_X1' else ''}(q[{i}]), .{'A2' if xor == 'OR2_X1' else 'B'}(d[{i}]), .{'ZN' if xor == 'OR2_X1' else 'Z'}(x_{i}));
  MUX2_X1 m{i} (.A(q[{i}]), .B(x_{i}), .S(e), .Z(m_{i}));
  AND2_X1 a{i} (.A1(rst_n), .A2(m_{i}), .ZN(n_{i}));
  DFF_X1 f{i} (.D(n_{i}), .CK(clk), .Q(q[{i}]), .QN());
"""


def _netlist(bit1: str) -> str:
    return ("module acc(clk, rst, d, e, q);\n  input clk; input rst; input [1:0] d; input e; output [1:0] q;\n"
            "  wire rst_n, x_0, x_1, m_0, m_1, n_0, n_1;\n  INV_X1 i0 (.A(rst), .ZN(rst_n));\n"
            + _bit(0, "XOR2_X1") + _bit(1, bit1) + "endmodule\n")


def _synth(tmp_path, name: str, netlist: str):
    rtl = tmp_path / "rtl"
    rtl.mkdir(exist_ok=True)
    (rtl / "acc.v").write_text(RTL)
    (rtl / "filelist.f").write_text("rtl/acc.v\n")
    synth = tmp_path / name
    synth.mkdir()
    (synth / "acc.v").write_text(netlist)
    (synth / "macro_stubs.v").write_text("")
    (synth / "synth.json").write_text(json.dumps({"top": "acc", "rtl": {"dir": str(rtl)}, "files": {"netlist": "acc.v"}}))
    return synth


def test_right_netlist_is_proven_wrong_one_is_not(tmp_path):
    right = check(_synth(tmp_path, "right", _netlist("XOR2_X1")), tmp_path / "out-right", timeout_s=120)
    assert right["status"] == "proven" and right["equiv_unproven"] == 0 and right["equiv_cells"] > 0, right
    wrong = check(_synth(tmp_path, "wrong", _netlist("OR2_X1")), tmp_path / "out-wrong", timeout_s=120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0 and not wrong["proven"], wrong


def test_missing_synthesis_is_named(tmp_path):
    with pytest.raises(EquivError, match="synth.json not found: synthesise first"):
        check(tmp_path / "nothing", tmp_path / "out", timeout_s=10)
