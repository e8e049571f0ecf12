/* Fragment of OlafIngress (TNA): the queue's own state, one Register (one stateful ALU)
 * each: the lock, the occupancy, the ring pointers, the [cluster][block] -> slot index
 * and the per-cluster and active-cluster counts. */

    /* bf-p4c: every get() of one Hash instance must hash the same fields, so the index
     * has one IDENTITY hash per key: the header's (pass 1), the resubmit header's (pass 2). */
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) index_hash;
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) resub_index_hash;
    /* Pass 1's cluster count index: cluster_id[3:0] (16 cells), so that an out-of-range
     * cluster_id (refused later by `validate`) still reads a cell; pass 2 uses the
     * resubmitted cluster, always in range. */
    Hash<bit<16>>(HashAlgorithm_t.IDENTITY) cluster_hash;

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
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_cluster_count) cluster_count_read = {
        void apply(inout bit<16> v, out bit<16> rv) { rv = v; }
    };
    RegisterAction<bit<16>, bit<16>, bit<16>>(reg_cluster_count) cluster_count_inc = {
        void apply(inout bit<16> v, out bit<16> after) { v = v + 1; after = v; }
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
