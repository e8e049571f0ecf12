// olaf_queue apply stage: takes the decide stage's decisions in order and moves each
// message's staged beats (ingest's beat FIFO) into the target segment: a plain write
// for ENQUEUED / REPLACED, a read-modify-write with a lane-parallel signed saturating
// add (big-endian int32 lanes byte-swapped in and out) for MERGED. The segment read
// goes through the BRAM's latch and output register (olaf_queue_seg_mem port A), so a
// read misses the write made at its own clock edge; that write is forwarded. A
// response enters the response FIFO in order, after every earlier segment write has
// been issued; the output stage reads it.
`default_nettype none
// Comparisons against integer parameters and narrow array indices are deliberate
// zero-extensions / truncations; Verilator would flag every one of them.
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_queue_apply #(
    parameter integer DATA_WIDTH = 512,
    parameter integer V = 64,
    parameter integer MAX_CAPACITY = 64,
    parameter integer PENDING_SEGS = 8,
    parameter integer ID_WIDTH = 8,
    // Derived (the top passes only the parameters above; see olaf_queue.v for each).
    parameter integer NB_UPD = (36 + 4 * V + DATA_WIDTH / 8 - 1) / (DATA_WIDTH / 8),
    parameter integer BCW = $clog2(NB_UPD + 1),
    parameter integer AW = $clog2((MAX_CAPACITY + PENDING_SEGS) * NB_UPD),
    parameter integer DQ_W = 2 + AW + BCW + 2 + ID_WIDTH + 36 * 8,
    parameter integer RQ_W = 1 + AW + ID_WIDTH + 36 * 8
) (
    input  wire                    clk,
    input  wire                    rst,

    // Decision FIFO head (olaf_queue_decide) and the staged beats (olaf_queue_ingest).
    input  wire [DQ_W-1:0]         dq_head,
    input  wire                    dq_valid,
    output wire                    dq_pop,
    input  wire [DATA_WIDTH-1:0]   bf_head,
    output wire                    bf_pop,

    // Segment memory: the write port and read port A (data two cycles after the address).
    output wire                    seg_wr_en,
    output wire [AW-1:0]           seg_wr_addr,
    output wire [DATA_WIDTH-1:0]   seg_wr_data,
    output wire [AW-1:0]           seg_rd_addr,
    input  wire [DATA_WIDTH-1:0]   seg_rd_a,

    // Response FIFO head: {is DATA, segment, tid, response header}, for the output stage.
    output wire [RQ_W-1:0]         rq_head,
    output wire                    rq_valid,
    input  wire                    rq_pop,
    output wire [2:0]              rq_depth         // $clog2(RQ_DEPTH) + 1 bits
`ifdef FORMAL
    ,
    output wire [BCW-1:0]          f_a_beat,
    output wire [BCW-1:0]          f_a_nb,
    output wire                    f_rq_push,
    output wire                    f_rq_ready
`endif
);
    localparam integer W = DATA_WIDTH;
    localparam integer LANES = W / 32;
    localparam integer HB = 36 * 8;
    localparam integer RQ_DEPTH = 4;
    localparam [1:0] OP_NONE = 2'd0, OP_STORE = 2'd1, OP_MERGE = 2'd2;
    localparam [1:0] RESP_NONE = 2'd0, RESP_HDR = 2'd1, RESP_DATA = 2'd2;

    function [31:0] bswap32(input [31:0] x);
        bswap32 = {x[7:0], x[15:8], x[23:16], x[31:24]};
    endfunction
    // Lane-parallel signed saturating add of two beats of big-endian int32 lanes.
    function [W-1:0] sat_add_beat(input [W-1:0] a, input [W-1:0] b);
        integer j;
        reg [31:0] x, y;
        reg [32:0] s;
        begin
            sat_add_beat = {W{1'b0}};
            for (j = 0; j < LANES; j = j + 1) begin
                x = bswap32(a[32*j +: 32]);
                y = bswap32(b[32*j +: 32]);
                s = {x[31], x} + {y[31], y};
                if (s[32] != s[31])
                    sat_add_beat[32*j +: 32] = bswap32(s[32] ? 32'h8000_0000 : 32'h7fff_ffff);
                else
                    sat_add_beat[32*j +: 32] = bswap32(s[31:0]);
            end
        end
    endfunction

    wire [1:0] a_op = dq_head[DQ_W-1 -: 2];
    wire [AW-1:0] a_seg = dq_head[DQ_W-3 -: AW];
    wire [BCW-1:0] a_nb = dq_head[DQ_W-3-AW -: BCW];
    wire [1:0] a_resp = dq_head[HB+ID_WIDTH+1 -: 2];
    wire [ID_WIDTH-1:0] a_tid = dq_head[HB +: ID_WIDTH];
    wire [HB-1:0] a_hdr = dq_head[HB-1:0];

    wire rq_ready;
    reg [BCW-1:0] a_beat;
    wire a_needs_resp = a_resp != RESP_NONE && a_beat == 0;
    wire a_go = dq_valid && !(a_needs_resp && !rq_ready);
    wire a_last = a_beat == a_nb - 1'b1;
    wire [AW-1:0] a_addr = a_seg + a_beat;
    assign dq_pop = a_go && a_last;

    // s1: segment read in flight (BRAM latch); s2: output register, then the write
    // (STORE) or saturating read-modify-write (MERGE). A read misses the write made at
    // its own clock edge (by the read two cycles earlier); that write is forwarded.
    // Reads one cycle apart never share an address: an UPDATE spans >= 2 beats.
    reg s1_valid, s1_merge, s2_valid, s2_merge, h_wvalid;
    reg [AW-1:0] s1_addr, s2_addr, h_waddr;
    reg [W-1:0] s1_new, s2_new, h_wdata, fwd_data;
    reg fwd;
    wire [W-1:0] s2_old = fwd ? fwd_data : seg_rd_a;
    wire [W-1:0] s2_wdata = s2_merge ? sat_add_beat(s2_old, s2_new) : s2_new;

    always @(posedge clk) begin
        if (rst) begin
            a_beat <= {BCW{1'b0}};
            s1_valid <= 1'b0;
            s2_valid <= 1'b0;
            h_wvalid <= 1'b0;
        end else begin
            s1_valid <= a_go && a_op != OP_NONE;
            s2_valid <= s1_valid;
            h_wvalid <= s2_valid;
            if (a_go) a_beat <= a_last ? {BCW{1'b0}} : a_beat + 1'b1;
        end
        s1_merge <= a_op == OP_MERGE;
        s1_addr <= a_addr;
        s1_new <= bf_head;
        s2_merge <= s1_merge;
        s2_addr <= s1_addr;
        s2_new <= s1_new;
        h_waddr <= s2_addr;
        h_wdata <= s2_wdata;
        fwd <= h_wvalid && h_waddr == s1_addr;
        fwd_data <= h_wdata;
    end

    // Response list in output order: header, tid, and for DATA the segment to read.
    wire rq_push = a_go && a_needs_resp;
    axis_fifo #(.DEPTH(RQ_DEPTH), .DATA_WIDTH(RQ_W), .LAST_ENABLE(0)) response_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata({a_resp == RESP_DATA, a_seg, a_tid, a_hdr}), .s_axis_tkeep({(RQ_W+7)/8{1'b1}}),
        .s_axis_tvalid(rq_push), .s_axis_tready(rq_ready), .s_axis_tlast(1'b1),
        .s_axis_tid(8'd0), .s_axis_tuser(1'b0),
        .m_axis_tdata(rq_head), .m_axis_tkeep(), .m_axis_tvalid(rq_valid),
        .m_axis_tready(rq_pop), .m_axis_tlast(), .m_axis_tid(), .m_axis_tuser(),
        .status_depth(rq_depth), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );

    assign bf_pop = a_go;
    assign seg_rd_addr = a_addr;
    // The segment write is made from the s2 stage.
    assign seg_wr_en = s2_valid;
    assign seg_wr_addr = s2_addr;
    assign seg_wr_data = s2_wdata;

`ifdef FORMAL
    assign f_a_beat = a_beat;
    assign f_a_nb = a_nb;
    assign f_rq_push = rq_push;
    assign f_rq_ready = rq_ready;
`endif
endmodule

`default_nettype wire
