/* Headers and metadata. The OLAF header is worker_transport.protocol.HEADER_FIELDS,
 * field for field (tests/test_p4_consistency.py parses this file). */
#ifndef OLAF_HEADERS_P4
#define OLAF_HEADERS_P4

header ethernet_t {
    bit<48> dstAddr;
    bit<48> srcAddr;
    bit<16> etherType;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> totalLen;
    bit<16> identification;
    bit<3>  flags;
    bit<13> fragOffset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdrChecksum;
    bit<32> srcAddr;
    bit<32> dstAddr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> len;
    bit<16> checksum;
}

header olaf_t {
    bit<4>  version;
    bit<4>  msg_type;
    bit<8>  flags;
    bit<16> cluster_id;
    bit<16> worker_id;
    bit<16> block_id;
    bit<16> agg_count;
    bit<8>  outcome;
    bit<8>  active_clusters;
    bit<8>  queue_util;
    bit<8>  num_values;
    bit<8>  frac_bits;
    bit<8>  reserved;
    bit<32> seq;
    bit<32> model_version;
    int<32> reward;
    bit<32> gen_time_us;
    bit<32> contributors;
}

/* One big-endian signed 32-bit fixed-point value. */
header olaf_value_t {
    int<32> value;
}

struct headers_t {
    ethernet_t           ethernet;
    ipv4_t               ipv4;
    udp_t                udp;
    olaf_t               olaf;
    olaf_value_t[OLAF_V] values;
}

struct metadata_t {
    /* parser */
    bit<1>  is_olaf;        /* UDP with port 20300 on either side */
    bit<8>  values_left;
    /* olaf_config, as the controller set it (clamped to the compiled sizes) */
    bit<8>  cfg_mode;
    int<32> cfg_threshold;
    bit<8>  cfg_congestion_threshold;
    bit<8>  cfg_frac_bits;
    bit<16> cfg_capacity;
    bit<16> cfg_max_clusters;
    bit<16> cfg_max_blocks;
    bit<16> cfg_cluster_quota;
    bit<8>  cfg_feedback;   /* FEEDBACK_REV2 or (anything else) revision 3 */
    /* ingress -> egress */
    bit<1>  short_reply;    /* ACK or EMPTY: cut the frame after the OLAF header */
    bit<16> drop_prob;
}

#endif
