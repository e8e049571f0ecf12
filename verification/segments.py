"""The segment encoding: OLAF mode, no reward threshold, every send forced.

When ``P_s`` is 1 for every ACK the queue can produce (true whenever the capacity is
large against the clusters, e.g. the switch default of 64 slots), every worker sends
once per slot and the only freedom left is the order in which the messages of a slot
reach the switch. The ``P`` PULLs of slot ``t`` cut it into ``P + 1`` *segments*; the
explicit encoding (``model.AomModel``) picks a message for each of ``N + P``
positions, this one picks only

* ``seg_u``: the segment in which worker ``u``'s UPDATE arrives, and
* ``rank_k``: among clusters that had no queued slot and receive an UPDATE in the
  segment, the order of their first arrivals (their order in the ring).

This loses nothing: within a segment there is no PULL, so for a cluster with a
queued slot every UPDATE merges (or replaces the sender's own single update), which
leaves its contributors = old contributors + the segment's senders whatever their
order; a cluster without a slot is enqueued by its first UPDATE if the ring has room
when that cluster's turn comes (``occupied + rank < capacity``, since occupancy only
grows within a segment) and the rest merge, or else all of its UPDATEs are dropped
full. Conversely every (seg, rank) choice is realised by the order "first arrivals of
the admitted clusters by rank, then every other UPDATE by worker id"; the
counterexample uses that order, and the replay test runs it through the reference
queue. Workers of a cluster are interchangeable, so their ``seg`` sequences are
ordered lexicographically (symmetry breaking).
"""

from __future__ import annotations

from typing import Any

import z3

from verification.config import Deployment
from verification.model import AomModel, Options, bits
from verification.trace import Event
from worker_transport.protocol import Outcome


class SegmentModel(AomModel):
    """``AomModel`` with the per-slot order abstracted to segments (see module doc)."""

    ENGINE = "segments"

    def __init__(self, dep: Deployment, prop: str, options: Options | None = None,
                 aom_cap: int | None = None) -> None:
        if dep.mode != "olaf" or dep.rewards != "merge":
            raise ValueError("the segment encoding covers OLAF mode with rewards=merge only")
        super().__init__(dep, prop, options, aom_cap)
        if not self.always_forced:
            raise ValueError("the segment encoding needs P_s = 1 for every reachable ACK")
        self.wP = self.wO
        self.where = [self._const(0, self.wP) for _ in range(dep.clusters)]
        """Per cluster: index of its queued slot counted from the head of the ring."""
        self.wide = bits(dep.capacity + dep.clusters)
        self.segs: list[dict[str, Any]] = []
        self.lex_equal: list[Any] = []
        self.sym = self.opt.symmetry_breaking and not dep.aliasing

    def add_slot(self, t: int) -> None:
        dep, s = self.dep, self.solver
        n = dep.workers
        pulls = dep.pulls_in_slot(t)
        self.positions += n + pulls
        if pulls:
            seg = [self._bv(f"seg_{t}_{u}", bits(pulls)) for u in range(n)]
            for x in seg:
                s.add(z3.ULE(x, pulls))
        else:
            seg = [self._const(0, 1) for _ in range(n)]
        if self.sym:
            self._lex_leader(t, seg)
        received: list[list[Any]] = [[] for _ in range(n)]
        record: dict[str, Any] = {"seg": seg, "segments": []}
        for i in range(pulls + 1):
            sends = [x == i for x in seg] if pulls else [z3.BoolVal(True)] * n
            record["segments"].append(self._segment(t, i, sends, received, i < pulls))
        self.segs.append(record)
        self.skipped.append([z3.BoolVal(False)] * n)
        self._end_slot(t, received)

    def _lex_leader(self, t: int, seg: list[Any]) -> None:
        """seg-sequences of consecutive workers of a cluster are lexicographically ordered:
        ``equal so far -> seg_u(t) <= seg_v(t)``. Relabelling the workers of a cluster
        by their sequences maps every behaviour to one that satisfies this."""
        pairs = [(a, b) for mem in self.members for a, b in zip(mem, mem[1:], strict=False)]
        if not self.lex_equal:
            self.lex_equal = [z3.BoolVal(True) for _ in pairs]
        for idx, (a, b) in enumerate(pairs):
            eq = self.lex_equal[idx]
            self.solver.add(z3.Implies(eq, z3.ULE(seg[a], seg[b])))
            self.lex_equal[idx] = self._fresh(f"lexeq_{t}_{idx}", z3.And(eq, seg[a] == seg[b]))

    def _segment(self, t: int, i: int, sends: list[Any], received: list[list[Any]],
                 then_pull: bool) -> dict[str, Any]:
        dep = self.dep
        c = dep.clusters
        tag = f"{t}_{i}"
        before = {"queued": list(self.queued), "single": list(self.single),
                  "inb": list(self.inb), "occ": self.occ}
        new = [z3.And(z3.Or([sends[u] for u in mem]), z3.Not(self.queued[k]))
               for k, mem in enumerate(self.members)]
        rank, admitted, wr = self._admit(tag, new)
        occ_p = self.occ
        for k, mem in enumerate(self.members):
            rk = z3.ZeroExt(self.wP - wr, rank[k]) if self.wP >= wr else \
                z3.Extract(self.wP - 1, 0, rank[k])
            self.where[k] = self._fresh(f"where_{tag}_{k}",
                                        z3.If(admitted[k], occ_p + rk, self.where[k]))
            sent_all_own = z3.And([z3.Implies(sends[u], self.inb[u]) for u in mem])
            only_one = z3.AtMost(*[sends[u] for u in mem], 1) if len(mem) > 1 else z3.BoolVal(True)
            self.single[k] = self._fresh(
                f"single_{tag}_{k}",
                z3.If(self.queued[k], z3.And(self.single[k], sent_all_own),
                      z3.If(admitted[k], only_one, self.single[k])),
            )
            for u in mem:
                self.inb[u] = self._fresh(
                    f"inb_{tag}_{u}",
                    z3.Or(self.inb[u], z3.And(sends[u], z3.Or(self.queued[k], admitted[k]))),
                )
            self.queued[k] = self._fresh(f"queued_{tag}_{k}", z3.Or(self.queued[k], admitted[k]))
        added = z3.Sum([z3.If(a, self._const(1, self.wO), self._const(0, self.wO))
                        for a in admitted])
        self.occ = self._fresh(f"occ_{tag}", self.occ + added)
        out: dict[str, Any] = {"sends": sends, "before": before, "rank": rank,
                               "admitted": admitted, "occ": self.occ}
        if not then_pull:
            return out
        head = [z3.And(self.queued[k], self.where[k] == 0) for k in range(c)]
        out["head"] = head
        out["inb_at_pull"] = list(self.inb)
        credit = []
        for k, mem in enumerate(self.members):
            for u in mem:
                bit = z3.Or([self.inb[v] for v in dep.aliases(u)])
                credit.append((u, z3.And(head[k], bit)))
        credit.sort(key=lambda x: x[0])
        out["credit"] = [x for _, x in credit]
        for u, x in credit:
            received[u].append(x)
        one = self._const(1, self.wP)
        for k, mem in enumerate(self.members):
            for u in mem:
                self.inb[u] = self._fresh(f"inbp_{tag}_{u}", z3.And(self.inb[u], z3.Not(head[k])))
            self.where[k] = self._fresh(
                f"wherep_{tag}_{k}",
                z3.If(z3.And(self.queued[k], z3.Not(head[k])), self.where[k] - one, self.where[k]),
            )
            self.queued[k] = self._fresh(f"queuedp_{tag}_{k}",
                                         z3.And(self.queued[k], z3.Not(head[k])))
        nonempty = self.occ != 0
        self.occ = self._fresh(f"occp_{tag}", z3.If(nonempty, self.occ - 1, self.occ))
        out["occ_after_pull"] = self.occ
        return out

    def _events(self, t: int, val: Any, true: Any) -> list[Event]:
        """The canonical arrival order of the module doc, with the outcome each UPDATE
        gets in that order (determined by the state at the start of its segment)."""
        n = self.dep.workers
        events: list[Event] = []
        for seg in self.segs[t]["segments"]:
            b = seg["before"]
            queued = [true(x) for x in b["queued"]]
            single = [true(x) for x in b["single"]]
            inb = [true(x) for x in b["inb"]]
            occ = val(b["occ"])
            senders = [u for u in range(n) if true(seg["sends"][u])]
            admitted = [true(x) for x in seg["admitted"]]
            firsts = {}
            for u in senders:
                firsts.setdefault(self.cluster[u], u)
            lead = sorted((k for k in firsts if admitted[k]), key=lambda k: val(seg["rank"][k]))
            order = [firsts[k] for k in lead] + [u for u in senders
                                                   if u not in {firsts[k] for k in lead}]
            seen: set[int] = set()
            for u in order:
                k = self.cluster[u]
                if not queued[k] and not admitted[k]:
                    outcome = Outcome.DROPPED_FULL
                elif not queued[k] and u == firsts[k]:
                    outcome = Outcome.ENQUEUED
                    occ += 1
                elif queued[k] and k not in seen and single[k] and inb[u]:
                    outcome = Outcome.REPLACED
                else:
                    outcome = Outcome.MERGED
                seen.add(k)
                events.append(Event("update", occ, worker=u, cluster=k, outcome=outcome.name))
            if "head" not in seg:
                continue
            occ_after = val(seg["occ_after_pull"])
            heads = [k for k, h in enumerate(seg["head"]) if true(h)]
            if not heads:
                events.append(Event("pull", occ_after, response="EMPTY"))
                continue
            k = heads[0]
            contributors = [u for u in self.members[k] if true(seg["inb_at_pull"][u])]
            credited = [u for u in range(n) if true(seg["credit"][u])]
            events.append(Event("pull", occ_after, cluster=k, response="DATA",
                                contributors=contributors, credited=credited))
        return events
