/* One value of every slot: a Register of capacity 32-bit cells and the four things
 * the second pass does to it. Instantiated OLAF_TNA_V times, one per stateful ALU. */
#ifndef OLAF_TNA_VALUES_P4
#define OLAF_TNA_VALUES_P4

control OlafValue(inout int<32> value, in bit<8> op, in bit<16> slot) {
    Register<int<32>, bit<16>>(OLAF_CAPACITY, 0) cells;

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

    apply {
        if (op == OP_STORE || op == OP_APPEND) {
            store.execute(slot);
        } else if (op == OP_MERGE) {
            merge.execute(slot);
        } else if (op == OP_POP) {
            value = read.execute(slot);
        }
    }
}

#define OLAF_VALUE_INSTANCE(i) OlafValue() value_##i;
#define OLAF_VALUE_APPLY(i) value_##i.apply(hdr.values[i].value, md.resub.op, md.resub.slot);

#endif
