"""verification.equiv on a design small enough to prove in seconds: a 2-bit register that accumulates by XOR
under an enable, with synchronous reset, as RTL and as a hand-mapped Nangate45 netlist (INV, XOR2, MUX2, AND2,
DFF per bit). The right netlist is proven (the register pairs by name, so induction closes the loop); the same
netlist with one XOR2 swapped for an OR2 is not; a synthesis folder without synth.json is refused by name."""
from __future__ import annotations

import json

import pytest

from verification.equiv import EquivError, check, dollar_registers, jobs_of, main, md_equiv

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


def _job(tmp_path, name: str, netlist: str, rtl_text: str = RTL, stubs: str = ""):
    rtl = tmp_path / f"rtl-{name}"
    rtl.mkdir()
    (rtl / "acc.v").write_text(rtl_text)
    (rtl / "filelist.f").write_text(f"{rtl.name}/acc.v\n")
    synth = tmp_path / name
    synth.mkdir()
    (synth / "acc.v").write_text(netlist)
    (synth / "macro_stubs.v").write_text(stubs)
    (synth / "synth.json").write_text(json.dumps({"top": "acc", "rtl": {"dir": str(rtl)}, "files": {"netlist": "acc.v"}}))
    [job] = jobs_of(synth)
    return job


def test_right_netlist_is_proven_wrong_one_is_not(tmp_path):
    right = check(_job(tmp_path, "right", _netlist("XOR2_X1")), tmp_path / "out-right", timeout_s=120)
    assert right["status"] == "proven" and right["equiv_unproven"] == 0 and right["equiv_cells"] > 0, right
    wrong = check(_job(tmp_path, "wrong", _netlist("OR2_X1")), tmp_path / "out-wrong", timeout_s=120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0 and not wrong["proven"], wrong
    md = "\n".join(md_equiv({"blocks": [right, wrong], "command": "python -m verification.equiv ..."}, "make equiv"))
    n = right["equiv_cells"]
    assert f"| acc | proven | {n:,} / {n:,} |" in md and f"| acc | unproven | {wrong['equiv_proven']:,} / " in md
    assert "**1 of 2 proven.**" in md
    assert "Not run: `make equiv`" in "\n".join(md_equiv(None, "make equiv"))


def test_blocks_mode_refuses_the_chip_and_unknown_blocks(tmp_path, capsys):
    assert main(["--blocks", "chip", "nonesuch", "--out", str(tmp_path)]) == 1
    assert "unknown or chip-level blocks ['chip', 'nonesuch']" in capsys.readouterr().err


def test_missing_synthesis_is_named(tmp_path):
    with pytest.raises(EquivError, match="synth.json not found: synthesise first"):
        jobs_of(tmp_path / "nothing")


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
    rec = check(_job(tmp_path, "merged", MERGED_NETLIST, MERGED_RTL), tmp_path / "out", timeout_s=120)
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
    right = check(_job(tmp_path, "rom", _rom_netlist("q"), ROM_RTL, ROM_STUB), tmp_path / "out", timeout_s=120)
    assert right["status"] == "proven" and right["equiv_unproven"] == 0, right
    wrong = check(_job(tmp_path, "rom-wrong", _rom_netlist("qn"), ROM_RTL, ROM_STUB), tmp_path / "out-w",
                  timeout_s=120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0, wrong


# A macro wider than the stub's defaults (DEPTH 16, WIDTH 8): its address is cut out at full width (the stubs are
# read deferred, each instance gets a module of its own parameters), so a wrong top address bit is caught; with the
# defaults it would be cut to its 4 low bits and the wrong netlist proven.
WIDE_ROM_RTL = """module acc(input clk, input [5:0] d, output o);
  reg [5:0] q;
  wire [15:0] r;
  msh_rom #(.DEPTH(64), .WIDTH(16)) rom (.raddr1(q), .rdata1(r), .raddr2(6'd0), .rdata2());
  always @(posedge clk) q <= d;
  assign o = r[12] ^ q[0];
endmodule
"""


def _wide_rom_netlist(top_bit: str) -> str:
    flops = "".join(f"  DFF_X1 f{i} (.D(d[{i}]), .CK(clk), .Q(q[{i}]), .QN());\n" for i in range(6))
    return f"""module acc(clk, d, o);
  input clk; input [5:0] d; output o;
  wire [5:0] q; wire [15:0] r;
{flops}  msh_rom #(.DEPTH(64), .WIDTH(16)) rom (.raddr1({{{top_bit}, q[4:0]}}), .rdata1(r), .raddr2(6'd0), .rdata2());
  XOR2_X1 x (.A(r[12]), .B(q[0]), .Z(o));
endmodule
"""


def test_a_wide_macro_is_cut_out_at_its_full_width(tmp_path):
    right = check(_job(tmp_path, "wide", _wide_rom_netlist("q[5]"), WIDE_ROM_RTL, ROM_STUB), tmp_path / "out",
                  timeout_s=120)
    assert right["status"] == "proven" and right["equiv_unproven"] == 0, right
    wrong = check(_job(tmp_path, "wide-wrong", _wide_rom_netlist("q[4]"), WIDE_ROM_RTL, ROM_STUB),
                  tmp_path / "out-w", timeout_s=120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0, wrong


# Amaranth names some registers with a `$` (`$signal`) and synthesis keeps the name on the register's Q net: such
# a register must stay paired (hidden like the other `$` names, this one, which holds its value under an enable and
# shows at the output only when `f` is set, would be free state: no induction over a bounded number of steps
# reaches its value).
# The MERGED netlist above puts an RTL `$` name on a QN pin instead: that one stays hidden.
DOLLAR_RTL = """module acc(input clk, input d, input e, input f, output o);
  reg \\$signal ; reg q;
  always @(posedge clk) if (e) \\$signal  <= d;
  always @(posedge clk) if (f) q <= q ^ \\$signal ;
  assign o = q;
endmodule
"""
DOLLAR_NETLIST = """module acc(clk, d, e, f, o);
  input clk; input d; input e; input f; output o;
  wire \\$signal ; wire x, n, m;
  MUX2_X1 ms (.A(\\$signal ), .B(d), .S(e), .Z(n));
  DFF_X1 s (.D(n), .CK(clk), .Q(\\$signal ), .QN());
  XOR2_X1 g (.A(o), .B(\\$signal ), .Z(x));
  MUX2_X1 mq (.A(o), .B(x), .S(f), .Z(m));
  DFF_X1 q (.D(m), .CK(clk), .Q(o), .QN());
endmodule
"""


def test_a_dollar_named_register_pairs(tmp_path, monkeypatch):
    assert dollar_registers(DOLLAR_NETLIST, DOLLAR_RTL) == {"acc": {"$signal": (1, 1)}}
    assert dollar_registers(MERGED_NETLIST, MERGED_RTL) == {}
    rec = check(_job(tmp_path, "dollar", DOLLAR_NETLIST, DOLLAR_RTL), tmp_path / "out", timeout_s=120)
    assert rec["status"] == "proven" and rec["equiv_unproven"] == 0, rec
    monkeypatch.setattr("verification.equiv.dollar_registers", lambda netlist, gold: {})
    hidden = check(_job(tmp_path, "dollar-hidden", DOLLAR_NETLIST, DOLLAR_RTL), tmp_path / "out-h", timeout_s=120,
                   pairs=False)
    assert hidden["status"] == "unproven" and hidden["equiv_unproven"] > 0, hidden


# A synthesis mapped in parts (flow.synth's part cache): the top part instantiates the other as a black box,
# which is cut out of its proof (the value it is given is checked) and proven as its own job.
CHILD_RTL = "module \\top.child (input clk, input d, output reg q);\n  always @(posedge clk) q <= ~d;\nendmodule\n"
CHILD_NETLIST = """module \\top.child (clk, d, q);
  input clk; input d; output q; wire n;
  INV_X1 i (.A(d), .ZN(n));
  DFF_X1 f (.D(n), .CK(clk), .Q(q), .QN());
endmodule
"""
TOP_RTL = """module top(input clk, input [1:0] d, output o);
  wire a;
  \\top.child c (.clk(clk), .d(d[0] & d[1]), .q(a));
  assign o = a ^ d[0];
endmodule
module \\top.child (clk, d, q);
  input clk; input d; output q;
endmodule
"""


def _top_netlist(gate: str) -> str:
    pins = "ZN" if gate != "XOR2_X1" else "Z"
    return f"""module top(clk, d, o);
  input clk; input [1:0] d; output o; wire n, a;
  {gate} g (.A1(d[0]), .A2(d[1]), .{pins}(n));
  \\top.child c (.clk(clk), .d(n), .q(a));
  XOR2_X1 x (.A(a), .B(d[0]), .Z(o));
endmodule
"""


def _parts(tmp_path, name: str, top_netlist: str):
    synth, cache = tmp_path / name, tmp_path / f"{name}_cache"
    for digest, rtl, netlist in (("t", TOP_RTL, top_netlist), ("c", CHILD_RTL, CHILD_NETLIST)):
        (cache / digest).mkdir(parents=True)
        (cache / digest / "source.v").write_text(rtl)
        (cache / digest / "netlist.v").write_text(netlist)
    synth.mkdir()
    (synth / "macro_stubs.v").write_text("")
    parts = [{"top": "top", "black_boxes": ["top.child"], "digest": "t", "size_estimate": 20},
             {"top": "top.child", "black_boxes": [], "digest": "c", "size_estimate": 5}]
    (synth / "synth.json").write_text(json.dumps({"top": "top", "parts": parts, "part_cache": str(cache)}))
    return synth


def test_parts_are_proven_one_by_one_with_the_others_cut_out(tmp_path, capsys):
    synth = _parts(tmp_path, "right", _top_netlist("AND2_X1"))
    assert [j.top for j in jobs_of(synth)] == ["top.child", "top"]
    assert [j.top for j in jobs_of(synth, ["child"])] == ["top.child"]
    with pytest.raises(EquivError, match=r"\['core.mac'\]: no such part .* its parts: \['top.child', 'top'\]"):
        jobs_of(synth, ["core.mac"])
    assert main(["--synth", str(synth), "--out", str(tmp_path / "out"), "--timeout", "120"]) == 0
    r = json.loads((tmp_path / "out" / "equiv.json").read_text())
    assert [(b["block"], b["status"]) for b in r["blocks"]] == [("top.child", "proven"), ("top", "proven")], r
    assert "proven: top.child, top; only simulated: none" in capsys.readouterr().out
    wrong = check(jobs_of(_parts(tmp_path, "wrong", _top_netlist("OR2_X1")), ["top"])[0], tmp_path / "w", 120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0, wrong


# Synthesis merges single bits of different registers that always load the same value (`a[1]` and `b[1]` both
# hold `c` under the same enable) and leaves the netlist's `b[1]` unconnected; the gold's registers are merged bit
# by bit the same way (MERGE_BITS) so `b[1]` has a partner. Without that step it is free state and not proven.
SHARED_RTL = """module acc(input clk, input e, input c, input [1:0] d, output [2:0] o, output p);
  reg [1:0] a; reg [1:0] b; reg r;
  always @(posedge clk) if (e) begin a <= {c, d[0]}; b <= {c, d[1]}; end
  always @(posedge clk) r <= b[1] & d[0];
  assign o = {b[0], a};
  assign p = r;
endmodule
"""
SHARED_NETLIST = """module acc(clk, e, c, d, o, p);
  input clk; input e; input c; input [1:0] d; output [2:0] o; output p;
  wire [1:0] a; wire [1:0] b; wire n0, n1, n2, n3;
  MUX2_X1 m0 (.A(a[0]), .B(d[0]), .S(e), .Z(n0));
  MUX2_X1 m1 (.A(a[1]), .B(c), .S(e), .Z(n1));
  MUX2_X1 m2 (.A(b[0]), .B(d[1]), .S(e), .Z(n2));
  AND2_X1 g (.A1(a[1]), .A2(d[0]), .ZN(n3));
  DFF_X1 f0 (.D(n0), .CK(clk), .Q(a[0]), .QN());
  DFF_X1 f1 (.D(n1), .CK(clk), .Q(a[1]), .QN());
  DFF_X1 f2 (.D(n2), .CK(clk), .Q(b[0]), .QN());
  DFF_X1 f3 (.D(n3), .CK(clk), .Q(p), .QN());
  assign o = {b[0], a};
endmodule
"""


def test_register_bits_merged_by_synthesis_pair(tmp_path, monkeypatch):
    rec = check(_job(tmp_path, "shared", SHARED_NETLIST, SHARED_RTL), tmp_path / "out", timeout_s=120)
    assert rec["status"] == "proven" and rec["equiv_unproven"] == 0, rec
    monkeypatch.setattr("verification.equiv.MERGE_BITS", ())
    whole = check(_job(tmp_path, "shared-whole", SHARED_NETLIST, SHARED_RTL), tmp_path / "out-w", timeout_s=120,
                  pairs=False)
    assert whole["status"] == "unproven" and whole["equiv_unproven"] > 0, whole


# Synthesis names a register after an RTL wire equal to it and narrows that wire (`$5` = {0, q, 0}: 4 bits in
# the RTL, 3 in the netlist): the public copy covers the bits both have, so the register still pairs.
NARROW_RTL = """module acc(input clk, input e, input [1:0] d, output o);
  reg [1:0] q; reg r; wire [3:0] \\$5 ;
  assign \\$5  = {1'b0, q, 1'b0};
  always @(posedge clk) if (e) q <= d;
  always @(posedge clk) r <= \\$5 [1] ^ \\$5 [2];
  assign o = r;
endmodule
"""
NARROW_NETLIST = """module acc(clk, e, d, o);
  input clk; input e; input [1:0] d; output o;
  wire [2:0] \\$5 ; wire n0, n1, x;
  MUX2_X1 m0 (.A(\\$5 [1]), .B(d[0]), .S(e), .Z(n0));
  MUX2_X1 m1 (.A(\\$5 [2]), .B(d[1]), .S(e), .Z(n1));
  DFF_X1 f0 (.D(n0), .CK(clk), .Q(\\$5 [1]), .QN());
  DFF_X1 f1 (.D(n1), .CK(clk), .Q(\\$5 [2]), .QN());
  XOR2_X1 g (.A(\\$5 [1]), .B(\\$5 [2]), .Z(x));
  DFF_X1 f2 (.D(x), .CK(clk), .Q(o), .QN());
endmodule
"""


def test_a_register_named_after_a_narrowed_wire_pairs(tmp_path):
    assert dollar_registers(NARROW_NETLIST, NARROW_RTL) == {"acc": {"$5": (4, 3)}}
    rec = check(_job(tmp_path, "narrow", NARROW_NETLIST, NARROW_RTL), tmp_path / "out", timeout_s=120)
    assert rec["status"] == "proven" and rec["equiv_unproven"] == 0, rec


# Synthesis keeps a register under the name of an RTL multiplexer that reads it (the memory engine's read address
# `rd_addr` in flip-flops named `$procmux_Y$20` = `grant_rd ? rd_addr : mem__req_addr`): here `a` is held in
# flip-flops named `$7` = `g ? a : q`. The name pairs a register with a multiplexer (false: unprovable) and leaves
# `a` without a partner; simulation (verification.equiv_pairs) drops the false copy and pairs `a` by its values.
RENAMED_RTL = """module acc(input clk, input g, input [1:0] d, output [1:0] o, output [1:0] p);
  reg [1:0] a; reg [1:0] q; wire [1:0] \\$7 ;
  assign \\$7  = g ? a : q;
  always @(posedge clk) begin a <= a ^ d; q <= \\$7 ; end
  assign o = q;
  assign p = \\$7 ;
endmodule
"""


def _renamed_netlist(select: str) -> str:
    return f"""module acc(clk, g, d, o, p);
  input clk; input g; input [1:0] d; output [1:0] o; output [1:0] p;
  wire [1:0] \\$7 ; wire [1:0] q; wire [1:0] n; wire [1:0] x;
  XOR2_X1 x0 (.A(\\$7 [0]), .B(d[0]), .Z(x[0]));
  XOR2_X1 x1 (.A(\\$7 [1]), .B(d[1]), .Z(x[1]));
  DFF_X1 f0 (.D(x[0]), .CK(clk), .Q(\\$7 [0]), .QN());
  DFF_X1 f1 (.D(x[1]), .CK(clk), .Q(\\$7 [1]), .QN());
  MUX2_X1 m0 (.A(q[0]), .B(\\$7 [0]), .S({select}), .Z(n[0]));
  MUX2_X1 m1 (.A(q[1]), .B(\\$7 [1]), .S(g), .Z(n[1]));
  DFF_X1 q0 (.D(n[0]), .CK(clk), .Q(q[0]), .QN());
  DFF_X1 q1 (.D(n[1]), .CK(clk), .Q(q[1]), .QN());
  assign o = q;
  assign p = n;
endmodule
"""


def test_a_register_kept_under_a_multiplexers_name_pairs_by_simulation(tmp_path):
    assert dollar_registers(_renamed_netlist("g"), RENAMED_RTL) == {"acc": {"$7": (2, 2)}}
    rec = check(_job(tmp_path, "renamed", _renamed_netlist("g"), RENAMED_RTL), tmp_path / "out", timeout_s=120)
    assert rec["status"] == "proven" and rec["equiv_unproven"] == 0, rec
    assert rec["false_copies"] == ["reg$7"] and rec["pairs_by_simulation"] == 2, rec
    by_name = check(_job(tmp_path, "renamed-names", _renamed_netlist("g"), RENAMED_RTL), tmp_path / "out-n",
                    timeout_s=120, pairs=False)
    assert by_name["status"] == "unproven" and by_name["equiv_unproven"] > 0, by_name
    # a wrong netlist (bit 0 selects on d[1]) is not proven with simulation's pairs either
    wrong = check(_job(tmp_path, "renamed-wrong", _renamed_netlist("d[1]"), RENAMED_RTL), tmp_path / "out-w",
                  timeout_s=120)
    assert wrong["status"] == "unproven" and wrong["equiv_unproven"] > 0, wrong
