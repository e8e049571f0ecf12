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


def _as_arrays(networks: Iterable[ipaddress.IPv4Network]) -> tuple[np.ndarray, np.ndarray]:
    nets = list(networks)
    return (np.array([int(n.network_address) for n in nets], np.uint32),
            np.array([int(n.netmask) for n in nets], np.uint32))


class SourceAcl:
    """The configured prefixes and what they refused so far.

    ``refuse`` judges a whole batch at once: each source is compared with every
    configured prefix in one numpy expression (a handful of prefixes per deployment).
    """

    def __init__(
        self,
        cluster_sources: Iterable[tuple[int, ipaddress.IPv4Network]] = (),
        ps_sources: Sequence[ipaddress.IPv4Network] = (),
    ) -> None:
        pairs = list(cluster_sources)
        self.cluster_sources: dict[int, list[ipaddress.IPv4Network]] = {}
        for cluster, net in pairs:
            self.cluster_sources.setdefault(cluster, []).append(net)
        self.ps_sources = list(ps_sources)
        self._clusters = np.array([c for c, _ in pairs], np.int64)
        self._cluster_nets, self._cluster_masks = _as_arrays(net for _, net in pairs)
        self._ps_nets, self._ps_masks = _as_arrays(self.ps_sources)
        self.refused = [0] * len(Refusal)

    @property
    def enabled(self) -> bool:
        return bool(self.cluster_sources or self.ps_sources)

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
        if len(self._clusters):
            updates = np.flatnonzero(readable & (types == MsgType.UPDATE))
            if len(updates):
                allowed = (
                    (headers["cluster_id"][updates, None].astype(np.int64) == self._clusters)
                    & ((src[updates, None] & self._cluster_masks) == self._cluster_nets)
                ).any(axis=1)
                refused[updates[~allowed]] = True
                self.refused[Refusal.UPDATE_SOURCE] += int((~allowed).sum())
        if len(self._ps_nets):
            pulls = np.flatnonzero(readable & (types == MsgType.PULL))
            if len(pulls):
                allowed = ((src[pulls, None] & self._ps_masks) == self._ps_nets).any(axis=1)
                refused[pulls[~allowed]] = True
                self.refused[Refusal.PULL_SOURCE] += int((~allowed).sum())
        return refused

    def snapshot(self) -> dict[str, int]:
        return {r.name: self.refused[r] for r in Refusal}
