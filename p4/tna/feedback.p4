/* Fragment of OlafIngress (TNA): the feedback after the operation: queue_util from
 * util_lookup, and the difference whose sign bit says CONGESTED. */

    /* ---- queue_util = floor(255 * occupied / capacity): Tofino has no divider, so
     * the controller installs one entry per occupancy 0..capacity ---- */
    action set_util(bit<8> util) {
        md.util = (bit<16>)util;
    }

    table util_lookup {
        key = { md.occupied: exact; }
        actions = { set_util; }
        size = 1024;
        default_action = set_util(0);
    }

    action congestion_difference() {
        md.cong_diff = md.util - md.cfg_congestion_threshold;
    }
