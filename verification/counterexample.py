"""Counterexamples of the explicit encoding: one job, reading the solver's behaviour
back as a ``Trace`` (arrival order, outcomes, credits, AoM recomputed from the credits)
with the sentence that names the violation.

A mixin of ``model.AomModel``.
"""

from __future__ import annotations

from typing import Any

import z3

from verification.queue_encoding import CODE_EMPTY
from verification.sending import L_MIN
from verification.trace import Event, Slot, Trace
from worker_transport.protocol import Outcome

CHOICES = ("MERGED", "REPLACED", "DROPPED_REWARD")


class Counterexample:
    """``AomModel.extract``: the solver's model as a trace."""

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
            detail = (f"worker {worker} decided {limit + 1} fresh updates in a row, the last in "
                      f"slot {bad_slot}, each with P_s possibly below L_min = {L_MIN:g} (never "
                      f"a send opportunity >= L_min; a skip may be a lost UPDATE)"
                      if self.starv3 else
                      f"worker {worker} skipped slots {bad_slot - limit}..{bad_slot} "
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
