"""The runner's models expose the top level's ports and parameters and ``runner.PUBLIC_VLT``'s signals to cocotb,
nothing else.

A design named like the chip (``msh_chip_top`` around ``msh_chip_top.core``) with one listed internal signal
(``pc``) and one not listed (``hidden``), and a signal of the top level that is no port (``top_only``): the
testbench reads the ports, the parameter and ``core.pc``, and finds neither ``hidden`` nor ``top_only``.
"""
from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

DESIGN = r"""
module msh_chip_top #(parameter integer W = 8, parameter integer AW = $clog2(W))
    (input clk, input rst_n, input [W-1:0] d, output [7:0] q);
  wire [7:0] top_only = d + 8'd1;
  \msh_chip_top.core  core (.clk(clk), .rst_n(rst_n), .d(top_only - 8'd1), .q(q));
endmodule

module \msh_chip_top.core (input clk, input rst_n, input [7:0] d, output [7:0] q);
  reg [6:0] pc;
  reg [7:0] hidden;
  always @(posedge clk) begin
    pc <= rst_n ? pc + 7'd1 : 7'd0;
    hidden <= d ^ {1'b0, pc};
  end
  assign q = hidden;
endmodule
"""


@cocotb.test()
async def top_and_listed_signals_only(dut):
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst_n.value, dut.d.value = 0, 0x5A
    await RisingEdge(dut.clk)
    dut.rst_n.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    await ReadOnly()
    assert int(dut.core.pc.value) == 3, dut.core.pc.value
    assert int(dut.q.value) == 0x5A ^ 2
    assert int(dut.W.value) == 8
    assert not hasattr(dut.core, "hidden"), "an unlisted internal signal is public"
    assert not hasattr(dut, "top_only"), "a top-level signal that is no port is public"


def test_a_model_exposes_only_the_top_level_and_the_listed_signals(tmp_path):
    from verification.runner import run_cocotb
    src = tmp_path / "public_probe.v"
    src.write_text(DESIGN)
    res = run_cocotb("runner_public", [src], "msh_chip_top", "verification.test_runner_public",
                     build_dir=tmp_path / "build")
    assert res.passed and res.n_tests == 1, res


def test_port_names_of_both_header_styles(tmp_path):
    from verification.runner import port_names
    src = tmp_path / "two.v"
    src.write_text(DESIGN + "module \\plain.top (a, \\b$0 , c); input a; input b$0; output c; endmodule\n")
    assert port_names([src], "msh_chip_top") == ["clk", "rst_n", "d", "q"]
    assert port_names([src], "plain.top") == ["a", "b$0", "c"]
    assert port_names([src], "absent") is None
