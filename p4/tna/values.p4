/* One value of every slot: a Register of slot cells and what the second pass does to
 * it. Instantiated OLAF_TNA_V times, one per stateful ALU. One table keyed by the op
 * picks the RegisterAction (as SwitchML's per-value processors do), so each value is
 * one logical table in one stage, with no gateway chain in front of it. */
#ifndef OLAF_TNA_VALUES_P4
#define OLAF_TNA_VALUES_P4

control OlafValue(inout int<32> value, in bit<8> op, in bit<16> slot) {
    Register<int<32>, bit<16>>(OLAF_TNA_SLOT_CELLS, 0) cells;

    RegisterAction<int<32>, bit<16>, int<32>>(cells) store = {
        void apply(inout int<32> cell) {
            cell = value;
        }
    };
    RegisterAction<int<32>, bit<16>, int<32>>(cells) merge = {
        void apply(inout int<32> cell) {
            cell = cell |+| value;
        }
    };
    RegisterAction<int<32>, bit<16>, int<32>>(cells) read = {
        void apply(inout int<32> cell, out int<32> rv) {
            rv = cell;
        }
    };

    action do_store() {
        store.execute(slot);
    }

    action do_merge() {
        merge.execute(slot);
    }

    action do_read() {
        value = read.execute(slot);
    }

    table value_op {
        key = { op: exact; }
        actions = { do_store; do_merge; do_read; NoAction; }
        const entries = {
            OP_STORE: do_store();
            OP_APPEND: do_store();
            OP_MERGE: do_merge();
            OP_MERGE_UP: do_merge();
            OP_POP: do_read();
        }
        size = 8;
        default_action = NoAction();
    }

    apply {
        value_op.apply();
    }
}

#define OLAF_VALUE_INSTANCE(i) OlafValue() value_##i;
#define OLAF_VALUE_APPLY(i) value_##i.apply(hdr.values[i].value, md.resub.op, md.resub.slot);

#endif
