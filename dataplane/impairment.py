"""Loss and delay on a switch's egress ports.

This kernel has no netem, so, like SwitchML's drop simulator, the switch itself
drops a response with a per-port probability and holds it back for a per-port
delay before sending it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def parse_port_values(specs: Iterable[str], name: str, lo: float, hi: float) -> dict[int | None, float]:
    """Parse ``VALUE`` (every port) or ``PORT:VALUE`` options into ``{port or None: value}``.

    Raises ``ValueError`` with a one-line message on malformed input.
    """
    out: dict[int | None, float] = {}
    for spec in specs:
        port_text, _, value_text = spec.rpartition(":")
        try:
            port = int(port_text) if port_text else None
            value = float(value_text)
        except ValueError:
            raise ValueError(f"{name} takes VALUE or PORT:VALUE, not {spec!r}") from None
        if not lo <= value <= hi or (port is not None and port < 0):
            raise ValueError(f"{name} {spec!r}: value must be in [{lo:g}, {hi:g}], port >= 0")
        out[port] = value
    return out


@dataclass
class Impairment:
    """Per-egress-port drop probability and delay; ``None`` keys apply to every port.

    ``type_drop`` drops messages by OLAF message type wherever the switch sees them: a
    request type (UPDATE) as it comes in, before the queue, a response type (DATA) as it
    goes out. It is how one direction of a path loses packets (``olaf run --chaos``);
    replace the whole dict to change it from another thread.
    """

    drop_prob: dict[int | None, float] = field(default_factory=dict)
    delay_ms: dict[int | None, float] = field(default_factory=dict)
    seed: int | None = None
    type_drop: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        # (due, arrival order, item): the order breaks ties so items themselves are never compared.
        self._held: list[tuple[float, int, Any]] = []
        self._order = itertools.count()
        self.dropped = 0
        self.dropped_types: dict[int, int] = {}
        """Messages ``keep_types`` dropped, by message type."""

    def _lookup(self, table: dict[int | None, float], ports: np.ndarray) -> np.ndarray:
        default = table.get(None, 0.0)
        values = np.full(len(ports), default)
        for port, value in table.items():
            if port is not None:
                values[ports == port] = value
        return values

    def keep(self, ports: np.ndarray) -> np.ndarray:
        """Boolean mask of the packets (by egress port) that survive the random drop."""
        if not self.drop_prob:
            return np.ones(len(ports), bool)
        survive = self._rng.random(len(ports)) >= self._lookup(self.drop_prob, ports)
        self.dropped += int((~survive).sum())
        return survive

    def keep_types(self, msg_types: np.ndarray) -> np.ndarray:
        """Boolean mask of the messages (by message type) that survive ``type_drop``."""
        table = self.type_drop  # one read: another thread may replace it
        if not table:
            return np.ones(len(msg_types), bool)
        prob = np.zeros(len(msg_types))
        for kind, p in table.items():
            prob[msg_types == kind] = p
        survive = self._rng.random(len(msg_types)) >= prob
        for kind in np.unique(msg_types[~survive]).tolist():
            n = int((msg_types[~survive] == kind).sum())
            self.dropped_types[kind] = self.dropped_types.get(kind, 0) + n
        return survive

    def schedule(self, ports: np.ndarray, items: list[Any], now: float) -> list[Any]:
        """Items due now (no delay on their port); the others are held until ``due``."""
        if not self.delay_ms:
            return items
        delays = self._lookup(self.delay_ms, ports) / 1e3
        ready = []
        for delay, item in zip(delays.tolist(), items, strict=True):
            if delay <= 0:
                ready.append(item)
            else:
                heapq.heappush(self._held, (now + delay, next(self._order), item))
        return ready

    def due(self, now: float) -> list[Any]:
        """Held items whose delay has passed, in the order they were scheduled to leave."""
        out = []
        while self._held and self._held[0][0] <= now:
            out.append(heapq.heappop(self._held)[2])
        return out

    def next_due(self) -> float | None:
        return self._held[0][0] if self._held else None
