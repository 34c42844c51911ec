"""The runner's models expose the top level and ``runner.PUBLIC_VLT``'s signals to cocotb, nothing else.

A design named like the chip (``msh_chip_top`` around ``msh_chip_top.core``) with one listed internal signal
(``pc``) and one not listed (``hidden``): the testbench reads the ports and ``core.pc``, and finds no ``hidden``.
"""
from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

DESIGN = r"""
module msh_chip_top(input clk, input rst_n, input [7:0] d, output [7:0] q);
  \msh_chip_top.core  core (.clk(clk), .rst_n(rst_n), .d(d), .q(q));
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
    assert not hasattr(dut.core, "hidden"), "an unlisted internal signal is public"


def test_a_model_exposes_only_the_top_level_and_the_listed_signals(tmp_path):
    from verification.runner import run_cocotb
    src = tmp_path / "public_probe.v"
    src.write_text(DESIGN)
    res = run_cocotb("runner_public", [src], "msh_chip_top", "verification.test_runner_public",
                     build_dir=tmp_path / "build")
    assert res.passed and res.n_tests == 1, res
