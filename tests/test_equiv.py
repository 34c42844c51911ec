"""verification.equiv on a design small enough to prove in seconds: a 2-bit register that accumulates by XOR
under an enable, with synchronous reset, as RTL and as a hand-mapped Nangate45 netlist (INV, XOR2, MUX2, AND2,
DFF per bit). The right netlist is proven (the register pairs by name, so induction closes the loop); the same
netlist with one XOR2 swapped for an OR2 is not; a synthesis folder without synth.json is refused by name."""
from __future__ import annotations

import json

import pytest

from verification.equiv import EquivError, check, main, md_equiv

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


def _synth(tmp_path, name: str, netlist: str, rtl_text: str = RTL, stubs: str = ""):
    rtl = tmp_path / f"rtl-{name}"
    rtl.mkdir()
    (rtl / "acc.v").write_text(rtl_text)
    (rtl / "filelist.f").write_text(f"{rtl.name}/acc.v\n")
    synth = tmp_path / name
    synth.mkdir()
    (synth / "acc.v").write_text(netlist)
    (synth / "macro_stubs.v").write_text(stubs)
    (synth / "synth.json").write_text(json.dumps({"top": "acc", "rtl": {"dir": str(rtl)}, "files": {"netlist": "acc.v"}}))
    return synth


def test_right_netlist_is_proven_wrong_one_is_not(tmp_path):
    right = check(_synth(tmp_path, "right", _netlist("XOR2_X1")), tmp_path / "out-right", timeout_s=120)
    assert right["status"] == "proven" and right["equiv_unproven"] == 0 and right["equiv_cells"] > 0, right
    wrong = check(_synth(tmp_path, "wrong", _netlist("OR2_X1")), tmp_path / "out-wrong", timeout_s=120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0 and not wrong["proven"], wrong
    md = "\n".join(md_equiv({"blocks": [right, wrong], "command": "python -m verification.equiv ..."}, "make equiv"))
    n = right["equiv_cells"]
    assert f"| acc | proven | {n:,} / {n:,} |" in md and f"| acc | unproven | {wrong['equiv_proven']:,} / " in md
    assert "Not run: `make equiv`" in "\n".join(md_equiv(None, "make equiv"))


def test_blocks_mode_refuses_the_chip_and_unknown_blocks(tmp_path, capsys):
    assert main(["--blocks", "chip", "nonesuch", "--out", str(tmp_path)]) == 1
    assert "unknown or chip-level blocks ['chip', 'nonesuch']" in capsys.readouterr().err


def test_missing_synthesis_is_named(tmp_path):
    with pytest.raises(EquivError, match="synth.json not found: synthesise first"):
        check(tmp_path / "nothing", tmp_path / "out", timeout_s=10)


# Synthesis keeps an RTL intermediate's name ($-named, as Amaranth writes them) on a different signal, and merges
# two registers that always load the same value into one: the proof must not pair the first, and must see the
# second (the gold RTL goes through Yosys's opt like the netlist did).
MERGED_RTL = """module acc(input clk, input [1:0] d, output o, output p, output n);
  reg q1, q2, r;
  wire \\$1 = d[0] & d[1];
  always @(posedge clk) begin q1 <= \\$1 ; q2 <= \\$1 ; r <= q2; end
  assign o = q1;
  assign p = r;
  assign n = ~q1;
endmodule
"""
MERGED_NETLIST = """module acc(clk, d, o, p, n);
  input clk; input [1:0] d; output o; output p; output n;
  wire \\$1 ; wire a;
  AND2_X1 g (.A1(d[0]), .A2(d[1]), .ZN(a));
  DFF_X1 f (.D(a), .CK(clk), .Q(o), .QN(\\$1 ));
  DFF_X1 h (.D(o), .CK(clk), .Q(p), .QN());
  BUF_X1 b (.A(\\$1 ), .Z(n));
endmodule
"""


def test_merged_registers_and_reused_internal_names_still_prove(tmp_path):
    rec = check(_synth(tmp_path, "merged", MERGED_NETLIST, MERGED_RTL), tmp_path / "out", timeout_s=120)
    assert rec["status"] == "proven" and rec["equiv_unproven"] == 0, rec


# A ROM black box (flow.synth's stub) read at q: the proof shares its read data between the two designs and
# checks the address each sends it; a netlist that reads the ROM at ~q instead is not proven.
ROM_STUB = """(* blackbox *)
module msh_rom #(parameter DEPTH = 16, parameter WIDTH = 8, parameter ADDRW = $clog2(DEPTH), parameter INIT_FILE = "") (
    input [ADDRW-1:0] raddr1, output [WIDTH-1:0] rdata1, input [ADDRW-1:0] raddr2, output [WIDTH-1:0] rdata2);
endmodule
"""
ROM_RTL = """module acc(input clk, input d, output o);
  reg q;
  wire [7:0] r;
  msh_rom #(.DEPTH(2), .WIDTH(8), .ADDRW(1)) rom (.raddr1(q), .rdata1(r), .raddr2(1'b0), .rdata2());
  always @(posedge clk) q <= d;
  assign o = r[3] ^ q;
endmodule
"""


def _rom_netlist(addr: str) -> str:
    return f"""module acc(clk, d, o);
  input clk; input d; output o;
  wire q, qn, zero; wire [7:0] r;
  DFF_X1 f (.D(d), .CK(clk), .Q(q), .QN(qn));
  LOGIC0_X1 t (.Z(zero));
  msh_rom #(.DEPTH(2), .WIDTH(8), .ADDRW(1)) rom (.raddr1({addr}), .rdata1(r), .raddr2(zero), .rdata2());
  XOR2_X1 x (.A(r[3]), .B(q), .Z(o));
endmodule
"""


def test_a_rom_black_box_is_cut_out_and_its_address_checked(tmp_path):
    right = check(_synth(tmp_path, "rom", _rom_netlist("q"), ROM_RTL, ROM_STUB), tmp_path / "out", timeout_s=120)
    assert right["status"] == "proven" and right["equiv_unproven"] == 0, right
    wrong = check(_synth(tmp_path, "rom-wrong", _rom_netlist("qn"), ROM_RTL, ROM_STUB), tmp_path / "out-w",
                  timeout_s=120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0, wrong
