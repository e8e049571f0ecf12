"""The Mininet testbed: a topology's hosts in network namespaces, veth links (TCLink ``bw``
where the topology asks for it), and one OLAF switch process per switch on the
switch-side ends of the links, in the root namespace.

Built from Mininet's node and link classes (``mininet.node.Host``, ``mininet.link.TCLink``)
rather than the ``Mininet`` object, whose start-up raises system-wide limits and sysctls
(``fixLimits``) and whose clean-up (``mn -c``) kills other users' processes: this testbed
touches only what it created. Every interface it creates in the root namespace is named
``olaf<tag>...`` (``tag`` unique per run); hosts' own interfaces are ``eth0``/``eth1`` inside
their namespaces. Every process is tracked by PID; ``close`` (also on ``__exit__``) stops
them, deletes the links, ends the hosts' shells (and with them their namespaces) and then
checks that nothing is left (``leftovers``).

``ps_link`` (a ``shaping.LinkShape``) makes the egress toward the PS a real kernel
bottleneck (DESIGN.md §7's C and B): HTB and a FIFO on the switch-side end of the PS's link,
where DATA queues on its way to the PS (``shaping`` says why that end).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bmv2_topologies import shaping
from bmv2_topologies.bmv2 import Bmv2Switches
from bmv2_topologies.control import SwitchControl, Target
from bmv2_topologies.errors import TestbedError
from bmv2_topologies.mininet_api import MininetMissing, mininet_modules, missing_requirements
from bmv2_topologies.simple_switch import BMV2_BUILDS, BMV2_DEFAULT_BUILD
from bmv2_topologies.topology import Topology

IFNAMSIZ = 15
SWITCH_KINDS = ("soft", "bmv2")


@dataclass
class Process:
    name: str
    where: str
    popen: subprocess.Popen
    log: Path
    _file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def close_log(self) -> None:
        """Close our handle on the log the process writes to (once it has exited)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def final(self) -> dict | None:
        """The JSON of the process's last ``final {...}`` line, if it printed one."""
        for line in reversed(self.output().splitlines()):
            if line.startswith("final "):
                with contextlib.suppress(ValueError):
                    return json.loads(line[6:])
        return None


def _net_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def olaf_command(*args: str) -> list[str]:
    """``olaf ARGS`` run by this interpreter (the venv's), wherever it is installed."""
    return [sys.executable, "-m", "olaf.cli", *args]


class Testbed:
    """One topology on Mininet, with ``switch`` ('soft' or 'bmv2') as every switch's data plane."""

    def __init__(self, topology: Topology, out_dir: str | Path, *, switch: str = "soft",
                 queue: dict[str, Any] | None = None, switch_args: dict[str, list[str]] | None = None,
                 tag: str | None = None, bmv2_build: str = BMV2_DEFAULT_BUILD,
                 ps_link: shaping.LinkShape | None = None) -> None:
        """``queue``: OlafQueue settings for every switch (mode, capacity, values, max_blocks,
        max_clusters, frac_bits); ``switch_args``: extra ``olaf switch`` flags per switch name
        (``"*"``: every switch), e.g. ``--drop-prob``/``--delay-ms`` (soft switch only);
        ``bmv2_build``: ``fast`` (default) or ``debug``, the bmv2 build run for ``switch="bmv2"``
        (``simple_switch.BMV2_BUILDS``); ``ps_link``: rate and FIFO of the egress toward the PS."""
        if switch not in SWITCH_KINDS:
            raise ValueError(f"switch must be one of {SWITCH_KINDS}, not {switch!r}")
        if bmv2_build not in BMV2_BUILDS:
            raise ValueError(f"bmv2_build must be one of {tuple(BMV2_BUILDS)}, not {bmv2_build!r}")
        self.bmv2_build = bmv2_build
        self.ps_link = ps_link
        self.topology = topology
        self.out = Path(out_dir)
        self.switch_kind = switch
        self.queue = dict(queue or {})
        self.switch_args = switch_args or {}
        self.control: Any = None
        self.tag = tag or secrets.token_hex(2)[:3]
        self.hosts: dict[str, Any] = {}
        self.switch_nodes: dict[str, Any] = {}
        self.links: list[Any] = []
        self.processes: list[Process] = []
        self.switch_ports: dict[str, dict[int, str]] = {s: {} for s in topology.switches}
        self._namespaces: dict[str, str] = {}
        self._shell_pids: list[int] = []
        self._root_intfs: list[str] = []
        self._started = False
        self.bmv2: Any = None

    # -- building ----------------------------------------------------------------------

    def port_name(self, switch: str, port: int) -> str:
        name = f"olaf{self.tag}{switch}p{port}"
        if len(name) > IFNAMSIZ:
            raise TestbedError(f"interface name {name!r} is longer than {IFNAMSIZ} characters; "
                               "use shorter switch names")
        return name

    def start(self) -> Testbed:
        """Build hosts, links and switches; on any failure, tear down what exists and raise."""
        reason = missing_requirements()
        if reason:
            raise MininetMissing(reason)
        self._started = True
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            self._build()
            self._start_switches()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        node, link, _ = mininet_modules()
        topo = self.topology
        planned = {self.port_name(s, p) for s, sw in topo.switches.items() for p in sw.ports}
        clash = sorted(planned & set(self._existing_intfs()))
        if clash:
            raise TestbedError(f"interfaces {clash} already exist (another run with tag "
                               f"{self.tag!r}?); pick another --tag")
        for name in topo.switches:
            # A plain root-namespace node: the link ends live here; the data plane is the
            # switch process started separately, so no Mininet switch class (OVS) is needed.
            sw = node.Node(f"olaf{self.tag}{name}", inNamespace=False)
            self.switch_nodes[name] = sw
            self._shell_pids.append(sw.pid)
        for name in topo.hosts:
            host = node.Host(f"olaf{self.tag}{name}", inNamespace=True)
            self.hosts[name] = host
            self._shell_pids.append(host.pid)
            self._namespaces[name] = _net_ns(host.pid) or ""
        for lk in topo.links:
            self._add_link(link, lk)
        for name, spec in topo.hosts.items():
            self._configure_host(name, spec)
        for path in self._root_intfs:
            with contextlib.suppress(OSError):
                Path(f"/proc/sys/net/ipv6/conf/{path}/disable_ipv6").write_text("1")
        if self.ps_link is not None:
            try:
                shaping.apply(self.ps_link_interface(), self.ps_link)
            except shaping.ShapingError as e:
                raise TestbedError(f"cannot shape the PS's link: {e}") from None

    def ps_link_interface(self) -> str:
        """The switch-side end of the PS's link, in the root namespace: the egress toward the
        PS, where DATA and EMPTY queue (``--ps-link-rate`` shapes it)."""
        switch, port = self.topology.switch_of(self.topology.ps.name, 0)
        return self.port_name(switch, port)

    def ps_link_stats(self) -> dict[str, Any] | None:
        """The bottleneck FIFO's counters (sent, dropped, backlog), or None when not shaped."""
        if self.ps_link is None:
            return None
        dev = self.ps_link_interface()
        leaf = shaping.leaf_stats(dev)
        return {"interface": dev, "qdisc": leaf.kind, "sent_bytes": leaf.sent_bytes,
                "sent_packets": leaf.sent_packets, "dropped": leaf.dropped,
                "backlog_bytes": leaf.backlog_bytes, "backlog_packets": leaf.backlog_packets}

    def _add_link(self, link: Any, lk: Any) -> None:
        topo = self.topology
        ends = []
        for node_name, index in (lk.a, lk.b):
            if node_name in topo.hosts:
                intf = next(i for i in topo.hosts[node_name].interfaces if i.index == index)
                ends.append((self.hosts[node_name], index, intf.name, intf.mac))
            else:
                name = self.port_name(node_name, index)
                self.switch_ports[node_name][index] = name
                ends.append((self.switch_nodes[node_name], index, name, topo.port_mac(node_name, index)))
        # The host end first: Mininet creates the pair in node1's namespace, so a host's
        # eth0 never exists in the root namespace, even for a moment.
        ends.sort(key=lambda e: e[0] not in self.hosts.values())
        (n1, p1, i1, m1), (n2, p2, i2, m2) = ends
        for n, i in ((n1, i1), (n2, i2)):
            if n in self.switch_nodes.values():
                self._root_intfs.append(i)
        if lk.bandwidth_mbps is None:
            self.links.append(link.Link(n1, n2, port1=p1, port2=p2, intfName1=i1, intfName2=i2,
                                        addr1=m1, addr2=m2))
            return
        # Mininet reports tc's harmless "quantum of class is big" (HTB at >= 100 Mbit/s with
        # the default r2q) as an error; it is silenced here and the shaping checked instead.
        _, _, log = mininet_modules()
        log.setLogLevel("critical")
        try:
            self.links.append(link.TCLink(n1, n2, port1=p1, port2=p2, intfName1=i1, intfName2=i2,
                                          addr1=m1, addr2=m2, bw=lk.bandwidth_mbps))
        finally:
            log.setLogLevel("warning")
        for node, name in ((n1, i1), (n2, i2)):
            if "htb" not in node.cmd(f"tc qdisc show dev {name}"):
                raise TestbedError(f"tc did not shape {name} to {lk.bandwidth_mbps:g} Mbit/s "
                                   "(kernel without sch_htb?)")

    def _configure_host(self, name: str, spec: Any) -> None:
        host = self.hosts[name]
        host.cmd("ip link set lo up")
        host.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
        for intf in spec.interfaces:
            self._host_cmd(host, f"ip addr add {intf.ip.with_prefixlen} dev {intf.name}")
            self._host_cmd(host, f"ip link set {intf.name} up")
            # The software switch reads frames with AF_PACKET before any checksum is filled
            # in: hosts must compute their own (as p4lang/tutorials' P4Host does).
            self._host_cmd(host, f"ethtool --offload {intf.name} rx off tx off sg off")
        for command in spec.commands:
            self._host_cmd(host, command)

    def _host_cmd(self, host: Any, command: str) -> str:
        out = host.cmd(f"{command}; echo __rc=$?")
        text, _, rc = out.rpartition("__rc=")
        if rc.strip() != "0":
            raise TestbedError(f"{host.name}: {command!r} failed: {text.strip()}")
        return text

    # -- switches ----------------------------------------------------------------------

    def _start_switches(self) -> None:
        targets = []
        if self.switch_kind == "soft":
            for device, name in enumerate(self.topology.switches, start=1):
                targets.append(Target(name, self._start_soft_switch(name, device), device))
        else:
            self.bmv2 = Bmv2Switches(self)
            targets = self.bmv2.start()
        self.control = SwitchControl(targets)
        for t in targets:
            self.control.wait_ready(t.switch, 30, lambda name=t.switch: self._exited(f"switch-{name}"))
            settings = {"mode": self.queue.get("mode", "olaf")}
            if "feedback" in self.queue:  # DESIGN.md §3 Feedback: the revision, on every target
                settings["feedback"] = self.queue["feedback"]
            if self.switch_kind == "bmv2":
                # bmv2 reads the queue dimensions from olaf_config; the software switch fixes
                # them at start (its flags) and refuses a change over P4Runtime.
                settings |= {k: v for k, v in self._queue_flags(t.switch).items()
                             if k in ("capacity", "max_clusters", "max_blocks", "frac_bits")}
            self.control.program(t.switch, self.topology.routes(t.switch), **settings)

    def _exited(self, name: str) -> str | None:
        """Why process ``name`` is gone (its exit status and last output), or None if running."""
        for proc in self.processes:
            if proc.name == name and proc.popen.poll() is not None:
                return f"{name} exited with {proc.popen.returncode}:\n{proc.output()[-2000:]}"
        return None

    def _queue_flags(self, switch: str) -> dict[str, Any]:
        """Queue settings of ``switch``: the testbed's, then the topology's per-switch ones."""
        flags = {k: v for k, v in self.queue.items() if k != "mode"}
        flags.update(self.topology.switches[switch].olaf)
        return flags

    def _start_soft_switch(self, name: str, device: int) -> str:
        """Start ``olaf switch`` on ``name``'s ports; returns its P4Runtime address."""
        argv = ["switch"]
        for port, intf in sorted(self.switch_ports[name].items()):
            argv += ["-i", f"{port}@{intf}"]
        argv += ["--p4runtime", "127.0.0.1:0", "--device-id", str(device)]
        for key, value in self._queue_flags(name).items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        argv += self.switch_args.get(name, self.switch_args.get("*", []))
        proc = self.spawn(f"switch-{name}", olaf_command(*argv))
        return self.wait_for_line(proc, "p4runtime on", 30).split()[-1]

    # -- processes ---------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], host: str | None = None,
              env: dict[str, str] | None = None) -> Process:
        """Start ``argv`` in ``host``'s namespace (the root namespace when None), logging to
        ``<out>/<name>.log``, and track it by PID."""
        log = self.out / f"{name}.log"
        fh = open(log, "wb")  # noqa: SIM115 (closed in _stop)
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        try:
            if host is None:
                popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=full_env,
                                         stdin=subprocess.DEVNULL)
            else:
                popen = self.hosts[host].popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=full_env,
                                               stdin=subprocess.DEVNULL)
        except BaseException:
            fh.close()
            raise
        proc = Process(name, host or "root", popen, log, fh)
        self.processes.append(proc)
        return proc

    def wait_for_line(self, proc: Process, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in proc.output().splitlines():
                if text in line:
                    return line
            if proc.popen.poll() is not None:
                raise TestbedError(f"{proc.name} exited ({proc.popen.returncode}) before "
                                   f"printing {text!r}:\n{proc.output()[-2000:]}")
            time.sleep(0.05)
        raise TestbedError(f"{proc.name} did not print {text!r} within {timeout:g}s:\n"
                           f"{proc.output()[-2000:]}")

    def wait(self, procs: list[Process], timeout: float) -> None:
        """Wait for ``procs`` to exit; raise if one fails or the time runs out."""
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TestbedError(f"{proc.name} still running after {timeout:g}s:\n"
                                   f"{proc.output()[-2000:]}") from None
            if proc.popen.returncode != 0:
                raise TestbedError(f"{proc.name} exited with {proc.popen.returncode}:\n"
                                   f"{proc.output()[-3000:]}")

    def stop_all(self, procs: list[Process], grace: float = 5.0) -> None:
        """SIGTERM to all of ``procs`` in order, then wait for each (exits overlap)."""
        for proc in procs:
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
        for proc in procs:
            self.stop(proc, grace, signalled=True)

    def stop(self, proc: Process, grace: float = 5.0, *, signalled: bool = False) -> int | None:
        """SIGTERM (the commands' clean stop), then SIGKILL after ``grace`` seconds.

        ``signalled``: SIGTERM was already sent; a second one could land while the program's
        interpreter is shutting down after its final line, where it kills with -15.
        Before the kill, SIGUSR1: a program that registered ``faulthandler`` for it writes
        its threads' stacks to its log, so a stuck stop can be diagnosed afterwards."""
        if proc.popen.poll() is None:
            if not signalled:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGUSR1)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(1.0)
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.kill()
                proc.popen.wait(5)
        proc.close_log()
        return proc.popen.returncode

    # -- teardown ----------------------------------------------------------------------

    def close(self) -> list[str]:
        """Stop everything this testbed started and return what is left (empty when clean)."""
        errors: list[str] = []
        # Hosts' programs first, switches last, so that final counters include everything.
        order = sorted(self.processes, key=lambda p: p.name.startswith("switch-"))
        for proc in order:
            try:
                self.stop(proc)
            except Exception as e:  # keep tearing down; report at the end
                errors.append(f"{proc.name}: {e}")
        if self.bmv2 is not None:
            try:
                self.bmv2.close()
            except Exception as e:
                errors.append(f"bmv2: {e}")
        for lk in self.links:
            with contextlib.suppress(Exception):
                lk.stop()
        self.links.clear()
        for node in [*self.hosts.values(), *self.switch_nodes.values()]:
            with contextlib.suppress(Exception):
                node.stop(deleteIntfs=True)
        # A link whose Mininet object failed halfway may leave its root-namespace end behind.
        for name in self._root_intfs:
            if name in self._existing_intfs():
                subprocess.run(["ip", "link", "del", name], capture_output=True)
        self._wait_gone(5.0)
        left = self.leftovers() + errors
        self.hosts.clear()
        self.switch_nodes.clear()
        return left

    def _wait_gone(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.leftovers():
            time.sleep(0.05)

    @staticmethod
    def _existing_intfs() -> list[str]:
        try:
            return os.listdir("/sys/class/net")
        except OSError:
            return []

    def leftovers(self) -> list[str]:
        """Interfaces, processes and namespaces of this testbed that still exist."""
        mine = set(self._root_intfs)
        left = [f"interface {n}" for n in self._existing_intfs() if n in mine]
        left += [f"process {p.name} (pid {p.pid})" for p in self.processes if p.popen.poll() is None]
        left += [f"shell pid {pid}" for pid in self._shell_pids if _alive(pid)]
        spaces = {ns for ns in self._namespaces.values() if ns}
        if spaces:
            for pid in _all_pids():
                ns = _net_ns(pid)
                if ns in spaces:
                    left.append(f"namespace {ns} (held by pid {pid})")
        return left

    def __enter__(self) -> Testbed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        left = self.close()
        if left and exc[0] is None:
            raise TestbedError("teardown left behind: " + "; ".join(left))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for our purposes; Mininet reaps its shells when it waits on them.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _all_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]
