/* One value of every slot: a Register of slot cells and what the second pass does to
 * it. Instantiated OLAF_TNA_V times, one per stateful ALU. One table keyed by the op
 * picks the RegisterAction (as SwitchML's per-value processors do), so each value is
 * one logical table in one stage, with no gateway chain in front of it.
 *
 * The value tables depend on nothing but the resubmit header, so the compiler could put
 * them anywhere; left to itself it fills the first stages with them and pushes the queue
 * state, which the first pass needs early, behind them. Each value is therefore its own
 * control with its table pinned (@stage) to the stages the queue state leaves free:
 * p4/README.md, "TNA", lists the stage plan. */
#ifndef OLAF_TNA_VALUES_P4
#define OLAF_TNA_VALUES_P4

#define OLAF_VALUE_CONTROL(i, s) \
control OlafValue##i(inout int<32> value, in bit<8> op, in bit<16> slot) { \
    Register<int<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) cells; \
    RegisterAction<int<32>, bit<16>, int<32>>(cells) store = { \
        void apply(inout int<32> cell) { \
            cell = value; \
        } \
    }; \
    RegisterAction<int<32>, bit<16>, int<32>>(cells) merge = { \
        void apply(inout int<32> cell) { \
            cell = cell |+| value; \
        } \
    }; \
    RegisterAction<int<32>, bit<16>, int<32>>(cells) read = { \
        void apply(inout int<32> cell, out int<32> rv) { \
            rv = cell; \
        } \
    }; \
    action do_store() { \
        store.execute(slot); \
    } \
    action do_merge() { \
        merge.execute(slot); \
    } \
    action do_read() { \
        value = read.execute(slot); \
    } \
    @stage(s) table value_op { \
        key = { op: exact; } \
        actions = { do_store; do_merge; do_read; NoAction; } \
        const entries = { \
            OP_STORE: do_store(); \
            OP_APPEND: do_store(); \
            OP_MERGE: do_merge(); \
            OP_MERGE_UP: do_merge(); \
            OP_POP: do_read(); \
        } \
        size = 8; \
        default_action = NoAction(); \
    } \
    apply { \
        value_op.apply(); \
    } \
}

/* Value i in stage s: 0 in stage 3 beside the last queue state, then four a stage. */
OLAF_VALUE_CONTROL(0, 3)
OLAF_VALUE_CONTROL(1, 4)   OLAF_VALUE_CONTROL(2, 4)   OLAF_VALUE_CONTROL(3, 4)   OLAF_VALUE_CONTROL(4, 4)
OLAF_VALUE_CONTROL(5, 5)   OLAF_VALUE_CONTROL(6, 5)   OLAF_VALUE_CONTROL(7, 5)   OLAF_VALUE_CONTROL(8, 5)
OLAF_VALUE_CONTROL(9, 6)   OLAF_VALUE_CONTROL(10, 6)  OLAF_VALUE_CONTROL(11, 6)  OLAF_VALUE_CONTROL(12, 6)
OLAF_VALUE_CONTROL(13, 7)  OLAF_VALUE_CONTROL(14, 7)  OLAF_VALUE_CONTROL(15, 7)  OLAF_VALUE_CONTROL(16, 7)
OLAF_VALUE_CONTROL(17, 8)  OLAF_VALUE_CONTROL(18, 8)  OLAF_VALUE_CONTROL(19, 8)  OLAF_VALUE_CONTROL(20, 8)
OLAF_VALUE_CONTROL(21, 9)  OLAF_VALUE_CONTROL(22, 9)  OLAF_VALUE_CONTROL(23, 9)  OLAF_VALUE_CONTROL(24, 9)
OLAF_VALUE_CONTROL(25, 10) OLAF_VALUE_CONTROL(26, 10) OLAF_VALUE_CONTROL(27, 10) OLAF_VALUE_CONTROL(28, 10)
OLAF_VALUE_CONTROL(29, 11) OLAF_VALUE_CONTROL(30, 11) OLAF_VALUE_CONTROL(31, 11)

#define OLAF_VALUE_INSTANCE(i) OlafValue##i() value_##i;
#define OLAF_VALUE_APPLY(i) value_##i.apply(hdr.values[i].value, md.resub.op, md.resub.slot);

#endif
