/* OLAF on Tofino (TNA): the OlafQueue of DESIGN.md sections 2-3 with V = 32.
 * Build with the Intel P4 Studio / open-p4studio compiler (see p4/README.md):
 *   bf-p4c --target tofino --arch tna -o build_tna p4/tna/olaf_tna.p4
 * Not compiled here: no Tofino compiler is installed on the development machines. */
#include <core.p4>
#include <tna.p4>

#include "../include/constants.p4"
#include "headers.p4"
#include "parser.p4"
#include "values.p4"
#include "queue.p4"
#include "egress.p4"

Pipeline(OlafIngressParser(),
         OlafIngress(),
         OlafIngressDeparser(),
         OlafEgressParser(),
         OlafEgress(),
         OlafEgressDeparser()) pipe;

Switch(pipe) main;
