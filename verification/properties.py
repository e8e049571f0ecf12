"""The AoM properties of the bounded model: one job, saying as a Z3 term when a
property fails at a slot (fairness, responsiveness, starvation), from which slot it can,
and in words what a VERIFIED means.

A mixin of ``model.AomModel`` (and so of every encoding built on it).
"""

from __future__ import annotations

from typing import Any

import z3

from verification.trace import Trace


class AomProperties:
    """The violation of ``AomModel``'s property at a slot, and its summary."""

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

    def _summary(self) -> str:
        dep = self.dep
        slots = f"slots {self.first_checked_slot()}..{dep.horizon - 1}"
        if self.prop == "fairness":
            return (f"every behaviour keeps max_u |AoM_u - mean AoM| <= "
                    f"{float(dep.fairness_threshold):g} slots in {slots}")
        if self.prop == "starvation" and dep.feedback == 3:
            unit = "fresh updates" if dep.staggered else "slots"
            return (f"every worker has a send opportunity with P_s >= L_min = 0.05 at least once "
                    f"in every {dep.starvation_limit + 1} {unit} (never more than "
                    f"{dep.starvation_limit} in a row that may fall below), whatever is lost, "
                    f"in {slots}")
        if self.prop == "starvation":
            unit = "fresh updates" if dep.staggered else "slots"
            return (f"no worker skips more than {dep.starvation_limit} {unit} in a row while the "
                    f"queue has room, in {slots}")
        return f"every worker that keeps sending has AoM <= {dep.aom_bound} slots in {slots}"
