/* OlafIngress for TNA: the OlafQueue of DESIGN.md section 3 in two passes.
 *
 * Tofino reaches each register once per pass, through one RegisterAction, in the
 * one stage that holds it; a register index must be a field, a constant or a Hash
 * output; an action runs in one stage (nothing computed and used again in it); a
 * table or `if` compares a field with constants, not two fields. The rules need the
 * index entry before the slot and the slot before the decision, then write to all of
 * them. So:
 *   pass 1  reads occupied, the ring pointers, the index entry, the update's cluster's
 *           slot count (for cluster_quota), the slot's agg_count,
 *           worker and reward and the key of the slot at read_ptr (reads have no side
 *           effect, so they run for every OLAF packet, before it is even classified),
 *           takes the queue lock (reg_lock: test-and-set) if the packet is a valid
 *           UPDATE or PULL, turns every comparison into the sign bit of a difference
 *           computed one stage earlier, decides exactly as dataplane/queue.py does (one
 *           ternary table), and resubmits the packet with the decision (op, outcome,
 *           slot, key) in the 64-bit resubmit header;
 *   pass 2  applies the decision to every register, builds the ACK, DATA or EMPTY
 *           from the re-parsed original packet, and releases the lock.
 * A packet that finds the lock taken recirculates and tries again, so operations
 * are serialized and the queue's state moves exactly as in the reference model.
 * Invalid messages and MODEL/IPv4 forwarding take one pass and touch no state.
 *
 * Stages. Every Register is one stateful ALU (4 per stage, 12 stages on Tofino 1) and
 * every table that reaches it must sit in its stage, in pass 1 and in pass 2 alike. The
 * tables that reach a Register are written out and pinned with @stage so that both
 * passes' dependency chains fit (p4/README.md, "TNA", has the plan):
 *   stage 0  occupied, index (pass 1: from the header), cluster count (pass 1: the
 *            update's cluster, for the quota), seq
 *   stage 1  agg_count, worker, reward (pass 1: at the index entry), read_ptr
 *   stage 2  slot key (pass 1: at read_ptr), write_ptr, lock, model_version
 *   stage 3  active clusters (after the cluster count), gen_time, contributors, value 0
 *   4..11    values 1..31 (values.p4)
 * and pass 1 decides in stage 4 (entry -> slot fields -> differences -> margins). */
#ifndef OLAF_TNA_INGRESS_P4
#define OLAF_TNA_INGRESS_P4

control OlafIngress(inout headers_t hdr,
                    inout ingress_metadata_t md,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* Declarations, in the order of use (P4 declares before use). */
#include "config.p4"
#include "forwarding.p4"
#include "counters.p4"
#include "classify.p4"
#include "queue_state.p4"
#include "slots.p4"
#include "pass1.p4"
#include "pass2.p4"
#include "decide.p4"
#include "reply.p4"
#include "feedback.p4"

    apply {
        olaf_config.apply();
        if (hdr.bridge.isValid()) {
            md.port_in = hdr.bridge.orig_port;
        } else {
            md.port_in = ig_intr_md.ingress_port;
        }

        /* Everything after a branch must be placed after every table of the branch, so
         * each branch ends with its own answer or forwarding: nothing follows it. */
        if (ig_intr_md.resubmit_flag == 0) {
            /* ============ pass 1 of every packet: read, classify, lock, decide ============ */
            classify.apply();
            occupied_pass1.apply();
            index_pass1.apply();
            cluster_count_pass1.apply();
            agg_pass1.apply();
            worker_pass1.apply();
            reward_pass1.apply();
            read_ptr_pass1.apply();
            write_ptr_pass1.apply();
            slot_key_pass1.apply();
            validate.apply();
            lock_pass1.apply();
            compute_differences();
            compute_margins();

            if (md.verdict == VERDICT_ROUTE || md.verdict == VERDICT_MODEL) {
                if (md.verdict == VERDICT_MODEL) {
                    msg_type_counter.count((bit<8>)hdr.olaf.msg_type);
                }
                hdr.bridge.setInvalid();
                ipv4_lpm.apply();
            } else if (md.verdict == VERDICT_OK) {
                /* a valid UPDATE or PULL: resubmitted with the decision, or recirculated */
                decide.apply();
            } else if (md.verdict == VERDICT_BAD_LENGTH || md.verdict == VERDICT_BAD_FRAC_BITS
                    || md.verdict == VERDICT_CLUSTER_RANGE || md.verdict == VERDICT_BLOCK_RANGE) {
                resubmit_invalid();
            } else if (md.verdict == VERDICT_NOT_IPV4) {
                drop();
            } else {
                outcome_counter.count(OUTCOME_DROPPED_INVALID);
                if (md.verdict == VERDICT_BAD_PULL || md.verdict == VERDICT_NOT_FROM_HOST) {
                    msg_type_counter.count((bit<8>)hdr.olaf.msg_type);
                }
                drop();
            }
        } else {
            /* ================= pass 2: apply the decision, answer ================= */
            compute_key();
            occupied_pass2.apply();
            index_pass2.apply();
            cluster_count_pass2.apply();
            seq_pass2.apply();
            agg_pass2.apply();
            worker_pass2.apply();
            reward_pass2.apply();
            read_ptr_pass2.apply();
            slot_key_pass2.apply();
            write_ptr_pass2.apply();
            lock_pass2.apply();
            model_version_pass2.apply();
            active_pass2.apply();
            gen_time_pass2.apply();
            contributors_pass2.apply();
            /* Revision 3's room for the UPDATE's cluster, from the counts after the op. */
            room_differences();
            room_margins();
            room_case.apply();
            if (md.resub.op == OP_POP) {
                values_valid();
            }
            OLAF_VALUE_APPLY(0)  OLAF_VALUE_APPLY(1)  OLAF_VALUE_APPLY(2)  OLAF_VALUE_APPLY(3)
            OLAF_VALUE_APPLY(4)  OLAF_VALUE_APPLY(5)  OLAF_VALUE_APPLY(6)  OLAF_VALUE_APPLY(7)
            OLAF_VALUE_APPLY(8)  OLAF_VALUE_APPLY(9)  OLAF_VALUE_APPLY(10) OLAF_VALUE_APPLY(11)
            OLAF_VALUE_APPLY(12) OLAF_VALUE_APPLY(13) OLAF_VALUE_APPLY(14) OLAF_VALUE_APPLY(15)
            OLAF_VALUE_APPLY(16) OLAF_VALUE_APPLY(17) OLAF_VALUE_APPLY(18) OLAF_VALUE_APPLY(19)
            OLAF_VALUE_APPLY(20) OLAF_VALUE_APPLY(21) OLAF_VALUE_APPLY(22) OLAF_VALUE_APPLY(23)
            OLAF_VALUE_APPLY(24) OLAF_VALUE_APPLY(25) OLAF_VALUE_APPLY(26) OLAF_VALUE_APPLY(27)
            OLAF_VALUE_APPLY(28) OLAF_VALUE_APPLY(29) OLAF_VALUE_APPLY(30) OLAF_VALUE_APPLY(31)

            msg_type_counter.count((bit<8>)hdr.olaf.msg_type);
            if (md.resub.op == OP_POP) {
                data_from_key();
                answer_data();
            } else if (md.resub.op == OP_EMPTY) {
                answer_empty();
            } else {
                answer_ack();
                outcome_counter.count(md.resub.outcome);
            }

            /* Feedback after the operation. */
            util_lookup.apply();
            share_lookup.apply();
            congestion_difference();
            if (md.cong_diff[15:15] == 0) {
                hdr.olaf.flags = FLAG_CONGESTED;
            } else {
                hdr.olaf.flags = 0;
            }
            bounce();
        }
    }
}

#endif
