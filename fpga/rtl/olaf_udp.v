// Ethernet/IPv4/UDP shell of the OlafQueue: what the software switch's interface
// mode (dataplane/ethernet.py, EthernetSwitch.handle) does per frame, in RTL.
//
// MAC side: AXI-Stream Ethernet frames without FCS, as a MAC core delivers them
// (verilog-ethernet style): frame byte 0 in tdata[7:0], contiguous low tkeep on the
// last beat, tuser = bad frame (FCS error / MAC abort) flagged on any beat up to tlast.
// The receive side has no tready: a MAC cannot be back-pressured, so whole frames are
// dropped (and counted) when the ingress FIFO cannot take them.
//
// Per received frame, with the software switch's tests (ethernet.py `is_olaf`):
//   * bad (tuser)                                  -> dropped, counted RX_BAD
//   * shorter than 14 bytes                        -> dropped, counted RX_RUNT
//   * IPv4 (no options) / UDP to port 20300, UDP length >= 8 and within the frame:
//       - OLAF MODEL (msg_type 6)                  -> forward port, unchanged
//       - anything else                            -> queue: the UDP payload, trimmed
//         to the UDP length (Ethernet padding removed), one AXI-Stream packet
//   * every other frame (IPv4 or not)              -> forward port, unchanged, when
//     fwd_other is 1 (the software switch routes / floods them); dropped and counted
//     RX_FILTERED when it is 0.
// Forwarded frames leave unchanged: routing (next-hop MAC, TTL) is the job of the
// switch the shell sits in, as the P4 program's ipv4_lpm table is.
//
// Answers (ACK / DATA / EMPTY) leave on the MAC transmit side with the request's
// Ethernet, IPv4 and UDP headers, addresses and ports swapped, IPv4 total length and
// UDP length set from the answer, IPv4 header checksum recomputed and UDP checksum 0:
// byte for byte what ethernet.py's response_headers builds.
//
// Request headers wait in the answer header ring for their answer. A message
// reaches the queue with tid = {0, ring slot} if the queue will answer it, else
// tid = {1, 0}; which messages are answered is decided by olaf_verdict, the module
// the queue validates with (every UPDATE with a readable header, length >= 36 and
// version 1, and every valid PULL: num_values 0 and length 36).
// The queue returns the tid with the answer, so the answer picks its header by slot:
// a slot whose answer never comes is skipped (and freed) by the next answer, and an
// answer without a slot is dropped; both are counted (ANSWER_MISMATCH), neither can
// put a wrong header on an answer.
`default_nettype none
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_udp #(
    parameter integer DATA_WIDTH = 64,
    parameter integer V = 64,               // the queue's V: a DATA answer is 36 + 4V bytes
    parameter integer FIFO_BEATS = 512,     // ingress frame FIFO (power of two); larger frames drop
    parameter integer FRAME_SLOTS = 32,     // frames in the ingress FIFO at once (power of two)
    parameter integer ANSWER_SLOTS = 16,    // requests awaiting their answer (power of two)
    parameter integer ID_WIDTH = 8          // the queue's tid width, > log2(ANSWER_SLOTS)
) (
    input  wire                    clk,
    input  wire                    rst,
    input  wire                    fwd_other,      // 1: non-OLAF frames to m_fwd; 0: drop them

    // From the MAC (receive): no tready.
    input  wire [DATA_WIDTH-1:0]   s_mac_tdata,
    input  wire [DATA_WIDTH/8-1:0] s_mac_tkeep,
    input  wire                    s_mac_tvalid,
    input  wire                    s_mac_tlast,
    input  wire                    s_mac_tuser,

    // To the MAC (transmit): the queue's answers as Ethernet frames.
    output reg  [DATA_WIDTH-1:0]   m_mac_tdata,
    output reg  [DATA_WIDTH/8-1:0] m_mac_tkeep,
    output reg                     m_mac_tvalid,
    input  wire                    m_mac_tready,
    output reg                     m_mac_tlast,
    output wire                    m_mac_tuser,

    // Forwarded frames (MODEL, non-OLAF), unchanged.
    output wire [DATA_WIDTH-1:0]   m_fwd_tdata,
    output wire [DATA_WIDTH/8-1:0] m_fwd_tkeep,
    output wire                    m_fwd_tvalid,
    input  wire                    m_fwd_tready,
    output wire                    m_fwd_tlast,

    // To the queue: OLAF payloads (36-byte header + values), payload byte 0 in tdata[7:0].
    output reg  [DATA_WIDTH-1:0]   m_q_tdata,
    output reg  [DATA_WIDTH/8-1:0] m_q_tkeep,
    output reg                     m_q_tvalid,
    input  wire                    m_q_tready,
    output reg                     m_q_tlast,
    output reg  [ID_WIDTH-1:0]     m_q_tid,

    // From the queue: answer payloads.
    input  wire [DATA_WIDTH-1:0]   s_q_tdata,
    input  wire [DATA_WIDTH/8-1:0] s_q_tkeep,
    input  wire                    s_q_tvalid,
    output wire                    s_q_tready,
    input  wire                    s_q_tlast,
    input  wire [ID_WIDTH-1:0]     s_q_tid,

    // Frame counters, 64 bits each, counter i at [64*i +: 64] (see CNT_* below).
    output wire [64*NCNT-1:0]      counters
);
    localparam integer W = DATA_WIDTH;
    localparam integer BW = W / 8;
    localparam integer L2L3L4 = 42;            // Ethernet 14 + IPv4 20 + UDP 8
    localparam integer J0 = L2L3L4 / BW;       // beat holding the first payload byte
    localparam integer OFF = L2L3L4 % BW;      // its lane
    localparam integer CAPB = L2L3L4 + 14;     // header bytes read at ingress (payload byte 13)
    localparam integer HB = L2L3L4 * 8;
    localparam integer FA = $clog2(FIFO_BEATS);
    localparam integer IA = $clog2(FRAME_SLOTS);
    localparam integer HA = $clog2(ANSWER_SLOTS);
    localparam integer KC = $clog2(BW + 1);
    localparam [15:0] OLAF_PORT = 16'd20300;
    localparam [15:0] DATA_BYTES = 36 + 4 * V;

    // Counter numbers (the AXI-Lite block's shell counter window follows this order).
    localparam integer CNT_RX_FRAMES = 0;      // frames seen (every tlast)
    localparam integer CNT_RX_BAD = 1;         // dropped: tuser (bad FCS)
    localparam integer CNT_RX_OVERFLOW = 2;    // dropped: ingress FIFO / frame slots / answer slots full
    localparam integer CNT_RX_RUNT = 3;        // dropped: shorter than an Ethernet header
    localparam integer CNT_RX_FILTERED = 4;    // dropped: non-OLAF while fwd_other is 0
    localparam integer CNT_TO_QUEUE = 5;       // OLAF payloads handed to the queue
    localparam integer CNT_FWD_MODEL = 6;      // MODEL frames forwarded
    localparam integer CNT_FWD_OTHER = 7;      // non-OLAF frames forwarded
    localparam integer CNT_TX_ANSWERS = 8;     // answer frames sent to the MAC
    localparam integer CNT_ANSWER_MISMATCH = 9; // header slots skipped + answers without one
    localparam integer NCNT = 10;

    initial begin
        if (W % 64 != 0) $error("DATA_WIDTH must be a multiple of 64");
        if (ID_WIDTH <= HA) $error("ID_WIDTH must exceed log2(ANSWER_SLOTS)");
        if ((1 << FA) != FIFO_BEATS || (1 << IA) != FRAME_SLOTS || (1 << HA) != ANSWER_SLOTS)
            $error("FIFO sizes must be powers of two");
    end

    function [BW-1:0] keep_of(input [15:0] bytes);   // low `bytes` lanes, bytes <= BW
        integer j;
        begin
            for (j = 0; j < BW; j = j + 1) keep_of[j] = (j < bytes);
        end
    endfunction

    // ================================================================ ingress
    // Frame FIFO: axis_fifo in frame mode. It keeps a frame only once its tlast is in,
    // drops the whole frame when it does not fit (DROP_WHEN_FULL: a MAC cannot be
    // back-pressured), and drops a frame whose tuser is set on its tlast beat
    // (DROP_BAD_FRAME). The shell sets that tuser for every frame it will not keep:
    // flagged bad by the MAC on any beat, a runt, filtered, or no room in the frame-info
    // or answer header FIFOs. The FIFO's verdict on a frame (status_good_frame /
    // _bad_frame / _overflow, one cycle after its tlast) commits the frame's info.
    // Frame info FIFO {to_queue, answered, answer slot, payload length}, per committed frame.
    reg [18+HA-1:0] imem [0:FRAME_SLOTS-1];
    reg [IA:0] iwr, ird;
    // Answer header FIFO {swapped L2-L4 header, partial IPv4 checksum sum}.
    reg [HB+19-1:0] hmem [0:ANSWER_SLOTS-1];
    reg [HA:0] hwr, hrd;

    reg [15:0] ib;                  // beat number in the frame (saturating)
    reg [15:0] ilen;                // bytes so far (saturating)
    reg ibad;                       // tuser seen: drop at tlast
    reg [8*CAPB-1:0] icap;

    // After a reset the MAC may be in the middle of a frame: start at the first beat
    // that follows an idle cycle or a tlast, so a frame's tail is never taken for a frame.
    reg in_sync;
    always @(posedge clk) begin
        if (rst) in_sync <= 1'b0;
        else if (!s_mac_tvalid || s_mac_tlast) in_sync <= 1'b1;
    end
    wire in_beat = s_mac_tvalid && !rst && in_sync;

    reg [KC-1:0] keep_cnt;
    integer k;
    always @* begin
        keep_cnt = 0;
        for (k = 0; k < BW; k = k + 1) keep_cnt = keep_cnt + s_mac_tkeep[k];
    end
    wire [16:0] len_sum = {1'b0, ilen} + keep_cnt;
    wire [15:0] len_next = len_sum[16] ? 16'hffff : len_sum[15:0];

    wire [8*CAPB-1:0] cap_next;
    genvar gb;
    generate
        for (gb = 0; gb < CAPB; gb = gb + 1) begin : g_cap
            assign cap_next[8*gb +: 8] = (ib == gb / BW) ? s_mac_tdata[8*(gb % BW) +: 8]
                                                         : icap[8*gb +: 8];
        end
    endgenerate
    // Byte `at` of the captured header (the header is an argument: a function reading a
    // module signal directly would not be re-evaluated when the signal changes).
    function [7:0] fb(input [8*CAPB-1:0] h, input integer at);
        fb = h[8*at +: 8];
    endfunction
    wire [15:0] eth_type = {fb(cap_next, 12), fb(cap_next, 13)};
    wire [15:0] udp_dport = {fb(cap_next, 36), fb(cap_next, 37)};
    wire [15:0] udp_len = {fb(cap_next, 38), fb(cap_next, 39)};
    wire [15:0] plen = udp_len - 16'd8;
    wire [7:0] olaf_b0 = fb(cap_next, 42);   // version << 4 | msg_type
    wire [7:0] olaf_nv = fb(cap_next, 55);   // num_values

    wire is_runt = len_next < 16'd14;
    wire is_ipv4 = len_next >= 16'd34 && eth_type == 16'h0800;
    wire is_olaf = is_ipv4 && len_next >= 16'd42
                 && fb(cap_next, 14) == 8'h45 && fb(cap_next, 23) == 8'd17
                 && udp_dport == OLAF_PORT && udp_len >= 16'd8
                 && ({1'b0, udp_len} + 17'd34 <= {1'b0, len_next});
    wire is_model = is_olaf && udp_len > 16'd8 && olaf_b0[3:0] == 4'd6;
    wire to_queue = is_olaf && !is_model;
    // Whether the queue will answer: the queue's own rule (olaf_verdict), from the
    // fields it depends on; cluster, block, frac_bits and the configuration only choose
    // between answered verdicts, so they are tied off here.
    wire v_answered;
    wire [3:0] v_verdict_unused;
    wire v_ok_unused, v_type_known_unused;
    olaf_verdict #(.V(V)) validate (
        .msg_len(plen), .version(olaf_b0[7:4]), .msg_type(olaf_b0[3:0]), .num_values(olaf_nv),
        .frac_bits(8'd0), .cluster(16'd0), .block(16'd0),
        .cfg_frac_bits(8'd0), .max_clusters(17'd1), .max_blocks(17'd1),
        .verdict(v_verdict_unused), .ok(v_ok_unused), .type_known(v_type_known_unused),
        .answered(v_answered)
    );
    wire answered = to_queue && v_answered;

    // The answer's header: request header with MACs, IPs, UDP ports swapped and the
    // checksums zeroed; lengths and the IPv4 checksum are filled in at egress.
    // Partial checksum: the IPv4 header words except total length and checksum (the
    // swap does not change a one's-complement sum).
    wire [HB-1:0] ans_hdr;
    reg [18:0] ans_psum;
    generate
        for (gb = 0; gb < L2L3L4; gb = gb + 1) begin : g_ans
            localparam integer SRC = (gb < 6) ? gb + 6 : (gb < 12) ? gb - 6
                                   : (gb >= 26 && gb < 30) ? gb + 4 : (gb >= 30 && gb < 34) ? gb - 4
                                   : (gb >= 34 && gb < 36) ? gb + 2 : (gb >= 36 && gb < 38) ? gb - 2 : gb;
            localparam integer ZERO = (gb == 24 || gb == 25 || gb == 40 || gb == 41);
            assign ans_hdr[8*gb +: 8] = ZERO ? 8'd0 : cap_next[8*SRC +: 8];
        end
    endgenerate
    always @* begin
        ans_psum = 19'd0;
        for (k = 14; k < 34; k = k + 2)
            if (k != 16 && k != 24) ans_psum = ans_psum + {fb(cap_next, k), fb(cap_next, k + 1)};
    end

    // The frame kept in the cycle before (p_*, committed now) counts against the room.
    wire f_good, f_bad, f_overflow;
    reg p_to_queue, p_answered, p_model, p_bad, p_runt, p_keep;
    reg [15:0] p_plen;
    reg [HB-1:0] p_ans_hdr;
    reg [18:0] p_ans_psum;
    wire [IA:0] i_held = iwr - ird;
    wire [HA:0] h_held = hwr - hrd;
    wire [IA+1:0] i_used = i_held + f_good;
    wire [HA+1:0] h_used = h_held + (f_good && p_answered);
    wire i_full = i_used >= FRAME_SLOTS;
    wire h_full = h_used >= ANSWER_SLOTS;
    wire keep_frame = to_queue || is_model || fwd_other;
    wire drop_at_tlast = ibad || s_mac_tuser || is_runt || !keep_frame || i_full || (answered && h_full);

    reg [63:0] cnt [0:NCNT-1];
    genvar gc;
    generate
        for (gc = 0; gc < NCNT; gc = gc + 1) begin : g_cnt_out
            assign counters[64*gc +: 64] = cnt[gc];
        end
    endgenerate

    wire [W-1:0] cur;
    wire [BW-1:0] cur_keep;
    wire cur_last, head_v, pop, head_user_unused, fifo_ready_unused;
    wire [FA:0] fifo_depth_unused;
    axis_fifo #(
        .DEPTH(FIFO_BEATS), .DATA_WIDTH(W), .KEEP_ENABLE(1), .KEEP_WIDTH(BW),
        .USER_ENABLE(1), .USER_WIDTH(1), .FRAME_FIFO(1), .DROP_BAD_FRAME(1), .DROP_WHEN_FULL(1),
        .RAM_PIPELINE(1)
    ) frame_fifo (
        .clk(clk), .rst(rst),
        .s_axis_tdata(s_mac_tdata), .s_axis_tkeep(s_mac_tkeep), .s_axis_tvalid(in_beat),
        .s_axis_tready(fifo_ready_unused), .s_axis_tlast(s_mac_tlast), .s_axis_tid(8'd0),
        .s_axis_tuser(s_mac_tlast && drop_at_tlast),
        .m_axis_tdata(cur), .m_axis_tkeep(cur_keep), .m_axis_tvalid(head_v), .m_axis_tready(pop),
        .m_axis_tlast(cur_last), .m_axis_tid(), .m_axis_tuser(head_user_unused),
        .status_depth(fifo_depth_unused), .status_overflow(f_overflow),
        .status_bad_frame(f_bad), .status_good_frame(f_good)
    );

    always @(posedge clk) begin
        if (rst) begin
            iwr <= 0;
            hwr <= 0;
            ib <= 16'd0;
            ilen <= 16'd0;
            ibad <= 1'b0;
        end else begin
            if (in_beat) begin
                if (s_mac_tlast) begin
                    ib <= 16'd0;
                    ilen <= 16'd0;
                    ibad <= 1'b0;
                end else begin
                    ib <= (ib == 16'hffff) ? ib : ib + 16'd1;
                    ilen <= len_next;
                    icap <= cap_next;
                    ibad <= ibad || s_mac_tuser;
                end
            end
            // The FIFO kept the frame whose tlast came in the cycle before.
            if (f_good) begin
                imem[iwr[IA-1:0]] <= {p_to_queue, p_answered, hwr[HA-1:0], p_plen};
                iwr <= iwr + 1'b1;
                if (p_answered) begin
                    hmem[hwr[HA-1:0]] <= {p_ans_hdr, p_ans_psum};
                    hwr <= hwr + 1'b1;
                end
            end
        end
        if (in_beat && s_mac_tlast) begin
            p_to_queue <= to_queue;
            p_answered <= answered;
            p_model <= is_model;
            p_bad <= ibad || s_mac_tuser;
            p_runt <= is_runt;
            p_keep <= keep_frame;
            p_plen <= plen;
            p_ans_hdr <= ans_hdr;
            p_ans_psum <= ans_psum;
        end
    end

    // ================================================================ router

    localparam [1:0] R_IDLE = 2'd0, R_FWD = 2'd1, R_QUEUE = 2'd2;
    reg [1:0] rstate;
    reg [15:0] rb, rem;
    reg [W-1:0] prev;
    reg tail_pending, q_done, seen_last;
    reg [ID_WIDTH-1:0] q_tid;
    wire [18+HA-1:0] info = imem[ird[IA-1:0]];
    wire q_load = !m_q_tvalid || m_q_tready;

    assign m_fwd_tdata = cur;
    assign m_fwd_tkeep = cur_keep;
    assign m_fwd_tlast = cur_last;
    assign m_fwd_tvalid = rstate == R_FWD && head_v;

    // Beats taken from the frame FIFO in the queue path: header beats skipped, the
    // payload realigned by OFF lanes, padding after the payload discarded.
    reg q_pop;
    always @* begin
        q_pop = 1'b0;
        if (rstate == R_QUEUE && head_v && !tail_pending) begin
            if (q_done) q_pop = !seen_last;
            else if (rb <= J0) q_pop = 1'b1;
            else q_pop = q_load;
        end
    end
    assign pop = (m_fwd_tvalid && m_fwd_tready) || q_pop;

    always @(posedge clk) begin
        if (rst) begin
            rstate <= R_IDLE;
            ird <= 0;
            prev <= {W{1'b0}};      // an empty payload's single beat carries zeros
            m_q_tvalid <= 1'b0;
            tail_pending <= 1'b0;
            q_done <= 1'b0;
            seen_last <= 1'b0;
        end else begin
            if (m_q_tvalid && m_q_tready) m_q_tvalid <= 1'b0;
            case (rstate)
                R_IDLE: if (iwr != ird) begin
                    ird <= ird + 1'b1;
                    rstate <= info[17+HA] ? R_QUEUE : R_FWD;
                    q_tid <= info[16+HA] ? {{(ID_WIDTH - HA){1'b0}}, info[16 +: HA]}
                                         : {1'b1, {(ID_WIDTH - 1){1'b0}}};
                    rb <= 16'd0;
                    rem <= info[15:0];
                    tail_pending <= info[15:0] == 16'd0;   // empty payload: one tkeep-0 beat
                    q_done <= 1'b0;
                    seen_last <= 1'b0;
                end
                R_FWD: if (m_fwd_tvalid && m_fwd_tready && cur_last) rstate <= R_IDLE;
                default: begin
                    if (tail_pending) begin
                        // The rest of the payload sits in prev's upper lanes.
                        if (q_load) begin
                            m_q_tvalid <= 1'b1;
                            m_q_tid <= q_tid;
                            m_q_tdata <= prev >> (8 * OFF);
                            m_q_tkeep <= keep_of(rem);
                            m_q_tlast <= 1'b1;
                            tail_pending <= 1'b0;
                            q_done <= 1'b1;
                        end
                    end else if (q_done) begin
                        if (seen_last) rstate <= R_IDLE;
                        else if (head_v && cur_last) rstate <= R_IDLE;
                    end else if (q_pop) begin
                        rb <= rb + 16'd1;
                        seen_last <= cur_last;
                        if (rb == J0) begin
                            prev <= cur;
                            if (rem <= BW - OFF) tail_pending <= 1'b1;
                        end else if (rb > J0) begin
                            prev <= cur;
                            m_q_tvalid <= 1'b1;
                            m_q_tid <= q_tid;
                            m_q_tdata <= {cur[8*OFF-1:0], prev[W-1:8*OFF]};
                            if (rem <= BW) begin
                                m_q_tkeep <= keep_of(rem);
                                m_q_tlast <= 1'b1;
                                q_done <= 1'b1;
                            end else begin
                                m_q_tkeep <= {BW{1'b1}};
                                m_q_tlast <= 1'b0;
                                rem <= rem - BW;
                                if (rem - BW <= BW - OFF) tail_pending <= 1'b1;
                            end
                        end
                    end
                end
            endcase
        end
    end

    // ================================================================ egress
    // Answer frame = 42-byte header from the answer header FIFO + the queue's payload
    // shifted up by OFF lanes (the header's last OFF bytes ride in the carry).
    localparam [2:0] E_IDLE = 3'd0, E_CALC = 3'd1, E_HDR = 3'd2, E_MIX = 3'd3, E_TAIL = 3'd4,
                     E_DROP = 3'd5;
    reg [2:0] estate;
    reg [HA-1:0] eslot;
    reg [15:0] eplen, eb;
    reg [HB-1:0] eh;
    reg [8*OFF-1:0] carry;
    reg [OFF-1:0] carry_keep;
    wire [HB+18:0] hhead = hmem[eslot];
    // The answer's slot, and how many slots before it lost their answer.
    wire [HA-1:0] a_slot = s_q_tid[HA-1:0];
    wire a_no_slot = s_q_tid[ID_WIDTH-1];
    wire [HA-1:0] a_skip = a_slot - hrd[HA-1:0];
    wire a_in_ring = {1'b0, a_skip} < hwr - hrd;
    wire [HB-1:0] h_hdr = hhead[HB+18:19];
    wire [18:0] h_psum = hhead[18:0];
    wire e_load = !m_mac_tvalid || m_mac_tready;
    wire [15:0] ip_total = eplen + 16'd28;
    wire [15:0] udp_total = eplen + 16'd8;
    wire [19:0] cs_sum = {1'b0, h_psum} + ip_total;
    wire [16:0] cs_fold1 = cs_sum[15:0] + cs_sum[19:16];
    wire [15:0] cs_fold2 = cs_fold1[15:0] + cs_fold1[16];
    wire [15:0] ip_csum = ~cs_fold2;
    wire [HB-1:0] h_full_hdr;
    generate
        for (gb = 0; gb < L2L3L4; gb = gb + 1) begin : g_eh
            assign h_full_hdr[8*gb +: 8] = gb == 16 ? ip_total[15:8] : gb == 17 ? ip_total[7:0]
                                         : gb == 24 ? ip_csum[15:8] : gb == 25 ? ip_csum[7:0]
                                         : gb == 38 ? udp_total[15:8] : gb == 39 ? udp_total[7:0]
                                         : h_hdr[8*gb +: 8];
        end
    endgenerate

    assign s_q_tready = (estate == E_MIX && e_load) || estate == E_DROP;
    assign m_mac_tuser = 1'b0;

    always @(posedge clk) begin
        if (rst) begin
            estate <= E_IDLE;
            hrd <= 0;
            m_mac_tvalid <= 1'b0;
        end else begin
            if (m_mac_tvalid && m_mac_tready) m_mac_tvalid <= 1'b0;
            case (estate)
                E_IDLE: if (s_q_tvalid) begin
                    // Peek at the answer (held stable by the queue): its type gives its
                    // length, its tid the header slot.
                    eplen <= (s_q_tdata[3:0] == 4'd4) ? DATA_BYTES : 16'd36;
                    eslot <= a_slot;
                    if (a_no_slot || !a_in_ring) estate <= E_DROP;
                    else begin
                        hrd <= hrd + a_skip + 1'b1;
                        estate <= E_CALC;
                    end
                end
                E_DROP: if (s_q_tvalid && s_q_tlast) estate <= E_IDLE;
                E_CALC: begin
                    eh <= h_full_hdr;
                    carry <= h_full_hdr[8*BW*J0 +: 8*OFF];
                    carry_keep <= {OFF{1'b1}};
                    eb <= 16'd0;
                    estate <= (J0 > 0) ? E_HDR : E_MIX;
                end
                E_HDR: if (e_load) begin
                    m_mac_tvalid <= 1'b1;
                    m_mac_tdata <= eh[8*BW*eb[7:0] +: W];
                    m_mac_tkeep <= {BW{1'b1}};
                    m_mac_tlast <= 1'b0;
                    eb <= eb + 16'd1;
                    if (eb == J0 - 1) estate <= E_MIX;
                end
                E_MIX: if (e_load && s_q_tvalid) begin
                    m_mac_tvalid <= 1'b1;
                    m_mac_tdata <= {s_q_tdata[W-8*OFF-1:0], carry};
                    m_mac_tkeep <= {s_q_tkeep[BW-OFF-1:0], carry_keep};
                    carry <= s_q_tdata[W-1 -: 8*OFF];
                    carry_keep <= s_q_tkeep[BW-1 -: OFF];
                    m_mac_tlast <= s_q_tlast && s_q_tkeep[BW-1 -: OFF] == {OFF{1'b0}};
                    if (s_q_tlast)
                        estate <= (s_q_tkeep[BW-1 -: OFF] == {OFF{1'b0}}) ? E_IDLE : E_TAIL;
                end
                E_TAIL: if (e_load) begin
                    m_mac_tvalid <= 1'b1;
                    m_mac_tdata <= {{(W - 8 * OFF){1'b0}}, carry};
                    m_mac_tkeep <= {{(BW - OFF){1'b0}}, carry_keep};
                    m_mac_tlast <= 1'b1;
                    estate <= E_IDLE;
                end
                default: estate <= E_IDLE;
            endcase
        end
    end

    // ================================================================ counters
    // Each frame's tlast gets exactly one FIFO verdict in the next cycle; the reason for
    // a drop is the first of: bad, runt, filtered, no room (FIFO, frame info, answers).
    wire rx_end = in_beat && s_mac_tlast;
    wire f_drop = f_bad || f_overflow;
    wire [NCNT-1:0] cnt_inc;
    assign cnt_inc[CNT_RX_FRAMES] = rx_end;
    assign cnt_inc[CNT_RX_BAD] = f_drop && p_bad;
    assign cnt_inc[CNT_RX_RUNT] = f_drop && !p_bad && p_runt;
    assign cnt_inc[CNT_RX_FILTERED] = f_drop && !p_bad && !p_runt && !p_keep;
    assign cnt_inc[CNT_RX_OVERFLOW] = f_drop && !p_bad && !p_runt && p_keep;
    assign cnt_inc[CNT_TO_QUEUE] = f_good && p_to_queue;
    assign cnt_inc[CNT_FWD_MODEL] = f_good && p_model;
    assign cnt_inc[CNT_FWD_OTHER] = f_good && !p_to_queue && !p_model;
    assign cnt_inc[CNT_TX_ANSWERS] = m_mac_tvalid && m_mac_tready && m_mac_tlast;
    assign cnt_inc[CNT_ANSWER_MISMATCH] = estate == E_IDLE && s_q_tvalid
                                       && (a_no_slot || !a_in_ring || a_skip != 0);
    always @(posedge clk) begin
        for (k = 0; k < NCNT; k = k + 1)
            if (rst) cnt[k] <= 64'd0;
            else if (cnt_inc[k]) cnt[k] <= cnt[k] + 64'd1;
    end
endmodule

`default_nettype wire
