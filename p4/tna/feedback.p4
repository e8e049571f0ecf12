/* Fragment of OlafIngress (TNA): the feedback after the operation (DESIGN.md section 3,
 * Feedback). CONGESTED is global in both revisions: util_lookup gives floor(255 *
 * occupied / capacity) and the sign bit of its difference with the threshold says
 * CONGESTED. queue_util is floor(255 * used / capacity) from share_lookup, where `used`
 * is the occupancy (DATA, EMPTY, a DROPPED_INVALID ACK, every ACK of revision 2) or, on
 * the other ACKs of revision 3, capacity - room_c for the UPDATE's cluster c:
 *   new_room = max(0, min(C - o, Q - h)), room_c = h + new_room (OLAF), new_room (FIFO)
 * with h = held_c, o = occupied, C = capacity, Q = cluster_quota after the operation.
 * Tofino has no divider and compares no two fields, so the min and the max are the
 * sign bits of differences taken in earlier stages, matched by `room_case`, whose
 * actions copy the case's `used` (each precomputed one stage before):
 *   Q - h < 0                    new_room 0        used C - h (OLAF)  C (FIFO)
 *   Q - h >= 0, C - o < Q - h    new_room C - o    used o - h         o
 *   Q - h >= 0, C - o >= Q - h   new_room Q - h    used C - Q         C - (Q - h)
 * A quota of 0 or 2^15.. (written around the controller) is no limit, as in `decide`;
 * one in capacity+1..2^15-1 is no limit by itself (Q - h > C - o). Both lookup tables
 * hold x -> floor(255 * x / capacity) for x = 0..capacity: the controller writes the
 * same entries into each. */

    /* ---- floor(255 * x / capacity): one entry per x = 0..capacity ---- */
    action set_util(bit<8> util) {
        md.util = (bit<16>)util;
    }

    table util_lookup {
        key = { md.occupied: exact; }
        actions = { set_util; }
        size = 1024;
        default_action = set_util(0);
    }

    action set_share(bit<8> util) {
        md.share = (bit<16>)util;
    }

    table share_lookup {
        key = { md.used: exact; }
        actions = { set_share; }
        size = 1024;
        default_action = set_share(0);
    }

    action congestion_difference() {
        md.cong_diff = md.util - md.cfg_congestion_threshold;
    }

    /* ---- revision 3's room, one stage per dependency ---- */
    action room_differences() {
        md.quota_room = md.cfg_cluster_quota - md.cluster_slots;
        md.free = md.cfg_capacity - md.occupied;
        md.own_used = md.occupied - md.cluster_slots;
        md.cap_unheld = md.cfg_capacity - md.cluster_slots;
        md.cap_unquota = md.cfg_capacity - md.cfg_cluster_quota;
    }

    action room_margins() {
        md.room_diff = md.free - md.quota_room;
        md.fifo_used = md.cfg_capacity - md.quota_room;
    }

    action used_occupied() { md.used = md.occupied; }
    action used_own() { md.used = md.own_used; }
    action used_unheld() { md.used = md.cap_unheld; }
    action used_capacity() { md.used = md.cfg_capacity; }
    action used_unquota() { md.used = md.cap_unquota; }
    action used_fifo() { md.used = md.fifo_used; }

    table room_case {
        key = {
            md.cfg_feedback: ternary;
            md.resub.op: ternary;
            md.cfg_mode: ternary;
            md.cfg_cluster_quota: ternary;
            md.quota_room[15:15]: ternary @name("md.quota_room_sign");
            md.room_diff[15:15]: ternary @name("md.room_diff_sign");
        }
        actions = { used_occupied; used_own; used_unheld; used_capacity; used_unquota; used_fifo; }
        const entries = {
            /* global feedback: revision 2, and the answers that are not an UPDATE's ACK
             * with a cluster (DATA, EMPTY, DROPPED_INVALID) */
            (FEEDBACK_REV2, _, _, _, _, _): used_occupied();
            (_, OP_POP, _, _, _, _): used_occupied();
            (_, OP_EMPTY, _, _, _, _): used_occupied();
            (_, OP_INVALID, _, _, _, _): used_occupied();
            /* no quota: new_room = C - o */
            (_, _, MODE_OLAF, 0, _, _): used_own();
            (_, _, MODE_OLAF, 0x8000 &&& 0x8000, _, _): used_own();
            (_, _, _, 0, _, _): used_occupied();
            (_, _, _, 0x8000 &&& 0x8000, _, _): used_occupied();
            /* the cluster holds more than its quota: new_room = 0 */
            (_, _, MODE_OLAF, _, 1, _): used_unheld();
            (_, _, _, _, 1, _): used_capacity();
            /* fewer free slots than quota room: new_room = C - o */
            (_, _, MODE_OLAF, _, _, 1): used_own();
            (_, _, _, _, _, 1): used_occupied();
            /* new_room = Q - h */
            (_, _, MODE_OLAF, _, _, _): used_unquota();
        }
        size = 16;
        default_action = used_fifo();
    }
