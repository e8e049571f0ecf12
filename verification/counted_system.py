"""The all-T search's counted transition system for fairness: one job, ``CountedSystem``
(the workers of a cluster counted, the clusters exchanged) and when it applies.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from fractions import Fraction

from verification.config import Deployment
from verification.sending import probe_gap
from verification.unbounded_system import INF, Unsupported, _OutOfTime, unsupported_reason

_WAIT, _POP, _OPEN = 0, 1, 2
"""A cluster's part in a slot with at most one PULL: its slot is not popped (``_WAIT``),
its queued slot is popped by the PULL (``_POP``), or the queue is empty at the start and
the PULL pops the slot this cluster opens before it (``_OPEN``)."""


def counted_reason(dep: Deployment) -> str | None:
    """Why ``CountedSystem`` cannot search ``dep``'s fairness (None: it can)."""
    reason = unsupported_reason(dep)
    if reason:
        return reason
    if dep.mode != "olaf" or dep.sender != "olaf":
        return "the counted search covers OLAF mode with the §4 sender only"
    if dep.capacity < dep.clusters:
        return "the counted search needs a queue that cannot fill (capacity >= clusters)"
    if max(dep.pulls_in_slot(t) for t in range(dep.pull_rate.denominator)) > 1:
        return "the counted search covers at most one PULL per slot"
    return None


class CountedSystem:
    """Fairness under the window over-approximation of ``System(free_window=True)``, with
    the workers of a cluster *counted* instead of named and the clusters exchanged
    (symmetry reduction). Exact with respect to that system; the README,
    "All-T results", says why each step is sound.

    A state is ``(order, groups)``: ``order`` the clusters whose slot is queued, head
    first (an OLAF queue holds at most one slot per cluster and, with ``capacity >=
    clusters``, never fills), and per cluster the id of the sorted tuple of its members'
    ``(since, aom, pending)`` (``group``): slots since the last send, AoM, and whether
    the worker is a contributor of its cluster's queued slot. This is the multiset the
    per-worker system's canonical form keeps (its windows are not tracked under this
    over-approximation; owner and ``agg_count`` are not read with rewards=merge).

    A slot with one PULL splits its messages into those before the PULL (epoch 0) and
    after it (epoch 1). The PULL pops the head of the queue, or, from an empty queue, the
    slot of the first cluster whose UPDATE arrives in epoch 0 (or nothing). Within an
    epoch a cluster's UPDATEs all meet the same slot (the first one opens it if needed),
    so a worker's fate is fixed by its cluster's part, its own send/skip and epoch:

    * popped cluster: a contributor at the start is credited (the slot popped is the one
      it is in); an epoch-0 sender is credited and not pending; an epoch-1 sender is
      pending (in the slot its cluster's first epoch-1 sender opened);
    * other clusters: nobody credited; a sender is pending (its cluster's slot, existing
      or opened this slot); a skipper keeps its flag.

    Newly opened slots join the queue in any order (each opener may come before or after
    another's, and a popped cluster reopens only after the PULL, which any other opener
    may precede or follow), so every permutation is a successor."""

    prop = "fairness"

    def __init__(self, dep: Deployment) -> None:
        reason = counted_reason(dep)
        if reason:
            raise Unsupported(reason)
        self.dep = dep
        self.deadline: float | None = None
        self.k = dep.clusters
        self.sizes = [len(dep.members(c)) for c in range(self.k)]
        self.exchange = self.k > 1
        """Clusters are exchanged: a cluster id is only a queue key (no aliasing), so a
        relabelling of clusters, with their members, maps behaviours to behaviours and
        keeps the multiset of AoM values; a group carries its cluster's size."""
        self.pg = probe_gap(dep)
        self.ms = dep.max_skip
        caps = ([self.ms] if self.ms is not None else []) + \
            ([self.pg - 1] if self.pg is not None else [])
        self.since_cap = min(caps) if caps else 0
        """``since`` is read only by the skip bound and the probe; it never exceeds the
        smaller (without either it is not read at all, kept 0)."""
        self.period = dep.pull_rate.denominator
        self.pulls = [dep.pulls_in_slot(t) for t in range(self.period)]
        self.n = dep.workers
        self.fair_limit = dep.fairness_limit
        self._ids: dict[tuple, int] = {}
        self._groups: list[tuple] = []
        self._stats: list[tuple[int, int, int]] = []
        """Per group id: (AoM sum, min, max) of its members."""
        self._options: dict[tuple[int, bool, int], dict[tuple[bool, bool], tuple[int, ...]]] = {}

    def group_id(self, group: tuple) -> int:
        """Groups are interned: states hold small ints, cheap to hash and compare."""
        found = self._ids.get(group)
        if found is None:
            found = self._ids[group] = len(self._groups)
            self._groups.append(group)
            aom = [w[1] for w in group]
            self._stats.append((sum(aom), min(aom), max(aom)))
        return found

    def group(self, gid: int) -> tuple:
        return self._groups[gid]

    def initial(self) -> tuple:
        return ((), tuple(self.group_id(((0, 0, False),) * size) for size in self.sizes))

    def checked_from(self) -> int:
        return self.dep.warmup

    def may_skip(self, since: int, first: bool) -> bool:
        """Before the first ACK every worker sends; later only the probe and the
        keeps-sending bound force a send (the window over-approximation)."""
        gap = since + 1
        return (not first and (self.ms is None or gap <= self.ms)
                and (self.pg is None or gap < self.pg))

    def options(self, gid: int, first: bool, role: int) -> dict[tuple[bool, bool], tuple[int, ...]]:
        """A cluster's successors in one slot: ``(any sender, any epoch-1 sender)`` ->
        the ids of the possible groups after the slot. Workers of one class (equal
        ``(since, aom, pending)``) are interchangeable, so only how many of them skip,
        send before or send after the PULL is enumerated."""
        key = (gid, first, role)
        found = self._options.get(key)
        if found is not None:
            return found
        per_class = []
        for (since, aom, pending), count in sorted(Counter(self._groups[gid]).items()):
            later = 0 if first else aom + 1
            skipped = min(since + 1, self.since_cap)
            can_skip = self.may_skip(since, first)
            choices = []
            for skip, early, late in _splits3(count, role != _WAIT):
                if skip and not can_skip:
                    continue
                if role == _WAIT:
                    outs = ((skipped, later, pending),) * skip + ((0, later, True),) * early
                else:
                    kept = 0 if pending else later
                    outs = (((skipped, kept, False),) * skip + ((0, 0, False),) * early
                            + ((0, kept, True),) * late)
                choices.append((outs, early + late > 0, late > 0, early > 0))
            per_class.append(choices)
        acc: dict[tuple[bool, bool], set[int]] = {}
        for combo in itertools.product(*per_class):
            if role == _OPEN and not any(c[3] for c in combo):
                continue  # the PULL pops this cluster's slot, opened before it in epoch 0
            members = tuple(sorted(w for c in combo for w in c[0]))
            flags = (any(c[1] for c in combo), any(c[2] for c in combo))
            acc.setdefault(flags, set()).add(self.group_id(members))
        found = {flags: tuple(sorted(ids)) for flags, ids in acc.items()}
        self._options[key] = found
        return found

    def image(self, frontier: set[tuple], t: int) -> set[tuple]:
        """Every successor of the ``frontier`` states in slot ``t``, canonical."""
        first = t == 0
        one_pull = self.pulls[t % self.period] == 1
        raw: dict[tuple, set[tuple]] = {}
        clusters = range(self.k)
        for order, groups in frontier:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise _OutOfTime
            if not one_pull:
                heads: tuple = (None,)
                rest = order
            elif order:
                heads, rest = (order[0],), order[1:]
            else:
                # From an empty queue the PULL finds nothing (no UPDATE before it) or the
                # slot of whichever cluster's UPDATE came first.
                heads, rest = (None, *clusters), ()
            for h in heads:
                parts = [self.options(groups[c], first,
                                      _WAIT if c != h else (_POP if order else _OPEN)).items()
                         for c in clusters]
                for combo in itertools.product(*parts):
                    opened = tuple(c for c in clusters
                                   if (combo[c][0][1] if c == h else
                                       combo[c][0][0] and c not in order))
                    successors = [ids for _flags, ids in combo]
                    for perm in itertools.permutations(opened):
                        bucket = raw.get(rest + perm)
                        if bucket is None:
                            bucket = raw[rest + perm] = set()
                        bucket.update(itertools.product(*successors))
        return self.canonical(raw)

    def canonical(self, raw: dict[tuple, set[tuple]]) -> set[tuple]:
        """``(order, groups)`` states with the clusters relabelled in order of (group id,
        place in the queue): one representative per relabelling class."""
        if not self.exchange:
            return {(order, groups) for order, gs in raw.items() for groups in gs}
        if self.k == 2:
            # The common case, two clusters, by whole sets: keep (a, b) with a < b, swap
            # a > b, and for a == b keep the smaller of the order and its mirror.
            out: set[tuple] = set()
            for order, gs in raw.items():
                mirror = tuple(1 - c for c in order)
                out.update((order, g) for g in gs if g[0] < g[1])
                out.update((mirror, (g[1], g[0])) for g in gs if g[0] > g[1])
                low = min(order, mirror)
                out.update((low, g) for g in gs if g[0] == g[1])
            return out
        return {self.relabel(order, groups) for order, gs in raw.items() for groups in gs}

    def relabel(self, order: tuple, groups: tuple) -> tuple:
        place = {c: i for i, c in enumerate(order)}
        perm = [0] * self.k
        for new, old in enumerate(sorted(range(self.k),
                                         key=lambda c: (groups[c], place.get(c, self.k)))):
            perm[old] = new
        moved = [0] * self.k
        for old, new in enumerate(perm):
            moved[new] = groups[old]
        return (tuple(perm[c] for c in order), tuple(moved))

    def _aom(self, groups: tuple) -> tuple[int, int, int]:
        total, lo, hi = 0, INF, -1
        for g in groups:
            s, a, b = self._stats[g]
            total += s
            lo, hi = min(lo, a), max(hi, b)
        return total, lo, hi

    def violates(self, state: tuple) -> bool:
        total, lo, hi = self._aom(state[1])
        return self.n * hi - total > self.fair_limit or total - self.n * lo > self.fair_limit

    def metric(self, state: tuple) -> Fraction:
        total, lo, hi = self._aom(state[1])
        mean = Fraction(total, self.n)
        return max(hi - mean, mean - lo)


def _splits3(count: int, epochs: bool) -> list[tuple[int, int, int]]:
    """``(skip, early, late)`` with ``skip + early + late == count``; ``late`` is 0
    without epochs (a cluster whose slot the PULL does not pop)."""
    if not epochs:
        return [(count - s, s, 0) for s in range(count + 1)]
    return [(skip, early, count - skip - early) for skip in range(count + 1)
            for early in range(count - skip + 1)]
