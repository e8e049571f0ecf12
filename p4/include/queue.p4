/* OlafIngress: the OlafQueue (DESIGN.md sections 2-3) and the forwarding of all other
 * traffic. The control-plane objects are declared in the fragments included first, so
 * that their P4Runtime names are OlafIngress.<name>; the queue rules follow, in the
 * order dataplane/queue.py applies them (that file is the reference model).
 *
 * Rewards are compared as unsigned numbers after flipping the sign bit, which orders
 * them exactly as signed int32 and makes |u.reward - s.reward| an exact 32-bit
 * unsigned difference: no saturation corner cases. */
#ifndef OLAF_QUEUE_P4
#define OLAF_QUEUE_P4

control OlafIngress(inout headers_t hdr,
                    inout metadata_t meta,
                    inout standard_metadata_t standard_metadata) {
#include "config.p4"
#include "counters.p4"
#include "forwarding.p4"
#include "queue_state.p4"
#include "acl.p4"

    OlafFeedback() feedback;
    OlafReply() reply;

    apply {
        olaf_config.apply();
        /* Runtime limits may not exceed the compiled register sizes. */
        if (meta.cfg_capacity == 0 || meta.cfg_capacity > OLAF_CAPACITY) {
            meta.cfg_capacity = OLAF_CAPACITY;
        }
        if (meta.cfg_max_clusters > OLAF_MAX_CLUSTERS) {
            meta.cfg_max_clusters = OLAF_MAX_CLUSTERS;
        }
        if (meta.cfg_max_blocks > OLAF_MAX_BLOCKS) {
            meta.cfg_max_blocks = OLAF_MAX_BLOCKS;
        }
        /* The controller refuses a quota of 0 or above capacity; one written around it
         * (simple_switch_CLI) means no limit, as capacity 0 means the compiled size, so
         * that no table write can stop every append. */
        if (meta.cfg_cluster_quota == 0 || meta.cfg_cluster_quota > meta.cfg_capacity) {
            meta.cfg_cluster_quota = meta.cfg_capacity;
        }
        /* The reference queue refuses any mode but OLAF and FIFO; a table write to this
         * switch is not checked, so an unknown mode queues as FIFO does (no merging). */
        if (meta.cfg_mode != MODE_OLAF) {
            meta.cfg_mode = MODE_FIFO;
        }
        meta.short_reply = 0;
        /* bmv2 allows one apply() site per table, so both users of ipv4_lpm set this. */
        bool forward = false;

        if (meta.is_olaf == 0) {
            if (hdr.ipv4.isValid()) {
                forward = true;
            } else {
                mark_to_drop(standard_metadata);
            }
        } else {
            /* ---- classify, as worker_transport.codec.classify ---- */
            bit<8> verdict = VERDICT_OK;
            if (!hdr.olaf.isValid() || standard_metadata.parser_error != error.NoError
                    || hdr.udp.len < OLAF_MIN_UDP_LEN) {
                verdict = VERDICT_SHORT;
            } else if (hdr.olaf.version != OLAF_VERSION) {
                verdict = VERDICT_BAD_VERSION;
            } else if (hdr.olaf.msg_type < MSG_UPDATE || hdr.olaf.msg_type > MSG_MODEL) {
                verdict = VERDICT_BAD_TYPE;
            } else if (hdr.olaf.msg_type == MSG_PULL) {
                if (hdr.olaf.num_values != 0 || hdr.udp.len != OLAF_MIN_UDP_LEN) {
                    verdict = VERDICT_BAD_PULL;
                }
            } else if (hdr.olaf.msg_type == MSG_ACK || hdr.olaf.msg_type == MSG_DATA
                    || hdr.olaf.msg_type == MSG_EMPTY) {
                verdict = VERDICT_NOT_FROM_HOST;
            } else if (hdr.olaf.msg_type == MSG_UPDATE) {
                if (hdr.olaf.num_values != OLAF_V8 || hdr.udp.len != OLAF_UPDATE_UDP_LEN) {
                    verdict = VERDICT_BAD_LENGTH;
                } else if (hdr.olaf.frac_bits != meta.cfg_frac_bits) {
                    verdict = VERDICT_BAD_FRAC_BITS;
                } else if (hdr.olaf.cluster_id >= meta.cfg_max_clusters) {
                    verdict = VERDICT_CLUSTER_RANGE;
                } else if (hdr.olaf.block_id >= meta.cfg_max_blocks) {
                    verdict = VERDICT_BLOCK_RANGE;
                }
            }
            bool heard = verdict != VERDICT_SHORT && verdict != VERDICT_BAD_VERSION
                    && verdict != VERDICT_BAD_TYPE;
            /* The source checks of acl.p4 come before the queue counts or touches anything. */
            bool refused = false;
            if (heard && hdr.olaf.msg_type == MSG_UPDATE) {
                switch (update_source.apply().action_run) {
                    deny: {
                        refused = true;
                        refused_counter.count(REFUSED_UPDATE_SOURCE);
                    }
                    default: {
                    }
                }
            } else if (heard && hdr.olaf.msg_type == MSG_PULL) {
                switch (pull_source.apply().action_run) {
                    deny: {
                        refused = true;
                        refused_counter.count(REFUSED_PULL_SOURCE);
                    }
                    default: {
                    }
                }
            }
            if (heard && !refused) {
                msg_type_counter.count((bit<32>)hdr.olaf.msg_type);
            }

            bool answer = false;
            bit<8> outcome = OUTCOME_DROPPED_INVALID;

            if (refused) {
                mark_to_drop(standard_metadata);
            } else if (verdict != VERDICT_OK) {
                outcome_counter.count((bit<32>)OUTCOME_DROPPED_INVALID);
                if (verdict >= VERDICT_BAD_LENGTH) {
                    answer = true;
                } else {
                    mark_to_drop(standard_metadata);
                }
            } else if (hdr.olaf.msg_type == MSG_UPDATE) {
                /* ---- UPDATE: the five rules of DESIGN.md section 3 ---- */
                bit<32> index_key = ((bit<32>)hdr.olaf.cluster_id << OLAF_BLOCK_SHIFT)
                              | (bit<32>)hdr.olaf.block_id;
                bit<16> entry;
                reg_index.read(entry, index_key);
                bit<16> occupied;
                reg_occupied.read(occupied, 0);

                bit<16> slot = 0;
                bool store = false;    /* slot takes the update's fields and values */
                bool merge = false;    /* slot absorbs the update */
                bool append = false;   /* slot is new at write_ptr */

                if (meta.cfg_mode == MODE_OLAF && entry != 0) {
                    slot = entry - 1;
                    bit<16> slot_agg;
                    bit<16> slot_worker;
                    int<32> slot_reward;
                    reg_slot_agg_count.read(slot_agg, (bit<32>)slot);
                    reg_slot_worker_id.read(slot_worker, (bit<32>)slot);
                    reg_slot_reward.read(slot_reward, (bit<32>)slot);
                    bit<32> u_key = (bit<32>)hdr.olaf.reward ^ 32w0x80000000;
                    bit<32> s_key = (bit<32>)slot_reward ^ 32w0x80000000;
                    bit<32> diff;
                    if (u_key >= s_key) {
                        diff = u_key - s_key;
                    } else {
                        diff = s_key - u_key;
                    }
                    if (slot_agg == 1 && slot_worker == hdr.olaf.worker_id) {
                        outcome = OUTCOME_REPLACED;
                        store = true;
                    } else if (diff < (bit<32>)meta.cfg_threshold) {
                        outcome = OUTCOME_MERGED;
                        merge = true;
                    } else if (u_key > s_key) {
                        outcome = OUTCOME_REPLACED;
                        store = true;
                    } else {
                        outcome = OUTCOME_DROPPED_REWARD;
                    }
                } else {
                    /* Steps 4-5: append while the queue has room and the cluster holds
                     * fewer than cluster_quota slots. */
                    bit<16> cluster_slots;
                    reg_cluster_count.read(cluster_slots, (bit<32>)hdr.olaf.cluster_id);
                    if (occupied >= meta.cfg_capacity || cluster_slots >= meta.cfg_cluster_quota) {
                        outcome = OUTCOME_DROPPED_FULL;
                    } else {
                        reg_write_ptr.read(slot, 0);
                        outcome = OUTCOME_ENQUEUED;
                        store = true;
                        append = true;
                    }
                }

                bit<32> s32 = (bit<32>)slot;
                bit<32> base = s32 << OLAF_V_SHIFT;
                if (store) {
                    reg_slot_cluster_id.write(s32, hdr.olaf.cluster_id);
                    reg_slot_worker_id.write(s32, hdr.olaf.worker_id);
                    reg_slot_block_id.write(s32, hdr.olaf.block_id);
                    reg_slot_agg_count.write(s32, hdr.olaf.agg_count);
                    reg_slot_seq.write(s32, hdr.olaf.seq);
                    reg_slot_model_version.write(s32, hdr.olaf.model_version);
                    reg_slot_reward.write(s32, hdr.olaf.reward);
                    reg_slot_gen_time_us.write(s32, hdr.olaf.gen_time_us);
                    reg_slot_contributors.write(s32, hdr.olaf.contributors);
#include "values_store.p4"
                }
                if (merge) {
                    bit<16> agg;
                    reg_slot_agg_count.read(agg, s32);
                    if (agg != 16w0xffff) {
                        agg = agg + 1;
                    }
                    reg_slot_agg_count.write(s32, agg);

                    int<32> reward;
                    reg_slot_reward.read(reward, s32);
                    if (((bit<32>)hdr.olaf.reward ^ 32w0x80000000) > ((bit<32>)reward ^ 32w0x80000000)) {
                        reg_slot_reward.write(s32, hdr.olaf.reward);
                    }
                    bit<32> gen_time;
                    reg_slot_gen_time_us.read(gen_time, s32);
                    if (hdr.olaf.gen_time_us < gen_time) {
                        reg_slot_gen_time_us.write(s32, hdr.olaf.gen_time_us);
                    }
                    bit<32> model_version;
                    reg_slot_model_version.read(model_version, s32);
                    if (hdr.olaf.model_version < model_version) {
                        reg_slot_model_version.write(s32, hdr.olaf.model_version);
                    }
                    bit<32> contributors;
                    reg_slot_contributors.read(contributors, s32);
                    reg_slot_contributors.write(s32, contributors | hdr.olaf.contributors);

                    /* reg_values is bit<32>: bmv2 keeps every register cell as an unsigned
                     * number anyway (Register::export_bytes masks), and |+| is evaluated
                     * on the operands' numbers (sat_cast), so a cell must be made signed
                     * before the add. Declaring it unsigned makes the type checker
                     * demand that cast: one (int<32>), lowered by p4c to two_comp_mod. */
                    bit<32> current;
#include "values_merge.p4"
                }
                if (append) {
                    reg_index.write(index_key, slot + 1);
                    bit<32> cluster = (bit<32>)hdr.olaf.cluster_id;
                    bit<16> count;
                    reg_cluster_count.read(count, cluster);
                    if (count == 0) {
                        bit<16> active;
                        reg_active_clusters.read(active, 0);
                        reg_active_clusters.write(0, active + 1);
                    }
                    reg_cluster_count.write(cluster, count + 1);
                    if (slot + 1 >= meta.cfg_capacity) {
                        reg_write_ptr.write(0, 0);
                    } else {
                        reg_write_ptr.write(0, slot + 1);
                    }
                    reg_occupied.write(0, occupied + 1);
                }
                outcome_counter.count((bit<32>)outcome);
                answer = true;
            } else if (hdr.olaf.msg_type == MSG_PULL) {
                /* ---- PULL: pop the head as DATA, or answer EMPTY ---- */
                bit<16> occupied;
                reg_occupied.read(occupied, 0);
                if (occupied == 0) {
                    hdr.olaf.msg_type = MSG_EMPTY;
                    hdr.olaf.cluster_id = 0;
                    hdr.olaf.worker_id = 0;
                    hdr.olaf.block_id = 0;
                    hdr.olaf.agg_count = 0;
                    hdr.olaf.seq = 0;
                    hdr.olaf.model_version = 0;
                    hdr.olaf.reward = 0;
                    hdr.olaf.gen_time_us = 0;
                    hdr.olaf.contributors = 0;
                    hdr.olaf.num_values = 0;
                } else {
                    bit<16> slot;
                    reg_read_ptr.read(slot, 0);
                    bit<32> s32 = (bit<32>)slot;
                    bit<32> base = s32 << OLAF_V_SHIFT;
                    hdr.olaf.msg_type = MSG_DATA;
                    reg_slot_cluster_id.read(hdr.olaf.cluster_id, s32);
                    reg_slot_worker_id.read(hdr.olaf.worker_id, s32);
                    reg_slot_block_id.read(hdr.olaf.block_id, s32);
                    reg_slot_agg_count.read(hdr.olaf.agg_count, s32);
                    reg_slot_seq.read(hdr.olaf.seq, s32);
                    reg_slot_model_version.read(hdr.olaf.model_version, s32);
                    reg_slot_reward.read(hdr.olaf.reward, s32);
                    reg_slot_gen_time_us.read(hdr.olaf.gen_time_us, s32);
                    reg_slot_contributors.read(hdr.olaf.contributors, s32);
                    hdr.olaf.num_values = OLAF_V8;
                    bit<32> cell;
#include "values_load.p4"

                    bit<32> index_key = ((bit<32>)hdr.olaf.cluster_id << OLAF_BLOCK_SHIFT)
                                  | (bit<32>)hdr.olaf.block_id;
                    bit<16> entry;
                    reg_index.read(entry, index_key);
                    if (entry == slot + 1) {
                        reg_index.write(index_key, 0);
                    }
                    bit<32> cluster = (bit<32>)hdr.olaf.cluster_id;
                    bit<16> count;
                    reg_cluster_count.read(count, cluster);
                    if (count == 1) {
                        bit<16> active;
                        reg_active_clusters.read(active, 0);
                        reg_active_clusters.write(0, active - 1);
                    }
                    reg_cluster_count.write(cluster, count - 1);
                    if (slot + 1 >= meta.cfg_capacity) {
                        reg_read_ptr.write(0, 0);
                    } else {
                        reg_read_ptr.write(0, slot + 1);
                    }
                    reg_occupied.write(0, occupied - 1);
                }
                hdr.olaf.outcome = OUTCOME_ENQUEUED;
                hdr.olaf.frac_bits = meta.cfg_frac_bits;
                hdr.olaf.reserved = 0;
                answer = true;
            } else {
                /* MODEL: weights from the PS, forwarded unchanged. */
                forward = true;
            }

            if (answer) {
                if (hdr.olaf.msg_type == MSG_UPDATE) {
                    /* The ACK: the UPDATE's header as received, values removed. */
                    hdr.olaf.msg_type = MSG_ACK;
                    hdr.olaf.outcome = outcome;
                    hdr.olaf.num_values = 0;
#include "values_strip.p4"
                }
                /* Feedback after the operation. */
                bit<16> occupied_now;
                bit<16> active_now;
                reg_occupied.read(occupied_now, 0);
                reg_active_clusters.read(active_now, 0);
                /* What queue_util reports as used (DESIGN.md section 3, Feedback): the
                 * occupancy, except on the ACK of a valid UPDATE in revision 3, where it is
                 * capacity - room_c for the UPDATE's cluster c. A DROPPED_INVALID ACK's
                 * cluster_id may be out of range, so it reports the occupancy too. */
                bit<16> used = occupied_now;
                if (hdr.olaf.msg_type == MSG_ACK && outcome != OUTCOME_DROPPED_INVALID
                        && meta.cfg_feedback != FEEDBACK_REV2) {
                    bit<16> held;
                    reg_cluster_count.read(held, (bit<32>)hdr.olaf.cluster_id);
                    /* new_room = max(0, min(capacity - occupied, cluster_quota - held)),
                     * without a negative intermediate: held <= occupied <= capacity. */
                    bit<16> new_room = 0;
                    if (held < meta.cfg_cluster_quota) {
                        new_room = meta.cfg_cluster_quota - held;
                        if (meta.cfg_capacity - occupied_now < new_room) {
                            new_room = meta.cfg_capacity - occupied_now;
                        }
                    }
                    /* room_c = held + new_room in OLAF mode (the slots the cluster's next
                     * update can merge into, replace in or append to), new_room in FIFO. */
                    if (meta.cfg_mode == MODE_OLAF) {
                        used = meta.cfg_capacity - held - new_room;
                    } else {
                        used = meta.cfg_capacity - new_room;
                    }
                }
                feedback.apply(occupied_now, used, meta.cfg_capacity, active_now,
                               meta.cfg_congestion_threshold,
                               hdr.olaf.flags, hdr.olaf.active_clusters, hdr.olaf.queue_util);
                reply.apply(hdr, meta, standard_metadata);
            }
        }
        if (forward) {
            ipv4_lpm.apply();
        }
    }
}

#endif
