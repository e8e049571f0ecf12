// OlafQueue as a streaming block (DESIGN.md §3), bit-exact with dataplane/queue.py.
//
// Input:  AXI-Stream slave, one OLAF UDP payload per packet (36-byte header, then
//         V big-endian int32 values); payload byte 0 travels in tdata[7:0].
// Output: AXI-Stream master, one response payload per answered message
//         (ACK per UPDATE, DATA or EMPTY per PULL), same byte order.
//
// Pipeline (every stage moves one beat per cycle; see fpga/README.md):
//   ingest  - accepts beats, captures the header, stages value beats in the beat FIFO;
//   decide  - one cycle after tlast: validates, looks up [cluster][block], runs the
//             queue rule, commits all metadata / pointers / counters, and queues a
//             decision with the response header (feedback is computed after the op);
//   apply   - in message order, writes (ENQUEUED / REPLACED) or saturating-adds
//             (MERGED) the staged beats into the slot's segment, then hands the
//             response to the output list;
//   output  - streams response headers and, for DATA, the segment's value beats,
//             then returns the segment to the free list.
//
// Segments are fixed 1500-byte buffers. A popped slot's segment stays owned by its
// DATA until the last beat has been read out, so segments (MAX_CAPACITY +
// PENDING_SEGS of them) are handed out from a free list rather than tied to slots.
`default_nettype none
// Comparisons against integer parameters and narrow array indices are deliberate
// zero-extensions / truncations; Verilator would flag every one of them.
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_queue #(
    parameter integer DATA_WIDTH = 512,
    parameter integer V = 64,
    parameter integer MAX_CAPACITY = 64,
    parameter integer MAX_CLUSTERS = 16,
    parameter integer MAX_BLOCKS = 1024,
    parameter integer PENDING_SEGS = 8,
    parameter integer SEGMENT_BYTES = 1500
) (
    input  wire                    clk,
    input  wire                    rst,

    input  wire [DATA_WIDTH-1:0]   s_axis_tdata,
    input  wire [DATA_WIDTH/8-1:0] s_axis_tkeep,
    input  wire                    s_axis_tvalid,
    output wire                    s_axis_tready,
    input  wire                    s_axis_tlast,

    output wire [DATA_WIDTH-1:0]   m_axis_tdata,
    output wire [DATA_WIDTH/8-1:0] m_axis_tkeep,
    output wire                    m_axis_tvalid,
    input  wire                    m_axis_tready,
    output wire                    m_axis_tlast,

    // Configuration, bounded by the parameters. capacity / max_clusters / max_blocks /
    // frac_bits may change only while rst is high; mode and thresholds at any time.
    input  wire [15:0]             cfg_capacity,
    input  wire [16:0]             cfg_max_clusters,
    input  wire [16:0]             cfg_max_blocks,
    input  wire [7:0]              cfg_frac_bits,
    input  wire                    cfg_mode,              // 0 OLAF, 1 FIFO
    input  wire [30:0]             cfg_threshold,         // raw fixed point, 0..2^31-1
    input  wire [7:0]              cfg_congestion_threshold,

    // Counter read port: 0..5 per outcome, 8+t per msg_type t (1..6), 16+v per
    // invalid verdict v (1..9), 26 occupied, 27 write_ptr, 28 read_ptr,
    // 29 append_out_addr, 30 append_available_addr, 31 segments awaiting readout.
    input  wire [4:0]              cnt_sel,
    output reg  [31:0]             cnt_value,
    output wire [15:0]             stat_occupied,
    output wire [7:0]              stat_active_clusters,
    output wire [7:0]              stat_queue_util,
    output wire                    stat_congested
);
    // ------------------------------------------------------------------ sizes
    localparam integer W = DATA_WIDTH;
    localparam integer BW = W / 8;
    localparam integer LANES = W / 32;
    localparam integer HDR = 36;
    localparam integer HB = HDR * 8;
    localparam integer UPD_BYTES = HDR + 4 * V;
    localparam integer NB_UPD = (UPD_BYTES + BW - 1) / BW;
    localparam integer NB_HDR = (HDR + BW - 1) / BW;
    localparam integer SEG_BEATS = (SEGMENT_BYTES + BW - 1) / BW;
    localparam integer NSEG = MAX_CAPACITY + PENDING_SEGS;
    localparam integer SW = MAX_CAPACITY > 1 ? $clog2(MAX_CAPACITY) : 1;
    localparam integer GW = $clog2(NSEG);
    localparam integer AW = $clog2(NSEG * SEG_BEATS);
    localparam integer CW = MAX_CLUSTERS > 1 ? $clog2(MAX_CLUSTERS) : 1;
    localparam integer KW = MAX_BLOCKS > 1 ? $clog2(MAX_BLOCKS) : 1;
    localparam integer IW = CW + KW;
    localparam integer OW = $clog2(MAX_CAPACITY + 1);
    localparam integer PW = $clog2(PENDING_SEGS + 1);
    localparam integer BCW = $clog2(NB_UPD + 1);
    localparam integer BF_AW = $clog2(2 * NB_UPD + 4);
    localparam integer BF_DEPTH = 1 << BF_AW;
    localparam integer DQ_AW = 2;   // decision FIFO: 4 entries
    localparam integer RQ_AW = 2;   // response (output-order) list: 4 entries
    localparam integer OF_DEPTH = 4;

    localparam [1:0] OP_NONE = 2'd0, OP_STORE = 2'd1, OP_MERGE = 2'd2;
    localparam [1:0] RESP_NONE = 2'd0, RESP_HDR = 2'd1, RESP_DATA = 2'd2;
    localparam [3:0] T_UPDATE = 4'd1, T_ACK = 4'd2, T_PULL = 4'd3, T_DATA = 4'd4,
                     T_EMPTY = 4'd5, T_MODEL = 4'd6;
    localparam [7:0] O_ENQUEUED = 8'd0, O_MERGED = 8'd1, O_REPLACED = 8'd2,
                     O_DROPPED_REWARD = 8'd3, O_DROPPED_FULL = 8'd4, O_DROPPED_INVALID = 8'd5;
    localparam [3:0] VD_OK = 4'd0, VD_SHORT = 4'd1, VD_BAD_VERSION = 4'd2, VD_BAD_TYPE = 4'd3,
                     VD_BAD_PULL = 4'd4, VD_NOT_FROM_HOST = 4'd5, VD_BAD_LENGTH = 4'd6,
                     VD_BAD_FRAC_BITS = 4'd7, VD_CLUSTER_RANGE = 4'd8, VD_BLOCK_RANGE = 4'd9;

    initial begin
        if (W % 32 != 0 || W < 64) $error("DATA_WIDTH must be a multiple of 32, >= 64");
        if (UPD_BYTES > SEGMENT_BYTES) $error("an UPDATE must fit one segment");
        // The apply stage's read-modify-write relies on consecutive UPDATEs being
        // at least two beats apart.
        if (NB_UPD < 2) $error("an UPDATE must span at least two beats");
        if (V < 1 || V > 255) $error("V must be 1..255 on the wire");
    end

    // ------------------------------------------------------------------ helpers
    function [15:0] bswap16(input [15:0] x);
        bswap16 = {x[7:0], x[15:8]};
    endfunction
    function [31:0] bswap32(input [31:0] x);
        bswap32 = {x[7:0], x[15:8], x[23:16], x[31:24]};
    endfunction
    // A header is 36 stream bytes, byte i at bits [8i +: 8]; fields are big-endian.
    function [15:0] hf16(input [HB-1:0] h, input integer off);
        hf16 = bswap16(h[8*off +: 16]);
    endfunction
    function [31:0] hf32(input [HB-1:0] h, input integer off);
        hf32 = bswap32(h[8*off +: 32]);
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

    // ------------------------------------------------------------------ state
    // Slot metadata (logical ring positions), kept in flops: the decide stage reads
    // the looked-up slot and the head slot in the same cycle.
    reg [15:0] m_cluster [0:MAX_CAPACITY-1];
    reg [15:0] m_worker  [0:MAX_CAPACITY-1];
    reg [15:0] m_block   [0:MAX_CAPACITY-1];
    reg [15:0] m_agg     [0:MAX_CAPACITY-1];
    reg [31:0] m_seq     [0:MAX_CAPACITY-1];
    reg [31:0] m_mv      [0:MAX_CAPACITY-1];
    reg [31:0] m_reward  [0:MAX_CAPACITY-1];
    reg [31:0] m_gen     [0:MAX_CAPACITY-1];
    reg [31:0] m_contrib [0:MAX_CAPACITY-1];
    reg [GW-1:0] m_seg   [0:MAX_CAPACITY-1];
    reg [MAX_CAPACITY-1:0] live;        // slot is queued (between read_ptr and write_ptr)

    // [cluster][block] -> slot. An entry is trusted only if its slot is live and holds
    // that key, which makes reset and PULL's "clear if it points at the popped slot"
    // free: popping a slot (or reusing it for another key) invalidates the entry.
    reg [SW-1:0] index_mem [0:(1<<IW)-1];

    reg [W-1:0] seg_mem [0:NSEG*SEG_BEATS-1];

    reg [OW-1:0] cluster_count [0:MAX_CLUSTERS-1];
    reg [15:0] active_clusters;
    reg [SW-1:0] write_ptr, read_ptr;
    reg [OW-1:0] occupied;
    // 255*occupied = util_q*capacity + util_r, kept incrementally so that
    // queue_util = util_q exactly with a runtime capacity and no divider in the loop.
    reg [7:0] util_q;
    reg [15:0] util_r;

    // Free segments: a ring holding every segment not owned by a slot or a DATA.
    reg [GW-1:0] free_list [0:NSEG-1];
    reg [GW-1:0] avail_head, append_available_addr;
    reg [PW-1:0] pending;               // popped segments not yet read out

    reg [31:0] cnt_outcome [0:5];
    reg [31:0] cnt_type    [1:6];
    reg [31:0] cnt_invalid [1:9];

    integer i;
`ifndef SYNTHESIS
    initial begin
        // FPGA block RAM powers up zeroed; give the simulators the same contents
        // (no X ever reaches m_axis). Synthesis needs no init loop for that.
        for (i = 0; i < (1 << IW); i = i + 1) index_mem[i] = {SW{1'b0}};
        for (i = 0; i < NSEG * SEG_BEATS; i = i + 1) seg_mem[i] = {W{1'b0}};
    end
`endif

    // ------------------------------------------------------------------ config
    wire [15:0] cap = (cfg_capacity == 16'd0) ? 16'd1
                    : (cfg_capacity > MAX_CAPACITY) ? MAX_CAPACITY[15:0] : cfg_capacity;
    wire [16:0] max_cl = (cfg_max_clusters > MAX_CLUSTERS) ? MAX_CLUSTERS[16:0] : cfg_max_clusters;
    wire [16:0] max_bk = (cfg_max_blocks > MAX_BLOCKS) ? MAX_BLOCKS[16:0] : cfg_max_blocks;
    // Static configuration: this divide is a multicycle / false path in synthesis.
    wire [15:0] util_div = 16'd255 / cap;
    wire [7:0] util_step_q = util_div[7:0];
    wire [15:0] util_step_r = 16'd255 % cap;

    // ------------------------------------------------------------------ FIFOs
    // Beat FIFO: value-carrying beats of messages waiting for their decision.
    reg [W-1:0] bf_mem [0:BF_DEPTH-1];
    reg [BF_AW-1:0] bf_wr, bf_rd;
    reg [BF_AW:0] bf_count;

    // Decision FIFO.
    localparam integer DQ_W = 2 + GW + BCW + 2 + HB;
    reg [DQ_W-1:0] dq_mem [0:(1<<DQ_AW)-1];
    reg [DQ_AW-1:0] dq_wr, dq_rd;
    reg [DQ_AW:0] dq_count;

    // Response list in output order: header, and for DATA the segment to read out.
    localparam integer RQ_W = 1 + GW + HB;
    reg [RQ_W-1:0] rq_mem [0:(1<<RQ_AW)-1];
    reg [RQ_AW-1:0] append_out_addr, rq_rd;
    reg [RQ_AW:0] rq_count;

    // Output beat FIFO in front of m_axis.
    reg [W-1:0] of_data [0:OF_DEPTH-1];
    reg [BW-1:0] of_keep [0:OF_DEPTH-1];
    reg of_last [0:OF_DEPTH-1];
    reg [1:0] of_wr, of_rd;
    reg [2:0] of_count;

    // ------------------------------------------------------------------ ingest
    reg [15:0] in_beat;
    reg [15:0] in_len;
    reg [HB-1:0] in_hdr;
    reg d_valid;

    wire in_ready = !rst
                  && bf_count < BF_DEPTH
                  && dq_count <= (1 << DQ_AW) - 2
                  && ({1'b0, pending} + d_valid) < PENDING_SEGS;
    assign s_axis_tready = in_ready;
    wire in_fire = s_axis_tvalid && in_ready;

    reg [$clog2(BW+1)-1:0] keep_cnt;
    integer k;
    always @* begin
        keep_cnt = 0;
        for (k = 0; k < BW; k = k + 1) keep_cnt = keep_cnt + s_axis_tkeep[k];
    end
    wire [16:0] len_sum = {1'b0, in_len} + keep_cnt;
    wire [15:0] len_next = len_sum[16] ? 16'hffff : len_sum[15:0];

    wire [HB-1:0] hdr_next;
    genvar gb;
    generate
        for (gb = 0; gb < HDR; gb = gb + 1) begin : g_hdr
            assign hdr_next[8*gb +: 8] = (in_beat == gb / BW) ? s_axis_tdata[8*(gb % BW) +: 8]
                                                             : in_hdr[8*gb +: 8];
        end
    endgenerate
    wire [15:0] next_cluster = hf16(hdr_next, 2);
    wire [15:0] next_block = hf16(hdr_next, 6);
    wire [IW-1:0] key_next = {next_cluster[CW-1:0], next_block[KW-1:0]};

    // Decide-stage inputs, registered at tlast.
    reg [HB-1:0] d_hdr;
    reg [15:0] d_len;
    reg [BCW-1:0] d_nb;
    reg [SW-1:0] idx_rd;
    reg lw_valid;                       // last index write, bypassed into the next lookup
    reg [IW-1:0] lw_addr;
    reg [SW-1:0] lw_data;

    always @(posedge clk) begin
        if (rst) begin
            in_beat <= 16'd0;
            in_len <= 16'd0;
            d_valid <= 1'b0;
        end else begin
            d_valid <= in_fire && s_axis_tlast;
            if (in_fire) begin
                in_hdr <= hdr_next;
                if (s_axis_tlast) begin
                    in_beat <= 16'd0;
                    in_len <= 16'd0;
                    d_hdr <= hdr_next;
                    d_len <= len_next;
                    d_nb <= (in_beat < NB_UPD) ? in_beat[BCW-1:0] + 1'b1 : NB_UPD[BCW-1:0];
                end else begin
                    in_beat <= (in_beat == 16'hffff) ? in_beat : in_beat + 16'd1;
                    in_len <= len_next;
                end
            end
        end
        if (in_fire && s_axis_tlast) idx_rd <= index_mem[key_next];
    end

    // ------------------------------------------------------------------ decide
    wire [3:0] u_ver = d_hdr[7:4];
    wire [3:0] u_type = d_hdr[3:0];
    wire [15:0] u_cluster = hf16(d_hdr, 2);
    wire [15:0] u_worker = hf16(d_hdr, 4);
    wire [15:0] u_block = hf16(d_hdr, 6);
    wire [15:0] u_agg = hf16(d_hdr, 8);
    wire [7:0] u_nv = d_hdr[8*13 +: 8];
    wire [7:0] u_frac = d_hdr[8*14 +: 8];
    wire [31:0] u_seq = hf32(d_hdr, 16);
    wire [31:0] u_mv = hf32(d_hdr, 20);
    wire [31:0] u_reward = hf32(d_hdr, 24);
    wire [31:0] u_gen = hf32(d_hdr, 28);
    wire [31:0] u_contrib = hf32(d_hdr, 32);
    wire [IW-1:0] u_key = {u_cluster[CW-1:0], u_block[KW-1:0]};
    wire [CW-1:0] u_cl = u_cluster[CW-1:0];

    // Same precedence as worker_transport.codec.classify (the most basic failure wins).
    reg [3:0] verdict;
    always @* begin
        if (d_len < HDR) verdict = VD_SHORT;
        else if (u_ver != 4'd1) verdict = VD_BAD_VERSION;
        else if (u_type < T_UPDATE || u_type > T_MODEL) verdict = VD_BAD_TYPE;
        else if (u_type == T_PULL && (u_nv != 8'd0 || d_len != HDR)) verdict = VD_BAD_PULL;
        else if (u_type == T_ACK || u_type == T_DATA || u_type == T_EMPTY) verdict = VD_NOT_FROM_HOST;
        else if (u_type == T_UPDATE && (u_nv != V || d_len != HDR + 4 * u_nv)) verdict = VD_BAD_LENGTH;
        else if (u_type == T_UPDATE && u_frac != cfg_frac_bits) verdict = VD_BAD_FRAC_BITS;
        else if (u_type == T_UPDATE && {1'b0, u_cluster} >= max_cl) verdict = VD_CLUSTER_RANGE;
        else if (u_type == T_UPDATE && {1'b0, u_block} >= max_bk) verdict = VD_BLOCK_RANGE;
        else verdict = VD_OK;
    end
    wire answered_invalid = verdict >= VD_BAD_LENGTH;
    wire counted_type = verdict != VD_SHORT && verdict != VD_BAD_VERSION && verdict != VD_BAD_TYPE;
    wire is_update = verdict == VD_OK && u_type == T_UPDATE;
    wire is_pull = verdict == VD_OK && u_type == T_PULL;

    // Lookup: the RAM read was issued at tlast; the write made in that same cycle
    // (by the previous message's decide) is bypassed.
    wire [SW-1:0] s = (lw_valid && lw_addr == u_key) ? lw_data : idx_rd;
    wire hit = live[s] && m_cluster[s] == u_cluster && m_block[s] == u_block;
    wire [15:0] s_agg = m_agg[s];
    wire [15:0] s_worker = m_worker[s];
    wire [31:0] s_reward = m_reward[s];
    wire [32:0] rdiff = {u_reward[31], u_reward} - {s_reward[31], s_reward};
    wire [32:0] rabs = rdiff[32] ? -rdiff : rdiff;
    wire close = rabs < {2'b00, cfg_threshold};
    wire u_higher = $signed(u_reward) > $signed(s_reward);
    wire full = occupied == cap[OW-1:0];

    reg [7:0] outcome;
    always @* begin
        if (!cfg_mode && hit) begin
            if (s_agg == 16'd1 && s_worker == u_worker) outcome = O_REPLACED;
            else if (close) outcome = O_MERGED;
            else if (u_higher) outcome = O_REPLACED;
            else outcome = O_DROPPED_REWARD;
        end else if (full) outcome = O_DROPPED_FULL;
        else outcome = O_ENQUEUED;
    end
    wire do_enqueue = is_update && outcome == O_ENQUEUED;
    wire do_store = is_update && outcome == O_REPLACED;
    wire do_merge = is_update && outcome == O_MERGED;
    wire do_pop = is_pull && occupied != 0;

    // The head slot, for PULL.
    wire [SW-1:0] r = read_ptr;
    wire [15:0] r_cluster = m_cluster[r];
    wire [CW-1:0] r_cl = r_cluster[CW-1:0];
    wire [OW-1:0] u_cl_count = cluster_count[u_cl];
    wire [OW-1:0] r_cl_count = cluster_count[r_cl];

    // Feedback after the operation.
    wire [16:0] up_r_sum = {1'b0, util_r} + {1'b0, util_step_r};
    wire up_carry = up_r_sum >= {1'b0, cap};
    wire [7:0] util_up_q = util_q + util_step_q + up_carry;
    wire [16:0] up_r_next = up_carry ? up_r_sum - {1'b0, cap} : up_r_sum;
    wire [15:0] util_up_r = up_r_next[15:0];
    wire down_borrow = util_r < util_step_r;
    wire [7:0] util_down_q = util_q - util_step_q - down_borrow;
    wire [15:0] util_down_r = down_borrow ? util_r + cap - util_step_r : util_r - util_step_r;
    wire [7:0] util_after = do_enqueue ? util_up_q : do_pop ? util_down_q : util_q;
    wire [15:0] active_after = active_clusters
                             + (do_enqueue && u_cl_count == 0)
                             - (do_pop && r_cl_count == 1);
    wire [7:0] active_fb = active_after > 16'd255 ? 8'd255 : active_after[7:0];
    wire [7:0] flags_fb = {7'd0, util_after >= cfg_congestion_threshold};

    wire [HB-1:0] ack_hdr = {d_hdr[HB-1:8*14], 8'd0, util_after, active_fb,
                             is_update ? outcome : O_DROPPED_INVALID,
                             d_hdr[8*10-1:8*2], flags_fb, u_ver, T_ACK};
    wire [HB-1:0] data_hdr = {bswap32(m_contrib[r]), bswap32(m_gen[r]), bswap32(m_reward[r]),
                              bswap32(m_mv[r]), bswap32(m_seq[r]),
                              8'd0, cfg_frac_bits, V[7:0], util_after, active_fb, O_ENQUEUED,
                              bswap16(m_agg[r]), bswap16(m_block[r]), bswap16(m_worker[r]),
                              bswap16(r_cluster), flags_fb, 4'd1, T_DATA};
    wire [HB-1:0] empty_hdr = {160'd0, 8'd0, cfg_frac_bits, 8'd0, util_after, active_fb,
                               O_ENQUEUED, 64'd0, flags_fb, 4'd1, T_EMPTY};

    wire [GW-1:0] alloc_seg = free_list[avail_head];
    reg [1:0] dq_op;
    reg [GW-1:0] dq_seg;
    reg [1:0] dq_resp;
    reg [HB-1:0] dq_hdr;
    always @* begin
        dq_op = OP_NONE;
        dq_seg = m_seg[s];
        dq_resp = RESP_NONE;
        dq_hdr = ack_hdr;
        if (is_update || answered_invalid) dq_resp = RESP_HDR;
        if (do_enqueue) begin
            dq_op = OP_STORE;
            dq_seg = alloc_seg;
        end else if (do_store) dq_op = OP_STORE;
        else if (do_merge) dq_op = OP_MERGE;
        if (is_pull) begin
            dq_resp = do_pop ? RESP_DATA : RESP_HDR;
            dq_hdr = do_pop ? data_hdr : empty_hdr;
            dq_seg = m_seg[r];
        end
    end
    wire dq_push = d_valid;

    wire [15:0] merged_agg = (s_agg == 16'hffff) ? s_agg : s_agg + 16'd1;
    wire [SW-1:0] ws = write_ptr;
    wire [SW-1:0] tgt = do_enqueue ? ws : s;

    // Output engine frees a segment after reading out its last DATA beat.
    wire free_seg_valid;
    wire [GW-1:0] free_seg;

    always @(posedge clk) begin
        lw_valid <= 1'b0;
        if (rst) begin
            live <= {MAX_CAPACITY{1'b0}};
            for (i = 0; i < MAX_CLUSTERS; i = i + 1) cluster_count[i] <= {OW{1'b0}};
            active_clusters <= 16'd0;
            write_ptr <= {SW{1'b0}};
            read_ptr <= {SW{1'b0}};
            occupied <= {OW{1'b0}};
            util_q <= 8'd0;
            util_r <= 16'd0;
            for (i = 0; i < NSEG; i = i + 1) free_list[i] <= i[GW-1:0];
            avail_head <= {GW{1'b0}};
            append_available_addr <= {GW{1'b0}};
            pending <= {PW{1'b0}};
            for (i = 0; i < 6; i = i + 1) cnt_outcome[i] <= 32'd0;
            for (i = 1; i < 7; i = i + 1) cnt_type[i] <= 32'd0;
            for (i = 1; i < 10; i = i + 1) cnt_invalid[i] <= 32'd0;
        end else begin
            if (free_seg_valid) begin
                free_list[append_available_addr] <= free_seg;
                append_available_addr <= (append_available_addr == NSEG - 1)
                                         ? {GW{1'b0}} : append_available_addr + 1'b1;
            end
            pending <= pending + (d_valid && do_pop) - free_seg_valid;
            if (d_valid) begin
                if (counted_type) cnt_type[u_type] <= cnt_type[u_type] + 32'd1;
                if (verdict != VD_OK) begin
                    cnt_invalid[verdict] <= cnt_invalid[verdict] + 32'd1;
                    cnt_outcome[O_DROPPED_INVALID] <= cnt_outcome[O_DROPPED_INVALID] + 32'd1;
                end
                if (is_update) cnt_outcome[outcome] <= cnt_outcome[outcome] + 32'd1;

                if (do_enqueue || do_store) begin
                    m_cluster[tgt] <= u_cluster;
                    m_worker[tgt] <= u_worker;
                    m_block[tgt] <= u_block;
                    m_agg[tgt] <= u_agg;
                    m_seq[tgt] <= u_seq;
                    m_mv[tgt] <= u_mv;
                    m_reward[tgt] <= u_reward;
                    m_gen[tgt] <= u_gen;
                    m_contrib[tgt] <= u_contrib;
                end
                if (do_merge) begin
                    m_agg[s] <= merged_agg;
                    if (u_higher) m_reward[s] <= u_reward;
                    if (u_gen < m_gen[s]) m_gen[s] <= u_gen;
                    if (u_mv < m_mv[s]) m_mv[s] <= u_mv;
                    m_contrib[s] <= m_contrib[s] | u_contrib;
                end
                if (do_enqueue) begin
                    m_seg[ws] <= alloc_seg;
                    avail_head <= (avail_head == NSEG - 1) ? {GW{1'b0}} : avail_head + 1'b1;
                    index_mem[u_key] <= ws;
                    lw_valid <= 1'b1;
                    lw_addr <= u_key;
                    lw_data <= ws;
                    write_ptr <= (ws == cap - 1) ? {SW{1'b0}} : ws + 1'b1;
                end
                if (do_pop)
                    read_ptr <= (r == cap - 1) ? {SW{1'b0}} : r + 1'b1;
                if (do_enqueue) begin
                    live[ws] <= 1'b1;
                    cluster_count[u_cl] <= u_cl_count + 1'b1;
                end
                if (do_pop) begin
                    live[r] <= 1'b0;
                    cluster_count[r_cl] <= r_cl_count - 1'b1;
                end
                if (do_enqueue) begin
                    occupied <= occupied + 1'b1;
                    util_q <= util_up_q;
                    util_r <= util_up_r;
                end else if (do_pop) begin
                    occupied <= occupied - 1'b1;
                    util_q <= util_down_q;
                    util_r <= util_down_r;
                end
                active_clusters <= active_after;
            end
        end
    end

    // Decision FIFO push/pop.
    wire [DQ_W-1:0] dq_head = dq_mem[dq_rd];
    wire [1:0] a_op = dq_head[DQ_W-1 -: 2];
    wire [GW-1:0] a_seg = dq_head[DQ_W-3 -: GW];
    wire [BCW-1:0] a_nb = dq_head[DQ_W-3-GW -: BCW];
    wire [1:0] a_resp = dq_head[HB+1:HB];
    wire [HB-1:0] a_hdr = dq_head[HB-1:0];

    // ------------------------------------------------------------------ apply
    reg [BCW-1:0] a_beat;
    wire a_has = dq_count != 0;
    wire a_needs_resp = a_resp != RESP_NONE && a_beat == 0;
    wire a_go = a_has && !(a_needs_resp && rq_count == (1 << RQ_AW));
    wire a_last = a_beat == a_nb - 1'b1;
    wire [AW-1:0] a_addr = a_seg * SEG_BEATS + a_beat;
    wire [W-1:0] bf_head = bf_mem[bf_rd];

    // Stage 2: the write (STORE) or read-modify-write (MERGE) one cycle later.
    reg s2_valid, s2_merge, s2_fwd;
    reg [AW-1:0] s2_addr;
    reg [W-1:0] s2_new, s2_fwd_data, seg_rd_a;
    wire [W-1:0] s2_old = s2_fwd ? s2_fwd_data : seg_rd_a;
    wire [W-1:0] s2_wdata = s2_merge ? sat_add_beat(s2_old, s2_new) : s2_new;

    always @(posedge clk) begin
        if (rst) begin
            a_beat <= {BCW{1'b0}};
            s2_valid <= 1'b0;
        end else begin
            s2_valid <= a_go && a_op != OP_NONE;
            if (a_go) a_beat <= a_last ? {BCW{1'b0}} : a_beat + 1'b1;
        end
        s2_merge <= a_op == OP_MERGE;
        s2_addr <= a_addr;
        s2_new <= bf_head;
        s2_fwd <= s2_valid && s2_addr == a_addr;
        s2_fwd_data <= s2_wdata;
        seg_rd_a <= seg_mem[a_addr];
        if (s2_valid) seg_mem[s2_addr] <= s2_wdata;
    end

    // FIFO bookkeeping for the beat, decision and response FIFOs.
    wire bf_push = in_fire && in_beat < NB_UPD;
    wire bf_pop = a_go;
    wire dq_pop = a_go && a_last;
    wire rq_push = a_go && a_needs_resp;
    wire rq_pop;
    always @(posedge clk) begin
        if (rst) begin
            bf_wr <= 0; bf_rd <= 0; bf_count <= 0;
            dq_wr <= 0; dq_rd <= 0; dq_count <= 0;
            append_out_addr <= 0; rq_rd <= 0; rq_count <= 0;
        end else begin
            if (bf_push) begin
                bf_mem[bf_wr] <= s_axis_tdata;
                bf_wr <= bf_wr + 1'b1;
            end
            if (bf_pop) bf_rd <= bf_rd + 1'b1;
            bf_count <= bf_count + bf_push - bf_pop;
            if (dq_push) begin
                dq_mem[dq_wr] <= {dq_op, dq_seg, d_nb, dq_resp, dq_hdr};
                dq_wr <= dq_wr + 1'b1;
            end
            if (dq_pop) dq_rd <= dq_rd + 1'b1;
            dq_count <= dq_count + dq_push - dq_pop;
            if (rq_push) begin
                rq_mem[append_out_addr] <= {a_resp == RESP_DATA, a_seg, a_hdr};
                append_out_addr <= append_out_addr + 1'b1;
            end
            if (rq_pop) rq_rd <= rq_rd + 1'b1;
            rq_count <= rq_count + rq_push - rq_pop;
        end
    end

    // ------------------------------------------------------------------ output
    wire [RQ_W-1:0] rq_head = rq_mem[rq_rd];
    wire o_is_data = rq_head[RQ_W-1];
    wire [GW-1:0] o_seg = rq_head[RQ_W-2 -: GW];
    wire [HB-1:0] o_hdr = rq_head[HB-1:0];
    wire [BCW-1:0] o_nb = o_is_data ? NB_UPD[BCW-1:0] : NB_HDR[BCW-1:0];
    reg [BCW-1:0] o_beat;
    reg p_valid;                        // a beat whose segment read is in flight
    wire o_go = rq_count != 0 && (of_count + p_valid) < OF_DEPTH;
    wire o_last = o_beat == o_nb - 1'b1;
    assign rq_pop = o_go && o_last;
    assign free_seg_valid = rq_pop && o_is_data;
    assign free_seg = o_seg;

    reg [BCW-1:0] p_beat;
    reg p_last;
    reg [15:0] p_len;
    reg [HB-1:0] p_hdr;
    reg [W-1:0] seg_rd_b;
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
            p_valid <= 1'b0;
            of_wr <= 0; of_rd <= 0; of_count <= 0;
        end else begin
            if (o_go) o_beat <= o_last ? {BCW{1'b0}} : o_beat + 1'b1;
            p_valid <= o_go;
            if (p_valid) begin
                of_data[of_wr] <= p_data;
                of_keep[of_wr] <= p_keep;
                of_last[of_wr] <= p_last;
                of_wr <= of_wr + 1'b1;
            end
            if (m_axis_tvalid && m_axis_tready) of_rd <= of_rd + 1'b1;
            of_count <= of_count + p_valid - (m_axis_tvalid && m_axis_tready);
        end
        p_beat <= o_beat;
        p_last <= o_last;
        p_len <= o_is_data ? UPD_BYTES[15:0] : HDR[15:0];
        p_hdr <= o_hdr;
        seg_rd_b <= seg_mem[o_seg * SEG_BEATS + o_beat];
    end

    assign m_axis_tvalid = of_count != 0;
    assign m_axis_tdata = of_data[of_rd];
    assign m_axis_tkeep = of_keep[of_rd];
    assign m_axis_tlast = of_last[of_rd];

    // ------------------------------------------------------------------ status
    assign stat_occupied = {{(16 - OW){1'b0}}, occupied};
    assign stat_active_clusters = active_clusters > 16'd255 ? 8'd255 : active_clusters[7:0];
    assign stat_queue_util = util_q;
    assign stat_congested = util_q >= cfg_congestion_threshold;

    always @* begin
        cnt_value = 32'd0;
        if (cnt_sel < 5'd6) cnt_value = cnt_outcome[cnt_sel];
        else if (cnt_sel >= 5'd9 && cnt_sel <= 5'd14) cnt_value = cnt_type[cnt_sel - 5'd8];
        else if (cnt_sel >= 5'd17 && cnt_sel <= 5'd25) cnt_value = cnt_invalid[cnt_sel - 5'd16];
        else if (cnt_sel == 5'd26) cnt_value = {{(32 - OW){1'b0}}, occupied};
        else if (cnt_sel == 5'd27) cnt_value = {{(32 - SW){1'b0}}, write_ptr};
        else if (cnt_sel == 5'd28) cnt_value = {{(32 - SW){1'b0}}, read_ptr};
        else if (cnt_sel == 5'd29) cnt_value = {{(32 - RQ_AW){1'b0}}, append_out_addr};
        else if (cnt_sel == 5'd30) cnt_value = {{(32 - GW){1'b0}}, append_available_addr};
        else if (cnt_sel == 5'd31) cnt_value = {{(32 - PW){1'b0}}, pending};
    end
endmodule

`default_nettype wire
