/* OlafIngress for TNA: the OlafQueue of DESIGN.md section 3 in two passes.
 *
 * Tofino reaches each register once per pass, through one RegisterAction, in the
 * one stage that holds it; a register index must be a field, a constant or a Hash
 * output; an action runs in one stage (nothing computed and used again in it); a
 * table or `if` compares a field with constants, not two fields. The rules need the
 * index entry before the slot and the slot before the decision, then write to all of
 * them. So:
 *   pass 1  reads occupied, the ring pointers, the index entry, the slot's agg_count,
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
 *   stage 0  occupied, index (pass 1: from the header), cluster count, seq
 *   stage 1  agg_count, worker, reward (pass 1: at the index entry), read_ptr
 *   stage 2  slot key (pass 1: at read_ptr), write_ptr, lock, model_version
 *   stage 3  active clusters (after the cluster count), gen_time, contributors, value 0
 *   4..11    values 1..31 (values.p4)
 * and pass 1 decides in stage 4 (entry -> slot fields -> differences -> margins). */
#ifndef OLAF_TNA_QUEUE_P4
#define OLAF_TNA_QUEUE_P4

control OlafIngress(inout headers_t hdr,
                    inout ingress_metadata_t md,
                    in ingress_intrinsic_metadata_t ig_intr_md,
                    in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                    inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                    inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    /* ---- configuration (as v1model's olaf_config). The range and frac_bits checks
     * are differences taken here against the action's data, matched by `validate`. */
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
    }

    @stage(0) table olaf_config {
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
    /* bf-p4c: every get() of one Hash instance must hash the same fields. */
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) index_hash;
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) resub_index_hash;

    /* ---- classification: the checks of dataplane/queue.py in its order, first the
     * header's (one ternary table in stage 0), then the configuration's (stage 1) ---- */
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

    /* Ring pointers hold slot numbers 1..capacity. Pass 1 reads them (the slot an
     * append or a pop will use), pass 2 advances the one its op moves. */
    Register<bit<16>, bit<1>>(1, 1) reg_write_ptr;
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_write_ptr) write_ptr_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_write_ptr) write_ptr_advance = {
        void apply(inout bit<16> v) {
            if (v == md.cfg_capacity) { v = 1; } else { v = v + 1; }
        }
    };

    Register<bit<16>, bit<1>>(1, 1) reg_read_ptr;
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_read_ptr) read_ptr_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<1>, bit<16>>(reg_read_ptr) read_ptr_advance = {
        void apply(inout bit<16> v) {
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

    /* At most OLAF_MAX_CLUSTERS (16) clusters can be active (the index and the cluster
     * counts have 16 cells), so the 8-bit count never needs the header's saturation at 255
     * and goes into the header as it is. */
    Register<bit<8>, bit<1>>(1, 0) reg_active_clusters;
    RegisterAction<bit<8>, bit<1>, bit<8>>(reg_active_clusters) active_read = {
        void apply(inout bit<8> v, out bit<8> rv) { rv = v; }
    };
    RegisterAction<bit<8>, bit<1>, bit<8>>(reg_active_clusters) active_inc = {
        void apply(inout bit<8> v, out bit<8> rv) { v = v + 1; rv = v; }
    };
    RegisterAction<bit<8>, bit<1>, bit<8>>(reg_active_clusters) active_dec = {
        void apply(inout bit<8> v, out bit<8> rv) { v = v - 1; rv = v; }
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

    /* ================= the register tables of pass 1: reads only ================= */
    action read_occupied() {
        md.occupied = occupied_read.execute(0);
    }
    @stage(0) table occupied_pass1 {
        actions = { read_occupied; }
        size = 1;
        default_action = read_occupied();
    }

    action read_index() {
        md.entry = index_read.execute(index_hash.get({hdr.olaf.cluster_id[3:0], hdr.olaf.block_id[9:0]}));
    }
    @stage(0) table index_pass1 {
        actions = { read_index; }
        size = 1;
        default_action = read_index();
    }

    action read_slot_agg() {
        md.slot_agg = agg_read.execute(md.entry);
    }
    @stage(1) table agg_pass1 {
        actions = { read_slot_agg; }
        size = 1;
        default_action = read_slot_agg();
    }

    action read_slot_worker() {
        md.slot_worker = worker_read.execute(md.entry);
    }
    @stage(1) table worker_pass1 {
        actions = { read_slot_worker; }
        size = 1;
        default_action = read_slot_worker();
    }

    action read_slot_reward() {
        md.slot_reward = reward_read.execute(md.entry);
    }
    @stage(1) table reward_pass1 {
        actions = { read_slot_reward; }
        size = 1;
        default_action = read_slot_reward();
    }

    action read_read_ptr() {
        md.read_slot = read_ptr_read.execute(0);
    }
    @stage(1) table read_ptr_pass1 {
        actions = { read_read_ptr; }
        size = 1;
        default_action = read_read_ptr();
    }

    action read_write_ptr() {
        md.write_slot = write_ptr_read.execute(0);
    }
    @stage(2) table write_ptr_pass1 {
        actions = { read_write_ptr; }
        size = 1;
        default_action = read_write_ptr();
    }

    action read_slot_key() {
        md.slot_key = slot_key_read.execute(md.read_slot);
    }
    @stage(2) table slot_key_pass1 {
        actions = { read_slot_key; }
        size = 1;
        default_action = read_slot_key();
    }

    /* Only a valid UPDATE or PULL takes the lock. Keyed on what decides it, rather than
     * behind `if`s, so that it can sit in the stage right after `validate`. */
    action acquire_lock() {
        md.was_locked = lock_acquire.execute(0);
    }
    @stage(2) table lock_pass1 {
        key = {
            md.verdict: exact;
            hdr.olaf.msg_type: exact;
        }
        actions = { acquire_lock; NoAction; }
        const entries = {
            (VERDICT_OK, MSG_UPDATE): acquire_lock();
            (VERDICT_OK, MSG_PULL): acquire_lock();
        }
        size = 2;
        default_action = NoAction();
    }

    action read_active() {
        hdr.olaf.active_clusters = active_read.execute(0);
    }

    /* ============ the register tables of pass 2: one per Register, keyed by the op ============ */
    action occupied_up() {
        md.occupied = occupied_inc.execute(0);
    }
    action occupied_down() {
        md.occupied = occupied_dec.execute(0);
    }
    @stage(0) table occupied_pass2 {
        key = { md.resub.op: exact; }
        actions = { occupied_up; occupied_down; read_occupied; }
        const entries = {
            OP_APPEND: occupied_up();
            OP_POP: occupied_down();
        }
        size = 4;
        default_action = read_occupied();
    }

    action set_index() {
        index_set.execute(resub_index_hash.get({md.resub.cluster[3:0], md.resub.block[9:0]}));
    }
    action clear_index() {
        index_clear_if_popped.execute(resub_index_hash.get({md.resub.cluster[3:0], md.resub.block[9:0]}));
    }
    @stage(0) table index_pass2 {
        key = { md.resub.op: exact; }
        actions = { set_index; clear_index; NoAction; }
        const entries = {
            OP_APPEND: set_index();
            OP_POP: clear_index();
        }
        size = 4;
        default_action = NoAction();
    }

    action count_cluster_slot() {
        md.cluster_slots = cluster_count_inc.execute(md.resub.cluster);
    }
    action uncount_cluster_slot() {
        md.cluster_slots = cluster_count_dec.execute(md.resub.cluster);
    }
    @stage(0) table cluster_count_pass2 {
        key = { md.resub.op: exact; }
        actions = { count_cluster_slot; uncount_cluster_slot; NoAction; }
        const entries = {
            OP_APPEND: count_cluster_slot();
            OP_POP: uncount_cluster_slot();
        }
        size = 4;
        default_action = NoAction();
    }

    action store_seq() {
        seq_write.execute(md.resub.slot);
    }
    action load_seq() {
        hdr.olaf.seq = seq_read.execute(md.resub.slot);
    }
    @stage(0) table seq_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_seq; load_seq; NoAction; }
        const entries = {
            OP_STORE: store_seq();
            OP_APPEND: store_seq();
            OP_POP: load_seq();
        }
        size = 4;
        default_action = NoAction();
    }

    action store_agg() {
        agg_write.execute(md.resub.slot);
    }
    action merge_agg() {
        agg_merge.execute(md.resub.slot);
    }
    action load_agg() {
        hdr.olaf.agg_count = agg_read.execute(md.resub.slot);
    }
    @stage(1) table agg_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_agg; merge_agg; load_agg; NoAction; }
        const entries = {
            OP_STORE: store_agg();
            OP_APPEND: store_agg();
            OP_MERGE: merge_agg();
            OP_MERGE_UP: merge_agg();
            OP_POP: load_agg();
        }
        size = 8;
        default_action = NoAction();
    }

    action store_worker() {
        worker_write.execute(md.resub.slot);
    }
    action load_worker() {
        hdr.olaf.worker_id = worker_read.execute(md.resub.slot);
    }
    @stage(1) table worker_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_worker; load_worker; NoAction; }
        const entries = {
            OP_STORE: store_worker();
            OP_APPEND: store_worker();
            OP_POP: load_worker();
        }
        size = 4;
        default_action = NoAction();
    }

    action store_reward() {
        reward_write.execute(md.resub.slot);
    }
    action load_reward() {
        hdr.olaf.reward = reward_read.execute(md.resub.slot);
    }
    @stage(1) table reward_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_reward; load_reward; NoAction; }
        const entries = {
            OP_STORE: store_reward();
            OP_APPEND: store_reward();
            OP_MERGE_UP: store_reward();
            OP_POP: load_reward();
        }
        size = 4;
        default_action = NoAction();
    }

    action advance_read_ptr() {
        read_ptr_advance.execute(0);
    }
    @stage(1) table read_ptr_pass2 {
        key = { md.resub.op: exact; }
        actions = { advance_read_ptr; NoAction; }
        const entries = {
            OP_POP: advance_read_ptr();
        }
        size = 2;
        default_action = NoAction();
    }

    action store_slot_key() {
        slot_key_write.execute(md.resub.slot);
    }
    @stage(2) table slot_key_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_slot_key; NoAction; }
        const entries = {
            OP_STORE: store_slot_key();
            OP_APPEND: store_slot_key();
        }
        size = 2;
        default_action = NoAction();
    }

    action advance_write_ptr() {
        write_ptr_advance.execute(0);
    }
    @stage(2) table write_ptr_pass2 {
        key = { md.resub.op: exact; }
        actions = { advance_write_ptr; NoAction; }
        const entries = {
            OP_APPEND: advance_write_ptr();
        }
        size = 2;
        default_action = NoAction();
    }

    action release_lock() {
        lock_release.execute(0);
    }
    /* An invalid UPDATE's answer passes here without having taken the lock. */
    @stage(2) table lock_pass2 {
        key = { md.resub.op: exact; }
        actions = { release_lock; NoAction; }
        const entries = {
            OP_INVALID: NoAction();
        }
        size = 2;
        default_action = release_lock();
    }

    action store_model_version() {
        model_version_write.execute(md.resub.slot);
    }
    action min_model_version() {
        model_version_min.execute(md.resub.slot);
    }
    action load_model_version() {
        hdr.olaf.model_version = model_version_read.execute(md.resub.slot);
    }
    @stage(2) table model_version_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_model_version; min_model_version; load_model_version; NoAction; }
        const entries = {
            OP_STORE: store_model_version();
            OP_APPEND: store_model_version();
            OP_MERGE: min_model_version();
            OP_MERGE_UP: min_model_version();
            OP_POP: load_model_version();
        }
        size = 8;
        default_action = NoAction();
    }

    /* A cluster becomes active with its first queued slot and inactive with its last. */
    action activate_cluster() {
        hdr.olaf.active_clusters = active_inc.execute(0);
    }
    action deactivate_cluster() {
        hdr.olaf.active_clusters = active_dec.execute(0);
    }
    @stage(3) table active_pass2 {
        key = {
            md.resub.op: exact;
            md.cluster_slots: exact;
        }
        actions = { activate_cluster; deactivate_cluster; read_active; }
        const entries = {
            (OP_APPEND, 0): activate_cluster();
            (OP_POP, 0): deactivate_cluster();
        }
        size = 4;
        default_action = read_active();
    }

    action store_gen_time() {
        gen_time_write.execute(md.resub.slot);
    }
    action min_gen_time() {
        gen_time_min.execute(md.resub.slot);
    }
    action load_gen_time() {
        hdr.olaf.gen_time_us = gen_time_read.execute(md.resub.slot);
    }
    @stage(3) table gen_time_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_gen_time; min_gen_time; load_gen_time; NoAction; }
        const entries = {
            OP_STORE: store_gen_time();
            OP_APPEND: store_gen_time();
            OP_MERGE: min_gen_time();
            OP_MERGE_UP: min_gen_time();
            OP_POP: load_gen_time();
        }
        size = 8;
        default_action = NoAction();
    }

    action store_contributors() {
        contributors_write.execute(md.resub.slot);
    }
    action or_contributors() {
        contributors_or.execute(md.resub.slot);
    }
    action load_contributors() {
        hdr.olaf.contributors = contributors_read.execute(md.resub.slot);
    }
    @stage(3) table contributors_pass2 {
        key = { md.resub.op: exact; }
        actions = { store_contributors; or_contributors; load_contributors; NoAction; }
        const entries = {
            OP_STORE: store_contributors();
            OP_APPEND: store_contributors();
            OP_MERGE: or_contributors();
            OP_MERGE_UP: or_contributors();
            OP_POP: load_contributors();
        }
        size = 8;
        default_action = NoAction();
    }

    /* ---- one-stage actions on values computed in earlier stages ---- */
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
        }
        actions = { decide_on_entry; decide_append; decide_pop; decide_empty; recirculate; }
        const entries = {
            /* PULL: EMPTY when nothing is queued, else DATA */
            (0, MSG_PULL, 0, _, _, _, _, _, _, _, _): decide_empty();
            (0, MSG_PULL, _, _, _, _, _, _, _, _, _): decide_pop();
            /* UPDATE without a slot for its key: append unless full */
            (0, MSG_UPDATE, _, 0, _, _, _, _, _, _, 0): decide_append(OP_DROP, OUTCOME_DROPPED_FULL);
            (0, MSG_UPDATE, _, 0, _, _, _, _, _, _, 1): decide_append(OP_APPEND, OUTCOME_ENQUEUED);
            /* OLAF mode, slot s: 1. same single worker; 2. |u - s| < threshold; 3. u > s */
            (0, MSG_UPDATE, _, _, MODE_OLAF, 1, 0, _, _, _, _): decide_on_entry(OP_STORE, OUTCOME_REPLACED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, 1, 1, 1, _): decide_on_entry(OP_MERGE_UP, OUTCOME_MERGED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, 1, 1, _, _): decide_on_entry(OP_MERGE, OUTCOME_MERGED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, _, _, 1, _): decide_on_entry(OP_STORE, OUTCOME_REPLACED);
            (0, MSG_UPDATE, _, _, MODE_OLAF, _, _, _, _, _, _):
                decide_on_entry(OP_DROP, OUTCOME_DROPPED_REWARD);
            /* FIFO (any other mode): append unless full, whatever the index says */
            (0, MSG_UPDATE, _, _, _, _, _, _, _, _, 0): decide_append(OP_DROP, OUTCOME_DROPPED_FULL);
            (0, MSG_UPDATE, _, _, _, _, _, _, _, _, 1): decide_append(OP_APPEND, OUTCOME_ENQUEUED);
        }
        size = 16;
        default_action = recirculate();
    }

    /* ---- answers ---- */
    action data_from_key() {
        hdr.olaf.cluster_id = md.resub.cluster;
        hdr.olaf.block_id = md.resub.block;
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
        hdr.olaf.queue_util = md.util[7:0];
    }

    action congestion_difference() {
        md.cong_diff = md.util - md.cfg_congestion_threshold;
    }

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
