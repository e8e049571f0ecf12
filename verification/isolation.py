"""The isolation property: a cluster that keeps sending gets into the queue within a bound,
whatever the other clusters send (DESIGN.md §3, ``cluster_quota``).

Statement, for a deployment with at least two clusters, a *victim* cluster ``v`` and the
bound ``B = isolation_bound`` (slots):

    ∀ t ≥ B - 1:  ∃ s ∈ [t - B + 1, t]:  some UPDATE of cluster v in slot s is
                  ENQUEUED, MERGED or REPLACED (it reaches a slot of the queue)

over every behaviour in which

* every worker of ``v`` sends one UPDATE (block 0) in every slot — *keeps sending* as the
  always-send sender: the property is about the queue's admission, not the coin of §4;
* the other clusters (the *attackers*) are unconstrained: any number of UPDATEs at any
  instant of any slot, each with any block id (so in OLAF mode every one may open a slot
  of its own: a fresh ``[cluster][block]`` key), no send rule;
* the slot's messages (the victim's UPDATEs, the PS's PULLs on the nominal schedule,
  the attackers' UPDATEs) reach the switch in any order.

Every victim in turn (one per distinct cluster size; clusters of equal size are
interchangeable). Rewards play no part: merges never cross clusters, so an attacker can
only reach the victim through the occupancy and the quota; the victim's UPDATEs are
decided as under ``rewards=merge`` (a reward decision among the victim's own workers
needs the victim's slot in the queue, so its cluster is in the queue either way).

The semantics is the queue as a ring of slot owners, head first: the victim's slots and
the attackers'. The victim's UPDATE meets its key's slot in OLAF mode if it holds one
(MERGED or REPLACED, in place); otherwise it is appended iff ``occupied < capacity`` and
the victim holds fewer than ``cluster_quota`` slots (§3 steps 4-5; the same in FIFO mode,
where every UPDATE needs its own slot). An attacker UPDATE that matters opens a slot with a
fresh key under the same rule (one to a key it holds changes no owner, one refused changes
nothing); the attackers together are one attacker with quota ``attacker_quota``. A PULL
pops the head. Between two of the slot's other messages the attackers only append, so a
count per gap ("fill") covers every behaviour: exact.

Engines: ``IsolationModel`` (Z3, bounded, incremental slot by slot) and
``search_isolation`` (explicit-state closure of the reachable (ring, wait) states: for
all T). Counterexamples are replayed on ``dataplane.queue.OlafQueue`` by
``replay_isolation``.

Counterexample traces are played with concrete clusters, workers and blocks by
``isolation_trace.Simulator``; ``replay_isolation`` lives in ``isolation_replay``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import z3

from verification.config import ISOLATION, Deployment
from verification.config import isolation_unsupported as unsupported
from verification.isolation_trace import Simulator
from verification.model import Options, bits
from verification.solving import CheckResult, DeadlineExceeded
from verification.trace import Trace
from verification.unbounded import UnboundedResult

ENGINE = "isolation"
MAX_STATES = 400_000
"""The all-T search stops (open) beyond this many remembered states."""


def victims(dep: Deployment) -> list[int]:
    """One victim cluster per distinct cluster size (equal sizes are interchangeable:
    relabelling clusters maps behaviours to behaviours)."""
    out: dict[int, int] = {}
    for k in range(dep.clusters):
        out.setdefault(len(dep.members(k)), k)
    return sorted(out.values())


# -- the semantics on a ring of owners ----------------------------------------------------
VICTIM, ATTACKER = 1, 0
"""Owners in the ring: the victim's slots and the attackers' (any other cluster)."""


def attacker_quota(dep: Deployment) -> int:
    """The most slots the attackers hold together: ``(clusters - 1) * cluster_quota``,
    at most ``capacity``. The other clusters act as one attacker with this quota, exactly:
    every sequence of their slots obeys it (each cluster holds at most ``quota``), and every
    sequence that obeys it is theirs (while the attackers hold fewer, some cluster is below
    its quota and opens the next slot), and the victim's admission reads only the
    occupancy and its own slots."""
    return min(dep.capacity, (dep.clusters - 1) * dep.quota)


def attacker_may_enqueue(dep: Deployment, ring: tuple[int, ...]) -> bool:
    """§3 step 4 for an attacker UPDATE with a fresh key: room, and attackers below quota."""
    return len(ring) < dep.capacity and ring.count(ATTACKER) < attacker_quota(dep)


def victim_update(dep: Deployment, ring: tuple[int, ...]) -> tuple[tuple[int, ...], bool]:
    """The victim's UPDATE (block 0): (the ring after it, it reached the queue)."""
    if dep.mode == "olaf" and VICTIM in ring:
        return ring, True  # its key's slot exists: MERGED or REPLACED, in place (§3 1-3)
    if len(ring) < dep.capacity and ring.count(VICTIM) < dep.quota:
        return (*ring, VICTIM), True  # §3 step 4
    return ring, False  # §3 step 5: DROPPED_FULL


# -- the bounded Z3 encoding --------------------------------------------------------------
class IsolationModel:
    """Slots unrolled one at a time. A slot is the victim's ``|v|`` UPDATEs and the
    schedule's PULLs in an order the solver picks (``pull[t][j]``: the ``j``-th of them is
    a PULL, exactly the schedule's count), and before each of them the attackers open
    ``fill[t][j]`` slots (any number the room and their quota allow). Attacker messages
    between two of the slot's other messages only append, so one count per gap is every
    behaviour; those after the slot's last message are the next slot's first gap. The ring
    is ``pos[0..capacity-1]`` in FIFO mode (True = the victim's slot, head first; entries
    from ``occ`` on are unused); in OLAF mode, where the victim holds at most one slot, the
    occupancy, the victim's count (0 or 1) and its place ``vpos`` say everything the rules
    read."""

    ENGINE = ENGINE

    def __init__(self, dep: Deployment, victim: int, options: Options | None = None,
                 lemmas: bool = True) -> None:
        self.dep, self.victim = dep, victim
        self.lemmas = lemmas
        """Assert ``invariant`` at every step (``lemmas_inductive`` must have proved it)."""
        self.opt = options or Options()
        self.solver = z3.SolverFor(self.opt.logic) if self.opt.logic else z3.Solver()
        self.wO = bits(dep.capacity) + 1
        self.wW = bits(dep.isolation_bound)
        self.occ = z3.BitVecVal(0, self.wO)
        self.vic = z3.BitVecVal(0, self.wO)
        """The victim's slots in the ring (at most one in OLAF mode)."""
        self.pos = [z3.BoolVal(False) for _ in range(dep.capacity if dep.mode == "fifo" else 0)]
        self.vpos = z3.BitVecVal(0, self.wO)
        self.wait_now = z3.BitVecVal(0, self.wW)
        self.pulls: list[list[Any]] = []
        self.fills: list[list[Any]] = []
        self.got: list[list[Any]] = []
        self.wait: list[Any] = []
        self.positions = 0
        self._constants = 0
        self.deadline = self.opt.deadline
        self.collect: list[Any] | None = None
        """``lemmas_inductive``: the invariant after each step, collected, not asserted."""

    def _fresh(self, name: str, value: Any) -> Any:
        self._constants += 1
        if self.deadline is not None and self._constants % 256 == 0 \
                and time.monotonic() > self.deadline:
            raise DeadlineExceeded
        v = z3.Bool(name) if z3.is_bool(value) else z3.BitVec(name, value.size())
        self.solver.add(v == value)
        return v

    def _c(self, value: int) -> Any:
        return z3.BitVecVal(value, self.wO)

    def add_slot(self, t: int) -> None:
        dep, s = self.dep, self.solver
        cap = dep.capacity
        m = len(dep.members(self.victim)) + dep.pulls_in_slot(t)
        self.positions += m
        pulls = [z3.Bool(f"ipull_{t}_{j}") for j in range(m)]
        fills = [z3.BitVec(f"ifill_{t}_{j}", self.wO) for j in range(m)]
        self._constants += 2 * m
        s.add(z3.PbEq([(p, 1) for p in pulls], dep.pulls_in_slot(t)))
        got = []
        for j in range(m):
            tag = f"{t}_{j}"
            # The attackers' fill: room and their joint quota (occ - vic attacker slots).
            x = fills[j]
            s.add(z3.ULE(x, self._c(cap) - self.occ),
                  z3.ULE(x, self._c(attacker_quota(dep)) - (self.occ - self.vic)))
            end = self.occ + x
            if dep.mode == "fifo":
                self.pos = [self._fresh(f"ipf_{tag}_{i}", z3.If(
                    z3.And(z3.ULE(self.occ, i), z3.ULT(i, end)), False, p))
                    for i, p in enumerate(self.pos)]
            self.occ = self._fresh(f"iof_{tag}", end)
            # The message: a PULL pops the head, or the victim's UPDATE.
            pop = z3.And(pulls[j], self.occ != 0)
            meets = self.vic != 0 if dep.mode == "olaf" else z3.BoolVal(False)
            enq = z3.And(z3.Not(pulls[j]), z3.Not(meets), z3.ULT(self.occ, cap),
                         z3.ULT(self.vic, dep.quota))
            got.append(self._fresh(f"igot_{tag}", z3.And(z3.Not(pulls[j]), z3.Or(meets, enq))))
            one = self._c(1)
            if dep.mode == "fifo":
                head = self.pos[0]
                self.pos = [self._fresh(f"ipos_{tag}_{i}", z3.If(
                    pop, self.pos[i + 1] if i + 1 < cap else z3.BoolVal(False),
                    z3.If(z3.And(enq, self.occ == i), True, p)))
                    for i, p in enumerate(self.pos)]
            else:
                # OLAF mode: the victim holds at most one slot (one key), so the ring is
                # its occupancy and the victim's place in it (``vpos`` from the head).
                head = z3.And(self.vic != 0, self.vpos == 0)
                self.vpos = self._fresh(f"ivpos_{tag}", z3.If(
                    pop, self.vpos - one, z3.If(enq, self.occ, self.vpos)))
            self.vic = self._fresh(f"ivic_{tag}", z3.If(
                z3.And(pop, head), self.vic - one, z3.If(enq, self.vic + one, self.vic)))
            self.occ = self._fresh(f"iocc_{tag}", z3.If(
                pop, self.occ - one, z3.If(enq, self.occ + one, self.occ)))
            inv = self.invariant()
            if self.collect is not None:
                self.collect.append(inv)
            elif self.lemmas:
                s.add(inv)
        top = z3.BitVecVal(dep.isolation_bound, self.wW)
        w = self.wait_now
        self.wait_now = self._fresh(f"iwait_{t}", z3.If(
            z3.Or(got), z3.BitVecVal(0, self.wW), z3.If(w == top, top, w + 1)))
        self.pulls.append(pulls)
        self.fills.append(fills)
        self.got.append(got)
        self.wait.append(self.wait_now)

    def invariant(self) -> Any:
        """Facts every reachable state has (occupancy within capacity, the victim's slots
        among them and within its quota, the attackers' within theirs, the ring's count of
        victim slots): implied by the transitions — ``lemmas_inductive`` proves it — and
        stated at every step so that the solver need not rediscover them through the
        whole unrolling (it made the default deployment's proof 100x faster)."""
        dep, c = self.dep, self._c
        facts = [z3.ULE(self.occ, c(dep.capacity)), z3.ULE(self.vic, self.occ),
                 z3.ULE(self.vic, c(dep.quota)),
                 z3.ULE(self.occ - self.vic, c(attacker_quota(dep)))]
        if dep.mode == "olaf":
            facts += [z3.ULE(self.vic, c(1)), z3.Implies(self.vic != 0, z3.ULT(self.vpos, self.occ))]
        else:
            facts.append(self.vic == z3.Sum([z3.If(z3.And(p, z3.ULT(c(i), self.occ)), c(1), c(0))
                                             for i, p in enumerate(self.pos)]))
        return z3.And(facts)

    def violation(self, t: int) -> Any:
        """The victim got nothing into the queue in slots ``t - B + 1 .. t``."""
        return self.wait[t] == self.dep.isolation_bound

    def size(self) -> dict[str, int]:
        return {"assertions": len(self.solver.assertions()), "constants": self._constants,
                "message_positions": self.positions}

    def check(self, timeout_s: float | None = None,
              progress: Callable[[int], None] | None = None) -> CheckResult:
        """Ask for a violation at each slot from ``B - 1`` on (unsat everywhere, and some
        behaviour over the whole horizon: VERIFIED up to T)."""
        dep, s = self.dep, self.solver
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        if deadline is not None:
            self.deadline = deadline if self.deadline is None else min(self.deadline, deadline)
        first = dep.isolation_bound - 1
        proved: int | None = None

        def run(*assumptions: Any) -> Any:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return z3.unknown
                s.set("timeout", max(1, int(left * 1000)))
            return s.check(*assumptions)

        def result(status: str, reason: str, trace: Trace | None = None) -> CheckResult:
            return CheckResult(ISOLATION, status, time.monotonic() - start, self.size(),
                               trace=trace, reason=reason, engine=ENGINE, checked_through=proved)

        if first >= dep.horizon:
            return result("UNKNOWN", f"horizon too short: isolation with bound "
                                     f"{dep.isolation_bound} can first fail at slot {first}")
        answer, bad = z3.unsat, None
        try:
            for t in range(dep.horizon):
                self.add_slot(t)
                if t < first:
                    continue
                flag = z3.Bool(f"iviolation_{t}")
                s.add(z3.Implies(flag, self.violation(t)))
                answer = run(flag)
                if answer != z3.unsat:
                    bad = t
                    break
                proved = t
                if progress is not None:
                    progress(t)
            if answer == z3.unsat:
                sanity = run()
                if sanity == z3.unsat:
                    return result("UNKNOWN", "the model's constraints admit no behaviour at all "
                                             "(vacuous): a model bug, nothing is proved")
                answer = z3.unsat if sanity == z3.sat else sanity
        except DeadlineExceeded:
            answer = z3.unknown
        if answer == z3.unsat:
            return result("VERIFIED", summary(dep, self.victim))
        if answer == z3.sat:
            assert bad is not None
            trace = self.extract(s.model(), bad)
            return result("VIOLATED", trace.detail, trace)
        why = s.reason_unknown()
        if deadline is not None and time.monotonic() >= deadline - 0.05:
            why = f"timeout after {timeout_s:g} s ({why})"
        if proved is not None:
            why += f"; no violation in slots {first}..{proved}"
        return result("UNKNOWN", why)

    def extract(self, model: Any, bad: int) -> Trace:
        """The solver's slots as ``(fill, is_pull)`` per message, played through
        ``Simulator`` (the same rules with clusters, workers, blocks and contributors),
        checked against the encoding's admissions."""
        order = []
        for t in range(bad + 1):
            order.append([(model.eval(x, model_completion=True).as_long(),
                           z3.is_true(model.eval(p, model_completion=True)))
                          for x, p in zip(self.fills[t], self.pulls[t], strict=True)])
        sim_got = Simulator.victim_admissions(self.dep, self.victim, order)
        for t in range(bad + 1):
            got = any(z3.is_true(model.eval(g, model_completion=True)) for g in self.got[t])
            if got != sim_got[t]:
                raise AssertionError(f"model inconsistent at slot {t}: the encoding says the "
                                     f"victim got in = {got}, the rules say {sim_got[t]}")
        return Simulator(self.dep, self.victim).trace(order, bad)


def lemmas_inductive(dep: Deployment, victim: int, timeout_s: float = 10.0) -> bool | None:
    """``IsolationModel.invariant`` holds in every reachable state: it holds in the empty
    queue, and from any state where it holds, every step of a slot (of each phase of the
    PULL schedule) keeps it — checked with Z3 on a symbolic pre-state, message by message.
    So asserting it at every step removes no behaviour. None: Z3 did not decide within
    ``timeout_s`` per step (the check then runs without the lemmas)."""
    for t in range(dep.pull_rate.denominator):
        m = IsolationModel(dep, victim, lemmas=False)
        if not z3.is_true(z3.simplify(m.invariant())):
            return False
        m.occ, m.vic, m.vpos = (z3.BitVec(f"pre_{x}", m.wO) for x in ("occ", "vic", "vpos"))
        m.pos = [z3.Bool(f"pre_pos_{i}") for i in range(len(m.pos))]
        m.solver.add(m.invariant())
        m.solver.set("timeout", max(1, int(timeout_s * 1000)))
        m.collect = []
        m.add_slot(t)
        # Step by step: the invariant after each message, given it after the ones before
        # (one query for the whole slot was orders of magnitude slower).
        for inv in m.collect:
            answer = m.solver.check(z3.Not(inv))
            if answer == z3.sat:
                return False
            if answer != z3.unsat:
                return None
            m.solver.add(inv)
    return True


def summary(dep: Deployment, victim: int) -> str:
    return (f"cluster {victim} ({len(dep.members(victim))} workers always sending) gets an "
            f"UPDATE into the queue in every {dep.isolation_bound} consecutive slot(s), whatever "
            f"the other clusters send (quota {dep.quota} of {dep.capacity} slots)")


# -- checking -----------------------------------------------------------------------------
def check_isolation(dep: Deployment, timeout_s: float | None = None,
                    options: Options | None = None,
                    progress: Callable[[int], None] | None = None) -> CheckResult:
    """The bounded check for every victim, then (``options.all_t``) the all-T search."""
    reason = unsupported(dep)
    if reason is not None:
        raise ValueError(reason)
    opt = options or Options()
    start = time.monotonic()
    deadline = None if timeout_s is None else start + timeout_s
    results = []
    for v in victims(dep):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        inductive = lemmas_inductive(dep, v)
        if inductive is False:
            raise AssertionError("isolation model bug: its invariant is not inductive")
        model = IsolationModel(dep, v, replace(opt, deadline=deadline), lemmas=bool(inductive))
        r = model.check(left, progress)
        results.append(r)
        if r.status != "VERIFIED":
            break
    result = results[-1]
    if result.status == "VERIFIED":
        result.reason = "; ".join(r.reason for r in results)
        result.size = {k: sum(r.size.get(k, 0) for r in results) for k in results[-1].size}
    result.assumptions = assumptions(dep)
    if result.status == "VERIFIED" and opt.all_t:
        budget = time.monotonic() + opt.all_t_budget
        stop = budget if deadline is None else min(budget, deadline)
        found = search_isolation(dep, deadline=stop)
        result.unbounded = found.to_dict()
        if found.status == "closed":
            result.scope = "unbounded"
            result.reason += (f"; for all T: the reachable state set closed at slot {found.depth} "
                              f"({found.states} states, none violating)")
            result.assumptions = ["every slot from an empty queue (for all T: every reachable "
                                  "(ring, wait) state was enumerated and checked)",
                                  *result.assumptions[1:]]
        elif found.status == "violated" and found.depth >= dep.horizon:
            result.reason += (f"; NOT for all T: the all-T search reaches a violation at slot "
                              f"{found.depth} (--horizon {found.depth + 1} shows its trace)")
        elif found.status == "violated":
            result.status = "UNKNOWN"
            result.reason = (f"model disagreement: the bounded encoding verified slots up to "
                             f"{dep.horizon - 1} but the all-T search reaches a violation at "
                             f"slot {found.depth}")
        else:
            result.reason += (f"; all-T search not closed ({found.reason}); no violation "
                              f"through slot {found.depth}")
    result.seconds = time.monotonic() - start
    return result


def assumptions(dep: Deployment) -> list[str]:
    return [
        f"slots 0..{dep.horizon - 1} from an empty queue (bounded: nothing is claimed after "
        f"slot {dep.horizon - 1})",
        "the victim cluster's workers always send (P_s = 1): one UPDATE of block 0 each, every "
        "slot (the §4 coin is not modelled; starvation bounds its skips separately)",
        "the other clusters are unconstrained: any number of UPDATEs, any block ids, at any "
        "instant of any slot, no send rule",
        f"the PS sends exactly floor((t+1)r) - floor(tr) PULLs in slot t, r = "
        f"{float(dep.pull_rate):g}",
        "messages of a slot reach the switch in any order; no loss",
        f"queue mode {dep.mode} fixed for the run; cluster_quota {dep.quota} of capacity "
        f"{dep.capacity}",
        "rewards: not read (merges never cross clusters; the victim's own updates decided as "
        "under rewards=merge)",
        f"checked from slot {dep.isolation_bound - 1} (the first window of "
        f"{dep.isolation_bound} slots), no warm-up",
    ]


# -- the all-T search ---------------------------------------------------------------------
def _image(dep: Deployment, victim: int, frontier: set[tuple], t: int) -> set[tuple]:
    """Slot ``t``'s successors of a set of (ring, wait) states: every order of the
    victim's UPDATEs and the PULLs, with any attacker UPDATEs before, between and after."""
    nv, pulls = len(dep.members(victim)), dep.pulls_in_slot(t)
    start = {(ring, wait, nv, pulls, False) for ring, wait in frontier}
    seen = set(start)
    stack = list(start)
    out = set()
    top = dep.isolation_bound
    while stack:
        ring, wait, vl, pl, got = stack.pop()
        nxt = []
        if vl == 0 and pl == 0:
            out.add((ring, 0 if got else min(wait + 1, top)))
        if attacker_may_enqueue(dep, ring):
            nxt.append(((*ring, ATTACKER), wait, vl, pl, got))
        if vl:
            r2, g = victim_update(dep, ring)
            nxt.append((r2, wait, vl - 1, pl, got or g))
        if pl:
            nxt.append((ring[1:], wait, vl, pl - 1, got))
        for x in nxt:
            if x not in seen:
                seen.add(x)
                stack.append(x)
    return out


def search_isolation(dep: Deployment, deadline: float | None = None,
                     max_depth: int | None = None) -> UnboundedResult:
    """Breadth first over (ring of owners, slots the victim has waited, PULL phase) from
    the empty queue, every victim; ``closed`` when a slot adds no state (every slot is
    checked, so every remembered state may cut the search). ``max_depth``: stop after that
    slot (bounded mode, for cross-checks; ``worst`` holds the longest wait per slot)."""
    start = time.monotonic()
    period = dep.pull_rate.denominator
    total, depth_all, worst_all = 0, 0, []
    for v in victims(dep):
        frontier = {((), 0)}
        seen: set[tuple] = set()
        worst: list[int] = []
        t = 0
        while True:
            if deadline is not None and time.monotonic() > deadline:
                return UnboundedResult("open", t - 1, total + len(seen), time.monotonic() - start,
                                       "time budget spent", [], "")
            image = _image(dep, v, frontier, t)
            worst.append(max(w for _, w in image))
            if worst[-1] >= dep.isolation_bound:
                return UnboundedResult("violated", t, total + len(seen), time.monotonic() - start,
                                       f"victim cluster {v}", list(map(int, worst)), "")
            phase = (t + 1) % period
            new = {x for x in image if (x, phase) not in seen}
            seen |= {(x, phase) for x in new}
            if len(seen) > MAX_STATES:
                return UnboundedResult("open", t, total + len(seen), time.monotonic() - start,
                                       f"more than {MAX_STATES} states", [], "")
            if max_depth is not None and t >= max_depth:
                return UnboundedResult("open", t, total + len(seen), time.monotonic() - start,
                                       f"stopped at slot {max_depth}", list(map(int, worst)), "")
            if not new:
                break
            frontier = new
            t += 1
        total += len(seen)
        depth_all = max(depth_all, t)
        worst_all = worst if len(worst) > len(worst_all) else worst_all
    return UnboundedResult("closed", depth_all, total, time.monotonic() - start, "",
                           list(map(int, worst_all)), "")
