"""Throw-away hosts in network namespaces (``olaf-`` prefix) joined by veth pairs, for the
tests and the benchmarks that put a switch between real kernel UDP stacks.

Everything created is recorded and removed again by ``close``; nothing else is touched.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import threading

CLONE_NEWNET = 0x40000000


def can_create_namespaces() -> str | None:
    """None when this process may build namespaces, else the reason it may not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    probe = f"olaf-probe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "'ip netns add' is not permitted here"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Hosts:
    """Hosts ``name -> (namespace, switch-side interface)``, each with one ``eth0``."""

    def __init__(self) -> None:
        self.tag = f"{os.getpid() % 100000}"
        self.namespaces: list[str] = []
        self.links: list[str] = []

    def add(self, name: str, address: str, mac: str) -> str:
        """Create host ``name`` with ``eth0`` at ``address`` (CIDR); returns its switch-side port."""
        ns = f"olaf-{name}{self.tag}"
        outside = f"olaf{self.tag}{name}"[:15]
        inside = f"{outside[:11]}i{len(self.links)}"
        ip("netns", "add", ns)
        self.namespaces.append(ns)
        ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        self.links.append(outside)
        ip("link", "set", inside, "netns", ns)
        ip("-n", ns, "link", "set", inside, "name", "eth0")
        ip("-n", ns, "link", "set", "eth0", "address", mac)
        ip("-n", ns, "addr", "add", address, "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("link", "set", outside, "up")
        return outside

    def namespace(self, name: str) -> str:
        return f"olaf-{name}{self.tag}"

    def python(self, name: str, code: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", self.namespace(name), sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def popen(self, name: str, code: str, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            ["ip", "netns", "exec", self.namespace(name), sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def udp_socket(self, name: str) -> socket.socket:
        """A UDP socket that lives in host ``name``'s namespace, usable from any thread.

        A socket stays in the namespace it was created in, so a short-lived thread enters
        the namespace (setns changes only the calling thread's), creates it and ends. The
        UDP checksum is left out (SO_NO_CHECK): veth would leave it to an offload that a
        software switch never performs.
        """
        made: list[socket.socket | BaseException] = []

        def create() -> None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                with open(f"/var/run/netns/{self.namespace(name)}") as ns:
                    if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns")
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.setsockopt(socket.SOL_SOCKET, 11, 1)  # SO_NO_CHECK
                made.append(sock)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                made.append(e)

        thread = threading.Thread(target=create)
        thread.start()
        thread.join()
        if isinstance(made[0], BaseException):
            raise made[0]
        return made[0]

    def neighbour(self, name: str, address: str, mac: str) -> None:
        """A static ARP entry on host ``name``'s eth0 (a P4 switch answers no ARP)."""
        ip("-n", self.namespace(name), "neigh", "replace", address, "lladdr", mac, "dev", "eth0")

    def close(self) -> None:
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def leftovers(self) -> list[str]:
        names = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [x for x in self.links if f" {x}@" in names or f" {x}:" in names] + [
            ns for ns in self.namespaces if ns in spaces
        ]
