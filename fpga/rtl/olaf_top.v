// OLAF on an FPGA port: MAC-side AXI-Stream <-> olaf_udp (Ethernet/IPv4/UDP shell)
// <-> olaf_queue, configured and observed through olaf_axil_regs (AXI-Lite).
//
// One clock (the MAC's user clock). CTRL.reset (register 0x004 bit 0) holds shell and
// queue in reset together, so that no request header outlives the queue state it was
// waiting on; the register block itself is reset only by rst.
`default_nettype none

module olaf_top #(
    parameter integer DATA_WIDTH = 64,
    parameter integer V = 64,
    parameter integer MAX_CAPACITY = 64,
    parameter integer MAX_CLUSTERS = 16,
    parameter integer MAX_BLOCKS = 1024,
    parameter integer FIFO_BEATS = 512,
    parameter integer FRAME_SLOTS = 32,
    parameter integer ANSWER_SLOTS = 16,
    parameter integer ID_WIDTH = 8,
    parameter integer AXIL_ADDR_WIDTH = 12
) (
    input  wire                        clk,
    input  wire                        rst,

    input  wire [DATA_WIDTH-1:0]       s_mac_tdata,
    input  wire [DATA_WIDTH/8-1:0]     s_mac_tkeep,
    input  wire                        s_mac_tvalid,
    input  wire                        s_mac_tlast,
    input  wire                        s_mac_tuser,

    output wire [DATA_WIDTH-1:0]       m_mac_tdata,
    output wire [DATA_WIDTH/8-1:0]     m_mac_tkeep,
    output wire                        m_mac_tvalid,
    input  wire                        m_mac_tready,
    output wire                        m_mac_tlast,
    output wire                        m_mac_tuser,

    output wire [DATA_WIDTH-1:0]       m_fwd_tdata,
    output wire [DATA_WIDTH/8-1:0]     m_fwd_tkeep,
    output wire                        m_fwd_tvalid,
    input  wire                        m_fwd_tready,
    output wire                        m_fwd_tlast,

    input  wire [AXIL_ADDR_WIDTH-1:0]  s_axil_awaddr,
    input  wire [2:0]                  s_axil_awprot,
    input  wire                        s_axil_awvalid,
    output wire                        s_axil_awready,
    input  wire [31:0]                 s_axil_wdata,
    input  wire [3:0]                  s_axil_wstrb,
    input  wire                        s_axil_wvalid,
    output wire                        s_axil_wready,
    output wire [1:0]                  s_axil_bresp,
    output wire                        s_axil_bvalid,
    input  wire                        s_axil_bready,
    input  wire [AXIL_ADDR_WIDTH-1:0]  s_axil_araddr,
    input  wire [2:0]                  s_axil_arprot,
    input  wire                        s_axil_arvalid,
    output wire                        s_axil_arready,
    output wire [31:0]                 s_axil_rdata,
    output wire [1:0]                  s_axil_rresp,
    output wire                        s_axil_rvalid,
    input  wire                        s_axil_rready
);
    localparam integer BW = DATA_WIDTH / 8;
    localparam integer SHELL_COUNTERS = 10;

    wire ctrl_reset, ctrl_fwd_other;
    wire [15:0] cfg_capacity, cfg_cluster_quota;
    wire [16:0] cfg_max_clusters, cfg_max_blocks;
    wire [7:0] cfg_frac_bits, cfg_congestion_threshold, cfg_feedback;
    wire cfg_mode;
    wire [30:0] cfg_threshold;
    wire [15:0] stat_occupied;
    wire [7:0] stat_active_clusters, stat_queue_util;
    wire stat_congested;
    wire [4:0] cnt_sel;
    wire [63:0] cnt_value;
    wire [64*SHELL_COUNTERS-1:0] shell_counters;

    // Datapath reset: registered so that a register write cannot glitch it.
    reg dp_rst;
    always @(posedge clk) dp_rst <= rst || ctrl_reset;

    wire [DATA_WIDTH-1:0] q_in_tdata, q_out_tdata;
    wire [BW-1:0] q_in_tkeep, q_out_tkeep;
    wire q_in_tvalid, q_in_tready, q_in_tlast, q_out_tvalid, q_out_tready, q_out_tlast;
    wire [ID_WIDTH-1:0] q_in_tid, q_out_tid;

    olaf_udp #(
        .DATA_WIDTH(DATA_WIDTH), .V(V), .FIFO_BEATS(FIFO_BEATS), .FRAME_SLOTS(FRAME_SLOTS),
        .ANSWER_SLOTS(ANSWER_SLOTS), .ID_WIDTH(ID_WIDTH)
    ) shell (
        .clk(clk), .rst(dp_rst), .fwd_other(ctrl_fwd_other),
        .s_mac_tdata(s_mac_tdata), .s_mac_tkeep(s_mac_tkeep), .s_mac_tvalid(s_mac_tvalid),
        .s_mac_tlast(s_mac_tlast), .s_mac_tuser(s_mac_tuser),
        .m_mac_tdata(m_mac_tdata), .m_mac_tkeep(m_mac_tkeep), .m_mac_tvalid(m_mac_tvalid),
        .m_mac_tready(m_mac_tready), .m_mac_tlast(m_mac_tlast), .m_mac_tuser(m_mac_tuser),
        .m_fwd_tdata(m_fwd_tdata), .m_fwd_tkeep(m_fwd_tkeep), .m_fwd_tvalid(m_fwd_tvalid),
        .m_fwd_tready(m_fwd_tready), .m_fwd_tlast(m_fwd_tlast),
        .m_q_tdata(q_in_tdata), .m_q_tkeep(q_in_tkeep), .m_q_tvalid(q_in_tvalid),
        .m_q_tready(q_in_tready), .m_q_tlast(q_in_tlast), .m_q_tid(q_in_tid),
        .s_q_tdata(q_out_tdata), .s_q_tkeep(q_out_tkeep), .s_q_tvalid(q_out_tvalid),
        .s_q_tready(q_out_tready), .s_q_tlast(q_out_tlast), .s_q_tid(q_out_tid),
        .counters(shell_counters)
    );

    olaf_queue #(
        .DATA_WIDTH(DATA_WIDTH), .V(V), .MAX_CAPACITY(MAX_CAPACITY),
        .MAX_CLUSTERS(MAX_CLUSTERS), .MAX_BLOCKS(MAX_BLOCKS), .ID_WIDTH(ID_WIDTH),
        .INGRESS_DEPTH(0)
    ) queue (
        .clk(clk), .rst(dp_rst),
        .s_axis_tdata(q_in_tdata), .s_axis_tkeep(q_in_tkeep), .s_axis_tvalid(q_in_tvalid),
        .s_axis_tready(q_in_tready), .s_axis_tlast(q_in_tlast), .s_axis_tid(q_in_tid),
        // Bad frames never get here: the shell drops them whole.
        .s_axis_tuser(1'b0),
        .m_axis_tdata(q_out_tdata), .m_axis_tkeep(q_out_tkeep), .m_axis_tvalid(q_out_tvalid),
        .m_axis_tready(q_out_tready), .m_axis_tlast(q_out_tlast), .m_axis_tid(q_out_tid),
        .cfg_capacity(cfg_capacity), .cfg_max_clusters(cfg_max_clusters),
        .cfg_max_blocks(cfg_max_blocks), .cfg_frac_bits(cfg_frac_bits), .cfg_mode(cfg_mode),
        .cfg_threshold(cfg_threshold), .cfg_congestion_threshold(cfg_congestion_threshold),
        .cfg_cluster_quota(cfg_cluster_quota), .cfg_feedback(cfg_feedback),
        .cnt_sel(cnt_sel), .cnt_value(cnt_value),
        .stat_occupied(stat_occupied), .stat_active_clusters(stat_active_clusters),
        .stat_queue_util(stat_queue_util), .stat_congested(stat_congested)
    );

    olaf_axil_regs #(
        .ADDR_WIDTH(AXIL_ADDR_WIDTH), .CNT_WIDTH(64), .CNT_LATENCY(2), .SHELL_COUNTERS(SHELL_COUNTERS),
        .V(V), .MAX_CAPACITY(MAX_CAPACITY), .MAX_CLUSTERS(MAX_CLUSTERS), .MAX_BLOCKS(MAX_BLOCKS)
    ) regs (
        .clk(clk), .rst(rst),
        .s_axil_awaddr(s_axil_awaddr), .s_axil_awprot(s_axil_awprot),
        .s_axil_awvalid(s_axil_awvalid), .s_axil_awready(s_axil_awready),
        .s_axil_wdata(s_axil_wdata), .s_axil_wstrb(s_axil_wstrb), .s_axil_wvalid(s_axil_wvalid),
        .s_axil_wready(s_axil_wready), .s_axil_bresp(s_axil_bresp), .s_axil_bvalid(s_axil_bvalid),
        .s_axil_bready(s_axil_bready), .s_axil_araddr(s_axil_araddr),
        .s_axil_arprot(s_axil_arprot), .s_axil_arvalid(s_axil_arvalid),
        .s_axil_arready(s_axil_arready), .s_axil_rdata(s_axil_rdata), .s_axil_rresp(s_axil_rresp),
        .s_axil_rvalid(s_axil_rvalid), .s_axil_rready(s_axil_rready),
        .ctrl_reset(ctrl_reset), .ctrl_fwd_other(ctrl_fwd_other),
        .cfg_capacity(cfg_capacity), .cfg_max_clusters(cfg_max_clusters),
        .cfg_max_blocks(cfg_max_blocks), .cfg_frac_bits(cfg_frac_bits), .cfg_mode(cfg_mode),
        .cfg_threshold(cfg_threshold), .cfg_congestion_threshold(cfg_congestion_threshold),
        .cfg_cluster_quota(cfg_cluster_quota), .cfg_feedback(cfg_feedback),
        .stat_occupied(stat_occupied), .stat_active_clusters(stat_active_clusters),
        .stat_queue_util(stat_queue_util), .stat_congested(stat_congested),
        .cnt_sel(cnt_sel), .cnt_value(cnt_value), .shell_counters(shell_counters)
    );
endmodule

`default_nettype wire
