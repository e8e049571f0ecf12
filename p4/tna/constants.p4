/* Every TNA-only constant lives here; the wire constants, compiled sizes and default
 * configuration come from ../include/constants.p4 (shared with v1model). */
#ifndef OLAF_TNA_CONSTANTS_P4
#define OLAF_TNA_CONSTANTS_P4

/* V on Tofino: 32 values, one 32-bit Register (one stateful ALU) per value: a DATA
 * reads and a merge adds all values in the second pass. 32 value registers + 15
 * queue-state registers = 47 of Tofino 1's 48 stateful ALUs (12 stages x 4), which is
 * what limits V (p4/README.md, "TNA"). */
#define OLAF_TNA_V 32
const bit<8>  OLAF_TNA_V8 = 32;
const bit<16> OLAF_TNA_UPDATE_UDP_LEN = 172;  /* UDP header + OLAF header + 4 * 32 */

/* Slots are numbered 1..capacity so that an index entry (0 = no slot) is itself the
 * slot number: a Register index must be a plain field, with no "- 1" in front of it.
 * Cell 0 of every slot register is never used. */
#define OLAF_TNA_SLOT_CELLS 65                 /* OLAF_CAPACITY + 1 */

/* The index is keyed by cluster_id[3:0] ++ block_id[9:0] (an IDENTITY hash): 16 clusters
 * x 1024 blocks, OLAF_INDEX_SIZE cells. */

/* Recirculation port of pipe 0 on Tofino 1: where a packet that finds the queue
 * locked goes round again. */
const PortId_t OLAF_RECIRC_PORT = 68;

/* Resubmit type of the first pass's decision (olaf_resubmit_t, headers.p4). */
const bit<3> RESUBMIT_TYPE_OLAF = 1;

/* The ops of the resubmit header: what pass 2 does to each register. */
const bit<8> OP_STORE = 1;    /* REPLACED: the slot takes the update */
const bit<8> OP_MERGE = 2;    /* MERGED, the slot's reward stays (it is the max) */
const bit<8> OP_APPEND = 3;   /* ENQUEUED: store at write_ptr, index, counts */
const bit<8> OP_POP = 4;      /* PULL with a queued slot: DATA */
const bit<8> OP_EMPTY = 5;    /* PULL on an empty queue: EMPTY */
const bit<8> OP_DROP = 6;     /* DROPPED_REWARD or DROPPED_FULL: ACK only */
const bit<8> OP_MERGE_UP = 7; /* MERGED, and the update's reward is the max */
const bit<8> OP_INVALID = 8;  /* DROPPED_INVALID: answered in pass 2, no lock held, no state */

/* First-pass verdicts beside VERDICT_* of ../include/constants.p4: what `classify` says
 * about traffic that the queue does not handle. */
const bit<8> VERDICT_ROUTE = 0x80;     /* IPv4, not OLAF: ipv4_lpm */
const bit<8> VERDICT_NOT_IPV4 = 0x81;  /* dropped */
const bit<8> VERDICT_MODEL = 0x82;     /* a valid MODEL: counted, then ipv4_lpm */

#endif
