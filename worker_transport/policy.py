"""Worker transmission control (DESIGN.md §4): whether to send the next update.

A policy is a small object with one method, ``probability(feedback, now_us)``, that
returns the chance of sending the next update given the latest ACK feedback. The
``Sender`` draws once per update, so every block of an update travels together or not
at all; a skipped update is dropped, never queued, because the next one is fresher.
A policy may also have ``is_probe(feedback, now_us)``: True when the next update goes
out only because the feedback is too old to count (the ``Sender`` counts those), and
``settle(sent, answered)``: the ``Sender`` calls it once per update when that update's
answers are due (revision 3's loss ceiling learns from it), ``feedback_ttl_ms`` after it
went out at the latest.

Two revisions of the OLAF rule live here side by side: ``OlafPolicy`` (revision 3,
DESIGN.md §4, the default) and ``OlafRev2Policy`` (revision 2, kept for comparison).

Add a policy by writing any class with that method (``SendPolicy`` is a Protocol).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

DEFAULT_ALPHA = 0.2
DEFAULT_BETA = 0.05
"""Per millisecond: the exploration bonus halves every ~14 ms without an ACK."""
DEFAULT_FEEDBACK_TTL_MS = 100.0
"""An ACK older than this no longer counts: the next update is a probe (P_s = L)."""
DEFAULT_L_MIN = 0.05
"""The loss ceiling's floor (DESIGN.md §4): a worker always sends with at least this."""
AIMD_ANSWERED = 0.9
"""An update with a smaller answered share lowers the ceiling multiplicatively."""
AIMD_STEP = 0.1
"""What an update answered well enough adds to the ceiling."""
POLICY_NAMES = ("olaf", "olaf-rev2", "always")


@dataclass(frozen=True)
class Feedback:
    """What the latest ACK carried, and when it arrived (worker clock, microseconds)."""

    queue_util: int
    """0..255: with the switch's feedback revision 3 the share of the queue the worker's
    cluster can no longer use, with revision 2 the global occupancy (DESIGN.md §3)."""
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
    """Revision 3 (DESIGN.md §4): ``P_s = min(N * Q_free + alpha * exp(-beta * Δ), L)``.

    ``Q_free = 1 - queue_util / 255`` from the last ACK is, with the switch's feedback
    revision 3, the share of the queue the worker's own cluster can still use; ``N =
    max(active_clusters, 1)``; ``N * Q_free >= 1`` means the cluster still has its fair
    share 1/N, so everything goes out. ``Δ`` is the milliseconds since that ACK.

    ``L``, the loss ceiling, starts at 1 and follows what arrived (AIMD): the ``Sender``
    calls ``settle(sent, answered)`` once per update when its answers are due (all its
    ACKs came, or ``feedback_ttl_ms`` passed since it went out); with ``a =
    answered / sent``, ``a < 0.9`` gives ``L = max(L * a, l_min)``, else ``L = min(L +
    0.1, 1)``. Expired feedback sends the next update as a probe with ``P_s = L``; before
    any ACK ``P_s = L``. So a worker whose blocks go unanswered backs off even when no
    queue says so, and is never silenced: once per ``feedback_ttl_ms`` it sends with
    probability ``>= l_min``.
    """

    name = "olaf"

    def __init__(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        beta: float = DEFAULT_BETA,
        feedback_ttl_ms: float = DEFAULT_FEEDBACK_TTL_MS,
        l_min: float = DEFAULT_L_MIN,
    ) -> None:
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be finite and >= 0, got {alpha}")
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta must be finite and >= 0 (per ms), got {beta}")
        if not feedback_ttl_ms > 0:
            raise ValueError(f"feedback_ttl_ms must be > 0, got {feedback_ttl_ms}")
        if not 0 < l_min <= 1:
            raise ValueError(f"l_min must be in (0, 1], got {l_min}")
        self.alpha = alpha
        self.beta = beta
        self.feedback_ttl_ms = feedback_ttl_ms
        self.l_min = l_min
        self._ttl_us = feedback_ttl_ms * 1000.0
        self.ceiling = 1.0
        """L, the loss ceiling."""
        self.answered_share: float | None = None
        """``a`` of the last update settled (None before the first)."""

    def settle(self, sent: int, answered: int) -> None:
        """An update's answers are due: ``answered`` of its ``sent`` blocks had an ACK."""
        if sent <= 0:
            return
        a = min(max(answered, 0), sent) / sent
        self.answered_share = a
        if a < AIMD_ANSWERED:
            self.ceiling = max(self.ceiling * a, self.l_min)
        else:
            self.ceiling = min(self.ceiling + AIMD_STEP, 1.0)

    def is_probe(self, feedback: Feedback | None, now_us: int) -> bool:
        """True when ``feedback`` has expired, so the next update is sent as a probe."""
        return feedback is not None and now_us - feedback.received_us > self._ttl_us

    def probability(self, feedback: Feedback | None, now_us: int) -> float:
        ceiling = self.ceiling
        if feedback is None or now_us - feedback.received_us > self._ttl_us:
            return ceiling
        q_free = 1.0 - feedback.queue_util / 255.0
        n = max(feedback.active_clusters, 1)
        # A clock step backwards must not inflate the bonus above alpha.
        delta_ms = max(now_us - feedback.received_us, 0) / 1000.0
        return min(n * q_free + self.alpha * math.exp(-self.beta * delta_ms), ceiling)

    def __repr__(self) -> str:
        return (f"OlafPolicy(alpha={self.alpha}, beta={self.beta}, "
                f"feedback_ttl_ms={self.feedback_ttl_ms:g}, l_min={self.l_min})")


class OlafRev2Policy:
    """Revision 2 (the paper's form, DESIGN.md §4): ``P_s = min(Q_free / N + alpha * exp(-beta * Δ), 1)``.

    Kept as a named policy for comparison with revision 3 (``OlafPolicy``); it reads
    ``queue_util`` as the global occupancy (the switch's feedback revision 2), has no loss
    ceiling, and probes at 1. ``Q_free = 1 - queue_util / 255`` is the free share of the queue, ``N =
    max(active_clusters, 1)`` the number of clusters sharing it, ``Δ`` the milliseconds
    since the last ACK arrived. Feedback older than ``feedback_ttl_ms`` no longer
    counts: the next update is sent (``P_s = 1``), a probe whose ACKs bring fresh
    feedback. Before any ACK, ``P_s = 1``. A stale or forged "queue full" ACK therefore
    silences a worker for at most ``feedback_ttl_ms``.
    """

    name = "olaf-rev2"

    def __init__(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        beta: float = DEFAULT_BETA,
        feedback_ttl_ms: float = DEFAULT_FEEDBACK_TTL_MS,
    ) -> None:
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha must be finite and >= 0, got {alpha}")
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta must be finite and >= 0 (per ms), got {beta}")
        # inf is allowed: feedback that never expires (the rule before the probe).
        if not feedback_ttl_ms > 0:
            raise ValueError(f"feedback_ttl_ms must be > 0, got {feedback_ttl_ms}")
        self.alpha = alpha
        self.beta = beta
        self.feedback_ttl_ms = feedback_ttl_ms
        self._ttl_us = feedback_ttl_ms * 1000.0

    def is_probe(self, feedback: Feedback | None, now_us: int) -> bool:
        """True when ``feedback`` has expired, so the next update is sent as a probe."""
        return feedback is not None and now_us - feedback.received_us > self._ttl_us

    def probability(self, feedback: Feedback | None, now_us: int) -> float:
        if feedback is None or self.is_probe(feedback, now_us):
            return 1.0
        q_free = 1.0 - feedback.queue_util / 255.0
        n = max(feedback.active_clusters, 1)
        # A clock step backwards must not inflate the bonus above alpha.
        delta_ms = max(now_us - feedback.received_us, 0) / 1000.0
        return min(q_free / n + self.alpha * math.exp(-self.beta * delta_ms), 1.0)

    def __repr__(self) -> str:
        return (f"OlafRev2Policy(alpha={self.alpha}, beta={self.beta}, "
                f"feedback_ttl_ms={self.feedback_ttl_ms:g})")


def make_policy(
    name: str,
    *,
    alpha: float = DEFAULT_ALPHA,
    beta: float = DEFAULT_BETA,
    feedback_ttl_ms: float = DEFAULT_FEEDBACK_TTL_MS,
) -> SendPolicy:
    """A policy by name: ``olaf`` (revision 3), ``olaf-rev2`` or ``always`` (for flags)."""
    if name == "olaf":
        return OlafPolicy(alpha=alpha, beta=beta, feedback_ttl_ms=feedback_ttl_ms)
    if name == "olaf-rev2":
        return OlafRev2Policy(alpha=alpha, beta=beta, feedback_ttl_ms=feedback_ttl_ms)
    if name == "always":
        return AlwaysSend()
    raise ValueError(f"unknown send policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
