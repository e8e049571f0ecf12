"""All-T results: an exhaustive explicit-state search that closes its reachable set.

The bounded encodings unroll slots ``0..T-1`` from the empty queue. Here the same
semantics (DESIGN.md §3 rules as in ``dataplane.queue``, the §4 send rule of
``verification.sending``, AoM as in §5) are written as a finite transition system on
*complete* states, and every state reachable from the empty queue is enumerated slot
by slot. A state holds everything a slot's transition or the property reads:

* the queue: the slots in ring order from the head, each with its cluster, the worker
  that stored it, ``agg_count == 1`` and the contributor set (OLAF); cluster and
  worker (FIFO). The index, ``active_clusters`` and the occupancy follow from it;
* per worker: slots since its last send (= its last ACK, saturated where the send rule
  no longer changes), the forced-send pattern of that ACK's feedback (``util``,
  ``active``), its AoM (exact for fairness, saturated at ``bound + 1`` for
  responsiveness), whether it has kept sending (responsiveness), and its run of
  skipped slots while the queue had room (starvation, saturated at ``bound + 1``);
* the slot's phase in the PULL schedule (``t mod denominator(pull rate)``).

A slot's successors cover every send/skip choice the rule leaves open and every order
of the slot's messages (explored as sets of partial orders, so equal intermediate
states are merged). Workers of one cluster are interchangeable, so each state is
stored in a canonical order of its cluster members (symmetry reduction).

Fairness is first searched under an over-approximation that ignores the forced windows
of fresh ACKs, with ``CountedSystem``: the workers of a cluster counted by
``(since, AoM, pending)`` and the clusters exchanged, a slot with one PULL split into the
messages before and after it (the per-worker ``System`` where that does not apply).

**Why a closed search is a proof for all T.** Transitions and the property read only
the state and the phase. After the warm-up every new state is checked and remembered;
a state seen before at a depth ``>= W`` is not expanded again (its successors were).
When a slot brings no new state, the remembered set holds every state any slot
``t >= W`` can reach, and none violates the property: VERIFIED for every horizon. A
violating state found at depth ``d`` is the earliest violation (breadth first). If
the budget ends first, the search has proved the slots up to the depth it finished.

``System`` (``unbounded_system``) is the per-worker transition system, ``CountedSystem``
(``counted_system``) the counted one for fairness; this module runs the search over
either and says what a result rests on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from verification.config import Deployment
from verification.counted_system import CountedSystem, counted_reason
from verification.unbounded_system import System, _OutOfTime

MAX_STATES = 400_000
"""Remembered states at which the search gives up (memory), reported as open."""


@dataclass
class UnboundedResult:
    """``closed``: every reachable state checked, no violation (all T). ``violated``:
    a violating state first reachable at slot ``depth``. ``open``: budget or state limit
    reached; slots ``0..depth`` are proved (``depth`` -1: none)."""

    status: str
    depth: int
    states: int
    seconds: float
    reason: str = ""
    worst: list[Fraction] = field(default_factory=list)
    """Per slot 0..depth: the worst metric over the states reached at that slot
    (bounded mode only: fairness' deviation, responsiveness' AoM of a kept worker,
    starvation's longest run), for cross-checks against the reference queue."""
    abstraction: str = ""
    """Empty: the exact transition system. Otherwise the over-approximation searched."""

    def to_dict(self) -> dict[str, Any]:
        return {"engine": "explicit-state", "status": self.status, "depth": self.depth,
                "states": self.states, "seconds": round(self.seconds, 3), "reason": self.reason,
                "abstraction": self.abstraction or "none (exact)"}


def search(dep: Deployment, prop: str, deadline: float | None = None,
           max_depth: int | None = None, max_states: int = MAX_STATES,
           abstract: bool = True, counted: bool = True) -> UnboundedResult:
    """Explore every reachable state of ``dep`` for ``prop``. ``max_depth``: stop after
    that slot (bounded mode: no merging of states across slots, per-slot worst metric
    recorded, always exact) instead of searching for closure.

    Responsiveness and starvation are properties of each worker under test: one search
    per target, one per cluster (the members of a cluster are interchangeable). With
    ``abstract`` the first attempt leaves the other workers unconstrained (they send or
    skip at will; an over-approximation, so a closed search is a proof); if it reaches a
    violation, which may be spurious, the exact search decides (responsiveness: per
    target, the others' AoM untracked; starvation: one search over all workers).
    Fairness reads every worker's AoM: with ``abstract`` the first attempt ignores the
    forced windows of fresh ACKs (``free_window``), searched with ``CountedSystem`` where
    it applies (``counted``; else per worker); a violation there hands over to the exact
    search too."""
    start = time.monotonic()

    def refined(rough: UnboundedResult, abstraction: str, assumption: str) -> UnboundedResult:
        """The over-approximation's verdict if it closed, else the exact search's."""
        if rough.status != "violated":
            rough.abstraction = abstraction
            rough.seconds = time.monotonic() - start
            return rough
        exact = search(dep, prop, deadline, None, max_states, abstract=False)
        exact.reason += (f" ({assumption} a violation was reachable at slot {rough.depth}, "
                         "so the exact search decided)")
        exact.seconds = time.monotonic() - start
        return exact

    if abstract and max_depth is None and prop in ("responsiveness", "starvation"):
        return refined(_search_targets(dep, prop, deadline, None, max_states, free=True),
                       ABSTRACTION, "with the other workers unconstrained")
    if abstract and max_depth is None and prop == "fairness" and dep.sender != "always":
        if counted and counted_reason(dep) is None:
            system: System | CountedSystem = CountedSystem(dep)
            abstraction = WINDOW_ABSTRACTION + COUNTED
        else:
            system, abstraction = System(dep, prop, free_window=True), WINDOW_ABSTRACTION
        return refined(_search_one(system, prop, deadline, None, max_states), abstraction,
                       "with sends forced by the probe only")
    if prop == "fairness" or (prop == "starvation" and max_depth is None):
        return _search_one(System(dep, prop), prop, deadline, max_depth, max_states)
    return _search_targets(dep, prop, deadline, max_depth, max_states, free=False)


WINDOW_ABSTRACTION = ("sends forced only by the probe, the skip bound and before the first ACK "
                      "(a worker may skip even where a fresh ACK makes P_s = 1; the ACKs' "
                      "feedback is not tracked): an over-approximation")
COUNTED = ("; searched with the workers of a cluster counted by (slots since the last send, "
           "AoM, pending credit) and the clusters exchanged (exact for that system)")
ABSTRACTION = ("workers other than the one under test unconstrained (they send or skip at "
               "will after slot 0): an over-approximation")


def _search_targets(dep: Deployment, prop: str, deadline: float | None, max_depth: int | None,
                    max_states: int, free: bool) -> UnboundedResult:
    start = time.monotonic()
    parts = []
    sizes: set[int] = set()
    for c in range(dep.clusters):
        # Clusters of equal size are interchangeable (a cluster id is only a queue key):
        # one worker under test per cluster size covers them all.
        if len(dep.members(c)) in sizes:
            continue
        sizes.add(len(dep.members(c)))
        one = _search_one(System(dep, prop, dep.members(c)[0], free_others=free), prop, deadline,
                          max_depth, max_states)
        parts.append(one)
        if one.status != "closed" and max_depth is None:
            break
    states = sum(p.states for p in parts)
    worst = [max(ws) for ws in zip(*(p.worst for p in parts), strict=False)]
    seconds = time.monotonic() - start
    bad = [p for p in parts if p.status != "closed"]
    if not bad:
        last = parts[-1]
        return UnboundedResult("closed", max(p.depth for p in parts), states, seconds,
                               f"no new state at slot {last.depth} for any worker under test: "
                               f"{states} states, none violating", worst)
    return UnboundedResult(bad[0].status, bad[0].depth if bad[0].status == "violated" else
                           min(p.depth for p in parts), states, seconds, bad[0].reason, worst)


def _search_one(system: System | CountedSystem, prop: str, deadline: float | None, max_depth: int | None,
                max_states: int) -> UnboundedResult:
    start = time.monotonic()
    system.deadline = deadline
    bounded = max_depth is not None
    frontier = {system.initial()}
    seen: set[tuple[tuple, int]] = set()
    first = system.checked_from()
    worst: list[Fraction] = []
    t = 0
    proved = -1
    while True:
        try:
            layer = system.image(frontier, t)
        except _OutOfTime:
            return UnboundedResult("open", proved, len(seen), time.monotonic() - start,
                                   f"budget spent in slot {t}", worst)
        if not bounded and t >= first:
            phase = (t + 1) % system.period
            layer = {s for s in layer if (s, phase) not in seen}
            seen.update((s, phase) for s in layer)
        if bounded:
            worst.append(max((system.metric(s) for s in layer), default=Fraction(-1)))
        if t >= first and any(system.violates(s) for s in layer):
            return UnboundedResult("violated", t, len(seen), time.monotonic() - start,
                                   f"a reachable state violates {prop} at slot {t}", worst)
        proved = t
        if not layer:
            return UnboundedResult("closed", t, len(seen), time.monotonic() - start,
                                   f"no new state at slot {t}: {len(seen)} states reachable "
                                   f"from slot {first} on, none violating", worst)
        if bounded and t >= max_depth:
            return UnboundedResult("open", t, len(layer), time.monotonic() - start,
                                   f"stopped after slot {t}", worst)
        if len(seen) > max_states:
            return UnboundedResult("open", t, len(seen), time.monotonic() - start,
                                   f"more than {max_states} states", worst)
        frontier = layer
        t += 1


def describe_open(result: UnboundedResult) -> str:
    return (f"all-T search not closed ({result.reason}); no violation through slot "
            f"{result.depth}" if result.depth >= 0 else f"all-T search: {result.reason}")
