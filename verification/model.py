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

``AomModel`` is built here (state, one slot, the AoM and starvation counters) from one
mixin per job: ``queue_encoding`` (the switch's queue, one message position at a time),
``sender_encoding`` (when workers must send), ``properties`` (the violation at a slot),
``solving`` (the slot-by-slot queries and ``CheckResult``) and ``counterexample`` (the
solver's behaviour as a ``Trace``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import z3

from verification.config import MAX_PULLS_PER_SLOT as MAX_PULLS
from verification.config import PROPERTIES, Deployment
from verification.counterexample import Counterexample
from verification.properties import AomProperties
from verification.queue_encoding import QueueEncoding, _Step
from verification.sender_encoding import SenderEncoding
from verification.sending import L_MIN, forced_window, probe_gap
from verification.solving import DeadlineExceeded, Solving
from worker_transport.protocol import Outcome

FAIRNESS_CAP = 4
ENGINES = ("auto", "counting", "segments", "explicit")


def bits(n: int) -> int:
    """Bits that hold 0..n."""
    return max(1, int(n).bit_length())


def reachable_feedback(dep: Deployment) -> list[tuple[int, int, int]]:
    """(occupied, active_clusters, held) an ACK can carry in the model, ``held`` the
    slots the UPDATE's cluster holds after it (what revision 3's ``room_c`` reads). OLAF
    mode: one slot per cluster, held 1 but for a DROPPED_FULL (a full ring of other
    clusters, possible only with ``capacity < clusters``). FIFO mode: with the quota at
    capacity (below it is refused) ``room_c = capacity - occupied`` whatever is held, so
    held is not tracked (1)."""
    k = queue_slots(dep)
    if dep.mode == "olaf":
        out = [(o, o, 1) for o in range(k + 1)]
        if dep.capacity < dep.clusters:
            out.append((k, k, 0))
        return out
    return [(0, 0, 1)] + [(o, a, 1) for o in range(1, k + 1)
                          for a in range(1, min(dep.clusters, o) + 1)]


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


class AomModel(QueueEncoding, SenderEncoding, AomProperties, Solving, Counterexample):
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
        self.starv3 = prop == "starvation" and dep.feedback == 3
        """Revision 3's starvation: at least once per ``starvation_limit`` fresh updates a
        decision with ``P_s >= L_min``. Every send is free (any UPDATE may be lost before
        the switch, which leaves the queue and the worker's feedback as a skip does), and
        the window table holds where ``P_s >= L_min`` instead of where ``P_s = 1``."""
        self.low_now: list[Any] = []
        """starv3: per worker, this slot's decision may have ``P_s < L_min``."""
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
        level = L_MIN if self.starv3 else 1.0
        for fb in reachable_feedback(dep):
            self._tick()
            table[fb] = forced_window(dep, *fb, level=level)
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
        if t == 0 and self.opt.symmetry_breaking and not dep.aliasing and not dep.staggered \
                and not self.starv3:
            self._break_symmetry(evs, is_w)

        received = [[] for _ in range(n)]
        windows: list[Any] = []
        steps = []
        for j in range(m):
            step = self._message(t, j, evs[j], is_w[j], received)
            steps.append(step)
            if not self.always_forced:
                refused = step.code == int(Outcome.DROPPED_FULL) if dep.mode == "olaf" \
                    else None
                windows.append(self._window_of(self.occ, self._active(), refused))
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
            # Revision 3: a decision that may fall below L_min lengthens the run, whether
            # the queue has room or not; under 2 a skip while the queue has room.
            grows = self.low_now[u] if self.starv3 else z3.And(room, self.skipped[t][u])
            row.append(self._fresh(f"silent_{t}_{u}",
                                   z3.If(grows, longer, self._const(0, self.wS))))
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
