"""``olaf switch``: the software OLAF switch as a process (UDP or AF_PACKET interfaces)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from pathlib import Path

from dataplane.forwarding import ForwardingTable
from dataplane.impairment import Impairment, parse_port_values
from olaf.argtypes import ranged
from olaf.shutdown import stop_on_signals
from worker_transport.fixedpoint import to_fixed
from worker_transport.protocol import INT32_MAX, Mode

HELP = "run the software OLAF switch (the reference OlafQueue) on UDP or on interfaces"


def _host_port(text: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or default_host, int(port)


def _control_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT``: the control plane listens on loopback unless told otherwise."""
    return _host_port(text if ":" in text else f":{text}", default_host="127.0.0.1")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds >= 0")
    return value


def _port_iface(text: str) -> tuple[int, str]:
    port, sep, iface = text.partition("@")
    if not sep or not port.isdigit() or not iface:
        raise argparse.ArgumentTypeError(f"expected PORT@IFACE, got {text!r}")
    return int(port), iface



def _source_prefix(text: str):  # noqa: ANN202 - ipaddress.IPv4Network, imported lazily
    # dataplane.acl: ~3 ms of imports that every `olaf ...` would pay (cli.py builds every
    # subcommand's parser), so imported when an argument is parsed.
    from dataplane.acl import parse_prefix

    try:
        return parse_prefix(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cluster_source(text: str):  # noqa: ANN202 - (cluster, ipaddress.IPv4Network)
    # dataplane.acl: as in _source_prefix.
    from dataplane.acl import parse_cluster_source

    try:
        return parse_cluster_source(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("where packets come from (one of)")
    io.add_argument("--listen", type=_host_port, metavar="HOST:PORT",
                    help="UDP mode: datagrams carry OLAF header + values; replies go to the sender "
                         "(port 0 picks a free port, printed as 'listening on udp HOST:PORT')")
    io.add_argument("-i", "--interface", dest="interfaces", action="append", type=_port_iface,
                    default=[], metavar="PORT@IFACE",
                    help="interface mode (repeatable, as simple_switch takes it): Ethernet/IPv4/UDP "
                         "on AF_PACKET sockets; needs root")
    io.add_argument("--forwarding", metavar="FILE",
                    help="interface mode: JSON forwarding table for non-OLAF traffic "
                         '({"routes": [{"prefix": "10.0.1.1/32", "port": 1, "mac": "08:00:..."}]})')
    io.add_argument("--route", action="append", default=[], metavar="PREFIX=PORT[,MAC]",
                    help="interface mode: a forwarding entry on the command line (repeatable)")

    q = p.add_argument_group("OlafQueue")
    q.add_argument("--capacity", type=ranged(1, 65535), default=64, help="slots (default 64)")
    q.add_argument("--values", type=ranged(1, 255), default=64, help="V, values per block (default 64)")
    q.add_argument("--max-clusters", type=ranged(1, 65536), default=16, help="default 16")
    q.add_argument("--max-blocks", type=ranged(1, 65536), default=1024, help="default 1024")
    q.add_argument("--mode", choices=("olaf", "fifo"), default="olaf",
                   help="olaf: merge/replace/drop by reward; fifo: drop-tail baseline (default olaf)")
    q.add_argument("--feedback", type=int, choices=(2, 3), default=3,
                   help="what an UPDATE's ACK says in queue_util: 3, the share of the queue its "
                        "cluster can no longer use; 2, the global occupancy (DESIGN.md §3 Feedback; "
                        "default 3)")
    q.add_argument("--threshold", type=float, default=None,
                   help="reward threshold in reward units (default: the largest representable, "
                        "so every compatible update merges until the controller sets one)")
    q.add_argument("--congestion-threshold", type=ranged(0, 255), default=192,
                   help="CONGESTED when queue_util >= this, 0-255 (default 192 = 75%%)")
    q.add_argument("--frac-bits", type=ranged(0, 31), default=16,
                   help="fixed-point fraction bits every UPDATE must carry (default 16)")
    q.add_argument("--cluster-quota", type=ranged(1, 65535), default=None, metavar="N",
                   help="slots one cluster may hold, 1..--capacity: a new block of a cluster at its "
                        "quota is DROPPED_FULL (default: --capacity, no limit; DESIGN.md §3)")

    a = p.add_argument_group("who may send what (off unless given; see docs/security.md)")
    a.add_argument("--cluster-source", dest="cluster_sources", action="append", type=_cluster_source,
                   default=[], metavar="C=PREFIX",
                   help="accept UPDATEs for cluster C only from source addresses in PREFIX (repeatable); "
                        "once given, a cluster without any is closed. Others are dropped unanswered "
                        "and counted as refused UPDATE_SOURCE")
    a.add_argument("--ps-source", dest="ps_sources", action="append", type=_source_prefix, default=[],
                   metavar="PREFIX",
                   help="accept PULLs only from source addresses in PREFIX, the PS (repeatable); others "
                        "are dropped unanswered and counted as refused PULL_SOURCE")

    o = p.add_argument_group("emulation and observation")
    o.add_argument("--drop-prob", action="append", default=[], metavar="[PORT:]P",
                   help="drop responses leaving PORT (all ports without PORT) with probability P "
                        "(repeatable; UDP mode has port 0)")
    o.add_argument("--delay-ms", action="append", default=[], metavar="[PORT:]MS",
                   help="delay responses leaving PORT by MS milliseconds (repeatable)")
    o.add_argument("--seed", type=ranged(0, 2**64 - 1), default=None, help="seed of the drop simulator")
    o.add_argument("--pcap", metavar="DIR", help="record every port's traffic as pcap files in DIR")
    o.add_argument("--stats-interval", type=_seconds, default=1.0, metavar="S",
                   help="seconds between one-line stats on stderr (0: off; default 1)")
    o.add_argument("--batch-size", type=ranged(1, 65536), default=512,
                   help="most packets drained and processed as one batch (default 512)")

    c = p.add_argument_group("control plane")
    c.add_argument("--p4runtime", type=_control_address, metavar="[HOST:]PORT",
                   help="serve P4Runtime here; without HOST on loopback (127.0.0.1) only, 0.0.0.0 for "
                        "every interface (port 0 picks one, printed as 'p4runtime on HOST:PORT'); "
                        "see control_plane/README.md and docs/security.md")
    c.add_argument("--tls-cert", metavar="PEM", help="P4Runtime over TLS: the server's certificate (chain)")
    c.add_argument("--tls-key", metavar="PEM", help="P4Runtime over TLS: the server's private key")
    c.add_argument("--tls-client-ca", metavar="PEM",
                   help="mutual TLS: accept only clients with a certificate signed by this CA")
    c.add_argument("--device-id", type=ranged(0, 2**63 - 1), default=1,
                   help="P4Runtime device id (default 1)")


def _problem(args: argparse.Namespace) -> str | None:
    """The first thing wrong with the arguments, checked before anything is opened; None when all is well."""
    if bool(args.listen) == bool(args.interfaces):
        return "give either --listen HOST:PORT or one or more -i PORT@IFACE"
    if args.listen and (args.forwarding or args.route):
        return "--forwarding and --route are for interface mode (-i PORT@IFACE); UDP mode answers the sender"
    seen_ports: set[int] = set()
    seen_ifaces: set[str] = set()
    for port, iface in args.interfaces:
        if port in seen_ports or iface in seen_ifaces:
            return f"-i {port}@{iface}: port {port} or interface {iface} is given twice"
        seen_ports.add(port)
        seen_ifaces.add(iface)
        try:
            socket.if_nametoindex(iface)
        except OSError:
            return f"-i {port}@{iface}: there is no network interface {iface!r} here"
    if args.cluster_quota is not None and args.cluster_quota > args.capacity:
        return f"--cluster-quota must be 1..--capacity ({args.capacity}), not {args.cluster_quota}"
    if args.threshold is not None:
        largest = INT32_MAX / (1 << args.frac_bits)
        if not 0 <= args.threshold <= largest:
            return (f"--threshold must be between 0 and {largest:.10g} (the largest reward representable "
                    f"with --frac-bits {args.frac_bits}), not {args.threshold:g}")
    tls = {"--tls-cert": args.tls_cert, "--tls-key": args.tls_key, "--tls-client-ca": args.tls_client_ca}
    if any(tls.values()) and not args.p4runtime:
        return f"{', '.join(k for k, v in tls.items() if v)}: TLS is for the P4Runtime server (--p4runtime)"
    if bool(args.tls_cert) != bool(args.tls_key):
        return "--tls-cert and --tls-key go together (the server's certificate and its key)"
    if args.tls_client_ca and not args.tls_cert:
        return "--tls-client-ca needs --tls-cert and --tls-key: the server must present a certificate too"
    if args.p4runtime:
        host, port = args.p4runtime
        try:
            family, kind, proto, _, where = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                probe.bind(where)
        except OSError as e:
            return f"--p4runtime {host}:{port}: cannot listen there: {e.strerror or e}"
    return None


def _check_ports(impairment: Impairment, ports: set[int], udp: bool) -> str | None:
    """Drop and delay settings name ports the switch has (UDP mode has port 0 only)."""
    for option, values in (("--drop-prob", impairment.drop_prob), ("--delay-ms", impairment.delay_ms)):
        for port in values:
            if port is not None and port not in ports:
                have = "UDP mode has port 0 only" if udp else f"the switch's ports are {sorted(ports)}"
                return f"{option} {port}:...: no port {port} ({have})"
    return None


def _make_pcap_dir(path: str) -> str | None:
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        return f"--pcap {path}: exists and is not a directory"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / ".olaf-write-test").touch()
        (directory / ".olaf-write-test").unlink()
    except OSError as e:
        return f"--pcap {path}: cannot write pcap files there: {e.strerror or e}"
    return None


def run(args: argparse.Namespace) -> int:
    # The switch, its queue, codec and ACL: ~25 ms of imports that every `olaf ...` would pay
    # (cli.py builds every subcommand's parser), so imported when the command runs.
    from dataplane.acl import SourceAcl
    from dataplane.queue import OlafQueue, QueueConfig
    from dataplane.switch import StatsLine, UdpSwitch

    def fail(message: str) -> int:
        print(f"olaf switch: error: {message}", file=sys.stderr)
        return 2

    problem = _problem(args)
    if problem is not None:
        return fail(problem)
    for cluster, prefix in args.cluster_sources:
        if cluster >= args.max_clusters:
            return fail(f"--cluster-source {cluster}={prefix}: cluster {cluster} is not below "
                        f"--max-clusters {args.max_clusters}")
    try:
        impairment = Impairment(
            drop_prob=parse_port_values(args.drop_prob, "--drop-prob", 0.0, 1.0),
            delay_ms=parse_port_values(args.delay_ms, "--delay-ms", 0.0, 60_000.0),
            seed=args.seed,
        )
        threshold = INT32_MAX if args.threshold is None else int(to_fixed(args.threshold, args.frac_bits))
        config = QueueConfig(
            capacity=args.capacity, values=args.values, max_clusters=args.max_clusters,
            max_blocks=args.max_blocks, frac_bits=args.frac_bits,
            mode=Mode.OLAF if args.mode == "olaf" else Mode.FIFO, threshold=threshold,
            congestion_threshold=args.congestion_threshold, cluster_quota=args.cluster_quota,
            feedback=args.feedback,
        )
    except ValueError as e:
        return fail(str(e))
    ports = {0} if args.listen else {p for p, _ in args.interfaces}
    problem = _check_ports(impairment, ports, bool(args.listen))
    credentials = None
    if problem is None and args.tls_cert:
        # grpc: imported when the command runs, so `olaf --help` stays fast.
        from control_plane.tls import TlsError, server_credentials

        try:
            credentials = server_credentials(args.tls_cert, args.tls_key, args.tls_client_ca)
        except TlsError as e:
            problem = str(e)
    if problem is None and args.pcap:
        problem = _make_pcap_dir(args.pcap)
    if problem is not None:
        return fail(problem)

    queue = OlafQueue(config)
    acl = SourceAcl(args.cluster_sources, args.ps_sources)
    pcap = Path(args.pcap) if args.pcap else None
    if args.listen:
        try:
            switch = UdpSwitch(queue, *args.listen, impairment=impairment, pcap_dir=pcap,
                               batch_size=args.batch_size, acl=acl)
        except OSError as e:
            if e.filename:  # a pcap file, not the socket
                return fail(f"{e.filename}: {e.strerror}")
            return fail(f"--listen {args.listen[0]}:{args.listen[1]}: cannot listen there: {e.strerror}")
        where = f"udp {switch.address[0]}:{switch.address[1]}"
    else:
        # dataplane.ethernet: interface mode only (and the cost of dataplane.switch above).
        from dataplane.ethernet import EthernetSwitch

        try:
            table = ForwardingTable.from_sources(args.forwarding, args.route)
            switch = EthernetSwitch(queue, dict(args.interfaces), table, impairment=impairment,
                                    pcap_dir=pcap, batch_size=args.batch_size, acl=acl)
        except (OSError, ValueError) as e:
            return fail(str(e))
        where = "interfaces " + " ".join(f"{p}@{i}" for p, i in args.interfaces)

    stop = stop_on_signals()
    p4runtime = None
    if args.p4runtime:
        # grpc and p4runtime: imported when the command runs, so `olaf --help` stays fast.
        from control_plane.service import P4RuntimeServer

        try:
            p4runtime = P4RuntimeServer(switch, f"{args.p4runtime[0]}:{args.p4runtime[1]}",
                                        device_id=args.device_id, credentials=credentials).start()
        except OSError as e:
            switch.close()
            return fail(str(e))
    print(f"listening on {where}", flush=True)
    if p4runtime is not None:
        print(f"p4runtime on {p4runtime.address}", flush=True)
        if credentials is None and not _is_loopback(args.p4runtime[0]):
            print(f"olaf switch: warning: P4Runtime on {p4runtime.address} is plaintext without client "
                  "authentication: whoever reaches it controls the switch (see --tls-client-ca)",
                  file=sys.stderr, flush=True)
    stats = StatsLine(switch.pipeline, args.stats_interval,
                      lambda line: print(line, file=sys.stderr, flush=True))
    try:
        switch.serve(stop, stats)
    finally:
        if p4runtime is not None:
            p4runtime.stop()
        switch.close()
        print(switch.final_line(), flush=True)
    return 0


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
