"""``olaf switch``: the software OLAF switch as a process (UDP or AF_PACKET interfaces)."""

from __future__ import annotations

import argparse
import sys

HELP = "run the software OLAF switch (the reference OlafQueue) on UDP or on interfaces"


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def _port_iface(text: str) -> tuple[int, str]:
    port, sep, iface = text.partition("@")
    if not sep or not port.isdigit() or not iface:
        raise argparse.ArgumentTypeError(f"expected PORT@IFACE, got {text!r}")
    return int(port), iface


def _ranged(lo: int, hi: int) -> type:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside {lo}..{hi}")
        return value

    parse.__name__ = "int"
    return parse  # type: ignore[return-value]


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
    q.add_argument("--capacity", type=_ranged(1, 65535), default=64, help="slots (default 64)")
    q.add_argument("--values", type=_ranged(1, 255), default=64, help="V, values per block (default 64)")
    q.add_argument("--max-clusters", type=_ranged(1, 65536), default=16, help="default 16")
    q.add_argument("--max-blocks", type=_ranged(1, 65536), default=1024, help="default 1024")
    q.add_argument("--mode", choices=("olaf", "fifo"), default="olaf",
                   help="olaf: merge/replace/drop by reward; fifo: drop-tail baseline (default olaf)")
    q.add_argument("--threshold", type=float, default=None,
                   help="reward threshold in reward units (default: the largest representable, "
                        "so every compatible update merges until the controller sets one)")
    q.add_argument("--congestion-threshold", type=_ranged(0, 255), default=192,
                   help="CONGESTED when queue_util >= this, 0-255 (default 192 = 75%%)")
    q.add_argument("--frac-bits", type=_ranged(0, 31), default=16,
                   help="fixed-point fraction bits every UPDATE must carry (default 16)")

    o = p.add_argument_group("emulation and observation")
    o.add_argument("--drop-prob", action="append", default=[], metavar="[PORT:]P",
                   help="drop responses leaving PORT (all ports without PORT) with probability P "
                        "(repeatable; UDP mode has port 0)")
    o.add_argument("--delay-ms", action="append", default=[], metavar="[PORT:]MS",
                   help="delay responses leaving PORT by MS milliseconds (repeatable)")
    o.add_argument("--seed", type=int, default=None, help="seed of the drop simulator")
    o.add_argument("--pcap", metavar="DIR", help="record every port's traffic as pcap files in DIR")
    o.add_argument("--stats-interval", type=float, default=1.0, metavar="S",
                   help="seconds between one-line stats on stderr (0: off; default 1)")
    o.add_argument("--batch-size", type=_ranged(1, 65536), default=512,
                   help="most packets drained and processed as one batch (default 512)")

    c = p.add_argument_group("control plane")
    c.add_argument("--p4runtime", type=_host_port, metavar="HOST:PORT",
                   help="serve P4Runtime here (port 0 picks one, printed as 'p4runtime on HOST:PORT'); "
                        "see control_plane/README.md")
    c.add_argument("--device-id", type=_ranged(0, 2**63 - 1), default=1,
                   help="P4Runtime device id (default 1)")


def run(args: argparse.Namespace) -> int:
    import signal
    import threading
    from pathlib import Path

    from dataplane.impairment import Impairment, parse_port_values
    from dataplane.queue import OlafQueue, QueueConfig
    from dataplane.switch import StatsLine, UdpSwitch
    from worker_transport.fixedpoint import to_fixed
    from worker_transport.protocol import INT32_MAX, Mode

    def fail(message: str) -> int:
        print(f"olaf switch: error: {message}", file=sys.stderr)
        return 2

    if bool(args.listen) == bool(args.interfaces):
        return fail("give either --listen HOST:PORT or one or more -i PORT@IFACE")
    if args.threshold is not None and not args.threshold >= 0:
        return fail("--threshold must be >= 0")
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
            congestion_threshold=args.congestion_threshold,
        )
    except ValueError as e:
        return fail(str(e))

    queue = OlafQueue(config)
    pcap = Path(args.pcap) if args.pcap else None
    if args.listen:
        try:
            switch = UdpSwitch(queue, *args.listen, impairment=impairment, pcap_dir=pcap,
                               batch_size=args.batch_size)
        except OSError as e:
            return fail(f"cannot listen on {args.listen[0]}:{args.listen[1]}: {e.strerror}")
        where = f"udp {switch.address[0]}:{switch.address[1]}"
    else:
        from dataplane.ethernet import EthernetSwitch
        from dataplane.forwarding import ForwardingTable

        try:
            table = ForwardingTable.from_sources(args.forwarding, args.route)
            switch = EthernetSwitch(queue, dict(args.interfaces), table, impairment=impairment,
                                    pcap_dir=pcap, batch_size=args.batch_size)
        except (OSError, ValueError) as e:
            return fail(str(e))
        where = "interfaces " + " ".join(f"{p}@{i}" for p, i in args.interfaces)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    p4runtime = None
    if args.p4runtime:
        from control_plane.service import P4RuntimeServer

        try:
            p4runtime = P4RuntimeServer(switch, f"{args.p4runtime[0]}:{args.p4runtime[1]}",
                                        device_id=args.device_id).start()
        except OSError as e:
            switch.close()
            return fail(str(e))
    print(f"listening on {where}", flush=True)
    if p4runtime is not None:
        print(f"p4runtime on {p4runtime.address}", flush=True)
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
