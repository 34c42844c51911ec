// Behavioural simulation model of the msh_sram storage macro (SPEC_NANO_KPU.md §5).
// One write port, one read port, one clock. Per-byte write enables. Synchronous read: raddr is
// sampled on the clock edge when re is high and rdata holds that word from the next cycle on
// (it keeps its value while re is low). A read and a write of the same address in one cycle
// return the old contents (the read samples the array before the non-blocking write lands).
// Contents start undefined (X); Verilator's --x-initial/+verilator+rand+reset decide what X reads as.
// The chip never defines this module; synthesis maps it onto a macro or a black box.
module msh_sram #(
    parameter integer DEPTH = 256,
    parameter integer WIDTH = 128,
    parameter integer ADDRW = $clog2(DEPTH)
) (
    input  wire                 clk,
    input  wire                 we,
    input  wire [ADDRW-1:0]     waddr,
    input  wire [WIDTH-1:0]     wdata,
    input  wire [WIDTH/8-1:0]   wstrb,
    input  wire                 re,
    input  wire [ADDRW-1:0]     raddr,
    output reg  [WIDTH-1:0]     rdata
);
    reg [WIDTH-1:0] mem [0:DEPTH-1];
    integer b;

    initial begin
        if (WIDTH % 8 != 0) $fatal(1, "msh_sram: WIDTH=%0d is not a multiple of 8", WIDTH);
        if (DEPTH < 2) $fatal(1, "msh_sram: DEPTH=%0d must be at least 2", DEPTH);
        if (ADDRW != $clog2(DEPTH)) $fatal(1, "msh_sram: ADDRW=%0d, expected clog2(DEPTH=%0d)", ADDRW, DEPTH);
    end

    always @(posedge clk) begin
        if (re) rdata <= mem[raddr];
        if (we) begin
            for (b = 0; b < WIDTH / 8; b = b + 1) begin
                if (wstrb[b]) mem[waddr][b*8 +: 8] <= wdata[b*8 +: 8];
            end
        end
    end
endmodule
