/* Fragment of OlafIngress (TNA): pass 1's decision. The differences whose sign bits
 * stand in for comparisons, the actions that write the resubmit header (or recirculate
 * a packet that found the lock held) and `decide`, the rules of DESIGN.md section 3 as
 * one ternary table. compute_key, the update's slot key for pass 2's slot_key_pass2,
 * is one of these one-stage actions too. */

    /* ---- one-stage actions on values computed in earlier stages ---- */
    action compute_key() {
        md.slot_key = slot_key_hash.get({hdr.olaf.cluster_id, hdr.olaf.block_id});
    }

    action compute_differences() {
        md.worker_xor = md.slot_worker ^ hdr.olaf.worker_id;
        md.up_diff = hdr.olaf.reward |-| md.slot_reward;
        md.down_diff = md.slot_reward |-| hdr.olaf.reward;
        md.occ_diff = md.occupied - md.cfg_capacity;
        md.quota_diff = md.cluster_slots - md.cfg_cluster_quota;
    }

    action compute_margins() {
        md.up_margin = md.up_diff |-| md.cfg_threshold;
        md.down_margin = md.down_diff |-| md.cfg_threshold;
    }

    /* ---- the decision of pass 1, resubmitted to pass 2. Each action writes the whole
     * resubmit header itself (an action is one stage: no action calls another). ---- */

    /* REPLACED, MERGED or DROPPED_REWARD: the slot is the index entry. */
    action decide_on_entry(bit<8> op, bit<8> outcome) {
        md.resub.setValid();
        md.resub.op = op;
        md.resub.outcome = outcome;
        md.resub.slot = md.entry;
        md.resub.cluster = hdr.olaf.cluster_id;
        md.resub.block = hdr.olaf.block_id;
        ig_dprsr_md.resubmit_type = RESUBMIT_TYPE_OLAF;
    }

    /* ENQUEUED at write_ptr, or DROPPED_FULL (op OP_DROP: the slot is not used). */
    action decide_append(bit<8> op, bit<8> outcome) {
        md.resub.setValid();
        md.resub.op = op;
        md.resub.outcome = outcome;
        md.resub.slot = md.write_slot;
        md.resub.cluster = hdr.olaf.cluster_id;
        md.resub.block = hdr.olaf.block_id;
        ig_dprsr_md.resubmit_type = RESUBMIT_TYPE_OLAF;
    }

    /* DATA: the slot at read_ptr, with its key for the index and the cluster count. */
    action decide_pop() {
        md.resub.setValid();
        md.resub.op = OP_POP;
        md.resub.outcome = OUTCOME_ENQUEUED;
        md.resub.slot = md.read_slot;
        md.resub.cluster = md.slot_key[31:16];
        md.resub.block = md.slot_key[15:0];
        ig_dprsr_md.resubmit_type = RESUBMIT_TYPE_OLAF;
    }

    action decide_empty() {
        md.resub.setValid();
        md.resub.op = OP_EMPTY;
        md.resub.outcome = OUTCOME_ENQUEUED;
        md.resub.slot = 0;
        md.resub.cluster = 0;
        md.resub.block = 0;
        ig_dprsr_md.resubmit_type = RESUBMIT_TYPE_OLAF;
    }

    /* BAD_LENGTH, BAD_FRAC_BITS, CLUSTER_RANGE, BLOCK_RANGE: an ACK built in pass 2 like
     * every answer (so the feedback tables sit in one branch), touching no state. */
    action resubmit_invalid() {
        md.resub.setValid();
        md.resub.op = OP_INVALID;
        md.resub.outcome = OUTCOME_DROPPED_INVALID;
        md.resub.slot = 0;
        md.resub.cluster = 0;
        md.resub.block = 0;
        ig_dprsr_md.resubmit_type = RESUBMIT_TYPE_OLAF;
    }

    action recirculate() {
        hdr.bridge.setValid();
        hdr.bridge.pad = 0;
        hdr.bridge.orig_port = md.port_in;
        ig_tm_md.ucast_egress_port = OLAF_RECIRC_PORT;
    }

    /* The rules of DESIGN.md section 3 in their order, on sign bits and equalities
     * computed in earlier stages. A mode other than OLAF queues as FIFO. The lock was
     * free (was_locked 0) in every entry; a packet that found it held recirculates. */
    table decide {
        key = {
            md.was_locked: exact;
            hdr.olaf.msg_type: exact;
            md.occupied: ternary;
            md.entry: ternary;
            md.cfg_mode: ternary;
            md.slot_agg: ternary;
            md.worker_xor: ternary;
            md.up_margin[31:31]: ternary @name("md.up_margin_sign");
            md.down_margin[31:31]: ternary @name("md.down_margin_sign");
            md.down_diff[31:31]: ternary @name("md.down_diff_sign");
            md.occ_diff[15:15]: ternary @name("md.occ_diff_sign");
            md.quota_diff[15:15]: ternary @name("md.quota_diff_sign");
            /* only to tell quota 0 or >= 2^15 (written around the controller) from the others */
            md.cfg_cluster_quota: ternary;
        }
        actions = { decide_on_entry; decide_append; decide_pop; decide_empty; recirculate; }
        const entries = {
            /* PULL: EMPTY when nothing is queued, else DATA */
            (0, MSG_PULL, 0, _, _, _, _, _, _, _, _, _, _): decide_empty();
            (0, MSG_PULL, _, _, _, _, _, _, _, _, _, _, _): decide_pop();
            /* UPDATE without a slot for its key: append while the queue is not full and the
             * cluster is below its quota (steps 4-5), else DROPPED_FULL. The controller
             * refuses a quota of 0 or above capacity; written around it, either is no
             * limit, as on v1model: 0 and 2^15.. by these entries (the sign bit of
             * quota_diff is exact below 2^15), the rest by itself (a cluster never holds
             * more than capacity). */
            (0, MSG_UPDATE, _, 0, _, _, _, _, _, _, 1, 1, _): decide_append(OP_APPEND, OUTCOME_ENQUEUED);
            (0, MSG_UPDATE, _, 0, _, _, _, _, _, _, 1, _, 0): decide_append(OP_APPEND, OUTCOME_ENQUEUED);
            (0, MSG_UPDATE, _, 0, _, _, _, _, _, _, 1, _, 0x8000 &&& 0x8000):
                decide_append(OP_APPEND, OUTCOME_ENQUEUED);
            (0, MSG_UPDATE, _, 0, _, _, _, _, _, _, _, _, _): decide_append(OP_DROP, OUTCOME_DROPPED_FULL);
            /* OLAF mode, slot s: 1. same single worker; 2. |u - s| < threshold; 3. u > s */
            (0, MSG_UPDATE, _, _, MODE_OLAF, 1, 0, _, _, _, _, _, _):
                decide_on_entry(OP_STORE, OUTCOME_REPLACED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, 1, 1, 1, _, _, _):
                decide_on_entry(OP_MERGE_UP, OUTCOME_MERGED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, 1, 1, _, _, _, _): decide_on_entry(OP_MERGE, OUTCOME_MERGED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, _, _, 1, _, _, _):
                decide_on_entry(OP_STORE, OUTCOME_REPLACED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, _, _, _, _, _, _):
                decide_on_entry(OP_DROP, OUTCOME_DROPPED_REWARD);
            /* FIFO (any other mode): append as above, whatever the index says */
            (0, MSG_UPDATE, _, _, _, _, _, _, _, _, 1, 1, _): decide_append(OP_APPEND, OUTCOME_ENQUEUED);
            (0, MSG_UPDATE, _, _, _, _, _, _, _, _, 1, _, 0): decide_append(OP_APPEND, OUTCOME_ENQUEUED);
            (0, MSG_UPDATE, _, _, _, _, _, _, _, _, 1, _, 0x8000 &&& 0x8000):
                decide_append(OP_APPEND, OUTCOME_ENQUEUED);
            (0, MSG_UPDATE, _, _, _, _, _, _, _, _, _, _, _): decide_append(OP_DROP, OUTCOME_DROPPED_FULL);
        }
        size = 16;
        default_action = recirculate();
    }
