"""IPv4 longest-prefix-match forwarding for traffic the OlafQueue does not consume.

The software twin of the P4 program's ``ipv4_lpm`` table; the P4Runtime service
writes it, ``olaf switch --forwarding/--route`` fill it at start.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

from worker_transport.inet import mac_bytes


@dataclass(frozen=True)
class Route:
    """An ``ipv4_lpm`` entry as the control plane, topologies and route files spell it."""

    prefix: str
    """IPv4 prefix, ``10.0.1.1/32``."""
    port: int
    """Egress port."""
    mac: str | None = None
    """Next hop's MAC, ``08:00:00:00:01:11``, written as the frame's destination; None keeps it."""


@dataclass(frozen=True)
class NextHop:
    """What a lookup in the software table gives: a ``Route``'s action in the form the data
    path splices into frames (the MAC as 6 bytes, parsed once at insert, not per frame)."""

    port: int
    mac: bytes | None = None
    """Next hop's MAC written as the frame's destination; None keeps it."""


def parse_routes(entries: object) -> list[Route]:
    """Routes from their JSON form, the ``"routes"`` list of a forwarding table or topology
    file: ``[{"prefix": "10.0.1.1/32", "port": 1, "mac": "08:00:00:00:01:11"}, ...]``, ``mac``
    optional.

    Checks the shape only (``ValueError`` naming the entry): the prefix, port range and MAC
    are judged where the route is installed, by ``ForwardingTable`` or by the P4 target.
    """
    if not isinstance(entries, list):
        raise ValueError(f"routes must be a list of objects, not {type(entries).__name__}")
    routes = []
    for i, entry in enumerate(entries):
        try:
            route = Route(entry["prefix"], int(entry["port"]), entry.get("mac"))
        except KeyError as e:
            raise ValueError(f"route {i} {entry!r} has no {e}") from None
        except (TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"route {i} {entry!r}: {e}") from None
        if route.mac is not None and not isinstance(route.mac, str):
            raise ValueError(f"route {i} {entry!r}: the mac is a string like 08:00:00:00:01:11")
        routes.append(route)
    return routes


class ForwardingTable:
    """IPv4 longest-prefix-match table, the software twin of P4's ``ipv4_lpm``."""

    def __init__(self) -> None:
        self._by_length: dict[int, dict[int, NextHop]] = {}

    @staticmethod
    def _key(prefix: str) -> tuple[int, int]:
        try:
            net = ipaddress.IPv4Network(prefix, strict=False)
        except ValueError as e:
            raise ValueError(f"bad IPv4 prefix {prefix!r}: {e}") from None
        return int(net.network_address), net.prefixlen

    def insert(self, prefix: str, port: int, mac: str | bytes | None = None) -> None:
        """Add a route; ``ValueError`` if the prefix is already there (P4Runtime ALREADY_EXISTS)."""
        addr, length = self._key(prefix)
        table = self._by_length.setdefault(length, {})
        if addr in table:
            raise ValueError(f"route {prefix} already exists")
        table[addr] = self._route(port, mac)

    def modify(self, prefix: str, port: int, mac: str | bytes | None = None) -> None:
        """Change a route; ``KeyError`` if there is none (P4Runtime NOT_FOUND)."""
        addr, length = self._key(prefix)
        if addr not in self._by_length.get(length, {}):
            raise KeyError(f"no route {prefix}")
        self._by_length[length][addr] = self._route(port, mac)

    def delete(self, prefix: str) -> None:
        addr, length = self._key(prefix)
        if addr not in self._by_length.get(length, {}):
            raise KeyError(f"no route {prefix}")
        del self._by_length[length][addr]

    @staticmethod
    def _route(port: int, mac: str | bytes | None) -> NextHop:
        if not 0 <= port < 512:
            raise ValueError(f"port {port} out of range 0..511 (bit<9>)")
        return NextHop(port, None if mac is None else mac_bytes(mac))

    def lookup(self, address: int) -> NextHop | None:
        for length in sorted(self._by_length, reverse=True):
            mask = (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
            route = self._by_length[length].get(address & mask)
            if route is not None:
                return route
        return None

    def entries(self) -> list[tuple[str, NextHop]]:
        return [
            (f"{ipaddress.IPv4Address(addr)}/{length}", route)
            for length, table in sorted(self._by_length.items())
            for addr, route in sorted(table.items())
        ]

    @classmethod
    def from_sources(cls, path: str | None, routes: list[str]) -> ForwardingTable:
        """From a JSON file ``{"routes": [{"prefix", "port", "mac"?}]}`` and ``PREFIX=PORT[,MAC]``."""
        table = cls()
        if path:
            try:
                loaded = parse_routes(json.loads(Path(path).read_text()).get("routes", []))
            except (OSError, ValueError, AttributeError) as e:  # JSONDecodeError is a ValueError
                raise ValueError(f"cannot read forwarding table {path}: {e}") from None
            # Outside the try: a bad prefix, port or MAC says so in the table's own words.
            for r in loaded:
                table.insert(r.prefix, r.port, r.mac)
        for text in routes:
            prefix, sep, rest = text.partition("=")
            port, _, mac = rest.partition(",")
            if not sep or not port.isdigit():
                raise ValueError(f"--route takes PREFIX=PORT[,MAC], not {text!r}")
            table.insert(prefix, int(port), mac or None)
        return table
