/* TNA headers and metadata. The OLAF header is the v1model one, field for field
 * (tests/test_p4_consistency.py checks both against worker_transport/protocol.py). */
#ifndef OLAF_TNA_HEADERS_P4
#define OLAF_TNA_HEADERS_P4

/* V on Tofino: 32 values, one 32-bit Register per value (see p4/README.md, "TNA"):
 * with one register access per value per pass, a DATA reads and a merge adds all
 * values in the second pass. 32 value registers + 15 queue-state registers = 47 of
 * Tofino 1's 48 stateful ALUs (12 stages x 4). */
#define OLAF_TNA_V 32
const bit<8>  OLAF_TNA_V8 = 32;
const bit<16> OLAF_TNA_UPDATE_UDP_LEN = 172;  /* UDP header + OLAF header + 4 * 32 */

/* Recirculation port of pipe 0 on Tofino 1: where a packet that finds the queue
 * locked goes round again. */
const PortId_t OLAF_RECIRC_PORT = 68;

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
 * header (Tofino 1's limit). */
header olaf_resubmit_t {
    bit<8>  marker;   /* OLAF_RESUBMIT_MARKER */
    bit<8>  op;       /* OP_* */
    bit<8>  outcome;  /* the ACK's outcome for UPDATE ops */
    bit<8>  pad0;
    bit<16> slot;     /* the slot the op works on */
    bit<16> pad1;
}

const bit<8> OLAF_RESUBMIT_MARKER = 0xA5;
const bit<3> RESUBMIT_TYPE_OLAF = 1;

const bit<8> OP_NONE = 0;
const bit<8> OP_STORE = 1;    /* REPLACED: the slot takes the update */
const bit<8> OP_MERGE = 2;    /* MERGED */
const bit<8> OP_APPEND = 3;   /* ENQUEUED: store at write_ptr, index, counts */
const bit<8> OP_POP = 4;      /* PULL with a queued slot: DATA */
const bit<8> OP_EMPTY = 5;    /* PULL on an empty queue: EMPTY */
const bit<8> OP_DROP = 6;     /* DROPPED_REWARD or DROPPED_FULL: ACK only */

struct ingress_metadata_t {
    olaf_resubmit_t resub;
    bit<1>  is_olaf;
    bit<8>  cfg_mode;
    int<32> cfg_threshold;
    bit<8>  cfg_congestion_threshold;
    bit<8>  cfg_frac_bits;
    bit<16> cfg_capacity;
    bit<16> cfg_last_slot;    /* capacity - 1: where the ring pointers wrap */
    bit<16> cfg_max_clusters;
    bit<16> cfg_max_blocks;
    bit<32> slot_key;         /* cluster_id ++ block_id of the slot being stored */
    bit<16> occupied;
    bit<16> active;
    bit<8>  util;
}

struct egress_metadata_t {
    bit<16> drop_prob;
}

struct egress_headers_t {
}

#endif
