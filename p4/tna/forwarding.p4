/* Fragment of OlafIngress (TNA): table ipv4_lpm for every packet the queue does not
 * answer (MODEL and other IPv4), and drop. */

    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    action ipv4_forward(bit<48> dstAddr, PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = { hdr.ipv4.dstAddr: lpm; }
        actions = { ipv4_forward; drop; }
        size = 1024;
        default_action = drop();
    }
