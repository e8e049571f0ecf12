"""Isolation counterexamples on the reference queue: one job, feeding a trace of
``verification.isolation`` to ``dataplane.queue.OlafQueue`` and comparing what it answers
(``replay_isolation``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from dataplane.queue import OlafQueue, QueueConfig
from verification.config import Deployment
from verification.replay import VALUES, ReplayReport
from verification.trace import Trace
from worker_transport.codec import Batch, decode, encode
from worker_transport.protocol import DEFAULT_FRAC_BITS, VERSION, Mode, MsgType, Outcome


# -- replay on the reference queue --------------------------------------------------------
def quota_supported() -> bool:
    """The reference ``QueueConfig`` has ``cluster_quota`` (a guard from before it had it)."""
    return any(f.name == "cluster_quota" for f in fields(QueueConfig))


def _datagram(msg_type: MsgType, worker: int = 0, cluster: int = 0, block: int = 0,
              slot: int = 0) -> bytes:
    batch = Batch.zeros(1, VALUES)
    h = batch.headers
    h["version"] = VERSION
    h["msg_type"] = msg_type
    h["frac_bits"] = DEFAULT_FRAC_BITS
    if msg_type == MsgType.UPDATE:
        h["cluster_id"], h["worker_id"], h["block_id"] = cluster, worker, block
        h["agg_count"], h["num_values"], h["seq"] = 1, VALUES, slot
        h["contributors"] = 1 << (worker % 32)
    return encode(batch)[0]


def replay_isolation(dep: Deployment, trace: Trace) -> ReplayReport:
    """Feed an isolation counterexample to a fresh reference queue (capacity, mode and
    ``cluster_quota`` of ``dep``; blocks up to ``capacity``) one datagram at a time and
    compare every outcome, occupancy and DATA; check that every victim worker sent once in
    every slot, the PULL schedule, and that no victim UPDATE reached the queue in the last
    ``B`` slots. A quota below capacity needs the reference's ``cluster_quota``: without it
    the report says so (``skipped``) instead of replaying a different queue."""

    report = ReplayReport(checked="outcomes, occupancy, DATA clusters, the victim's sends, "
                                  "the PULL schedule and the violation match")
    bad = report.mismatches.append
    extra: dict[str, Any] = {}
    if dep.quota < dep.capacity:
        if not quota_supported():
            report.skipped = ("the reference dataplane.queue.QueueConfig has no cluster_quota "
                              "yet, so a trace with a quota below capacity cannot be replayed")
            return report
        extra["cluster_quota"] = dep.quota
    queue = OlafQueue(QueueConfig(capacity=dep.capacity, values=VALUES,
                                  max_clusters=dep.clusters, max_blocks=dep.capacity + 1,
                                  mode=Mode.OLAF if dep.mode == "olaf" else Mode.FIFO, **extra))
    victim = dep.cluster_of(trace.violation_worker)
    members = dep.members(victim)
    admitted = []
    for s in trace.slots:
        t = s.slot
        pulls = sum(1 for e in s.events if e.kind == "pull")
        if pulls != dep.pulls_in_slot(t):
            bad(f"slot {t}: {pulls} PULLs, the schedule says {dep.pulls_in_slot(t)}")
        senders = sorted(e.worker for e in s.events if e.kind == "update" and e.cluster == victim)
        if senders != members:
            bad(f"slot {t}: the victim's workers {members} must each send once, sent {senders}")
        got = False
        for e in s.events:
            report.messages += 1
            if e.kind == "update":
                if dep.cluster_of(e.worker) != e.cluster:
                    bad(f"slot {t}: worker {e.worker} is not in cluster {e.cluster}")
                raw = _datagram(MsgType.UPDATE, e.worker, e.cluster, e.block or 0, t)
            else:
                raw = _datagram(MsgType.PULL)
            responses, _, _ = queue.process(decode([raw], VALUES))
            r = responses.headers[0]
            where = f"slot {t}, {e.kind}" + (f" of worker {e.worker}" if e.worker is not None
                                              else "")
            if e.kind == "update":
                outcome = Outcome(int(r["outcome"])).name
                if outcome != e.outcome:
                    bad(f"{where}: queue says {outcome}, trace says {e.outcome}")
                if e.cluster == victim and outcome in ("ENQUEUED", "MERGED", "REPLACED"):
                    got = True
            else:
                kind = MsgType(int(r["msg_type"])).name
                if kind != e.response:
                    bad(f"{where}: queue answers {kind}, trace says {e.response}")
                elif kind == "DATA" and int(r["cluster_id"]) != e.cluster:
                    bad(f"{where}: DATA of cluster {int(r['cluster_id'])}, trace says {e.cluster}")
            if queue.occupied != e.occupied:
                bad(f"{where}: occupancy {queue.occupied}, trace says {e.occupied}")
        admitted.append(got)
    b, t = dep.isolation_bound, trace.violation_slot
    if not trace.slots or trace.slots[-1].slot != t or t < b - 1:
        bad(f"the trace does not end at its violation slot {t}")
    elif any(admitted[t - b + 1:]):
        bad(f"the victim got an UPDATE into the queue within slots {t - b + 1}..{t}")
    return report
