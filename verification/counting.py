"""The counting encoding: the segment model with workers replaced by head counts.

Under the segment encoding's conditions (OLAF mode, no reward threshold, every send
forced) the workers of one cluster are interchangeable, and their contributor bits
never alias when no cluster has more than 32 workers. A worker is then fully
described by its *class*: its AoM value ``x`` (saturating at the model's cap, or
``G`` once the PS credited it in the current slot), whether its bit is in its
cluster's queued slot (``b``), and whether it already sent in this slot. The model
keeps, per cluster, how many workers are in each class, and picks per segment how
many workers of each class send (the last segment takes all that have not sent).
This is the classic counter abstraction for symmetric processes: it is exact (a
count vector is reachable iff some assignment of workers reaches it), its size does
not grow with the number of workers beyond the width of the counters, and the
fairness sum is ``sum_x x * count[x]`` over a handful of values instead of ``N``
terms.

A counterexample is turned back into workers by giving each class's senders to the
lowest-numbered workers of that class, then solving the per-worker segment model with
those choices fixed, so the trace printed (and replayed through the reference queue)
comes from the per-worker model.
"""

from __future__ import annotations

from typing import Any

import z3

from verification.config import Deployment
from verification.model import AomModel, Options, bits
from verification.segments import SegmentModel
from verification.trace import Trace


class CountingModel(AomModel):
    """Per-cluster class counts instead of per-worker state (see module doc)."""

    ENGINE = "counting"

    def __init__(self, dep: Deployment, prop: str, options: Options | None = None,
                 aom_cap: int | None = None) -> None:
        if (dep.mode != "olaf" or dep.rewards != "merge" or dep.aliasing or dep.pull_jitter
                or dep.staggered):
            raise ValueError("the counting encoding needs OLAF mode, rewards=merge, an exact "
                             "PULL schedule, one common update period and no contributor-bit "
                             "aliasing")
        super().__init__(dep, prop, options, aom_cap)
        if not self.always_forced:
            raise ValueError("the counting encoding needs P_s = 1 for every reachable ACK")
        c = dep.clusters
        self.H = self.aom_cap
        self.G = self.H + 1
        self.classes = self.G + 1
        self.wC = [bits(len(m)) for m in self.members]
        # unsent[k][x][b], sent[k][x][b]; everyone starts unsent, AoM 0, bit not queued.
        self.unsent = [[[self._const(len(self.members[k]) if (x, b) == (0, 0) else 0,
                                     self.wC[k]) for b in range(2)]
                        for x in range(self.classes)] for k in range(c)]
        self.where = [self._const(0, self.wO) for _ in range(c)]
        self.wide = bits(dep.capacity + c)
        self.segs: list[list[dict[str, Any]]] = []
        self.counts: list[list[Any]] = []
        """Per slot: workers with AoM x at the end of the slot, x = 0..H (all clusters)."""
        self.wS = bits(dep.workers * self.H) + 2

    def add_slot(self, t: int) -> None:
        dep = self.dep
        pulls = dep.pulls_in_slot(t)
        self.positions += dep.workers + pulls
        zero = [[[self._const(0, self.wC[k]) for _ in range(2)] for _ in range(self.classes)]
                for k in range(dep.clusters)]
        self.sent = zero
        record = []
        for i in range(pulls + 1):
            record.append(self._segment(t, i, last=i == pulls))
        self.segs.append(record)
        self.skipped.append([z3.BoolVal(False)] * dep.workers)
        self._end_of_slot(t)

    def _segment(self, t: int, i: int, last: bool) -> dict[str, Any]:
        dep, s = self.dep, self.solver
        c = dep.clusters
        tag = f"{t}_{i}"
        movers = []
        for k in range(c):
            rows = []
            for x in range(self.classes):
                row = []
                for b in range(2):
                    have = self.unsent[k][x][b]
                    if last or z3.is_bv_value(have) and have.as_long() == 0:
                        m = have
                    else:
                        m = self._bv(f"m_{tag}_{k}_{x}_{b}", self.wC[k])
                        s.add(z3.ULE(m, have))
                    row.append(m)
                rows.append(row)
            movers.append(rows)
        any_send = [z3.Or([m != 0 for row in movers[k] for m in row]) for k in range(c)]
        new = [z3.And(any_send[k], z3.Not(self.queued[k])) for k in range(c)]
        rank, admitted, wr = self._admit(tag, new)
        before_queued = list(self.queued)
        for k in range(c):
            rk = z3.ZeroExt(self.wO - wr, rank[k]) if self.wO >= wr else \
                z3.Extract(self.wO - 1, 0, rank[k])
            self.where[k] = self._fresh(f"where_{tag}_{k}",
                                        z3.If(admitted[k], self.occ + rk, self.where[k]))
            lands = z3.Or(self.queued[k], admitted[k])
            for x in range(self.classes):
                into_slot = movers[k][x][0] + movers[k][x][1]
                for b in range(2):
                    self.unsent[k][x][b] = self._fresh(
                        f"u_{tag}_{k}_{x}_{b}", self.unsent[k][x][b] - movers[k][x][b])
                # Senders whose UPDATE lands in the cluster's slot now have their bit in it.
                self.sent[k][x][1] = self._fresh(
                    f"s_{tag}_{k}_{x}_1",
                    self.sent[k][x][1] + z3.If(lands, into_slot, movers[k][x][1]))
                self.sent[k][x][0] = self._fresh(
                    f"s_{tag}_{k}_{x}_0",
                    self.sent[k][x][0] + z3.If(lands, self._const(0, self.wC[k]),
                                               movers[k][x][0]))
            self.queued[k] = self._fresh(f"queued_{tag}_{k}", lands)
        added = z3.Sum([z3.If(a, self._const(1, self.wO), self._const(0, self.wO))
                        for a in admitted])
        self.occ = self._fresh(f"occ_{tag}", self.occ + added)
        out: dict[str, Any] = {"movers": movers, "rank": rank, "admitted": admitted,
                               "queued_before": before_queued}
        if last:
            return out
        head = [z3.And(self.queued[k], self.where[k] == 0) for k in range(c)]
        out["head"] = head
        one = self._const(1, self.wO)
        for k in range(c):
            for table, name in ((self.unsent, "u"), (self.sent, "s")):
                credited = z3.Sum([table[k][x][1] for x in range(self.classes)])
                for x in range(self.classes):
                    zero = self._const(0, self.wC[k])
                    keep1 = z3.If(head[k], zero, table[k][x][1])
                    base0 = table[k][x][0] + (z3.If(head[k], credited, zero) if x == self.G
                                              else zero)
                    table[k][x][1] = self._fresh(f"{name}p_{tag}_{k}_{x}_1", keep1)
                    table[k][x][0] = self._fresh(f"{name}p_{tag}_{k}_{x}_0", base0)
            self.where[k] = self._fresh(
                f"wherep_{tag}_{k}",
                z3.If(z3.And(self.queued[k], z3.Not(head[k])), self.where[k] - one, self.where[k]),
            )
            self.queued[k] = self._fresh(f"queuedp_{tag}_{k}",
                                         z3.And(self.queued[k], z3.Not(head[k])))
        self.occ = self._fresh(f"occp_{tag}", z3.If(self.occ != 0, self.occ - 1, self.occ))
        return out

    def _end_of_slot(self, t: int) -> None:
        """Credited workers restart at AoM 0, the others age one slot (saturating)."""
        c = self.dep.clusters
        nxt = [[[self._const(0, self.wC[k]) for _ in range(2)] for _ in range(self.classes)]
               for k in range(c)]
        for k in range(c):
            for b in range(2):
                if t == 0:
                    total = z3.Sum([self.sent[k][x][b] for x in range(self.classes)])
                    nxt[k][0][b] = total
                    continue
                nxt[k][0][b] = self.sent[k][self.G][b]
                for x in range(self.H):
                    nxt[k][x + 1][b] = self.sent[k][x][b]
                nxt[k][self.H][b] = self.sent[k][self.H - 1][b] + self.sent[k][self.H][b] \
                    if self.H >= 1 else self.sent[k][self.H][b]
        for k in range(c):
            for x in range(self.classes):
                for b in range(2):
                    nxt[k][x][b] = self._fresh(f"c_{t}_{k}_{x}_{b}", nxt[k][x][b])
        self.unsent = nxt
        w = bits(self.dep.workers)
        self.counts.append([
            self._fresh(f"count_{t}_{x}", z3.Sum([
                z3.ZeroExt(w - self.wC[k], nxt[k][x][b]) for k in range(c) for b in range(2)]))
            for x in range(self.H + 1)
        ])
        # The AoM list of the base class is not used by this encoding.
        self.aom.append([])

    def violation(self, t: int) -> Any:
        dep = self.dep
        counts = self.counts[t]
        w = counts[0].size()
        present = [cnt != 0 for cnt in counts]
        if self.prop == "responsiveness":
            return z3.Or([present[x] for x in range(dep.aom_bound + 1, self.H + 1)] or
                         [z3.BoolVal(False)])
        n = dep.workers
        total = self._fresh(f"aom_sum_{t}", z3.Sum(
            [z3.ZeroExt(self.wS - w, cnt) * x for x, cnt in enumerate(counts) if x]))
        limit = dep.fairness_limit
        out = []
        for x in range(self.H + 1):
            far = []
            if n * x - limit > 0:
                far.append(z3.ULT(total, n * x - limit))
            if n * x + limit + 1 < 2 ** (self.wS - 1):
                far.append(z3.UGT(total, n * x + limit))
            if far:
                out.append(z3.And(present[x], z3.Or(far)))
        if self.aom_cap < dep.horizon:
            out.append(present[self.H])
        return z3.Or(out) if out else z3.BoolVal(False)

    def saturated(self, trace: Trace) -> bool:
        return self.aom_cap < self.dep.horizon and any(
            a >= self.aom_cap for s in trace.slots for a in s.aom)

    # -- counterexample: back to workers ---------------------------------------------
    def extract(self, model: Any, bad_slot: int | None) -> Trace:

        dep = self.dep
        n = dep.workers

        def val(x: Any) -> int:
            return model.eval(x, model_completion=True).as_long()

        def true(x: Any) -> bool:
            return z3.is_true(model.eval(x, model_completion=True))

        if bad_slot is None:
            bad_slot = next(t for t in range(dep.warmup, dep.horizon)
                            if true(self.violation(t)))
        aom = [0] * n
        inb = [False] * n
        seg_of: list[list[int]] = []
        ranks: list[list[list[int | None]]] = []
        for t in range(bad_slot + 1):
            got = [False] * n
            sent = [False] * n
            seg_t = [0] * n
            rank_t = []
            for i, seg in enumerate(self.segs[t]):
                for k, mem in enumerate(self.members):
                    for x in range(self.classes):
                        for b in range(2):
                            m = val(seg["movers"][k][x][b])
                            pool = [u for u in mem if not sent[u] and inb[u] == bool(b)
                                    and (self.G if got[u] else min(aom[u], self.H)) == x]
                            if m > len(pool):
                                raise AssertionError("counting model and workers disagree")
                            for u in pool[:m]:
                                sent[u] = True
                                seg_t[u] = i
                    lands = true(seg["queued_before"][k]) or true(seg["admitted"][k])
                    for u in mem:
                        if sent[u] and seg_t[u] == i and lands:
                            inb[u] = True
                rank_t.append([val(r) if true(a) else None
                               for r, a in zip(seg["rank"], seg["admitted"], strict=True)])
                if "head" in seg:
                    for k, h in enumerate(seg["head"]):
                        if true(h):
                            for u in self.members[k]:
                                if inb[u]:
                                    got[u], inb[u] = True, False
            aom = [0 if t == 0 or got[u] else aom[u] + 1 for u in range(n)]
            seg_of.append(seg_t)
            ranks.append(rank_t)

        opt = Options(incremental=False, symmetry_breaking=False, logic=self.opt.logic,
                      engine="segments")
        per_worker = SegmentModel(dep, self.prop, opt)
        for t in range(bad_slot + 1):
            per_worker.add_slot(t)
            rec = per_worker.segs[t]
            if dep.pulls_in_slot(t):
                for u in range(n):
                    per_worker.solver.add(rec["seg"][u] == seg_of[t][u])
            for i, seg in enumerate(rec["segments"]):
                for k, r in enumerate(ranks[t][i]):
                    if r is not None and dep.clusters > 1:
                        per_worker.solver.add(seg["rank"][k] == r)
        per_worker.solver.add(per_worker.violation(bad_slot))
        if per_worker.solver.check() != z3.sat:
            raise AssertionError("counterexample of the counting model not realisable "
                                 "by workers: the encodings disagree")
        return per_worker.extract(per_worker.solver.model(), bad_slot)
