/* OLAF constants shared by every block of the v1model program.
 *
 * Wire values mirror worker_transport/protocol.py (tests/test_p4_consistency.py
 * checks them); sizes are the compile-time register dimensions, which the
 * controller's runtime limits (olaf_config) must not exceed. */
#ifndef OLAF_CONSTANTS_P4
#define OLAF_CONSTANTS_P4

/* Compile-time queue dimensions. */
#define OLAF_V            64      /* values per block (V) */
#define OLAF_V_SHIFT      6       /* log2(OLAF_V): slot s owns values [s << 6, (s << 6) + 64) */
#define OLAF_CAPACITY     64      /* slots in the ring */
#define OLAF_MAX_CLUSTERS 16
#define OLAF_MAX_BLOCKS   1024
#define OLAF_BLOCK_SHIFT  10      /* log2(OLAF_MAX_BLOCKS): index key = cluster << 10 | block */
#define OLAF_INDEX_SIZE   16384   /* OLAF_MAX_CLUSTERS * OLAF_MAX_BLOCKS */
#define OLAF_VALUE_SLOTS  4096    /* OLAF_CAPACITY * OLAF_V */

/* The configuration before the controller writes olaf_config: QueueConfig()'s.
 * The bmv2 vector runner overrides them with -D to replay each file's config. */
#ifndef OLAF_DEFAULT_MODE
#define OLAF_DEFAULT_MODE 0
#endif
#ifndef OLAF_DEFAULT_THRESHOLD
#define OLAF_DEFAULT_THRESHOLD 0x7fffffff
#endif
#ifndef OLAF_DEFAULT_CONGESTION_THRESHOLD
#define OLAF_DEFAULT_CONGESTION_THRESHOLD 192
#endif
#ifndef OLAF_DEFAULT_FRAC_BITS
#define OLAF_DEFAULT_FRAC_BITS 16
#endif
#ifndef OLAF_DEFAULT_CAPACITY
#define OLAF_DEFAULT_CAPACITY 64
#endif
#ifndef OLAF_DEFAULT_MAX_CLUSTERS
#define OLAF_DEFAULT_MAX_CLUSTERS 16
#endif
#ifndef OLAF_DEFAULT_MAX_BLOCKS
#define OLAF_DEFAULT_MAX_BLOCKS 1024
#endif
/* Slots one cluster may hold (DESIGN.md section 3 step 4): QueueConfig's default is
 * capacity, i.e. no limit. */
#ifndef OLAF_DEFAULT_CLUSTER_QUOTA
#define OLAF_DEFAULT_CLUSTER_QUOTA 64
#endif
/* Which feedback an UPDATE's ACK carries (DESIGN.md section 3, Feedback): revision 3,
 * the share of the queue the UPDATE's cluster can no longer use (QueueConfig's default),
 * or revision 2, the global occupancy, kept for comparison. */
#ifndef OLAF_DEFAULT_FEEDBACK
#define OLAF_DEFAULT_FEEDBACK 3
#endif

/* Wire format (DESIGN.md section 2). */
const bit<16> OLAF_PORT = 20300;
const bit<4>  OLAF_VERSION = 1;
const bit<4>  MSG_UPDATE = 1;
const bit<4>  MSG_ACK = 2;
const bit<4>  MSG_PULL = 3;
const bit<4>  MSG_DATA = 4;
const bit<4>  MSG_EMPTY = 5;
const bit<4>  MSG_MODEL = 6;

const bit<8>  OUTCOME_ENQUEUED = 0;
const bit<8>  OUTCOME_MERGED = 1;
const bit<8>  OUTCOME_REPLACED = 2;
const bit<8>  OUTCOME_DROPPED_REWARD = 3;
const bit<8>  OUTCOME_DROPPED_FULL = 4;
const bit<8>  OUTCOME_DROPPED_INVALID = 5;

const bit<8>  MODE_OLAF = 0;
@noWarn("unused") const bit<8>  MODE_FIFO = 1;

const bit<8>  FLAG_CONGESTED = 1;

/* Feedback revisions (olaf_config's feedback). The reference refuses any other value; a
 * table write to this switch is not checked, so anything but revision 2 acts as the
 * default, revision 3. */
const bit<8>  FEEDBACK_REV2 = 2;
@noWarn("unused") const bit<8>  FEEDBACK_REV3 = 3;

@noWarn("unused") const bit<8>  OLAF_V8 = 64;             /* num_values of a valid UPDATE or DATA */
const bit<16> OLAF_HEADER_LEN = 36;
const bit<16> UDP_HEADER_LEN = 8;
const bit<16> IPV4_HEADER_LEN = 20;
const bit<16> OLAF_MIN_UDP_LEN = 44;    /* UDP header + OLAF header */
@noWarn("unused") const bit<16> OLAF_UPDATE_UDP_LEN = 300; /* UDP header + OLAF header + 4 * V */
@noWarn("unused") const bit<32> OLAF_SHORT_FRAME_LEN = 78; /* Ethernet + IPv4 + UDP + OLAF header: ACK, EMPTY */

/* Why a message is not OK, in the order of worker_transport.codec.Verdict. */
const bit<8>  VERDICT_OK = 0;
const bit<8>  VERDICT_SHORT = 1;
const bit<8>  VERDICT_BAD_VERSION = 2;
const bit<8>  VERDICT_BAD_TYPE = 3;
const bit<8>  VERDICT_BAD_PULL = 4;
const bit<8>  VERDICT_NOT_FROM_HOST = 5;
const bit<8>  VERDICT_BAD_LENGTH = 6;
const bit<8>  VERDICT_BAD_FRAC_BITS = 7;
const bit<8>  VERDICT_CLUSTER_RANGE = 8;
const bit<8>  VERDICT_BLOCK_RANGE = 9;

const bit<16> TYPE_IPV4 = 0x0800;
const bit<8>  IP_PROTO_UDP = 17;

#endif
