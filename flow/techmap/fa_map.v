// Yosys techmap (flow.synth --full-adders): the full adders of `maccmap` (the carry-save trees of multipliers and multi-operand sums)
// onto Nangate45's FA_X1 / HA_X1 cells, one cell instead of the five gates of techmap.v's `_90_fa`.
// A bit with a constant input is left to generic logic (the optimiser folds it); a bit whose third input
// is constant 0 is a half adder.
(* techmap_celltype = "$fa" *)
module nk3_fa_map (A, B, C, X, Y);
    parameter WIDTH = 1;
    parameter _TECHMAP_CONSTMSK_A_ = 0;
    parameter _TECHMAP_CONSTMSK_B_ = 0;
    parameter _TECHMAP_CONSTMSK_C_ = 0;
    parameter _TECHMAP_CONSTVAL_C_ = 0;
    (* force_downto *) input [WIDTH-1:0] A, B, C;
    (* force_downto *) output [WIDTH-1:0] X, Y;      // X: carry, Y: sum
    genvar i;
    generate for (i = 0; i < WIDTH; i = i + 1) begin : bit
        if (_TECHMAP_CONSTMSK_A_[i] || _TECHMAP_CONSTMSK_B_[i]) begin : gates
            assign Y[i] = A[i] ^ B[i] ^ C[i];
            assign X[i] = (A[i] & B[i]) | (C[i] & (A[i] ^ B[i]));
        end else if (_TECHMAP_CONSTMSK_C_[i] && !_TECHMAP_CONSTVAL_C_[i]) begin : ha
            HA_X1 ha (.A(A[i]), .B(B[i]), .CO(X[i]), .S(Y[i]));
        end else if (_TECHMAP_CONSTMSK_C_[i]) begin : gates1
            assign Y[i] = ~(A[i] ^ B[i]);
            assign X[i] = A[i] | B[i];
        end else begin : fa
            FA_X1 fa (.A(A[i]), .B(B[i]), .CI(C[i]), .CO(X[i]), .S(Y[i]));
        end
    end endgenerate
endmodule
