// olaf_queue ingest stage: takes the OLAF messages off s_axis (optionally through a
// frame-dropping ingress axis_fifo), captures each message's 36 header bytes in any
// beat alignment, stages the beats that can carry values in the beat FIFO (at most
// one UPDATE's worth per message; the rest of an overlong packet is discarded) and,
// at tlast, holds header, length, tid and bad-frame bit in the H register until the
// decide stage takes them (h_take). The beat FIFO is read by the apply stage.
//
// A tlast beat waits while H is full and not leaving; other beats only need beat
// FIFO room, so the next UPDATE streams in while a message waits in H.
`default_nettype none
// Comparisons against integer parameters and narrow array indices are deliberate
// zero-extensions / truncations; Verilator would flag every one of them.
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_queue_ingest #(
    parameter integer DATA_WIDTH = 512,
    parameter integer V = 64,
    parameter integer MAX_CLUSTERS = 16,
    parameter integer MAX_BLOCKS = 1024,
    parameter integer ID_WIDTH = 8,
    parameter integer INGRESS_DEPTH = 0,
    // Derived (the top passes only the parameters above): beats of one UPDATE, the
    // width of a beat count, and the [cluster][block] key width.
    parameter integer NB_UPD = (36 + 4 * V + DATA_WIDTH / 8 - 1) / (DATA_WIDTH / 8),
    parameter integer BCW = $clog2(NB_UPD + 1),
    parameter integer CW = MAX_CLUSTERS > 1 ? $clog2(MAX_CLUSTERS) : 1,
    parameter integer KW = MAX_BLOCKS > 1 ? $clog2(MAX_BLOCKS) : 1
) (
    input  wire                    clk,
    input  wire                    rst,

    input  wire [DATA_WIDTH-1:0]   s_axis_tdata,
    input  wire [DATA_WIDTH/8-1:0] s_axis_tkeep,
    input  wire                    s_axis_tvalid,
    output wire                    s_axis_tready,
    input  wire                    s_axis_tlast,
    input  wire [ID_WIDTH-1:0]     s_axis_tid,
    input  wire                    s_axis_tuser,
    output wire                    ingress_drop,   // a packet dropped by the ingress FIFO

    // H: the header of the last complete message, waiting for its index read.
    input  wire                    h_take,
    output reg                     h_valid,
    output reg  [36*8-1:0]         h_hdr,
    output reg  [15:0]             h_len,
    output reg  [BCW-1:0]          h_nb,           // staged value beats (1..NB_UPD)
    output reg  [ID_WIDTH-1:0]     h_tid,
    output reg                     h_bad,
    output reg  [CW+KW-1:0]        h_key,

    // Beat FIFO head, popped by the apply stage.
    input  wire                    bf_pop,
    output wire [DATA_WIDTH-1:0]   bf_head
`ifdef FORMAL
    ,
    output wire                    f_bf_push,
    output wire                    f_bf_ready
`endif
);
    localparam integer W = DATA_WIDTH;
    localparam integer BW = W / 8;
    localparam integer HDR = 36;
    localparam integer HB = HDR * 8;
    localparam integer BF_DEPTH = 1 << $clog2(2 * NB_UPD + 4);

    function [15:0] bswap16(input [15:0] x);
        bswap16 = {x[7:0], x[15:8]};
    endfunction
    // A header is 36 stream bytes, byte i at bits [8i +: 8]; fields are big-endian.
    function [15:0] hf16(input [HB-1:0] h, input integer off);
        hf16 = bswap16(h[8*off +: 16]);
    endfunction

    // ------------------------------------------------------------------ ingress
    wire [W-1:0] i_tdata;
    wire [BW-1:0] i_tkeep;
    wire i_tvalid, i_tlast, i_tuser;
    wire [ID_WIDTH-1:0] i_tid;
    wire i_tready;
    generate
        if (INGRESS_DEPTH > 0) begin : g_ingress
            wire bad_unused, good_unused;
            axis_fifo #(
                .DEPTH(INGRESS_DEPTH), .DATA_WIDTH(W), .KEEP_ENABLE(1), .KEEP_WIDTH(BW),
                .ID_ENABLE(1), .ID_WIDTH(ID_WIDTH), .USER_ENABLE(1), .USER_WIDTH(1),
                .FRAME_FIFO(1), .DROP_WHEN_FULL(1)
            ) ingress (
                .clk(clk), .rst(rst),
                .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep),
                .s_axis_tvalid(s_axis_tvalid), .s_axis_tready(s_axis_tready),
                .s_axis_tlast(s_axis_tlast), .s_axis_tid(s_axis_tid), .s_axis_tuser(s_axis_tuser),
                .m_axis_tdata(i_tdata), .m_axis_tkeep(i_tkeep), .m_axis_tvalid(i_tvalid),
                .m_axis_tready(i_tready), .m_axis_tlast(i_tlast), .m_axis_tid(i_tid),
                .m_axis_tuser(i_tuser),
                .status_depth(), .status_overflow(ingress_drop),
                .status_bad_frame(bad_unused), .status_good_frame(good_unused)
            );
        end else begin : g_direct
            assign i_tdata = s_axis_tdata;
            assign i_tkeep = s_axis_tkeep;
            assign i_tvalid = s_axis_tvalid;
            assign i_tlast = s_axis_tlast;
            assign i_tid = s_axis_tid;
            assign i_tuser = s_axis_tuser;
            assign s_axis_tready = i_tready;
            assign ingress_drop = 1'b0;
        end
    endgenerate

    // ------------------------------------------------------------------ ingest
    reg [15:0] in_beat;
    reg [15:0] in_len;
    reg [HB-1:0] in_hdr;

    // Beat FIFO: value-carrying beats of messages waiting for their decision.
    wire bf_ready;
    wire bf_push = i_tvalid && i_tready && in_beat < NB_UPD;
    // A tlast beat needs H free (or leaving); other beats only need FIFO room, so the
    // next UPDATE streams in while a message waits in H for the decide pipeline.
    assign i_tready = !rst && bf_ready && !(i_tlast && h_valid && !h_take);
    wire in_fire = i_tvalid && i_tready;

    reg [$clog2(BW+1)-1:0] keep_cnt;
    integer k;
    always @* begin
        keep_cnt = 0;
        for (k = 0; k < BW; k = k + 1) keep_cnt = keep_cnt + i_tkeep[k];
    end
    wire [16:0] len_sum = {1'b0, in_len} + keep_cnt;
    wire [15:0] len_next = len_sum[16] ? 16'hffff : len_sum[15:0];

    wire [HB-1:0] hdr_next;
    genvar gb;
    generate
        for (gb = 0; gb < HDR; gb = gb + 1) begin : g_hdr
            assign hdr_next[8*gb +: 8] = (in_beat == gb / BW) ? i_tdata[8*(gb % BW) +: 8]
                                                             : in_hdr[8*gb +: 8];
        end
    endgenerate
    wire [15:0] next_cluster = hf16(hdr_next, 2);
    wire [15:0] next_block = hf16(hdr_next, 6);

    always @(posedge clk) begin
        if (rst) begin
            in_beat <= 16'd0;
            in_len <= 16'd0;
            h_valid <= 1'b0;
        end else begin
            if (h_take) h_valid <= 1'b0;
            if (in_fire) begin
                in_hdr <= hdr_next;
                if (i_tlast) begin
                    in_beat <= 16'd0;
                    in_len <= 16'd0;
                    h_valid <= 1'b1;
                    h_hdr <= hdr_next;
                    h_len <= len_next;
                    h_nb <= (in_beat < NB_UPD) ? in_beat[BCW-1:0] + 1'b1 : NB_UPD[BCW-1:0];
                    h_tid <= i_tid;
                    h_bad <= i_tuser;
                    h_key <= {next_cluster[CW-1:0], next_block[KW-1:0]};
                end else begin
                    in_beat <= (in_beat == 16'hffff) ? in_beat : in_beat + 16'd1;
                    in_len <= len_next;
                end
            end
        end
    end

    axis_fifo #(.DEPTH(BF_DEPTH), .DATA_WIDTH(W), .LAST_ENABLE(0)) beat_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata(i_tdata), .s_axis_tkeep({BW{1'b1}}), .s_axis_tvalid(bf_push),
        .s_axis_tready(bf_ready), .s_axis_tlast(1'b1), .s_axis_tid(8'd0), .s_axis_tuser(1'b0),
        .m_axis_tdata(bf_head), .m_axis_tkeep(), .m_axis_tvalid(), .m_axis_tready(bf_pop),
        .m_axis_tlast(), .m_axis_tid(), .m_axis_tuser(),
        .status_depth(), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );

`ifdef FORMAL
    assign f_bf_push = bf_push;
    assign f_bf_ready = bf_ready;
`endif
endmodule

`default_nettype wire
