// Fault-injection wrapper around the generated dequant_mac: with `CORRUPT_OUTPUT defined, output bit
// FLIP_BIT is inverted, so the testbench must report a mismatch (proves the scoreboard can fail).
// Ports are those of dequant_mac, so the same cocotb testbench drives either top.
module dequant_mac_corrupt #(
    parameter integer IW = 483,        // i payload bits (config.json streams.i.payload_bits)
    parameter integer OW = 704,        // o payload bits
    parameter integer FLIP_BIT = 0
) (
    input  wire          clk,
    input  wire          rst,
    input  wire          i__valid,
    output wire          i__ready,
    input  wire [IW-1:0] i__payload,
    output wire          o__valid,
    input  wire          o__ready,
    output wire [OW-1:0] o__payload
);
    wire [OW-1:0] y;
    dequant_mac dut (
        .clk(clk), .rst(rst),
        .i__valid(i__valid), .i__ready(i__ready), .i__payload(i__payload),
        .o__valid(o__valid), .o__ready(o__ready), .o__payload(y)
    );
`ifdef CORRUPT_OUTPUT
    assign o__payload = y ^ ({{(OW-1){1'b0}}, 1'b1} << FLIP_BIT);
`else
    assign o__payload = y;
`endif
endmodule
