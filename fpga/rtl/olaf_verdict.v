// Validation of one OLAF message (DESIGN.md §6), the one copy of the rule in RTL:
// the OlafQueue decides with it, and the Ethernet shell (olaf_udp) asks it which
// requests will be answered, so the two can never disagree.
//
// Same precedence as worker_transport.codec.classify (the most basic failure wins);
// verdict codes are codec.Verdict's. `answered` is 1 for the messages the queue
// answers: a valid UPDATE (ACK), a valid PULL (DATA / EMPTY) and an UPDATE with
// verdict BAD_LENGTH or later (ACK DROPPED_INVALID). It depends only on msg_len,
// version, msg_type and num_values: frac_bits, cluster, block and the cfg_* inputs
// only choose between verdicts that are all answered, so a caller that does not know
// them (the shell) may tie them off.
`default_nettype none
// verilator lint_off WIDTHEXPAND

module olaf_verdict #(
    parameter integer V = 64
) (
    input  wire [15:0] msg_len,          // payload bytes
    input  wire [3:0]  version,
    input  wire [3:0]  msg_type,
    input  wire [7:0]  num_values,
    input  wire [7:0]  frac_bits,
    input  wire [15:0] cluster,
    input  wire [15:0] block,
    input  wire [7:0]  cfg_frac_bits,
    input  wire [16:0] max_clusters,     // already clamped by the caller
    input  wire [16:0] max_blocks,
    output reg  [3:0]  verdict,
    output wire        ok,
    output wire        type_known,       // passed the header, version and type checks
    output wire        answered
);
    localparam integer HDR = 36;
    localparam [3:0] T_UPDATE = 4'd1, T_ACK = 4'd2, T_PULL = 4'd3, T_DATA = 4'd4,
                     T_EMPTY = 4'd5, T_MODEL = 4'd6;
    localparam [3:0] VD_OK = 4'd0, VD_SHORT = 4'd1, VD_BAD_VERSION = 4'd2, VD_BAD_TYPE = 4'd3,
                     VD_BAD_PULL = 4'd4, VD_NOT_FROM_HOST = 4'd5, VD_BAD_LENGTH = 4'd6,
                     VD_BAD_FRAC_BITS = 4'd7, VD_CLUSTER_RANGE = 4'd8, VD_BLOCK_RANGE = 4'd9;

    always @* begin
        if (msg_len < HDR) verdict = VD_SHORT;
        else if (version != 4'd1) verdict = VD_BAD_VERSION;
        else if (msg_type < T_UPDATE || msg_type > T_MODEL) verdict = VD_BAD_TYPE;
        else if (msg_type == T_PULL && (num_values != 8'd0 || msg_len != HDR)) verdict = VD_BAD_PULL;
        else if (msg_type == T_ACK || msg_type == T_DATA || msg_type == T_EMPTY) verdict = VD_NOT_FROM_HOST;
        else if (msg_type == T_UPDATE && (num_values != V || msg_len != HDR + 4 * num_values))
            verdict = VD_BAD_LENGTH;
        else if (msg_type == T_UPDATE && frac_bits != cfg_frac_bits) verdict = VD_BAD_FRAC_BITS;
        else if (msg_type == T_UPDATE && {1'b0, cluster} >= max_clusters) verdict = VD_CLUSTER_RANGE;
        else if (msg_type == T_UPDATE && {1'b0, block} >= max_blocks) verdict = VD_BLOCK_RANGE;
        else verdict = VD_OK;
    end

    assign ok = verdict == VD_OK;
    assign type_known = verdict != VD_SHORT && verdict != VD_BAD_VERSION && verdict != VD_BAD_TYPE;
    assign answered = (ok && (msg_type == T_UPDATE || msg_type == T_PULL)) || verdict >= VD_BAD_LENGTH;
endmodule

`default_nettype wire
