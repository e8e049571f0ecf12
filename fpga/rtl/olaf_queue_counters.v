// olaf_queue statistics counters and their read port. The decide stage registers one
// increment enable per counter for the message in its C stage (inc), so each adder
// starts from a flop; ingress_drop counts packets the ingress FIFO dropped.
//   cnt_sel 0..5 per outcome, 6 bad frames dropped, 7 packets dropped by the ingress
//   FIFO, 8+t per msg_type t (1..6), 16+v per invalid verdict v (1..9), 26 occupied,
//   27 write_ptr, 28 read_ptr, 29 responses waiting in the output list, 30
//   append_available_addr, 31 segments awaiting readout; others read 0.
// Counters are CNT_WIDTH bits (zero-extended to 64 on cnt_value); fewer only to
// shrink proof models.
`default_nettype none
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_queue_counters #(
    parameter integer CNT_WIDTH = 64,
    parameter integer NCNT = 23,        // 6 outcomes, bad frame, ingress drop, 6 types, 9 verdicts
    parameter integer OW = 7,           // widths of the state words read at 26..31
    parameter integer SW = 6,
    parameter integer RW = 3,
    parameter integer GW = 7,
    parameter integer PW = 4
) (
    input  wire                    clk,
    input  wire                    rst,
    input  wire [NCNT-1:0]         inc,
    input  wire                    ingress_drop,

    input  wire [OW-1:0]           occupied,
    input  wire [SW-1:0]           write_ptr,
    input  wire [SW-1:0]           read_ptr,
    input  wire [RW-1:0]           rq_depth,
    input  wire [GW-1:0]           append_available_addr,
    input  wire [PW-1:0]           pending,

    input  wire [4:0]              cnt_sel,
    output reg  [63:0]             cnt_value
);
    // Counter slot of the ingress FIFO's drops (the others are set by inc alone).
    localparam integer C_INGRESS = 7;

    reg [CNT_WIDTH*NCNT-1:0] cnt;

    integer i;
    always @(posedge clk) begin
        if (rst) begin
            cnt <= {CNT_WIDTH*NCNT{1'b0}};
        end else begin
            for (i = 0; i < NCNT; i = i + 1)
                if (inc[i] || (i == C_INGRESS && ingress_drop))
                    cnt[CNT_WIDTH*i +: CNT_WIDTH] <= cnt[CNT_WIDTH*i +: CNT_WIDTH] + 1'b1;
        end
    end

    always @* begin
        cnt_value = 64'd0;
        if (cnt_sel < 5'd8) cnt_value = cnt[CNT_WIDTH*cnt_sel +: CNT_WIDTH];
        else if (cnt_sel >= 5'd9 && cnt_sel <= 5'd14) cnt_value = cnt[CNT_WIDTH*(cnt_sel - 5'd1) +: CNT_WIDTH];
        else if (cnt_sel >= 5'd17 && cnt_sel <= 5'd25) cnt_value = cnt[CNT_WIDTH*(cnt_sel - 5'd3) +: CNT_WIDTH];
        else if (cnt_sel == 5'd26) cnt_value = {{(64 - OW){1'b0}}, occupied};
        else if (cnt_sel == 5'd27) cnt_value = {{(64 - SW){1'b0}}, write_ptr};
        else if (cnt_sel == 5'd28) cnt_value = {{(64 - SW){1'b0}}, read_ptr};
        else if (cnt_sel == 5'd29) cnt_value = {{(64 - RW){1'b0}}, rq_depth};
        else if (cnt_sel == 5'd30) cnt_value = {{(64 - GW){1'b0}}, append_available_addr};
        else if (cnt_sel == 5'd31) cnt_value = {{(64 - PW){1'b0}}, pending};
    end
endmodule

`default_nettype wire
