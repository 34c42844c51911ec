// Behavioural simulation model of the msh_rom storage macro (SPEC_NANO_KPU.md §5).
// A constant table with two independent combinational (asynchronous) read ports. Contents come
// from INIT_FILE by $readmemh (the chip's tables live under rtl/roms/, produced by generators).
// An address at or beyond DEPTH reads X.
module msh_rom #(
    parameter integer DEPTH = 256,
    parameter integer WIDTH = 16,
    parameter integer ADDRW = $clog2(DEPTH),
    parameter         INIT_FILE = ""
) (
    input  wire [ADDRW-1:0]     raddr1,
    output wire [WIDTH-1:0]     rdata1,
    input  wire [ADDRW-1:0]     raddr2,
    output wire [WIDTH-1:0]     rdata2
);
    reg [WIDTH-1:0] mem [0:DEPTH-1];
    localparam [ADDRW:0] LIMIT = DEPTH[ADDRW:0];   // DEPTH <= 2**ADDRW fits in ADDRW+1 bits

    initial begin
        if (WIDTH % 8 != 0) $fatal(1, "msh_rom: WIDTH=%0d is not a multiple of 8", WIDTH);
        if (DEPTH < 2) $fatal(1, "msh_rom: DEPTH=%0d must be at least 2", DEPTH);
        if (ADDRW != $clog2(DEPTH)) $fatal(1, "msh_rom: ADDRW=%0d, expected clog2(DEPTH=%0d)", ADDRW, DEPTH);
        if (INIT_FILE == "") $fatal(1, "msh_rom: INIT_FILE is not set");
        $readmemh(INIT_FILE, mem);
    end

    assign rdata1 = ({1'b0, raddr1} < LIMIT) ? mem[raddr1] : {WIDTH{1'bx}};
    assign rdata2 = ({1'b0, raddr2} < LIMIT) ? mem[raddr2] : {WIDTH{1'bx}};
endmodule
