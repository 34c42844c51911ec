"""What the SPEC fixes for synthesis (macros, storage price, budgets, corner) and the error every part raises."""
from __future__ import annotations

import sys

MACROS = ("msh_sram", "msh_rom")
# Price of on-chip storage (SPEC_NANO_KPU.md section 5): bits / 2^20 x 1e6 um^2.
UM2_PER_MIBIT = 1_000_000.0
AREA_BUDGET_UM2 = 4_000_000.0         # SPEC section 9: 4.0 mm^2, logic + macros
SRAM_BUDGET_BITS = 4 * 2**20 * 8      # SPEC section 9: 4 MiB of msh_sram + msh_rom
CORNER = "typical"                    # SPEC section 9: area is measured at the typical corner

# Port lists of SPEC section 5; only directions and widths matter to synthesis.
MACRO_STUBS = """\
(* blackbox *)
module msh_sram #(parameter DEPTH = 16, parameter WIDTH = 8, parameter ADDRW = $clog2(DEPTH)) (
    input clk, input we, input [ADDRW-1:0] waddr, input [WIDTH-1:0] wdata, input [WIDTH/8-1:0] wstrb,
    input re, input [ADDRW-1:0] raddr, output [WIDTH-1:0] rdata);
endmodule

(* blackbox *)
module msh_rom #(parameter DEPTH = 16, parameter WIDTH = 8, parameter ADDRW = $clog2(DEPTH),
                 parameter INIT_FILE = "") (
    input [ADDRW-1:0] raddr1, output [WIDTH-1:0] rdata1, input [ADDRW-1:0] raddr2, output [WIDTH-1:0] rdata2);
endmodule
"""


class SynthError(RuntimeError):
    """Synthesis could not run or its result breaks a rule; the message says which and where."""


def progress(msg: str) -> None:
    print(f"[synth] {msg}", file=sys.stderr, flush=True)
