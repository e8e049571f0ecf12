/* OlafEgress for TNA: the per-port drop simulator (as v1model's, and SwitchML's). */
#ifndef OLAF_TNA_EGRESS_P4
#define OLAF_TNA_EGRESS_P4

control OlafEgress(inout egress_headers_t hdr,
                   inout egress_metadata_t md,
                   in egress_intrinsic_metadata_t eg_intr_md,
                   in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                   inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                   inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    Random<bit<16>>() rng;

    action set_drop_prob(bit<16> prob) {
        md.drop_prob = prob;
    }

    table drop_sim {
        key = { eg_intr_md.egress_port: exact; }
        actions = { set_drop_prob; NoAction; }
        size = 512;
        default_action = NoAction();
    }

    action draw() {
        md.draw = rng.get();
    }

    /* Unsigned saturating: non-zero exactly when draw < drop_prob. */
    action drop_margin() {
        md.drop_margin = md.drop_prob |-| md.draw;
    }

    apply {
        if (drop_sim.apply().hit) {
            draw();
            drop_margin();
            if (md.drop_margin != 0) {
                eg_dprsr_md.drop_ctl = 1;
            }
        }
    }
}

#endif
