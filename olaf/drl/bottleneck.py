"""The bottleneck of an experiment, named (DESIGN.md §7): the egress link toward the PS,
its buffer, the links' delays, the clusters, and the figures derived from them.

* ``C``, the egress rate toward the PS in bytes/s: DATA leaves at ``C / (36 + 4V)``
  blocks/s (the PS's PULL rate when ``C`` is given);
* ``B``, the buffer in bytes: ``floor(B / (36 + 4V))`` slots, the same for the OlafQueue
  and the FIFO baseline (a fair comparison spends the same SRAM);
* the propagation delay of every link and the workers' own link rate (uplink
  serialisation, and the weights' way back: see ``olaf.drl.simulated``);
* ``K`` clusters: worker ``w`` is in cluster ``w % K`` (``cluster_of``); OLAF holds at
  most one slot per (cluster, block), so at most K gradients;
* derived: the oversubscription ``rho = offered UPDATE bytes/s / C`` and the depth
  ``D = slots / blocks per gradient``, the buffer in gradients. A drop-tail FIFO is
  stale only when ``rho > 1`` and ``D >> 1``.

The arithmetic is here once; ``RunConfig`` turns ``egress_rate``/``buffer_bytes`` into
its ``pull_rate``/``capacity`` with it, the live display and the summary report it.
This module imports nothing of ``olaf`` (``olaf.drl.config`` imports it).

Presets, named after what they emulate (``PRESETS``, ``olaf run --bottleneck NAME``):

==========  ===========  ==========  ============  =============================================
name        C (bytes/s)  B (bytes)   propagation   emulates
==========  ===========  ==========  ============  =============================================
shallow     292,000      18,688      0             today's default: 1,000 PULLs/s, 64 slots (V=64)
tor-1g      125e6        173,000     1 us          a 1 GbE ToR port, even share of a 9 MB buffer
tor-1g-max  125e6        5,000,000   1 us          the same port claiming the most one port may
tor-10g     1.25e9       222,000     1 us          a 10 GbE ToR port, even share of a 12 MB buffer
==========  ===========  ==========  ============  =============================================

Sources of the preset numbers (public; switch vendors rarely publish buffer figures, so
these are the commonly cited ones, not measurements of ours):

* Broadcom Trident+ (BCM56840): 9 MB of on-chip packet buffer, split by the switch's
  software between dedicated per-port buffers and a dynamic shared pool; switches built
  on it (Arista 7050S-64, Cisco Nexus 3064X, ...) have 48 SFP+ and 4 QSFP ports and
  allow about 5 MB for one port's transmit queues ("max TX buffer"). J. Warner, "Packet
  buffers", https://people.ucsc.edu/~warner/Bufs/trident and
  https://port-buffers.forwardingplane.net/ (its Trident+ table). ``tor-1g``: 9 MB over
  52 ports = 173 KB per port; ``tor-1g-max``: the 5 MB one port may take.
* Broadcom Trident II (BCM56854, 48 x 10 GbE + 6 x 40 GbE): 12 MB, most of it a dynamic
  shared pool (https://port-buffers.forwardingplane.net/concepts/trident-ii).
  ``tor-10g``: 12 MB over 54 ports = 222 KB per port.
* Later chips have more buffer but proportionally less per Gbit/s: Trident 3 32 MB for
  3.2 Tb/s, Tomahawk 2 42 MB for 6.4 Tb/s (same source), which is why the per-port
  shares above are the generous end for 1 and 10 GbE.
* Propagation: a few metres of cable inside a rack (5 ns/m) and a cut-through switch's
  0.3-0.5 us (Broadcom Tomahawk, https://blog.ipspace.net/2015/12/broadcom-tomahawk-101.html)
  make about 1 us per hop.
* The workers' own links (``uplink_rate``) run at the port's speed (1 or 10 GbE); the
  ``shallow`` preset has none (loopback: no serialisation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from worker_transport.protocol import HEADER_LEN, VALUE_BYTES


def block_bytes(values: int) -> int:
    """Bytes of one UPDATE or DATA block on the wire: the 36-byte header and V values."""
    return HEADER_LEN + VALUE_BYTES * values


def slots_of(buffer_bytes: int, values: int) -> int:
    """Queue slots that ``buffer_bytes`` hold: ``floor(B / (36 + 4V))``."""
    return int(buffer_bytes) // block_bytes(values)


def blocks_per_second(egress_rate: float, values: int) -> float:
    """DATA blocks per second an egress link of ``egress_rate`` bytes/s carries."""
    return egress_rate / block_bytes(values)


def depth(slots: int, blocks_per_gradient: int) -> float:
    """D: the buffer in gradients."""
    return slots / blocks_per_gradient


def offered_rate(workers: int, blocks_per_gradient: int, values: int, turn_s: float) -> float:
    """UPDATE bytes/s that ``workers`` offer when each sends a gradient every ``turn_s``."""
    return workers * blocks_per_gradient * block_bytes(values) / turn_s


def rho(offered_bytes_per_s: float, egress_rate: float) -> float:
    """The oversubscription: offered UPDATE bytes/s over the egress rate."""
    return offered_bytes_per_s / egress_rate


def egress_for(rho_target: float, offered_bytes_per_s: float) -> float:
    """The egress rate C that makes ``offered_bytes_per_s`` an oversubscription ``rho_target``."""
    return offered_bytes_per_s / rho_target


def buffer_for(depth_target: float, blocks_per_gradient: int, values: int) -> int:
    """The buffer B (bytes) of ``depth_target`` gradients: whole slots, at least one."""
    slots = max(1, math.ceil(depth_target * blocks_per_gradient - 1e-9))
    return slots * block_bytes(values)


def cluster_of(worker_id: int, clusters: int) -> int:
    """Worker ``w`` is in cluster ``w % K``: consecutive ids spread over the clusters."""
    return worker_id % clusters


@dataclass(frozen=True)
class Preset:
    """A named bottleneck; the module doc gives each one's sources."""

    egress_rate: float
    """C, bytes/s toward the PS."""
    buffer_bytes: int
    """B, the buffer the queue may use."""
    propagation_s: float
    """One-way propagation delay of every link."""
    uplink_rate: float
    """Each worker's link, bytes/s (0: no serialisation)."""
    emulates: str
    """What it stands for, in a few words."""


PRESETS: dict[str, Preset] = {
    "shallow": Preset(292_000.0, 18_688, 0.0, 0.0,
                      "today's default: 1,000 PULLs/s of 292-byte blocks, 64 slots"),
    "tor-1g": Preset(125e6, 173_000, 1e-6, 125e6,
                     "a 1 GbE ToR port with an even share of a 9 MB Trident+ buffer"),
    "tor-1g-max": Preset(125e6, 5_000_000, 1e-6, 125e6,
                         "a 1 GbE ToR port taking the 5 MB one port may claim (Trident+)"),
    "tor-10g": Preset(1.25e9, 222_000, 1e-6, 1.25e9,
                      "a 10 GbE ToR port with an even share of a 12 MB Trident II buffer"),
}
"""The presets of ``--bottleneck NAME``."""


@dataclass(frozen=True)
class Figures:
    """The bottleneck of one run as numbers (``figures``)."""

    egress_rate: float
    """C, bytes/s."""
    blocks_per_s: float
    """DATA blocks/s through C."""
    buffer_bytes: int
    """B as the queue spends it: slots x block bytes."""
    slots: int
    blocks_per_gradient: int
    depth: float
    """D, the buffer in gradients."""
    gradient_bytes: int
    """UPDATE bytes of one whole gradient."""

    def rho(self, offered_bytes_per_s: float) -> float:
        return rho(offered_bytes_per_s, self.egress_rate)

    def offered(self, updates: float, seconds: float) -> float:
        """Offered UPDATE bytes/s of ``updates`` gradients (sent or skipped) in ``seconds``."""
        return updates * self.gradient_bytes / seconds if seconds > 0 else math.nan


def figures(capacity: int, pull_rate: float, values: int, blocks_per_gradient: int) -> Figures:
    """A run's figures from its queue slots and PULL rate (which ``RunConfig`` derives from
    B and C when they are given)."""
    size = block_bytes(values)
    return Figures(egress_rate=pull_rate * size, blocks_per_s=pull_rate,
                   buffer_bytes=capacity * size, slots=capacity,
                   blocks_per_gradient=blocks_per_gradient,
                   depth=depth(capacity, blocks_per_gradient),
                   gradient_bytes=blocks_per_gradient * size)
