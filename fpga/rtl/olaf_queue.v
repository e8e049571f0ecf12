// OlafQueue as a streaming block (DESIGN.md §3), bit-exact with dataplane/queue.py.
//
// Interface (changed in issue 17; the AXI-Lite / Ethernet wrappers depend on it):
//   s_axis_*   one OLAF UDP payload per packet (36-byte header, then V big-endian
//              int32 values); payload byte 0 travels in tdata[7:0].
//              s_axis_tid  [ID_WIDTH]: per-message sideband, sampled on the tlast
//                          beat and returned on every beat of that message's answer.
//              s_axis_tuser[0]: bad frame (the MAC's FCS / runt flag), sampled on the
//                          tlast beat: the message is dropped without an answer or any
//                          state change and counted (counter 6).
//   m_axis_*   one response payload per answered message (ACK per UPDATE, DATA or
//              EMPTY per PULL), same byte order; m_axis_tid = the request's tid.
//   INGRESS_DEPTH > 0 puts an axis_fifo of that many beats in front that never
//              back-pressures (s_axis_tready stays 1) and drops a whole packet that
//              does not fit (counter 7); 0 (default) back-pressures instead.
//   cnt_sel [5] / cnt_value [64]: 64-bit counters. 0..5 per outcome, 6 bad frames
//              dropped, 7 packets dropped by the ingress FIFO, 8+t per msg_type t
//              (1..6), 16+v per invalid verdict v (1..9), 26 occupied, 27 write_ptr,
//              28 read_ptr, 29 responses waiting in the output list, 30
//              append_available_addr, 31 segments awaiting readout.
//   cfg_*      unchanged. 255/capacity comes from a table indexed by the registered
//              capacity (no divider); capacity may change only while rst is high.
//
// Pipeline (see fpga/README.md):
//   ingest  - accepts beats, captures the header, stages value beats in the beat FIFO;
//   decide  - H (header held, index BRAM read) -> B (BRAM output register; verdict)
//             -> L (index bypass, slot / head metadata read) -> R (queue rule)
//             -> C (commit metadata / pointers / counters, queue the decision).
//             A message enters the index read only when the one ahead is at least in
//             L, so every L reads committed state; the one index write a lookup can
//             miss (made by the message ahead in C) is bypassed.
//   apply   - in message order, writes (ENQUEUED / REPLACED) or saturating-adds
//             (MERGED) the staged beats into the slot's segment (read, BRAM output
//             register, add + write; the two writes a read can miss are forwarded);
//   output  - streams response headers and, for DATA, the segment's value beats
//             (read, output register, beat), then returns the segment to the free list.
//
// Segments are NB_UPD beats (one UPDATE's values, sized from V). A popped slot's
// segment stays owned by its DATA until the last beat has been read out, so
// segments (MAX_CAPACITY + PENDING_SEGS) are handed out from a free list that holds
// their base addresses.
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
    parameter integer ID_WIDTH = 8,
    parameter integer INGRESS_DEPTH = 0,
    parameter integer CNT_WIDTH = 64        // counter width (< 64 only to shrink proofs)
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

    output wire [DATA_WIDTH-1:0]   m_axis_tdata,
    output wire [DATA_WIDTH/8-1:0] m_axis_tkeep,
    output wire                    m_axis_tvalid,
    input  wire                    m_axis_tready,
    output wire                    m_axis_tlast,
    output wire [ID_WIDTH-1:0]     m_axis_tid,

    input  wire [15:0]             cfg_capacity,
    input  wire [16:0]             cfg_max_clusters,
    input  wire [16:0]             cfg_max_blocks,
    input  wire [7:0]              cfg_frac_bits,
    input  wire                    cfg_mode,              // 0 OLAF, 1 FIFO
    input  wire [30:0]             cfg_threshold,         // raw fixed point, 0..2^31-1
    input  wire [7:0]              cfg_congestion_threshold,

    input  wire [4:0]              cnt_sel,
    output reg  [63:0]             cnt_value,
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
    localparam integer SEG_BEATS = NB_UPD;
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
    localparam integer BF_DEPTH = 1 << $clog2(2 * NB_UPD + 4);
    localparam integer DQ_DEPTH = 8;
    localparam integer RQ_DEPTH = 4;
    localparam integer OF_DEPTH = 8;
    localparam integer NCNT = 23;      // 6 outcomes, bad frame, ingress drop, 6 types, 9 verdicts

    localparam [1:0] OP_NONE = 2'd0, OP_STORE = 2'd1, OP_MERGE = 2'd2;
    localparam [1:0] RESP_NONE = 2'd0, RESP_HDR = 2'd1, RESP_DATA = 2'd2;
    localparam [3:0] T_UPDATE = 4'd1, T_ACK = 4'd2, T_PULL = 4'd3, T_DATA = 4'd4,
                     T_EMPTY = 4'd5, T_MODEL = 4'd6;
    localparam [7:0] O_ENQUEUED = 8'd0, O_MERGED = 8'd1, O_REPLACED = 8'd2,
                     O_DROPPED_REWARD = 8'd3, O_DROPPED_FULL = 8'd4, O_DROPPED_INVALID = 8'd5;
    // Counter slots in cnt: outcome o at o, bad frame 6, ingress drop 7, type t at 7+t,
    // verdict v at 13+v.
    localparam integer C_BAD = 6, C_INGRESS = 7, C_TYPE = 7, C_VERDICT = 13;

    initial begin
        if (W % 32 != 0 || W < 64) $error("DATA_WIDTH must be a multiple of 32, >= 64");
        // The apply stage's read-modify-write relies on consecutive UPDATEs being
        // at least two beats apart.
        if (NB_UPD < 2) $error("an UPDATE must span at least two beats");
        if (V < 1 || V > 255) $error("V must be 1..255 on the wire");
        if (CNT_WIDTH < 1 || CNT_WIDTH > 64) $error("CNT_WIDTH must be 1..64");
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
    // Slot metadata (logical ring positions), in LUT RAM: the L stage reads the
    // looked-up slot and the head slot, the C stage writes one slot.
    reg [15:0] m_cluster [0:MAX_CAPACITY-1];
    reg [15:0] m_worker  [0:MAX_CAPACITY-1];
    reg [15:0] m_block   [0:MAX_CAPACITY-1];
    reg [15:0] m_agg     [0:MAX_CAPACITY-1];
    reg [31:0] m_seq     [0:MAX_CAPACITY-1];
    reg [31:0] m_mv      [0:MAX_CAPACITY-1];
    reg [31:0] m_reward  [0:MAX_CAPACITY-1];
    reg [31:0] m_gen     [0:MAX_CAPACITY-1];
    reg [31:0] m_contrib [0:MAX_CAPACITY-1];
    reg [AW-1:0] m_seg   [0:MAX_CAPACITY-1];   // segment base address
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
    // queue_util = util_q exactly with a runtime capacity and no divider.
    reg [7:0] util_q;
    reg [OW:0] util_r;

    // Free segments: a ring of base addresses of every segment not owned by a slot
    // or a DATA.
    reg [AW-1:0] free_list [0:NSEG-1];
    reg [GW-1:0] avail_head, append_available_addr;
    reg [PW-1:0] pending;               // popped segments not yet read out

    reg [CNT_WIDTH*NCNT-1:0] cnt;

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
    wire [15:0] cap_in = (cfg_capacity == 16'd0) ? 16'd1
                       : (cfg_capacity > MAX_CAPACITY) ? MAX_CAPACITY[15:0] : cfg_capacity;
    wire [16:0] max_cl = (cfg_max_clusters > MAX_CLUSTERS) ? MAX_CLUSTERS[16:0] : cfg_max_clusters;
    wire [16:0] max_bk = (cfg_max_blocks > MAX_BLOCKS) ? MAX_BLOCKS[16:0] : cfg_max_blocks;
    // 255 / capacity and 255 % capacity from a table of the MAX_CAPACITY possible
    // capacities, latched from the registered capacity: no divider anywhere.
    reg [OW-1:0] cap;
    reg [7:0] util_step_q;
    reg [OW:0] util_step_r;
    wire [8*(MAX_CAPACITY+1)-1:0] step_q_tab;
    wire [(OW+1)*(MAX_CAPACITY+1)-1:0] step_r_tab;
    genvar gc;
    generate
        for (gc = 0; gc <= MAX_CAPACITY; gc = gc + 1) begin : g_step
            localparam integer CAPV = gc == 0 ? 1 : gc;
            assign step_q_tab[8*gc +: 8] = 255 / CAPV;
            assign step_r_tab[(OW+1)*gc +: OW+1] = 255 % CAPV;
        end
    endgenerate
    always @(posedge clk) begin
        cap <= cap_in[OW-1:0];
        util_step_q <= step_q_tab[8*cap +: 8];
        util_step_r <= step_r_tab[(OW+1)*cap +: OW+1];
    end

    // ------------------------------------------------------------------ ingress
    wire [W-1:0] i_tdata;
    wire [BW-1:0] i_tkeep;
    wire i_tvalid, i_tlast, i_tuser;
    wire [ID_WIDTH-1:0] i_tid;
    wire i_tready;
    wire ingress_drop;
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

    // H: the header of the last complete message, waiting for its index read.
    reg h_valid;
    reg [HB-1:0] h_hdr;
    reg [15:0] h_len;
    reg [BCW-1:0] h_nb;
    reg [ID_WIDTH-1:0] h_tid;
    reg h_bad;
    reg [IW-1:0] h_key;
    wire h_take;

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

    // ------------------------------------------------------------------ decide: H -> B
    reg b_v, l_v, r_v, c_v;
    wire [3:0] dq_depth;
    // The message ahead must be at least in L (so this one's L follows its C), the
    // decision FIFO must hold every message in flight, and a PULL in flight may pop.
    assign h_take = h_valid && !b_v && !l_v
                  && ({1'b0, dq_depth} + r_v + c_v) < DQ_DEPTH
                  && ({1'b0, pending} + r_v + c_v) < PENDING_SEGS;

    reg [SW-1:0] idx_q, idx_rd;        // index BRAM read latch and output register
    always @(posedge clk) begin
        idx_q <= index_mem[h_key];
        idx_rd <= idx_q;
    end

    reg [HB-1:0] b_hdr;
    reg [15:0] b_len;
    reg [BCW-1:0] b_nb;
    reg [ID_WIDTH-1:0] b_tid;
    reg b_bad;
    reg [IW-1:0] b_key;
    always @(posedge clk) begin
        b_v <= !rst && h_take;
        if (h_take) begin
            b_hdr <= h_hdr;
            b_len <= h_len;
            b_nb <= h_nb;
            b_tid <= h_tid;
            b_bad <= h_bad;
            b_key <= h_key;
        end
    end

    // ------------------------------------------------------------------ B: validate
    wire [3:0] b_ver = b_hdr[7:4];
    wire [3:0] b_type = b_hdr[3:0];
    wire [15:0] b_cluster = hf16(b_hdr, 2);
    wire [15:0] b_block = hf16(b_hdr, 6);
    wire [7:0] b_nv = b_hdr[8*13 +: 8];
    wire [7:0] b_frac = b_hdr[8*14 +: 8];
    wire [31:0] b_reward = hf32(b_hdr, 24);

    // The validation rule lives in olaf_verdict, which the Ethernet shell shares.
    wire [3:0] verdict;
    wire v_ok, v_type_known, v_answered;
    olaf_verdict #(.V(V)) validate (
        .msg_len(b_len), .version(b_ver), .msg_type(b_type), .num_values(b_nv),
        .frac_bits(b_frac), .cluster(b_cluster), .block(b_block),
        .cfg_frac_bits(cfg_frac_bits), .max_clusters(max_cl), .max_blocks(max_bk),
        .verdict(verdict), .ok(v_ok), .type_known(v_type_known), .answered(v_answered)
    );

    // L-stage registers.
    reg [HB-1:0] l_hdr;
    reg [BCW-1:0] l_nb;
    reg [ID_WIDTH-1:0] l_tid;
    reg l_bad;
    reg [IW-1:0] l_key;
    reg [3:0] l_verdict;
    reg l_ok, l_type_known, l_answered;
    // |u - s| < threshold  <=>  u - threshold < s < u + threshold (34-bit signed);
    // the bounds depend on the message only, so they are ready before the lookup.
    reg signed [33:0] l_lo, l_hi;
    always @(posedge clk) begin
        l_v <= !rst && b_v;
        l_hdr <= b_hdr;
        l_nb <= b_nb;
        l_tid <= b_tid;
        l_bad <= b_bad;
        l_key <= b_key;
        l_verdict <= verdict;
        l_ok <= v_ok;
        l_type_known <= v_type_known;
        l_answered <= v_answered;
        l_lo <= $signed({{2{b_reward[31]}}, b_reward}) - $signed({3'b000, cfg_threshold});
        l_hi <= $signed({{2{b_reward[31]}}, b_reward}) + $signed({3'b000, cfg_threshold});
    end

    // ------------------------------------------------------------------ L: lookup
    reg lw_valid;                       // the last index write, bypassed into a lookup
    reg [IW-1:0] lw_addr;
    reg [SW-1:0] lw_data;
    wire [SW-1:0] s = (lw_valid && lw_addr == l_key) ? lw_data : idx_rd;
    wire [SW-1:0] r = read_ptr;
    wire [15:0] r_cluster = m_cluster[r];
    wire [15:0] l_cluster = hf16(l_hdr, 2);

    reg [HB-1:0] r_hdr;
    reg [BCW-1:0] r_nb;
    reg [ID_WIDTH-1:0] r_tid;
    reg r_bad;
    reg [IW-1:0] r_key;
    reg [3:0] r_verdict;
    reg r_ok, r_type_known, r_answered;
    reg signed [33:0] r_lo, r_hi;
    reg [SW-1:0] r_s;
    reg r_live;
    reg [15:0] r_s_cluster, r_s_block, r_s_worker, r_s_agg;
    reg [31:0] r_s_reward, r_s_gen, r_s_mv, r_s_contrib;
    reg [AW-1:0] r_s_seg;
    // Head slot, for a PULL's DATA header and pop.
    reg [15:0] r_h_cluster, r_h_worker, r_h_block, r_h_agg;
    reg [31:0] r_h_seq, r_h_mv, r_h_reward, r_h_gen, r_h_contrib;
    reg [AW-1:0] r_h_seg;
    reg [CW-1:0] r_h_cl;
    reg r_full, r_empty, r_ucl_zero, r_hcl_one;
    reg [OW-1:0] r_ucl_count, r_hcl_count;
    reg [7:0] r_util_up_q, r_util_down_q;
    reg [OW:0] r_util_up_r, r_util_down_r;
    reg r_cong_up, r_cong_down, r_cong_same;

    // Utilisation after an enqueue / a pop, from stable state.
    wire [OW+1:0] up_r_sum = {1'b0, util_r} + {1'b0, util_step_r};
    wire up_carry = up_r_sum >= {2'b00, cap};
    wire [7:0] util_up_q = util_q + util_step_q + up_carry;
    wire [OW+1:0] up_r_next = up_carry ? up_r_sum - {2'b00, cap} : up_r_sum;
    wire down_borrow = util_r < util_step_r;
    wire [7:0] util_down_q = util_q - util_step_q - down_borrow;
    wire [OW:0] util_down_r = down_borrow ? util_r + cap - util_step_r : util_r - util_step_r;

    always @(posedge clk) begin
        r_v <= !rst && l_v;
        r_hdr <= l_hdr;
        r_nb <= l_nb;
        r_tid <= l_tid;
        r_bad <= l_bad;
        r_key <= l_key;
        r_verdict <= l_verdict;
        r_ok <= l_ok;
        r_type_known <= l_type_known;
        r_answered <= l_answered;
        r_lo <= l_lo;
        r_hi <= l_hi;
        r_s <= s;
        r_live <= live[s];
        r_s_cluster <= m_cluster[s];
        r_s_block <= m_block[s];
        r_s_worker <= m_worker[s];
        r_s_agg <= m_agg[s];
        r_s_reward <= m_reward[s];
        r_s_gen <= m_gen[s];
        r_s_mv <= m_mv[s];
        r_s_contrib <= m_contrib[s];
        r_s_seg <= m_seg[s];
        r_h_cluster <= r_cluster;
        r_h_worker <= m_worker[r];
        r_h_block <= m_block[r];
        r_h_agg <= m_agg[r];
        r_h_seq <= m_seq[r];
        r_h_mv <= m_mv[r];
        r_h_reward <= m_reward[r];
        r_h_gen <= m_gen[r];
        r_h_contrib <= m_contrib[r];
        r_h_seg <= m_seg[r];
        r_h_cl <= r_cluster[CW-1:0];
        r_full <= occupied == cap;
        r_empty <= occupied == 0;
        r_ucl_count <= cluster_count[l_cluster[CW-1:0]];
        r_hcl_count <= cluster_count[r_cluster[CW-1:0]];
        r_ucl_zero <= cluster_count[l_cluster[CW-1:0]] == 0;
        r_hcl_one <= cluster_count[r_cluster[CW-1:0]] == 1;
        r_util_up_q <= util_up_q;
        r_util_up_r <= up_r_next[OW:0];
        r_util_down_q <= util_down_q;
        r_util_down_r <= util_down_r;
        r_cong_up <= util_up_q >= cfg_congestion_threshold;
        r_cong_down <= util_down_q >= cfg_congestion_threshold;
        r_cong_same <= util_q >= cfg_congestion_threshold;
    end

    // ------------------------------------------------------------------ R: rule
    wire [3:0] u_ver = r_hdr[7:4];
    wire [3:0] u_type = r_hdr[3:0];
    wire [15:0] u_cluster = hf16(r_hdr, 2);
    wire [15:0] u_worker = hf16(r_hdr, 4);
    wire [15:0] u_block = hf16(r_hdr, 6);
    wire [15:0] u_agg = hf16(r_hdr, 8);
    wire [31:0] u_reward = hf32(r_hdr, 24);
    wire [31:0] u_gen = hf32(r_hdr, 28);
    wire [31:0] u_mv = hf32(r_hdr, 20);

    wire ok = !r_bad && r_ok;
    wire is_update = ok && u_type == T_UPDATE;
    wire is_pull = ok && u_type == T_PULL;
    wire hit = r_live && r_s_cluster == u_cluster && r_s_block == u_block;
    wire signed [33:0] s_reward_x = $signed({{2{r_s_reward[31]}}, r_s_reward});
    wire close = s_reward_x > r_lo && s_reward_x < r_hi;
    wire u_higher = $signed(u_reward) > $signed(r_s_reward);

    reg [7:0] outcome;
    always @* begin
        if (!cfg_mode && hit) begin
            if (r_s_agg == 16'd1 && r_s_worker == u_worker) outcome = O_REPLACED;
            else if (close) outcome = O_MERGED;
            else if (u_higher) outcome = O_REPLACED;
            else outcome = O_DROPPED_REWARD;
        end else if (r_full) outcome = O_DROPPED_FULL;
        else outcome = O_ENQUEUED;
    end
    wire do_enqueue = is_update && outcome == O_ENQUEUED;
    wire do_store = is_update && outcome == O_REPLACED;
    wire do_merge = is_update && outcome == O_MERGED;
    wire do_pop = is_pull && !r_empty;
    wire counted_type = !r_bad && r_type_known;

    // Per-counter increment enables, registered so that C's adders start from flops.
    reg [NCNT-1:0] inc;
    integer ci;
    always @* begin
        inc = {NCNT{1'b0}};
        for (ci = 0; ci < 6; ci = ci + 1)
            inc[ci] = (is_update && outcome == ci)
                    || (ci == O_DROPPED_INVALID && !r_bad && !r_ok);
        inc[C_BAD] = r_bad;
        for (ci = 1; ci <= 6; ci = ci + 1) inc[C_TYPE + ci] = counted_type && u_type == ci;
        for (ci = 1; ci <= 9; ci = ci + 1) inc[C_VERDICT + ci] = !r_bad && r_verdict == ci;
    end

    // C-stage registers.
    reg [HB-1:0] c_hdr;
    reg [BCW-1:0] c_nb;
    reg [ID_WIDTH-1:0] c_tid;
    reg [IW-1:0] c_key;
    reg [NCNT-1:0] c_inc;
    reg c_enqueue, c_store, c_merge, c_pop, c_pull, c_update, c_resp_hdr;
    reg [7:0] c_outcome;
    reg [SW-1:0] c_tgt;
    reg [AW-1:0] c_s_seg;
    reg [15:0] c_merged_agg;
    reg [31:0] c_merged_reward, c_merged_gen, c_merged_mv, c_merged_contrib;
    reg [15:0] c_h_cluster, c_h_worker, c_h_block, c_h_agg;
    reg [31:0] c_h_seq, c_h_mv, c_h_reward, c_h_gen, c_h_contrib;
    reg [AW-1:0] c_h_seg;
    reg [CW-1:0] c_h_cl;
    reg [OW-1:0] c_ucl_count, c_hcl_count;
    reg [7:0] c_util_q;
    reg [OW:0] c_util_r;
    reg [15:0] c_active;
    reg c_cong;
    always @(posedge clk) begin
        c_v <= !rst && r_v;
        c_hdr <= r_hdr;
        c_nb <= r_nb;
        c_tid <= r_tid;
        c_key <= r_key;
        // Gated by rst too: a one-cycle reset must not let a stale R stage commit.
        c_inc <= (r_v && !rst) ? inc : {NCNT{1'b0}};
        c_enqueue <= !rst && r_v && do_enqueue;
        c_store <= !rst && r_v && do_store;
        c_merge <= !rst && r_v && do_merge;
        c_pop <= !rst && r_v && do_pop;
        c_pull <= is_pull;
        c_update <= is_update;
        // A PULL's answer is chosen by c_pull; every other answered message gets an ACK.
        c_resp_hdr <= !r_bad && r_answered;
        c_outcome <= outcome;
        c_tgt <= do_enqueue ? write_ptr : r_s;
        c_s_seg <= r_s_seg;
        // Merge candidates, independent of the outcome; C picks by c_merge.
        c_merged_agg <= (r_s_agg == 16'hffff) ? r_s_agg : r_s_agg + 16'd1;
        c_merged_reward <= u_higher ? u_reward : r_s_reward;
        c_merged_gen <= (u_gen < r_s_gen) ? u_gen : r_s_gen;
        c_merged_mv <= (u_mv < r_s_mv) ? u_mv : r_s_mv;
        c_merged_contrib <= r_s_contrib | hf32(r_hdr, 32);
        c_h_cluster <= r_h_cluster;
        c_h_worker <= r_h_worker;
        c_h_block <= r_h_block;
        c_h_agg <= r_h_agg;
        c_h_seq <= r_h_seq;
        c_h_mv <= r_h_mv;
        c_h_reward <= r_h_reward;
        c_h_gen <= r_h_gen;
        c_h_contrib <= r_h_contrib;
        c_h_seg <= r_h_seg;
        c_h_cl <= r_h_cl;
        c_ucl_count <= r_ucl_count;
        c_hcl_count <= r_hcl_count;
        c_util_q <= do_enqueue ? r_util_up_q : do_pop ? r_util_down_q : util_q;
        c_util_r <= do_enqueue ? r_util_up_r : do_pop ? r_util_down_r : util_r;
        c_cong <= do_enqueue ? r_cong_up : do_pop ? r_cong_down : r_cong_same;
        c_active <= active_clusters + (do_enqueue && r_ucl_zero) - (do_pop && r_hcl_one);
    end

    // ------------------------------------------------------------------ C: commit
    wire [7:0] active_fb = c_active > 16'd255 ? 8'd255 : c_active[7:0];
    wire [7:0] flags_fb = {7'd0, c_cong};
    wire [3:0] c_ver = c_hdr[7:4];
    wire [HB-1:0] ack_hdr = {c_hdr[HB-1:8*14], 8'd0, c_util_q, active_fb,
                             c_update ? c_outcome : O_DROPPED_INVALID,
                             c_hdr[8*10-1:8*2], flags_fb, c_ver, T_ACK};
    wire [HB-1:0] data_hdr = {bswap32(c_h_contrib), bswap32(c_h_gen), bswap32(c_h_reward),
                              bswap32(c_h_mv), bswap32(c_h_seq),
                              8'd0, cfg_frac_bits, V[7:0], c_util_q, active_fb, O_ENQUEUED,
                              bswap16(c_h_agg), bswap16(c_h_block), bswap16(c_h_worker),
                              bswap16(c_h_cluster), flags_fb, 4'd1, T_DATA};
    wire [HB-1:0] empty_hdr = {160'd0, 8'd0, cfg_frac_bits, 8'd0, c_util_q, active_fb,
                               O_ENQUEUED, 64'd0, flags_fb, 4'd1, T_EMPTY};

    wire [AW-1:0] alloc_seg = free_list[avail_head];
    reg [1:0] dq_op;
    reg [AW-1:0] dq_seg;
    reg [1:0] dq_resp;
    reg [HB-1:0] dq_hdr;
    always @* begin
        dq_op = OP_NONE;
        dq_seg = c_s_seg;
        dq_resp = c_resp_hdr ? RESP_HDR : RESP_NONE;
        dq_hdr = ack_hdr;
        if (c_enqueue) begin
            dq_op = OP_STORE;
            dq_seg = alloc_seg;
        end else if (c_store) dq_op = OP_STORE;
        else if (c_merge) dq_op = OP_MERGE;
        if (c_pull) begin
            dq_resp = c_pop ? RESP_DATA : RESP_HDR;
            dq_hdr = c_pop ? data_hdr : empty_hdr;
            dq_seg = c_h_seg;
        end
    end

    wire [SW-1:0] ws = write_ptr;
    wire [15:0] w_cluster = hf16(c_hdr, 2);
    wire [CW-1:0] w_cl = w_cluster[CW-1:0];

    // Output engine frees a segment after reading out its last DATA beat.
    wire free_seg_valid;
    wire [AW-1:0] free_seg;

    always @(posedge clk) begin
        if (rst) begin
            lw_valid <= 1'b0;
            live <= {MAX_CAPACITY{1'b0}};
            for (i = 0; i < MAX_CLUSTERS; i = i + 1) cluster_count[i] <= {OW{1'b0}};
            active_clusters <= 16'd0;
            write_ptr <= {SW{1'b0}};
            read_ptr <= {SW{1'b0}};
            occupied <= {OW{1'b0}};
            util_q <= 8'd0;
            util_r <= {(OW + 1){1'b0}};
            for (i = 0; i < NSEG; i = i + 1) free_list[i] <= i * SEG_BEATS;
            avail_head <= {GW{1'b0}};
            append_available_addr <= {GW{1'b0}};
            pending <= {PW{1'b0}};
            cnt <= {CNT_WIDTH*NCNT{1'b0}};
        end else begin
            if (free_seg_valid) begin
                free_list[append_available_addr] <= free_seg;
                append_available_addr <= (append_available_addr == NSEG - 1)
                                         ? {GW{1'b0}} : append_available_addr + 1'b1;
            end
            pending <= pending + c_pop - free_seg_valid;
            for (i = 0; i < NCNT; i = i + 1)
                if (c_inc[i] || (i == C_INGRESS && ingress_drop))
                    cnt[CNT_WIDTH*i +: CNT_WIDTH] <= cnt[CNT_WIDTH*i +: CNT_WIDTH] + 1'b1;
            if (c_enqueue || c_store || c_merge) begin
                m_agg[c_tgt] <= c_merge ? c_merged_agg : hf16(c_hdr, 8);
                m_reward[c_tgt] <= c_merge ? c_merged_reward : hf32(c_hdr, 24);
                m_gen[c_tgt] <= c_merge ? c_merged_gen : hf32(c_hdr, 28);
                m_mv[c_tgt] <= c_merge ? c_merged_mv : hf32(c_hdr, 20);
                m_contrib[c_tgt] <= c_merge ? c_merged_contrib : hf32(c_hdr, 32);
            end
            if (c_enqueue || c_store) begin
                m_cluster[c_tgt] <= w_cluster;
                m_worker[c_tgt] <= hf16(c_hdr, 4);
                m_block[c_tgt] <= hf16(c_hdr, 6);
                m_seq[c_tgt] <= hf32(c_hdr, 16);
            end
            if (c_enqueue) begin
                m_seg[ws] <= alloc_seg;
                avail_head <= (avail_head == NSEG - 1) ? {GW{1'b0}} : avail_head + 1'b1;
                index_mem[c_key] <= ws;
                lw_valid <= 1'b1;
                lw_addr <= c_key;
                lw_data <= ws;
                write_ptr <= (ws == cap - 1) ? {SW{1'b0}} : ws + 1'b1;
                live[ws] <= 1'b1;
                cluster_count[w_cl] <= c_ucl_count + 1'b1;
                occupied <= occupied + 1'b1;
            end
            if (c_pop) begin
                read_ptr <= (read_ptr == cap - 1) ? {SW{1'b0}} : read_ptr + 1'b1;
                live[read_ptr] <= 1'b0;
                cluster_count[c_h_cl] <= c_hcl_count - 1'b1;
                occupied <= occupied - 1'b1;
            end
            if (c_v) begin
                util_q <= c_util_q;
                util_r <= c_util_r;
                active_clusters <= c_active;
            end
        end
    end

    // ------------------------------------------------------------------ decision FIFO
    localparam integer DQ_W = 2 + AW + BCW + 2 + ID_WIDTH + HB;
    wire [DQ_W-1:0] dq_head;
    wire dq_valid, dq_pop, dq_ready;
    axis_fifo #(.DEPTH(DQ_DEPTH), .DATA_WIDTH(DQ_W), .LAST_ENABLE(0)) decision_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata({dq_op, dq_seg, c_nb, dq_resp, c_tid, dq_hdr}), .s_axis_tkeep({(DQ_W+7)/8{1'b1}}),
        .s_axis_tvalid(c_v && !rst), .s_axis_tready(dq_ready), .s_axis_tlast(1'b1),
        .s_axis_tid(8'd0), .s_axis_tuser(1'b0),
        .m_axis_tdata(dq_head), .m_axis_tkeep(), .m_axis_tvalid(dq_valid),
        .m_axis_tready(dq_pop), .m_axis_tlast(), .m_axis_tid(), .m_axis_tuser(),
        .status_depth(dq_depth), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );
    wire [1:0] a_op = dq_head[DQ_W-1 -: 2];
    wire [AW-1:0] a_seg = dq_head[DQ_W-3 -: AW];
    wire [BCW-1:0] a_nb = dq_head[DQ_W-3-AW -: BCW];
    wire [1:0] a_resp = dq_head[HB+ID_WIDTH+1 -: 2];
    wire [ID_WIDTH-1:0] a_tid = dq_head[HB +: ID_WIDTH];
    wire [HB-1:0] a_hdr = dq_head[HB-1:0];

    // ------------------------------------------------------------------ apply
    localparam integer RQ_W = 1 + AW + ID_WIDTH + HB;
    wire rq_ready;
    wire [W-1:0] bf_head;
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
    reg [W-1:0] s1_new, s2_new, seg_q_a, seg_rd_a, h_wdata, fwd_data;
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
        seg_q_a <= seg_mem[a_addr];
        seg_rd_a <= seg_q_a;
        if (s2_valid) seg_mem[s2_addr] <= s2_wdata;
    end

    axis_fifo #(.DEPTH(BF_DEPTH), .DATA_WIDTH(W), .LAST_ENABLE(0)) beat_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata(i_tdata), .s_axis_tkeep({BW{1'b1}}), .s_axis_tvalid(bf_push),
        .s_axis_tready(bf_ready), .s_axis_tlast(1'b1), .s_axis_tid(8'd0), .s_axis_tuser(1'b0),
        .m_axis_tdata(bf_head), .m_axis_tkeep(), .m_axis_tvalid(), .m_axis_tready(a_go),
        .m_axis_tlast(), .m_axis_tid(), .m_axis_tuser(),
        .status_depth(), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );

    // Response list in output order: header, tid, and for DATA the segment to read.
    wire rq_push = a_go && a_needs_resp;
    wire [RQ_W-1:0] rq_head;
    wire rq_valid, rq_pop;
    wire [$clog2(RQ_DEPTH):0] rq_depth;
    axis_fifo #(.DEPTH(RQ_DEPTH), .DATA_WIDTH(RQ_W), .LAST_ENABLE(0)) response_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata({a_resp == RESP_DATA, a_seg, a_tid, a_hdr}), .s_axis_tkeep({(RQ_W+7)/8{1'b1}}),
        .s_axis_tvalid(rq_push), .s_axis_tready(rq_ready), .s_axis_tlast(1'b1),
        .s_axis_tid(8'd0), .s_axis_tuser(1'b0),
        .m_axis_tdata(rq_head), .m_axis_tkeep(), .m_axis_tvalid(rq_valid),
        .m_axis_tready(rq_pop), .m_axis_tlast(), .m_axis_tid(), .m_axis_tuser(),
        .status_depth(rq_depth), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );

    // ------------------------------------------------------------------ output
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
    reg [W-1:0] seg_q_b, seg_rd_b;
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
        seg_q_b <= seg_mem[o_seg + o_beat];
        seg_rd_b <= seg_q_b;
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

    // ------------------------------------------------------------------ status
    assign stat_occupied = {{(16 - OW){1'b0}}, occupied};
    assign stat_active_clusters = active_clusters > 16'd255 ? 8'd255 : active_clusters[7:0];
    assign stat_queue_util = util_q;
    assign stat_congested = util_q >= cfg_congestion_threshold;

    always @* begin
        cnt_value = 64'd0;
        if (cnt_sel < 5'd8) cnt_value = cnt[CNT_WIDTH*cnt_sel +: CNT_WIDTH];
        else if (cnt_sel >= 5'd9 && cnt_sel <= 5'd14) cnt_value = cnt[CNT_WIDTH*(cnt_sel - 5'd1) +: CNT_WIDTH];
        else if (cnt_sel >= 5'd17 && cnt_sel <= 5'd25) cnt_value = cnt[CNT_WIDTH*(cnt_sel - 5'd3) +: CNT_WIDTH];
        else if (cnt_sel == 5'd26) cnt_value = {{(64 - OW){1'b0}}, occupied};
        else if (cnt_sel == 5'd27) cnt_value = {{(64 - SW){1'b0}}, write_ptr};
        else if (cnt_sel == 5'd28) cnt_value = {{(64 - SW){1'b0}}, read_ptr};
        else if (cnt_sel == 5'd29) cnt_value = {{(64 - 3){1'b0}}, rq_depth};
        else if (cnt_sel == 5'd30) cnt_value = {{(64 - GW){1'b0}}, append_available_addr};
        else if (cnt_sel == 5'd31) cnt_value = {{(64 - PW){1'b0}}, pending};
    end

`ifdef FORMAL
    // Invariants proved by fpga/formal (yosys-smtbmc: k-induction plus a bounded base case).
    reg f_past = 1'b0;
    always @(posedge clk) f_past <= 1'b1;
    always @* if (!f_past) assume (rst);
    // Configuration that may change only under reset.
    always @(posedge clk) if (f_past && !rst) begin
        assume ($stable(cfg_capacity));
        assume ($stable(cfg_max_clusters));
        assume ($stable(cfg_max_blocks));
        assume ($stable(cfg_frac_bits));
    end

    // Segments free in the ring: from avail_head up to append_available_addr.
    reg [GW:0] f_free;
    always @(posedge clk)
        if (rst) f_free <= NSEG;
        else f_free <= f_free - c_enqueue + free_seg_valid;

    integer fi, fj;
    reg [OW:0] f_live_count;
    always @* begin
        f_live_count = 0;
        for (fi = 0; fi < MAX_CAPACITY; fi = fi + 1) f_live_count = f_live_count + live[fi];
    end
    wire [GW:0] f_ring_free = append_available_addr >= avail_head ? append_available_addr - avail_head
                            : append_available_addr + NSEG - avail_head;

    // Checked from the cycle after reset on (the reset state must satisfy them too), so
    // that the first step of an induction trace is constrained as well.
    always @(posedge clk) if (f_past && !rst) begin
        // occupied equals the live slots.
        assert (occupied == f_live_count);
        // free + live + awaiting-readout segments = all segments.
        assert (f_free + occupied + pending == NSEG);
        // The ring holds exactly the free segments (full ring = all free).
        assert (f_ring_free == (f_free == NSEG ? 0 : f_free));
        assert (pending <= PENDING_SEGS);
        // No segment handed out twice: live slots own distinct segments, none of them free.
        for (fi = 0; fi < MAX_CAPACITY; fi = fi + 1) begin
            for (fj = fi + 1; fj < MAX_CAPACITY; fj = fj + 1)
                if (live[fi] && live[fj]) assert (m_seg[fi] != m_seg[fj]);
            for (fj = 0; fj < NSEG; fj = fj + 1)
                if (live[fi] && (fj >= avail_head ? fj - avail_head : fj + NSEG - avail_head) < f_free)
                    assert (free_list[fj] != m_seg[fi]);
        end
        // No internal FIFO is pushed when full.
        assert (!(bf_push && !bf_ready));
        assert (!(c_v && !dq_ready));
        assert (!(rq_push && !rq_ready));
        assert (!(p2_valid && !of_ready));
        // A beat offered on m_axis stays put until taken.
        if (!$past(rst) && $past(m_axis_tvalid && !m_axis_tready)) begin
            assert (m_axis_tvalid);
            // The payload-free proof model (fpga/formal) leaves these two out: it cuts the
            // bytes offered to output_fifo, and fpga/formal/axis_fifo_hold.v proves them
            // for that FIFO on its own, for any input.
`ifndef OLAF_FORMAL_NO_PAYLOAD
            assert ($stable(m_axis_tdata));
            assert ($stable(m_axis_tkeep));
`endif
            assert ($stable(m_axis_tlast));
            assert ($stable(m_axis_tid));
        end
    end

    // ---- Strengthening for k-induction: relations that hold in every reachable state
    // and tie the segments held by the pipeline and the decision / response FIFOs to the
    // free-list bookkeeping, so that no unreachable start state satisfies the asserts above.
    // The FIFOs' internals are bound to these wires by the proof model after flattening
    // (fpga/formal/olaf_queue_model.ys, `connect`); yosys 0.23 has no hierarchical references.
    // keep: they must exist to be bound even when OLAF_FORMAL_NO_STRENGTHEN leaves them unread.
    (* keep *) wire [DQ_DEPTH*DQ_W-1:0] f_dq_mem;
    (* keep *) wire [$clog2(DQ_DEPTH):0] f_dq_rd, f_dq_wr, f_dq_cur;
    (* keep *) wire [RQ_DEPTH*RQ_W-1:0] f_rq_mem;
    (* keep *) wire [$clog2(RQ_DEPTH):0] f_rq_rd, f_rq_wr, f_rq_cur;
    (* keep *) wire [$clog2(OF_DEPTH):0] f_of_wr, f_of_cur;
    (* keep *) wire [$clog2(BF_DEPTH):0] f_bf_rd, f_bf_wr, f_bf_cur;
    wire [$clog2(BF_DEPTH):0] f_bf_depth = f_bf_wr - f_bf_rd;

    // Every segment not in the free ring: live slots' and those awaiting readout (a DATA
    // decision not yet passed to the response list, or a DATA response).
    localparam integer F_NIT = NSEG + MAX_CAPACITY + DQ_DEPTH + RQ_DEPTH;
    reg [F_NIT-1:0] f_it_v;
    reg [AW-1:0] f_it_seg [0:F_NIT-1];
    reg [PW+4:0] f_pend_count;
    reg [DQ_W-1:0] f_dq_ent;
    reg [RQ_W-1:0] f_rq_ent;
    reg f_dq_nb_ok;
    integer fp;
    always @* begin
        f_pend_count = 0;
        f_dq_nb_ok = 1'b1;
        for (fi = 0; fi < NSEG; fi = fi + 1) begin
            f_it_v[fi] = (fi >= avail_head ? fi - avail_head : fi + NSEG - avail_head) < f_free;
            f_it_seg[fi] = free_list[fi];
        end
        for (fi = 0; fi < MAX_CAPACITY; fi = fi + 1) begin
            f_it_v[NSEG + fi] = live[fi];
            f_it_seg[NSEG + fi] = m_seg[fi];
        end
        for (fi = 0; fi < DQ_DEPTH; fi = fi + 1) begin
            fp = (f_dq_rd + fi) % DQ_DEPTH;
            f_dq_ent = f_dq_mem[fp*DQ_W +: DQ_W];
            // The head has handed its DATA to the response list once its first beat went.
            f_it_v[NSEG + MAX_CAPACITY + fi] = fi < dq_depth && f_dq_ent[HB+ID_WIDTH+1 -: 2] == RESP_DATA
                                             && !(fi == 0 && a_beat != 0);
            f_it_seg[NSEG + MAX_CAPACITY + fi] = f_dq_ent[DQ_W-3 -: AW];
            if (fi < dq_depth && f_dq_ent[DQ_W-3-AW -: BCW] == 0) f_dq_nb_ok = 1'b0;
            f_pend_count = f_pend_count + f_it_v[NSEG + MAX_CAPACITY + fi];
        end
        for (fi = 0; fi < RQ_DEPTH; fi = fi + 1) begin
            fp = (f_rq_rd + fi) % RQ_DEPTH;
            f_rq_ent = f_rq_mem[fp*RQ_W +: RQ_W];
            f_it_v[NSEG + MAX_CAPACITY + DQ_DEPTH + fi] = fi < rq_depth && f_rq_ent[RQ_W-1];
            f_it_seg[NSEG + MAX_CAPACITY + DQ_DEPTH + fi] = f_rq_ent[RQ_W-2 -: AW];
            f_pend_count = f_pend_count + f_it_v[NSEG + MAX_CAPACITY + DQ_DEPTH + fi];
        end
    end
    wire [SW:0] f_rel_w = write_ptr >= read_ptr ? write_ptr - read_ptr : write_ptr + cap - read_ptr;

    // OLAF_FORMAL_NO_STRENGTHEN leaves these out (the mutant check's deep bounded run,
    // which they would slow down tenfold).
`ifndef OLAF_FORMAL_NO_STRENGTHEN
    always @(posedge clk) if (f_past && !rst) begin
        // The capacity is the configured one (stable outside reset).
        assert (cap == cap_in[OW-1:0] && cap >= 1 && cap <= MAX_CAPACITY);
        assert (avail_head < NSEG && append_available_addr < NSEG);
        // The slot ring: read_ptr .. write_ptr (occupied of them) are exactly the live slots.
        assert (read_ptr < cap && write_ptr < cap && occupied <= cap);
        assert (f_rel_w == (occupied == cap ? 0 : occupied));
        for (fi = 0; fi < MAX_CAPACITY; fi = fi + 1)
            assert (live[fi] == (fi < cap && (fi >= read_ptr ? fi - read_ptr : fi + cap - read_ptr) < occupied));
        // Decide pipeline: a message enters B only with B and L empty, so the only two
        // stages busy at once are B and C; R and C therefore see the state L read.
        assert (!(b_v && l_v) && !(b_v && r_v) && !(l_v && r_v) && !(l_v && c_v) && !(r_v && c_v));
        assert ({1'b0, pending} + b_v + l_v + r_v + c_v <= PENDING_SEGS);
        assert ({1'b0, dq_depth} + b_v + l_v + r_v + c_v <= DQ_DEPTH);
        if (r_v) assert (r_full == (occupied == cap) && r_empty == (occupied == 0) && r_h_seg == m_seg[read_ptr]);
        if (c_v) assert (c_h_seg == m_seg[read_ptr]);
        assert (!((c_enqueue || c_store || c_merge || c_pop) && !c_v));
        if (c_enqueue) assert (!c_pop && occupied != cap);
        if (c_pop) assert (occupied != 0 && c_pull);   // a pop's decision carries its DATA
        // Beat counts are at least 1 all the way to the apply stage, whose beat counter
        // stays inside the head decision (so each DATA decision is passed on once).
        if (h_valid) assert (h_nb != 0);
        if (b_v) assert (b_nb != 0);
        if (l_v) assert (l_nb != 0);
        if (r_v) assert (r_nb != 0);
        if (c_v) assert (c_nb != 0);
        assert (f_dq_nb_ok);
        assert (dq_valid ? a_beat < a_nb : a_beat == 0);
        assert (rq_valid ? o_beat < o_nb : o_beat == 0);
        // The FIFOs without frame mode write at their committed pointer.
        // (axis_fifo's own pointer asserts say the same, but only from the second cycle
        // after reset, which leaves an induction trace's first step unconstrained.)
        assert (f_dq_cur == f_dq_wr && f_rq_cur == f_rq_wr && f_of_cur == f_of_wr && f_bf_cur == f_bf_wr);
        assert (rq_depth <= RQ_DEPTH && f_bf_depth <= BF_DEPTH);
        assert ({1'b0, of_depth} + p1_valid + p2_valid <= OF_DEPTH);
        // Segments awaiting readout are exactly the DATA decisions and responses...
        assert (f_pend_count == pending);
        // ...and no segment is in two places (free ring, live slot, awaiting readout).
        for (fi = 0; fi < F_NIT; fi = fi + 1)
            for (fj = fi + 1; fj < F_NIT; fj = fj + 1)
                if (f_it_v[fi] && f_it_v[fj]) assert (f_it_seg[fi] != f_it_seg[fj]);
    end
`endif
`endif
endmodule

`default_nettype wire
