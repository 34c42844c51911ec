// TEST EQUIPMENT for the whole-chip testbench (verification/chip_tb.py) — NOT the chip, computes nothing.
//
// A hand-written module with the exact SPEC_NANO_KPU.md §1 port list of msh_chip_top that follows the
// §2 command/response and §3 memory protocol. On RUN it reads header beats 0..7 (addresses of every
// region), optionally streams the descriptor table + tensor block once (READ_TENSORS, so the §7
// dense-byte floor is met), then copies the bytes [scratch, scratch + status - logits) to
// [logits, status) one beat at a time (the test preloads the fixed model's expected logits rows and
// argmax words into scratch: chip_tb.preload_expected), writes the status word 0x600DD00D last and
// answers DONE once that write has been accepted. Its only purpose is to show that the testbench's
// checks pass a correct run and catch each kind of broken one; results are never reported as the chip.
//
// Fault variants (Verilog defines), each one protocol or data error the testbench must name:
//   CORRUPT_LOGIT  flip bit 0 of copied beat CORRUPT_BEAT (one logit off by one)
//   STATUS_EARLY   write the status word before the last logits row
//   DONE_EARLY     raise DONE together with the status write request, before it is accepted
//   MISALIGNED     one extra read at byte address 8 (not 16-byte aligned)
//   HANG           never answer DONE (cycle-limit timeout)
// and READ_TENSORS = 0 skips the tensor stream (reads fall below the dense-byte floor). Each fault can
// also be switched on at run time by the plusarg of the same name (+SKIP_TENSORS for READ_TENSORS = 0).
module protocol_fixture #(
    parameter integer READ_TENSORS = 1,
    parameter integer CORRUPT_BEAT = 18
) (
    input  wire         clk,
    input  wire         rst_n,
    input  wire [31:0]  cmd_data,
    input  wire         cmd_valid,
    output wire         cmd_ready,
    output wire [31:0]  rsp_data,
    output wire         rsp_valid,
    input  wire         rsp_ready,
    output reg          mem_req_valid,
    input  wire         mem_req_ready,
    output reg          mem_req_write,
    output reg  [35:0]  mem_req_addr,
    output reg  [127:0] mem_req_wdata,
    output reg  [15:0]  mem_req_wstrb,
    input  wire         mem_rsp_valid,
    output wire         mem_rsp_ready,
    input  wire [127:0] mem_rsp_rdata
);
    localparam [3:0] S_IDLE = 4'd0, S_HDR = 4'd1, S_MIS = 4'd2, S_TEN = 4'd3, S_CRD = 4'd4,
                     S_CWAIT = 4'd5, S_CWR = 4'd6, S_STATUS = 4'd7, S_DONE = 4'd8, S_END = 4'd9;
    localparam [31:0] CMD_RUN = 32'h0000_0001, RSP_DONE = 32'h0000_D0DE, STATUS_GOOD = 32'h600D_D00D;
    localparam [3:0] HDR_BEATS = 4'd8;       // header words 0..31 live in beats 0..7

    // Each fault is on when its define is set or, so that one build serves every variant in the
    // testbench's own tests, when the simulator gets the plusarg of the same name (+CORRUPT_LOGIT ...).
`ifdef CORRUPT_LOGIT
    localparam DEF_CORRUPT = 1'b1;
`else
    localparam DEF_CORRUPT = 1'b0;
`endif
`ifdef STATUS_EARLY
    localparam DEF_STATUS_EARLY = 1'b1;
`else
    localparam DEF_STATUS_EARLY = 1'b0;
`endif
`ifdef DONE_EARLY
    localparam DEF_DONE_EARLY = 1'b1;
`else
    localparam DEF_DONE_EARLY = 1'b0;
`endif
`ifdef MISALIGNED
    localparam DEF_MISALIGNED = 1'b1;
`else
    localparam DEF_MISALIGNED = 1'b0;
`endif
`ifdef HANG
    localparam DEF_HANG = 1'b1;
`else
    localparam DEF_HANG = 1'b0;
`endif
    reg f_corrupt, f_status_early, f_done_early, f_misaligned, f_hang, f_skip_tensors;
    initial begin
        f_corrupt = DEF_CORRUPT || $test$plusargs("CORRUPT_LOGIT") != 0;
        f_status_early = DEF_STATUS_EARLY || $test$plusargs("STATUS_EARLY") != 0;
        f_done_early = DEF_DONE_EARLY || $test$plusargs("DONE_EARLY") != 0;
        f_misaligned = DEF_MISALIGNED || $test$plusargs("MISALIGNED") != 0;
        f_hang = DEF_HANG || $test$plusargs("HANG") != 0;
        f_skip_tensors = READ_TENSORS == 0 || $test$plusargs("SKIP_TENSORS") != 0;
    end

    reg  [3:0]  state;
    reg  [35:0] desc_addr, tokens_addr, logits_addr, argmax_addr, status_addr, scratch_addr, stride;
    reg  [35:0] next_addr;            // next read address of a streamed phase, or the copy destination
    reg  [23:0] rd_issued, rd_seen;   // streamed phase: reads accepted / responses taken
    reg  [23:0] beat;                 // copy: index of the beat being copied
    reg  [127:0] copy_data;
    reg         status_done, done_sent;

    wire req_fire = mem_req_valid & mem_req_ready;
    wire rsp_fire = mem_rsp_valid;    // mem_rsp_ready is always 1
    wire [35:0] last_row = argmax_addr - stride;
    wire [35:0] hdr_next = {28'd0, rd_issued[3:0] + 4'd1, 4'd0};

    assign cmd_ready = (state == S_IDLE);
    assign mem_rsp_ready = 1'b1;
    assign rsp_valid = !f_hang && !done_sent && ((state == S_DONE) || (f_done_early && state == S_STATUS));
    assign rsp_data = RSP_DONE;

    // The copy destination of `beat`: the status block when the copy is finished.
    wire [35:0] dst = logits_addr + {8'd0, beat, 4'd0};

    always @(posedge clk) begin
        if (!rst_n) begin
            state <= S_IDLE;
            mem_req_valid <= 1'b0;
            mem_req_write <= 1'b0;
            mem_req_addr <= 36'd0;
            mem_req_wdata <= 128'd0;
            mem_req_wstrb <= 16'd0;
            {desc_addr, tokens_addr, logits_addr, argmax_addr, status_addr, scratch_addr, stride} <= {7{36'd0}};
            next_addr <= 36'd0;
            rd_issued <= 24'd0;
            rd_seen <= 24'd0;
            beat <= 24'd0;
            copy_data <= 128'd0;
            status_done <= 1'b0;
            done_sent <= 1'b0;
        end else begin
            if (rsp_valid && rsp_ready)
                done_sent <= 1'b1;
            case (state)
            S_IDLE: if (cmd_valid && cmd_data == CMD_RUN) begin
                state <= S_HDR;
                mem_req_valid <= 1'b1;            // header beat 0
                mem_req_write <= 1'b0;
                mem_req_addr <= 36'd0;
                rd_issued <= 24'd0;
                rd_seen <= 24'd0;
            end
            S_HDR: begin
                if (req_fire) begin
                    rd_issued <= rd_issued + 24'd1;
                    if (rd_issued[3:0] + 4'd1 == HDR_BEATS)
                        mem_req_valid <= 1'b0;
                    else
                        mem_req_addr <= hdr_next;
                end
                if (rsp_fire) begin
                    rd_seen <= rd_seen + 24'd1;
                    case (rd_seen[3:0])
                    4'd5: desc_addr <= {4'd0, mem_rsp_rdata[127:96]};                     // word 23
                    4'd6: begin
                        tokens_addr <= {4'd0, mem_rsp_rdata[31:0]};                      // word 24
                        logits_addr <= {4'd0, mem_rsp_rdata[63:32]};                     // word 25
                        argmax_addr <= {4'd0, mem_rsp_rdata[95:64]};                     // word 26
                        status_addr <= {4'd0, mem_rsp_rdata[127:96]};                    // word 27
                    end
                    4'd7: begin
                        scratch_addr <= {4'd0, mem_rsp_rdata[31:0]};                     // word 28
                        stride <= {4'd0, mem_rsp_rdata[95:64]};                          // word 30
                    end
                    default: ;
                    endcase
                    if (rd_seen[3:0] + 4'd1 == HDR_BEATS) begin
                        state <= f_misaligned ? S_MIS : S_TEN;
                        rd_issued <= 24'd0;
                        rd_seen <= 24'd0;
                    end
                end
            end
            S_MIS: begin                          // one read at a misaligned address, response dropped
                if (!mem_req_valid && !rsp_fire && rd_issued == 24'd0) begin
                    mem_req_valid <= 1'b1;
                    mem_req_addr <= 36'h8;
                end
                if (req_fire) begin
                    mem_req_valid <= 1'b0;
                    rd_issued <= 24'd1;
                end
                if (rsp_fire) begin
                    state <= S_TEN;
                    rd_issued <= 24'd0;
                end
            end
            S_TEN: begin                          // the descriptor table and tensor block, once
                if (f_skip_tensors) begin
                    state <= S_CRD;
                    beat <= 24'd0;
                end else if (!mem_req_valid && rd_issued == 24'd0) begin
                    mem_req_valid <= 1'b1;
                    mem_req_addr <= desc_addr;
                    next_addr <= desc_addr + 36'd16;
                    rd_seen <= 24'd0;
                    rd_issued <= 24'd1;
                end else begin
                    if (req_fire) begin
                        if (next_addr >= tokens_addr)
                            mem_req_valid <= 1'b0;
                        else begin
                            mem_req_addr <= next_addr;
                            next_addr <= next_addr + 36'd16;
                            rd_issued <= rd_issued + 24'd1;
                        end
                    end
                    if (rsp_fire)
                        rd_seen <= rd_seen + 24'd1;
                    // every beat of [desc_addr, tokens_addr) requested and answered
                    if (!mem_req_valid && rd_seen == rd_issued) begin
                        state <= S_CRD;
                        beat <= 24'd0;
                    end
                end
            end
            S_CRD: begin                          // read one beat of the preloaded outputs
                if (dst == status_addr)
                    state <= status_done ? S_DONE : S_STATUS;
                else if (f_status_early && !status_done && dst == last_row)
                    state <= S_STATUS;
                else if (!mem_req_valid) begin
                    mem_req_valid <= 1'b1;
                    mem_req_write <= 1'b0;
                    mem_req_addr <= scratch_addr + {8'd0, beat, 4'd0};
                end else if (req_fire) begin
                    mem_req_valid <= 1'b0;
                    state <= S_CWAIT;
                end
            end
            S_CWAIT: if (rsp_fire) begin
                copy_data <= mem_rsp_rdata ^ {127'd0, f_corrupt && beat == CORRUPT_BEAT[23:0]};
                state <= S_CWR;
            end
            S_CWR: begin
                if (!mem_req_valid) begin
                    mem_req_valid <= 1'b1;
                    mem_req_write <= 1'b1;
                    mem_req_addr <= dst;
                    mem_req_wdata <= copy_data;
                    mem_req_wstrb <= 16'hFFFF;
                end else if (req_fire) begin
                    mem_req_valid <= 1'b0;
                    mem_req_write <= 1'b0;
                    beat <= beat + 24'd1;
                    state <= S_CRD;
                end
            end
            S_STATUS: begin
                if (!mem_req_valid) begin
                    mem_req_valid <= 1'b1;
                    mem_req_write <= 1'b1;
                    mem_req_addr <= status_addr;
                    mem_req_wdata <= {96'd0, STATUS_GOOD};
                    mem_req_wstrb <= 16'hFFFF;
                end else if (req_fire) begin
                    mem_req_valid <= 1'b0;
                    mem_req_write <= 1'b0;
                    status_done <= 1'b1;
                    state <= (dst == status_addr) ? S_DONE : S_CRD;
                end
            end
            S_DONE: if (done_sent || (rsp_valid && rsp_ready) || f_hang)
                state <= S_END;
            default: ;                            // S_END: idle until the next reset
            endcase
        end
    end
endmodule
