/* OLAF on Tofino (TNA): the OlafQueue of DESIGN.md sections 2-3 with V = 32.
 * Compiled for Tofino 1 by tests/test_tna.py (p4/README.md, "TNA"):
 *   p4c-barefoot --target tofino --arch tna -o build/tofino p4/tna/olaf_tna.p4 */
#include <core.p4>
#include <tna.p4>

#include "../include/constants.p4"
#include "constants.p4"
#include "headers.p4"
#include "parser.p4"
#include "values.p4"
#include "ingress.p4"
#include "egress.p4"

Pipeline(OlafIngressParser(),
         OlafIngress(),
         OlafIngressDeparser(),
         OlafEgressParser(),
         OlafEgress(),
         OlafEgressDeparser()) pipe;

Switch(pipe) main;
