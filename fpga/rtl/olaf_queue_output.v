// olaf_queue output stage: streams each response of the response FIFO (apply stage)
// into the output FIFO in front of m_axis: the header from the decision (not from the
// segment) and, for DATA, the segment's value beats through segment memory read port B
// (read, BRAM output register, beat), then hands the segment back to the free ring
// (free_seg). A beat is started only when the output FIFO has room for every beat in
// flight, so the read pipeline never stalls.
`default_nettype none
// Comparisons against integer parameters and narrow array indices are deliberate
// zero-extensions / truncations; Verilator would flag every one of them.
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_queue_output #(
    parameter integer DATA_WIDTH = 512,
    parameter integer V = 64,
    parameter integer MAX_CAPACITY = 64,
    parameter integer PENDING_SEGS = 8,
    parameter integer ID_WIDTH = 8,
    // Derived (the top passes only the parameters above; see olaf_queue.v for each).
    parameter integer NB_UPD = (36 + 4 * V + DATA_WIDTH / 8 - 1) / (DATA_WIDTH / 8),
    parameter integer BCW = $clog2(NB_UPD + 1),
    parameter integer AW = $clog2((MAX_CAPACITY + PENDING_SEGS) * NB_UPD),
    parameter integer RQ_W = 1 + AW + ID_WIDTH + 36 * 8
) (
    input  wire                    clk,
    input  wire                    rst,

    // Response FIFO head (olaf_queue_apply).
    input  wire [RQ_W-1:0]         rq_head,
    input  wire                    rq_valid,
    output wire                    rq_pop,

    // A DATA's segment, free again once its last beat has been read.
    output wire                    free_seg_valid,
    output wire [AW-1:0]           free_seg,

    // Segment memory read port B (data two cycles after the address).
    output wire [AW-1:0]           seg_rd_addr,
    input  wire [DATA_WIDTH-1:0]   seg_rd_b,

    output wire [DATA_WIDTH-1:0]   m_axis_tdata,
    output wire [DATA_WIDTH/8-1:0] m_axis_tkeep,
    output wire                    m_axis_tvalid,
    input  wire                    m_axis_tready,
    output wire                    m_axis_tlast,
    output wire [ID_WIDTH-1:0]     m_axis_tid
`ifdef FORMAL
    ,
    output wire [BCW-1:0]          f_o_beat,
    output wire [BCW-1:0]          f_o_nb,
    output wire                    f_p1_valid,
    output wire                    f_p2_valid,
    output wire                    f_of_ready,
    output wire [3:0]              f_of_depth
`endif
);
    localparam integer W = DATA_WIDTH;
    localparam integer BW = W / 8;
    localparam integer HDR = 36;
    localparam integer HB = HDR * 8;
    localparam integer UPD_BYTES = HDR + 4 * V;
    localparam integer NB_HDR = (HDR + BW - 1) / BW;
    localparam integer OF_DEPTH = 8;

    wire o_is_data = rq_head[RQ_W-1];
    wire [AW-1:0] o_seg = rq_head[RQ_W-2 -: AW];
    wire [ID_WIDTH-1:0] o_tid = rq_head[HB +: ID_WIDTH];
    wire [HB-1:0] o_hdr = rq_head[HB-1:0];
    wire [BCW-1:0] o_nb = o_is_data ? NB_UPD[BCW-1:0] : NB_HDR[BCW-1:0];
    reg [BCW-1:0] o_beat;
    reg p1_valid, p2_valid;             // segment read in flight: latch, output register
    wire [$clog2(OF_DEPTH):0] of_depth;
    wire of_ready;
    wire o_go = rq_valid && ({1'b0, of_depth} + p1_valid + p2_valid) < OF_DEPTH;
    wire o_last = o_beat == o_nb - 1'b1;
    assign rq_pop = o_go && o_last;
    assign free_seg_valid = rq_pop && o_is_data;
    assign free_seg = o_seg;

    reg [BCW-1:0] p1_beat, p_beat;
    reg p1_last, p_last;
    reg [15:0] p1_len, p_len;
    reg [HB-1:0] p1_hdr, p_hdr;
    reg [ID_WIDTH-1:0] p1_tid, p_tid;
    wire [HB-1:0] p_hdr_sh = p_hdr >> (p_beat * W);
    wire [W-1:0] p_data;
    wire [BW-1:0] p_keep;
    genvar go;
    generate
        for (go = 0; go < BW; go = go + 1) begin : g_out
            wire [31:0] pos = p_beat * BW + go;
            wire [7:0] hbyte;
            if (go < HDR) begin : g_h
                assign hbyte = p_hdr_sh[8*go +: 8];
            end else begin : g_nh
                assign hbyte = 8'd0;
            end
            assign p_keep[go] = pos < p_len;
            assign p_data[8*go +: 8] = pos < HDR ? hbyte : pos < p_len ? seg_rd_b[8*go +: 8] : 8'd0;
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) begin
            o_beat <= {BCW{1'b0}};
            p1_valid <= 1'b0;
            p2_valid <= 1'b0;
        end else begin
            if (o_go) o_beat <= o_last ? {BCW{1'b0}} : o_beat + 1'b1;
            p1_valid <= o_go;
            p2_valid <= p1_valid;
        end
        p1_beat <= o_beat;
        p1_last <= o_last;
        p1_len <= o_is_data ? UPD_BYTES[15:0] : HDR[15:0];
        p1_hdr <= o_hdr;
        p1_tid <= o_tid;
        p_beat <= p1_beat;
        p_last <= p1_last;
        p_len <= p1_len;
        p_hdr <= p1_hdr;
        p_tid <= p1_tid;
    end

    axis_fifo #(.DEPTH(OF_DEPTH), .DATA_WIDTH(W), .KEEP_ENABLE(1), .KEEP_WIDTH(BW),
                .ID_ENABLE(1), .ID_WIDTH(ID_WIDTH)) output_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata(p_data), .s_axis_tkeep(p_keep), .s_axis_tvalid(p2_valid),
        .s_axis_tready(of_ready), .s_axis_tlast(p_last), .s_axis_tid(p_tid), .s_axis_tuser(1'b0),
        .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tready(m_axis_tready), .m_axis_tlast(m_axis_tlast), .m_axis_tid(m_axis_tid),
        .m_axis_tuser(),
        .status_depth(of_depth), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );

    assign seg_rd_addr = o_seg + o_beat;

`ifdef FORMAL
    assign f_o_beat = o_beat;
    assign f_o_nb = o_nb;
    assign f_p1_valid = p1_valid;
    assign f_p2_valid = p2_valid;
    assign f_of_ready = of_ready;
    assign f_of_depth = of_depth;
`endif
endmodule

`default_nettype wire
