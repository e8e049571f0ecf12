// Reusable AXI-Stream FIFO (in the manner of Forencich's verilog-axis axis_fifo).
//
// First-word-fall-through: the head entry is on m_axis_* as soon as it is committed.
// RAM_PIPELINE = 0 reads the memory asynchronously, which maps the small FIFOs of
// olaf_queue to LUT RAM; RAM_PIPELINE = 1 reads it synchronously into a one-entry
// output register (one more cycle from commit to m_axis, the same throughput), so a
// large FIFO maps to block RAM.
//
// FRAME_FIFO = 1 makes a packet visible to the reader only once its tlast beat is
// in; with it,
//   DROP_BAD_FRAME = 1 discards a packet whose tuser, on its tlast beat, matches
//                      USER_BAD_FRAME_VALUE under USER_BAD_FRAME_MASK (the MAC's
//                      "bad FCS / runt" flag), and
//   DROP_WHEN_FULL = 1 keeps s_axis_tready high and discards a whole packet that
//                      does not fit (a MAC cannot be back-pressured); a packet
//                      longer than DEPTH never fits and is always dropped.
// status_overflow / status_bad_frame / status_good_frame pulse for one cycle
// on the tlast beat of a packet dropped for room, dropped as bad, or kept.
`default_nettype none
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module axis_fifo #(
    parameter integer DEPTH = 16,              // entries, a power of two
    parameter integer DATA_WIDTH = 8,
    parameter integer KEEP_ENABLE = 0,
    parameter integer KEEP_WIDTH = (DATA_WIDTH + 7) / 8,
    parameter integer LAST_ENABLE = 1,
    parameter integer ID_ENABLE = 0,
    parameter integer ID_WIDTH = 8,
    parameter integer USER_ENABLE = 0,
    parameter integer USER_WIDTH = 1,
    parameter integer FRAME_FIFO = 0,
    parameter [USER_WIDTH-1:0] USER_BAD_FRAME_VALUE = 1'b1,
    parameter [USER_WIDTH-1:0] USER_BAD_FRAME_MASK = 1'b1,
    parameter integer DROP_BAD_FRAME = 0,
    parameter integer DROP_WHEN_FULL = 0,
    parameter integer RAM_PIPELINE = 0
) (
    input  wire                   clk,
    input  wire                   rst,

    input  wire [DATA_WIDTH-1:0]  s_axis_tdata,
    input  wire [KEEP_WIDTH-1:0]  s_axis_tkeep,
    input  wire                   s_axis_tvalid,
    output wire                   s_axis_tready,
    input  wire                   s_axis_tlast,
    input  wire [ID_WIDTH-1:0]    s_axis_tid,
    input  wire [USER_WIDTH-1:0]  s_axis_tuser,

    output wire [DATA_WIDTH-1:0]  m_axis_tdata,
    output wire [KEEP_WIDTH-1:0]  m_axis_tkeep,
    output wire                   m_axis_tvalid,
    input  wire                   m_axis_tready,
    output wire                   m_axis_tlast,
    output wire [ID_WIDTH-1:0]    m_axis_tid,
    output wire [USER_WIDTH-1:0]  m_axis_tuser,

    output wire [$clog2(DEPTH):0] status_depth,   // committed entries in the memory
    output reg                    status_overflow,
    output reg                    status_bad_frame,
    output reg                    status_good_frame
);
    localparam integer AW = DEPTH > 1 ? $clog2(DEPTH) : 1;
    localparam integer KW = KEEP_ENABLE ? KEEP_WIDTH : 0;
    localparam integer LW = LAST_ENABLE ? 1 : 0;
    localparam integer IW = ID_ENABLE ? ID_WIDTH : 0;
    localparam integer UW = USER_ENABLE ? USER_WIDTH : 0;
    localparam integer EW = DATA_WIDTH + KW + LW + IW + UW;

    initial begin
        if ((1 << AW) != DEPTH) $error("axis_fifo DEPTH must be a power of two");
        if ((DROP_BAD_FRAME || DROP_WHEN_FULL) && !FRAME_FIFO)
            $error("axis_fifo frame dropping needs FRAME_FIFO = 1");
        if (DROP_BAD_FRAME && !USER_ENABLE) $error("axis_fifo DROP_BAD_FRAME needs USER_ENABLE");
    end

    reg [EW-1:0] mem [0:DEPTH-1];
    reg [AW:0] wr_ptr_commit, wr_ptr_cur, rd_ptr;
    reg drop_frame;                        // discarding the rest of the current packet

    // Pack the enabled sideband fields after the data.
    wire [EW-1:0] s_word;
    wire [EW-1:0] m_word;
    assign s_word[DATA_WIDTH-1:0] = s_axis_tdata;
    assign m_axis_tdata = m_word[DATA_WIDTH-1:0];
    generate
        if (KEEP_ENABLE) begin : g_keep
            assign s_word[DATA_WIDTH +: KW] = s_axis_tkeep;
            assign m_axis_tkeep = m_word[DATA_WIDTH +: KW];
        end else begin : g_nokeep
            assign m_axis_tkeep = {KEEP_WIDTH{1'b1}};
        end
        if (LAST_ENABLE) begin : g_last
            assign s_word[DATA_WIDTH + KW] = s_axis_tlast;
            assign m_axis_tlast = m_word[DATA_WIDTH + KW];
        end else begin : g_nolast
            assign m_axis_tlast = 1'b1;
        end
        if (ID_ENABLE) begin : g_id
            assign s_word[DATA_WIDTH + KW + LW +: IW] = s_axis_tid;
            assign m_axis_tid = m_word[DATA_WIDTH + KW + LW +: IW];
        end else begin : g_noid
            assign m_axis_tid = {ID_WIDTH{1'b0}};
        end
        if (USER_ENABLE) begin : g_user
            assign s_word[DATA_WIDTH + KW + LW + IW +: UW] = s_axis_tuser;
            assign m_axis_tuser = m_word[DATA_WIDTH + KW + LW + IW +: UW];
        end else begin : g_nouser
            assign m_axis_tuser = {USER_WIDTH{1'b0}};
        end
    endgenerate

    wire full_cur = wr_ptr_cur == {~rd_ptr[AW], rd_ptr[AW-1:0]};
    wire empty = wr_ptr_commit == rd_ptr;
    // A packet that fills the whole FIFO before its end can never be committed.
    wire frame_too_long = FRAME_FIFO && wr_ptr_cur == {~wr_ptr_commit[AW], wr_ptr_commit[AW-1:0]};
    assign s_axis_tready = DROP_WHEN_FULL ? 1'b1 : !full_cur;
    assign status_depth = wr_ptr_commit - rd_ptr;

    // Read side: rd_ptr advances when an entry leaves the memory.
    wire rd_take;
    generate
        if (RAM_PIPELINE) begin : g_rd_reg
            reg [EW-1:0] out_word;
            reg out_valid;
            assign rd_take = !empty && (!out_valid || m_axis_tready);
            always @(posedge clk) begin
                if (rd_take) out_word <= mem[rd_ptr[AW-1:0]];
                if (rst) out_valid <= 1'b0;
                else out_valid <= rd_take || (out_valid && !m_axis_tready);
            end
            assign m_word = out_word;
            assign m_axis_tvalid = out_valid;
        end else begin : g_rd_async
            assign m_word = mem[rd_ptr[AW-1:0]];
            assign m_axis_tvalid = !empty;
            assign rd_take = m_axis_tvalid && m_axis_tready;
        end
    endgenerate

    wire s_fire = s_axis_tvalid && s_axis_tready;
    wire bad = DROP_BAD_FRAME && USER_ENABLE
             && ((s_axis_tuser & USER_BAD_FRAME_MASK) == (USER_BAD_FRAME_VALUE & USER_BAD_FRAME_MASK));
    // Room for this beat: dropping mode discards instead of overflowing.
    wire no_room = full_cur || frame_too_long;
    wire store = s_fire && !drop_frame && !(DROP_WHEN_FULL && no_room);

    always @(posedge clk) begin
        status_overflow <= 1'b0;
        status_bad_frame <= 1'b0;
        status_good_frame <= 1'b0;
        if (rst) begin
            wr_ptr_commit <= {(AW + 1){1'b0}};
            wr_ptr_cur <= {(AW + 1){1'b0}};
            rd_ptr <= {(AW + 1){1'b0}};
            drop_frame <= 1'b0;
        end else begin
            if (store) mem[wr_ptr_cur[AW-1:0]] <= s_word;
            if (!FRAME_FIFO) begin
                if (store) begin
                    wr_ptr_cur <= wr_ptr_cur + 1'b1;
                    wr_ptr_commit <= wr_ptr_cur + 1'b1;
                end
            end else if (s_fire) begin
                if (drop_frame || (DROP_WHEN_FULL && no_room)) begin
                    // Discard up to and including tlast, then start clean.
                    wr_ptr_cur <= wr_ptr_commit;
                    drop_frame <= !s_axis_tlast;
                    if (s_axis_tlast) status_overflow <= 1'b1;
                end else if (s_axis_tlast) begin
                    if (bad) begin
                        wr_ptr_cur <= wr_ptr_commit;
                        status_bad_frame <= 1'b1;
                    end else begin
                        wr_ptr_cur <= wr_ptr_cur + 1'b1;
                        wr_ptr_commit <= wr_ptr_cur + 1'b1;
                        status_good_frame <= 1'b1;
                    end
                end else begin
                    wr_ptr_cur <= wr_ptr_cur + 1'b1;
                end
            end
            if (rd_take) rd_ptr <= rd_ptr + 1'b1;
        end
    end

`ifdef FORMAL
    // The committed region never exceeds the FIFO, and the write position never
    // overtakes the reader.
    // Pointer differences are modulo 2 * DEPTH, like the pointers.
    wire [AW:0] f_written = wr_ptr_cur - rd_ptr;
    wire [AW:0] f_open = wr_ptr_cur - wr_ptr_commit;
    reg f_past = 1'b0;
    always @(posedge clk) f_past <= 1'b1;
    always @(posedge clk) if (f_past && !rst && !$past(rst)) begin
        assert (status_depth <= DEPTH);
        assert (f_written <= DEPTH);
        assert (f_open <= f_written);
    end
`endif
endmodule

`default_nettype wire
