"""The workers' transmission control (DESIGN.md §4) as the model sees it, in slots.

Revision 3 (``feedback = 3``, the design): ``P_s = min(N * Q_free + alpha *
exp(-beta * Δ), L)`` with ``Q_free = 1 - util/255`` where the ACK's ``util`` is the
share of the queue the worker's own cluster can no longer use (``room_c``, DESIGN.md
§3 Feedback, with the quota), ``N = max(active_clusters, 1)``, ``Δ`` the milliseconds
since the last ACK and ``L`` the AIMD loss ceiling (``next_ceiling``); an ACK older
than ``feedback_ttl`` no longer counts and the next update is a probe at ``P_s = L``;
before any ACK ``P_s = L = 1``. Revision 2 (``feedback = 2``, kept for comparison):
``P_s = min(Q_free / N + alpha * exp(-beta * Δ), 1)`` with the global occupancy, no
ceiling, probes at 1.

The slot model has no loss (every block is answered within its slot), so there ``a = 1``
at every due update and ``L`` stays 1 (``next_ceiling(1, 1) = 1``); the ceiling's own
properties, under any loss, are proved by ``verification.ceiling``. What the slot
model reads of ``L`` is ``L_min <= L <= 1`` (proved there): a send is forced only
where ``P_s = 1`` (so ``L = 1``), and a decision is a send *opportunity*
(starvation under revision 3) where ``P_s >= L_min`` for every ``L`` in range,
i.e. where ``N * Q_free + alpha * exp(-beta * Δ) >= L_min`` or the feedback expired.

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
FEEDBACK_REVISIONS = (2, 3)
"""DESIGN.md §3 Feedback and §4: 3 (room_c, ``N * Q_free``, the loss ceiling; the
design) or 2 (global occupancy, ``Q_free / N``; kept as a named policy)."""
L_MIN = 0.05
"""DESIGN.md §4: the loss ceiling's floor."""
CEILING_STEP = 0.1
"""DESIGN.md §4: the ceiling's additive increase per update answered >= 90 %."""
ANSWERED_ENOUGH = 0.9
"""DESIGN.md §4: an update with a smaller answered share lowers the ceiling."""
"""``design``: DESIGN.md §4 as revised (free share, expiry, probe). ``legacy``: the
old rule, ``Q_free = capacity * (1 - util/255)`` and no expiry."""


def queue_util(occupied: int, capacity: int) -> int:
    """The global occupancy ``floor(255 * occupied / capacity)``: every ACK's
    ``queue_util`` under revision 2, DATA and EMPTY's under both."""
    return 255 * occupied // capacity


def room(mode: str, capacity: int, quota: int, occupied: int, held: int) -> int:
    """DESIGN.md §3 Feedback, revision 3: the slots that the next update of a cluster
    holding ``held`` slots can use, after the operation. OLAF mode counts the slots it
    holds (it can merge into or replace in them); FIFO mode only new room."""
    new_room = max(0, min(capacity - occupied, quota - held))
    return held + new_room if mode == "olaf" else new_room


def cluster_util(mode: str, capacity: int, quota: int, occupied: int, held: int) -> int:
    """Revision 3's ACK ``queue_util``: ``floor(255 * (capacity - room_c) / capacity)``."""
    return 255 * (capacity - room(mode, capacity, quota, occupied, held)) // capacity


def ack_util(dep: Deployment, occupied: int, held: int) -> int:
    """The ``queue_util`` of an UPDATE's ACK under ``dep``'s feedback revision, from the
    occupancy and the slots the UPDATE's cluster holds after the operation."""
    if dep.feedback == 2:
        return queue_util(occupied, dep.capacity)
    return cluster_util(dep.mode, dep.capacity, dep.quota, occupied, held)


def next_ceiling(ceiling: float, answered: float) -> float:
    """DESIGN.md §4: the loss ceiling after an update whose answers are due, with
    ``answered`` the share of its blocks that were answered."""
    if answered < ANSWERED_ENOUGH:
        return max(ceiling * answered, L_MIN)
    return min(ceiling + CEILING_STEP, 1.0)


def slot_us(dep: Deployment) -> int:
    """A slot in whole microseconds (the worker clock's unit)."""
    return max(1, round(dep.slot_ms * 1000))


def share(dep: Deployment, util: int, active: int) -> float:
    """The feedback term of ``P_s``: ``N * Q_free`` (revision 3) or ``Q_free / N``."""
    q_free = 1.0 - util / 255.0
    if dep.send_rule == "legacy":
        q_free *= dep.capacity
    n = max(active, 1)
    return n * q_free if dep.feedback == 3 else q_free / n


def base_probability(dep: Deployment, util: int, active: int, delta_ms: float,
                     ceiling: float = 1.0) -> float:
    """``P_s`` from an ACK ``delta_ms`` old, ignoring expiry (``ceiling``: ``L``,
    revision 3 only)."""
    top = ceiling if dep.feedback == 3 else 1.0
    return min(share(dep, util, active)
               + dep.alpha * math.exp(-dep.beta * max(delta_ms, 0.0)), top)


def expired(dep: Deployment, delta_ms: float) -> bool:
    """The ACK no longer counts: the next update is a probe (design rule only)."""
    return dep.send_rule == "design" and delta_ms > dep.feedback_ttl_ms


def probability(dep: Deployment, util: int | None, active: int, delta_ms: float,
                ceiling: float = 1.0) -> float:
    """``P_s`` of the worker's next update; ``util`` None before the first ACK. A probe
    (and the first update) goes out at ``P_s = L`` under revision 3, at 1 under 2."""
    if dep.sender == "always":
        return 1.0
    if util is None or expired(dep, delta_ms):
        return ceiling if dep.feedback == 3 else 1.0
    return base_probability(dep, util, active, delta_ms, ceiling)


def probe_gap(dep: Deployment) -> int | None:
    """The smallest ``gap`` (slots after the ACK's slot) at which the feedback has
    expired for every timing within the slot, so the worker must probe; None when
    feedback never expires (legacy rule, or the always-send baseline)."""
    if dep.sender == "always" or dep.send_rule == "legacy" or math.isinf(dep.feedback_ttl_ms):
        return None
    # Δ > (gap - 1) * slot_ms >= ttl.
    return math.ceil(dep.feedback_ttl_ms / dep.slot_ms) + 1


def forced(dep: Deployment, occupied: int, active: int, gap: int, held: int = 1,
           level: float = 1.0) -> bool:
    """True when the send ``gap`` slots after an ACK (occupancy ``occupied``,
    ``active`` clusters, the UPDATE's cluster holding ``held`` slots) has ``P_s >=
    level`` for every timing within the slot, before any expiry counts. ``level`` 1:
    the send is forced. ``level`` ``L_MIN``: the decision is a send opportunity for
    every ceiling ``L`` in ``[L_min, 1]`` (revision 3's starvation)."""
    if dep.sender == "always":
        return True
    pg = probe_gap(dep)
    if pg is not None and gap >= pg:
        return True
    util = ack_util(dep, occupied, held)
    # P_s without expiry only shrinks with Δ: its least value over the part of
    # ((gap-1)*slot, gap*slot] where the ACK has not expired is at the right end.
    latest = gap * dep.slot_ms
    if pg is not None:
        latest = min(latest, dep.feedback_ttl_ms)
    # The ceiling is 1 in the slot model (no loss), and min(x, L) >= L_min iff
    # x >= L_min for every L >= L_min: either way only the first term is compared.
    return base_probability(dep, util, active, latest) >= level


def forced_window(dep: Deployment, occupied: int, active: int, held: int = 1,
                  level: float = 1.0) -> int:
    """Slots ``1..w`` after an ACK during which the send is forced by ``P_s = 1``
    (``level`` 1; or ``P_s >= level``) before any expiry: 0 = never; ``horizon`` =
    at every gap (including when the stretch reaches the probe gap, so the worker can
    never skip)."""
    pg = probe_gap(dep)
    window = 0
    for gap in range(1, dep.horizon + 1):
        if pg is not None and gap >= pg:
            return dep.horizon
        if not forced(dep, occupied, active, gap, held, level):
            break
        window = gap
    return window if window < dep.horizon else dep.horizon
