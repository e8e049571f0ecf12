/* Turns the packet being processed into the switch's answer to its sender: ACK for an
 * UPDATE, DATA or EMPTY for a PULL. Addresses and ports are swapped, the IPv4 total
 * length and UDP length follow num_values, the UDP checksum is 0 (optional in IPv4)
 * and the IPv4 checksum is recomputed in OlafComputeChecksum. TTL, identification,
 * DSCP and flags stay as received. */
#ifndef OLAF_REPLY_P4
#define OLAF_REPLY_P4

control OlafReply(inout headers_t hdr,
                  inout metadata_t meta,
                  inout standard_metadata_t standard_metadata) {
    apply {
        bit<48> mac = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = mac;
        bit<32> addr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = addr;
        bit<16> port = hdr.udp.dstPort;
        hdr.udp.dstPort = hdr.udp.srcPort;
        hdr.udp.srcPort = port;

        bit<16> payload = OLAF_HEADER_LEN + ((bit<16>)hdr.olaf.num_values << 2);
        hdr.udp.len = UDP_HEADER_LEN + payload;
        hdr.udp.checksum = 0;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + UDP_HEADER_LEN + payload;

        if (hdr.olaf.num_values == 0) {
            meta.short_reply = 1;
        }
        standard_metadata.egress_spec = standard_metadata.ingress_port;
    }
}

#endif
