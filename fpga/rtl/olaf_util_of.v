// queue_util of a count: floor(255 * x / capacity) for 0 <= x <= capacity, with a
// capacity set at run time and no divider (DESIGN.md §3 Feedback, revision 3: the ACK's
// queue_util is 255 * (capacity - room_c) / capacity).
//
// 255 / capacity is held as recip = ceil(255 * 2^K / capacity), read from a table of
// the MAX_CAPACITY possible capacities and registered, so that util is one multiply.
// Exact: with capacity < 2^OW and K = 2 * OW, capacity^2 < 2^K, so the error
// x * (recip - 255 * 2^K / capacity) / 2^K < capacity / 2^K < 1 / capacity never
// carries floor(x * recip / 2^K) past the next integer (255 * x / capacity falls at
// least 1 / capacity below it). fpga/tb/test_rtl_util_of.py checks every (capacity, x).
`default_nettype none
// verilator lint_off WIDTHEXPAND
// verilator lint_off WIDTHTRUNC

module olaf_util_of #(
    parameter integer MAX_CAPACITY = 64,
    parameter integer OW = $clog2(MAX_CAPACITY + 1),
    parameter integer K = 2 * OW
) (
    input  wire          clk,
    input  wire [OW-1:0] cap,        // 1..MAX_CAPACITY; may change only under reset
    input  wire [OW-1:0] x,          // 0..cap
    output wire [7:0]    util
);
    localparam integer RW = 8 + K;

    initial begin
        // 255 * 2^K must fit the 32-bit integer the table is computed in.
        if (K > 22) $error("olaf_util_of: MAX_CAPACITY above 2047 needs a wider table");
    end

    wire [RW*(MAX_CAPACITY+1)-1:0] recip_tab;
    genvar gc;
    generate
        for (gc = 0; gc <= MAX_CAPACITY; gc = gc + 1) begin : g_recip
            localparam integer CAPV = gc == 0 ? 1 : gc;
            assign recip_tab[RW*gc +: RW] = (255 * (1 << K) + CAPV - 1) / CAPV;
        end
    endgenerate

    reg [RW-1:0] recip;
    always @(posedge clk) recip <= recip_tab[RW*cap +: RW];

    wire [OW+RW-1:0] product = x * recip;
    assign util = product[K +: 8];
endmodule

`default_nettype wire
