"""Writes the shipped topologies (``python -m bmv2_topologies.generate``); the JSON files are
committed, this script is how they were made and how to make other sizes.

Addressing, as in p4lang/tutorials: host ``hN`` sits alone in ``10.0.N.0/24`` at ``.1``
with a default route through the switch at ``.254``, whose MAC (the switch port's) is a
static neighbour entry, so no ARP is needed. Host MACs are ``02:00`` + the IPv4 address;
switch port MACs are ``08:00:00:00:<switch>:<port>`` (``Topology.port_mac``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bmv2_topologies.topology import Topology

PS_SUBNET = 100


def _mac(ip: str) -> str:
    return "02:00:" + ":".join(f"{int(b):02x}" for b in ip.split("."))


def _host(subnet: int, switch: str, port: int, olaf: dict, extra: list[dict] | None = None) -> dict:
    ip = f"10.0.{subnet}.1"
    gw_mac = Topology.port_mac(switch, port)
    spec: dict = {
        "ip": f"{ip}/24",
        "mac": _mac(ip),
        "commands": [
            f"ip route add default via 10.0.{subnet}.254 dev eth0",
            f"ip neigh replace 10.0.{subnet}.254 lladdr {gw_mac} dev eth0",
        ],
        "olaf": olaf,
    }
    if extra:
        spec["interfaces"] = extra
    return spec


def star(workers: int, bandwidth: float | None = None) -> dict:
    """One switch ``s1``: workers ``h1..hN`` on ports 1..N, the PS on port N+1."""
    hosts = {f"h{i}": _host(i, "s1", i, {"role": "worker", "worker_id": i - 1})
             for i in range(1, workers + 1)}
    hosts["ps"] = _host(PS_SUBNET, "s1", workers + 1, {"role": "ps"})
    tail = [] if bandwidth is None else ["0ms", bandwidth]
    links = [[f"h{i}", f"s1-p{i}", *tail] for i in range(1, workers + 1)]
    links.append(["ps", f"s1-p{workers + 1}", *tail])
    return {"hosts": hosts, "switches": {"s1": {}}, "links": links}


def two_level(leaves: int = 2, per_leaf: int = 4, bandwidth: float | None = 100) -> dict:
    """Leaf switches ``s1..sL`` with their workers, a spine ``s{L+1}`` with the PS.

    Each leaf's queue is drained by a relay host ``rK`` (eth0 on leaf K, eth1 on the spine)
    that PULLs the leaf and sends every DATA on to the PS as an UPDATE, so each gradient is
    queued (and merged) by two OLAF switches. Leaf-spine links carry the other traffic
    (weights to the workers)."""
    spine = f"s{leaves + 1}"
    hosts: dict[str, dict] = {}
    links: list[list] = []
    tail = [] if bandwidth is None else ["0ms", bandwidth]
    hosts["ps"] = _host(PS_SUBNET, spine, 1, {"role": "ps"})
    links.append(["ps", f"{spine}-p1", *tail])
    for leaf in range(1, leaves + 1):
        sw = f"s{leaf}"
        for k in range(1, per_leaf + 1):
            n = (leaf - 1) * per_leaf + k
            hosts[f"h{n}"] = _host(n, sw, k, {"role": "worker", "worker_id": n - 1})
            links.append([f"h{n}", f"{sw}-p{k}", *tail])
        up_ip = f"10.0.{210 + leaf}.1"
        relay = _host(200 + leaf, sw, per_leaf + 1, {"role": "relay", "leaf": sw}, [
            {"ip": f"{up_ip}/24", "mac": _mac(up_ip)}
        ])
        spine_mac = Topology.port_mac(spine, 1 + leaf)
        relay["commands"] += [
            f"ip neigh replace 10.0.{210 + leaf}.254 lladdr {spine_mac} dev eth1",
            f"ip route add 10.0.{PS_SUBNET}.0/24 via 10.0.{210 + leaf}.254 dev eth1",
        ]
        hosts[f"r{leaf}"] = relay
        links.append([f"r{leaf}", f"{sw}-p{per_leaf + 1}", *tail])
        links.append([f"r{leaf}-e1", f"{spine}-p{1 + leaf}", *tail])
        links.append([f"{sw}-p{per_leaf + 2}", f"{spine}-p{1 + leaves + leaf}", *tail])
    switches = {f"s{i}": {} for i in range(1, leaves + 2)}
    return {"hosts": hosts, "switches": switches, "links": links}


SHIPPED = {
    "star2": lambda: star(2),
    "star4": lambda: star(4, bandwidth=100),
    "star8": lambda: star(8, bandwidth=100),
    "star32": lambda: star(32, bandwidth=100),
    "two_level": lambda: two_level(2, 4),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent), help="directory (default: here)")
    args = parser.parse_args()
    for name, make in SHIPPED.items():
        path = Path(args.out) / f"{name}.json"
        path.write_text(json.dumps(make(), indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
