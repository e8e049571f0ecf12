"""``olaf ctl``: the OLAF controller on the command line (P4Runtime, any target)."""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from bmv2_topologies.topology import load as load_testbed_topology
from control_plane.device_config import bmv2_device_config, tofino_device_config
from olaf.argtypes import ranged

HELP = "control an OLAF switch over P4Runtime (software switch, bmv2 simple_switch_grpc, Tofino)"

DEFAULT_P4INFO = Path(__file__).resolve().parents[2] / "p4" / "olaf.p4info.txtpb"


def _election_id(text: str) -> tuple[int, int]:
    high, sep, low = text.partition(",")
    if not sep:
        high, low = "0", text
    try:
        value = (int(high), int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HIGH,LOW or N, got {text!r}") from None
    if not all(0 <= v < 2**64 for v in value):
        raise argparse.ArgumentTypeError("election id parts must be 0..2**64-1")
    return value


MAX_PORT = 511
"""Ports are ``bit<9>`` in v1model (and in the P4Info of every OLAF target)."""


def _target(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return text



def _finite(lo: float, positive: bool = False) -> type:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
        if not lo <= value < float("inf") or (positive and value == lo):
            relation = ">" if positive else ">="
            raise argparse.ArgumentTypeError(f"{text} must be a finite number {relation} {lo:g}")
        return value

    parse.__name__ = "float"
    return parse  # type: ignore[return-value]


def _prefix(text: str) -> str:
    try:
        ipaddress.IPv4Network(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected an IPv4 prefix A.B.C.D/N, got {text!r} ({e})") from None
    return text


def _port_prob(text: str) -> tuple[int | None, float]:
    port, _, prob = text.rpartition(":")
    try:
        value = (int(port) if port else None, float(prob))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected [PORT:]P, got {text!r}") from None
    if not 0.0 <= value[1] <= 1.0:
        raise argparse.ArgumentTypeError(f"probability {value[1]} is outside [0, 1]")
    if value[0] is not None and not 0 <= value[0] <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"port {value[0]} is outside 0..{MAX_PORT}")
    return value


def _route(text: str) -> tuple[str, int, str | None]:
    prefix, sep, rest = text.partition("=")
    port, _, mac = rest.partition(",")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected PREFIX=PORT[,MAC], got {text!r}")
    if int(port) > MAX_PORT:
        raise argparse.ArgumentTypeError(f"port {port} is outside 0..{MAX_PORT}")
    return _prefix(prefix), int(port), mac or None


def _prefixes(text: str) -> list[str]:
    """``PREFIX[,PREFIX...]`` (host bits zero); empty: none."""
    # dataplane.acl: ~3 ms of imports that every `olaf ...` would pay (cli.py builds every
    # subcommand's parser), so imported when an argument is parsed.
    from dataplane.acl import parse_prefix

    try:
        return [str(parse_prefix(t)) for t in text.split(",")] if text.strip() else []
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cluster_prefixes(text: str) -> tuple[int, list[str]]:
    cluster, sep, prefixes = text.partition("=")
    if not sep or not cluster.strip().isdigit() or int(cluster) >= 1 << 16:
        raise argparse.ArgumentTypeError(f"expected CLUSTER=PREFIX[,PREFIX...] with CLUSTER 0..65535, "
                                         f"got {text!r}")
    return int(cluster), _prefixes(prefixes)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, type=_target, metavar="HOST:PORT",
                   help="the target's P4Runtime server (olaf switch --p4runtime, simple_switch_grpc: 9559)")
    p.add_argument("--device-id", type=ranged(0, 2**64 - 1), default=1,
                   help="P4Runtime device id (default 1; simple_switch_grpc's is its --device-id, default 0)")
    p.add_argument("--election-id", type=_election_id, default=None, metavar="HIGH,LOW",
                   help="arbitration election id; the highest is primary. Default: 0,1 for actions "
                        "that write, none (a read-only backup that disturbs no running controller) "
                        "for the others")
    p.add_argument("--timeout", type=_finite(0.0, positive=True), default=5.0,
                   help="seconds to wait for the connection and for arbitration (default 5)")
    p.add_argument("--tls-ca", metavar="PEM", help="TLS: the CA that signed the target's certificate")
    p.add_argument("--tls-cert", metavar="PEM",
                   help="mutual TLS: this controller's certificate (with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", help="mutual TLS: this controller's private key")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    push = sub.add_parser("push", help="push the pipeline (P4Info + device config), then a topology")
    push.add_argument("--p4info", default=str(DEFAULT_P4INFO), help="P4Info (default p4/olaf.p4info.txtpb)")
    dev = push.add_mutually_exclusive_group()
    dev.add_argument("--bmv2-json", metavar="FILE", help="bmv2 target: the JSON p4c-bm2-ss wrote")
    dev.add_argument("--tofino-bin", metavar="FILE", help="Tofino target: tofino.bin from bf-p4c")
    dev.add_argument("--device-config", metavar="FILE",
                     help="any target: device config bytes as they are (e.g. stratum_bfrt's "
                          "BfPipelineConfig from bf_pipeline_builder)")
    push.add_argument("--tofino-context", metavar="FILE", help="Tofino target: context.json from bf-p4c")
    push.add_argument("--tofino-name", default="olaf", help="Tofino target: program name (default olaf)")
    how = push.add_mutually_exclusive_group()
    how.add_argument("--reconcile", action="store_true",
                     help="RECONCILE_AND_COMMIT: keep routes and settings (default clears them)")
    how.add_argument("--verify-only", action="store_true",
                     help="VERIFY: only ask whether the target can run it")
    _topology_args(push)

    routes = sub.add_parser("routes", help="list, add or delete ipv4_lpm routes")
    routes.add_argument("--add", type=_route, action="append", default=[], metavar="PREFIX=PORT[,MAC]")
    routes.add_argument("--delete", type=_prefix, action="append", default=[], metavar="PREFIX")
    _topology_args(routes)

    s = sub.add_parser("set", help="set mode, thresholds, the cluster quota, the feedback revision "
                       "and drop probabilities")
    s.add_argument("--mode", choices=("olaf", "fifo"))
    thr = s.add_mutually_exclusive_group()
    thr.add_argument("--threshold", type=_finite(0.0), metavar="R", help="reward threshold in reward units")
    thr.add_argument("--raw-threshold", type=int, metavar="N", help="reward threshold, raw fixed point")
    s.add_argument("--congestion-threshold", type=ranged(0, 255), metavar="0-255")
    # 1..capacity; the capacity is the target's, so the upper bound is checked against it
    # (Controller.configure) before anything is written.
    s.add_argument("--cluster-quota", type=ranged(1, 65535), metavar="N",
                   help="slots one cluster may hold, 1..capacity (capacity: no limit; DESIGN.md §3)")
    s.add_argument("--feedback", type=int, choices=(2, 3),
                   help="what an UPDATE's ACK says in queue_util: 3, the share of the queue its "
                        "cluster can no longer use; 2, the global occupancy (DESIGN.md §3 Feedback)")
    s.add_argument("--drop-prob", type=_port_prob, action="append", default=[], metavar="[PORT:]P",
                   help="drop_sim: drop responses leaving PORT (every port without PORT) with probability P")

    sub.add_parser("show", help="settings, queue state, counters and drop probabilities")
    c = sub.add_parser("counters", help="packets per outcome and per message type")
    c.add_argument("--reset", action="store_true", help="set every counter to 0 afterwards")
    r = sub.add_parser("registers", help="queue state registers (bmv2 serves none over P4Runtime, "
                       "p4lang/PI#376: use its Thrift server, simple_switch_CLI register_read)")
    r.add_argument("names", nargs="*", metavar="NAME", help="registers to read (default: the queue state)")
    w = sub.add_parser("watch", help="counter rates and queue state every interval")
    w.add_argument("--interval", type=float, default=1.0, metavar="S")
    w.add_argument("--count", type=ranged(0, 2**31), default=0, metavar="N",
                   help="stop after N lines (0: until Ctrl-C)")
    sub.add_parser("caps", help="the target's P4Runtime API version")
    src = sub.add_parser("sources", help="source checks (docs/security.md): who may UPDATE a cluster, "
                         "who may PULL; list them and what they refused")
    src.add_argument("--cluster", type=_cluster_prefixes, action="append", default=[],
                     metavar="C=PREFIX[,PREFIX...]",
                     help="accept UPDATEs for cluster C only from these prefixes (repeatable); "
                          "'C=' removes C's entries")
    src.add_argument("--ps", type=_prefixes, metavar="PREFIX[,PREFIX...]",
                     help="accept PULLs only from these prefixes; '--ps=' removes the entries")
    unlisted = src.add_mutually_exclusive_group()
    unlisted.add_argument("--close-unlisted", action="store_true",
                          help="refuse UPDATEs for clusters without entries (update_source default deny)")
    unlisted.add_argument("--open-unlisted", action="store_true",
                          help="accept UPDATEs for clusters without entries (default permit)")


def _topology_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topology", metavar="FILE",
                   help="install routes and drop probabilities from a JSON file")
    p.add_argument("--switch", metavar="NAME", help="the switch's section in a multi-switch topology file")


def _print_table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    # rich: imported when a table is printed, so `olaf --help` stays fast.
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, justify="right" if col in ("packets", "value", "port", "index") else "left")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    Console(soft_wrap=True).print(table)


def run(args: argparse.Namespace) -> int:
    # grpc and p4runtime: imported when the command runs, so `olaf --help` stays fast.
    from control_plane.controller import Controller, ControllerError

    # p4runtime-shell logs a broken stream at CRITICAL on the root logger; the CLI reports
    # the error itself, once, so the root logger gets a handler that prints nothing.
    root = logging.getLogger()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())

    def fail(message: str, code: int = 1) -> int:
        print(f"olaf ctl: error: {message}", file=sys.stderr)
        return code

    if args.action == "push" and bool(args.tofino_bin) != bool(args.tofino_context):
        return fail("--tofino-bin and --tofino-context go together", 2)
    try:
        topology = _load_topology(args.topology, args.switch) if getattr(args, "topology", None) else None
    except ValueError as e:
        return fail(str(e), 2)
    writes = args.action in ("push", "set") or (args.action == "counters" and args.reset) or (
        args.action == "routes" and (args.add or args.delete or topology is not None)) or (
        args.action == "sources" and (args.cluster or args.ps is not None or args.close_unlisted
                                      or args.open_unlisted))
    election_id = args.election_id or ((0, 1) if writes else None)
    tls = None
    if args.tls_ca or args.tls_cert or args.tls_key:
        # grpc: imported when the command runs, so `olaf --help` stays fast.
        from control_plane.tls import ClientTls, TlsError

        tls = ClientTls(args.tls_ca, args.tls_cert, args.tls_key)
        try:
            tls.credentials()
        except TlsError as e:
            return fail(str(e), 2)
    controller = Controller(args.target, device_id=args.device_id, election_id=election_id,
                            timeout=args.timeout, tls=tls)
    try:
        controller.open()
    except (ConnectionError, RuntimeError) as e:
        return fail(str(e))
    try:
        return _ACTIONS[args.action](controller, args, topology)
    except ControllerError as e:
        if e.code == "PERMISSION_DENIED" and election_id is not None and not controller.is_primary:
            arb = controller.client.arbitration
            if arb is not None and arb.HasField("election_id"):
                highest = f"{arb.election_id.high},{arb.election_id.low}"
                return fail(f"{e} (the target has seen election id {highest}; to take over, "
                            "pass a higher --election-id)")
        return fail(str(e))
    except (OSError, ValueError) as e:
        return fail(str(e), 2)
    except KeyboardInterrupt:
        return 130
    finally:
        controller.close()


def _load_topology(path: str, switch: str | None) -> Any:
    """A control_plane ``Topology``: from its own JSON format, or derived from a p4lang/tutorials
    style topology (``hosts``/``switches``/``links``, as in ``bmv2_topologies/``)."""
    # grpc and p4runtime: imported when the command runs, so `olaf --help` stays fast.
    from control_plane.controller import Topology

    try:
        spec = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read topology {path}: {e}") from None
    if not isinstance(spec, dict) or "links" not in spec:
        return Topology.load(path, switch)
    topo = load_testbed_topology(path)
    if switch is None:
        if len(topo.switches) != 1:
            raise ValueError(f"{path} has switches {sorted(topo.switches)}: pick one with --switch")
        switch = next(iter(topo.switches))
    if switch not in topo.switches:
        raise ValueError(f"{path} has no switch {switch!r} (it has {sorted(topo.switches)})")
    return Topology(topo.routes(switch))


def _emit(args: argparse.Namespace, doc: dict[str, Any], tables: list[tuple[str, list[str], list[list[Any]]]]
          ) -> None:
    if args.json:
        print(json.dumps(doc, sort_keys=True), flush=True)
        return
    for title, columns, rows in tables:
        _print_table(title, columns, rows)


def _push(c: Any, args: argparse.Namespace, topology: Any) -> int:
    if args.bmv2_json:
        device_config = bmv2_device_config(args.bmv2_json)
    elif args.tofino_bin:
        device_config = tofino_device_config(args.tofino_name, args.tofino_bin, args.tofino_context)
    elif args.device_config:
        device_config = Path(args.device_config).read_bytes()
    else:
        device_config = b""
    action = "verify" if args.verify_only else "reconcile" if args.reconcile else "commit"
    c.push_pipeline(args.p4info, device_config, action=action)
    installed = c.install_topology(topology) if topology is not None and action != "verify" else 0
    doc = {"target": args.target, "p4info": args.p4info, "action": action,
           "device_config_bytes": len(device_config), "topology_entries": installed}
    _emit(args, doc, [("pipeline", ["field", "value"], [[k, v] for k, v in doc.items()])])
    return 0


def _routes(c: Any, args: argparse.Namespace, topology: Any) -> int:
    for prefix in args.delete:
        c.delete_route(prefix)
    for prefix, port, mac in args.add:
        c.add_route(prefix, port, mac)
    if topology is not None:
        c.install_topology(topology)
    routes = c.routes()
    doc = {"routes": [{"prefix": r.prefix, "port": r.port, "mac": r.mac} for r in routes]}
    _emit(args, doc, [("ipv4_lpm", ["prefix", "port", "mac"], [[r.prefix, r.port, r.mac] for r in routes])])
    return 0


def _set(c: Any, args: argparse.Namespace, *_: Any) -> int:
    for port, prob in args.drop_prob:
        c.set_drop_prob(port, prob)
    if args.threshold is not None:
        c.set_reward_threshold(args.threshold)
    if (args.mode or args.raw_threshold is not None or args.congestion_threshold is not None
            or args.cluster_quota is not None or args.feedback is not None):
        c.configure(mode=args.mode, threshold=args.raw_threshold,
                    congestion_threshold=args.congestion_threshold, cluster_quota=args.cluster_quota,
                    feedback=args.feedback)
    settings = c.settings()
    _emit(args, {"settings": settings.as_dict()},
          [("olaf_config", ["field", "value"], [[k, v] for k, v in settings.as_dict().items()])])
    return 0


def _counter_rows(counters: dict[str, dict[str, int]]) -> list[list[Any]]:
    return [[group, name, n] for group, values in counters.items() for name, n in values.items()]


def _show(c: Any, args: argparse.Namespace, *_: Any) -> int:
    settings, state, counters, drops = c.settings(), c.queue_state(), c.counters(), c.drop_probs()
    doc = {"settings": settings.as_dict(), "queue": state, "counters": counters,
           "drop_prob": {"*" if p is None else str(p): v for p, v in drops.items()}}
    state_rows = [[k, v] for k, v in state.items()] if state else [["registers", "not served by this target"]]
    _emit(args, doc, [
        ("olaf_config", ["field", "value"], [[k, v] for k, v in settings.as_dict().items()]),
        ("queue state", ["field", "value"], state_rows),
        ("counters", ["counter", "name", "packets"], _counter_rows(counters)),
        ("drop_sim", ["port", "probability"], [[k, v] for k, v in doc["drop_prob"].items()]),
    ])
    return 0


def _counters(c: Any, args: argparse.Namespace, *_: Any) -> int:
    counters = c.counters()
    if args.reset:
        c.reset_counters()
    _emit(args, {"counters": counters},
          [("counters", ["counter", "name", "packets"], _counter_rows(counters))])
    return 0


def _registers(c: Any, args: argparse.Namespace, *_: Any) -> int:
    # grpc and p4runtime: imported when the command runs, so `olaf --help` stays fast.
    from control_plane.readings import QUEUE_REGISTERS

    names = args.names or list(QUEUE_REGISTERS)
    values = {name: c.register(name) for name in names}
    _emit(args, {"registers": values},
          [("registers", ["register", "index", "value"],
            [[name, i, v] for name, cells in values.items() for i, v in enumerate(cells)])])
    return 0


def _watch(c: Any, args: argparse.Namespace, *_: Any) -> int:
    if not args.interval > 0:
        raise ValueError("--interval must be > 0")
    last, last_t = c.counters(), time.monotonic()
    lines = 0
    if not args.json:
        print(f"{'time':>8} {'occupied':>8} {'clusters':>8} " + " ".join(f"{n.lower():>15}/s" for n in
                                                                         last["outcomes"]), flush=True)
    start = last_t
    while args.count <= 0 or lines < args.count:
        time.sleep(args.interval)
        now, counters, state = time.monotonic(), c.counters(), c.queue_state()
        rates = {n: (v - last["outcomes"].get(n, 0)) / (now - last_t)
                 for n, v in counters["outcomes"].items()}
        if args.json:
            print(json.dumps({"t": round(now - start, 3), "queue": state, "rates": rates,
                              "counters": counters}, sort_keys=True), flush=True)
        else:
            occ = "-" if state is None else state["occupied"]
            act = "-" if state is None else state["active_clusters"]
            print(f"{now - start:8.1f} {occ!s:>8} {act!s:>8} "
                  + " ".join(f"{r:17.1f}" for r in rates.values()), flush=True)
        last, last_t = counters, now
        lines += 1
    return 0


def _sources(c: Any, args: argparse.Namespace, *_: Any) -> int:
    # Clusters are closed before the unlisted ones open, never the other way round.
    if args.close_unlisted:
        c.close_unlisted_clusters(True)
    for cluster, prefixes in args.cluster:
        c.set_cluster_sources(cluster, prefixes)
    if args.ps is not None:
        c.set_ps_sources(args.ps)
    if args.open_unlisted:
        c.close_unlisted_clusters(False)
    tables, refused = c.source_rules(), c.counters().get("refused", {})
    doc = {"sources": {name: {"rules": [{"cluster": r.cluster, "prefix": str(r.prefix),
                                         "action": "permit" if r.permit else "deny"} for r in rules],
                              "default": "permit" if default else "deny"}
                       for name, (rules, default) in tables.items()},
           "refused": refused}
    rows = [[name, "-" if r.cluster is None else r.cluster, str(r.prefix), "permit" if r.permit else "deny"]
            for name, (rules, _) in tables.items() for r in rules]
    rows += [[name, "*", "default", "permit" if default else "deny"] for name, (_, default) in tables.items()]
    _emit(args, doc, [("source checks", ["table", "cluster", "prefix", "action"], rows),
                      ("refused", ["reason", "packets"], [[k, v] for k, v in refused.items()])])
    return 0


def _caps(c: Any, args: argparse.Namespace, *_: Any) -> int:
    doc = {"p4runtime_api_version": c.capabilities(), "primary": c.is_primary, "pipeline": c.has_pipeline}
    _emit(args, doc, [("capabilities", ["field", "value"], [[k, v] for k, v in doc.items()])])
    return 0


_ACTIONS = {"push": _push, "routes": _routes, "set": _set, "show": _show, "counters": _counters,
            "registers": _registers, "watch": _watch, "caps": _caps, "sources": _sources}
