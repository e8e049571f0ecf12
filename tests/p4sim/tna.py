"""The Tofino Native Architecture as the interpreter models it: the externs it knows,
the intrinsic metadata (reduced to the fields the program uses) and the recirculation port."""

from __future__ import annotations

from typing import Any

from tests.p4sim.values import T

TNA_EXTERNS = {"Register", "RegisterAction", "Counter", "Random", "Resubmit", "Checksum", "Hash"}

TNA_TYPES: dict[str, tuple[str, list[tuple[Any, str]]]] = {
    # Tofino 1's intrinsic metadata, reduced to the fields the program uses; the two
    # 64-bit headers are what the hardware prepends to a packet before each parser.
    "ingress_intrinsic_metadata_t": (
        "header",
        [
            (T(1), "resubmit_flag"),
            (T(1), "_pad1"),
            (T(2), "packet_version"),
            (T(3), "_pad2"),
            (T(9), "ingress_port"),
            (T(48), "ingress_mac_tstamp"),
        ],
    ),
    "egress_intrinsic_metadata_t": ("header", [(T(7), "_pad0"), (T(9), "egress_port"), (T(48), "_pad1")]),
    "ingress_intrinsic_metadata_from_parser_t": ("struct", [(T(16), "parser_err")]),
    "ingress_intrinsic_metadata_for_deparser_t": (
        "struct",
        [(T(3), "drop_ctl"), (T(3), "digest_type"), (T(3), "resubmit_type"), (T(3), "mirror_type")],
    ),
    "ingress_intrinsic_metadata_for_tm_t": ("struct", [(T(9), "ucast_egress_port"), (T(1), "bypass_egress")]),
    "egress_intrinsic_metadata_from_parser_t": ("struct", [(T(16), "parser_err")]),
    "egress_intrinsic_metadata_for_deparser_t": ("struct", [(T(3), "drop_ctl")]),
    "egress_intrinsic_metadata_for_output_port_t": ("struct", [(T(1), "capture_tstamp_on_tx")]),
}
TNA_RECIRC_PORTS = frozenset({68})
TNA_DROP_PORT = 511
"""A unicast egress port that drops: P4Testgen's Tofino target (DROP_CONSTANT in
targets/tofino/constants.h) drops what ingress sends there; no OLAF topology uses it."""
