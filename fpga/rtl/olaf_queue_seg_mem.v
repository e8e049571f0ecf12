// olaf_queue segment memory: DEPTH beats of DATA_WIDTH bits with one write port and two
// read ports, A (apply stage: a merge's old values) and B (output stage: DATA beats).
// Each read is a block RAM read: the address is latched at one clock edge and the data
// passes the RAM's output register at the next, so rd_data follows rd_addr by two
// cycles, and a read misses a write made at the clock edge of its own latch (the apply
// stage forwards that one). On an FPGA: two copies of a simple dual-port BRAM.
`default_nettype none

module olaf_queue_seg_mem #(
    parameter integer DATA_WIDTH = 512,
    parameter integer DEPTH = 360,
    parameter integer ADDR_WIDTH = $clog2(DEPTH)
) (
    input  wire                  clk,

    input  wire                  wr_en,
    input  wire [ADDR_WIDTH-1:0] wr_addr,
    input  wire [DATA_WIDTH-1:0] wr_data,

    input  wire [ADDR_WIDTH-1:0] rd_addr_a,
    output reg  [DATA_WIDTH-1:0] rd_data_a,
    input  wire [ADDR_WIDTH-1:0] rd_addr_b,
    output reg  [DATA_WIDTH-1:0] rd_data_b
);
    reg [DATA_WIDTH-1:0] seg_mem [0:DEPTH-1];
    reg [DATA_WIDTH-1:0] seg_q_a, seg_q_b;   // read latches; rd_data_* are the output registers

    integer i;
`ifndef SYNTHESIS
    initial begin
        // FPGA block RAM powers up zeroed; give the simulators the same contents
        // (no X ever reaches m_axis). Synthesis needs no init loop for that.
        for (i = 0; i < DEPTH; i = i + 1) seg_mem[i] = {DATA_WIDTH{1'b0}};
    end
`endif

    always @(posedge clk) begin
        seg_q_a <= seg_mem[rd_addr_a];
        rd_data_a <= seg_q_a;
        seg_q_b <= seg_mem[rd_addr_b];
        rd_data_b <= seg_q_b;
        if (wr_en) seg_mem[wr_addr] <= wr_data;
    end
endmodule

`default_nettype wire
