/* OlafEgress: cuts short answers back to their header and simulates loss per egress
 * port, like SwitchML's drop simulator: a port with an entry in drop_sim drops each
 * packet when a random 16-bit number is below the entry's prob (prob / 65536). */
#ifndef OLAF_EGRESS_P4
#define OLAF_EGRESS_P4

control OlafEgress(inout headers_t hdr,
                   inout metadata_t meta,
                   inout standard_metadata_t standard_metadata) {
    action set_drop_prob(bit<16> prob) {
        meta.drop_prob = prob;
    }

    table drop_sim {
        key = { standard_metadata.egress_port: exact; }
        actions = { set_drop_prob; NoAction; }
        size = 512;
        default_action = NoAction();
    }

    apply {
        if (meta.short_reply == 1) {
            /* An ACK built from an UPDATE whose values were not parsed (wrong length)
             * still carries them as payload: the answer ends after the OLAF header. */
            truncate(OLAF_SHORT_FRAME_LEN);
        }
        meta.drop_prob = 0;
        if (drop_sim.apply().hit) {
            bit<16> draw;
            random(draw, 16w0, 16w0xffff);
            if (draw < meta.drop_prob) {
                mark_to_drop(standard_metadata);
            }
        }
    }
}

#endif
