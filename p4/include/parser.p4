/* Parser, checksum controls and deparser.
 *
 * Values are extracted only for an UPDATE whose num_values is V and whose UDP length
 * says exactly V values follow; every other OLAF message keeps its payload unparsed
 * (ACKs built from it are cut back to the header in egress). */
#ifndef OLAF_PARSER_P4
#define OLAF_PARSER_P4

parser OlafParser(packet_in packet,
                  out headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    state start {
        meta.is_olaf = 0;
        meta.values_left = 0;
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        /* No options, first fragment, UDP: anything else is plain IPv4 traffic. */
        transition select(hdr.ipv4.ihl, hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (4w5, 13w0, IP_PROTO_UDP): parse_udp;
            default: accept;
        }
    }

    state parse_udp {
        packet.extract(hdr.udp);
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
        /* Set before the extract: a datagram too short for the header leaves
         * hdr.olaf invalid with is_olaf = 1, and ingress drops it as SHORT. */
        meta.is_olaf = 1;
        packet.extract(hdr.olaf);
        transition select(hdr.olaf.msg_type, hdr.olaf.num_values, hdr.udp.len) {
            (MSG_UPDATE, OLAF_V8, OLAF_UPDATE_UDP_LEN): parse_values_start;
            default: accept;
        }
    }

    state parse_values_start {
        meta.values_left = OLAF_V8;
        transition parse_values;
    }

    state parse_values {
        packet.extract(hdr.values.next);
        meta.values_left = meta.values_left - 1;
        transition select(meta.values_left) {
            0: accept;
            default: parse_values;
        }
    }
}

control OlafVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }
}

control OlafComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.diffserv,
              hdr.ipv4.totalLen,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.fragOffset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.srcAddr,
              hdr.ipv4.dstAddr },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

control OlafDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.olaf);
        packet.emit(hdr.values);
    }
}

#endif
