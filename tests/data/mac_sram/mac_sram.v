// Test design for flow/synth and flow/sta: a two-stage pipelined 8x8 multiply-accumulator whose
// products are written to an msh_sram and whose operand scale comes from an msh_rom.
// The macros are black boxes (supplied by the environment, SPEC_NANO_KPU.md section 5).
module mac_lane (
    input  wire        clk,
    input  wire        rst_n,
    input  wire        en,
    input  wire [7:0]  a,
    input  wire [7:0]  b,
    output reg  [23:0] acc
);
    reg signed [15:0] prod;    // signed: the netlists must still read in OpenSTA (no `wire signed`)
    reg        prod_v;
    always @(posedge clk) begin
        if (!rst_n) begin
            prod <= 16'd0;
            prod_v <= 1'b0;
            acc <= 24'd0;
        end else begin
            prod <= $signed(a) * $signed(b);
            prod_v <= en;
            if (prod_v)
                acc <= acc + {{8{prod[15]}}, prod};
        end
    end
endmodule

module mac_sram (
    input  wire        clk,
    input  wire        rst_n,
    input  wire        en,
    input  wire [7:0]  a,
    input  wire [7:0]  b,
    input  wire [5:0]  sel,
    input  wire        rd,
    input  wire [5:0]  raddr,
    output wire [31:0] rdata,
    output wire [23:0] acc0,
    output wire [23:0] acc1
);
    wire [7:0] scale1, scale2;
    msh_rom #(.DEPTH(64), .WIDTH(8), .INIT_FILE("rtl/roms/scale.hex")) scale_rom (
        .raddr1(sel), .rdata1(scale1), .raddr2(~sel), .rdata2(scale2));

    mac_lane lane0 (.clk(clk), .rst_n(rst_n), .en(en), .a(a), .b(scale1), .acc(acc0));
    mac_lane lane1 (.clk(clk), .rst_n(rst_n), .en(en), .a(b), .b(scale2), .acc(acc1));

    reg [5:0] waddr;
    always @(posedge clk)
        if (!rst_n) waddr <= 6'd0;
        else if (en) waddr <= waddr + 6'd1;

    msh_sram #(.DEPTH(64), .WIDTH(32)) acc_sram (
        .clk(clk), .we(en), .waddr(waddr), .wdata({acc0[23:8], acc1[23:8]}), .wstrb(4'hf),
        .re(rd), .raddr(raddr), .rdata(rdata));
endmodule
