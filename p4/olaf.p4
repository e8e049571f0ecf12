/* OLAF: in-network aggregation for asynchronous distributed RL, v1model (bmv2).
 *
 * The OlafQueue of DESIGN.md sections 2-3 in registers: UPDATE becomes an ACK to its
 * sender, PULL becomes DATA or EMPTY, everything else is forwarded by IPv4 LPM.
 * Compile: p4c-bm2-ss --arch v1model --Werror --p4runtime-files olaf.p4info.txtpb -o olaf.json olaf.p4
 * (see p4/README.md). */
#include <core.p4>
#include <v1model.p4>

#include "include/constants.p4"
#include "include/headers.p4"
#include "include/parser.p4"
#include "include/feedback.p4"
#include "include/reply.p4"
#include "include/queue.p4"
#include "include/egress.p4"

V1Switch(
    OlafParser(),
    OlafVerifyChecksum(),
    OlafIngress(),
    OlafEgress(),
    OlafComputeChecksum(),
    OlafDeparser()
) main;
