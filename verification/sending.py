"""The workers' transmission control (DESIGN.md §4) as the model sees it, in slots.

``P_s = min(Q_free / N + alpha * exp(-beta * Δ), 1)`` with ``Q_free = 1 - util/255``
(the free share), ``N = max(active_clusters, 1)``, ``Δ`` the milliseconds since the
last ACK; an ACK older than ``feedback_ttl`` no longer counts and the next update is a
probe (``P_s = 1``); before any ACK ``P_s = 1``.

The rule is written here from DESIGN.md, not imported from ``worker_transport``, so
that the model states the contract; a test compares it with the implementation. The
*legacy* rule (the pre-revision §4: ``Q_free`` counted in slots, feedback that never
expires) is kept so that its starvation counterexample stays reproducible.

The model decides sends at slot boundaries and an ACK arrives within the slot of its
UPDATE, so ``gap`` slots after the ACK's slot the feedback is ``Δ`` ms old with
``Δ`` in ``((gap - 1) * slot_ms, gap * slot_ms]``. A send is *forced* only when
``P_s = 1`` for every ``Δ`` in that interval; otherwise the solver may pick either
outcome of the coin flip. This over-approximates skips and never under-approximates
them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verification.config import Deployment

SEND_RULES = ("design", "legacy")
"""``design``: DESIGN.md §4 as revised (free share, expiry, probe). ``legacy``: the
old rule, ``Q_free = capacity * (1 - util/255)`` and no expiry."""


def queue_util(occupied: int, capacity: int) -> int:
    """The ACK's ``queue_util`` field: ``floor(255 * occupied / capacity)``."""
    return 255 * occupied // capacity


def slot_us(dep: Deployment) -> int:
    """A slot in whole microseconds (the worker clock's unit)."""
    return max(1, round(dep.slot_ms * 1000))


def base_probability(dep: Deployment, util: int, active: int, delta_ms: float) -> float:
    """``P_s`` from an ACK ``delta_ms`` old, ignoring expiry."""
    q_free = 1.0 - util / 255.0
    if dep.send_rule == "legacy":
        q_free *= dep.capacity
    n = max(active, 1)
    return min(q_free / n + dep.alpha * math.exp(-dep.beta * max(delta_ms, 0.0)), 1.0)


def expired(dep: Deployment, delta_ms: float) -> bool:
    """The ACK no longer counts: the next update is a probe (design rule only)."""
    return dep.send_rule == "design" and delta_ms > dep.feedback_ttl_ms


def probability(dep: Deployment, util: int | None, active: int, delta_ms: float) -> float:
    """``P_s`` of the worker's next update; ``util`` None before the first ACK."""
    if dep.sender == "always" or util is None or expired(dep, delta_ms):
        return 1.0
    return base_probability(dep, util, active, delta_ms)


def probe_gap(dep: Deployment) -> int | None:
    """The smallest ``gap`` (slots after the ACK's slot) at which the feedback has
    expired for every timing within the slot, so the worker must probe; None when
    feedback never expires (legacy rule, or the always-send baseline)."""
    if dep.sender == "always" or dep.send_rule == "legacy" or math.isinf(dep.feedback_ttl_ms):
        return None
    # Δ > (gap - 1) * slot_ms >= ttl.
    return math.ceil(dep.feedback_ttl_ms / dep.slot_ms) + 1


def forced(dep: Deployment, occupied: int, active: int, gap: int) -> bool:
    """True when the send ``gap`` slots after an ACK (occupancy ``occupied``,
    ``active`` clusters) has ``P_s = 1`` for every timing within the slot."""
    if dep.sender == "always":
        return True
    pg = probe_gap(dep)
    if pg is not None and gap >= pg:
        return True
    util = queue_util(occupied, dep.capacity)
    # P_s without expiry only shrinks with Δ: its least value over the part of
    # ((gap-1)*slot, gap*slot] where the ACK has not expired is at the right end.
    latest = gap * dep.slot_ms
    if pg is not None:
        latest = min(latest, dep.feedback_ttl_ms)
    return base_probability(dep, util, active, latest) >= 1.0


def forced_window(dep: Deployment, occupied: int, active: int) -> int:
    """Slots ``1..w`` after an ACK during which the send is forced by ``P_s = 1``
    before any expiry: 0 = never; ``horizon`` = forced at every gap (including when
    the forced stretch reaches the probe gap, so the worker can never skip)."""
    pg = probe_gap(dep)
    window = 0
    for gap in range(1, dep.horizon + 1):
        if pg is not None and gap >= pg:
            return dep.horizon
        if not forced(dep, occupied, active, gap):
            break
        window = gap
    return window if window < dep.horizon else dep.horizon
