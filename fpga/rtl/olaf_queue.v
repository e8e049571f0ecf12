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
//   cfg_*      255/capacity comes from a table indexed by the registered capacity (no
//              divider); capacity may change only while rst is high. cfg_feedback (issue
//              49) selects what an UPDATE's ACK carries in queue_util: 2 the global
//              occupancy (revision 2), any other value the share of the queue the
//              UPDATE's cluster can no longer use (revision 3, DESIGN.md §3 Feedback).
//
// This module composes the pipeline, one module per stage (see fpga/README.md):
//   olaf_queue_ingest   - accepts beats, captures the header, stages value beats in the
//                         beat FIFO, holds the message in H;
//   olaf_queue_decide   - H (index BRAM read) -> B (BRAM output register; verdict)
//                         -> L (index bypass, slot / head metadata read) -> R (queue rule)
//                         -> C (commit metadata / pointers, queue the decision).
//                         A message enters the index read only when the one ahead is at
//                         least in L, so every L reads committed state; the one index
//                         write a lookup can miss (made by the message ahead in C) is
//                         bypassed;
//   olaf_queue_counters - the statistics counters and the cnt_sel read port;
//   olaf_queue_apply    - in message order, writes (ENQUEUED / REPLACED) or saturating-adds
//                         (MERGED) the staged beats into the slot's segment (read, BRAM
//                         output register, add + write; the write a read misses is
//                         forwarded);
//   olaf_queue_output   - streams response headers and, for DATA, the segment's value
//                         beats (read, output register, beat), then returns the segment
//                         to the free list;
//   olaf_queue_seg_mem  - the segment memory, written by apply, read by apply and output.
// The invariants the proofs check (FORMAL, fpga/tb/test_rtl_formal.py) span the stages,
// so they live here; each stage exposes what they read under `ifdef FORMAL.
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
    input  wire [15:0]             cfg_cluster_quota,     // 0 or > capacity: no limit; any time
    input  wire [7:0]              cfg_feedback,          // 2 revision 2, else 3; any time

    input  wire [4:0]              cnt_sel,
    output wire [63:0]             cnt_value,
    output wire [15:0]             stat_occupied,
    output wire [7:0]              stat_active_clusters,
    output wire [7:0]              stat_queue_util,
    output wire                    stat_congested
);
    // ------------------------------------------------------------------ sizes
    // The stage modules derive the same sizes from the parameters they are given.
    localparam integer W = DATA_WIDTH;
    localparam integer BW = W / 8;
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
    // Decision and response FIFO entries (olaf_queue_decide, olaf_queue_apply).
    localparam integer DQ_W = 2 + AW + BCW + 2 + ID_WIDTH + HB;
    localparam integer RQ_W = 1 + AW + ID_WIDTH + HB;
    localparam [1:0] RESP_NONE = 2'd0, RESP_HDR = 2'd1, RESP_DATA = 2'd2;

    initial begin
        if (W % 32 != 0 || W < 64) $error("DATA_WIDTH must be a multiple of 32, >= 64");
        // The apply stage's read-modify-write relies on consecutive UPDATEs being
        // at least two beats apart.
        if (NB_UPD < 2) $error("an UPDATE must span at least two beats");
        if (V < 1 || V > 255) $error("V must be 1..255 on the wire");
        if (CNT_WIDTH < 1 || CNT_WIDTH > 64) $error("CNT_WIDTH must be 1..64");
    end

    // ------------------------------------------------------------------ stage links
    wire ingress_drop;
    // ingest -> decide: the message held in H.
    wire h_valid, h_bad, h_take;
    wire [HB-1:0] h_hdr;
    wire [15:0] h_len;
    wire [BCW-1:0] h_nb;
    wire [ID_WIDTH-1:0] h_tid;
    wire [IW-1:0] h_key;
    // ingest -> apply: staged value beats.
    wire [W-1:0] bf_head;
    wire bf_pop;
    // decide -> apply: decisions; decide -> counters: increments; decide state.
    wire [DQ_W-1:0] dq_head;
    wire dq_valid, dq_pop;
    wire [NCNT-1:0] c_inc;
    wire [OW-1:0] occupied;
    wire [SW-1:0] write_ptr, read_ptr;
    wire [7:0] util_q;
    wire [15:0] active_clusters;
    wire [GW-1:0] append_available_addr;
    wire [PW-1:0] pending;
    // apply -> output: responses; output -> decide: segments read out.
    wire [RQ_W-1:0] rq_head;
    wire rq_valid, rq_pop;
    wire [$clog2(RQ_DEPTH):0] rq_depth;
    wire free_seg_valid;
    wire [AW-1:0] free_seg;
    // Segment memory ports.
    wire seg_wr_en;
    wire [AW-1:0] seg_wr_addr, seg_rd_addr_a, seg_rd_addr_b;
    wire [W-1:0] seg_wr_data, seg_rd_a, seg_rd_b;

`ifdef FORMAL
    // Stage internals the invariants below read (the stages' f_* ports), named as in
    // the stage that holds them.
    wire [OW-1:0] cap, cap_in;
    wire [MAX_CAPACITY-1:0] live;
    wire [MAX_CAPACITY*AW-1:0] f_m_seg;     // m_seg[i] at [i*AW +: AW]
    wire [NSEG*AW-1:0] f_free_list;         // free_list[i] at [i*AW +: AW]
    wire fs_v;                               // a read-out segment on its way back to the ring
    wire [AW-1:0] fs_seg;
    wire dq_room, pend_room;                 // decide's room checks, registered a cycle early
    wire [GW-1:0] avail_head;
    wire b_v, l_v, r_v, c_v;
    wire [BCW-1:0] b_nb, l_nb, r_nb, c_nb;
    wire r_full, r_empty;
    wire [AW-1:0] r_h_seg, c_h_seg;
    wire c_enqueue, c_store, c_merge, c_pop, c_pull;
    wire dq_ready;
    wire [3:0] dq_depth;
    wire bf_push, bf_ready;
    wire [BCW-1:0] a_beat, a_nb;
    wire rq_push, rq_ready;
    wire [BCW-1:0] o_beat, o_nb;
    wire p1_valid, p2_valid, of_ready;
    wire [$clog2(OF_DEPTH):0] of_depth;
`endif

    // ------------------------------------------------------------------ stages
    olaf_queue_ingest #(
        .DATA_WIDTH(DATA_WIDTH), .V(V), .MAX_CLUSTERS(MAX_CLUSTERS), .MAX_BLOCKS(MAX_BLOCKS),
        .ID_WIDTH(ID_WIDTH), .INGRESS_DEPTH(INGRESS_DEPTH)
    ) ingest_inst (
        .clk(clk), .rst(rst),
        .s_axis_tdata(s_axis_tdata), .s_axis_tkeep(s_axis_tkeep), .s_axis_tvalid(s_axis_tvalid),
        .s_axis_tready(s_axis_tready), .s_axis_tlast(s_axis_tlast), .s_axis_tid(s_axis_tid),
        .s_axis_tuser(s_axis_tuser), .ingress_drop(ingress_drop),
        .h_take(h_take), .h_valid(h_valid), .h_hdr(h_hdr), .h_len(h_len), .h_nb(h_nb),
        .h_tid(h_tid), .h_bad(h_bad), .h_key(h_key),
        .bf_pop(bf_pop), .bf_head(bf_head)
`ifdef FORMAL
        , .f_bf_push(bf_push), .f_bf_ready(bf_ready)
`endif
    );

    olaf_queue_decide #(
        .DATA_WIDTH(DATA_WIDTH), .V(V), .MAX_CAPACITY(MAX_CAPACITY), .MAX_CLUSTERS(MAX_CLUSTERS),
        .MAX_BLOCKS(MAX_BLOCKS), .PENDING_SEGS(PENDING_SEGS), .ID_WIDTH(ID_WIDTH)
    ) decide_inst (
        .clk(clk), .rst(rst),
        .cfg_capacity(cfg_capacity), .cfg_max_clusters(cfg_max_clusters),
        .cfg_max_blocks(cfg_max_blocks), .cfg_frac_bits(cfg_frac_bits), .cfg_mode(cfg_mode),
        .cfg_threshold(cfg_threshold), .cfg_congestion_threshold(cfg_congestion_threshold),
        .cfg_cluster_quota(cfg_cluster_quota), .cfg_feedback(cfg_feedback),
        .h_valid(h_valid), .h_hdr(h_hdr), .h_len(h_len), .h_nb(h_nb), .h_tid(h_tid),
        .h_bad(h_bad), .h_key(h_key), .h_take(h_take),
        .free_seg_valid(free_seg_valid), .free_seg(free_seg),
        .dq_head(dq_head), .dq_valid(dq_valid), .dq_pop(dq_pop),
        .c_inc(c_inc),
        .occupied(occupied), .write_ptr(write_ptr), .read_ptr(read_ptr), .util_q(util_q),
        .active_clusters(active_clusters), .append_available_addr(append_available_addr),
        .pending(pending)
`ifdef FORMAL
        , .f_cap(cap), .f_cap_in(cap_in), .f_live(live), .f_m_seg(f_m_seg),
        .f_free_list(f_free_list), .f_avail_head(avail_head),
        .f_b_v(b_v), .f_l_v(l_v), .f_r_v(r_v), .f_c_v(c_v),
        .f_b_nb(b_nb), .f_l_nb(l_nb), .f_r_nb(r_nb), .f_c_nb(c_nb),
        .f_r_full(r_full), .f_r_empty(r_empty), .f_r_h_seg(r_h_seg), .f_c_h_seg(c_h_seg),
        .f_c_enqueue(c_enqueue), .f_c_store(c_store), .f_c_merge(c_merge), .f_c_pop(c_pop),
        .f_c_pull(c_pull), .f_dq_ready(dq_ready), .f_dq_depth(dq_depth),
        .f_fs_v(fs_v), .f_fs_seg(fs_seg), .f_dq_room(dq_room), .f_pend_room(pend_room)
`endif
    );

    olaf_queue_counters #(
        .CNT_WIDTH(CNT_WIDTH), .NCNT(NCNT), .OW(OW), .SW(SW), .RW($clog2(RQ_DEPTH) + 1),
        .GW(GW), .PW(PW)
    ) counters_inst (
        .clk(clk), .rst(rst), .inc(c_inc), .ingress_drop(ingress_drop),
        .occupied(occupied), .write_ptr(write_ptr), .read_ptr(read_ptr), .rq_depth(rq_depth),
        .append_available_addr(append_available_addr), .pending(pending),
        .cnt_sel(cnt_sel), .cnt_value(cnt_value)
    );

    olaf_queue_apply #(
        .DATA_WIDTH(DATA_WIDTH), .V(V), .MAX_CAPACITY(MAX_CAPACITY), .PENDING_SEGS(PENDING_SEGS),
        .ID_WIDTH(ID_WIDTH)
    ) apply_inst (
        .clk(clk), .rst(rst),
        .dq_head(dq_head), .dq_valid(dq_valid), .dq_pop(dq_pop),
        .bf_head(bf_head), .bf_pop(bf_pop),
        .seg_wr_en(seg_wr_en), .seg_wr_addr(seg_wr_addr), .seg_wr_data(seg_wr_data),
        .seg_rd_addr(seg_rd_addr_a), .seg_rd_a(seg_rd_a),
        .rq_head(rq_head), .rq_valid(rq_valid), .rq_pop(rq_pop), .rq_depth(rq_depth)
`ifdef FORMAL
        , .f_a_beat(a_beat), .f_a_nb(a_nb), .f_rq_push(rq_push), .f_rq_ready(rq_ready)
`endif
    );

    olaf_queue_seg_mem #(
        .DATA_WIDTH(W), .DEPTH(NSEG * SEG_BEATS), .ADDR_WIDTH(AW)
    ) seg_mem_inst (
        .clk(clk),
        .wr_en(seg_wr_en), .wr_addr(seg_wr_addr), .wr_data(seg_wr_data),
        .rd_addr_a(seg_rd_addr_a), .rd_data_a(seg_rd_a),
        .rd_addr_b(seg_rd_addr_b), .rd_data_b(seg_rd_b)
    );

    olaf_queue_output #(
        .DATA_WIDTH(DATA_WIDTH), .V(V), .MAX_CAPACITY(MAX_CAPACITY), .PENDING_SEGS(PENDING_SEGS),
        .ID_WIDTH(ID_WIDTH)
    ) output_inst (
        .clk(clk), .rst(rst),
        .rq_head(rq_head), .rq_valid(rq_valid), .rq_pop(rq_pop),
        .free_seg_valid(free_seg_valid), .free_seg(free_seg),
        .seg_rd_addr(seg_rd_addr_b), .seg_rd_b(seg_rd_b),
        .m_axis_tdata(m_axis_tdata), .m_axis_tkeep(m_axis_tkeep), .m_axis_tvalid(m_axis_tvalid),
        .m_axis_tready(m_axis_tready), .m_axis_tlast(m_axis_tlast), .m_axis_tid(m_axis_tid)
`ifdef FORMAL
        , .f_o_beat(o_beat), .f_o_nb(o_nb), .f_p1_valid(p1_valid), .f_p2_valid(p2_valid),
        .f_of_ready(of_ready), .f_of_depth(of_depth)
`endif
    );

    // ------------------------------------------------------------------ status
    assign stat_occupied = {{(16 - OW){1'b0}}, occupied};
    assign stat_active_clusters = active_clusters > 16'd255 ? 8'd255 : active_clusters[7:0];
    assign stat_queue_util = util_q;
    assign stat_congested = util_q >= cfg_congestion_threshold;

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
        else f_free <= f_free - c_enqueue + fs_v;

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
                if (live[fi] && live[fj]) assert (f_m_seg[fi*AW +: AW] != f_m_seg[fj*AW +: AW]);
            for (fj = 0; fj < NSEG; fj = fj + 1)
                if (live[fi] && (fj >= avail_head ? fj - avail_head : fj + NSEG - avail_head) < f_free)
                    assert (f_free_list[fj*AW +: AW] != f_m_seg[fi*AW +: AW]);
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
    // The FIFOs' internals (inside the stage modules) are bound to these wires by the proof
    // model after flattening (fpga/formal/olaf_queue_model.ys, `connect`); yosys 0.23 has no
    // hierarchical references.
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
    localparam integer F_NIT = NSEG + MAX_CAPACITY + DQ_DEPTH + RQ_DEPTH + 1;
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
            f_it_seg[fi] = f_free_list[fi*AW +: AW];
        end
        for (fi = 0; fi < MAX_CAPACITY; fi = fi + 1) begin
            f_it_v[NSEG + fi] = live[fi];
            f_it_seg[NSEG + fi] = f_m_seg[fi*AW +: AW];
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
        // The segment the output stage handed back last cycle, not in the ring yet.
        f_it_v[F_NIT - 1] = fs_v;
        f_it_seg[F_NIT - 1] = fs_seg;
        f_pend_count = f_pend_count + fs_v;
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
        // The room checks registered a cycle early (decide's dq_room, pend_room) still
        // promise room for the two messages ahead of one that H may take now.
        if (dq_room && !b_v && !l_v) assert ({1'b0, dq_depth} + r_v + c_v < DQ_DEPTH);
        if (pend_room && !b_v && !l_v) assert ({1'b0, pending} + r_v + c_v < PENDING_SEGS);
        assert ({1'b0, pending} + b_v + l_v + r_v + c_v <= PENDING_SEGS);
        assert ({1'b0, dq_depth} + b_v + l_v + r_v + c_v <= DQ_DEPTH);
        if (r_v) assert (r_full == (occupied == cap) && r_empty == (occupied == 0) && r_h_seg == f_m_seg[read_ptr*AW +: AW]);
        if (c_v) assert (c_h_seg == f_m_seg[read_ptr*AW +: AW]);
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
        // Segments awaiting readout are exactly the DATA decisions and responses and the one
        // on its way back...
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
