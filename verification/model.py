"""The bounded Z3 model of an OLAF deployment and its AoM properties.

The model unrolls ``T`` slots. In slot ``t`` the workers that send (each at most
once) and the ``pulls_in_slot(t)`` PULLs of the parameter server reach the switch in
an order the solver picks freely: slot ``t`` has ``N + P_t`` message positions, each
holding a worker's UPDATE, a PULL, or nothing (idle positions only at the end). The
switch applies DESIGN.md §3 to each message in turn. See ``verification/README.md``
for every abstraction and why it is sound.

Queue state, per message position:

* OLAF mode: at most one queued slot per cluster (one block per update, so the
  ``[cluster][block]`` index allows one slot per cluster; see README). The queue is
  ``pos[0..K-1]``, the clusters of the queued slots in ring order from ``read_ptr``
  (``K = min(capacity, C)``), plus per cluster ``queued`` and ``single``
  (``agg_count == 1``) and per worker ``inb`` (its contributor bit is in its
  cluster's slot). With one queued slot per key, the index always points at it.
* FIFO mode: ``pos[0..capacity-1]`` holds the worker of each queued slot.

Per worker: the slot of its last send and the window of slots after it during
which ``P_s`` stays 1 (a table lookup on the ACK's occupancy and active clusters),
and ``AoM_u`` in slots.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import z3

from verification.config import MAX_PULLS_PER_SLOT as MAX_PULLS
from verification.config import PROPERTIES, Deployment
from verification.sending import forced_window, probe_gap
from verification.trace import Event, Slot, Trace
from worker_transport.protocol import Outcome

CODE_DATA = 5
CODE_EMPTY = 6
CODE_IDLE = 7
FAIRNESS_CAP = 4
ENGINES = ("auto", "counting", "segments", "explicit")


class DeadlineExceeded(Exception):
    """The time budget ran out while the model was being built or solved."""
CHOICES = ("MERGED", "REPLACED", "DROPPED_REWARD")


def _code(value: int) -> Any:
    return z3.BitVecVal(int(value), 3)


def bits(n: int) -> int:
    """Bits that hold 0..n."""
    return max(1, int(n).bit_length())


def reachable_feedback(dep: Deployment) -> list[tuple[int, int]]:
    """(occupied, active_clusters) pairs an ACK can carry in the model."""
    k = queue_slots(dep)
    if dep.mode == "olaf":
        return [(o, o) for o in range(k + 1)]
    return [(0, 0)] + [(o, a) for o in range(1, k + 1) for a in range(1, min(dep.clusters, o) + 1)]


def queue_slots(dep: Deployment) -> int:
    """K: the most slots that can be queued at once in the model."""
    if dep.mode == "olaf":
        return min(dep.capacity, dep.clusters)
    return dep.capacity


@dataclass
class Options:
    """Encoding choices (the benchmark compares them)."""

    incremental: bool = True
    """Check the property slot by slot (push the next slot, ask for a violation there)
    instead of one query over the whole horizon."""
    symmetry_breaking: bool = True
    """Fix the slot-0 arrival order of interchangeable workers and clusters."""
    logic: str | None = "QF_BV"
    """Solver logic (``None`` = z3's default solver)."""
    deadline: float | None = None
    """time.monotonic() after which building and solving stop (set by check_property)."""
    dump_smt: str | None = None
    """Write the final query (constraints and the violation at any checked slot) as
    SMT-LIB 2 to this path."""
    engine: str = "auto"
    """``segments`` (``verification.segments``), ``explicit`` (one position per message,
    this module), ``counting`` (``verification.counting``, a counter abstraction: exact
    but slower, kept for comparison) or ``auto``: segments when they are exact for the
    deployment, else explicit."""
    all_t: bool = False
    """After a bounded VERIFIED, search the reachable state set for closure
    (``verification.unbounded``) so that the verdict can hold for every horizon
    (``verify-aom`` turns it on unless ``--no-all-t``)."""
    all_t_budget: float = 60.0
    """Seconds the all-T search may take (within the property's timeout)."""


@dataclass
class CheckResult:
    prop: str
    status: str
    """VERIFIED, VIOLATED or UNKNOWN."""
    seconds: float
    size: dict[str, int] = field(default_factory=dict)
    """Model size: solver assertions, Boolean and bit-vector constants, message positions."""
    trace: Trace | None = None
    reason: str = ""
    """UNKNOWN: why (timeout, solver's reason); VERIFIED/VIOLATED: a one-line summary."""
    engine: str = ""
    """The encoding that produced the verdict."""
    checked_through: int | None = None
    """Last slot for which the solver proved that no violation exists there (all slots
    from the first checked one up to it); None when none was proved."""
    scope: str = "bounded"
    """``bounded``: the verdict covers slots up to the horizon only. ``unbounded``: it
    holds for every horizon (the all-T search closed the reachable state set)."""
    assumptions: list[str] = field(default_factory=list)
    """What a VERIFIED rests on, in words (printed with the verdict)."""
    unbounded: dict[str, Any] | None = None
    """The all-T search's outcome (``UnboundedResult.to_dict``), None when not run."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.prop,
            "status": self.status,
            "scope": self.scope,
            "engine": self.engine,
            "seconds": round(self.seconds, 3),
            "checked_through_slot": self.checked_through,
            "size": self.size,
            "reason": self.reason,
            "assumptions": self.assumptions,
            "all_t_search": self.unbounded,
            "counterexample": self.trace.to_dict() if self.trace else None,
        }


class _Step:
    """Symbolic terms of one message position, kept for the counterexample."""

    __slots__ = ("ev", "code", "occ", "choice", "own", "credit", "inb_before", "pos0")

    def __init__(self) -> None:
        self.ev: Any = None
        self.code: Any = None
        self.occ: Any = None
        self.choice: Any = None
        self.own: Any = z3.BoolVal(False)
        self.credit: list[Any] = []
        self.inb_before: list[Any] = []
        self.pos0: Any = None


class AomModel:
    """The unrolled transition system for one deployment and one property."""

    ENGINE = "explicit"

    def __init__(self, dep: Deployment, prop: str, options: Options | None = None,
                 aom_cap: int | None = None) -> None:
        if prop not in PROPERTIES:
            raise ValueError(f"unknown property {prop!r}")
        self.dep = dep
        self.prop = prop
        self.opt = options or Options()
        self.solver = z3.SolverFor(self.opt.logic) if self.opt.logic else z3.Solver()
        n, c = dep.workers, dep.clusters
        self.K = queue_slots(dep)
        self.PULL = n
        self.IDLE = n + 1
        self.wE = bits(n + 1)
        self.wO = bits(self.K)
        self.wT = bits(dep.horizon + 1)
        self.aom_cap = min(aom_cap or dep.horizon, dep.horizon)
        """AoM counters saturate here; ``horizon`` (no saturation possible) by default."""
        self.wA = bits(self.aom_cap)
        self.wF = bits(n * self.aom_cap) + 2
        self.cluster = [dep.cluster_of(u) for u in range(n)]
        self.members = [dep.members(k) for k in range(c)]
        self.steps: list[list[_Step]] = []
        self.skipped: list[list[Any]] = []
        self.aom: list[list[Any]] = []
        self.positions = 0
        self._constants = 0
        self.slot_cpu: list[float] = []
        """Incremental mode: solver CPU seconds of the check at each slot after warm-up."""
        self.deadline: float | None = self.opt.deadline
        """time.monotonic() after which building the model stops (DeadlineExceeded)."""
        self._ticks = 0
        self.room: list[Any] = []
        """Per slot: the queue had a free slot when the slot began (starvation)."""
        self.silent: list[list[Any]] = []
        """Per slot and worker: consecutive slots skipped while the queue had room,
        saturating at the starvation bound + 1."""
        self._init_state()
        self._init_transmission()
        self.target = None
        if prop == "responsiveness":
            self.target = [z3.Bool(f"target_{u}") for u in range(n)]
            self.solver.add(z3.PbEq([(b, 1) for b in self.target], 1))
        # With every worker unbeaten (fairness) no reward decision is left: all merge.
        self.reward_choices = dep.rewards == "any" or (
            dep.rewards == "unbeaten" and prop != "fairness")
        """An UPDATE meeting another worker's slot may merge, replace or be dropped."""

    # -- helpers -------------------------------------------------------------------
    def _bv(self, name: str, width: int) -> Any:
        self._constants += 1
        return z3.BitVec(name, width)

    def _bool(self, name: str) -> Any:
        self._constants += 1
        return z3.Bool(name)

    def _fresh(self, name: str, value: Any) -> Any:
        """A named constant equal to ``value``: keeps terms shallow across many steps."""
        self._tick()
        v = self._bool(name) if z3.is_bool(value) else self._bv(name, value.size())
        self.solver.add(v == value)
        return v

    def _tick(self) -> None:
        """Every few calls, stop if the time budget is spent (large models take long
        to build, before the solver's own timeout can act)."""
        self._ticks += 1
        if self.deadline is not None and self._ticks % 128 == 0 \
                and time.monotonic() > self.deadline:
            raise DeadlineExceeded

    def _const(self, value: int, width: int) -> Any:
        return z3.BitVecVal(value, width)

    def _admit(self, tag: str, new: list[Any]) -> tuple[list[Any], list[Any], int]:
        """Clusters that open a new slot this step, in an order the solver picks (``rank``,
        distinct among them); each is admitted while occupancy + its rank < capacity.
        Returns ``(rank, admitted, rank width)``."""
        dep, s = self.dep, self.solver
        c = dep.clusters
        wr = bits(c)
        if c > 1:
            rank = [self._bv(f"rank_{tag}_{k}", wr) for k in range(c)]
            count = z3.Sum([z3.If(x, self._const(1, wr + 1), self._const(0, wr + 1))
                            for x in new])
            for k in range(c):
                s.add(z3.If(new[k], z3.ULT(z3.ZeroExt(1, rank[k]), count), rank[k] == 0))
                for k2 in range(k + 1, c):
                    s.add(z3.Implies(z3.And(new[k], new[k2]), rank[k] != rank[k2]))
        else:
            rank = [self._const(0, wr)]
        occ_w = z3.ZeroExt(self.wide - self.wO, self.occ)
        admitted = []
        for k in range(c):
            room = z3.ULT(occ_w + z3.ZeroExt(self.wide - wr, rank[k]), dep.capacity)
            a = new[k] if dep.capacity >= c else z3.And(new[k], room)
            admitted.append(self._fresh(f"admit_{tag}_{k}", a))
        return rank, admitted, wr

    # -- state ---------------------------------------------------------------------
    def _init_state(self) -> None:
        dep = self.dep
        self.occ = self._const(0, self.wO)
        pos_width = bits(max(dep.clusters - 1, 1)) if dep.mode == "olaf" else self.wE
        self.pos_width = pos_width
        self.pos = [self._const(0, pos_width) for _ in range(self.K)]
        self.queued = [z3.BoolVal(False) for _ in range(dep.clusters)]
        self.single = [z3.BoolVal(False) for _ in range(dep.clusters)]
        self.inb = [z3.BoolVal(False) for _ in range(dep.workers)]
        self.count = [self._const(0, self.wO) for _ in range(dep.clusters)]
        self.aom_now = [self._const(0, self.wA) for _ in range(dep.workers)]
        self.occ_at_slot_start = self.occ

    def _init_transmission(self) -> None:
        dep = self.dep
        table = {}
        for fb in reachable_feedback(dep):
            self._tick()
            table[fb] = forced_window(dep, *fb)
        self.window_table = table
        values = set(table.values())
        # A window that covers the horizon for every reachable ACK means P_s is 1
        # throughout: every send is forced and the window need not be tracked.
        self.always_forced = values <= {dep.horizon}
        self.window_default = max(values, key=lambda v: sum(1 for x in table.values() if x == v))
        self.last_send = [self._const(0, self.wT) for _ in range(dep.workers)]
        self.window = [self._const(dep.horizon, self.wT) for _ in range(dep.workers)]
        self.probe_gap = probe_gap(dep)
        self.wS = bits(dep.starvation_limit + 1)
        self.silent_now = [self._const(0, self.wS) for _ in range(dep.workers)]

    def _window_of(self, occ: Any, active: Any) -> Any:
        """The forced-send window for an ACK carrying (occ, active), as a term."""
        expr = self._const(self.window_default, self.wT)
        for (o, a), w in self.window_table.items():
            if w == self.window_default:
                continue
            cond = occ == o if self.dep.mode == "olaf" else z3.And(occ == o, active == a)
            expr = z3.If(cond, self._const(w, self.wT), expr)
        return expr

    def _active(self) -> Any:
        w = self.wO
        if self.dep.mode == "olaf":
            return self.occ
        return z3.Sum([z3.If(self.count[k] != 0, self._const(1, w + 8), self._const(0, w + 8))
                       for k in range(self.dep.clusters)])

    # -- one slot ------------------------------------------------------------------
    def add_slot(self, t: int) -> None:
        dep, s = self.dep, self.solver
        n = dep.workers
        pulls = dep.pulls_in_slot(t)
        jitter = dep.pull_jitter
        m = n + pulls + 2 * jitter
        self.positions += m
        evs = [self._bv(f"ev_{t}_{j}", self.wE) for j in range(m)]
        for j, ev in enumerate(evs):
            s.add(z3.ULE(ev, self.IDLE))
            if j + 1 < m:
                s.add(z3.Implies(ev == self.IDLE, evs[j + 1] == self.IDLE))
        # A worker without a fresh update in this slot has nothing to send.
        fresh = [dep.has_update(u, t) for u in range(n)]
        is_w = []
        for ev in evs:
            self._tick()
            is_w.append([ev == u if fresh[u] else z3.BoolVal(False) for u in range(n)])
            s.add(*[ev != u for u in range(n) if not fresh[u]])
        for u in range(n):
            s.add(z3.AtMost(*[is_w[j][u] for j in range(m)], 1))
        if jitter:
            # The PS's cumulative PULL count stays within ±jitter of the nominal schedule.
            wc = bits(2 * dep.horizon * (MAX_PULLS + 2 * jitter))
            count = z3.Sum([z3.If(ev == self.PULL, z3.BitVecVal(1, wc), z3.BitVecVal(0, wc))
                            for ev in evs])
            self.pulled = self._fresh(f"pulled_{t}", self.pulled_so_far(wc) + count)
            nominal = dep.pulled_by(t)
            s.add(z3.ULE(self.pulled, nominal + jitter))
            if nominal > jitter:
                s.add(z3.UGE(self.pulled, nominal - jitter))
        elif pulls:
            s.add(z3.PbEq([(ev == self.PULL, 1) for ev in evs], pulls))
        else:
            s.add(*[ev != self.PULL for ev in evs])
        sends = [z3.Or([is_w[j][u] for j in range(m)]) for u in range(n)]
        self._transmission(t, sends)
        if t == 0 and self.opt.symmetry_breaking and not dep.aliasing and not dep.staggered:
            self._break_symmetry(evs, is_w)

        received = [[] for _ in range(n)]
        windows: list[Any] = []
        steps = []
        for j in range(m):
            step = self._message(t, j, evs[j], is_w[j], received)
            steps.append(step)
            if not self.always_forced:
                windows.append(self._window_of(self.occ, self._active()))
        self.steps.append(steps)
        self.skipped.append([z3.Not(x) if fresh[u] else z3.BoolVal(False)
                             for u, x in enumerate(sends)])

        if not self.always_forced:
            for u in range(n):
                w = self.window[u]
                for j in range(m):
                    w = z3.If(is_w[j][u], windows[j], w)
                self.window[u] = self._fresh(f"window_{t}_{u}", w)
                self.last_send[u] = self._fresh(
                    f"last_{t}_{u}", z3.If(sends[u], self._const(t, self.wT), self.last_send[u])
                )
        self._end_slot(t, received)

    def pulled_so_far(self, width: int) -> Any:
        """PULLs sent before the current slot (pull jitter only)."""
        return getattr(self, "pulled", None) if getattr(self, "pulled", None) is not None \
            else z3.BitVecVal(0, width)

    def _end_slot(self, t: int, received: list[list[Any]]) -> None:
        """AoM and the starvation counters at the end of slot ``t``."""
        self._advance_aom(t, received)
        if self.prop != "starvation":
            return
        dep = self.dep
        start_occ = self.occ_at_slot_start
        room = z3.BoolVal(True) if dep.capacity > self.K else start_occ != self.K
        self.room.append(room)
        top = dep.starvation_limit + 1
        one = self._const(1, self.wS)
        row = []
        for u in range(dep.workers):
            run = self.silent_now[u]
            if not dep.has_update(u, t):
                # Nothing to send: the run of skipped updates neither grows nor ends.
                row.append(run)
                continue
            longer = z3.If(run == top, run, run + one)
            row.append(self._fresh(f"silent_{t}_{u}",
                                   z3.If(z3.And(room, self.skipped[t][u]), longer,
                                         self._const(0, self.wS))))
        self.silent_now = row
        self.silent.append(row)
        self.occ_at_slot_start = self.occ

    def _advance_aom(self, t: int, received: list[list[Any]]) -> None:
        """AoM_u(t) = t - (last slot in which the PS credited u), 0 initially; the
        counter saturates at ``aom_cap``, exact while the true value is below it."""
        cap = self._const(self.aom_cap, self.wA)
        one = self._const(1, self.wA)
        zero = self._const(0, self.wA)
        new_aom = []
        for u in range(self.dep.workers):
            got = z3.Or(received[u]) if received[u] else z3.BoolVal(False)
            a = self.aom_now[u]
            prev = z3.If(a == cap, cap, a + one) if t > 0 else zero
            new_aom.append(self._fresh(f"aom_{t}_{u}", z3.If(got, zero, prev)))
        self.aom_now = new_aom
        self.aom.append(new_aom)

    def _transmission(self, t: int, sends: list[Any]) -> None:
        """Sends allowed by P_s: forced while P_s = 1 (always before the first ACK);
        free otherwise, except that a worker that keeps sending skips at most
        ``max_skip`` slots in a row (an assumption of fairness and responsiveness, not
        of starvation); a worker whose feedback expired probes."""
        dep, s = self.dep, self.solver
        fresh = [u for u in range(dep.workers) if dep.has_update(u, t)]
        if t == 0 or self.always_forced:
            s.add(*[sends[u] for u in fresh])
            return
        tc = self._const(t, self.wT)
        pg = self.probe_gap
        for u in fresh:
            # Before its first send a worker has no ACK: the initial window (the
            # horizon) forces its first fresh update, as P_s = 1 before any ACK.
            gap = tc - self.last_send[u]
            s.add(z3.Implies(z3.ULE(gap, self.window[u]), sends[u]))
            if pg is not None and pg <= t:
                # Stale feedback: the next update is a probe (DESIGN.md §4).
                s.add(z3.Implies(z3.UGE(gap, pg), sends[u]))
            if self.prop == "starvation" or dep.max_skip is None:
                continue
            # At most max_skip fresh updates skipped in a row: sends are period slots apart.
            keeps = z3.Implies(z3.UGT(gap, dep.max_skip * dep.period(u)), sends[u])
            if self.target is None:
                s.add(keeps)
            else:
                s.add(z3.Implies(self.target[u], keeps))

    def _break_symmetry(self, evs: list[Any], is_w: list[list[Any]]) -> None:
        """Workers of one cluster are interchangeable, and so are clusters of equal size:
        relabelling them maps behaviours to behaviours and keeps both properties. All
        workers send in slot 0 (no ACK yet), so we may require that in slot 0 they
        arrive in id order within a cluster and equal-size clusters in id order of their
        first arrival."""
        dep, s = self.dep, self.solver
        m = len(evs)
        wp = bits(m)
        place = [self._bv(f"place0_{u}", wp) for u in range(dep.workers)]
        for j in range(m):
            for u in range(dep.workers):
                s.add(z3.Implies(is_w[j][u], place[u] == j))
        for mem in self.members:
            for a, b in zip(mem, mem[1:], strict=False):
                s.add(z3.ULT(place[a], place[b]))
        for k in range(dep.clusters - 1):
            if len(self.members[k]) == len(self.members[k + 1]):
                s.add(z3.ULT(place[self.members[k][0]], place[self.members[k + 1][0]]))

    def _message(self, t: int, j: int, ev: Any, is_w: list[Any], received: list[list[Any]]) -> _Step:
        dep, s = self.dep, self.solver
        step = _Step()
        step.ev = ev
        step.pos0 = self.pos[0]
        step.inb_before = list(self.inb)
        is_pull = ev == self.PULL
        nonempty = self.occ != 0
        pop = z3.And(is_pull, nonempty)
        can_enq = z3.ULT(self.occ, self.K)
        one_o = self._const(1, self.wO)
        choice = None
        if dep.mode == "olaf":
            if self.reward_choices:
                choice = self._bv(f"choice_{t}_{j}", 2)
                s.add(z3.ULE(choice, 2))
            code, enq_any = self._olaf_message(t, j, ev, is_w, pop, can_enq, choice, received,
                                               step)
        else:
            code, enq_any = self._fifo_message(t, j, ev, is_w, pop, can_enq, received, step)
        occ = z3.If(pop, self.occ - one_o, z3.If(enq_any, self.occ + one_o, self.occ))
        self.occ = self._fresh(f"occ_{t}_{j}", occ)
        step.code = self._fresh(f"code_{t}_{j}", code)
        step.occ = self.occ
        step.choice = choice
        return step

    def _shift_or_write(self, pop: Any, write: Any, value: Any, tag: str) -> None:
        new = []
        for k in range(self.K):
            nxt = self.pos[k + 1] if k + 1 < self.K else self._const(0, self.pos_width)
            new.append(self._fresh(
                f"pos_{tag}_{k}",
                z3.If(pop, nxt, z3.If(z3.And(write, self.occ == k), value, self.pos[k])),
            ))
        self.pos = new

    def _olaf_message(self, t: int, j: int, ev: Any, is_w: list[Any], pop: Any, can_enq: Any,
                      choice: Any, received: list[list[Any]], step: _Step) -> tuple[Any, Any]:
        dep = self.dep
        code = z3.If(ev == self.PULL, z3.If(pop, _code(CODE_DATA), _code(CODE_EMPTY)), _code(CODE_IDLE))
        enq_any = []
        owns = []
        head = [z3.And(pop, self.pos[0] == k) for k in range(dep.clusters)]
        new_inb = list(self.inb)
        cval = self._const(0, self.pos_width)
        for k, mem in enumerate(self.members):
            send_k = z3.Or([is_w[u] for u in mem])
            own = z3.And(self.single[k], z3.Or([z3.And(is_w[u], self.inb[u]) for u in mem]))
            owns.append(z3.And(send_k, self.queued[k], own))
            hit = z3.And(send_k, self.queued[k])
            if choice is None:
                repl = z3.And(hit, own)
                merge = z3.And(hit, z3.Not(own))
                drop = z3.BoolVal(False)
            else:
                repl = z3.And(hit, z3.Or(own, choice == 1))
                merge = z3.And(hit, z3.Not(own), choice == 0)
                drop = z3.And(hit, z3.Not(own), choice == 2)
                if dep.rewards == "unbeaten" and self.target is not None:
                    # The worker under test is never out-rewarded: its update is not
                    # dropped for its reward, and no other worker's update replaces a
                    # slot that holds its contribution.
                    other = z3.And(hit, z3.Not(own))
                    for u in mem:
                        self.solver.add(
                            z3.Implies(z3.And(other, self.target[u], is_w[u]), choice != 2),
                            z3.Implies(z3.And(other, self.target[u], z3.Not(is_w[u]),
                                              self.inb[u]), choice != 1))
            enq = z3.And(send_k, z3.Not(self.queued[k]), can_enq)
            full = z3.And(send_k, z3.Not(self.queued[k]), z3.Not(can_enq))
            enq_any.append(enq)
            cval = z3.If(send_k, self._const(k, self.pos_width), cval)
            code = z3.If(enq, _code(Outcome.ENQUEUED), code)
            code = z3.If(merge, _code(Outcome.MERGED), code)
            code = z3.If(repl, _code(Outcome.REPLACED), code)
            code = z3.If(drop, _code(Outcome.DROPPED_REWARD), code)
            code = z3.If(full, _code(Outcome.DROPPED_FULL), code)
            for u in mem:
                # The PS credits every worker whose bit is set, aliases included.
                bit = z3.Or([self.inb[v] for v in dep.aliases(u)])
                received[u].append(z3.And(head[k], bit))
                new_inb[u] = z3.If(
                    is_w[u],
                    z3.Or(enq, merge, repl, self.inb[u]),
                    z3.If(z3.Or(repl, head[k]), False, self.inb[u]),
                )
            self.queued[k] = self._fresh(
                f"queued_{t}_{j}_{k}", z3.If(enq, True, z3.If(head[k], False, self.queued[k]))
            )
            self.single[k] = self._fresh(
                f"single_{t}_{j}_{k}",
                z3.If(z3.Or(enq, repl), True, z3.If(merge, False, self.single[k])),
            )
        self.inb = [self._fresh(f"inb_{t}_{j}_{u}", x) for u, x in enumerate(new_inb)]
        any_enq = z3.Or(enq_any)
        self._shift_or_write(pop, any_enq, cval, f"{t}_{j}")
        step.credit = [r[-1] for r in received]
        step.own = z3.Or(owns)
        return code, any_enq

    def _fifo_message(self, t: int, j: int, ev: Any, is_w: list[Any], pop: Any, can_enq: Any,
                      received: list[list[Any]], step: _Step) -> tuple[Any, Any]:
        dep = self.dep
        is_send = z3.ULT(ev, self.PULL)
        enq = z3.And(is_send, can_enq)
        code = z3.If(ev == self.PULL, z3.If(pop, _code(CODE_DATA), _code(CODE_EMPTY)), _code(CODE_IDLE))
        code = z3.If(enq, _code(Outcome.ENQUEUED), code)
        code = z3.If(z3.And(is_send, z3.Not(can_enq)), _code(Outcome.DROPPED_FULL), code)
        head = self.pos[0]
        for u in range(dep.workers):
            received[u].append(z3.And(pop, z3.Or([head == v for v in dep.aliases(u)])))
        if not self.always_forced:
            one = self._const(1, self.wO)
            for k, mem in enumerate(self.members):
                in_k = z3.Or([head == v for v in mem])
                send_k = z3.Or([is_w[u] for u in mem])
                self.count[k] = self._fresh(
                    f"count_{t}_{j}_{k}",
                    z3.If(z3.And(pop, in_k), self.count[k] - one,
                          z3.If(z3.And(enq, send_k), self.count[k] + one, self.count[k])),
                )
        self._shift_or_write(pop, enq, ev, f"{t}_{j}")
        step.credit = [r[-1] for r in received]
        return code, enq

    # -- properties ----------------------------------------------------------------
    def first_checked_slot(self) -> int:
        """The first slot at which the property can fail: the warm-up's end, or for
        starvation the first slot that can close a run of ``bound + 1`` skips (every
        worker sends in slot 0)."""
        if self.prop == "starvation":
            return self.dep.starvation_limit + 1
        return self.dep.warmup

    def violation(self, t: int) -> Any:
        """The property fails at the end of slot ``t``."""
        dep = self.dep
        if self.prop == "starvation":
            limit = dep.starvation_limit
            return z3.Or([z3.UGT(run, limit) for run in self.silent[t]])
        aom = self.aom[t]
        if self.prop == "responsiveness":
            return z3.Or([z3.And(self.target[u], z3.UGT(a, dep.aom_bound))
                          for u, a in enumerate(aom)])
        n = dep.workers
        wide = [z3.ZeroExt(self.wF - self.wA, a) for a in aom]
        total = self._fresh(f"aom_sum_{t}", z3.Sum(wide) if n > 1 else wide[0])
        return self.deviates(aom, total)

    def deviates(self, aom: list[Any], total: Any) -> Any:
        """``max_u |AoM_u - S/N| > threshold`` for AoM terms ``aom`` (width ``wA``) and
        their sum ``total`` (width ``wF``)."""
        dep = self.dep
        n = dep.workers
        limit = dep.fairness_limit
        # |N*a_u - S| > limit for some u  <=>  for some value x taken by a worker,
        # S < N*x - limit or S > N*x + limit: comparisons of one sum with constants,
        # over the few AoM values instead of the N workers.
        out = []
        for x in range(self.aom_cap + 1):
            present = z3.Or([a == x for a in aom])
            far = []
            if n * x - limit > 0:
                far.append(z3.ULT(total, n * x - limit))
            if n * x + limit + 1 < 2 ** (self.wF - 1):
                far.append(z3.UGT(total, n * x + limit))
            if far:
                out.append(z3.And(present, z3.Or(far)))
        if self.aom_cap < dep.horizon:
            # A saturated counter hides the true AoM: report it, the caller widens the cap.
            out += [a == self.aom_cap for a in aom]
        return z3.Or(out) if out else z3.BoolVal(False)

    def saturated(self, trace: Trace) -> bool:
        """The trace reached the AoM cap, so its AoM values are lower bounds only."""
        return self.aom_cap < self.dep.horizon and any(
            a >= self.aom_cap for s in trace.slots for a in s.aom)

    def size(self) -> dict[str, int]:
        return {
            "assertions": len(self.solver.assertions()),
            "constants": self._constants,
            "message_positions": self.positions,
        }

    # -- solving -------------------------------------------------------------------
    def check(self, timeout_s: float | None = None,
              progress: Callable[[int], None] | None = None) -> CheckResult:
        """Unroll slot by slot and ask for a violation at each checked slot.

        ``progress(t)`` is called after slot ``t`` is proved violation-free. A VERIFIED
        needs, in addition, that the constraints admit some behaviour over the whole
        horizon (a built-in vacuity check: an over-constrained model proves anything).
        """
        dep, s = self.dep, self.solver
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        if deadline is not None:
            self.deadline = deadline if self.deadline is None else min(self.deadline, deadline)
        first = self.first_checked_slot()

        def run(*assumptions: Any) -> Any:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return z3.unknown
                s.set("timeout", max(1, int(left * 1000)))
            return s.check(*assumptions)

        def result(status: str, reason: str, trace: Trace | None = None) -> CheckResult:
            return CheckResult(self.prop, status, time.monotonic() - start, self.size(),
                               trace=trace, reason=reason, checked_through=proved)

        proved: int | None = None
        if first >= dep.horizon:
            return result("UNKNOWN", f"horizon too short: {self.prop} can first fail at slot "
                                     f"{first}, the horizon ends at slot {dep.horizon - 1}")
        answer = z3.unsat
        bad_slot = None
        try:
            if self.opt.incremental:
                for t in range(dep.horizon):
                    self.add_slot(t)
                    if t < first:
                        continue
                    flag = z3.Bool(f"violation_at_{t}")
                    s.add(z3.Implies(flag, self.violation(t)))
                    c0 = time.process_time()
                    answer = run(flag)
                    self.slot_cpu.append(time.process_time() - c0)
                    if answer != z3.unsat:
                        bad_slot = t
                        break
                    proved = t
                    if progress is not None:
                        progress(t)
            else:
                for t in range(dep.horizon):
                    self.add_slot(t)
                flags = [z3.Bool(f"violation_at_{t}") for t in range(first, dep.horizon)]
                for t, flag in zip(range(first, dep.horizon), flags, strict=True):
                    s.add(z3.Implies(flag, self.violation(t)))
                answer = run(z3.Or(flags))
                if answer == z3.unsat:
                    proved = dep.horizon - 1
            if answer == z3.unsat:
                sanity = run()
                if sanity == z3.unsat:
                    return result("UNKNOWN", "the model's constraints admit no behaviour at "
                                             "all (vacuous): a model bug, nothing is proved")
                answer = z3.unsat if sanity == z3.sat else sanity
        except DeadlineExceeded:
            answer = z3.unknown
        if self.opt.dump_smt:
            self.dump_smt(self.opt.dump_smt, first)
        if answer == z3.unsat:
            return result("VERIFIED", self._summary())
        if answer == z3.sat:
            trace = self.extract(s.model(), bad_slot)
            return result("VIOLATED", trace.detail, trace)
        why = s.reason_unknown()
        if deadline is not None and time.monotonic() >= deadline - 0.05:
            why = f"timeout after {timeout_s:g} s ({why})"
        if proved is not None:
            why += f"; no violation in slots {first}..{proved}"
        return result("UNKNOWN", why)

    def dump_smt(self, path: str, first: int) -> None:
        """The query as one SMT-LIB 2 script: every constraint built so far and the
        violation at some checked slot (unsat = VERIFIED for the slots built)."""
        dump = z3.SolverFor(self.opt.logic) if self.opt.logic else z3.Solver()
        dump.add(*self.solver.assertions())
        flags = [z3.Bool(f"violation_at_{t}") for t in range(first, len(self.skipped))]
        dump.add(z3.Or(flags) if flags else z3.BoolVal(False))
        with open(path, "w", encoding="utf-8") as f:
            f.write(dump.to_smt2())

    def _summary(self) -> str:
        dep = self.dep
        slots = f"slots {self.first_checked_slot()}..{dep.horizon - 1}"
        if self.prop == "fairness":
            return (f"every behaviour keeps max_u |AoM_u - mean AoM| <= "
                    f"{float(dep.fairness_threshold):g} slots in {slots}")
        if self.prop == "starvation":
            unit = "fresh updates" if dep.staggered else "slots"
            return (f"no worker skips more than {dep.starvation_limit} {unit} in a row while the "
                    f"queue has room, in {slots}")
        return f"every worker that keeps sending has AoM <= {dep.aom_bound} slots in {slots}"

    # -- counterexample ------------------------------------------------------------
    def _events(self, t: int, val: Any, true: Any) -> list[Event]:
        """The messages of slot ``t`` in the model's arrival order, with outcomes."""
        n = self.dep.workers
        events = []
        for step in self.steps[t]:
            ev = val(step.ev)
            code = val(step.code)
            occ = val(step.occ)
            if ev == self.IDLE:
                continue
            if ev < n:
                e = Event("update", occ, worker=ev, cluster=self.cluster[ev],
                          outcome=Outcome(code).name)
                if step.choice is not None and code in (Outcome.MERGED, Outcome.REPLACED,
                                                        Outcome.DROPPED_REWARD) and not true(step.own):
                    e.merge_choice = CHOICES[val(step.choice)]
                events.append(e)
            elif code == CODE_EMPTY:
                events.append(Event("pull", occ, response="EMPTY"))
            else:
                head = val(step.pos0)
                credited = [u for u in range(n) if true(step.credit[u])]
                if self.dep.mode == "olaf":
                    contributors = [u for u in self.members[head] if true(step.inb_before[u])]
                    cluster = head
                else:
                    contributors, cluster = [head], self.cluster[head]
                events.append(Event("pull", occ, cluster=cluster, response="DATA",
                                    contributors=contributors, credited=credited))
        return events

    def extract(self, model: Any, bad_slot: int | None) -> Trace:
        """The solver's behaviour up to ``bad_slot`` as a trace. AoM values in the trace
        are the true ones, recomputed from the DATA credits (the model's counters may
        saturate at a cap); they are checked against the counters below the cap."""
        dep = self.dep
        n = dep.workers

        def val(x: Any) -> int:
            return model.eval(x, model_completion=True).as_long()

        def true(x: Any) -> bool:
            return z3.is_true(model.eval(x, model_completion=True))

        if bad_slot is None:
            bad_slot = next(t for t in range(self.first_checked_slot(), dep.horizon)
                            if true(self.violation(t)))
        slots = []
        last_credit = [0] * n
        for t in range(bad_slot + 1):
            events = self._events(t, val, true)
            for e in events:
                if e.response == "DATA":
                    for u in e.credited:
                        last_credit[u] = t
            aom = [t - last_credit[u] for u in range(n)]
            if self.aom[t]:
                counters = [val(a) for a in self.aom[t]]
                for u in range(n):
                    if counters[u] != min(aom[u], self.aom_cap):
                        raise AssertionError(f"model inconsistent: AoM counter of worker {u} "
                                             f"is {counters[u]} at slot {t}, credits give {aom[u]}")
            skipped = [u for u in range(n) if true(self.skipped[t][u])]
            occ_end = events[-1].occupied if events else (slots[-1].occupied if slots else 0)
            idle = [u for u in range(n) if not dep.has_update(u, t)]
            slots.append(Slot(t, events, skipped, occ_end, aom, min(aom), idle))
        aom = slots[bad_slot].aom
        if self.prop == "responsiveness":
            worker = next(u for u in range(n) if true(self.target[u]))
            unit = "fresh updates" if dep.staggered else "slots"
            keeps = ("" if dep.max_skip is None
                     else f" keeps sending (skips <= {dep.max_skip} {unit} in a row) but")
            detail = (f"worker {worker}{keeps} has AoM_{worker}({bad_slot}) = {aom[worker]} > "
                      f"bound {dep.aom_bound}")
        elif self.prop == "starvation":
            limit = dep.starvation_limit
            worker = next(u for u in range(n) if val(self.silent[bad_slot][u]) > limit)
            detail = (f"worker {worker} skipped slots {bad_slot - limit}..{bad_slot} "
                      f"({limit + 1} in a row) while the queue had room" if not dep.staggered else
                      f"worker {worker} skipped {limit + 1} fresh updates in a row, the last in "
                      f"slot {bad_slot}, while the queue had room")
        else:
            mean = sum(aom) / n
            worker = max(range(n), key=lambda u: abs(aom[u] - mean))
            detail = (f"at slot {bad_slot}: |AoM_{worker} - mean| = |{aom[worker]} - "
                      f"{mean:.3g}| = {abs(aom[worker] - mean):.3g} > threshold "
                      f"{float(dep.fairness_threshold):g}")
        return Trace(self.prop, bad_slot, worker, detail, slots)
