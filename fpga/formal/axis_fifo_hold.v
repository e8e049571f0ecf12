// Proof wrapper: an axis_fifo configured like olaf_queue's output_fifo holds the beat
// it offers on m_axis until it is taken, for any input sequence.
//
// The queue's proof model (olaf_queue_model.ys) cuts the bytes offered to output_fifo
// and reads olaf_queue.v with OLAF_FORMAL_NO_PAYLOAD, which leaves out its
// "m_axis_tdata / tkeep stable while not ready" asserts; this wrapper proves them for
// the FIFO alone with all its inputs free, which covers whatever the queue offers it.
// tvalid, tlast and tid stability stay in the queue's own proof.
`default_nettype none

module axis_fifo_hold #(
    parameter integer DEPTH = 8,          // olaf_queue's OF_DEPTH
    parameter integer DATA_WIDTH = 64,
    parameter integer ID_WIDTH = 1
) (
    input  wire                    clk,
    input  wire                    rst,
    input  wire [DATA_WIDTH-1:0]   s_axis_tdata,
    input  wire [DATA_WIDTH/8-1:0] s_axis_tkeep,
    input  wire                    s_axis_tvalid,
    input  wire                    s_axis_tlast,
    input  wire [ID_WIDTH-1:0]     s_axis_tid,
    input  wire                    m_axis_tready
);
    wire s_axis_tready;
    wire [DATA_WIDTH-1:0] m_axis_tdata;
    wire [DATA_WIDTH/8-1:0] m_axis_tkeep;
    wire m_axis_tvalid, m_axis_tlast;
    wire [ID_WIDTH-1:0] m_axis_tid;

    axis_fifo #(.DEPTH(DEPTH), .DATA_WIDTH(DATA_WIDTH), .KEEP_ENABLE(1), .KEEP_WIDTH(DATA_WIDTH/8),
                .ID_ENABLE(1), .ID_WIDTH(ID_WIDTH)) fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep), .s_axis_tvalid(s_axis_tvalid),
        .s_axis_tready(s_axis_tready), .s_axis_tlast(s_axis_tlast), .s_axis_tid(s_axis_tid),
        .s_axis_tuser(1'b0),
        .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tready(m_axis_tready), .m_axis_tlast(m_axis_tlast), .m_axis_tid(m_axis_tid),
        .m_axis_tuser(),
        .status_depth(), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );

`ifdef FORMAL
    // Same reset and guard as the queue's assertion.
    reg f_past = 1'b0;
    always @(posedge clk) f_past <= 1'b1;
    always @* if (!f_past) assume (rst);
    always @(posedge clk) if (f_past && !rst && !$past(rst) && $past(m_axis_tvalid && !m_axis_tready)) begin
        assert (m_axis_tvalid);
        assert ($stable(m_axis_tdata));
        assert ($stable(m_axis_tkeep));
        assert ($stable(m_axis_tlast));
        assert ($stable(m_axis_tid));
    end
`endif
endmodule

`default_nettype wire
