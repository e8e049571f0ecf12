"""Topologies in the format of p4lang/tutorials' ``topology.json``, with OLAF roles.

A file has the tutorials' three keys::

    {"hosts":    {"h1": {"ip": "10.0.1.1/24", "mac": "08:00:00:00:01:01",
                         "commands": ["ip route add default via 10.0.1.254 dev eth0", ...],
                         "olaf": {"role": "worker", "worker_id": 0}}, ...},
     "switches": {"s1": {"olaf": {"capacity": 64}}},
     "links":    [["h1", "s1-p1"], ["s1-p9", "s2-p1", "0ms", 100], ...]}

* ``hosts``: ``ip`` (CIDR) and ``mac`` of ``eth0``; ``commands`` run in the host after the
  links are up (the tutorials use ``route``/``arp``; ours use iproute2, which the machine has);
  an optional ``interfaces`` list gives a host more interfaces (``eth1`` ...), each with its
  own ``ip``/``mac``; ``olaf.role`` is ``worker``, ``ps`` or ``relay``.
* ``switches``: an optional ``olaf`` object with per-switch queue flags (capacity, values ...).
* ``links``: ``[a, b]`` or ``[a, b, latency, bandwidth_mbps]``. A switch end is ``sN-pK``
  (port K); a host end is ``hN`` (its ``eth0``) or ``hN-eK`` (its ``ethK``). Latency must
  be ``0ms``: this kernel has no netem, so delay comes from ``olaf switch --delay-ms``.

``Topology.routes()`` derives each switch's IPv4 LPM table (the tutorials keep it in a
``runtime_json`` per switch; here it follows from the links, by shortest path).
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import deque
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dataplane.forwarding import Route

ROLES = ("worker", "ps", "relay")
_SWITCH_END = re.compile(r"^(?P<node>[A-Za-z][\w]*)-p(?P<port>\d+)$")
_HOST_END = re.compile(r"^(?P<node>[A-Za-z][\w]*?)(?:-e(?P<index>\d+))?$")
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


class TopologyError(ValueError):
    """A topology file that cannot be built, with the reason."""


@dataclass(frozen=True)
class Interface:
    index: int
    ip: ipaddress.IPv4Interface
    mac: str

    @property
    def name(self) -> str:
        return f"eth{self.index}"


@dataclass
class Host:
    name: str
    interfaces: list[Interface]
    commands: list[str]
    role: str
    worker_id: int | None = None
    olaf: dict = field(default_factory=dict)

    @property
    def ip(self) -> str:
        return str(self.interfaces[0].ip.ip)


@dataclass
class Switch:
    name: str
    olaf: dict = field(default_factory=dict)
    ports: dict[int, tuple[str, int]] = field(default_factory=dict)
    """port -> (peer node, peer port or host interface index)."""


@dataclass(frozen=True)
class Link:
    a: tuple[str, int]
    b: tuple[str, int]
    bandwidth_mbps: float | None


@dataclass
class Topology:
    name: str
    hosts: dict[str, Host]
    switches: dict[str, Switch]
    links: list[Link]

    @property
    def workers(self) -> list[Host]:
        return sorted((h for h in self.hosts.values() if h.role == "worker"), key=lambda h: h.worker_id)

    @property
    def ps(self) -> Host:
        return next(h for h in self.hosts.values() if h.role == "ps")

    @property
    def relays(self) -> list[Host]:
        return [h for h in self.hosts.values() if h.role == "relay"]

    def switch_of(self, host: str, index: int = 0) -> tuple[str, int]:
        """The switch and port that ``host``'s ``eth{index}`` is plugged into."""
        for link in self.links:
            for mine, other in ((link.a, link.b), (link.b, link.a)):
                if mine == (host, index) and other[0] in self.switches:
                    return other
        raise TopologyError(f"{host}-e{index} is not linked to a switch")

    @staticmethod
    def port_mac(switch: str, port: int) -> str:
        """The MAC of a switch port: hosts' gateway entries and next-hop rewrites point at it."""
        number = int(re.sub(r"\D", "", switch) or 0)
        return f"08:00:00:00:{number & 0xFF:02x}:{port & 0xFF:02x}"

    def routes(self, switch: str) -> list[Route]:
        """``switch``'s LPM table: a /32 per host interface, out of the port on a shortest path.

        A host plugged in here is sent its own interface's MAC; one behind another switch
        gets the next switch's port MAC, as the tutorials' ``ipv4_forward`` entries do."""
        hop = self._first_hops(switch)
        routes = []
        for host in sorted(self.hosts):
            for intf in self.hosts[host].interfaces:
                target, port = self.switch_of(host, intf.index)
                if target == switch:
                    routes.append(Route(f"{intf.ip.ip}/32", port, intf.mac))
                elif target in hop:
                    out = hop[target]
                    peer, peer_port = self.switches[switch].ports[out]
                    routes.append(Route(f"{intf.ip.ip}/32", out, self.port_mac(peer, peer_port)))
        return routes

    def _first_hops(self, switch: str) -> dict[str, int]:
        """For every switch reachable from ``switch``, the local port of a shortest path to it."""
        hop: dict[str, int] = {}
        frontier: deque[tuple[str, int]] = deque(
            (peer, port) for port, (peer, _) in sorted(self.switches[switch].ports.items())
            if peer in self.switches
        )
        while frontier:
            node, port = frontier.popleft()
            if node == switch or node in hop:
                continue
            hop[node] = port
            frontier.extend((peer, port) for peer, _ in self.switches[node].ports.values()
                            if peer in self.switches)
        return hop

    def _host_mac(self, host: str, index: int) -> str:
        return next(i.mac for i in self.hosts[host].interfaces if i.index == index)


def _parse_end(text: str, switches: dict, hosts: dict, where: str) -> tuple[str, int]:
    m = _SWITCH_END.match(text)
    if m and m["node"] in switches:
        return m["node"], int(m["port"])
    m = _HOST_END.match(text)
    if m and m["node"] in hosts:
        return m["node"], int(m["index"] or 0)
    raise TopologyError(f"{where}: {text!r} is neither a host (hN, hN-eK) nor a switch port (sN-pK)")


def parse(data: dict, name: str = "topology") -> Topology:
    """Check and load a ``topology.json`` document; raises ``TopologyError`` with the reason."""
    if not isinstance(data, dict) or not {"hosts", "switches", "links"} <= data.keys():
        raise TopologyError(f"{name}: needs the keys 'hosts', 'switches' and 'links'")
    hosts: dict[str, Host] = {}
    for hname, spec in data["hosts"].items():
        where = f"{name}: host {hname}"
        olaf = dict(spec.get("olaf", {}))
        role = olaf.get("role", "worker")
        if role not in ROLES:
            raise TopologyError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
        intfs = [{"ip": spec.get("ip"), "mac": spec.get("mac")}, *spec.get("interfaces", [])]
        interfaces = []
        for index, intf in enumerate(intfs):
            try:
                ip = ipaddress.IPv4Interface(intf["ip"])
            except (ValueError, TypeError, KeyError):
                raise TopologyError(f"{where}: eth{index} needs an 'ip' like 10.0.1.1/24") from None
            if not isinstance(intf.get("mac"), str) or not _MAC.match(intf["mac"]):
                raise TopologyError(f"{where}: eth{index} needs a 'mac' like 08:00:00:00:01:01")
            interfaces.append(Interface(index, ip, intf["mac"].lower()))
        worker_id = olaf.get("worker_id")
        if role == "worker" and not isinstance(worker_id, int):
            raise TopologyError(f"{where}: a worker needs an integer olaf.worker_id")
        hosts[hname] = Host(hname, interfaces, list(spec.get("commands", [])), role, worker_id, olaf)
    switches = {s: Switch(s, dict((spec or {}).get("olaf", {}))) for s, spec in data["switches"].items()}
    if set(hosts) & set(switches):
        raise TopologyError(f"{name}: names used for both a host and a switch")
    links = []
    used: set[tuple[str, int]] = set()
    for i, raw in enumerate(data["links"]):
        where = f"{name}: link {i}"
        if not isinstance(raw, list) or not 2 <= len(raw) <= 4:
            raise TopologyError(f"{where}: expected [a, b] or [a, b, latency, bandwidth]")
        a = _parse_end(raw[0], switches, hosts, where)
        b = _parse_end(raw[1], switches, hosts, where)
        for end in (a, b):
            if end in used:
                raise TopologyError(f"{where}: {end[0]} port/interface {end[1]} is used twice")
            used.add(end)
            if end[0] in hosts and end[1] >= len(hosts[end[0]].interfaces):
                raise TopologyError(f"{where}: host {end[0]} has no eth{end[1]}")
        if a[0] in hosts and b[0] in hosts:
            raise TopologyError(f"{where}: hosts connect to switches, not to each other")
        if len(raw) > 2 and str(raw[2]) not in ("0", "0ms"):
            raise TopologyError(
                f"{where}: latency {raw[2]!r} needs netem, which this kernel lacks; "
                "use the switch's --delay-ms instead"
            )
        bw = raw[3] if len(raw) > 3 else None
        if bw is not None and (not isinstance(bw, int | float) or bw <= 0):
            raise TopologyError(f"{where}: bandwidth must be a positive number of Mbit/s")
        links.append(Link(a, b, None if bw is None else float(bw)))
        for mine, other in ((a, b), (b, a)):
            if mine[0] in switches:
                switches[mine[0]].ports[mine[1]] = other
    topo = Topology(name, hosts, switches, links)
    ps = [h for h in hosts.values() if h.role == "ps"]
    if len(ps) != 1:
        raise TopologyError(f"{name}: needs exactly one host with olaf.role 'ps', has {len(ps)}")
    ids = [h.worker_id for h in topo.workers]
    if not ids or len(set(ids)) != len(ids):
        raise TopologyError(f"{name}: needs at least one worker, with distinct worker ids")
    for h in hosts.values():
        for intf in h.interfaces:
            topo.switch_of(h.name, intf.index)
    return topo


def load(path: str | Path) -> Topology:
    """A topology file, or the name of one shipped in this package (``star8``, ``two_level``)."""
    p = Path(path)
    if not p.exists() and not p.suffix:
        shipped = resources.files("bmv2_topologies") / f"{p.name}.json"
        if shipped.is_file():
            return parse(json.loads(shipped.read_text()), p.name)
        raise TopologyError(f"no topology file {path!r} and none shipped by that name "
                            f"(shipped: {', '.join(shipped_names())})")
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TopologyError(f"cannot read {path}: {e}") from None
    return parse(data, p.stem)


def shipped_names() -> list[str]:
    files = resources.files("bmv2_topologies").iterdir()
    return sorted(f.name[:-5] for f in files if f.name.endswith(".json"))
