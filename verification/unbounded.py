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
"""

from __future__ import annotations

import functools
import itertools
import time
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from verification.config import CONTRIBUTOR_BITS, Deployment
from verification.sending import forced, probe_gap

INF = 1 << 30
"""A forced window that never ends (P_s = 1 at every age of the feedback)."""
_WINDOW_SEARCH = 100_000
_ORDER_CACHE = 20_000
MAX_STATES = 400_000
"""Remembered states at which the search gives up (memory), reported as open."""


class _OutOfTime(Exception):
    """The search's deadline passed in the middle of a state's expansion."""


class Unsupported(ValueError):
    """The deployment is outside what the all-T search models; the message says why."""


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


def unsupported_reason(dep: Deployment) -> str | None:
    """Why the all-T search cannot model ``dep`` (None: it can)."""
    if dep.rewards != "merge":
        return "rewards=any is not modelled by the all-T search"
    if dep.pull_jitter:
        return "pull jitter is not modelled by the all-T search"
    if dep.staggered:
        return "update periods or phases other than every slot are not modelled by the all-T search"
    if dep.aliasing:
        return "contributor-bit aliasing (> 32 workers in a cluster) is not modelled by the all-T search"
    return None


class System:
    """The transition system of one deployment and property."""

    def __init__(self, dep: Deployment, prop: str, target: int | None = None,
                 free_others: bool = False, free_window: bool = False) -> None:
        reason = unsupported_reason(dep)
        if reason:
            raise Unsupported(reason)
        self.dep, self.prop, self.target = dep, prop, target
        self.free_others = free_others and target is not None
        """Over-approximation: the workers other than the one under test send or skip at
        will after slot 0 (their feedback and skip counts are not tracked). Sound for a
        property of the target alone: every real behaviour is one of these."""
        self.free_window = free_window and dep.sender != "always"
        """Over-approximation: a send is forced only by the probe (and before the first
        ACK), never by P_s = 1 after a fresh ACK, so the ACKs' feedback is not tracked.
        Every real behaviour is one of these (a forced send is one of the two choices)."""
        self.deadline: float | None = None
        """time.monotonic() after which a slot's expansion stops (_OutOfTime)."""
        n = dep.workers
        self.cluster = [dep.cluster_of(u) for u in range(n)]
        self.members = [dep.members(c) for c in range(dep.clusters)]
        self.bit = [u % CONTRIBUTOR_BITS for u in range(n)]
        self.olaf = dep.mode == "olaf"
        self.always = dep.sender == "always"
        self.pg = probe_gap(dep)
        self.period = dep.pull_rate.denominator
        self.pulls = [dep.pulls_in_slot(t) for t in range(self.period)]
        self.ms = dep.max_skip if prop != "starvation" else None
        self.aom_cap = dep.aom_bound + 1 if prop == "responsiveness" else None
        self.starve_top = dep.starvation_limit + 1
        self._windows: dict[tuple[int, int], int] = {}
        self._order_cache: dict[tuple, set] = {}
        """A slot's effects depend on the queue, the senders and the PULLs only."""
        if self.pg is not None or self.always:
            self.gap_cap = self.pg if self.pg is not None else 1
        else:
            # Without expiry the slots since the last send matter up to the longest
            # finite forced window (or the skip bound); beyond it nothing changes.
            if (dep.capacity + 1) * (dep.clusters + 1) > 200_000:
                raise Unsupported("too many feedback levels to bound the forced windows")
            finite = [self.window(o, a) for o in range(dep.capacity + 1)
                      for a in range(min(dep.clusters, o) + 1)]
            top = max([w for w in finite if w < INF] + [self.ms or 0, 0])
            self.gap_cap = top + 1
        # fairness: |N a_u - S| > limit (as the encodings state it).
        self.fair_limit = dep.fairness_limit

    # -- the send rule -------------------------------------------------------------
    def window(self, occupied: int, active: int) -> int:
        """Last gap (slots after the ACK's slot) before any expiry at which the send is
        forced by P_s = 1; INF when forced at every gap."""
        key = (occupied, active)
        if key not in self._windows:
            dep = self.dep
            w = 0
            if self.always or (self.pg is None and forced(dep, occupied, active, 10**9)):
                # P_s = 1 however old the feedback (without expiry P_s only decreases).
                self._windows[key] = INF
                return INF
            limit = self.pg if self.pg is not None else _WINDOW_SEARCH
            for gap in range(1, limit + 1):
                if self.pg is not None and gap >= self.pg:
                    w = INF
                    break
                if not forced(dep, occupied, active, gap):
                    break
                w = gap
            else:
                if self.pg is None:
                    raise Unsupported("P_s stays 1 for 100000 slots without expiry; the window "
                                      "cannot be bounded")
            self._windows[key] = w
        return self._windows[key]

    def must_send(self, since: int, win: int) -> bool:
        gap = since + 1
        if self.free_window:
            return self.pg is not None and gap >= self.pg
        return self.always or gap <= win or (self.pg is not None and gap >= self.pg)

    # -- states --------------------------------------------------------------------
    # worker: (since, window, aom, keeps, starve); queue OLAF: ((cluster, owner, single,
    # contributors), ...); FIFO: ((cluster, owner, single=True, (owner,)), ...).
    def initial(self) -> tuple:
        """The empty queue before slot 0. With a ``target`` (responsiveness, starvation:
        properties of one worker at a time) only the target carries the keeps flag and
        the property's counters; the others' would never be read."""
        n = self.dep.workers
        return ((), tuple((0, 0, 0, self.target is None or u == self.target, 0)
                          for u in range(n)))

    def image(self, frontier: set[tuple], t: int) -> set[tuple]:
        """Every successor of the ``frontier`` states in slot ``t``."""
        layer: set[tuple] = set()
        for state in frontier:
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise _OutOfTime
            layer |= self.successors(state, t)
        return layer

    def successors(self, state: tuple, t: int) -> set[tuple]:
        queue, workers = state
        dep = self.dep
        n = dep.workers
        room = len(queue) < dep.capacity
        # Per worker the allowed (sends, since', keeps') choices.
        options: list[list[tuple[bool, int, bool]]] = []
        for u in range(n):
            since, win, _aom, keeps, _st = workers[u]
            if self.free_others and not keeps and t > 0:
                options.append([(True, 0, False), (False, 0, False)])
                continue
            if t == 0 or self.must_send(since, win):
                options.append([(True, 0, keeps)])
                continue
            nxt = min(since + 1, self.gap_cap)
            skip_keeps = keeps and (self.ms is None or since + 1 <= self.ms)
            if self.prop == "fairness" and not skip_keeps:
                options.append([(True, 0, keeps)])
            else:
                options.append([(True, 0, keeps), (False, nxt, skip_keeps)])
        raw: set[tuple] = set()
        pulls = self.pulls[t % self.period]
        tracked = frozenset(u for u in range(n) if not self.free_window and
                            (workers[u][3] or not self.free_others))
        # Whose credits the property reads (the relabelling moves the target, so this is
        # taken from the state): the AoM of the workers that keep sending; none for
        # starvation.
        keeping = frozenset(u for u in range(n) if workers[u][3] and self.prop != "starvation")
        for choice in self._choices(queue, workers, options):
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise _OutOfTime
            senders = frozenset(u for u in range(n) if choice[u][0])
            for q, acks, credited in self._orders(queue, senders, pulls,
                                                  self._groups(workers, choice), tracked,
                                                  keeping):
                row = []
                for u in range(n):
                    sent, since, keeps = choice[u]
                    old = workers[u]
                    win = acks[u] if sent else old[1]
                    if since >= win:
                        # The forced window is over and only grows further away (the
                        # slots since the send only increase until the next send, which
                        # brings a new window): it can no longer matter.
                        win = 0
                    if not keeps:
                        row.append((since, win, 0, False, 0))
                        continue
                    if self.prop == "starvation":
                        st = 0 if sent or not room else min(old[4] + 1, self.starve_top)
                        row.append((since, win, 0, True, st))
                        continue
                    aom = 0 if (t == 0 or u in credited) else old[2] + 1
                    if self.aom_cap is not None:
                        aom = min(aom, self.aom_cap)
                    row.append((since, win, aom, True, 0))
                if self.target is not None and self.prop == "responsiveness" \
                        and not any(w[3] for w in row):
                    # The worker under test stopped keeping sending: nothing to check.
                    continue
                raw.add((q, tuple(row)))
        return {self._canonical(q, row) for q, row in raw}

    def _choices(self, queue: tuple, workers: tuple,
                 options: list[list[tuple[bool, int, bool]]]) -> list[tuple]:
        """Send/skip choices up to relabelling: members of one cluster whose state and
        place in the queue are equal are interchangeable, so for such a group only the
        number of skippers matters (the first ones skip); the canonical form merges the
        relabelled successors anyway."""
        n = self.dep.workers
        free = [u for u in range(n) if len(options[u]) > 1]
        if len(free) < 2:
            return _product(options)
        groups: dict[tuple, list[int]] = {}
        for u in free:
            sig = (self.cluster[u], workers[u], tuple((s[1] == u, u in s[3]) for s in queue))
            groups.setdefault(sig, []).append(u)
        out: list[tuple] = [tuple(o[0] for o in options)]
        for members in groups.values():
            nxt = []
            for base in out:
                for k in range(len(members) + 1):
                    row = list(base)
                    for u in members[:k]:
                        row[u] = options[u][1]
                    nxt.append(tuple(row))
            out = nxt
        return out

    def _groups(self, workers: tuple, choice: tuple) -> tuple[tuple[int, ...], ...]:
        """Workers interchangeable within a slot: same cluster, same state before it and
        same choice (their places in the queue may differ; ``_relabel`` orders by them)."""
        by: dict[tuple, list[int]] = {}
        for u in range(self.dep.workers):
            by.setdefault((self.cluster[u], workers[u], choice[u]), []).append(u)
        return tuple(tuple(g) for g in by.values() if len(g) > 1)

    def _orders(self, queue: tuple, senders: frozenset[int], pulls: int,
                groups: tuple[tuple[int, ...], ...] = (),
                tracked: frozenset[int] | None = None,
                credit: frozenset[int] | None = None) -> set[tuple[tuple, tuple, frozenset[int]]]:
        """Every (queue, ACK windows per worker, credited workers) after the slot's
        messages in any order; partial orders with equal effects are merged, and so are
        those that differ only by a relabelling within a group of interchangeable
        workers (``groups``). Only the ``tracked`` workers' ACKs and the ``credit``
        workers' credits are recorded (None: everyone's): the others are never read."""
        key = (queue, senders, pulls, groups, tracked, credit)
        if key in self._order_cache:
            return self._order_cache[key]
        n = self.dep.workers
        group_of = [-1] * n
        for i, g in enumerate(groups):
            for u in g:
                group_of[u] = i
        layer = {(queue, senders, pulls, (0,) * n, frozenset())}
        for _ in range(len(senders) + pulls):
            nxt = set()
            for q, left, p, acks, cred in layer:
                if self.deadline is not None and time.monotonic() > self.deadline:
                    raise _OutOfTime
                if p:
                    q2, got = self._pull(q)
                    if credit is not None:
                        got = got & credit
                    nxt.add(self._relabel(groups, q2, left, p - 1, acks, cred | got))
                place = _places(q, n) if groups else None
                tried = set()
                for u in left:
                    if place is not None and group_of[u] >= 0:
                        # Two members of a group with the same place and credit lead to
                        # relabelled twins: expand one.
                        sig = (group_of[u], u in cred, place[u])
                        if sig in tried:
                            continue
                        tried.add(sig)
                    q2 = self._update(q, u, credit)
                    if tracked is None or u in tracked:
                        active = len({s[0] for s in q2})
                        a2 = acks[:u] + (self.window(len(q2), active),) + acks[u + 1:]
                    else:
                        a2 = acks
                    nxt.add(self._relabel(groups, q2, left - {u}, p, a2, cred))
            layer = nxt
        out = {(q, acks, cred) for q, _l, _p, acks, cred in layer}
        if len(self._order_cache) > _ORDER_CACHE:
            self._order_cache.clear()
        self._order_cache[key] = out
        return out

    @staticmethod
    def _relabel(groups: tuple[tuple[int, ...], ...], q: tuple, left: frozenset[int], p: int,
                 acks: tuple, cred: frozenset[int]) -> tuple:
        """The canonical member of a partial order's relabelling class: inside each group
        the members are sorted by (still to send, ACK, credited, place in the queue)."""
        if not groups:
            return (q, left, p, acks, cred)
        n = len(acks)
        place = _places(q, n)
        perm: list[int] | None = None
        for g in groups:
            # Keys from one comprehension (cheaper than a Python key function per
            # member); a group already in order needs no permutation.
            keys = [(u in left, acks[u], u in cred, place[u]) for u in g]
            if keys == sorted(keys):
                continue
            order = [g[i] for i in sorted(range(len(g)), key=keys.__getitem__)]
            if perm is None:
                perm = list(range(n))
            for new, old in zip(g, order, strict=True):
                perm[old] = new
        if perm is None:
            return (q, left, p, acks, cred)
        q2 = tuple((c, perm[o] if o >= 0 else o, s, frozenset(perm[x] for x in con))
              for c, o, s, con in q)
        a2 = [0] * n
        for old in range(n):
            a2[perm[old]] = acks[old]
        return (q2, frozenset(perm[u] for u in left), p, tuple(a2),
                frozenset(perm[u] for u in cred))

    def _update(self, q: tuple, u: int, credit: frozenset[int] | None = None) -> tuple:
        # A slot keeps (cluster, -, -, contributors in ``credit``, the workers whose
        # credits the property reads; None: all). Owner and
        # agg_count are not kept: with rewards=merge an UPDATE meeting its cluster's slot
        # leaves the contributors old | {u} whether it is REPLACED (the owner of a single
        # slot, whose contributors are {owner}) or MERGED, and nothing else reads them.
        c = self.cluster[u]
        mine = frozenset((u,)) if credit is None or u in credit else frozenset()
        if self.olaf:
            for i, (sc, _owner, _single, contrib) in enumerate(q):
                if sc == c:
                    if mine <= contrib:
                        return q
                    return q[:i] + ((c, -1, False, contrib | mine),) + q[i + 1:]
        if len(q) == self.dep.capacity:
            return q
        return q + ((c, -1, False, mine),)

    def _pull(self, q: tuple) -> tuple[tuple, frozenset[int]]:
        if not q:
            return q, frozenset()
        return q[1:], q[0][3]

    def _canonical(self, q: tuple, workers: tuple) -> tuple:
        """Relabel the members of each cluster in a canonical order (they are
        interchangeable: same cluster, distinct contributor bits)."""
        n = self.dep.workers
        # Where each worker appears in the queue: (ring position, stored it). The worker
        # that stored a slot is always among its contributors, so this is all of it.
        place: list[tuple] = [()] * n
        for i, (_c, owner, _s, con) in enumerate(q):
            for x in con:
                place[x] = (*place[x], i, x == owner)
        identity = list(range(n))
        perm = identity[:]
        for mem in self.members:
            if len(mem) < 2:
                continue
            for new, old in zip(mem, sorted(mem, key=lambda u: (workers[u], place[u])),
                                strict=True):
                perm[old] = new
        if perm == identity:
            return (q, workers)
        inv = [0] * len(perm)
        for old, new in enumerate(perm):
            inv[new] = old
        q2 = tuple((c, perm[o] if o >= 0 else o, s, frozenset(perm[x] for x in con))
              for c, o, s, con in q)
        return (q2, tuple(workers[inv[v]] for v in range(len(perm))))

    # -- the property --------------------------------------------------------------
    def metric(self, state: tuple) -> Fraction:
        _q, workers = state
        if self.prop == "starvation":
            return Fraction(max(w[4] for w in workers))
        if self.prop == "responsiveness":
            return Fraction(max((w[2] for w in workers if w[3]), default=-1))
        aom = [w[2] for w in workers]
        mean = Fraction(sum(aom), len(aom))
        return max(abs(a - mean) for a in aom)

    def violates(self, state: tuple) -> bool:
        _q, workers = state
        dep = self.dep
        if self.prop == "starvation":
            return any(w[4] > dep.starvation_limit for w in workers)
        if self.prop == "responsiveness":
            return any(w[3] and w[2] > dep.aom_bound for w in workers)
        n = dep.workers
        total = sum(w[2] for w in workers)
        return any(abs(n * w[2] - total) > self.fair_limit for w in workers)

    def checked_from(self) -> int:
        return 0 if self.prop == "starvation" else self.dep.warmup


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


@functools.lru_cache(maxsize=65536)
def _places(q: tuple, n: int) -> tuple[tuple, ...]:
    """Per worker, where it appears in the queue: (ring position, stored it) for every
    slot it contributed to (the worker that stored a slot is among its contributors)."""
    place: list[tuple] = [()] * n
    for i, (_c, owner, _s, con) in enumerate(q):
        for x in con:
            place[x] = (*place[x], i, x == owner)
    return tuple(place)


def _product(options: list[list[Any]]) -> list[tuple]:
    out: list[tuple] = [()]
    for opts in options:
        out = [(*p, o) for p in out for o in opts]
    return out


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

