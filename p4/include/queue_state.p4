/* Fragment of OlafIngress: the OlafQueue's state in registers (DESIGN.md section 3).
 *
 * Slot s of the ring holds its metadata at index s of each reg_slot_* register and
 * its values at reg_values[(s << OLAF_V_SHIFT) + i]. reg_index[cluster << 10 | block]
 * holds 1 + the newest slot queued for that key, or 0 when none is.
 *
 * bmv2 keeps every register cell as an unsigned number (behavioral-model
 * Register::export_bytes masks) and register_read hands that number to the destination
 * unchanged, so a register<int<32>> read yields e.g. 4294967295 for -1. reg_values,
 * which feeds signed arithmetic (|+|), is therefore bit<32>: the type checker forces
 * the one (int<32>) cast that makes a cell signed. reg_slot_reward stays int<32> (its
 * P4Runtime type is the header field's): every read of it is either deparsed (bytes
 * are right) or cast to bit<32> at once for the order-preserving key, so its number
 * is never used as a signed one. */

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

    register<bit<32>>(OLAF_VALUE_SLOTS) reg_values;
