"""IPv4 longest-prefix-match forwarding for traffic the OlafQueue does not consume.

The software twin of the P4 program's ``ipv4_lpm`` table; the P4Runtime service
writes it, ``olaf switch --forwarding/--route`` fill it at start.
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path


def parse_mac(text: str) -> bytes:
    parts = text.split(":")
    if len(parts) != 6:
        raise ValueError(f"bad MAC address {text!r}")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"bad MAC address {text!r}") from None


@dataclass(frozen=True)
class Route:
    port: int
    mac: bytes | None = None
    """Next hop's MAC written as the frame's destination; None keeps it."""


class ForwardingTable:
    """IPv4 longest-prefix-match table, the software twin of P4's ``ipv4_lpm``."""

    def __init__(self) -> None:
        self._by_length: dict[int, dict[int, Route]] = {}

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
    def _route(port: int, mac: str | bytes | None) -> Route:
        if not 0 <= port < 512:
            raise ValueError(f"port {port} out of range 0..511 (bit<9>)")
        return Route(port, parse_mac(mac) if isinstance(mac, str) else mac)

    def lookup(self, address: int) -> Route | None:
        for length in sorted(self._by_length, reverse=True):
            mask = (0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF
            route = self._by_length[length].get(address & mask)
            if route is not None:
                return route
        return None

    def entries(self) -> list[tuple[str, Route]]:
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
                spec = json.loads(Path(path).read_text())
                for r in spec.get("routes", []):
                    table.insert(r["prefix"], int(r["port"]), r.get("mac"))
            except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"cannot read forwarding table {path}: {e}") from None
        for text in routes:
            prefix, sep, rest = text.partition("=")
            port, _, mac = rest.partition(",")
            if not sep or not port.isdigit():
                raise ValueError(f"--route takes PREFIX=PORT[,MAC], not {text!r}")
            table.insert(prefix, int(port), mac or None)
        return table
