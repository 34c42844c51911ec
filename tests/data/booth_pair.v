// Two registered products: 4 x 16 (left an array by flow/synth/worker.py BOOTH_STEPS) and 16 x 16 (Booth).
module booth_pair(input clk, input signed [3:0] x, input signed [15:0] y, input signed [15:0] u,
                  input signed [15:0] v, output reg signed [19:0] p, output reg signed [31:0] q);
  always @(posedge clk) begin
    p <= x * y;
    q <= u * v;
  end
endmodule
