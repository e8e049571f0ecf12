/* Fragment of OlafIngress (TNA): classification, the checks of dataplane/queue.py in
 * its order: first the header's (`classify`, one ternary table in stage 0), then the
 * configuration's (`validate`, stage 1, on the differences config.p4 takes). */

    action set_verdict(bit<8> verdict) {
        md.verdict = verdict;
    }

    @stage(0) table classify {
        key = {
            md.is_olaf: exact;
            hdr.ipv4.isValid(): exact;
            hdr.olaf.isValid(): exact;
            hdr.udp.len: ternary;
            hdr.olaf.version: ternary;
            hdr.olaf.msg_type: ternary;
            hdr.olaf.num_values: ternary;
        }
        actions = { set_verdict; }
        const entries = {
            (0, true, _, _, _, _, _): set_verdict(VERDICT_ROUTE);
            (0, false, _, _, _, _, _): set_verdict(VERDICT_NOT_IPV4);
            (1, _, false, _, _, _, _): set_verdict(VERDICT_SHORT);
            /* udp.len < OLAF_MIN_UDP_LEN (44): 0..31, 32..39, 40..43 */
            (1, _, true, 0 &&& 0xffe0, _, _, _): set_verdict(VERDICT_SHORT);
            (1, _, true, 32 &&& 0xfff8, _, _, _): set_verdict(VERDICT_SHORT);
            (1, _, true, 40 &&& 0xfffc, _, _, _): set_verdict(VERDICT_SHORT);
            /* version 1 from here on; any other version is the default */
            (1, _, true, _, OLAF_VERSION, 0, _): set_verdict(VERDICT_BAD_TYPE);
            (1, _, true, _, OLAF_VERSION, 7, _): set_verdict(VERDICT_BAD_TYPE);
            (1, _, true, _, OLAF_VERSION, 8 &&& 8, _): set_verdict(VERDICT_BAD_TYPE);
            (1, _, true, OLAF_MIN_UDP_LEN, OLAF_VERSION, MSG_PULL, 0): set_verdict(VERDICT_OK);
            (1, _, true, _, OLAF_VERSION, MSG_PULL, _): set_verdict(VERDICT_BAD_PULL);
            (1, _, true, _, OLAF_VERSION, MSG_ACK, _): set_verdict(VERDICT_NOT_FROM_HOST);
            (1, _, true, _, OLAF_VERSION, MSG_DATA, _): set_verdict(VERDICT_NOT_FROM_HOST);
            (1, _, true, _, OLAF_VERSION, MSG_EMPTY, _): set_verdict(VERDICT_NOT_FROM_HOST);
            (1, _, true, OLAF_TNA_UPDATE_UDP_LEN, OLAF_VERSION, MSG_UPDATE, OLAF_TNA_V8): set_verdict(VERDICT_OK);
            (1, _, true, _, OLAF_VERSION, MSG_UPDATE, _): set_verdict(VERDICT_BAD_LENGTH);
            (1, _, true, _, OLAF_VERSION, MSG_MODEL, _): set_verdict(VERDICT_MODEL);
        }
        size = 32;
        default_action = set_verdict(VERDICT_BAD_VERSION);
    }

    /* A well-formed UPDATE: frac_bits, then cluster_id < max_clusters, then block_id <
     * max_blocks. An id is in range when its room (max - id) has bit 15 clear and is not
     * 0; max <= 2^15, so this is exact for ids with bit 15 clear, and an id with bit 15
     * set is out of range anyway. */
    @stage(1) table validate {
        key = {
            md.verdict: exact;
            hdr.olaf.msg_type: exact;
            md.frac_xor: ternary;
            hdr.olaf.cluster_id: ternary;
            md.cluster_room: ternary;
            hdr.olaf.block_id: ternary;
            md.block_room: ternary;
        }
        actions = { set_verdict; NoAction; }
        const entries = {
            (VERDICT_OK, MSG_UPDATE, 0, 0 &&& 0x8000, 0, _, _): set_verdict(VERDICT_CLUSTER_RANGE);
            (VERDICT_OK, MSG_UPDATE, 0, 0 &&& 0x8000, 0 &&& 0x8000, 0 &&& 0x8000, 0):
                set_verdict(VERDICT_BLOCK_RANGE);
            (VERDICT_OK, MSG_UPDATE, 0, 0 &&& 0x8000, 0 &&& 0x8000, 0 &&& 0x8000, 0 &&& 0x8000): NoAction();
            (VERDICT_OK, MSG_UPDATE, 0, 0 &&& 0x8000, 0 &&& 0x8000, _, _): set_verdict(VERDICT_BLOCK_RANGE);
            (VERDICT_OK, MSG_UPDATE, 0, _, _, _, _): set_verdict(VERDICT_CLUSTER_RANGE);
            (VERDICT_OK, MSG_UPDATE, _, _, _, _, _): set_verdict(VERDICT_BAD_FRAC_BITS);
        }
        size = 8;
        default_action = NoAction();
    }
