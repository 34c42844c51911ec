// Test design for flow/floorplan and flow/regions: engines below one wrapper instance (as the chip's
// msh_chip_top.core), with known traffic between them. The front end sends each multiplier lane 16 bits
// of operands, each lane sends the accumulator a 32-bit product, and the control engine sends everyone
// one enable bit; the accumulator holds an msh_sram (a black box, SPEC_NANO_KPU.md section 5).
module rs_front (
    input  wire        clk,
    input  wire [15:0] in_a,
    input  wire [15:0] in_b,
    output reg  [15:0] ops0,
    output reg  [15:0] ops1
);
    always @(posedge clk) begin
        ops0 <= {in_a[7:0], in_b[7:0]};
        ops1 <= {in_a[15:8] ^ in_b[7:0], in_b[15:8]};
    end
endmodule

module rs_mul (
    input  wire        clk,
    input  wire        en,
    input  wire [15:0] ops,
    output reg  [31:0] prod
);
    reg [7:0] a, b;
    reg [15:0] p;
    always @(posedge clk) begin
        a <= ops[15:8];
        b <= ops[7:0];
        p <= $signed(a) * $signed(b);
        if (en)
            prod <= {p, p ^ {a, b}};
    end
endmodule

module rs_acc (
    input  wire        clk,
    input  wire        rst_n,
    input  wire        en,
    input  wire [31:0] prod0,
    input  wire [31:0] prod1,
    input  wire        rd,
    input  wire [5:0]  raddr,
    output wire [31:0] rdata,
    output reg  [31:0] acc
);
    reg [5:0] waddr;
    always @(posedge clk)
        if (!rst_n) begin
            acc <= 32'd0;
            waddr <= 6'd0;
        end else if (en) begin
            acc <= acc + prod0 + prod1;
            waddr <= waddr + 6'd1;
        end
    msh_sram #(.DEPTH(64), .WIDTH(32)) acc_sram (
        .clk(clk), .we(en), .waddr(waddr), .wdata(acc), .wstrb(4'hf), .re(rd), .raddr(raddr), .rdata(rdata));
endmodule

module rs_ctl (
    input  wire clk,
    input  wire rst_n,
    input  wire go,
    output reg  en
);
    reg [7:0] count;
    always @(posedge clk)
        if (!rst_n) begin
            count <= 8'd0;
            en <= 1'b0;
        end else begin
            count <= go ? 8'd200 : (count != 8'd0 ? count - 8'd1 : 8'd0);
            en <= count != 8'd0;
        end
endmodule

module rs_core (
    input  wire        clk,
    input  wire        rst_n,
    input  wire        go,
    input  wire [15:0] in_a,
    input  wire [15:0] in_b,
    input  wire        rd,
    input  wire [5:0]  raddr,
    output wire [31:0] rdata,
    output reg  [15:0] sum
);
    wire en;
    wire [15:0] ops0, ops1;
    wire [31:0] prod0, prod1, acc;
    rs_ctl   ctl   (.clk(clk), .rst_n(rst_n), .go(go), .en(en));
    rs_front front (.clk(clk), .in_a(in_a), .in_b(in_b), .ops0(ops0), .ops1(ops1));
    rs_mul   mul0  (.clk(clk), .en(en), .ops(ops0), .prod(prod0));
    rs_mul   mul1  (.clk(clk), .en(en), .ops(ops1), .prod(prod1));
    rs_acc   acc_u (.clk(clk), .rst_n(rst_n), .en(en), .prod0(prod0), .prod1(prod1), .rd(rd), .raddr(raddr),
                    .rdata(rdata), .acc(acc));
    always @(posedge clk)
        sum <= acc[31:16] ^ acc[15:0];      // the wrapper's own logic
endmodule

module regions_small (
    input  wire        clk,
    input  wire        rst_n,
    input  wire        go,
    input  wire [15:0] in_a,
    input  wire [15:0] in_b,
    input  wire        rd,
    input  wire [5:0]  raddr,
    output wire [31:0] rdata,
    output wire [15:0] sum
);
    rs_core core (.clk(clk), .rst_n(rst_n), .go(go), .in_a(in_a), .in_b(in_b), .rd(rd), .raddr(raddr),
                  .rdata(rdata), .sum(sum));
endmodule
