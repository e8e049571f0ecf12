/* Fragment of OlafIngress (TNA): the controller's settings, as v1model's olaf_config
 * (cluster_quota, then feedback, last, as there). Its action also takes the differences that `validate`
 * (classify.p4) matches: the frac_bits XOR and the rooms below max_clusters and
 * max_blocks. */

    action set_config(bit<8> mode,
                      int<32> threshold,
                      bit<8> congestion_threshold,
                      bit<8> frac_bits,
                      bit<16> capacity,
                      bit<16> max_clusters,
                      bit<16> max_blocks,
                      bit<16> cluster_quota,
                      bit<8> feedback) {
        md.cfg_mode = mode;
        md.cfg_threshold = threshold;
        md.cfg_congestion_threshold = (bit<16>)congestion_threshold;
        md.cfg_frac_bits = frac_bits;
        md.cfg_capacity = capacity;
        md.cfg_cluster_quota = cluster_quota;
        md.cfg_feedback = feedback;
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
                                    OLAF_DEFAULT_MAX_BLOCKS,
                                    OLAF_DEFAULT_CLUSTER_QUOTA,
                                    OLAF_DEFAULT_FEEDBACK);
    }
