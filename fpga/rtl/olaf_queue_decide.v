// olaf_queue decide stage: five register stages that judge one message at a time by
// the queue rule of DESIGN.md §3 and commit its effect on the slot state.
//   H  the [cluster][block] index block RAM is read at the held key (ingest's H register);
//   B  the read passes the BRAM output register; olaf_verdict validates the message and
//      the reward bounds reward -/+ threshold are computed;
//   L  index bypass, then the looked-up slot's and the head slot's metadata (LUT RAM),
//      the per-cluster counts (and whether the UPDATE's cluster holds its quota) and both
//      candidate utilisations are read into registers, and so is what the UPDATE's
//      cluster could no longer use (revision 3's capacity - room_c) without and with
//      an enqueue, for either mode;
//   R  hit, the reward compares and the rule give the outcome; counter enables, merge
//      candidates and the feedback after the operation are registered (revision 3's
//      two candidates go through olaf_util_of, C picks the one the outcome made);
//   C  commits slot metadata, write_ptr / read_ptr, per-cluster counts, the active-cluster
//      count and the free segment ring, and queues the decision with its response header
//      in the decision FIFO, which the apply stage reads.
// A message leaves H only when the one ahead has reached R, so every L reads state the
// one ahead has committed; the one index write a lookup can miss (made by the message
// ahead in C) is bypassed. The slot state lives here because L reads what C writes.
// The output stage hands back each segment whose DATA has been read out (free_seg).
`default_nettype none
// Comparisons against integer parameters and narrow array indices are deliberate
// zero-extensions / truncations; Verilator would flag every one of them.
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_queue_decide #(
    parameter integer DATA_WIDTH = 512,
    parameter integer V = 64,
    parameter integer MAX_CAPACITY = 64,
    parameter integer MAX_CLUSTERS = 16,
    parameter integer MAX_BLOCKS = 1024,
    parameter integer PENDING_SEGS = 8,
    parameter integer ID_WIDTH = 8,
    // Derived (the top passes only the parameters above; see olaf_queue.v for each).
    parameter integer NB_UPD = (36 + 4 * V + DATA_WIDTH / 8 - 1) / (DATA_WIDTH / 8),
    parameter integer BCW = $clog2(NB_UPD + 1),
    parameter integer CW = MAX_CLUSTERS > 1 ? $clog2(MAX_CLUSTERS) : 1,
    parameter integer KW = MAX_BLOCKS > 1 ? $clog2(MAX_BLOCKS) : 1,
    parameter integer NSEG = MAX_CAPACITY + PENDING_SEGS,
    parameter integer SW = MAX_CAPACITY > 1 ? $clog2(MAX_CAPACITY) : 1,
    parameter integer GW = $clog2(NSEG),
    parameter integer AW = $clog2(NSEG * NB_UPD),
    parameter integer OW = $clog2(MAX_CAPACITY + 1),
    parameter integer PW = $clog2(PENDING_SEGS + 1),
    parameter integer DQ_W = 2 + AW + BCW + 2 + ID_WIDTH + 36 * 8,
    parameter integer NCNT = 23
) (
    input  wire                    clk,
    input  wire                    rst,

    input  wire [15:0]             cfg_capacity,
    input  wire [16:0]             cfg_max_clusters,
    input  wire [16:0]             cfg_max_blocks,
    input  wire [7:0]              cfg_frac_bits,
    input  wire                    cfg_mode,
    input  wire [30:0]             cfg_threshold,
    input  wire [7:0]              cfg_congestion_threshold,
    input  wire [15:0]             cfg_cluster_quota,
    input  wire [7:0]              cfg_feedback,

    // The message held in ingest's H register.
    input  wire                    h_valid,
    input  wire [36*8-1:0]         h_hdr,
    input  wire [15:0]             h_len,
    input  wire [BCW-1:0]          h_nb,
    input  wire [ID_WIDTH-1:0]     h_tid,
    input  wire                    h_bad,
    input  wire [CW+KW-1:0]        h_key,
    output wire                    h_take,

    // A segment whose DATA has been read out, back to the free ring.
    input  wire                    free_seg_valid,
    input  wire [AW-1:0]           free_seg,

    // Decision FIFO head: {op, segment, beats, response kind, tid, response header}.
    output wire [DQ_W-1:0]         dq_head,
    output wire                    dq_valid,
    input  wire                    dq_pop,

    // Per-counter increment enables of the message in C (olaf_queue_counters).
    output reg  [NCNT-1:0]         c_inc,

    // State for the status outputs and the counter read port.
    output reg  [OW-1:0]           occupied,
    output reg  [SW-1:0]           write_ptr,
    output reg  [SW-1:0]           read_ptr,
    output reg  [7:0]              util_q,
    output reg  [15:0]             active_clusters,
    output reg  [GW-1:0]           append_available_addr,
    output reg  [PW-1:0]           pending          // popped segments not yet read out
`ifdef FORMAL
    ,
    // Internals the invariants of olaf_queue.v's FORMAL block read.
    output wire [OW-1:0]           f_cap,
    output wire [OW-1:0]           f_cap_in,
    output wire [MAX_CAPACITY-1:0] f_live,
    output wire [MAX_CAPACITY*AW-1:0] f_m_seg,
    output wire [NSEG*AW-1:0]      f_free_list,
    output wire [GW-1:0]           f_avail_head,
    output wire                    f_b_v, f_l_v, f_r_v, f_c_v,
    output wire [BCW-1:0]          f_b_nb, f_l_nb, f_r_nb, f_c_nb,
    output wire                    f_r_full, f_r_empty,
    output wire [AW-1:0]           f_r_h_seg, f_c_h_seg,
    output wire                    f_c_enqueue, f_c_store, f_c_merge, f_c_pop, f_c_pull,
    output wire                    f_dq_ready,
    output wire [3:0]              f_dq_depth,
    output wire                    f_fs_v,
    output wire [AW-1:0]           f_fs_seg,
    output wire                    f_dq_room, f_pend_room
`endif
);
    // ------------------------------------------------------------------ sizes
    localparam integer HDR = 36;
    localparam integer HB = HDR * 8;
    localparam integer SEG_BEATS = NB_UPD;
    localparam integer IW = CW + KW;
    localparam integer DQ_DEPTH = 8;

    localparam [1:0] OP_NONE = 2'd0, OP_STORE = 2'd1, OP_MERGE = 2'd2;
    localparam [1:0] RESP_NONE = 2'd0, RESP_HDR = 2'd1, RESP_DATA = 2'd2;
    localparam [3:0] T_UPDATE = 4'd1, T_ACK = 4'd2, T_PULL = 4'd3, T_DATA = 4'd4,
                     T_EMPTY = 4'd5, T_MODEL = 4'd6;
    localparam [7:0] O_ENQUEUED = 8'd0, O_MERGED = 8'd1, O_REPLACED = 8'd2,
                     O_DROPPED_REWARD = 8'd3, O_DROPPED_FULL = 8'd4, O_DROPPED_INVALID = 8'd5;
    // Feedback revisions (DESIGN.md §3 Feedback): 2 gives every ACK the global occupancy;
    // any other value is revision 3 (the UPDATE's cluster's room), as on the P4 targets.
    localparam [7:0] FEEDBACK_REV2 = 8'd2;
    // Counter slots in olaf_queue_counters: outcome o at o, bad frame 6, ingress drop 7,
    // type t at 7+t, verdict v at 13+v.
    localparam integer C_BAD = 6, C_TYPE = 7, C_VERDICT = 13;

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

    reg [OW-1:0] cluster_count [0:MAX_CLUSTERS-1];
    // 255*occupied = util_q*capacity + util_r (util_q is a port), kept incrementally so
    // that queue_util = util_q exactly with a runtime capacity and no divider.
    reg [OW:0] util_r;

    // Free segments: a ring of base addresses of every segment not owned by a slot
    // or a DATA.
    reg [AW-1:0] free_list [0:NSEG-1];
    reg [GW-1:0] avail_head;            // append_available_addr and pending are ports

    // A read-out segment's return, registered: the output FIFO's room decides rq_pop late
    // in the cycle, and the free ring's write enables fan out to every entry.
    reg fs_v;
    reg [AW-1:0] fs_seg;
    always @(posedge clk) begin
        fs_v <= !rst && free_seg_valid;
        fs_seg <= free_seg;
    end

    integer i;
`ifndef SYNTHESIS
    initial begin
        // FPGA block RAM powers up zeroed; give the simulators the same contents
        // (no X ever reaches m_axis). Synthesis needs no init loop for that.
        for (i = 0; i < (1 << IW); i = i + 1) index_mem[i] = {SW{1'b0}};
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
    // cluster_quota (DESIGN.md §3 step 4): a cluster holding quota slots gets DROPPED_FULL
    // for a new slot. 0 or above capacity is no limit (= capacity: a count that reaches
    // it means a full queue anyway), as on v1model. Run time, like mode and thresholds.
    reg [OW-1:0] quota;
    always @(posedge clk) begin
        cap <= cap_in[OW-1:0];
        quota <= (cfg_cluster_quota == 16'd0 || cfg_cluster_quota > cap) ? cap
               : cfg_cluster_quota[OW-1:0];
        util_step_q <= step_q_tab[8*cap +: 8];
        util_step_r <= step_r_tab[(OW+1)*cap +: OW+1];
    end
    // ------------------------------------------------------------------ decide: H -> B
    reg b_v, l_v, r_v, c_v;
    wire [3:0] dq_depth;
    // The message ahead must be at least in L (so this one's L follows its C), the
    // decision FIFO must hold every message in flight, and a PULL in flight may pop.
    // The room checks are registered a cycle early (timing: the FIFO depth and pending
    // count no longer reach h_take and the header capture enables combinationally). From
    // the cycle before, dq_depth and pending grow by at most c_v, and this cycle's r_v + c_v
    // are that cycle's l_v + r_v, so a room seen then is room now; a pop shows a cycle late.
    reg dq_room, pend_room;
    always @(posedge clk) begin
        dq_room <= !rst && ({1'b0, dq_depth} + c_v + l_v + r_v) < DQ_DEPTH;
        pend_room <= !rst && ({1'b0, pending} + c_v + l_v + r_v) < PENDING_SEGS;
    end
    assign h_take = h_valid && !b_v && !l_v && dq_room && pend_room;

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
    reg r_full, r_empty, r_ucl_zero, r_hcl_one, r_ucl_quota;
    reg [OW-1:0] r_ucl_count, r_hcl_count;
    reg [7:0] r_util_up_q, r_util_down_q;
    reg [OW:0] r_util_up_r, r_util_down_r;
    reg r_cong_up, r_cong_down, r_cong_same;
    // Revision 3: capacity - room_c after the operation, x_same (no enqueue) and x_enq,
    // in OLAF mode (x_o: the cluster's own slots take its next update, so room_c =
    // held + new room) and FIFO mode (x_f: room_c = new room only). With new room =
    // max(0, min(cap - occupied, quota - held)) these are
    //   OLAF: x = min(cap - held, max(occupied - held, cap - quota)),
    //   FIFO: x = min(cap, max(occupied, cap - quota + held)),
    // and an enqueue adds one to held and to occupied. quota <= cap and held <= occupied.
    reg [OW-1:0] r_xo_same, r_xo_enq, r_xf_same, r_xf_enq;
    wire [OW-1:0] l_held = cluster_count[l_cluster[CW-1:0]];
    wire [OW-1:0] l_spare = cap - quota;           // slots no cluster may take under the quota
    wire [OW-1:0] l_others = occupied - l_held;    // slots of the other clusters
    wire [OW-1:0] l_xo_max = l_others > l_spare ? l_others : l_spare;
    wire [OW-1:0] l_xo_cap = cap - l_held;
    wire [OW:0] l_xf_quota = {1'b0, l_spare} + l_held;
    wire [OW:0] l_xf_same = {1'b0, occupied} > l_xf_quota ? {1'b0, occupied} : l_xf_quota;
    wire [OW:0] l_xf_enq = l_xf_same + 1'b1;

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
        r_ucl_quota <= cluster_count[l_cluster[CW-1:0]] >= quota;
        r_hcl_one <= cluster_count[r_cluster[CW-1:0]] == 1;
        r_util_up_q <= util_up_q;
        r_util_up_r <= up_r_next[OW:0];
        r_util_down_q <= util_down_q;
        r_util_down_r <= util_down_r;
        r_cong_up <= util_up_q >= cfg_congestion_threshold;
        r_cong_down <= util_down_q >= cfg_congestion_threshold;
        r_cong_same <= util_q >= cfg_congestion_threshold;
        r_xo_same <= l_xo_cap < l_xo_max ? l_xo_cap : l_xo_max;
        // Only taken after an enqueue, when held < quota <= cap.
        r_xo_enq <= l_xo_cap - 1'b1 < l_xo_max ? l_xo_cap - 1'b1 : l_xo_max;
        r_xf_same <= l_xf_same > cap ? cap : l_xf_same[OW-1:0];
        r_xf_enq <= l_xf_enq > cap ? cap : l_xf_enq[OW-1:0];
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
        end else if (r_full || r_ucl_quota) outcome = O_DROPPED_FULL;
        else outcome = O_ENQUEUED;
    end
    // Revision 3's queue_util of the two candidates (mode read here, as the rule reads it).
    wire [7:0] room_util_same, room_util_enq;
    olaf_util_of #(.MAX_CAPACITY(MAX_CAPACITY)) util_same (
        .clk(clk), .cap(cap), .x(cfg_mode ? r_xf_same : r_xo_same), .util(room_util_same));
    olaf_util_of #(.MAX_CAPACITY(MAX_CAPACITY)) util_enq (
        .clk(clk), .cap(cap), .x(cfg_mode ? r_xf_enq : r_xo_enq), .util(room_util_enq));

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
    reg c_room_fb;                     // the ACK of a valid UPDATE under revision 3
    reg [7:0] c_room_same, c_room_enq;
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
        c_room_fb <= is_update && cfg_feedback != FEEDBACK_REV2;
        c_room_same <= room_util_same;
        c_room_enq <= room_util_enq;
        c_active <= active_clusters + (do_enqueue && r_ucl_zero) - (do_pop && r_hcl_one);
    end

    // ------------------------------------------------------------------ C: commit
    wire [7:0] active_fb = c_active > 16'd255 ? 8'd255 : c_active[7:0];
    wire [7:0] flags_fb = {7'd0, c_cong};
    // CONGESTED, active_clusters, DATA and EMPTY stay global in both revisions; an
    // invalid UPDATE's ACK (DROPPED_INVALID) has no cluster to speak of: global too.
    wire [7:0] ack_util = !c_room_fb ? c_util_q : c_enqueue ? c_room_enq : c_room_same;
    wire [3:0] c_ver = c_hdr[7:4];
    wire [HB-1:0] ack_hdr = {c_hdr[HB-1:8*14], 8'd0, ack_util, active_fb,
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
        end else begin
            if (fs_v) begin
                free_list[append_available_addr] <= fs_seg;
                append_available_addr <= (append_available_addr == NSEG - 1)
                                         ? {GW{1'b0}} : append_available_addr + 1'b1;
            end
            pending <= pending + c_pop - fs_v;
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
    wire dq_ready;
    axis_fifo #(.DEPTH(DQ_DEPTH), .DATA_WIDTH(DQ_W), .LAST_ENABLE(0)) decision_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata({dq_op, dq_seg, c_nb, dq_resp, c_tid, dq_hdr}), .s_axis_tkeep({(DQ_W+7)/8{1'b1}}),
        .s_axis_tvalid(c_v && !rst), .s_axis_tready(dq_ready), .s_axis_tlast(1'b1),
        .s_axis_tid(8'd0), .s_axis_tuser(1'b0),
        .m_axis_tdata(dq_head), .m_axis_tkeep(), .m_axis_tvalid(dq_valid),
        .m_axis_tready(dq_pop), .m_axis_tlast(), .m_axis_tid(), .m_axis_tuser(),
        .status_depth(dq_depth), .status_overflow(), .status_bad_frame(), .status_good_frame()
    );
`ifdef FORMAL
    assign f_cap = cap;
    assign f_cap_in = cap_in[OW-1:0];
    assign f_live = live;
    assign f_avail_head = avail_head;
    genvar gf;
    generate
        for (gf = 0; gf < MAX_CAPACITY; gf = gf + 1) begin : g_f_slot
            assign f_m_seg[gf*AW +: AW] = m_seg[gf];
        end
        for (gf = 0; gf < NSEG; gf = gf + 1) begin : g_f_free
            assign f_free_list[gf*AW +: AW] = free_list[gf];
        end
    endgenerate
    assign {f_b_v, f_l_v, f_r_v, f_c_v} = {b_v, l_v, r_v, c_v};
    assign {f_b_nb, f_l_nb, f_r_nb, f_c_nb} = {b_nb, l_nb, r_nb, c_nb};
    assign {f_r_full, f_r_empty, f_r_h_seg, f_c_h_seg} = {r_full, r_empty, r_h_seg, c_h_seg};
    assign {f_c_enqueue, f_c_store, f_c_merge, f_c_pop, f_c_pull} = {c_enqueue, c_store, c_merge, c_pop, c_pull};
    assign f_dq_ready = dq_ready;
    assign f_dq_depth = dq_depth;
    assign f_fs_v = fs_v;
    assign f_fs_seg = fs_seg;
    assign {f_dq_room, f_pend_room} = {dq_room, pend_room};
`endif
endmodule

`default_nettype wire
