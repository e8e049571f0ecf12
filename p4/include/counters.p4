/* Fragment of OlafIngress: indirect packet counters the controller reads.
 *
 * outcome_counter[Outcome]: every answered UPDATE by its outcome, and every invalid
 *   message (answered or not) under DROPPED_INVALID.
 * msg_type_counter[msg_type]: every message with a full version-1 header and a
 *   type 1..6, valid or not. */

    counter(8, CounterType.packets) outcome_counter;
    counter(8, CounterType.packets) msg_type_counter;
