"""Run a counterexample through the reference OlafQueue and check it reproduces.

The model and ``dataplane.queue.OlafQueue`` must not drift apart: every trace the
solver produces is turned into real UPDATE and PULL datagrams (built with the batch
codec, encoded to bytes and decoded again, as the switch receives them) and fed to
the reference queue one message at a time. The replay checks each ACK's outcome,
the occupancy after every message, each DATA's cluster and contributors and the
workers the PS credits, AoM per worker at the end of every slot, that every skipped
send had ``P_s < 1`` (DESIGN.md §4, from the feedback of the ACKs the queue actually
sent) at some instant of its slot, every assumption the property rests on (skip runs
of the workers that keep sending, no send without a fresh update under per-worker
periods, no out-rewarded worker under ``rewards=unbeaten``), and that the property
really fails where the trace says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import z3

from dataplane.queue import OlafQueue, QueueConfig
from verification.config import CONTRIBUTOR_BITS, ISOLATION, Deployment
from verification.sending import L_MIN, ack_util, probability, slot_us
from verification.trace import Event, Trace
from worker_transport.codec import Batch, decode, encode
from worker_transport.protocol import (
    DEFAULT_FRAC_BITS,
    INT32_MAX,
    INT32_MIN,
    VERSION,
    Mode,
    MsgType,
    Outcome,
)

VALUES = 4
"""V used for the replay: the rules never look at the values, so a short block will do."""


@dataclass
class ReplayReport:
    messages: int = 0
    mismatches: list[str] = field(default_factory=list)
    skipped: str | None = None
    """Why the trace could not be replayed (the reference lacks a setting it needs);
    neither a confirmation nor a disagreement."""
    checked: str = "outcomes, occupancy, DATA contents, AoM, P_s and the violation match"
    """What the replay compared, as the summary names it."""

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.skipped is None

    def summary(self) -> str:
        if self.skipped is not None:
            return f"skipped: {self.skipped}"
        if self.ok:
            return f"reproduced by the reference OlafQueue ({self.messages} messages: {self.checked})"
        more = f" (+{len(self.mismatches) - 1} more)" if len(self.mismatches) > 1 else ""
        return f"NOT reproduced by the reference OlafQueue: {self.mismatches[0]}{more}"


def datagram(dep: Deployment, msg_type: MsgType, worker: int = 0, cluster: int = 0,
            slot: int = 0, reward: int = 0) -> bytes:
    batch = Batch.zeros(1, VALUES)
    h = batch.headers
    h["version"] = VERSION
    h["msg_type"] = msg_type
    h["frac_bits"] = DEFAULT_FRAC_BITS
    if msg_type == MsgType.UPDATE:
        h["cluster_id"] = cluster
        h["worker_id"] = worker
        h["block_id"] = 0
        h["agg_count"] = 1
        h["num_values"] = VALUES
        h["seq"] = slot
        h["model_version"] = slot
        h["reward"] = reward
        h["gen_time_us"] = (slot * slot_us(dep)) & 0xFFFFFFFF
        h["contributors"] = 1 << (worker % CONTRIBUTOR_BITS)
        batch.values[0] = worker + 1
    return encode(batch)[0]


def may_skip(dep: Deployment, ack: tuple[int, int, int] | None, t: int,
             level: float = 1.0) -> bool:
    """Could the worker skip its update of slot ``t``, given its last ACK ``(slot,
    queue_util, active_clusters)``? The decision falls at the start of slot ``t`` and the
    ACK came back at some instant of its slot, so the feedback is between
    ``(t - slot - 1) * slot_ms`` and ``(t - slot) * slot_ms`` old: the skip is allowed
    when ``P_s < 1`` anywhere in that range (sampled at its ends, just inside them, and
    at the expiry instant, where ``P_s`` changes shape). ``level`` ``L_MIN``: could the
    decision have ``P_s < L_min`` (revision 3's starvation; the ceiling is at least
    ``L_min``, so only the feedback term decides)."""
    if ack is None:
        return False
    ack_slot, util, active = ack
    hi = (t - ack_slot) * dep.slot_ms
    lo = hi - dep.slot_ms
    tiny = 1e-3
    samples = [hi, lo + tiny, min(max(dep.feedback_ttl_ms, lo + tiny), hi)]
    return any(probability(dep, util, active, d) < level for d in samples)


def replay(dep: Deployment, trace: Trace, expect_violation: bool = True) -> ReplayReport:
    """Feed ``trace`` to a fresh reference queue configured like ``dep``. With
    ``expect_violation`` False only the behaviour is compared (any model solution,
    not only counterexamples, must be a behaviour of the real queue and workers)."""
    if trace.prop == ISOLATION:
        # isolation_replay builds on this module's ReplayReport: imported here, not at the top.
        from verification.isolation_replay import replay_isolation

        return replay_isolation(dep, trace)
    threshold = INT32_MAX if trace.reward_threshold is None else trace.reward_threshold
    # A quota below capacity cannot bind here (OLAF mode, one block: one slot per cluster;
    # FIFO mode with a quota is refused outside isolation), but the reference gets it when
    # it knows the setting, so that the replay runs the configured queue.
    extra = ({"cluster_quota": dep.quota}
             if dep.quota < dep.capacity and "cluster_quota" in QueueConfig.__dataclass_fields__
             else {})
    # Revision 3's ACKs: from the reference when it has the setting, and then checked
    # against the model's own formula (sending.ack_util) on every ACK; without it the
    # formula computes them from the reference's occupancy and per-cluster count.
    native = "feedback" in QueueConfig.__dataclass_fields__
    if native:
        extra["feedback"] = dep.feedback
    queue = OlafQueue(QueueConfig(
        capacity=dep.capacity, values=VALUES, max_clusters=max(dep.clusters, 1), max_blocks=1,
        mode=Mode.OLAF if dep.mode == "olaf" else Mode.FIFO, threshold=threshold, **extra,
    ))
    report = ReplayReport()
    if dep.feedback == 3 and not native:
        report.checked += " (revision 3 ACK feedback from the model's formula: the reference " \
                          "queue has no feedback setting)"
    starv3 = trace.prop == "starvation" and dep.feedback == 3
    bad = report.mismatches.append
    n = dep.workers
    low_run = [0] * n
    """Revision 3's starvation: consecutive fresh updates decided with P_s < L_min at some
    instant of their slot."""
    last_ack: list[tuple[int, int, int] | None] = [None] * n
    skip_run = [0] * n
    max_run = [0] * n
    silent_run = [0] * n
    """Consecutive skipped slots that began with room in the queue (starvation)."""
    max_silent = [0] * n
    received = [0] * n
    aom: list[int] = [0] * n
    pulled = 0
    unbeaten = _unbeaten_workers(dep, trace) if expect_violation else set()
    for s in trace.slots:
        t = s.slot
        room = queue.occupied < dep.capacity
        pulled += sum(1 for e in s.events if e.kind == "pull")
        if abs(pulled - dep.pulled_by(t)) > dep.pull_jitter:
            bad(f"slot {t}: {pulled} PULLs so far, the schedule allows "
                f"{dep.pulled_by(t)} ± {dep.pull_jitter}")
        senders = [e.worker for e in s.events if e.kind == "update"]
        if sorted(senders) != sorted(set(senders)):
            bad(f"slot {t}: a worker sends twice")
        if any(u in senders for u in s.skipped):
            bad(f"slot {t}: a worker both sends and skips")
        idle = [u for u in range(n) if not dep.has_update(u, t)]
        if sorted(s.idle) != idle:
            bad(f"slot {t}: workers {idle} have no fresh update, the trace says {sorted(s.idle)}")
        for u in range(n):
            if u in idle:
                # Nothing to send: neither a send nor a skip, and the runs go on.
                if u in senders or u in s.skipped:
                    bad(f"slot {t}: worker {u} sends or skips without a fresh update (period "
                        f"{dep.period(u)}, phase {dep.phase(u)})")
                continue
            if starv3:
                low = dep.sender != "always" and may_skip(dep, last_ack[u], t, L_MIN)
                low_run[u] = low_run[u] + 1 if low else 0
            if u in senders:
                skip_run[u] = silent_run[u] = 0
                continue
            if u not in s.skipped:
                bad(f"slot {t}: worker {u} neither sends nor skips")
            # Revision 3's starvation lets any UPDATE be lost before the switch: a "skip"
            # there may be a lost UPDATE, sent at any P_s.
            if not starv3 and (dep.sender == "always" or not may_skip(dep, last_ack[u], t)):
                bad(f"slot {t}: worker {u} skipped although its P_s = 1")
            skip_run[u] += 1
            max_run[u] = max(max_run[u], skip_run[u])
            silent_run[u] = silent_run[u] + 1 if room else 0
            max_silent[u] = max(max_silent[u], silent_run[u])
        for e in s.events:
            report.messages += 1
            if e.kind == "update":
                raw = datagram(dep, MsgType.UPDATE, e.worker, dep.cluster_of(e.worker), t,
                              e.reward or 0)
            else:
                raw = datagram(dep, MsgType.PULL)
            met = _slot_met(queue, dep, e) if unbeaten and e.kind == "update" else None
            responses, _, _ = queue.process(decode([raw], VALUES))
            if len(responses) != 1:
                bad(f"slot {t}: {e.kind} got {len(responses)} responses")
                continue
            r = responses.headers[0]
            where = f"slot {t}, {e.kind}" + (f" of worker {e.worker}" if e.worker is not None
                                              else "")
            if e.kind == "update":
                got = Outcome(int(r["outcome"])).name
                if int(r["msg_type"]) != MsgType.ACK or got != e.outcome:
                    bad(f"{where}: queue says {got}, trace says {e.outcome}")
                util = int(r["queue_util"])
                if dep.feedback == 3:
                    held = queue.cluster_count[dep.cluster_of(e.worker)]
                    mine = ack_util(dep, queue.occupied, held)
                    if native and util != mine:
                        bad(f"{where}: ACK queue_util {util}, revision 3's room_c gives {mine}")
                    util = mine
                last_ack[e.worker] = (t, util, int(r["active_clusters"]))
                if met is not None:
                    _check_unbeaten(dep, e.worker, got, met, unbeaten, where, bad)
            else:
                kind = MsgType(int(r["msg_type"])).name
                if kind != e.response:
                    bad(f"{where}: queue answers {kind}, trace says {e.response}")
                elif kind == "DATA":
                    cluster = int(r["cluster_id"])
                    bitmap = int(r["contributors"])
                    credited = [u for u in dep.members(cluster)
                                if bitmap >> (u % CONTRIBUTOR_BITS) & 1]
                    if cluster != e.cluster or credited != sorted(e.credited):
                        bad(f"{where}: DATA of cluster {cluster} credits {credited}, trace says "
                            f"cluster {e.cluster} credits {sorted(e.credited)}")
                    for u in credited:
                        received[u] = t
            if queue.occupied != e.occupied:
                bad(f"{where}: occupancy {queue.occupied}, trace says {e.occupied}")
        aom = [t - received[u] for u in range(n)]
        if aom != s.aom:
            bad(f"slot {t}: AoM {aom}, trace says {s.aom}")
        if queue.occupied != s.occupied:
            bad(f"slot {t}: occupancy {queue.occupied} at the end, trace says {s.occupied}")
    if not trace.slots:
        bad("the trace is empty")
    elif expect_violation:
        _check_violation(dep, trace, aom, max_run, low_run if starv3 else silent_run, report)
    return report


def _unbeaten_workers(dep: Deployment, trace: Trace) -> set[int]:
    """The workers ``rewards=unbeaten`` says are never out-rewarded, for this trace's
    property (none when the assumption is not made or cannot matter)."""
    if dep.rewards != "unbeaten" or dep.mode != "olaf" or trace.prop == "starvation":
        return set()
    return set(range(dep.workers)) if trace.prop == "fairness" else {trace.violation_worker}


def _slot_met(queue: OlafQueue, dep: Deployment, e: Event) -> tuple[int, int, int] | None:
    """(worker, agg_count, contributors) of the queued slot the UPDATE ``e`` will meet, or
    None when its cluster has none."""
    s = queue.index[dep.cluster_of(e.worker)]  # one block: the key is the cluster
    if s < 0:
        return None
    slots = queue.slots
    return slots["worker_id"][s], slots["agg_count"][s], slots["contributors"][s]


def _check_unbeaten(dep: Deployment, worker: int, outcome: str, met: tuple[int, int, int],
                    unbeaten: set[int], where: str, bad: Any) -> None:
    """An unbeaten worker's update is never DROPPED_REWARD, and no other worker REPLACES
    (by reward, not its own single slot) a slot holding an unbeaten worker's bit."""
    owner, agg, contributors = met
    if outcome == "DROPPED_REWARD" and worker in unbeaten:
        bad(f"{where}: dropped for its reward, but worker {worker} is assumed never "
            "out-rewarded (rewards=unbeaten)")
    if outcome == "REPLACED" and not (agg == 1 and owner == worker):
        beaten = [v for v in sorted(unbeaten) if v != worker
                  and dep.cluster_of(v) == dep.cluster_of(worker)
                  and contributors >> (v % CONTRIBUTOR_BITS) & 1]
        if beaten:
            bad(f"{where}: replaced the slot holding worker {beaten[0]}'s contribution, but "
                f"worker {beaten[0]} is assumed never out-rewarded (rewards=unbeaten)")


def _check_violation(dep: Deployment, trace: Trace, aom: list[int], max_run: list[int],
                     silent_run: list[int], report: ReplayReport) -> None:
    """The property fails at the trace's last slot, and every assumption it rests on
    holds along the whole trace."""
    bad = report.mismatches.append
    n = dep.workers
    t = trace.violation_slot
    first = dep.starvation_limit + 1 if trace.prop == "starvation" else dep.warmup
    if trace.slots[-1].slot != t or t < first:
        bad(f"the trace does not end at its violation slot {t} (first checked slot {first})")
        return
    u = trace.violation_worker
    if trace.prop == "starvation":
        if silent_run[u] <= dep.starvation_limit and dep.feedback == 3:
            bad(f"worker {u} had {silent_run[u]} decisions in a row that may fall below "
                f"P_s = L_min at slot {t}, not more than {dep.starvation_limit}")
        elif silent_run[u] <= dep.starvation_limit:
            bad(f"worker {u} was silent with room for {silent_run[u]} slots at slot {t}, "
                f"not more than {dep.starvation_limit}")
        return
    keeps = [] if dep.max_skip is None else (range(n) if trace.prop == "fairness" else [u])
    for v in keeps:
        if max_run[v] > dep.max_skip:  # type: ignore[operator]
            bad(f"worker {v} skipped {max_run[v]} slots in a row: it does not keep sending "
                f"(assumed at most {dep.max_skip})")
    if trace.prop == "fairness":
        mean = Fraction(sum(aom), n)
        worst = max(abs(a - mean) for a in aom)
        if worst <= dep.fairness_threshold:
            bad(f"fairness holds in the replay at slot {t} (deviation {float(worst):g})")
        return
    if aom[u] <= dep.aom_bound:
        bad(f"worker {u} has AoM {aom[u]} <= {dep.aom_bound} in the replay at slot {t}")


def realize_rewards(trace: Trace) -> bool:
    """rewards=any: find int32 rewards and a threshold under which the queue takes
    exactly the trace's reward decisions; fill them in and return True, or return
    False when no rewards can (the abstraction let the solver pick an impossible mix)."""
    s = z3.Solver()
    theta = z3.Int("theta")
    s.add(theta >= 1, theta <= INT32_MAX)
    slot_reward: dict[int, z3.ArithRef] = {}
    rewards: list[tuple[object, z3.ArithRef]] = []
    for sl in trace.slots:
        for i, e in enumerate(sl.events):
            if e.kind == "pull":
                continue
            r = z3.Int(f"r_{sl.slot}_{i}")
            s.add(r >= INT32_MIN, r <= INT32_MAX)
            rewards.append((e, r))
            k = e.cluster
            old = slot_reward.get(k)
            if e.outcome == "ENQUEUED" or (e.outcome == "REPLACED" and e.merge_choice is None):
                slot_reward[k] = r
            elif e.outcome == "REPLACED":
                s.add(r - old >= theta)
                slot_reward[k] = r
            elif e.outcome == "MERGED":
                s.add(r - old < theta, old - r < theta)
                slot_reward[k] = z3.If(r > old, r, old)
            elif e.outcome == "DROPPED_REWARD":
                s.add(old - r >= theta)
    if s.check() != z3.sat:
        return False
    m = s.model()
    for e, r in rewards:
        e.reward = m.eval(r, model_completion=True).as_long()  # type: ignore[attr-defined]
    trace.reward_threshold = m.eval(theta, model_completion=True).as_long()
    return True
