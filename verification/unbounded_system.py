"""The all-T search's per-worker transition system: one job, the complete states of one
deployment and property and every successor of a state in a slot (send/skip choices,
message orders, symmetry reduction), as ``verification.unbounded``'s docstring describes.
"""

from __future__ import annotations

import functools
import time
from fractions import Fraction
from typing import Any

from verification.config import CONTRIBUTOR_BITS, Deployment
from verification.sending import L_MIN, forced, probe_gap

INF = 1 << 30
"""A forced window that never ends (P_s = 1 at every age of the feedback)."""
_WINDOW_SEARCH = 100_000
_ORDER_CACHE = 20_000


class _OutOfTime(Exception):
    """The search's deadline passed in the middle of a state's expansion."""


class Unsupported(ValueError):
    """The deployment is outside what the all-T search models; the message says why."""


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
        self.starv3 = prop == "starvation" and dep.feedback == 3
        """Revision 3's starvation: every send free (a lost UPDATE is a skip to the queue
        and to the worker's feedback), windows of ``P_s >= L_min`` instead of ``P_s = 1``,
        and the run counts decisions that may fall below ``L_min``."""
        self.level = L_MIN if self.starv3 else 1.0
        self.period = dep.pull_rate.denominator
        self.pulls = [dep.pulls_in_slot(t) for t in range(self.period)]
        self.ms = dep.max_skip if prop != "starvation" else None
        self.aom_cap = dep.aom_bound + 1 if prop == "responsiveness" else None
        self.starve_top = dep.starvation_limit + 1
        self._windows: dict[tuple[int, int, int], int] = {}
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
    def window(self, occupied: int, active: int, held: int = 1) -> int:
        """Last gap (slots after the ACK's slot) before any expiry at which the send is
        forced by P_s = 1 (revision 3's starvation: has P_s >= L_min); INF when at every
        gap. ``held``: slots the UPDATE's cluster holds after it (revision 3)."""
        key = (occupied, active, held)
        if key not in self._windows:
            dep = self.dep
            w = 0
            lv = self.level
            if self.always or (self.pg is None and forced(dep, occupied, active, 10**9, held,
                                                          lv)):
                # P_s = 1 however old the feedback (without expiry P_s only decreases).
                self._windows[key] = INF
                return INF
            limit = self.pg if self.pg is not None else _WINDOW_SEARCH
            for gap in range(1, limit + 1):
                if self.pg is not None and gap >= self.pg:
                    w = INF
                    break
                if not forced(dep, occupied, active, gap, held, lv):
                    break
                w = gap
            else:
                if self.pg is None:
                    raise Unsupported("P_s stays 1 for 100000 slots without expiry; the window "
                                      "cannot be bounded")
            self._windows[key] = w
        return self._windows[key]

    def must_send(self, since: int, win: int) -> bool:
        if self.starv3:
            return False
        gap = since + 1
        if self.free_window:
            return self.pg is not None and gap >= self.pg
        return self.always or gap <= win or (self.pg is not None and gap >= self.pg)

    def _low(self, worker: tuple) -> bool:
        """Revision 3's starvation: this slot's decision of a worker in state ``worker``
        may have P_s < L_min (past its ACK's window, the ACK not yet expired)."""
        gap = worker[0] + 1
        return gap > worker[1] and (self.pg is None or gap < self.pg)

    # -- states --------------------------------------------------------------------
    # worker: (since, window, aom, keeps, starve); queue OLAF: ((cluster, owner, single,
    # contributors), ...); FIFO: ((cluster, owner, single=True, (owner,)), ...).
    def initial(self) -> tuple:
        """The empty queue before slot 0. With a ``target`` (responsiveness, starvation:
        properties of one worker at a time) only the target carries the keeps flag and
        the property's counters; the others' would never be read."""
        n = self.dep.workers
        # Revision 3's starvation: before any ACK P_s = L >= L_min at every decision,
        # an opportunity window that never ends.
        win = INF if self.starv3 else 0
        return ((), tuple((0, win, 0, self.target is None or u == self.target, 0)
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
            if (t == 0 and not self.starv3) or self.must_send(since, win):
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
                    if self.starv3:
                        st = min(old[4] + 1, self.starve_top) if self._low(old) else 0
                        row.append((since, win, 0, True, st))
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
                        held = int(any(s[0] == self.cluster[u] for s in q2)) \
                            if self.olaf else 1
                        a2 = acks[:u] + (self.window(len(q2), active, held),) + acks[u + 1:]
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
