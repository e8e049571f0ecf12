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
        if dep.mode != "olaf" or dep.rewards != "merge" or dep.pull_jitter or dep.staggered:
            raise ValueError("the segment encoding covers OLAF mode with rewards=merge, "
                             "an exact PULL schedule and every worker updating every slot "
                             "only")
        super().__init__(dep, prop, options, aom_cap)
        self.track = not self.always_forced
        """Some ACK leaves P_s < 1: workers may skip, and each sender's feedback (the
        occupancy right after its UPDATE) is tracked for its forced-send window."""
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
        if self.track and (t > 0 or self.starv3):
            skip = [self._bool(f"skip_{t}_{u}") for u in range(n)]
        else:
            skip = [z3.BoolVal(False)] * n
        sends_any = [z3.Not(x) for x in skip]
        self._transmission(t, sends_any)
        if self.sym:
            wc = bits(pulls + 1)
            key = [z3.If(skip[u], self._const(pulls + 1, wc),
                         z3.ZeroExt(wc - seg[u].size(), seg[u])) for u in range(n)]
            self._lex_leader(t, key)
        self.level = [self._bv(f"level_{t}_{u}", self.wO) for u in range(n)] if self.track \
            else None
        """Per sender: admissions in its segment before its ACK (its feedback is the
        occupancy at the segment's start plus this)."""
        self.feedback_occ = [self._const(0, self.wO) for _ in range(n)]
        self.feedback_refused: list[Any] = [z3.BoolVal(False) for _ in range(n)]
        """Per sender: its UPDATE was DROPPED_FULL (revision 3: its cluster holds no slot)."""
        received: list[list[Any]] = [[] for _ in range(n)]
        record: dict[str, Any] = {"seg": seg, "segments": [], "level": self.level}
        for i in range(pulls + 1):
            on = [x == i for x in seg] if pulls else [z3.BoolVal(True)] * n
            sends = [z3.And(a, b) for a, b in zip(sends_any, on, strict=True)] if self.track \
                else on
            record["segments"].append(self._segment(t, i, sends, received, i < pulls))
        self.segs.append(record)
        self.skipped.append(skip)
        if self.track:
            for u in range(n):
                self.window[u] = self._fresh(
                    f"window_{t}_{u}",
                    z3.If(sends_any[u], self._window_of(self.feedback_occ[u], None,
                                                        self.feedback_refused[u]),
                          self.window[u]))
                self.last_send[u] = self._fresh(
                    f"last_{t}_{u}",
                    z3.If(sends_any[u], self._const(t, self.wT), self.last_send[u]))
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
        added = self._fresh(f"added_{tag}", z3.Sum([
            z3.If(a, self._const(1, self.wO), self._const(0, self.wO)) for a in admitted]))
        if self.track:
            self._feedback(tag, sends, before["queued"], admitted, rank, wr, added)
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

    def _feedback(self, tag: str, sends: list[Any], queued: list[Any], admitted: list[Any],
                  rank: list[Any], wr: int, added: Any) -> None:
        """The occupancy each sender of the segment sees in its ACK: the segment's
        starting occupancy plus the admissions before it, ``level``. A sender to a
        cluster queued before may arrive anywhere (0..added); the first arrival of an
        admitted cluster has ``level = rank + 1`` and its other senders come later; the
        senders of a cluster refused (ring full) arrive after all admissions."""
        s = self.solver
        for k, mem in enumerate(self.members):
            rk1 = (z3.ZeroExt(self.wO - wr, rank[k]) if self.wO >= wr
                   else z3.Extract(self.wO - 1, 0, rank[k])) + 1
            lo = z3.If(queued[k], self._const(0, self.wO), z3.If(admitted[k], rk1, added))
            for u in mem:
                lv = self.level[u]
                s.add(z3.Implies(sends[u], z3.And(z3.UGE(lv, lo), z3.ULE(lv, added))))
                self.feedback_occ[u] = z3.If(sends[u], self.occ + lv, self.feedback_occ[u])
                self.feedback_refused[u] = z3.If(
                    sends[u], z3.And(z3.Not(queued[k]), z3.Not(admitted[k])),
                    self.feedback_refused[u])
            s.add(z3.Implies(admitted[k],
                             z3.Or([z3.And(sends[u], self.level[u] == rk1) for u in mem])))

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
            lead = sorted({self.cluster[u] for u in senders if admitted[self.cluster[u]]},
                          key=lambda k: val(seg["rank"][k]))
            levels = self.segs[t]["level"]
            # Without tracked feedback every non-first UPDATE goes after the admissions.
            level = {u: val(levels[u]) if levels is not None else len(lead) for u in senders}
            firsts = {}
            for r, k in enumerate(lead):
                firsts[k] = next(u for u in senders if self.cluster[u] == k
                                 and (levels is None or level[u] == r + 1))
            first_set = set(firsts.values())
            order = [u for u in senders if u not in first_set and level[u] == 0]
            for r, k in enumerate(lead):
                order.append(firsts[k])
                order += [u for u in senders if u not in first_set and level[u] == r + 1]
            order += [u for u in senders if u not in order]
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
