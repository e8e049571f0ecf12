"""Isolation counterexamples as traces: one job, playing the isolation encoding's slots
(fills and PULL positions) through §3 with concrete clusters, workers, blocks and
contributors (``Simulator``), for ``IsolationModel.extract``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verification.config import ISOLATION, Deployment
from verification.trace import Event, Slot, Trace


# -- the rules with clusters, workers and blocks, for traces -----------------------------
@dataclass
class _Entry:
    cluster: int
    worker: int
    block: int
    single: bool
    contributors: set[int] = field(default_factory=set)


class Simulator:
    """Plays slots given as ``(fill, is_pull)`` per message through §3 with concrete
    clusters, workers, blocks and contributors. The victim's UPDATEs of a slot come from
    its workers in id order (interchangeable: each sends once a slot). Each of a fill's
    attacker UPDATEs comes from the lowest other cluster below its quota (one exists while
    the attackers hold fewer than ``attacker_quota``), from that cluster's first worker,
    with the lowest block id the cluster does not hold: a fresh key, ENQUEUED."""

    def __init__(self, dep: Deployment, victim: int) -> None:
        self.dep, self.victim = dep, victim
        self.ring: list[_Entry] = []

    @staticmethod
    def victim_admissions(dep: Deployment, victim: int,
                          order: list[list[tuple[int, bool]]]) -> list[bool]:
        """Per slot: some UPDATE of the victim reached the queue."""
        sim = Simulator(dep, victim)
        return [any(e.cluster == victim and e.outcome != "DROPPED_FULL"
                    for e in sim.slot(t, msgs) if e.kind == "update")
                for t, msgs in enumerate(order)]

    def _attack(self) -> Event:
        """One attacker UPDATE with a fresh key: ENQUEUED by the lowest other cluster
        below its quota, or — the ring full or every other cluster at its quota (never in
        a model's trace, whose fills stay within ``attacker_quota``) — DROPPED_FULL."""
        dep = self.dep
        held = [sum(1 for x in self.ring if x.cluster == k) for k in range(dep.clusters)]
        others = [k for k in range(dep.clusters) if k != self.victim]
        a = next((k for k in others if held[k] < dep.quota), others[0])
        u = dep.members(a)[0]
        blocks = {x.block for x in self.ring if x.cluster == a}
        block = min(b for b in range(dep.capacity + 1) if b not in blocks)
        if len(self.ring) >= dep.capacity or held[a] >= dep.quota:
            outcome = "DROPPED_FULL"
        else:
            self.ring.append(_Entry(a, u, block, True, {u}))
            outcome = "ENQUEUED"
        return Event("update", len(self.ring), worker=u, cluster=a, outcome=outcome,
                     block=block)

    def slot(self, t: int, msgs: list[tuple[int, bool]]) -> list[Event]:
        dep, v = self.dep, self.victim
        victims_left = list(dep.members(v))
        events = []
        for fill, is_pull in msgs:
            events += [self._attack() for _ in range(fill)]
            if is_pull:
                if not self.ring:
                    events.append(Event("pull", 0, response="EMPTY"))
                    continue
                e = self.ring.pop(0)
                events.append(Event("pull", len(self.ring), cluster=e.cluster, response="DATA",
                                    contributors=sorted(e.contributors),
                                    credited=sorted(e.contributors), block=e.block))
                continue
            u = victims_left.pop(0)
            mine = next((x for x in self.ring if x.cluster == v), None)
            if dep.mode == "olaf" and mine is not None:
                # §3 rules 1-2 under rewards=merge: its own single slot is REPLACED, else MERGED.
                if mine.single and mine.worker == u:
                    outcome, mine.contributors = "REPLACED", {u}
                else:
                    outcome, mine.single = "MERGED", False
                    mine.contributors.add(u)
            elif (len(self.ring) < dep.capacity
                  and sum(1 for x in self.ring if x.cluster == v) < dep.quota):
                self.ring.append(_Entry(v, u, 0, True, {u}))
                outcome = "ENQUEUED"
            else:
                outcome = "DROPPED_FULL"
            events.append(Event("update", len(self.ring), worker=u, cluster=v, outcome=outcome))
        return events

    def trace(self, order: list[list[tuple[int, bool]]], bad: int) -> Trace:
        dep = self.dep
        received = [0] * dep.workers
        slots = []
        for t, msgs in enumerate(order):
            events = self.slot(t, msgs)
            for e in events:
                for u in e.credited:
                    received[u] = t
            aom = [t - r for r in received]
            slots.append(Slot(t, events, [], len(self.ring), aom, min(aom), []))
        b = dep.isolation_bound
        detail = (f"cluster {self.victim} sends {len(dep.members(self.victim))} UPDATEs every "
                  f"slot but none reaches the queue in slots {bad - b + 1}..{bad} ({b} in a "
                  f"row; quota {dep.quota} of {dep.capacity} slots)")
        return Trace(ISOLATION, bad, dep.members(self.victim)[0], detail, slots)
