/* Fragment of OlafIngress: the controller's settings (DESIGN.md section 3).
 *
 * A keyless table whose default action carries the configuration. The default is
 * not const, so the controller replaces it at run time (P4Runtime: modify the
 * table's default entry; simple_switch_CLI: table_set_default). Its arguments equal
 * dataplane.queue.QueueConfig(): OLAF mode, threshold INT32_MAX, congestion 192,
 * 16 fraction bits, 64 slots, 16 clusters, 1024 blocks, cluster quota 64 (= capacity,
 * no limit), feedback revision 3. Each setting added later goes last (cluster_quota, then
 * feedback), so that the parameters before it keep their P4Runtime ids. */

    action set_config(bit<8> mode,
                      int<32> threshold,
                      bit<8> congestion_threshold,
                      bit<8> frac_bits,
                      bit<16> capacity,
                      bit<16> max_clusters,
                      bit<16> max_blocks,
                      bit<16> cluster_quota,
                      bit<8> feedback) {
        meta.cfg_mode = mode;
        meta.cfg_threshold = threshold;
        meta.cfg_congestion_threshold = congestion_threshold;
        meta.cfg_frac_bits = frac_bits;
        meta.cfg_capacity = capacity;
        meta.cfg_max_clusters = max_clusters;
        meta.cfg_max_blocks = max_blocks;
        meta.cfg_cluster_quota = cluster_quota;
        meta.cfg_feedback = feedback;
    }

    table olaf_config {
        actions = { set_config; }
        default_action = set_config(OLAF_DEFAULT_MODE,
                                    OLAF_DEFAULT_THRESHOLD,
                                    OLAF_DEFAULT_CONGESTION_THRESHOLD,
                                    OLAF_DEFAULT_FRAC_BITS,
                                    OLAF_DEFAULT_CAPACITY,
                                    OLAF_DEFAULT_MAX_CLUSTERS,
                                    OLAF_DEFAULT_MAX_BLOCKS,
                                    OLAF_DEFAULT_CLUSTER_QUOTA,
                                    OLAF_DEFAULT_FEEDBACK);
    }
