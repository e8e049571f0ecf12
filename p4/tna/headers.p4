/* TNA headers and metadata. The OLAF header is the v1model one, field for field
 * (tests/test_p4_consistency.py checks both against worker_transport/protocol.py). */
#ifndef OLAF_TNA_HEADERS_P4
#define OLAF_TNA_HEADERS_P4

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

header olaf_value_t {
    int<32> value;
}

/* Prepended to a packet that recirculates because the queue was locked, so that its
 * answer can still go back out of the port it arrived on. */
header olaf_bridge_t {
    bit<7>   pad;
    PortId_t orig_port;
}

struct headers_t {
    olaf_bridge_t            bridge;
    ethernet_t               ethernet;
    ipv4_t                   ipv4;
    udp_t                    udp;
    olaf_t                   olaf;
    olaf_value_t[OLAF_TNA_V] values;
}

/* The decision of the first pass, carried to the second in the 64-bit resubmit
 * header (Tofino 1's limit). The key travels with it so that the second pass finds the
 * index cell and the cluster count of a popped slot without reading the slot first. */
header olaf_resubmit_t {
    bit<8>  op;       /* OP_* */
    bit<8>  outcome;  /* the ACK's outcome for UPDATE ops */
    bit<16> slot;     /* the slot the op works on */
    bit<16> cluster;  /* the slot's cluster_id */
    bit<16> block;    /* the slot's block_id */
}


/* Signed differences whose sign bits stand in for comparisons (Tofino's gateways
 * compare a field with a constant, not two fields): each is computed in an earlier
 * table than the one that matches on its top bit. */
struct ingress_metadata_t {
    olaf_resubmit_t resub;
    bit<1>   is_olaf;
    PortId_t port_in;          /* the port the packet first arrived on */
    bit<8>   verdict;          /* VERDICT_*: from the header (classify), then the config (validate) */
    bit<8>   cfg_mode;
    int<32>  cfg_threshold;
    bit<16>  cfg_congestion_threshold;
    bit<8>   cfg_frac_bits;
    bit<16>  cfg_capacity;
    bit<16>  cfg_cluster_quota;
    bit<8>   cfg_feedback;     /* FEEDBACK_REV2, or (anything else) revision 3 */
    bit<8>   frac_xor;         /* frac_bits ^ configured: 0 when they agree */
    bit<16>  cluster_room;     /* max_clusters - cluster_id: in 1..2^15-1 when in range */
    bit<16>  block_room;       /* max_blocks - block_id: in 1..2^15-1 when in range */
    bit<32>  slot_key;         /* cluster_id ++ block_id: the popped slot's (pass 1), the update's (pass 2) */
    bit<8>   was_locked;
    bit<16>  occupied;
    bit<16>  occ_diff;         /* occupied - capacity: bit 15 set when not full */
    bit<16>  quota_diff;       /* cluster_slots - cluster_quota: bit 15 set when below the quota */
    bit<16>  write_slot;       /* write_ptr as pass 1 read it: an append's slot */
    bit<16>  read_slot;        /* read_ptr as pass 1 read it: a pop's slot */
    bit<16>  entry;            /* index entry: the slot, or 0 */
    bit<16>  slot_agg;
    bit<16>  slot_worker;
    int<32>  slot_reward;
    bit<16>  worker_xor;       /* slot worker ^ update worker: 0 when the same */
    int<32>  up_diff;          /* u.reward |-| s.reward (signed, saturating) */
    int<32>  down_diff;        /* s.reward |-| u.reward: negative when u.reward > s.reward */
    int<32>  up_margin;        /* up_diff |-| threshold: negative when up_diff < threshold */
    int<32>  down_margin;      /* down_diff |-| threshold */
    bit<16>  cluster_slots;    /* the cluster's queued slots: the update's cluster's before
                                * the operation (pass 1), after it (pass 2; held_c on an ACK) */
    bit<16>  util;             /* floor(255 * occupied / capacity), after the operation */
    bit<16>  cong_diff;        /* util - congestion threshold: bit 15 clear when congested */
    /* Revision 3's queue_util of an ACK (DESIGN.md section 3, Feedback), with h = held_c,
     * o = occupied, C = capacity, Q = cluster_quota after the operation. */
    bit<16>  quota_room;       /* Q - h: bit 15 set when the cluster holds more than its quota */
    bit<16>  free;             /* C - o */
    bit<16>  own_used;         /* o - h */
    bit<16>  cap_unheld;       /* C - h */
    bit<16>  cap_unquota;      /* C - Q */
    bit<16>  room_diff;        /* (C - o) - (Q - h): bit 15 set when the free slots are fewer */
    bit<16>  fifo_used;        /* C - (Q - h) */
    bit<16>  used;             /* C - room_c, or o where the feedback is global */
    bit<16>  share;            /* floor(255 * used / C): queue_util */
}

struct egress_metadata_t {
    bit<16> drop_prob;
    bit<16> draw;
    bit<16> drop_margin;       /* drop_prob |-| draw: non-zero when draw < drop_prob */
}

struct egress_headers_t {
}

#endif
