// AXI-Lite register block of the OLAF shell: the queue's configuration, its feedback,
// and the queue's and the Ethernet shell's counters. Register map: fpga/README.md,
// "Ethernet shell and registers".
//
// 64-bit counters are read as two words: reading the low word (offset +0) snapshots
// the whole counter, returns its low half and keeps the high half; reading the high
// word (+4) returns the kept half. Read low then high and the pair is consistent even
// while the counter runs.
//
// Queue counters come through the queue's select/value read port (cnt_sel/cnt_value,
// CNT_LATENCY cycles from a select to a stable value); a read in that window waits.
`default_nettype none
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_axil_regs #(
    parameter integer ADDR_WIDTH = 12,
    parameter integer CNT_WIDTH = 32,          // width of the queue's cnt_value (32 or 64)
    parameter integer CNT_LATENCY = 2,         // cycles from cnt_sel to a stable cnt_value
    parameter integer SHELL_COUNTERS = 9,
    parameter integer V = 64,
    parameter integer MAX_CAPACITY = 64,
    parameter integer MAX_CLUSTERS = 16,
    parameter integer MAX_BLOCKS = 1024,
    // Configuration after reset: dataplane.queue.QueueConfig's defaults.
    parameter [15:0] RESET_CAPACITY = 64,
    parameter [16:0] RESET_MAX_CLUSTERS = 16,
    parameter [16:0] RESET_MAX_BLOCKS = 1024,
    parameter [7:0] RESET_FRAC_BITS = 16,
    parameter [30:0] RESET_THRESHOLD = 31'h7fff_ffff,
    parameter [7:0] RESET_CONGESTION_THRESHOLD = 192,
    parameter [15:0] RESET_CLUSTER_QUOTA = RESET_CAPACITY,  // = capacity: no limit
    parameter [7:0] RESET_FEEDBACK = 3                       // revision 3 (DESIGN.md §3)
) (
    input  wire                    clk,
    input  wire                    rst,

    input  wire [ADDR_WIDTH-1:0]   s_axil_awaddr,
    input  wire [2:0]              s_axil_awprot,
    input  wire                    s_axil_awvalid,
    output wire                    s_axil_awready,
    input  wire [31:0]             s_axil_wdata,
    input  wire [3:0]              s_axil_wstrb,
    input  wire                    s_axil_wvalid,
    output wire                    s_axil_wready,
    output wire [1:0]              s_axil_bresp,
    output reg                     s_axil_bvalid,
    input  wire                    s_axil_bready,
    input  wire [ADDR_WIDTH-1:0]   s_axil_araddr,
    input  wire [2:0]              s_axil_arprot,
    input  wire                    s_axil_arvalid,
    output wire                    s_axil_arready,
    output reg  [31:0]             s_axil_rdata,
    output wire [1:0]              s_axil_rresp,
    output reg                     s_axil_rvalid,
    input  wire                    s_axil_rready,

    // Control and configuration.
    output reg                     ctrl_reset,     // holds the datapath (shell + queue) in reset
    output reg                     ctrl_fwd_other, // non-OLAF frames: 1 forward, 0 drop
    output reg  [15:0]             cfg_capacity,
    output reg  [16:0]             cfg_max_clusters,
    output reg  [16:0]             cfg_max_blocks,
    output reg  [7:0]              cfg_frac_bits,
    output reg                     cfg_mode,
    output reg  [30:0]             cfg_threshold,
    output reg  [7:0]              cfg_congestion_threshold,
    output reg  [15:0]             cfg_cluster_quota,
    output reg  [7:0]              cfg_feedback,

    // Status and counters.
    input  wire [15:0]             stat_occupied,
    input  wire [7:0]              stat_active_clusters,
    input  wire [7:0]              stat_queue_util,
    input  wire                    stat_congested,
    output reg  [4:0]              cnt_sel,
    input  wire [CNT_WIDTH-1:0]    cnt_value,
    input  wire [64*SHELL_COUNTERS-1:0] shell_counters
);
    localparam [31:0] ID = 32'h4f4c_4146;      // "OLAF"
    localparam [ADDR_WIDTH-1:0] A_ID = 'h000, A_CTRL = 'h004, A_MODE = 'h008,
        A_THRESHOLD = 'h00c, A_CONGESTION = 'h010, A_FRAC_BITS = 'h014, A_CAPACITY = 'h018,
        A_MAX_CLUSTERS = 'h01c, A_MAX_BLOCKS = 'h020, A_OCCUPIED = 'h024, A_FEEDBACK = 'h028,
        A_PARAMS = 'h02c, A_PARAMS2 = 'h030, A_CLUSTER_QUOTA = 'h034, A_FEEDBACK_REV = 'h038;
    // Counter windows: 8 bytes per counter, low word first.
    localparam [ADDR_WIDTH-1:0] A_QCNT = 'h100, A_SCNT = 'h200;

    // ---------------------------------------------------------------- writes
    // Address and data are taken together; the response follows a cycle later.
    wire wr = s_axil_awvalid && s_axil_wvalid && !s_axil_bvalid;
    assign s_axil_awready = wr;
    assign s_axil_wready = wr;
    assign s_axil_bresp = 2'b00;
    wire [ADDR_WIDTH-1:0] waddr = {s_axil_awaddr[ADDR_WIDTH-1:2], 2'b00};

    function [31:0] merge(input [31:0] old, input [31:0] data, input [3:0] strb);
        integer j;
        begin
            for (j = 0; j < 4; j = j + 1) merge[8*j +: 8] = strb[j] ? data[8*j +: 8] : old[8*j +: 8];
        end
    endfunction

    always @(posedge clk) begin
        if (rst) begin
            s_axil_bvalid <= 1'b0;
            ctrl_reset <= 1'b0;
            ctrl_fwd_other <= 1'b1;
            cfg_capacity <= RESET_CAPACITY;
            cfg_max_clusters <= RESET_MAX_CLUSTERS;
            cfg_max_blocks <= RESET_MAX_BLOCKS;
            cfg_frac_bits <= RESET_FRAC_BITS;
            cfg_mode <= 1'b0;
            cfg_threshold <= RESET_THRESHOLD;
            cfg_congestion_threshold <= RESET_CONGESTION_THRESHOLD;
            cfg_cluster_quota <= RESET_CLUSTER_QUOTA;
            cfg_feedback <= RESET_FEEDBACK;
        end else begin
            if (s_axil_bvalid && s_axil_bready) s_axil_bvalid <= 1'b0;
            if (wr) begin
                s_axil_bvalid <= 1'b1;
                case (waddr)
                    A_CTRL: {ctrl_fwd_other, ctrl_reset} <= merge({ctrl_fwd_other, ctrl_reset},
                                                                 s_axil_wdata, s_axil_wstrb);
                    A_MODE: cfg_mode <= merge(cfg_mode, s_axil_wdata, s_axil_wstrb);
                    A_THRESHOLD: cfg_threshold <= merge(cfg_threshold, s_axil_wdata, s_axil_wstrb);
                    A_CONGESTION: cfg_congestion_threshold <= merge(cfg_congestion_threshold,
                                                                    s_axil_wdata, s_axil_wstrb);
                    A_FRAC_BITS: cfg_frac_bits <= merge(cfg_frac_bits, s_axil_wdata, s_axil_wstrb);
                    A_CAPACITY: cfg_capacity <= merge(cfg_capacity, s_axil_wdata, s_axil_wstrb);
                    A_MAX_CLUSTERS: cfg_max_clusters <= merge(cfg_max_clusters, s_axil_wdata,
                                                              s_axil_wstrb);
                    A_MAX_BLOCKS: cfg_max_blocks <= merge(cfg_max_blocks, s_axil_wdata, s_axil_wstrb);
                    A_CLUSTER_QUOTA: cfg_cluster_quota <= merge(cfg_cluster_quota, s_axil_wdata,
                                                                s_axil_wstrb);
                    A_FEEDBACK_REV: cfg_feedback <= merge(cfg_feedback, s_axil_wdata, s_axil_wstrb);
                    default: ;                 // read-only or unmapped: ignored, OKAY
                endcase
            end
        end
    end

    // ---------------------------------------------------------------- reads
    reg rbusy;
    reg [ADDR_WIDTH-1:0] raddr;
    reg [3:0] rwait;
    reg [31:0] hi_kept;
    assign s_axil_arready = !rbusy && !s_axil_rvalid;
    assign s_axil_rresp = 2'b00;

    wire in_qcnt = raddr >= A_QCNT && raddr < A_QCNT + 'h100;
    wire in_scnt = raddr >= A_SCNT && raddr < A_SCNT + 8 * SHELL_COUNTERS;
    wire [ADDR_WIDTH-1:0] scnt_off = raddr - A_SCNT;
    wire [63:0] qcnt64 = cnt_value;
    wire [63:0] scnt64 = shell_counters[64 * scnt_off[ADDR_WIDTH-1:3] +: 64];

    always @(posedge clk) begin
        if (rst) begin
            rbusy <= 1'b0;
            s_axil_rvalid <= 1'b0;
            cnt_sel <= 5'd0;
            hi_kept <= 32'd0;
        end else begin
            if (s_axil_rvalid && s_axil_rready) s_axil_rvalid <= 1'b0;
            if (s_axil_arvalid && s_axil_arready) begin
                raddr <= {s_axil_araddr[ADDR_WIDTH-1:2], 2'b00};
                cnt_sel <= s_axil_araddr[7:3];
                rwait <= CNT_LATENCY;
                rbusy <= 1'b1;
            end else if (rbusy) begin
                if (rwait != 4'd0) begin
                    rwait <= rwait - 4'd1;
                end else begin
                    rbusy <= 1'b0;
                    s_axil_rvalid <= 1'b1;
                    s_axil_rdata <= 32'd0;
                    if (in_qcnt || in_scnt) begin
                        if (raddr[2]) begin
                            s_axil_rdata <= hi_kept;
                        end else if (in_qcnt) begin
                            s_axil_rdata <= qcnt64[31:0];
                            hi_kept <= qcnt64[63:32];
                        end else begin
                            s_axil_rdata <= scnt64[31:0];
                            hi_kept <= scnt64[63:32];
                        end
                    end else begin
                        case (raddr)
                            A_ID: s_axil_rdata <= ID;
                            A_CTRL: s_axil_rdata <= {30'd0, ctrl_fwd_other, ctrl_reset};
                            A_MODE: s_axil_rdata <= {31'd0, cfg_mode};
                            A_THRESHOLD: s_axil_rdata <= {1'b0, cfg_threshold};
                            A_CONGESTION: s_axil_rdata <= {24'd0, cfg_congestion_threshold};
                            A_FRAC_BITS: s_axil_rdata <= {24'd0, cfg_frac_bits};
                            A_CAPACITY: s_axil_rdata <= {16'd0, cfg_capacity};
                            A_MAX_CLUSTERS: s_axil_rdata <= {15'd0, cfg_max_clusters};
                            A_MAX_BLOCKS: s_axil_rdata <= {15'd0, cfg_max_blocks};
                            A_CLUSTER_QUOTA: s_axil_rdata <= {16'd0, cfg_cluster_quota};
                            A_FEEDBACK_REV: s_axil_rdata <= {24'd0, cfg_feedback};
                            A_OCCUPIED: s_axil_rdata <= {16'd0, stat_occupied};
                            A_FEEDBACK: s_axil_rdata <= {15'd0, stat_congested, stat_active_clusters,
                                                         stat_queue_util};
                            A_PARAMS: s_axil_rdata <= {8'd0, MAX_CAPACITY[15:0], V[7:0]};
                            A_PARAMS2: s_axil_rdata <= {MAX_BLOCKS[15:0], MAX_CLUSTERS[15:0]};
                            default: s_axil_rdata <= 32'd0;
                        endcase
                    end
                end
            end
        end
    end
endmodule

`default_nettype wire
