"""The OLAF controller: one P4Runtime session with one target, built on p4runtime-shell.

The same code drives the software switch (``olaf switch --p4runtime``), bmv2's
``simple_switch_grpc`` and a Tofino's P4Runtime server; only the device config pushed
with the P4Info differs (``device_config``).

``Controller`` is the session (``session.py``: connection, errors, p4runtime-shell's
globals), the reads of counters and registers (``readings.py``) and, here, what it writes:
the pipeline, routes, queue settings, drop simulation and source checks. Topology files
are read by ``topology.py``, device configs built by ``device_config.py``.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from google.rpc import code_pb2
from p4.config.v1 import p4info_pb2
from p4.v1 import p4runtime_pb2
from p4runtime_sh import shell as sh
from p4runtime_sh.p4runtime import P4RuntimeWriteException

from control_plane.p4info import (
    CONFIG_TABLE,
    DENY,
    DROP_SIM_TABLE,
    IPV4_FORWARD,
    LPM_TABLE,
    PERMIT,
    PULL_SOURCE_TABLE,
    SET_CONFIG,
    SET_DROP_PROB,
    UPDATE_SOURCE_TABLE,
    load_p4info,
)
from control_plane.readings import Readings
from control_plane.session import ControllerError, _p4rt_errors
from control_plane.threshold import (  # noqa: F401 - ThresholdLoop & co. are also imported from here
    ThresholdLoop,
    ThresholdStep,
    pipeline_threshold_setter,
    raw_threshold,
)
from control_plane.topology import Topology
from dataplane.acl import AclRule, parse_prefix
from dataplane.forwarding import Route  # Route is also imported from here (olaf ctl)
from dataplane.queue import check_cluster_quota, check_feedback
from worker_transport.protocol import INT32_MAX, Mode

PROB_ONE = 1 << 16
EVERYWHERE = ipaddress.IPv4Network("0.0.0.0/0")
SOURCE_TABLES = {"update_source": UPDATE_SOURCE_TABLE, "pull_source": PULL_SOURCE_TABLE}


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
    feedback: int = 3
    """Feedback revision of the ACKs, 2 or 3 (DESIGN.md §3 Feedback)."""

    @property
    def reward_threshold(self) -> float:
        return math.ldexp(self.threshold, -self.frac_bits)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mode"] = self.mode.name
        d["reward_threshold"] = self.reward_threshold
        return d


class Controller(Readings):
    """A P4Runtime session with one OLAF target, through p4runtime-shell.

    Use as a context manager (or ``open()``/``close()``). ``election_id`` (high, low)
    decides who is primary; only the primary may push a pipeline or write. ``None`` opens
    a read-only session: it never becomes primary, so it never takes over from (or
    clashes with) a running controller.
    """

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
                               "max_clusters", "max_blocks", "cluster_quota", "feedback")}
        return QueueSettings(Mode(values.pop("mode")), **values)

    def configure(self, mode: Mode | str | None = None, threshold: int | None = None,
                  congestion_threshold: int | None = None, cluster_quota: int | None = None,
                  feedback: int | None = None, **dimensions: int) -> QueueSettings:
        """Change the queue settings (read, change, write back the default action).

        ``threshold`` is raw fixed point; ``set_reward_threshold`` takes reward units.
        ``cluster_quota`` must be 1..capacity (the target's, after ``dimensions``): any
        other value raises ValueError before anything is written, on every target, since
        a P4 program takes whatever the table holds. ``feedback`` must be 2 or 3, checked
        the same way.
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
            if feedback is not None:
                new["feedback"] = check_feedback(feedback)
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

    def set_feedback(self, revision: int) -> QueueSettings:
        """Make the target's ACKs follow feedback revision ``revision`` (2 or 3, DESIGN.md §3
        Feedback); one write of the default action, applied between packets like the quota."""
        return self.configure(feedback=revision)

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


def _prob(msg: p4runtime_pb2.TableEntry) -> float:
    params = msg.action.action.params
    return int.from_bytes(params[0].value, "big") / PROB_ONE if params else 0.0
