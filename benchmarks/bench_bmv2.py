"""The software switch against bmv2's simple_switch, fast and logging builds, on AF_PACKET, same traffic.

One host in a network namespace (``olaf-bmv2bench<pid>``) is joined to the root
namespace by a veth pair. Each round starts a switch on the root side of that pair
— ``olaf switch -i 1@IFACE`` (the reference OlafQueue in interface mode), or
``simple_switch -i 1@IFACE`` running ``p4/olaf.p4`` compiled here with ``p4c-bm2-ss``, in
each of bmv2's two builds — and the host runs ``bench_switch``'s closed-loop load generator (its traffic: 70 %
UPDATE with V = 64 over 8 clusters, 32 workers and 64 blocks, 30 % PULL, moved with
``sendmmsg``/``recvmmsg`` through the host's kernel UDP stack) against the PS
address behind the switch, counting answers per second. Both switches answer on the
port a message came in on, so every answer comes back to the host. Each round runs
every switch once, in an order that rotates from round to round, so that all see the
same machine load; each switch is pinned to one core and the generator to another.

The two bmv2 builds (``bmv2_topologies.simple_switch.bmv2_binary``): ``fast``, bmv2 1.15.5
built with ``-O3 --disable-logging-macros --disable-elogger`` (``.p4tools/bmv2-fast``), and
``debug``, the same version with its logging macros compiled in (``.p4tools/p4tools``).
The benchmark checks each binary for bmv2's per-packet log strings and says whether they
are compiled in; neither is given a logger here. Ratios printed: soft/fast and
fast/debug (``--bmv2`` measures one build only).

bmv2 loses bursts at its libpcap input: of a 256-message burst the veth delivered all,
bmv2's pipeline counted about 45 (``msg_type_counter``), whichever build; the generator
reopens its window after 0.2 s without answers. Windows of 16, 64 and 256 and egress
queues of 64 or 1024 packets (``set_queue_depth``) gave the same rates within the noise of
a shared machine (checked 2026-12-01), so the default window is kept for all three.
Needs root (namespaces, AF_PACKET) and p4c-bm2-ss + both simple_switch builds.
Run: ``.venv/bin/python benchmarks/bench_bmv2.py`` (``--help`` for rounds, seconds, window).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the project's packages, when run as a script

from bmv2_topologies.netns import Hosts, can_create_namespaces  # noqa: E402
from bmv2_topologies.simple_switch import (  # noqa: E402
    bmv2_binary,
    compile_p4,
    free_tcp_port,
    missing_tools,
    stop_process,
)
from worker_transport.protocol import OLAF_PORT, MsgType, Olaf  # noqa: E402

HOST_ADDRESS, HOST_MAC = "10.0.0.1", "00:00:0a:00:00:01"
PS_ADDRESS, SWITCH_MAC = "10.0.0.100", "00:00:0a:00:00:fe"
"""Where the host sends: behind the switch, which answers OLAF messages itself."""
LOGGING_MARKER = b"Processing packet received on port"
"""A per-packet BMLOG_DEBUG_PKT format string: present only when bmv2's logging macros are compiled in."""

# Runs inside the host's namespace: wait until the switch answers, then bench_switch's generator.
GENERATOR = """
import select, socket, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.bench_switch import generate
from worker_transport.protocol import MsgType, Olaf
address = (sys.argv[2], int(sys.argv[3]))
seconds, window = float(sys.argv[4]), int(sys.argv[5])
cpu = None if sys.argv[6] == "-" else int(sys.argv[6])
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
deadline = time.monotonic() + 60
while True:
    probe.sendto(bytes(Olaf(msg_type=MsgType.PULL)), address)
    if select.select([probe], [], [], 0.1)[0]:
        break
    if time.monotonic() > deadline:
        sys.exit("the switch never answered a PULL")
probe.close()

class Out:
    def put(self, rate):
        print(f"rate {rate:.1f}", flush=True)

generate(address, seconds, window, cpu, Out())
"""


def bmv2_logging_macros(binary: str) -> bool:
    """Whether a bmv2 binary has its per-packet logging compiled in (see ``LOGGING_MARKER``)."""
    return LOGGING_MARKER in Path(binary).read_bytes()


def parse_rate(stdout: str) -> float:
    """The generator's answers/s from its output (``rate R``)."""
    for line in stdout.splitlines():
        if line.startswith("rate "):
            return float(line.split()[1])
    raise RuntimeError(f"the load generator printed no rate: {stdout!r}")


class Bench:
    """The namespace, the veth pair and the compiled program, for the whole run."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.program = compile_p4(work / "build")
        self.hosts = Hosts()
        try:
            self.iface = self.hosts.add("bmv2bench", f"{HOST_ADDRESS}/24", HOST_MAC)
            ns = self.hosts.namespace("bmv2bench")
            # Answers are sent to the MAC the request came from, so the switch needs no ARP.
            self.hosts.neighbour("bmv2bench", PS_ADDRESS, SWITCH_MAC)
            # Full UDP checksums on the wire: neither switch completes a partial one.
            subprocess.run(["ip", "netns", "exec", ns, "ethtool", "-K", "eth0", "tx", "off"],
                           capture_output=True, check=False)
            subprocess.run(["ethtool", "-K", self.iface, "tx", "off"], capture_output=True, check=False)
        except BaseException:
            self.hosts.close()
            raise
        cpus = sorted(os.sched_getaffinity(0))
        self.switch_cpu, self.load_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)

    def commands(self, builds: tuple[str, ...]) -> dict[str, list[str]]:
        """``soft`` and one ``simple_switch`` command per bmv2 build, keyed by the build's name."""
        cmds = {"soft": [sys.executable, "-m", "olaf.cli", "switch", "-i", f"1@{self.iface}",
                         "--stats-interval", "0"]}
        for build in builds:
            cmds[build] = [bmv2_binary("simple_switch", build), "-i", f"1@{self.iface}",
                           "--thrift-port", str(free_tcp_port()), "--device-id", str(os.getpid() % 60000 + 1),
                           # Its own notification socket: other simple_switch processes may run beside it.
                           "--notifications-addr", f"ipc://{self.work}/notifications.ipc", str(self.program)]
        return cmds

    def measure(self, cmd: list[str], seconds: float, window: int) -> float:
        pin = (lambda: os.sched_setaffinity(0, {self.switch_cpu})) if self.switch_cpu is not None else None
        switch = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  cwd=self.work, preexec_fn=pin)
        try:
            gen = subprocess.run(
                ["ip", "netns", "exec", self.hosts.namespace("bmv2bench"), sys.executable, "-c", GENERATOR,
                 str(ROOT), PS_ADDRESS, str(OLAF_PORT), str(seconds), str(window),
                 "-" if self.load_cpu is None else str(self.load_cpu)],
                capture_output=True, text=True, timeout=seconds + 120, check=False)
            if switch.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {switch.returncode} during the round")
            if gen.returncode != 0:
                raise RuntimeError(f"load generator failed: {gen.stderr.strip()}")
            return parse_rate(gen.stdout)
        finally:
            stop_process(switch)

    def close(self) -> None:
        self.hosts.close()


BUILD_CHOICES = {"both": ("fast", "debug"), "fast": ("fast",), "debug": ("debug",)}
LABELS = {"soft": "olaf switch (interface mode)", "fast": "simple_switch fast",
          "debug": "simple_switch debug"}


def ratio_pairs(builds: tuple[str, ...]) -> list[tuple[str, str]]:
    """The ratios to print: soft over the first build measured, then fast over debug."""
    pairs = [("soft", builds[0])]
    if builds == ("fast", "debug"):
        pairs.append(("fast", "debug"))
    return pairs


def rotated(names: list[str], k: int) -> list[str]:
    """Round ``k``'s order: ``names`` rotated by ``k``, so no switch always runs first."""
    k %= len(names)
    return names[k:] + names[:k]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0, help="per switch and round (default 5)")
    p.add_argument("--window", type=int, default=256, help="datagrams in flight (default 256)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds, each running every switch once in a rotating order (default 3)")
    p.add_argument("--bmv2", choices=tuple(BUILD_CHOICES), default="both",
                   help="bmv2 builds beside the software switch: both (default: soft, fast, debug), or "
                   "fast (-O3, logging macros compiled out) or debug (the logging build) alone. Only the "
                   "debug build can show a per-packet trace (--log-console); the fast one prints none")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0 or args.window < 1:
        print("bench_bmv2: error: --rounds and --window must be >= 1, --seconds > 0", file=sys.stderr)
        return 2
    builds = BUILD_CHOICES[args.bmv2]
    for reason in (can_create_namespaces(), *(missing_tools(b) for b in builds)):
        if reason is not None:
            print(f"bench_bmv2: cannot run: {reason}", file=sys.stderr)
            return 2
    for build in builds:
        binary = bmv2_binary("simple_switch", build)
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
        logging = bmv2_logging_macros(binary)
        print(f"bmv2 {build}: {binary} {version}; logging macros "
              + ("COMPILED IN (no logger is enabled here)" if logging else "compiled out"))
    example = bytes(Olaf(msg_type=MsgType.UPDATE, values=[0] * 64))
    print(f"load: bench_switch traffic, 70% UPDATE (V=64, {len(example)} B payload) / 30% PULL, "
          f"window {args.window}, {args.seconds:g} s per switch and round; host in a network namespace, "
          f"switch on the veth peer, each switch on one core; load average {os.getloadavg()[0]:.1f}")
    pairs = ratio_pairs(builds)
    ratios: dict[tuple[str, str], list[float]] = {pair: [] for pair in pairs}
    rates: dict[str, list[float]] = {name: [] for name in ("soft", *builds)}
    with tempfile.TemporaryDirectory(prefix="olaf-bench-bmv2-") as tmp:
        bench = Bench(Path(tmp))
        try:
            for k in range(args.rounds):
                cmds = bench.commands(builds)
                this = {name: bench.measure(cmds[name], args.seconds, args.window)
                        for name in rotated(list(cmds), k)}
                for name, rate in this.items():
                    rates[name].append(rate)
                for a, b in pairs:
                    ratios[a, b].append(this[a] / this[b])
                print(f"round {k + 1}: "
                      + ", ".join(f"{LABELS[n]} {this[n]:8.0f} answers/s" for n in ("soft", *builds))
                      + "; " + ", ".join(f"ratio {a}/{b} {ratios[a, b][-1]:.2f}" for a, b in pairs),
                      flush=True)
        finally:
            bench.close()
    for name, values in rates.items():
        print(f"{LABELS[name]}: median {statistics.median(values):.0f} answers/s "
              f"(min {min(values):.0f}, max {max(values):.0f})")
    for (a, b), values in ratios.items():
        print(f"ratio {a}/{b}: median {statistics.median(values):.2f} "
              f"(min {min(values):.2f}, max {max(values):.2f}, {args.rounds} rounds)")
    print(f"load average after the run: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
