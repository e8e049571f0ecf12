"""The OLAF controller: one P4Runtime session with one target, built on p4runtime-shell.

The same code drives the software switch (``olaf switch --p4runtime``), bmv2's
``simple_switch_grpc`` and a Tofino's P4Runtime server; only the device config pushed
with the P4Info differs (``device_config``).

p4runtime-shell keeps its client and P4Info in module globals
(``p4runtime_sh.shell.client`` / ``.context``), which its entity classes (``TableEntry``,
``CounterEntry``) use. ``Controller`` owns them for its lifetime: it installs its client
when it opens, removes it when it closes, and refuses to open while another session holds
them in the same process.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh import shell as sh
from p4runtime_sh.global_options import Options, global_options
from p4runtime_sh.p4runtime import P4RuntimeClient, P4RuntimeException, P4RuntimeWriteException, SSLOptions
from p4runtime_sh.utils import UserError

from control_plane.p4info import (
    CONFIG_TABLE,
    DENY,
    DROP_SIM_TABLE,
    IPV4_FORWARD,
    LPM_TABLE,
    MSG_TYPE_COUNTER,
    OUTCOME_COUNTER,
    PERMIT,
    PULL_SOURCE_TABLE,
    REFUSED_COUNTER,
    REG_ACTIVE_CLUSTERS,
    REG_CLUSTER_COUNT,
    REG_OCCUPIED,
    REG_READ_PTR,
    REG_WRITE_PTR,
    SET_CONFIG,
    SET_DROP_PROB,
    UPDATE_SOURCE_TABLE,
    load_p4info,
)
from control_plane.threshold import (  # noqa: F401 - ThresholdLoop & co. are also imported from here
    ThresholdLoop,
    ThresholdStep,
    pipeline_threshold_setter,
    raw_threshold,
)
from control_plane.tls import ClientTls
from dataplane.acl import AclRule, Refusal, parse_prefix
from dataplane.forwarding import Route, parse_routes  # Route is also imported from here (olaf ctl)
from dataplane.queue import check_cluster_quota
from worker_transport.protocol import INT32_MAX, Mode, MsgType, Outcome

PROB_ONE = 1 << 16
EVERYWHERE = ipaddress.IPv4Network("0.0.0.0/0")
SOURCE_TABLES = {"update_source": UPDATE_SOURCE_TABLE, "pull_source": PULL_SOURCE_TABLE}
QUEUE_REGISTERS = (REG_OCCUPIED, REG_READ_PTR, REG_WRITE_PTR, REG_ACTIVE_CLUSTERS, REG_CLUSTER_COUNT)


class ControllerError(RuntimeError):
    """A failed P4Runtime operation, with the status code name the target gave."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _code_name(number: int) -> str:
    return code_pb2.Code.Name(number) if number in code_pb2.Code.values() else str(number)


@contextlib.contextmanager
def _p4rt_errors(what: str) -> Iterator[None]:
    """p4runtime-shell raises three kinds of errors; callers get one, with the code."""
    try:
        yield
    except P4RuntimeWriteException as e:
        first = e.errors[0][1] if e.errors else None
        if first is None:
            raise ControllerError("UNKNOWN", f"{what}: {e}") from None
        raise ControllerError(_code_name(first.canonical_code), f"{what}: {first.message}") from None
    except P4RuntimeException as e:
        err = e.grpc_error
        raise ControllerError(err.code().name, f"{what}: {err.details()}") from None
    except grpc.RpcError as e:
        raise ControllerError(e.code().name, f"{what}: {e.details()}") from None
    except UserError as e:
        raise ControllerError("INVALID_ARGUMENT", f"{what}: {e}") from None


class _Client(P4RuntimeClient):
    """p4runtime-shell's client, with a handshake that reports instead of exiting.

    The stock handshake calls ``sys.exit`` when no arbitration answer comes and prints to
    stdout when the client is a backup; a library must do neither.
    """

    def set_up_stream(self) -> None:
        # A listener that is not a gRPC server, or TLS settings the server does not accept,
        # never make the channel ready; the stream would then wait for gRPC's own connect
        # timeout (about 20 s) whatever the caller's timeout says.
        try:
            grpc.channel_ready_future(self.channel).result(timeout=self.connect_timeout)
        except grpc.FutureTimeoutError:
            self.channel.close()
            raise ConnectionError(f"no gRPC connection within {self.connect_timeout:g} s (not a P4Runtime "
                                  "server, or TLS settings that do not match the server's)") from None
        super().set_up_stream()

    def handshake(self) -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        if self.election_id is not None:
            req.arbitration.election_id.high, req.arbitration.election_id.low = self.election_id
        self.stream_out_q.put(req)
        rep = self.get_stream_packet("arbitration", timeout=self.connect_timeout)
        if rep is None:
            reason = "no arbitration answer"
            with contextlib.suppress(Exception):
                if self.stream.done():
                    reason = f"{self.stream.code().name}: {self.stream.details()}"
            self.stream.cancel()  # else tear_down waits for a server that does not answer
            self.tear_down()
            raise ConnectionError(reason)
        self.arbitration = rep.arbitration

    def __init__(self, device_id: int, address: str, election_id: tuple[int, int] | None,
                 timeout: float, tls: ClientTls | None = None) -> None:
        self.connect_timeout = timeout
        self.arbitration: p4runtime_pb2.MasterArbitrationUpdate | None = None
        ssl_options = None
        if tls is not None:
            tls.credentials()  # checks the files first: TlsError names the one that is wrong
            ssl_options = SSLOptions(False, tls.ca, tls.cert, tls.key)
        super().__init__(device_id, address, election_id, ssl_options=ssl_options)


@dataclass(frozen=True)
class QueueSettings:
    """What ``olaf_config``'s default action holds on a target."""

    mode: Mode
    threshold: int
    """Raw fixed point, ``frac_bits`` fraction bits."""
    congestion_threshold: int
    frac_bits: int
    capacity: int
    max_clusters: int
    max_blocks: int
    cluster_quota: int
    """Slots one cluster may hold (DESIGN.md §3 step 4); ``capacity`` means no limit."""

    @property
    def reward_threshold(self) -> float:
        return math.ldexp(self.threshold, -self.frac_bits)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mode"] = self.mode.name
        d["reward_threshold"] = self.reward_threshold
        return d


def bmv2_device_config(json_path: str | Path) -> bytes:
    """bmv2's device config is the JSON that ``p4c-bm2-ss`` writes."""
    return Path(json_path).read_bytes()


def tofino_device_config(program_name: str, binary_path: str | Path, context_path: str | Path) -> bytes:
    """Tofino device config in PI's packing (PI's Barefoot backend, Stratum's ``stratum_bf``).

    Little-endian 32-bit length and bytes of the program name, then of ``tofino.bin``,
    then of ``context.json`` (both from ``bf-p4c``'s output directory), as ONOS and PI's
    tools build it. Stratum's ``stratum_bfrt`` does not read this packing: it takes a
    ``BfPipelineConfig`` made by Stratum's ``bf_pipeline_builder``, which ``push_pipeline``
    sends as given (``olaf ctl push --device-config FILE``).
    """
    parts = [program_name.encode(), Path(binary_path).read_bytes(), Path(context_path).read_bytes()]
    return b"".join(len(p).to_bytes(4, "little") + p for p in parts)


@dataclass
class Topology:
    """Forwarding and emulation settings for one switch, from a JSON topology file.

    Either the switch's own section ``{"routes": [...], "drop_prob": {...}}`` or a file
    with several, ``{"switches": {"s1": {...}, ...}}``; routes are
    ``{"prefix": "10.0.1.1/32", "port": 1, "mac": "08:00:00:00:01:11"}`` (the format
    ``olaf switch --forwarding`` reads), ``drop_prob`` maps a port (or ``"*"``, every
    port) to a probability.
    """

    routes: list[Route] = field(default_factory=list)
    drop_prob: dict[int | None, float] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path, switch: str | None = None) -> Topology:
        try:
            spec = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read topology {path}: {e}") from None
        if "switches" in spec:
            switches = spec["switches"]
            if switch is None:
                if len(switches) != 1:
                    raise ValueError(f"{path} describes switches {sorted(switches)}: name one")
                switch = next(iter(switches))
            if switch not in switches:
                raise ValueError(f"{path} has no switch {switch!r} (it has {sorted(switches)})")
            spec = switches[switch]
        try:
            routes = parse_routes(spec.get("routes", []))
            drop = {None if k == "*" else int(k): float(v) for k, v in spec.get("drop_prob", {}).items()}
        except (TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"bad topology {path}: {e}") from None
        return cls(routes, drop)


class Controller:
    """A P4Runtime session with one OLAF target, through p4runtime-shell.

    Use as a context manager (or ``open()``/``close()``). ``election_id`` (high, low)
    decides who is primary; only the primary may push a pipeline or write. ``None`` opens
    a read-only session: it never becomes primary, so it never takes over from (or
    clashes with) a running controller.
    """

    def __init__(self, target: str, device_id: int = 1, election_id: tuple[int, int] | None = (1, 0),
                 timeout: float = 5.0, tls: ClientTls | None = None) -> None:
        self.target = target
        self.device_id = device_id
        self.election_id = election_id
        self.timeout = timeout
        self.tls = tls
        """TLS files (CA, and certificate and key for mutual TLS); None: plaintext."""
        self._client: _Client | None = None
        self._lock = threading.Lock()

    # -- lifetime -------------------------------------------------------------------
    def open(self) -> Controller:
        if self._client is not None:
            return self
        if sh.client is not None:
            raise RuntimeError("another p4runtime-shell session is open in this process; close it first")
        self._client = sh.client = self._connect()
        # Entity objects print themselves as they are built unless told not to.
        global_options.set_option(Options.verbose, False)
        try:
            self._load_p4info()
        except Exception:
            self.close()
            raise
        return self

    def _connect(self) -> _Client:
        """The gRPC channel and arbitration stream: everything about how to reach the target."""
        try:
            return _Client(self.device_id, self.target, self.election_id, self.timeout, self.tls)
        except ConnectionError as e:
            raise ConnectionError(f"no P4Runtime session with {self.target} "
                                  f"(device {self.device_id}): {e}") from None

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        if sh.client is client:
            sh.client = None
        client.tear_down()

    def __enter__(self) -> Controller:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def client(self) -> _Client:
        if self._client is None:
            raise RuntimeError("the controller is not open")
        return self._client

    @property
    def is_primary(self) -> bool:
        """Whether the target last told this session it is the primary."""
        client = self.client
        while True:
            update = client.get_stream_packet("arbitration", timeout=0)
            if update is None:
                break
            client.arbitration = update.arbitration
        return self.election_id is not None and client.arbitration is not None \
            and client.arbitration.status.code == code_pb2.OK

    def _load_p4info(self) -> None:
        try:
            with _p4rt_errors("GetForwardingPipelineConfig"):
                p4info = self.client.get_p4info()
        except ControllerError as e:
            # bmv2 answers FAILED_PRECONDITION until a pipeline is pushed; the spec's
            # answer is an unset config. Either way: no pipeline yet.
            if e.code != "FAILED_PRECONDITION":
                raise
            p4info = p4info_pb2.P4Info()
        sh.context.set_p4info(p4info)

    @property
    def has_pipeline(self) -> bool:
        return sh.context.p4info is not None and len(sh.context.p4info.tables) > 0

    def _require_pipeline(self, write: bool = False) -> None:
        self.client  # noqa: B018 - raises when closed
        if write:
            self._require_writer()
        if not self.has_pipeline:
            raise ControllerError("FAILED_PRECONDITION", f"{self.target} has no pipeline: push one first")

    def _require_writer(self) -> None:
        if self.election_id is None:
            raise ControllerError("PERMISSION_DENIED", "read-only session (no election id): cannot write")

    # -- pipeline ---------------------------------------------------------------------
    def push_pipeline(self, p4info: str | Path | p4info_pb2.P4Info, device_config: bytes = b"",
                      action: str = "commit", cookie: int | None = None) -> None:
        """SetForwardingPipelineConfig: ``commit`` (VERIFY_AND_COMMIT, clears forwarding
        state), ``reconcile`` (RECONCILE_AND_COMMIT, keeps it) or ``verify`` (VERIFY only).

        ``device_config``: bmv2 JSON (``bmv2_device_config``), the Tofino blob
        (``tofino_device_config``), or empty for the software switch.
        """
        actions = {"commit": "VERIFY_AND_COMMIT", "reconcile": "RECONCILE_AND_COMMIT", "verify": "VERIFY"}
        if action not in actions:
            raise ValueError(f"action must be one of {sorted(actions)}")
        self._require_writer()
        assert self.election_id is not None
        info = p4info if isinstance(p4info, p4info_pb2.P4Info) else load_p4info(p4info)
        client = self.client
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=self.device_id)
        req.election_id.high, req.election_id.low = self.election_id
        req.action = p4runtime_pb2.SetForwardingPipelineConfigRequest.Action.Value(actions[action])
        req.config.p4info.CopyFrom(info)
        req.config.p4_device_config = device_config
        if cookie is not None:
            req.config.cookie.cookie = cookie
        try:
            with _p4rt_errors("SetForwardingPipelineConfig"):
                client.stub.SetForwardingPipelineConfig(req, timeout=max(self.timeout, 30.0))
        except ControllerError as e:
            # PI (bmv2's server) opens the stream for any device id but can only assign its
            # own; a mismatch shows up here, as this bare message, and nowhere earlier.
            if "assign device" in e.message:
                raise ControllerError(e.code, f"{e.message} (is the target's device id "
                                      f"{self.device_id}? simple_switch_grpc's is --device-id, "
                                      "default 0)") from None
            raise
        if action != "verify":
            sh.context.set_p4info(info)

    def capabilities(self) -> str:
        with _p4rt_errors("Capabilities"):
            return self.client.api_version()

    # -- forwarding ---------------------------------------------------------------------
    def _route_entry(self, route: Route) -> Any:
        te = sh.TableEntry(LPM_TABLE)(action=IPV4_FORWARD)
        if not route.prefix.endswith("/0"):
            te.match["hdr.ipv4.dstAddr"] = route.prefix
        te.action["dstAddr"] = route.mac or "0"
        te.action["port"] = str(route.port)
        return te

    def add_route(self, prefix: str, port: int, mac: str | None = None, replace: bool = False) -> None:
        """Insert an ``ipv4_lpm`` entry; ``replace`` modifies an existing one instead of failing."""
        self._require_pipeline(write=True)
        te = self._route_entry(Route(prefix, port, mac))
        with _p4rt_errors(f"route {prefix}"):
            try:
                te.insert()
            except P4RuntimeWriteException as e:
                if not replace or not e.errors or e.errors[0][1].canonical_code != code_pb2.ALREADY_EXISTS:
                    raise
                te.modify()

    def delete_route(self, prefix: str) -> None:
        self._require_pipeline(write=True)
        te = sh.TableEntry(LPM_TABLE)
        if not prefix.endswith("/0"):
            te.match["hdr.ipv4.dstAddr"] = prefix
        with _p4rt_errors(f"delete route {prefix}"):
            te.delete()

    def routes(self) -> list[Route]:
        self._require_pipeline()
        out = []
        with _p4rt_errors("read ipv4_lpm"):
            for te in sh.TableEntry(LPM_TABLE).read():
                msg = te.msg()
                prefix = "0.0.0.0/0"
                for fm in msg.match:
                    addr = ipaddress.IPv4Address(int.from_bytes(fm.lpm.value, "big"))
                    prefix = f"{addr}/{fm.lpm.prefix_len}"
                params = {p.param_id: int.from_bytes(p.value, "big") for p in msg.action.action.params}
                mac_int, port = params.get(1, 0), params.get(2, 0)
                mac = ":".join(f"{b:02x}" for b in mac_int.to_bytes(6, "big")) if mac_int else None
                out.append(Route(prefix, port, mac))
        return out

    def install_topology(self, topology: Topology) -> int:
        """Install a topology's routes (replacing existing ones) and drop probabilities."""
        for r in topology.routes:
            self.add_route(r.prefix, r.port, r.mac, replace=True)
        for port, prob in topology.drop_prob.items():
            self.set_drop_prob(port, prob)
        return len(topology.routes) + len(topology.drop_prob)

    # -- queue settings -------------------------------------------------------------------
    def settings(self) -> QueueSettings:
        """The ``olaf_config`` default action as the target holds it."""
        self._require_pipeline()
        with _p4rt_errors("read olaf_config"):
            entries = list(sh.TableEntry(CONFIG_TABLE)(is_default=True).read())
        if not entries or entries[0].action is None:
            raise ControllerError("NOT_FOUND", "the target returned no olaf_config default entry")
        action = entries[0].action
        values = {name: int.from_bytes(action[name].value, "big")
                  for name in ("mode", "threshold", "congestion_threshold", "frac_bits", "capacity",
                               "max_clusters", "max_blocks", "cluster_quota")}
        return QueueSettings(Mode(values.pop("mode")), **values)

    def configure(self, mode: Mode | str | None = None, threshold: int | None = None,
                  congestion_threshold: int | None = None, cluster_quota: int | None = None,
                  **dimensions: int) -> QueueSettings:
        """Change the queue settings (read, change, write back the default action).

        ``threshold`` is raw fixed point; ``set_reward_threshold`` takes reward units.
        ``cluster_quota`` must be 1..capacity (the target's, after ``dimensions``): any
        other value raises ValueError before anything is written, on every target, since
        a P4 program takes whatever the table holds.
        ``dimensions`` (capacity, max_clusters, max_blocks, frac_bits) are for targets
        whose P4 program reads them from the table (bmv2); the software switch fixes them
        at start and refuses a change.
        """
        self._require_writer()
        with self._lock:
            current = self.settings()
            new = asdict(current)
            if mode is not None:
                new["mode"] = Mode[mode.upper()] if isinstance(mode, str) else Mode(mode)
            if threshold is not None:
                if not 0 <= threshold <= INT32_MAX:
                    raise ValueError("threshold must be 0..2**31-1 (raw fixed point)")
                new["threshold"] = threshold
            if congestion_threshold is not None:
                new["congestion_threshold"] = congestion_threshold
            new.update(dimensions)
            if cluster_quota is not None:
                new["cluster_quota"] = check_cluster_quota(cluster_quota, new["capacity"])
            elif new["cluster_quota"] > new["capacity"]:
                # A smaller capacity (bmv2's dimensions) takes "no limit" along with it.
                new["cluster_quota"] = new["capacity"]
            te = sh.TableEntry(CONFIG_TABLE)(is_default=True, action=SET_CONFIG)
            for name, value in new.items():
                te.action[name] = str(int(value))
            with _p4rt_errors("write olaf_config"):
                te.modify()
            return QueueSettings(**new)

    def set_cluster_quota(self, quota: int) -> QueueSettings:
        """Let each cluster hold at most ``quota`` slots (1..capacity; capacity: no limit).

        One write of the default action, which the target applies between packets (the
        software switch between batches, under its pipeline lock). A quota below a
        cluster's current count takes no slot away: that cluster's new blocks are
        DROPPED_FULL until PULLs bring it below the quota."""
        return self.configure(cluster_quota=quota)

    def set_reward_threshold(self, threshold: float) -> int:
        """Set the reward threshold in reward units; returns the raw value written."""
        raw = raw_threshold(threshold, self.settings().frac_bits)
        self.configure(threshold=raw)
        return raw

    # -- drop simulation ------------------------------------------------------------------
    def set_drop_prob(self, port: int | None, prob: float) -> None:
        """Drop responses leaving ``port`` (every port: None) with probability ``prob``."""
        self._require_pipeline(write=True)
        if not 0.0 <= prob <= 1.0:
            raise ValueError("drop probability must be in [0, 1]")
        value = str(min(round(prob * PROB_ONE), PROB_ONE - 1))
        if port is None:
            te = sh.TableEntry(DROP_SIM_TABLE)(is_default=True, action=SET_DROP_PROB)
            te.action["prob"] = value
            with _p4rt_errors("drop_sim default"):
                te.modify()
            return
        te = sh.TableEntry(DROP_SIM_TABLE)(action=SET_DROP_PROB)
        te.match["standard_metadata.egress_port"] = str(port)
        te.action["prob"] = value
        with _p4rt_errors(f"drop_sim port {port}"):
            try:
                te.insert()
            except P4RuntimeWriteException as e:
                if not e.errors or e.errors[0][1].canonical_code != code_pb2.ALREADY_EXISTS:
                    raise
                te.modify()

    def drop_probs(self) -> dict[int | None, float]:
        self._require_pipeline()
        out: dict[int | None, float] = {}
        with _p4rt_errors("read drop_sim"):
            for te in sh.TableEntry(DROP_SIM_TABLE).read():
                msg = te.msg()
                port = int.from_bytes(msg.match[0].exact.value, "big")
                out[port] = _prob(msg)
            for te in sh.TableEntry(DROP_SIM_TABLE)(is_default=True).read():
                msg = te.msg()
                if msg.action.action.params:
                    out[None] = _prob(msg)
        return out

    # -- source checks (dataplane/acl.py, p4/include/acl.p4) -------------------------------
    def source_rules(self) -> dict[str, tuple[list[AclRule], bool]]:
        """``{"update_source": (rules, default permits), "pull_source": ...}`` as the target
        holds them (the shape of ``SourceAcl.tables()``)."""
        self._require_pipeline()
        out: dict[str, tuple[list[AclRule], bool]] = {}
        for key, table in SOURCE_TABLES.items():
            info = next((t for t in sh.context.p4info.tables if t.preamble.name == table), None)
            if info is None:
                raise ControllerError("NOT_FOUND", f"the pipeline has no table {table} (no source checks)")
            fields = {m.id: m.name for m in info.match_fields}
            rules = []
            with _p4rt_errors(f"read {table}"):
                for te in sh.TableEntry(table).read():
                    msg = te.msg()
                    cluster, prefix = None, EVERYWHERE
                    for fm in msg.match:
                        if fields[fm.field_id] == "hdr.olaf.cluster_id":
                            cluster = int.from_bytes(fm.exact.value, "big")
                        else:
                            addr = int.from_bytes(fm.lpm.value, "big")
                            prefix = ipaddress.IPv4Network((addr, fm.lpm.prefix_len))
                    rules.append(AclRule(prefix, self._action_name(msg) == PERMIT, cluster))
                defaults = list(sh.TableEntry(table)(is_default=True).read())
            default_permit = not defaults or self._action_name(defaults[0].msg()) != DENY
            out[key] = (rules, default_permit)
        return out

    @staticmethod
    def _action_name(msg: p4runtime_pb2.TableEntry) -> str:
        return sh.context.get_name_from_id(msg.action.action.action_id)

    def set_cluster_sources(self, cluster: int, prefixes: list[str]) -> None:
        """Accept UPDATEs for ``cluster`` only from ``prefixes``: {cluster, prefix} -> permit
        for each and {cluster, 0.0.0.0/0} -> deny. No prefixes removes the cluster's entries
        (it is then judged by the table's default action, permit unless changed)."""
        if not 0 <= cluster < 1 << 16:
            raise ValueError(f"cluster {cluster} is not a bit<16> cluster id")
        self._set_sources(UPDATE_SOURCE_TABLE, cluster, prefixes)

    def set_ps_sources(self, prefixes: list[str]) -> None:
        """Accept PULLs only from ``prefixes`` ({prefix} -> permit, {0.0.0.0/0} -> deny);
        no prefixes removes every pull_source entry."""
        self._set_sources(PULL_SOURCE_TABLE, None, prefixes)

    def close_unlisted_clusters(self, closed: bool = True) -> None:
        """update_source's default action: deny (``closed``) refuses UPDATEs for every
        cluster without entries, as ``olaf switch --cluster-source`` does; permit reopens them."""
        self._require_writer()
        te = sh.TableEntry(UPDATE_SOURCE_TABLE)(is_default=True, action=DENY if closed else PERMIT)
        with _p4rt_errors(f"{UPDATE_SOURCE_TABLE} default"):
            te.modify()

    def _source_entry(self, table: str, cluster: int | None, prefix: ipaddress.IPv4Network,
                      action: str | None = None) -> Any:
        te = sh.TableEntry(table)(action=action) if action else sh.TableEntry(table)
        if cluster is not None:
            te.match["hdr.olaf.cluster_id"] = str(cluster)
        if prefix.prefixlen:  # a /0 match is the field left out
            te.match["hdr.ipv4.srcAddr"] = str(prefix)
        return te

    def _set_sources(self, table: str, cluster: int | None, prefixes: list[str]) -> None:
        self._require_writer()
        wanted = {parse_prefix(p): True for p in prefixes}
        if wanted:
            wanted.setdefault(EVERYWHERE, False)
        key = next(k for k, t in SOURCE_TABLES.items() if t == table)
        with self._lock:
            rules, _ = self.source_rules()[key]
            have = {r.prefix: r.permit for r in rules if r.cluster == cluster}
            # The /0 deny goes in first and out last, so that while the entries change the
            # table is never more open than before or after.
            for prefix in sorted(wanted, key=lambda n: n.prefixlen):
                if have.get(prefix) == wanted[prefix]:
                    continue
                te = self._source_entry(table, cluster, prefix, PERMIT if wanted[prefix] else DENY)
                with _p4rt_errors(f"{table} {prefix}"):
                    if prefix in have:
                        te.modify()
                    else:
                        te.insert()
            for prefix in sorted(set(have) - set(wanted), key=lambda n: -n.prefixlen):
                with _p4rt_errors(f"delete {table} {prefix}"):
                    self._source_entry(table, cluster, prefix).delete()

    # -- counters and registers -------------------------------------------------------------
    def counters(self) -> dict[str, dict[str, int]]:
        """Packets per outcome and per message type, and what the source checks refused, by name."""
        self._require_pipeline()
        out: dict[str, dict[str, int]] = {"outcomes": {}, "msg_types": {}}
        with _p4rt_errors("read counters"):
            for c in sh.CounterEntry(OUTCOME_COUNTER).read():
                if c.index in tuple(Outcome):
                    out["outcomes"][Outcome(c.index).name] = c.packet_count
            for c in sh.CounterEntry(MSG_TYPE_COUNTER).read():
                if c.index in tuple(MsgType):
                    out["msg_types"][MsgType(c.index).name] = c.packet_count
            if any(c.preamble.name == REFUSED_COUNTER for c in sh.context.p4info.counters):
                out["refused"] = {Refusal(c.index).name: c.packet_count
                                  for c in sh.CounterEntry(REFUSED_COUNTER).read() if c.index < len(Refusal)}
        return out

    def reset_counters(self) -> None:
        """Every cell of both counters to 0, cell by cell: bmv2 refuses a wildcard write
        to an indirect counter (UNIMPLEMENTED)."""
        self._require_pipeline(write=True)
        sizes = {c.preamble.name: c.size for c in sh.context.p4info.counters}
        for name in (n for n in (OUTCOME_COUNTER, MSG_TYPE_COUNTER, REFUSED_COUNTER) if n in sizes):
            for index in range(sizes[name]):
                c = sh.CounterEntry(name)
                c.index = index
                c.packet_count = 0
                with _p4rt_errors(f"reset {name}[{index}]"):
                    c.modify()

    def register(self, name: str, index: int | None = None) -> list[int]:
        """A register's cells (one if ``index`` is given), via a P4Runtime RegisterEntry read.

        p4runtime-shell has no RegisterEntry class, so the request is built here and sent
        with its client. bmv2 answers UNIMPLEMENTED (p4lang/PI#376): ``ControllerError``.
        """
        self._require_pipeline()
        regs = {r.preamble.name: r for r in sh.context.p4info.registers}
        reg = regs.get(name) or next((r for r in regs.values() if r.preamble.alias == name), None)
        if reg is None:
            raise ControllerError("NOT_FOUND", f"the pipeline has no register {name}")
        entity = p4runtime_pb2.Entity()
        entity.register_entry.register_id = reg.preamble.id
        if index is not None:
            entity.register_entry.index.index = index
        signed = reg.type_spec.bitstring.WhichOneof("type_spec") == "int"
        cells: dict[int, int] = {}
        with _p4rt_errors(f"read {name}"):
            for rep in self.client.read_one(entity):
                for e in rep.entities:
                    cells[e.register_entry.index.index] = int.from_bytes(
                        e.register_entry.data.bitstring, "big", signed=signed)
        return [cells[i] for i in sorted(cells)]

    def queue_state(self) -> dict[str, Any] | None:
        """Occupancy, pointers and per-cluster counts, or None where the target serves no registers."""
        try:
            state: dict[str, Any] = {name.rpartition("reg_")[2]: self.register(name)[0]
                                     for name in QUEUE_REGISTERS[:-1]}
            state["cluster_count"] = self.register(REG_CLUSTER_COUNT)
        except ControllerError as e:
            # A target answers a batch error (UNKNOWN) or the code itself.
            unserved = e.code in ("UNIMPLEMENTED", "NOT_FOUND")
            if unserved or (e.code == "UNKNOWN" and "UNIMPLEMENTED" in e.message):
                return None
            raise
        return state


def _prob(msg: p4runtime_pb2.TableEntry) -> float:
    params = msg.action.action.params
    return int.from_bytes(params[0].value, "big") / PROB_ONE if params else 0.0
