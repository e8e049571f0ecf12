/* Fragment of OlafIngress (TNA): pass 2's answers: DATA, EMPTY or ACK built from the
 * re-parsed original packet, sent back to its sender. */

    action data_from_key() {
        hdr.olaf.cluster_id = md.resub.cluster;
        hdr.olaf.block_id = md.resub.block;
    }

    action answer_data() {
        hdr.olaf.msg_type = MSG_DATA;
        hdr.olaf.num_values = OLAF_TNA_V8;
        hdr.olaf.outcome = OUTCOME_ENQUEUED;
        hdr.olaf.frac_bits = md.cfg_frac_bits;
        hdr.olaf.reserved = 0;
        hdr.udp.len = OLAF_TNA_UPDATE_UDP_LEN;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + OLAF_TNA_UPDATE_UDP_LEN;
    }

    action answer_empty() {
        hdr.olaf.msg_type = MSG_EMPTY;
        hdr.olaf.cluster_id = 0;
        hdr.olaf.worker_id = 0;
        hdr.olaf.block_id = 0;
        hdr.olaf.agg_count = 0;
        hdr.olaf.seq = 0;
        hdr.olaf.model_version = 0;
        hdr.olaf.reward = 0;
        hdr.olaf.gen_time_us = 0;
        hdr.olaf.contributors = 0;
        hdr.olaf.num_values = 0;
        hdr.olaf.outcome = OUTCOME_ENQUEUED;
        hdr.olaf.frac_bits = md.cfg_frac_bits;
        hdr.olaf.reserved = 0;
        hdr.udp.len = UDP_HEADER_LEN + OLAF_HEADER_LEN;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + UDP_HEADER_LEN + OLAF_HEADER_LEN;
    }

    action answer_ack() {
        hdr.olaf.msg_type = MSG_ACK;
        hdr.olaf.outcome = md.resub.outcome;
        hdr.olaf.num_values = 0;
        hdr.udp.len = UDP_HEADER_LEN + OLAF_HEADER_LEN;
        hdr.ipv4.totalLen = IPV4_HEADER_LEN + UDP_HEADER_LEN + OLAF_HEADER_LEN;
        hdr.values[0].setInvalid();  hdr.values[1].setInvalid();  hdr.values[2].setInvalid();
        hdr.values[3].setInvalid();  hdr.values[4].setInvalid();  hdr.values[5].setInvalid();
        hdr.values[6].setInvalid();  hdr.values[7].setInvalid();  hdr.values[8].setInvalid();
        hdr.values[9].setInvalid();  hdr.values[10].setInvalid(); hdr.values[11].setInvalid();
        hdr.values[12].setInvalid(); hdr.values[13].setInvalid(); hdr.values[14].setInvalid();
        hdr.values[15].setInvalid(); hdr.values[16].setInvalid(); hdr.values[17].setInvalid();
        hdr.values[18].setInvalid(); hdr.values[19].setInvalid(); hdr.values[20].setInvalid();
        hdr.values[21].setInvalid(); hdr.values[22].setInvalid(); hdr.values[23].setInvalid();
        hdr.values[24].setInvalid(); hdr.values[25].setInvalid(); hdr.values[26].setInvalid();
        hdr.values[27].setInvalid(); hdr.values[28].setInvalid(); hdr.values[29].setInvalid();
        hdr.values[30].setInvalid(); hdr.values[31].setInvalid();
    }

    action values_valid() {
        hdr.values[0].setValid();  hdr.values[1].setValid();  hdr.values[2].setValid();
        hdr.values[3].setValid();  hdr.values[4].setValid();  hdr.values[5].setValid();
        hdr.values[6].setValid();  hdr.values[7].setValid();  hdr.values[8].setValid();
        hdr.values[9].setValid();  hdr.values[10].setValid(); hdr.values[11].setValid();
        hdr.values[12].setValid(); hdr.values[13].setValid(); hdr.values[14].setValid();
        hdr.values[15].setValid(); hdr.values[16].setValid(); hdr.values[17].setValid();
        hdr.values[18].setValid(); hdr.values[19].setValid(); hdr.values[20].setValid();
        hdr.values[21].setValid(); hdr.values[22].setValid(); hdr.values[23].setValid();
        hdr.values[24].setValid(); hdr.values[25].setValid(); hdr.values[26].setValid();
        hdr.values[27].setValid(); hdr.values[28].setValid(); hdr.values[29].setValid();
        hdr.values[30].setValid(); hdr.values[31].setValid();
    }

    /* Turn the packet into the answer to its sender (as v1model's OlafReply). On
     * Tofino an ACK for an UPDATE whose values were not parsed keeps them as trailing
     * payload (no truncate extern): the IPv4 and UDP lengths still say 36 bytes. */
    action bounce() {
        bit<48> mac = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = hdr.ethernet.srcAddr;
        hdr.ethernet.srcAddr = mac;
        bit<32> addr = hdr.ipv4.dstAddr;
        hdr.ipv4.dstAddr = hdr.ipv4.srcAddr;
        hdr.ipv4.srcAddr = addr;
        bit<16> port = hdr.udp.dstPort;
        hdr.udp.dstPort = hdr.udp.srcPort;
        hdr.udp.srcPort = port;
        hdr.udp.checksum = 0;
        ig_tm_md.ucast_egress_port = md.port_in;
        hdr.bridge.setInvalid();
        hdr.olaf.queue_util = md.share[7:0];
    }
