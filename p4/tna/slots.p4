/* Fragment of OlafIngress (TNA): the slots, one cell per slot number in one Register per
 * field (slot key, agg_count, worker, reward, seq, model_version, gen_time,
 * contributors), and the OLAF_TNA_V value controls of values.p4. */

    /* IDENTITY: cluster_id ++ block_id, the slot key, without an action. */
    Hash<bit<32>>(HashAlgorithm_t.IDENTITY) slot_key_hash;

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
