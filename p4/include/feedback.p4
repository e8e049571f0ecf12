/* Feedback every response carries (DESIGN.md sections 2 and 3, Feedback): CONGESTED,
 * active_clusters saturated to 255, and queue_util = floor(255 * used / capacity), where
 * `used` is what the response reports (OlafIngress chooses it): the occupancy on DATA,
 * EMPTY, a DROPPED_INVALID ACK and every ACK of revision 2; capacity - room_c, the slots
 * the UPDATE's cluster can no longer use, on other ACKs of revision 3. CONGESTED is
 * global in both revisions: floor(255 * occupied / capacity) >= congestion_threshold.
 *
 * p4c rejects `/` on run-time operands outside actions ("could not evaluate at
 * compilation time", p4lang/p4c#1232), and capacity is a run-time setting, so each
 * quotient is computed exactly by restoring division: 255 * x < 256 * capacity whenever
 * x <= capacity, so 8 quotient bits suffice. No table is needed. */
#ifndef OLAF_FEEDBACK_P4
#define OLAF_FEEDBACK_P4

/* floor(255 * x / divisor) for 0 <= x <= divisor, divisor >= 1. */
control OlafShare255(in bit<16> x, in bit<16> divisor16, out bit<8> quotient) {
    apply {
        bit<32> rem = ((bit<32>)x << 8) - (bit<32>)x;
        bit<32> divisor = (bit<32>)divisor16;
        quotient = 0;
        if (rem >= (divisor << 7)) { rem = rem - (divisor << 7); quotient = quotient | 8w0x80; }
        if (rem >= (divisor << 6)) { rem = rem - (divisor << 6); quotient = quotient | 8w0x40; }
        if (rem >= (divisor << 5)) { rem = rem - (divisor << 5); quotient = quotient | 8w0x20; }
        if (rem >= (divisor << 4)) { rem = rem - (divisor << 4); quotient = quotient | 8w0x10; }
        if (rem >= (divisor << 3)) { rem = rem - (divisor << 3); quotient = quotient | 8w0x08; }
        if (rem >= (divisor << 2)) { rem = rem - (divisor << 2); quotient = quotient | 8w0x04; }
        if (rem >= (divisor << 1)) { rem = rem - (divisor << 1); quotient = quotient | 8w0x02; }
        if (rem >= divisor) { quotient = quotient | 8w0x01; }
    }
}

control OlafFeedback(in bit<16> occupied,
                     in bit<16> used,
                     in bit<16> capacity,
                     in bit<16> active_clusters,
                     in bit<8> congestion_threshold,
                     out bit<8> flags,
                     out bit<8> active8,
                     out bit<8> util) {
    OlafShare255() occupancy;
    OlafShare255() cluster_share;

    apply {
        bit<8> global_util;
        occupancy.apply(occupied, capacity, global_util);
        if (used == occupied) {
            util = global_util;
        } else {
            cluster_share.apply(used, capacity, util);
        }
        if (global_util >= congestion_threshold) {
            flags = FLAG_CONGESTED;
        } else {
            flags = 0;
        }
        if (active_clusters > 255) {
            active8 = 255;
        } else {
            active8 = (bit<8>)active_clusters;
        }
    }
}

#endif
