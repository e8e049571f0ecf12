/* OlafIngress for TNA: the OlafQueue of DESIGN.md section 3 in two passes.
 *
 * Tofino reaches each register once per pass, through one RegisterAction, in the
 * one stage that holds it; a register index must be a field, a constant or a Hash
 * output; an action runs in one stage (nothing computed and used again in it); an
 * `if` compares a field with a constant. The rules need the index entry before the
 * slot and the slot before the decision, then write to all of them. So:
 *   pass 1  takes the queue lock (reg_lock: test-and-set), reads occupied, the ring
 *           pointers, the index entry and the slot's agg_count, worker and reward,
 *           turns every comparison into the sign bit of a difference computed one
 *           table earlier, decides exactly as dataplane/queue.py does, and resubmits
 *           the packet with the decision (op, outcome, slot) in the 64-bit resubmit
 *           header;
 *   pass 2  applies the decision to every register, builds the ACK, DATA or EMPTY
 *           from the re-parsed original packet, and releases the lock.
 * A packet that finds the lock taken recirculates and tries again, so operations
 * are serialized and the queue's state moves exactly as in the reference model.
 * Invalid messages and MODEL/IPv4 forwarding take one pass and touch no state. */
#ifndef OLAF_TNA_QUEUE_P4
#define OLAF_TNA_QUEUE_P4

control OlafIngress(inout headers_t hdr,
                    inout ingress_metadata_t md,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* ---- configuration (as v1model's olaf_config). The range and frac_bits checks
     * are differences taken here against the action's data, tested by later `if`s. */
    action set_config(bit<8> mode,
                      int<32> threshold,
                      bit<8> congestion_threshold,
                      bit<8> frac_bits,
                      bit<16> capacity,
                      bit<16> max_clusters,
                      bit<16> max_blocks) {
        md.cfg_mode = mode;
        md.cfg_threshold = threshold;
        md.cfg_congestion_threshold = (bit<16>)congestion_threshold;
        md.cfg_frac_bits = frac_bits;
        md.cfg_capacity = capacity;
        md.frac_xor = hdr.olaf.frac_bits ^ frac_bits;
        md.cluster_room = max_clusters - hdr.olaf.cluster_id;
        md.block_room = max_blocks - hdr.olaf.block_id;
        md.len_diff = hdr.udp.len - OLAF_MIN_UDP_LEN;
    }

    table olaf_config {
        actions = { set_config; }
        size = 1;
        default_action = set_config(OLAF_DEFAULT_MODE,
                                    OLAF_DEFAULT_THRESHOLD,
                                    OLAF_DEFAULT_CONGESTION_THRESHOLD,
                                    OLAF_DEFAULT_FRAC_BITS,
                                    OLAF_DEFAULT_CAPACITY,
                                    OLAF_DEFAULT_MAX_CLUSTERS,
                                    OLAF_DEFAULT_MAX_BLOCKS);
    }

    /* ---- queue_util = floor(255 * occupied / capacity): Tofino has no divider, so
     * the controller installs one entry per occupancy 0..capacity ---- */
    action set_util(bit<8> util) {
        hdr.olaf.queue_util = util;
        md.util = (bit<16>)util;
    }

    table util_lookup {
        key = { md.occupied: exact; }
        actions = { set_util; }
        size = 1024;
        default_action = set_util(0);
    }

    /* ---- forwarding ---- */
    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    action ipv4_forward(bit<48> dstAddr, PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { ipv4_forward; drop; }
        size = 1024;
        default_action = drop();
    }

    /* ---- counters ---- */
    Counter<bit<32>, bit<8>>(8, CounterType_t.PACKETS) outcome_counter;
    Counter<bit<32>, bit<8>>(8, CounterType_t.PACKETS) msg_type_counter;

    /* ---- keys: IDENTITY hashes concatenate fields without an action ---- */
    Hash<bit<32>>(HashAlgorithm_t.IDENTITY) slot_key_hash;
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) index_hash;

    /* ---- queue state: one stateful ALU each ---- */
    Register<bit<8>, bit<1>>(1, 0) reg_lock;
    RegisterAction<bit<8>, bit<1>, bit<8>>(reg_lock) lock_acquire = {
        void apply(inout bit<8> v, out bit<8> was) { was = v; v = 1; }
    };
    RegisterAction<bit<8>, bit<1>, bit<8>>(reg_lock) lock_release = {
        void apply(inout bit<8> v) { v = 0; }
    };

    Register<bit<16>, bit<1>>(1, 0) reg_occupied;
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_occupied) occupied_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_occupied) occupied_inc = {
        void apply(inout bit<16> v, out bit<16> rv) { v = v + 1; rv = v; }
    };
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_occupied) occupied_dec = {
        void apply(inout bit<16> v, out bit<16> rv) { v = v - 1; rv = v; }
    };

    /* Ring pointers hold slot numbers 1..capacity. Only pass 2 reaches them: taking
     * the slot and advancing is one stateful ALU instruction. */
    Register<bit<16>, bit<1>>(1, 1) reg_write_ptr;
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_write_ptr) write_ptr_take = {
        void apply(inout bit<16> v, out bit<16> slot) {
            slot = v;
            if (v == md.cfg_capacity) { v = 1; } else { v = v + 1; }
        }
    };

    Register<bit<16>, bit<1>>(1, 1) reg_read_ptr;
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_read_ptr) read_ptr_take = {
        void apply(inout bit<16> v, out bit<16> slot) {
            slot = v;
            if (v == md.cfg_capacity) { v = 1; } else { v = v + 1; }
        }
    };

    /* [cluster_id[3:0] ++ block_id] -> newest slot for that key, 0 when none. */
    Register<bit<16>, bit<16>>(OLAF_INDEX_SIZE, 0) reg_index;
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_index) index_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_index) index_set = {
        void apply(inout bit<16> v) { v = md.resub.slot; }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_index) index_clear_if_popped = {
        void apply(inout bit<16> v) {
            if (v == md.resub.slot) { v = 0; }
        }
    };

    Register<bit<16>, bit<16>>(OLAF_MAX_CLUSTERS, 0) reg_cluster_count;
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_cluster_count) cluster_count_inc = {
        void apply(inout bit<16> v, out bit<16> before) { before = v; v = v + 1; }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_cluster_count) cluster_count_dec = {
        void apply(inout bit<16> v, out bit<16> after) { v = v - 1; after = v; }
    };

    Register<bit<16>, bit<1>>(1, 0) reg_active_clusters;
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_active_clusters) active_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_active_clusters) active_inc = {
        void apply(inout bit<16> v, out bit<16> rv) { v = v + 1; rv = v; }
    };
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_active_clusters) active_dec = {
        void apply(inout bit<16> v, out bit<16> rv) { v = v - 1; rv = v; }
    };

    /* Slot fields, one cell per slot number. cluster_id and block_id share one cell. */
    Register<bit<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_key;
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_key) slot_key_write = {
        void apply(inout bit<32> v) { v = md.slot_key; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_key) slot_key_read = {
        void apply(inout bit<32> v, out bit<32> rv) { rv = v; }
    };

    Register<bit<16>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_agg_count;
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_slot_agg_count) agg_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_slot_agg_count) agg_write = {
        void apply(inout bit<16> v) { v = hdr.olaf.agg_count; }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_slot_agg_count) agg_merge = {
        void apply(inout bit<16> v) { v = v |+| 1; }
    };

    Register<bit<16>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_worker_id;
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_slot_worker_id) worker_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_slot_worker_id) worker_write = {
        void apply(inout bit<16> v) { v = hdr.olaf.worker_id; }
    };

    /* The merge's max is decided in pass 1 (OP_MERGE_UP), from saturated differences,
     * so this ALU only reads and writes. */
    Register<int<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_reward;
    RegisterAction<int<32>, bit<16>, int<32>>(reg_slot_reward) reward_read = {
        void apply(inout int<32> v, out int<32> rv) { rv = v; }
    };
    RegisterAction<int<32>, bit<16>, int<32>>(reg_slot_reward) reward_write = {
        void apply(inout int<32> v) { v = hdr.olaf.reward; }
    };

    Register<bit<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_seq;
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_seq) seq_read = {
        void apply(inout bit<32> v, out bit<32> rv) { rv = v; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_seq) seq_write = {
        void apply(inout bit<32> v) { v = hdr.olaf.seq; }
    };

    Register<bit<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_model_version;
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_model_version) model_version_read = {
        void apply(inout bit<32> v, out bit<32> rv) { rv = v; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_model_version) model_version_write = {
        void apply(inout bit<32> v) { v = hdr.olaf.model_version; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_model_version) model_version_min = {
        void apply(inout bit<32> v) {
            if (hdr.olaf.model_version < v) { v = hdr.olaf.model_version; }
        }
    };

    Register<bit<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_gen_time_us;
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_gen_time_us) gen_time_read = {
        void apply(inout bit<32> v, out bit<32> rv) { rv = v; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_gen_time_us) gen_time_write = {
        void apply(inout bit<32> v) { v = hdr.olaf.gen_time_us; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_gen_time_us) gen_time_min = {
        void apply(inout bit<32> v) {
            if (hdr.olaf.gen_time_us < v) { v = hdr.olaf.gen_time_us; }
        }
    };

    Register<bit<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) reg_slot_contributors;
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_contributors) contributors_read = {
        void apply(inout bit<32> v, out bit<32> rv) { rv = v; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_contributors) contributors_write = {
        void apply(inout bit<32> v) { v = hdr.olaf.contributors; }
    };
    RegisterAction<bit<32>, bit<16>, bit<32>>(reg_slot_contributors) contributors_or = {
        void apply(inout bit<32> v) { v = v | hdr.olaf.contributors; }
    };

    OLAF_VALUE_INSTANCE(0)  OLAF_VALUE_INSTANCE(1)  OLAF_VALUE_INSTANCE(2)  OLAF_VALUE_INSTANCE(3)
    OLAF_VALUE_INSTANCE(4)  OLAF_VALUE_INSTANCE(5)  OLAF_VALUE_INSTANCE(6)  OLAF_VALUE_INSTANCE(7)
    OLAF_VALUE_INSTANCE(8)  OLAF_VALUE_INSTANCE(9)  OLAF_VALUE_INSTANCE(10) OLAF_VALUE_INSTANCE(11)
    OLAF_VALUE_INSTANCE(12) OLAF_VALUE_INSTANCE(13) OLAF_VALUE_INSTANCE(14) OLAF_VALUE_INSTANCE(15)
    OLAF_VALUE_INSTANCE(16) OLAF_VALUE_INSTANCE(17) OLAF_VALUE_INSTANCE(18) OLAF_VALUE_INSTANCE(19)
    OLAF_VALUE_INSTANCE(20) OLAF_VALUE_INSTANCE(21) OLAF_VALUE_INSTANCE(22) OLAF_VALUE_INSTANCE(23)
    OLAF_VALUE_INSTANCE(24) OLAF_VALUE_INSTANCE(25) OLAF_VALUE_INSTANCE(26) OLAF_VALUE_INSTANCE(27)
    OLAF_VALUE_INSTANCE(28) OLAF_VALUE_INSTANCE(29) OLAF_VALUE_INSTANCE(30) OLAF_VALUE_INSTANCE(31)

    /* ---- one-stage actions on values computed in earlier tables ---- */
    action compute_key() {
        md.slot_key = slot_key_hash.get({hdr.olaf.cluster_id, hdr.olaf.block_id});
    }

    action compute_differences() {
        md.worker_xor = md.slot_worker ^ hdr.olaf.worker_id;
        md.up_diff = hdr.olaf.reward |-| md.slot_reward;
        md.down_diff = md.slot_reward |-| hdr.olaf.reward;
        md.occ_diff = md.occupied - md.cfg_capacity;
    }

    action compute_margins() {
        md.up_margin = md.up_diff |-| md.cfg_threshold;
        md.down_margin = md.down_diff |-| md.cfg_threshold;
    }

    action decide(bit<8> op, bit<8> outcome, bit<16> slot) {
        md.resub.setValid();
        md.resub.marker = OLAF_RESUBMIT_MARKER;
        md.resub.op = op;
        md.resub.outcome = outcome;
        md.resub.pad0 = 0;
        md.resub.slot = slot;
        md.resub.pad1 = 0;
        ig_dprsr_md.resubmit_type = RESUBMIT_TYPE_OLAF;
    }

    action recirculate() {
        hdr.bridge.setValid();
        hdr.bridge.pad = 0;
        hdr.bridge.orig_port = md.port_in;
        ig_tm_md.ucast_egress_port = OLAF_RECIRC_PORT;
    }

    action answer_invalid() {
        hdr.olaf.msg_type = MSG_ACK;
        hdr.olaf.outcome = OUTCOME_DROPPED_INVALID;
        hdr.olaf.num_values = 0;
        hdr.udp.len = UDP_HEADER_LEN + OLAF_HEADER_LEN;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + UDP_HEADER_LEN + OLAF_HEADER_LEN;
    }

    action data_from_key() {
        hdr.olaf.cluster_id = md.slot_key[31:16];
        hdr.olaf.block_id = md.slot_key[15:0];
    }

    action answer_data() {
        hdr.olaf.msg_type = MSG_DATA;
        hdr.olaf.num_values = OLAF_TNA_V8;
        hdr.olaf.outcome = OUTCOME_ENQUEUED;
        hdr.olaf.frac_bits = md.cfg_frac_bits;
        hdr.olaf.reserved = 0;
        hdr.udp.len = OLAF_TNA_UPDATE_UDP_LEN;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + OLAF_TNA_UPDATE_UDP_LEN;
    }

    action answer_empty() {
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
        hdr.olaf.outcome = OUTCOME_ENQUEUED;
        hdr.olaf.frac_bits = md.cfg_frac_bits;
        hdr.olaf.reserved = 0;
        hdr.udp.len = UDP_HEADER_LEN + OLAF_HEADER_LEN;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + UDP_HEADER_LEN + OLAF_HEADER_LEN;
    }

    action answer_ack() {
        hdr.olaf.msg_type = MSG_ACK;
        hdr.olaf.outcome = md.resub.outcome;
        hdr.olaf.num_values = 0;
        hdr.udp.len = UDP_HEADER_LEN + OLAF_HEADER_LEN;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + UDP_HEADER_LEN + OLAF_HEADER_LEN;
        hdr.values[0].setInvalid();  hdr.values[1].setInvalid();  hdr.values[2].setInvalid();
        hdr.values[3].setInvalid();  hdr.values[4].setInvalid();  hdr.values[5].setInvalid();
        hdr.values[6].setInvalid();  hdr.values[7].setInvalid();  hdr.values[8].setInvalid();
        hdr.values[9].setInvalid();  hdr.values[10].setInvalid(); hdr.values[11].setInvalid();
        hdr.values[12].setInvalid(); hdr.values[13].setInvalid(); hdr.values[14].setInvalid();
        hdr.values[15].setInvalid(); hdr.values[16].setInvalid(); hdr.values[17].setInvalid();
        hdr.values[18].setInvalid(); hdr.values[19].setInvalid(); hdr.values[20].setInvalid();
        hdr.values[21].setInvalid(); hdr.values[22].setInvalid(); hdr.values[23].setInvalid();
        hdr.values[24].setInvalid(); hdr.values[25].setInvalid(); hdr.values[26].setInvalid();
        hdr.values[27].setInvalid(); hdr.values[28].setInvalid(); hdr.values[29].setInvalid();
        hdr.values[30].setInvalid(); hdr.values[31].setInvalid();
    }

    action values_valid() {
        hdr.values[0].setValid();  hdr.values[1].setValid();  hdr.values[2].setValid();
        hdr.values[3].setValid();  hdr.values[4].setValid();  hdr.values[5].setValid();
        hdr.values[6].setValid();  hdr.values[7].setValid();  hdr.values[8].setValid();
        hdr.values[9].setValid();  hdr.values[10].setValid(); hdr.values[11].setValid();
        hdr.values[12].setValid(); hdr.values[13].setValid(); hdr.values[14].setValid();
        hdr.values[15].setValid(); hdr.values[16].setValid(); hdr.values[17].setValid();
        hdr.values[18].setValid(); hdr.values[19].setValid(); hdr.values[20].setValid();
        hdr.values[21].setValid(); hdr.values[22].setValid(); hdr.values[23].setValid();
        hdr.values[24].setValid(); hdr.values[25].setValid(); hdr.values[26].setValid();
        hdr.values[27].setValid(); hdr.values[28].setValid(); hdr.values[29].setValid();
        hdr.values[30].setValid(); hdr.values[31].setValid();
    }

    /* Turn the packet into the answer to its sender (as v1model's OlafReply). On
     * Tofino an ACK for an UPDATE whose values were not parsed keeps them as trailing
     * payload (no truncate extern): the IPv4 and UDP lengths still say 36 bytes. */
    action bounce() {
        bit<48> mac = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = mac;
        bit<32> addr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = addr;
        bit<16> port = hdr.udp.dstPort;
        hdr.udp.dstPort = hdr.udp.srcPort;
        hdr.udp.srcPort = port;
        hdr.udp.checksum = 0;
        ig_tm_md.ucast_egress_port = md.port_in;
        hdr.bridge.setInvalid();
    }

    action congestion_difference() {
        md.cong_diff = md.util - md.cfg_congestion_threshold;
    }

    apply {
        olaf_config.apply();
        compute_key();
        bool forward = false;
        bool answer = false;
        if (hdr.bridge.isValid()) {
            md.port_in = hdr.bridge.orig_port;
        } else {
            md.port_in = ig_intr_md.ingress_port;
        }

        if (md.is_olaf == 0) {
            if (hdr.ipv4.isValid()) {
                forward = true;
            } else {
                drop();
            }
        } else if (ig_intr_md.resubmit_flag == 0) {
            /* ================= pass 1: classify, lock, read, decide ================= */
            bit<8> verdict = VERDICT_OK;
            if (!hdr.olaf.isValid()) {
                verdict = VERDICT_SHORT;
            } else if (md.len_diff[15:15] == 1 && hdr.udp.len[15:15] == 0) {
                /* udp.len < OLAF_MIN_UDP_LEN */
                verdict = VERDICT_SHORT;
            } else if (hdr.olaf.version != OLAF_VERSION) {
                verdict = VERDICT_BAD_VERSION;
            } else if (hdr.olaf.msg_type == 0 || hdr.olaf.msg_type > MSG_MODEL) {
                verdict = VERDICT_BAD_TYPE;
            } else if (hdr.olaf.msg_type == MSG_PULL) {
                if (hdr.olaf.num_values != 0) {
                    verdict = VERDICT_BAD_PULL;
                } else if (hdr.udp.len != OLAF_MIN_UDP_LEN) {
                    verdict = VERDICT_BAD_PULL;
                }
            } else if (hdr.olaf.msg_type == MSG_ACK || hdr.olaf.msg_type == MSG_DATA
                    || hdr.olaf.msg_type == MSG_EMPTY) {
                verdict = VERDICT_NOT_FROM_HOST;
            } else if (hdr.olaf.msg_type == MSG_UPDATE) {
                if (hdr.olaf.num_values != OLAF_TNA_V8) {
                    verdict = VERDICT_BAD_LENGTH;
                } else if (hdr.udp.len != OLAF_TNA_UPDATE_UDP_LEN) {
                    verdict = VERDICT_BAD_LENGTH;
                } else if (md.frac_xor != 0) {
                    verdict = VERDICT_BAD_FRAC_BITS;
                } else if (hdr.olaf.cluster_id[15:15] == 1) {
                    /* max_clusters < 2^15, so the room below is exact only for these */
                    verdict = VERDICT_CLUSTER_RANGE;
                } else if (md.cluster_room[15:15] == 1 || md.cluster_room == 0) {
                    verdict = VERDICT_CLUSTER_RANGE;
                } else if (hdr.olaf.block_id[15:15] == 1) {
                    verdict = VERDICT_BLOCK_RANGE;
                } else if (md.block_room[15:15] == 1 || md.block_room == 0) {
                    verdict = VERDICT_BLOCK_RANGE;
                }
            }

            if (verdict != VERDICT_OK) {
                if (verdict != VERDICT_SHORT && verdict != VERDICT_BAD_VERSION
                        && verdict != VERDICT_BAD_TYPE) {
                    msg_type_counter.count((bit<8>)hdr.olaf.msg_type);
                }
                outcome_counter.count(OUTCOME_DROPPED_INVALID);
                if (verdict == VERDICT_BAD_LENGTH || verdict == VERDICT_BAD_FRAC_BITS
                        || verdict == VERDICT_CLUSTER_RANGE || verdict == VERDICT_BLOCK_RANGE) {
                    /* Answered without touching state: one pass, lock not taken. */
                    answer_invalid();
                    md.occupied = occupied_read.execute(0);
                    md.active = active_read.execute(0);
                    answer = true;
                } else {
                    drop();
                }
            } else if (hdr.olaf.msg_type == MSG_MODEL) {
                msg_type_counter.count((bit<8>)hdr.olaf.msg_type);
                forward = true;
            } else {
                /* Reads have no side effects: they run whether or not the lock is free. */
                md.was_locked = lock_acquire.execute(0);
                md.occupied = occupied_read.execute(0);
                if (hdr.olaf.msg_type == MSG_UPDATE) {
                    md.entry = index_read.execute(index_hash.get({md.slot_key[19:16], md.slot_key[9:0]}));
                    md.slot_agg = agg_read.execute(md.entry);
                    md.slot_worker = worker_read.execute(md.entry);
                    md.slot_reward = reward_read.execute(md.entry);
                }
                compute_differences();
                compute_margins();
                if (md.was_locked != 0) {
                    /* Another operation is between its two passes: go round again. */
                    recirculate();
                } else {
                    msg_type_counter.count((bit<8>)hdr.olaf.msg_type);
                    if (hdr.olaf.msg_type == MSG_PULL) {
                        if (md.occupied == 0) {
                            decide(OP_EMPTY, OUTCOME_ENQUEUED, 0);
                        } else {
                            decide(OP_POP, OUTCOME_ENQUEUED, 0);
                        }
                    } else if (md.entry != 0 && md.cfg_mode == MODE_OLAF) {
                        if (md.slot_agg == 1 && md.worker_xor == 0) {
                            decide(OP_STORE, OUTCOME_REPLACED, md.entry);
                        } else if (md.up_margin[31:31] == 1 && md.down_margin[31:31] == 1) {
                            /* |u.reward - s.reward| < threshold */
                            if (md.down_diff[31:31] == 1) {
                                decide(OP_MERGE_UP, OUTCOME_MERGED, md.entry);
                            } else {
                                decide(OP_MERGE, OUTCOME_MERGED, md.entry);
                            }
                        } else if (md.down_diff[31:31] == 1) {
                            /* u.reward > s.reward */
                            decide(OP_STORE, OUTCOME_REPLACED, md.entry);
                        } else {
                            decide(OP_DROP, OUTCOME_DROPPED_REWARD, md.entry);
                        }
                    } else if (md.occ_diff[15:15] == 0) {
                        decide(OP_DROP, OUTCOME_DROPPED_FULL, 0);
                    } else {
                        decide(OP_APPEND, OUTCOME_ENQUEUED, 0);
                    }
                }
            }
        } else {
            /* ================= pass 2: apply the decision, answer ================= */
            /* An append or a pop learns its slot here; the others carry it from pass 1. */
            if (md.resub.op == OP_APPEND) {
                md.resub.slot = write_ptr_take.execute(0);
            } else if (md.resub.op == OP_POP) {
                md.resub.slot = read_ptr_take.execute(0);
            }
            if (md.resub.op == OP_POP) {
                md.slot_key = slot_key_read.execute(md.resub.slot);
            } else if (md.resub.op == OP_STORE || md.resub.op == OP_APPEND) {
                slot_key_write.execute(md.resub.slot);
            }

            if (md.resub.op == OP_APPEND) {
                index_set.execute(index_hash.get({md.slot_key[19:16], md.slot_key[9:0]}));
                md.cluster_slots = cluster_count_inc.execute(md.slot_key[31:16]);
                if (md.cluster_slots == 0) {
                    md.active = active_inc.execute(0);
                } else {
                    md.active = active_read.execute(0);
                }
                md.occupied = occupied_inc.execute(0);
            } else if (md.resub.op == OP_POP) {
                index_clear_if_popped.execute(index_hash.get({md.slot_key[19:16], md.slot_key[9:0]}));
                md.cluster_slots = cluster_count_dec.execute(md.slot_key[31:16]);
                if (md.cluster_slots == 0) {
                    md.active = active_dec.execute(0);
                } else {
                    md.active = active_read.execute(0);
                }
                md.occupied = occupied_dec.execute(0);
            } else {
                md.active = active_read.execute(0);
                md.occupied = occupied_read.execute(0);
            }

            if (md.resub.op == OP_STORE || md.resub.op == OP_APPEND) {
                agg_write.execute(md.resub.slot);
                worker_write.execute(md.resub.slot);
                reward_write.execute(md.resub.slot);
                seq_write.execute(md.resub.slot);
                model_version_write.execute(md.resub.slot);
                gen_time_write.execute(md.resub.slot);
                contributors_write.execute(md.resub.slot);
            } else if (md.resub.op == OP_MERGE || md.resub.op == OP_MERGE_UP) {
                agg_merge.execute(md.resub.slot);
                if (md.resub.op == OP_MERGE_UP) {
                    reward_write.execute(md.resub.slot);
                }
                model_version_min.execute(md.resub.slot);
                gen_time_min.execute(md.resub.slot);
                contributors_or.execute(md.resub.slot);
            } else if (md.resub.op == OP_POP) {
                hdr.olaf.agg_count = agg_read.execute(md.resub.slot);
                hdr.olaf.worker_id = worker_read.execute(md.resub.slot);
                hdr.olaf.reward = reward_read.execute(md.resub.slot);
                hdr.olaf.seq = seq_read.execute(md.resub.slot);
                hdr.olaf.model_version = model_version_read.execute(md.resub.slot);
                hdr.olaf.gen_time_us = gen_time_read.execute(md.resub.slot);
                hdr.olaf.contributors = contributors_read.execute(md.resub.slot);
            }

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

            lock_release.execute(0);

            if (md.resub.op == OP_POP) {
                data_from_key();
                answer_data();
            } else if (md.resub.op == OP_EMPTY) {
                answer_empty();
            } else {
                answer_ack();
                outcome_counter.count(md.resub.outcome);
            }
            answer = true;
        }

        if (answer) {
            /* Feedback after the operation. */
            util_lookup.apply();
            congestion_difference();
            if (md.cong_diff[15:15] == 0) {
                hdr.olaf.flags = FLAG_CONGESTED;
            } else {
                hdr.olaf.flags = 0;
            }
            if (md.active[15:8] != 0) {
                hdr.olaf.active_clusters = 255;
            } else {
                hdr.olaf.active_clusters = md.active[7:0];
            }
            bounce();
        }
        if (forward) {
            hdr.bridge.setInvalid();
            ipv4_lpm.apply();
        }
    }
}

#endif
