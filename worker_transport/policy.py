"""Worker transmission control (DESIGN.md §4): whether to send the next update.

A policy is a small object with one method, ``probability(feedback, now_us)``, that
returns the chance of sending the next update given the latest ACK feedback. The
``Sender`` draws once per update, so every block of an update travels together or not
at all; a skipped update is dropped, never queued, because the next one is fresher.

Add a policy by writing any class with that method (``SendPolicy`` is a Protocol).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

DEFAULT_ALPHA = 0.2
DEFAULT_BETA = 0.05
"""Per millisecond: the exploration bonus halves every ~14 ms without an ACK."""


@dataclass(frozen=True)
class Feedback:
    """What the latest ACK carried, and when it arrived (worker clock, microseconds)."""

    queue_util: int
    """floor(255 * occupied / capacity) at the switch, 0..255."""
    active_clusters: int
    """Clusters with at least one queued slot, 0..255."""
    congested: bool
    """The ACK's CONGESTED flag."""
    received_us: int
    """Unwrapped microsecond time at which the ACK reached the worker."""


@runtime_checkable
class SendPolicy(Protocol):
    """Anything that turns the latest feedback into a send probability in [0, 1]."""

    def probability(self, feedback: Feedback | None, now_us: int) -> float:
        """``feedback`` is None before the first ACK; ``now_us`` on the same clock."""
        ...


class AlwaysSend:
    """The baseline worker: every update is sent (P_s = 1)."""

    name = "always"

    def probability(self, feedback: Feedback | None, now_us: int) -> float:
        return 1.0

    def __repr__(self) -> str:
        return "AlwaysSend()"


class OlafPolicy:
    """``P_s = min(Q_free / N + alpha * exp(-beta * Δ), 1)`` (DESIGN.md §4).

    ``Q_free = capacity * (1 - queue_util / 255)`` slots, ``N = max(active_clusters, 1)``,
    ``Δ`` the milliseconds since the last ACK arrived. Before any ACK, ``P_s = 1``.
    ``capacity`` is the switch's slot count, configured on the worker (the ACK carries
    only the utilisation).
    """

    name = "olaf"

    def __init__(
        self, capacity: int = 64, alpha: float = DEFAULT_ALPHA, beta: float = DEFAULT_BETA
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1 slot, got {capacity}")
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be finite and >= 0, got {alpha}")
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta must be finite and >= 0 (per ms), got {beta}")
        self.capacity = capacity
        self.alpha = alpha
        self.beta = beta

    def probability(self, feedback: Feedback | None, now_us: int) -> float:
        if feedback is None:
            return 1.0
        q_free = self.capacity * (1.0 - feedback.queue_util / 255.0)
        n = max(feedback.active_clusters, 1)
        # A clock step backwards must not inflate the bonus above alpha.
        delta_ms = max(now_us - feedback.received_us, 0) / 1000.0
        return min(q_free / n + self.alpha * math.exp(-self.beta * delta_ms), 1.0)

    def __repr__(self) -> str:
        return f"OlafPolicy(capacity={self.capacity}, alpha={self.alpha}, beta={self.beta})"


def make_policy(
    name: str, *, capacity: int = 64, alpha: float = DEFAULT_ALPHA, beta: float = DEFAULT_BETA
) -> SendPolicy:
    """A policy by name: ``olaf`` or ``always`` (for command-line flags)."""
    if name == "olaf":
        return OlafPolicy(capacity, alpha, beta)
    if name == "always":
        return AlwaysSend()
    raise ValueError(f"unknown send policy {name!r}; choose 'olaf' or 'always'")
