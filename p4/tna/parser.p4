/* TNA parsers and deparsers. Values are extracted only for an UPDATE of exactly
 * V = 32 values (UDP length 172); a resubmitted packet carries the first pass's
 * decision in front of its (unchanged) headers. */
#ifndef OLAF_TNA_PARSER_P4
#define OLAF_TNA_PARSER_P4

#define EXTRACT_VALUE pkt.extract(hdr.values.next);
#define EXTRACT_8_VALUES EXTRACT_VALUE EXTRACT_VALUE EXTRACT_VALUE EXTRACT_VALUE \
                         EXTRACT_VALUE EXTRACT_VALUE EXTRACT_VALUE EXTRACT_VALUE

parser OlafIngressParser(packet_in pkt,
                         out headers_t hdr,
                         out ingress_metadata_t md,
                         out ingress_intrinsic_metadata_t ig_intr_md) {
    state start {
        pkt.extract(ig_intr_md);
        /* Zeroed here so that no table reads metadata the hardware left undefined (and
         * the program means the same on Tofino as in the interpreter). */
        md.is_olaf = 0;
        md.port_in = 0;
        md.cfg_mode = 0;
        md.cfg_threshold = 0;
        md.cfg_congestion_threshold = 0;
        md.cfg_frac_bits = 0;
        md.cfg_capacity = 0;
        md.cfg_cluster_quota = 0;
        md.cfg_feedback = 0;
        md.verdict = 0;
        md.frac_xor = 0;
        md.cluster_room = 0;
        md.block_room = 0;
        md.slot_key = 0;
        md.was_locked = 0;
        md.occupied = 0;
        md.occ_diff = 0;
        md.quota_diff = 0;
        md.write_slot = 0;
        md.read_slot = 0;
        md.entry = 0;
        md.slot_agg = 0;
        md.slot_worker = 0;
        md.slot_reward = 0;
        md.worker_xor = 0;
        md.up_diff = 0;
        md.down_diff = 0;
        md.up_margin = 0;
        md.down_margin = 0;
        md.cluster_slots = 0;
        md.util = 0;
        md.cong_diff = 0;
        md.quota_room = 0;
        md.free = 0;
        md.own_used = 0;
        md.cap_unheld = 0;
        md.cap_unquota = 0;
        md.room_diff = 0;
        md.fifo_used = 0;
        md.used = 0;
        md.share = 0;
        transition select(ig_intr_md.resubmit_flag) {
            1: parse_resubmit;
            0: parse_port_metadata;
        }
    }

    state parse_resubmit {
        pkt.extract(md.resub);
        transition parse_bridge_or_ethernet;
    }

    state parse_port_metadata {
        pkt.advance(PORT_METADATA_SIZE);
        transition parse_bridge_or_ethernet;
    }

    state parse_bridge_or_ethernet {
        transition select(ig_intr_md.ingress_port) {
            OLAF_RECIRC_PORT: parse_bridge;
            default: parse_ethernet;
        }
    }

    state parse_bridge {
        pkt.extract(hdr.bridge);
        transition parse_ethernet;
    }

    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (4w5, 13w0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dstPort) {
            OLAF_PORT: parse_olaf;
            default: parse_udp_src;
        }
    }

    state parse_udp_src {
        transition select(hdr.udp.srcPort) {
            OLAF_PORT: parse_olaf;
            default: accept;
        }
    }

    state parse_olaf {
        md.is_olaf = 1;
        pkt.extract(hdr.olaf);
        transition select(hdr.olaf.msg_type, hdr.olaf.num_values, hdr.udp.len) {
            (MSG_UPDATE, OLAF_TNA_V8, OLAF_TNA_UPDATE_UDP_LEN): parse_values;
            default: accept;
        }
    }

    state parse_values {
        EXTRACT_8_VALUES
        EXTRACT_8_VALUES
        EXTRACT_8_VALUES
        EXTRACT_8_VALUES
        transition accept;
    }
}

control OlafIngressDeparser(packet_out pkt,
                            inout headers_t hdr,
                            in ingress_metadata_t md,
                            in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Resubmit() resubmit;
    Checksum() ipv4_checksum;

    apply {
#ifndef OLAF_ONE_PASS
        if (ig_dprsr_md.resubmit_type == RESUBMIT_TYPE_OLAF) {
            resubmit.emit(md.resub);
        }
#endif
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdrChecksum = ipv4_checksum.update({
                hdr.ipv4.version,
                hdr.ipv4.ihl,
                hdr.ipv4.diffserv,
                hdr.ipv4.totalLen,
                hdr.ipv4.identification,
                hdr.ipv4.flags,
                hdr.ipv4.fragOffset,
                hdr.ipv4.ttl,
                hdr.ipv4.protocol,
                hdr.ipv4.srcAddr,
                hdr.ipv4.dstAddr});
        }
        pkt.emit(hdr);
    }
}

/* Egress only decides drops: it parses no headers and the payload passes through. */
parser OlafEgressParser(packet_in pkt,
                        out egress_headers_t hdr,
                        out egress_metadata_t md,
                        out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        md.drop_prob = 0;
        md.draw = 0;
        md.drop_margin = 0;
        transition accept;
    }
}

control OlafEgressDeparser(packet_out pkt,
                           inout egress_headers_t hdr,
                           in egress_metadata_t md,
                           in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    apply { }
}

#endif
