"""Source-address checks in front of the OlafQueue: who may UPDATE a cluster, who may PULL.

DESIGN.md has no authentication: any host that reaches the switch can PULL another
cluster's DATA, or UPDATE any cluster under any worker id. Without a wire change the
switch can still look at where a message comes from (the datagram's source address in
UDP mode, the IPv4 source in interface mode) and refuse what a tenant's network could
not have sent:

* an UPDATE for cluster ``c`` is accepted only from inside ``c``'s configured prefixes;
  once any cluster has prefixes, a cluster without any is closed (a tenant could
  otherwise fill the queue under an unused cluster id);
* a PULL is accepted only from inside the PS prefixes, when some are configured.

A refused message is dropped before the queue sees it, without an answer (so a spoofed
source gets nothing reflected at it), and counted by ``Refusal``. With nothing configured
every message passes and the switch behaves exactly as DESIGN.md §3 says. The P4 program
applies the same checks with the tables ``OlafIngress.update_source`` and
``OlafIngress.pull_source`` (p4/include/acl.p4).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from worker_transport.protocol import VERSION, MsgType


class Refusal(IntEnum):
    """Why a message was refused; the index of ``refused_counter`` in the P4 program too."""

    UPDATE_SOURCE = 0
    """An UPDATE from outside its cluster's prefixes (or for a cluster with none, once any has some)."""
    PULL_SOURCE = 1
    """A PULL from outside the PS prefixes."""


def parse_prefix(text: str) -> ipaddress.IPv4Network:
    """``A.B.C.D/LEN`` (or a bare address, /32) as a network; host bits must be zero."""
    try:
        return ipaddress.IPv4Network(text.strip(), strict=True)
    except ValueError as e:
        raise ValueError(f"{text!r} is not an IPv4 prefix ({e})") from None


def parse_cluster_source(text: str, max_clusters: int = 65536) -> tuple[int, ipaddress.IPv4Network]:
    """``CLUSTER=PREFIX`` as (cluster, network)."""
    cluster, sep, prefix = text.partition("=")
    if not sep or not cluster.strip().isdigit():
        raise ValueError(f"expected CLUSTER=PREFIX, got {text!r}")
    c = int(cluster)
    if c >= max_clusters:
        raise ValueError(f"{text!r}: cluster {c} is not below max_clusters {max_clusters}")
    return c, parse_prefix(prefix)


@dataclass(frozen=True)
class AclRule:
    """One table entry: messages from ``prefix`` (for ``cluster``, on the UPDATE table) are
    permitted or denied. As in the P4 tables, the longest matching prefix decides and the
    table's default action applies when none matches."""

    prefix: ipaddress.IPv4Network
    permit: bool
    cluster: int | None = None
    """The UPDATE table's exact key; None on the PULL table."""


class _Table:
    """Rules as arrays, judged for a whole batch in one expression."""

    def __init__(self, rules: Sequence[AclRule], default_permit: bool) -> None:
        self.rules = list(rules)
        self.default_permit = default_permit
        self.nets = np.array([int(r.prefix.network_address) for r in rules], np.uint32)
        self.masks = np.array([int(r.prefix.netmask) for r in rules], np.uint32)
        self.lengths = np.array([r.prefix.prefixlen for r in rules], np.int64)
        self.permits = np.array([r.permit for r in rules], bool)
        self.clusters = np.array([-1 if r.cluster is None else r.cluster for r in rules], np.int64)

    @property
    def active(self) -> bool:
        return bool(self.rules) or not self.default_permit

    def permitted(self, sources: np.ndarray, clusters: np.ndarray | None) -> np.ndarray:
        if not self.rules:
            return np.full(len(sources), self.default_permit)
        match = (sources[:, None] & self.masks) == self.nets
        if clusters is not None:
            match &= clusters[:, None] == self.clusters
        score = np.where(match, self.lengths, -1)
        best = score.argmax(axis=1)
        return np.where(score.max(axis=1) >= 0, self.permits[best], self.default_permit)


class SourceAcl:
    """The two tables and what they refused so far.

    ``SourceAcl(cluster_sources, ps_sources)`` is what ``olaf switch --cluster-source
    --ps-source`` configures: the listed prefixes permitted, everything else denied once
    a table has any (so a cluster without prefixes is closed when another has some).
    ``configure`` takes the tables in the P4 program's form (rules and default actions),
    e.g. for a control plane that writes ``OlafIngress.update_source``/``pull_source``.
    """

    def __init__(
        self,
        cluster_sources: Iterable[tuple[int, ipaddress.IPv4Network]] = (),
        ps_sources: Sequence[ipaddress.IPv4Network] = (),
    ) -> None:
        update_rules = [AclRule(net, True, cluster) for cluster, net in cluster_sources]
        pull_rules = [AclRule(net, True) for net in ps_sources]
        self.refused = [0] * len(Refusal)
        self.configure(update_rules, pull_rules, update_default_permit=not update_rules,
                       pull_default_permit=not pull_rules)

    def configure(
        self,
        update_rules: Sequence[AclRule],
        pull_rules: Sequence[AclRule],
        *,
        update_default_permit: bool = True,
        pull_default_permit: bool = True,
    ) -> None:
        """Replace both tables (hold the pipeline's lock while the switch runs); counts stay."""
        if any(r.cluster is None for r in update_rules) or any(r.cluster is not None for r in pull_rules):
            raise ValueError("UPDATE rules name a cluster, PULL rules do not")
        self._updates = _Table(update_rules, update_default_permit)
        self._pulls = _Table(pull_rules, pull_default_permit)

    def tables(self) -> dict[str, tuple[list[AclRule], bool]]:
        """``{"update_source": (rules, default permits), "pull_source": ...}``, as the P4 tables hold them."""
        return {"update_source": (list(self._updates.rules), self._updates.default_permit),
                "pull_source": (list(self._pulls.rules), self._pulls.default_permit)}

    @property
    def enabled(self) -> bool:
        return self._updates.active or self._pulls.active

    def refuse(self, headers: np.ndarray, sources: np.ndarray) -> np.ndarray:
        """A mask of the messages to drop unanswered, given each one's IPv4 source (uint32); counts them.

        Only messages whose header the queue could read (version 1) are judged, so what
        the queue would drop silently anyway stays counted where it always was.
        """
        refused = np.zeros(len(headers), bool)
        if not self.enabled or not len(headers):
            return refused
        src = np.asarray(sources, np.uint32)
        readable = headers["version"] == VERSION
        types = headers["msg_type"]
        for table, msg_type, reason, by_cluster in (
            (self._updates, MsgType.UPDATE, Refusal.UPDATE_SOURCE, True),
            (self._pulls, MsgType.PULL, Refusal.PULL_SOURCE, False),
        ):
            if not table.active:
                continue
            which = np.flatnonzero(readable & (types == msg_type))
            if not len(which):
                continue
            clusters = headers["cluster_id"][which].astype(np.int64) if by_cluster else None
            denied = which[~table.permitted(src[which], clusters)]
            refused[denied] = True
            self.refused[reason] += len(denied)
        return refused

    def snapshot(self) -> dict[str, int]:
        return {r.name: self.refused[r] for r in Refusal}
