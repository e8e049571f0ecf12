"""Differential and sanity harness for verify-aom (issue 19 item 2).

* reference -> model: random behaviours of the reference OlafQueue with workers that
  follow DESIGN.md §4 must be accepted by the model (every encoding);
* model -> reference: model solutions (not only counterexamples) must replay;
* tight bounds: for small deployments the model's tightest verified bound equals the
  worst case of a brute-force search over the reference queue, and the first
  violating slot agrees (one deployment violates only at its last slot);
* mutants: each semantic mutation of the model, the send rule or the replay that once
  survived the suite is applied here and must make one of these checks fail.
"""

from __future__ import annotations

import inspect
import itertools
import pickle
import random
import textwrap
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
import z3

from dataplane.queue import OlafQueue, QueueConfig
from verification import model as model_module
from verification import replay as replay_module
from verification import sending
from verification.check import check_property
from verification.config import CONTRIBUTOR_BITS, Deployment
from verification.model import AomModel, Options
from verification.queue_encoding import CODE_DATA, CODE_EMPTY
from verification.replay import VALUES, datagram, may_skip, replay
from verification.segments import SegmentModel
from verification.trace import Event, Slot, Trace
from worker_transport.codec import decode
from worker_transport.protocol import INT32_MAX, Mode, MsgType, Outcome

pytestmark = pytest.mark.timeout(300)

THROTTLED = Deployment(workers=2, clusters=2, capacity=4, horizon=5, warmup=2, max_skip=1)
"""Revised §4 rule: P_s < 1 after every ACK of a non-empty queue, skips of one slot."""
RING = Deployment(workers=2, clusters=2, capacity=1, horizon=6, warmup=2, max_skip=1)
"""Fewer slots than clusters: DROPPED_FULL and util-255 ACKs."""
FIFO = Deployment(workers=3, clusters=1, capacity=1, mode="fifo", horizon=6, warmup=2)
"""Drop-tail with one slot, baseline workers: one worker can go unserved, so the worst
deviation grows every slot and is reached only at the last slot."""
STAGGERED = Deployment(workers=2, clusters=2, capacity=4, horizon=7, warmup=2, max_skip=1,
                       periods=(1, 2), phases=(0, 1))
"""THROTTLED with worker 1 updating every other slot from slot 1: sends only in its update
slots, and its skip runs count updates (one skipped update = two slots without a send)."""
WINDOWED = Deployment(workers=2, clusters=1, capacity=10, horizon=6, warmup=2)
"""One cluster, one slot of ten used: an ACK (util 25) leaves P_s = 1 for exactly one slot
(P_s = 1.02 at 10 ms, 0.98 at 20 ms), so a worker is forced to send the next update."""


# -- the reference side ------------------------------------------------------------------

def fresh_queue(dep: Deployment) -> OlafQueue:
    # The reference's ACK feedback revision follows the deployment's (when it has the
    # setting; before it, every ACK was revision 2's).
    extra = ({"feedback": dep.feedback} if "feedback" in QueueConfig.__dataclass_fields__
             else {})
    if dep.quota < dep.capacity:
        # Revision 3's room_c reads the quota (in OLAF mode it never refuses here).
        extra["cluster_quota"] = dep.quota
    return OlafQueue(QueueConfig(
        capacity=dep.capacity, values=VALUES, max_clusters=dep.clusters, max_blocks=1,
        mode=Mode.OLAF if dep.mode == "olaf" else Mode.FIFO, threshold=INT32_MAX, **extra))


def run_slot(dep: Deployment, queue: OlafQueue, order: list[int | None],
             t: int) -> list[tuple[Any, int]]:
    """Feed one slot's messages (worker id, or None for a PULL) to ``queue`` one at a
    time; returns (response header, occupancy after) per message."""
    out = []
    for m in order:
        raw = (datagram(dep, MsgType.PULL) if m is None else
               datagram(dep, MsgType.UPDATE, m, dep.cluster_of(m), t))
        responses, _, _ = queue.process(decode([raw], VALUES))
        out.append((responses.headers[0], queue.occupied))
    return out


def credited_by(dep: Deployment, header: Any) -> list[int]:
    bitmap = int(header["contributors"])
    return [u for u in dep.members(int(header["cluster_id"]))
            if bitmap >> (u % CONTRIBUTOR_BITS) & 1]


def reference_trace(dep: Deployment, rng: random.Random, skip_chance: float = 0.5) -> Trace:
    """A random behaviour of the real queue: workers skip only where DESIGN.md §4 gives
    P_s < 1 (and within ``max_skip``), messages of a slot arrive in a random order."""
    queue = fresh_queue(dep)
    n = dep.workers
    last_ack: list[tuple[int, int, int] | None] = [None] * n
    run = [0] * n
    last_credit = [0] * n
    slots = []
    for t in range(dep.horizon):
        senders, skipped = [], []
        for u in range(n):
            if not dep.has_update(u, t):
                continue  # nothing to send; the skip run goes on
            free = t > 0 and dep.sender == "olaf" and may_skip(dep, last_ack[u], t)
            if dep.max_skip is not None and run[u] >= dep.max_skip:
                free = False
            if free and rng.random() < skip_chance:
                skipped.append(u)
                run[u] += 1
            else:
                senders.append(u)
                run[u] = 0
        order: list[int | None] = [*senders, *[None] * dep.pulls_in_slot(t)]
        rng.shuffle(order)
        events = []
        for m, (h, occ) in zip(order, run_slot(dep, queue, order, t), strict=True):
            if m is not None:
                last_ack[m] = (t, int(h["queue_util"]), int(h["active_clusters"]))
                events.append(Event("update", occ, worker=m, cluster=dep.cluster_of(m),
                                    outcome=Outcome(int(h["outcome"])).name))
            elif int(h["msg_type"]) == MsgType.DATA:
                credited = credited_by(dep, h)
                for u in credited:
                    last_credit[u] = t
                events.append(Event("pull", occ, cluster=int(h["cluster_id"]), response="DATA",
                                    contributors=credited, credited=credited))
            else:
                events.append(Event("pull", occ, response="EMPTY"))
        aom = [t - last_credit[u] for u in range(n)]
        idle = [u for u in range(n) if not dep.has_update(u, t)]
        slots.append(Slot(t, events, skipped, queue.occupied, aom, min(aom), idle))
    return Trace("fairness", dep.horizon - 1, 0, "", slots)


# -- the model side ----------------------------------------------------------------------

def model_accepts(dep: Deployment, trace: Trace, engine: str) -> bool:
    """Does the model (symmetry breaking off: it prunes relabelled twins) have a
    behaviour with exactly this trace's messages, outcomes, occupancies, credits, skips
    and AoM?"""
    opt = Options(engine=engine, symmetry_breaking=False)
    m: AomModel = SegmentModel(dep, "fairness", opt) if engine == "segments" \
        else AomModel(dep, "fairness", opt)
    s = m.solver
    for sl in trace.slots:
        t = sl.slot
        m.add_slot(t)
        for u in range(dep.workers):
            s.add(m.skipped[t][u] == (u in sl.skipped))
            s.add(m.aom[t][u] == min(sl.aom[u], m.aom_cap))
        if engine == "segments":
            _pin_segments(m, sl, t)
            continue
        steps = m.steps[t]
        for j, step in enumerate(steps):
            if j >= len(sl.events):
                s.add(step.ev == m.IDLE)
                continue
            e = sl.events[j]
            s.add(step.occ == e.occupied)
            if e.kind == "update":
                s.add(step.ev == e.worker, step.code == Outcome[e.outcome].value)
            else:
                s.add(step.ev == m.PULL,
                      step.code == (CODE_DATA if e.response == "DATA" else CODE_EMPTY))
                if e.response == "DATA":
                    s.add(*[step.credit[u] == (u in e.credited) for u in range(dep.workers)])
    return s.check() == z3.sat


def _pin_segments(m: SegmentModel, sl: Slot, t: int) -> None:
    s = m.solver
    rec = m.segs[t]
    seg_of: dict[int, int] = {}
    pulls = 0
    pull_events = []
    for e in sl.events:
        if e.kind == "update":
            seg_of[e.worker] = pulls  # type: ignore[index]
        else:
            pulls += 1
            pull_events.append(e)
    if len(rec["segments"]) > 1:
        for u, i in seg_of.items():
            s.add(rec["seg"][u] == i)
    for seg, e in zip(rec["segments"], pull_events, strict=False):
        s.add(seg["occ_after_pull"] == e.occupied)
        if e.response == "DATA":
            s.add(*[seg["credit"][u] == (u in e.credited) for u in range(len(seg["credit"]))])
    s.add(rec["segments"][-1]["occ"] == sl.occupied)


def model_solutions_replay(dep: Deployment, engine: str, some_skip: bool = True) -> None:
    """For every (slot, worker): ask the model for a behaviour in which that worker
    skips; each one found must replay on the reference queue with the §4 rule.
    ``some_skip``: the deployment does allow skips (else the check would see nothing)."""
    opt = Options(engine=engine)
    found = 0
    for t in range(1, dep.horizon):
        for u in range(dep.workers):
            m = SegmentModel(dep, "fairness", opt) if engine == "segments" \
                else AomModel(dep, "fairness", opt)
            for k in range(dep.horizon):
                m.add_slot(k)
            m.solver.add(m.skipped[t][u])
            if m.solver.check() != z3.sat:
                continue
            found += 1
            trace = m.extract(m.solver.model(), dep.horizon - 1)
            report = replay(dep, trace, expect_violation=False)
            assert report.ok, (t, u, report.mismatches)
    assert found or not some_skip, "the model never lets a worker skip: the check saw nothing"


# -- brute force over the reference --------------------------------------------------------

def _queue_key(q: OlafQueue) -> tuple:
    cap = q.config.capacity
    slots = q.slots
    ring = tuple(tuple(slots[f][(q.read_ptr + i) % cap] for f in
                       ("cluster_id", "worker_id", "agg_count", "contributors", "reward"))
                 for i in range(q.occupied))
    index = tuple(-1 if x < 0 else (x - q.read_ptr) % cap for x in q.index)
    return ring, index


def brute_force(dep: Deployment, prop: str) -> tuple[Fraction, int]:
    """The worst value over all behaviours of the reference queue and §4 workers of
    fairness' deviation ``max_u |AoM_u - mean|`` or responsiveness' AoM of a worker
    that keeps sending, over slots warmup..T-1, and the first slot it is reached."""
    n = dep.workers
    # state: queue, AoM, (slots since ACK, util, active) per worker, skip runs, keeps-sending
    start = (fresh_queue(dep), (0,) * n, (None,) * n, (0,) * n, (True,) * n)
    # Time-free datagrams (seq, gen_time 0) so that states can be compared across slots.
    raws: dict[int | None, bytes] = {u: datagram(dep, MsgType.UPDATE, u, dep.cluster_of(u))
                                     for u in range(n)}
    raws[None] = datagram(dep, MsgType.PULL)
    frontier = {("init",): start}
    worst, first = Fraction(-1), -1
    for t in range(dep.horizon):
        nxt: dict[tuple, tuple] = {}
        for queue, aom, acks, runs, keeps in frontier.values():
            frozen = pickle.dumps(queue)
            fresh = [u for u in range(n) if dep.has_update(u, t)]
            optional = [u for u in fresh if t > 0 and dep.sender == "olaf"
                        and may_skip(dep, acks[u], t)]
            for skip_set in _subsets(optional):
                # Skip runs count fresh updates: a slot without one leaves the run as it is.
                new_runs = tuple(runs[u] + 1 if u in skip_set else 0 if u in fresh else runs[u]
                                 for u in range(n))
                new_keeps = tuple(keeps[u] and (dep.max_skip is None or
                                                new_runs[u] <= dep.max_skip) for u in range(n))
                if prop == "fairness" and not all(new_keeps):
                    continue
                senders = [u for u in fresh if u not in skip_set]
                msgs = [*senders, *[None] * dep.pulls_in_slot(t)]
                for order in set(itertools.permutations(msgs)):
                    q = pickle.loads(frozen)
                    got = [False] * n
                    new_acks = list(acks)
                    responses, _, _ = q.process(decode([raws[m] for m in order], VALUES))
                    for m, h in zip(order, responses.headers, strict=True):
                        if m is not None:
                            new_acks[m] = (t, int(h["queue_util"]), int(h["active_clusters"]))
                        elif int(h["msg_type"]) == MsgType.DATA:
                            for u in credited_by(dep, h):
                                got[u] = True
                    new_aom = tuple(0 if t == 0 or got[u] else aom[u] + 1 for u in range(n))
                    if t >= dep.warmup:
                        value = _metric(dep, prop, new_aom, new_keeps)
                        if value > worst:
                            worst, first = value, t
                    rel = tuple(None if a is None else (t - a[0], a[1], a[2]) for a in new_acks)
                    key = (_queue_key(q), new_aom, rel, new_runs, new_keeps)
                    if key not in nxt:
                        nxt[key] = (q, new_aom, tuple(new_acks), new_runs, new_keeps)
        frontier = nxt
    return worst, first


def _subsets(items: list[int]) -> list[set[int]]:
    return [set(c) for k in range(len(items) + 1) for c in itertools.combinations(items, k)]


def _metric(dep: Deployment, prop: str, aom: tuple[int, ...], keeps: tuple[bool, ...]) -> Fraction:
    if prop == "fairness":
        mean = Fraction(sum(aom), len(aom))
        return max(abs(a - mean) for a in aom)
    kept = [a for a, k in zip(aom, keeps, strict=True) if k]
    return Fraction(max(kept)) if kept else Fraction(-1)


def pinned_bound(dep: Deployment, prop: str, worst: Fraction, first: int,
                 engine: str = "auto") -> None:
    """The model verifies the brute-force worst case as a bound and refutes anything
    below it, first at the same slot, with a counterexample that replays."""
    n = dep.workers
    if prop == "fairness":
        at, below = {"fairness_threshold": worst}, {"fairness_threshold": worst - Fraction(1, 2 * n)}
    else:
        at, below = {"aom_bound": int(worst)}, {"aom_bound": int(worst) - 1}
    opt = Options(engine=engine)
    ok = check_property(Deployment(**{**dep.as_dict(), **at}), prop, 240, opt)
    assert ok.status == "VERIFIED", (prop, worst, ok.reason)
    tight = Deployment(**{**dep.as_dict(), **below})
    bad = check_property(tight, prop, 240, opt)
    assert bad.status == "VIOLATED", (prop, worst, bad.reason)
    assert bad.trace is not None and bad.trace.violation_slot == first, (bad.reason, first)
    report = replay(tight, bad.trace)
    assert report.ok, report.mismatches


# -- the checks (each also a killer of some mutant below) -----------------------------------

def check_reference_accepted(dep: Deployment, engine: str, runs: int = 6) -> None:
    rng = random.Random(19)
    for k in range(runs):
        trace = reference_trace(dep, rng)
        assert model_accepts(dep, trace, engine), f"run {k}: the model rejects a real behaviour"


BRUTE: dict[tuple[str, str], tuple[Fraction, int]] = {}


def brute(name: str, prop: str) -> tuple[Fraction, int]:
    key = (name, prop)
    if key not in BRUTE:
        BRUTE[key] = brute_force(DEPLOYMENTS[name], prop)
    return BRUTE[key]


DEPLOYMENTS = {"throttled": THROTTLED, "ring": RING, "fifo": FIFO, "staggered": STAGGERED}

PINNED = [("throttled", "fairness"), ("throttled", "responsiveness"), ("ring", "fairness"),
          ("fifo", "fairness"), ("staggered", "fairness"), ("staggered", "responsiveness")]


def check_pinned(name: str, prop: str) -> None:
    worst, first = brute(name, prop)
    pinned_bound(DEPLOYMENTS[name], prop, worst, first)


@pytest.mark.parametrize(("dep", "engine"),
                         [(THROTTLED, "segments"), (THROTTLED, "explicit"), (RING, "segments"),
                          (RING, "explicit"), (FIFO, "explicit"), (WINDOWED, "segments"),
                          (STAGGERED, "explicit")],
                         ids=["throttled-seg", "throttled-exp", "ring-seg", "ring-exp", "fifo",
                              "windowed", "staggered"])
def test_reference_behaviours_are_model_behaviours(dep: Deployment, engine: str) -> None:
    check_reference_accepted(dep, engine)


@pytest.mark.parametrize(("dep", "engine"), [(THROTTLED, "segments"), (RING, "explicit"),
                                             (STAGGERED, "explicit")],
                         ids=["throttled", "ring", "staggered"])
def test_model_behaviours_are_reference_behaviours(dep: Deployment, engine: str) -> None:
    model_solutions_replay(dep, engine)


def test_forced_sends_hold_in_the_model() -> None:
    """Every ACK of WINDOWED leaves P_s = 1 for the next slot and each send renews it, so
    no behaviour of the model has a skip."""
    model_solutions_replay(WINDOWED, "segments", some_skip=False)


@pytest.mark.parametrize(("name", "prop"), PINNED, ids=[f"{n}-{p}" for n, p in PINNED])
def test_tight_bounds_match_brute_force(name: str, prop: str) -> None:
    check_pinned(name, prop)


def test_fifo_deployment_violates_only_at_its_last_slot() -> None:
    """The pinned FIFO case reaches its worst deviation only at the horizon's last slot,
    so a model that skipped the last slot would verify a bound that is false."""
    worst, first = brute("fifo", "fairness")
    assert first == FIFO.horizon - 1
    earlier = brute_force(Deployment(**{**FIFO.as_dict(), "horizon": FIFO.horizon - 1}),
                          "fairness")[0]
    assert earlier < worst


def test_verified_needs_a_satisfiable_model() -> None:
    """The built-in vacuity check: constraints that admit no behaviour never VERIFY."""
    m = AomModel(THROTTLED, "fairness")
    m.solver.add(z3.BoolVal(False))
    result = m.check(60)
    assert result.status == "UNKNOWN" and "vacuous" in result.reason


def test_replay_checks_skip_runs_of_every_worker() -> None:
    """A fairness trace in which a worker other than the reported one skips more than
    max_skip slots in a row breaks an assumption: the replay says so."""
    loose = Deployment(workers=3, clusters=2, capacity=4, horizon=7, warmup=2, max_skip=None)
    rng = random.Random(7)
    for _ in range(200):
        trace = reference_trace(loose, rng, skip_chance=0.7)
        runs = [_runs(trace, u) for u in range(loose.workers)]
        aom = trace.slots[-1].aom
        mean = Fraction(sum(aom), len(aom))
        deviation = max(abs(a - mean) for a in aom)
        if max(runs) >= 2 and min(runs) <= 1 and deviation > 0:
            break
    else:
        pytest.fail("no suitable random trace")
    trace.violation_worker = runs.index(min(runs))
    threshold = deviation - Fraction(1, 2 * loose.workers)
    assert replay(Deployment(**{**loose.as_dict(), "fairness_threshold": threshold}), trace).ok
    strict = Deployment(**{**loose.as_dict(), "fairness_threshold": threshold, "max_skip": 1})
    report = replay(strict, trace)
    culprit = runs.index(max(runs))
    assert any(f"worker {culprit} skipped" in m and "does not keep sending" in m
               for m in report.mismatches), report.mismatches


def _runs(trace: Trace, u: int) -> int:
    best = cur = 0
    for s in trace.slots:
        cur = cur + 1 if u in s.skipped else 0
        best = max(best, cur)
    return best


# -- mutants --------------------------------------------------------------------------------

def _patch(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, old: str, new: str) -> None:
    """Replace ``owner.name`` (a function or method) by its source with ``old`` -> ``new``."""
    func = getattr(owner, name)
    source = textwrap.dedent(inspect.getsource(func))
    assert source.count(old) == 1, f"mutation site not found in {name}: {old!r}"
    module = inspect.getmodule(func)
    namespace = dict(vars(module))
    exec(compile(source.replace(old, new), f"<mutant {name}>", "exec"), namespace)  # noqa: S102
    monkeypatch.setattr(owner, name, namespace[name])


MUTANTS: list[tuple[str, Any, str, str, str, Callable[[], None]]] = [
    ("ack-feedback-before-operation", SegmentModel, "_feedback",
     "self.occ + lv", "self.occ",
     lambda: check_reference_accepted(RING, "segments")),
    ("explicit-ack-feedback-before-operation", AomModel, "add_slot",
     "        step = self._message(t, j, evs[j], is_w[j], received)\n"
     "        steps.append(step)\n"
     "        if not self.always_forced:\n",
     "        if not self.always_forced:\n"
     "            windows.append(self._window_of(self.occ, self._active()))\n"
     "        step = self._message(t, j, evs[j], is_w[j], received)\n"
     "        steps.append(step)\n"
     "        if False:\n",
     lambda: check_reference_accepted(RING, "explicit")),
    ("forced-window-one-slot-shorter", sending, "forced_window",
     "        window = gap\n", "        window = gap - 1\n",
     lambda: model_solutions_replay(WINDOWED, "segments", some_skip=False)),
    ("max-skip-plus-one", AomModel, "_transmission",
     "z3.UGT(gap, dep.max_skip * dep.period(u))", "z3.UGT(gap, (dep.max_skip + 1) * dep.period(u))",
     lambda: check_pinned("throttled", "fairness")),
    ("skip-runs-counted-in-slots", AomModel, "_transmission",
     "z3.UGT(gap, dep.max_skip * dep.period(u))", "z3.UGT(gap, dep.max_skip)",
     lambda: check_reference_accepted(STAGGERED, "explicit")),
    ("idle-workers-may-send", AomModel, "add_slot",
     "fresh = [dep.has_update(u, t) for u in range(n)]", "fresh = [True] * n",
     lambda: check_pinned("staggered", "responsiveness")),
    ("unbeaten-target-not-protected", AomModel, "_olaf_message",
     'if dep.rewards == "unbeaten" and self.target is not None:', "if False:",
     lambda: _unbeaten_verifies()),
    ("fairness-one-side-only", AomModel, "deviates",
     "far.append(z3.ULT(total, n * x - limit))", "pass",
     lambda: _fairness_both_sides()),
    ("last-slot-not-checked", AomModel, "check",
     "if t < first:", "if t < first or t == dep.horizon - 1:",
     lambda: check_pinned("fifo", "fairness")),
    ("segments-admission-comparison", AomModel, "_admit",
     "room = z3.ULT(occ_w", "room = z3.ULE(occ_w",
     lambda: check_reference_accepted(RING, "segments")),
    ("probe-gap-one-later", sending, "probe_gap",
     "math.ceil(dep.feedback_ttl_ms / dep.slot_ms) + 1",
     "math.ceil(dep.feedback_ttl_ms / dep.slot_ms) + 2",
     lambda: _starvation_pinned()),
    ("replay-skips-target-only", replay_module, "_check_violation",
     "(range(n) if trace.prop == \"fairness\" else [u])", "[u]",
     test_replay_checks_skip_runs_of_every_worker),
    ("reward-concretisation-comparison", replay_module, "realize_rewards",
     "s.add(old - r >= theta)", "s.add(r - old >= theta)",
     lambda: _realised_rewards_replay()),
]


def _unbeaten_verifies() -> None:
    """One cluster of three, any rewards: a worker's AoM reaches 3 (its update dropped or its
    slot replaced); never out-rewarded, the explicit encoding proves AoM <= 2."""
    dep = Deployment(workers=3, clusters=1, horizon=6, warmup=2, aom_bound=2,
                     rewards="unbeaten")
    result = check_property(dep, "responsiveness", 120, Options(engine="explicit"))
    assert result.status == "VERIFIED", result.reason


def _fairness_both_sides() -> None:
    """The fairness formula flags a worker far above the mean and one far below it,
    and nothing within the threshold (N = 3, threshold 1)."""
    dep = Deployment(workers=3, clusters=1, horizon=8, warmup=0, sender="always",
                     fairness_threshold=Fraction(1))
    m = AomModel(dep, "fairness", Options(engine="explicit"), aom_cap=8)
    for vec, expected in (([0, 0, 2], True), ([2, 2, 0], True), ([1, 1, 0], False),
                          ([0, 0, 4], True), ([3, 3, 1], True), ([2, 1, 1], False)):
        aom = [z3.BitVecVal(a, m.wA) for a in vec]
        total = z3.BitVecVal(sum(vec), m.wF)
        verdict = z3.is_true(z3.simplify(m.deviates(aom, total)))
        assert verdict == expected, (vec, verdict)


def test_fairness_formula_checks_both_sides() -> None:
    _fairness_both_sides()


def _starvation_pinned() -> None:
    """Silence is bounded by exactly ceil(ttl/slot) slots: bound 10 holds, 9 does not."""
    dep = Deployment(workers=2, clusters=2, capacity=2, horizon=14, warmup=2)
    assert check_property(dep, "starvation", 120).status == "VERIFIED"
    tight = Deployment(**{**dep.as_dict(), "starvation_bound": 9})
    bad = check_property(tight, "starvation", 120)
    assert bad.status == "VIOLATED" and bad.trace is not None
    assert replay(tight, bad.trace).ok


def _realised_rewards_replay() -> None:
    """Concrete rewards found for a chain of reward decisions (merge, replace by a higher
    reward, drop a lower one) make the reference queue take exactly those decisions."""
    dep = Deployment(workers=4, clusters=1, capacity=2, horizon=3, warmup=0, rewards="any",
                     sender="always", pull_rate=Fraction(1, 2))  # no PULL in slot 0
    ev = [Event("update", 1, worker=0, cluster=0, outcome="ENQUEUED"),
          Event("update", 1, worker=1, cluster=0, outcome="MERGED", merge_choice="MERGED"),
          Event("update", 1, worker=2, cluster=0, outcome="REPLACED", merge_choice="REPLACED"),
          Event("update", 1, worker=3, cluster=0, outcome="DROPPED_REWARD",
                merge_choice="DROPPED_REWARD")]
    trace = Trace("responsiveness", 0, 0, "", [Slot(0, ev, [], 1, [0] * 4, 0)])
    assert replay_module.realize_rewards(trace)
    report = replay(dep, trace, expect_violation=False)
    assert report.ok, report.mismatches


def test_realised_rewards_take_the_traces_decisions() -> None:
    _realised_rewards_replay()


@pytest.mark.parametrize(("name", "owner", "attr", "old", "new", "killer"), MUTANTS,
                         ids=[m[0] for m in MUTANTS])
def test_mutant_is_killed(name: str, owner: Any, attr: str, old: str, new: str,
                          killer: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    # BRUTE (the brute force's cache) is of the reference queue: no mutant touches it.
    killer()  # passes on the real code
    _patch(monkeypatch, owner, attr, old, new)
    if owner is sending:
        # model.py and check.py bound the name at import: patch their copies too.
        for mod in (model_module,):
            if hasattr(mod, attr):
                monkeypatch.setattr(mod, attr, getattr(sending, attr))
    with pytest.raises(AssertionError):
        killer()
