"""A real kernel bottleneck in front of the PS: HTB rate and a FIFO limit set with ``tc``.

DESIGN.md §7 defines the experiment's bottleneck as the egress toward the PS: a rate ``C``
(bytes/s) and a buffer ``B`` (bytes). On the testbed that egress is the **switch-side**
end of the PS's link (``olaf<tag><switch>p<port>``, in the root namespace): DATA (and
EMPTY) leave the switch process there, written by ``olaf switch`` (AF_PACKET) or bmv2
(libpcap) into that interface's qdisc, and cross the veth to the PS's ``eth0``. The PS's
own ``eth0`` egress carries only PULLs and MODEL broadcasts, and the workers' links carry
UPDATEs and ACKs, so shaping there would not queue DATA. This module puts, on that
interface's egress::

    htb root 1: (default 1:1) -> class 1:1 rate C ceil C -> bfifo limit B   (or pfifo limit N)

The kernel here has HTB, TBF, pfifo and bfifo but no netem, so there is no delay emulation;
queueing delay is what the FIFO builds up (at most ``B / C``).

Units (tc's, so that ``tc -s qdisc show`` reads the same): a rate is ``<number><unit>``
with ``bit``, ``kbit``, ``mbit``, ``gbit`` (bits/s, powers of 1000) or ``bps``, ``kbps``,
``mbps``, ``gbps`` (**bytes**/s, as tc reads them); a limit is ``<number>`` or
``<number>b`` (bytes), ``<number>kb`` / ``<number>mb`` (1024 / 1024² bytes, as tc), or
``<number>p`` (packets, a pfifo). ``C`` and ``B`` printed by ``describe`` are bytes.

What the bytes count: HTB and bfifo count whole Ethernet frames (``skb->len``: 14 bytes of
Ethernet, 20 of IPv4, 8 of UDP, then the 36-byte OLAF header and ``4V`` of values), while
§7's ``C / (36 + 4V)`` counts the OLAF message alone, so the link carries fewer DATA
blocks per second than §7's figure; ``describe`` prints both.

A sender blocked by its own socket buffer does not reach the qdisc: keep ``B`` below what
the writing process may have in flight (bmv2's libpcap socket: ``net.core.wmem_default``,
212,992 bytes of skb truesize, about 2-3x the frame bytes of small frames), or the switch
process stalls (bmv2) or drops on EAGAIN (``olaf switch``) before tc's FIFO fills.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass

OLAF_HEADER = 36
FRAME_HEADERS = 14 + 20 + 8
"""Ethernet + IPv4 + UDP in front of every OLAF message: what HTB and bfifo also count."""

_RATE_UNITS = {"bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
               "bps": 1.0, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024 ** 2, "mb": 1024 ** 2}
_PACKET_UNITS = ("p", "pkt", "pkts", "packets")
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")


class ShapingError(ValueError):
    """A rate or limit that cannot be parsed, or tc refused the shaping; the message says which."""


def parse_rate(text: str) -> float:
    """``C`` in bytes/s from a tc-style rate (``10mbit``, ``500kbps``: kbps is kilobytes/s)."""
    m = _NUMBER.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _RATE_UNITS:
        raise ShapingError(f"rate {text!r}: give a number and one of {', '.join(_RATE_UNITS)} "
                           "(tc's units: ...bit are bits/s, ...bps are bytes/s)")
    rate = float(m.group(1)) * _RATE_UNITS[unit]
    if rate < 1000 / 8:
        raise ShapingError(f"rate {text!r}: below 1 kbit/s, which HTB does not shape usefully")
    return rate


@dataclass(frozen=True)
class Limit:
    """A FIFO's limit: ``value`` bytes (bfifo) or packets (pfifo)."""

    value: int
    packets: bool

    def qdisc(self) -> list[str]:
        """The leaf qdisc's tc arguments."""
        return ["pfifo" if self.packets else "bfifo", "limit", str(self.value)]

    def __str__(self) -> str:
        return f"{self.value} packets" if self.packets else f"{self.value} bytes"


def parse_limit(text: str) -> Limit:
    """A FIFO limit: ``64kb`` / ``65536`` / ``65536b`` (bytes, bfifo) or ``100p`` (packets, pfifo)."""
    m = _NUMBER.match(text)
    unit = m.group(2).lower() if m else ""
    if m is not None and unit in _PACKET_UNITS and m.group(1).isdigit():
        value, packets = int(m.group(1)), True
    elif m is not None and unit in _SIZE_UNITS:
        value, packets = int(float(m.group(1)) * _SIZE_UNITS[unit]), False
    else:
        raise ShapingError(f"limit {text!r}: give bytes (65536, 64kb, 1mb; kb = 1024 bytes as in tc) "
                           "or whole packets (100p)")
    if value < 1:
        raise ShapingError(f"limit {text!r}: must be at least 1 {'packet' if packets else 'byte'}")
    return Limit(value, packets)


DEFAULT_LIMIT = Limit(1000, packets=True)
"""pfifo's limit when none is given: a veth's default txqueuelen, what tc would pick."""


@dataclass(frozen=True)
class LinkShape:
    """Rate ``C`` (bytes/s) and FIFO ``limit`` of one interface's egress."""

    rate: float
    limit: Limit = DEFAULT_LIMIT

    @classmethod
    def parse(cls, rate: str, limit: str | None = None) -> LinkShape:
        return cls(parse_rate(rate), DEFAULT_LIMIT if limit is None else parse_limit(limit))

    def tc_commands(self, dev: str) -> list[list[str]]:
        """The ``tc`` argument lists that install this shape on ``dev``'s egress (root qdisc)."""
        bits = str(round(self.rate * 8))
        # One class, so the quantum only decides when tc warns; 1514 keeps it quiet at any rate.
        return [
            ["qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"],
            ["class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", f"{bits}bit",
             "ceil", f"{bits}bit", "quantum", "1514"],
            ["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *self.limit.qdisc()],
        ]

    def derived(self, values: int) -> dict[str, float | int | str]:
        """§7's numbers for V = ``values``: C and B in bytes, blocks/s, slots, and the wire's view."""
        message = OLAF_HEADER + 4 * values
        frame = FRAME_HEADERS + message
        out: dict[str, float | int | str] = {
            "rate_bytes_per_s": self.rate, "rate_mbit_per_s": self.rate * 8 / 1e6,
            "data_message_bytes": message, "data_frame_bytes": frame,
            "design_blocks_per_s": self.rate / message, "wire_data_frames_per_s": self.rate / frame,
        }
        if self.limit.packets:
            # A packet limit holds that many DATA blocks whatever their size: §7's B is then
            # the messages' bytes.
            out |= {"limit_packets": self.limit.value, "buffer_bytes": self.limit.value * message,
                    "design_slots": self.limit.value, "wire_data_frames": self.limit.value}
        else:
            out |= {"buffer_bytes": self.limit.value, "design_slots": self.limit.value // message,
                    "wire_data_frames": self.limit.value // frame}
        wire_bytes = self.limit.value * frame if self.limit.packets else self.limit.value
        out["max_queueing_delay_ms"] = wire_bytes / self.rate * 1e3
        return out

    def describe(self, values: int) -> str:
        """One paragraph with the derived numbers (printed by ``olaf testbed run``)."""
        d = self.derived(values)
        rate = (f"C = {self.rate:,.0f} B/s ({d['rate_mbit_per_s']:g} Mbit/s): "
                f"{d['design_blocks_per_s']:,.0f} DATA blocks/s by DESIGN §7 (C / (36 + 4V) = C / "
                f"{d['data_message_bytes']} B), {d['wire_data_frames_per_s']:,.0f} on the wire "
                f"({d['data_frame_bytes']} B frames)")
        if self.limit.packets:
            buf = (f"pfifo limit {self.limit.value} packets: {d['design_slots']} slots, "
                   f"B = {d['buffer_bytes']:,} B of DATA messages by §7")
        else:
            buf = (f"bfifo limit B = {self.limit.value:,} B: {d['design_slots']} slots by §7 "
                   f"(floor(B / {d['data_message_bytes']})), {d['wire_data_frames']} DATA frames")
        return f"{rate}; {buf}; at most {d['max_queueing_delay_ms']:.1f} ms of queueing"


def _tc(args: list[str], netns: str | None) -> subprocess.CompletedProcess[str]:
    prefix = ["tc"] if netns is None else ["tc", "-n", netns]
    return subprocess.run([*prefix, *args], capture_output=True, text=True, check=False)


def apply(dev: str, shape: LinkShape, netns: str | None = None) -> None:
    """Replace ``dev``'s root qdisc (e.g. Mininet TCLink's htb) with ``shape``; raises
    ``ShapingError`` with tc's message when it refuses (e.g. a kernel without sch_htb)."""
    _tc(["qdisc", "del", "dev", dev, "root"], netns)  # none there yet is fine
    for args in shape.tc_commands(dev):
        done = _tc(args, netns)
        if done.returncode != 0:
            raise ShapingError(f"tc {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")


@dataclass(frozen=True)
class QdiscStats:
    """One qdisc's counters from ``tc -s qdisc show``."""

    kind: str
    handle: str
    sent_bytes: int
    sent_packets: int
    dropped: int
    overlimits: int
    backlog_bytes: int
    backlog_packets: int


def qdisc_stats(dev: str, netns: str | None = None) -> dict[str, QdiscStats]:
    """``dev``'s qdiscs by kind (``htb``, ``bfifo``/``pfifo``), from ``tc -s -j qdisc show``."""
    done = _tc(["-s", "-j", "qdisc", "show", "dev", dev], netns)
    if done.returncode != 0:
        raise ShapingError(f"tc -s qdisc show dev {dev} failed: {done.stderr.strip()}")
    stats = {}
    for q in json.loads(done.stdout or "[]"):
        stats[q["kind"]] = QdiscStats(q["kind"], q["handle"], q.get("bytes", 0), q.get("packets", 0),
                                      q.get("drops", 0), q.get("overlimits", 0), q.get("backlog", 0),
                                      q.get("qlen", 0))
    return stats


def leaf_stats(dev: str, netns: str | None = None) -> QdiscStats:
    """The FIFO under the HTB class: where the bottleneck queues and drops."""
    stats = qdisc_stats(dev, netns)
    for kind in ("bfifo", "pfifo"):
        if kind in stats:
            return stats[kind]
    raise ShapingError(f"{dev} has no bfifo/pfifo qdisc (not shaped by bmv2_topologies.shaping)")
