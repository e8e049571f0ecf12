/* Fragment of OlafIngress (TNA): the counters, as v1model's (index Outcome, msg_type). */

    Counter<bit<32>, bit<8>>(8, CounterType_t.PACKETS) outcome_counter;
    Counter<bit<32>, bit<8>>(8, CounterType_t.PACKETS) msg_type_counter;
