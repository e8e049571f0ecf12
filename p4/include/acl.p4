/* Fragment of OlafIngress: who may send what (docs/security.md, "Mitigations offered
 * today"), always compiled in. The same checks as dataplane/acl.py.
 *
 * update_source: an UPDATE for cluster c is judged by its IPv4 source. The controller
 *   installs {c, prefix} -> permit for each of c's prefixes and either {c, 0.0.0.0/0} ->
 *   deny (close c only) or the default action deny (close every cluster it has not
 *   listed, as `olaf switch --cluster-source` does). Default permit: with no entries
 *   the program behaves as without this fragment.
 * pull_source: a PULL is judged by its IPv4 source: {PS prefix} -> permit plus
 *   {0.0.0.0/0} -> deny (or the default action deny). Default permit.
 * refused_counter[reason]: what was refused, index dataplane.acl.Refusal.
 *
 * A refused message is dropped before the queue reads or writes any register, without an
 * answer (nothing is reflected to a spoofed source), and is counted here only: not in
 * msg_type_counter or outcome_counter, which count what the queue saw. */

    const bit<32> REFUSED_UPDATE_SOURCE = 0;
    const bit<32> REFUSED_PULL_SOURCE = 1;

    action permit() {
    }

    action deny() {
    }

    table update_source {
        key = {
            hdr.olaf.cluster_id: exact;
            hdr.ipv4.srcAddr: lpm;
        }
        actions = { permit; deny; }
        size = 1024;
        default_action = permit();
    }

    table pull_source {
        key = { hdr.ipv4.srcAddr: lpm; }
        actions = { permit; deny; }
        size = 64;
        default_action = permit();
    }

    counter(2, CounterType.packets) refused_counter;
