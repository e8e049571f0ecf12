/* Fragment of OlafIngress: the OlafQueue's state in registers (DESIGN.md section 3).
 *
 * Slot s of the ring holds its metadata at index s of each reg_slot_* register and
 * its values at reg_values[(s << OLAF_V_SHIFT) + i]. reg_index[cluster << 10 | block]
 * holds 1 + the newest slot queued for that key, or 0 when none is. */

    register<bit<16>>(1) reg_occupied;
    register<bit<16>>(1) reg_read_ptr;
    register<bit<16>>(1) reg_write_ptr;
    register<bit<16>>(1) reg_active_clusters;
    register<bit<16>>(OLAF_MAX_CLUSTERS) reg_cluster_count;
    register<bit<16>>(OLAF_INDEX_SIZE) reg_index;

    register<bit<16>>(OLAF_CAPACITY) reg_slot_cluster_id;
    register<bit<16>>(OLAF_CAPACITY) reg_slot_worker_id;
    register<bit<16>>(OLAF_CAPACITY) reg_slot_block_id;
    register<bit<16>>(OLAF_CAPACITY) reg_slot_agg_count;
    register<bit<32>>(OLAF_CAPACITY) reg_slot_seq;
    register<bit<32>>(OLAF_CAPACITY) reg_slot_model_version;
    register<int<32>>(OLAF_CAPACITY) reg_slot_reward;
    register<bit<32>>(OLAF_CAPACITY) reg_slot_gen_time_us;
    register<bit<32>>(OLAF_CAPACITY) reg_slot_contributors;

    register<int<32>>(OLAF_VALUE_SLOTS) reg_values;
