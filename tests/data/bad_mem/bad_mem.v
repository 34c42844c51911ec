// A design with an inferred memory (a reg array): the synthesis must reject it (SPEC section 5).
module bad_mem (
    input  wire       clk,
    input  wire       we,
    input  wire [3:0] waddr,
    input  wire [7:0] wdata,
    input  wire [3:0] raddr,
    output reg  [7:0] rdata
);
    reg [7:0] scratch_buf [0:15];
    always @(posedge clk) begin
        if (we) scratch_buf[waddr] <= wdata;
        rdata <= scratch_buf[raddr];
    end
endmodule
