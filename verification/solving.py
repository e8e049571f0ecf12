"""Solving the bounded model: one job, unrolling slot by slot and asking Z3 for a
violation at each checked slot (or once over the horizon), with the time budget, the
vacuity check and the SMT-LIB dump; ``CheckResult`` is what it answers.

A mixin of ``model.AomModel`` (and so of every encoding built on it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import z3

from verification.trace import Trace


class DeadlineExceeded(Exception):
    """The time budget ran out while the model was being built or solved."""


@dataclass
class CheckResult:
    prop: str
    status: str
    """VERIFIED, VIOLATED or UNKNOWN."""
    seconds: float
    size: dict[str, int] = field(default_factory=dict)
    """Model size: solver assertions, Boolean and bit-vector constants, message positions."""
    trace: Trace | None = None
    reason: str = ""
    """UNKNOWN: why (timeout, solver's reason); VERIFIED/VIOLATED: a one-line summary."""
    engine: str = ""
    """The encoding that produced the verdict."""
    checked_through: int | None = None
    """Last slot for which the solver proved that no violation exists there (all slots
    from the first checked one up to it); None when none was proved."""
    scope: str = "bounded"
    """``bounded``: the verdict covers slots up to the horizon only. ``unbounded``: it
    holds for every horizon (the all-T search closed the reachable state set)."""
    assumptions: list[str] = field(default_factory=list)
    """What a VERIFIED rests on, in words (printed with the verdict)."""
    unbounded: dict[str, Any] | None = None
    """The all-T search's outcome (``UnboundedResult.to_dict``), None when not run."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "property": self.prop,
            "status": self.status,
            "scope": self.scope,
            "engine": self.engine,
            "seconds": round(self.seconds, 3),
            "checked_through_slot": self.checked_through,
            "size": self.size,
            "reason": self.reason,
            "assumptions": self.assumptions,
            "all_t_search": self.unbounded,
            "counterexample": self.trace.to_dict() if self.trace else None,
        }


class Solving:
    """``AomModel.check``: the queries, and the model's size."""

    def size(self) -> dict[str, int]:
        return {
            "assertions": len(self.solver.assertions()),
            "constants": self._constants,
            "message_positions": self.positions,
        }

    # -- solving -------------------------------------------------------------------
    def check(self, timeout_s: float | None = None,
              progress: Callable[[int], None] | None = None) -> CheckResult:
        """Unroll slot by slot and ask for a violation at each checked slot.

        ``progress(t)`` is called after slot ``t`` is proved violation-free. A VERIFIED
        needs, in addition, that the constraints admit some behaviour over the whole
        horizon (a built-in vacuity check: an over-constrained model proves anything).
        """
        dep, s = self.dep, self.solver
        start = time.monotonic()
        deadline = None if timeout_s is None else start + timeout_s
        if deadline is not None:
            self.deadline = deadline if self.deadline is None else min(self.deadline, deadline)
        first = self.first_checked_slot()

        def run(*assumptions: Any) -> Any:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return z3.unknown
                s.set("timeout", max(1, int(left * 1000)))
            return s.check(*assumptions)

        def result(status: str, reason: str, trace: Trace | None = None) -> CheckResult:
            return CheckResult(self.prop, status, time.monotonic() - start, self.size(),
                               trace=trace, reason=reason, checked_through=proved)

        proved: int | None = None
        if first >= dep.horizon:
            return result("UNKNOWN", f"horizon too short: {self.prop} can first fail at slot "
                                     f"{first}, the horizon ends at slot {dep.horizon - 1}")
        answer = z3.unsat
        bad_slot = None
        try:
            if self.opt.incremental:
                for t in range(dep.horizon):
                    self.add_slot(t)
                    if t < first:
                        continue
                    flag = z3.Bool(f"violation_at_{t}")
                    s.add(z3.Implies(flag, self.violation(t)))
                    c0 = time.process_time()
                    answer = run(flag)
                    self.slot_cpu.append(time.process_time() - c0)
                    if answer != z3.unsat:
                        bad_slot = t
                        break
                    proved = t
                    if progress is not None:
                        progress(t)
            else:
                for t in range(dep.horizon):
                    self.add_slot(t)
                flags = [z3.Bool(f"violation_at_{t}") for t in range(first, dep.horizon)]
                for t, flag in zip(range(first, dep.horizon), flags, strict=True):
                    s.add(z3.Implies(flag, self.violation(t)))
                answer = run(z3.Or(flags))
                if answer == z3.unsat:
                    proved = dep.horizon - 1
            if answer == z3.unsat:
                sanity = run()
                if sanity == z3.unsat:
                    return result("UNKNOWN", "the model's constraints admit no behaviour at "
                                             "all (vacuous): a model bug, nothing is proved")
                answer = z3.unsat if sanity == z3.sat else sanity
        except DeadlineExceeded:
            answer = z3.unknown
        if self.opt.dump_smt:
            self.dump_smt(self.opt.dump_smt, first)
        if answer == z3.unsat:
            return result("VERIFIED", self._summary())
        if answer == z3.sat:
            trace = self.extract(s.model(), bad_slot)
            return result("VIOLATED", trace.detail, trace)
        why = s.reason_unknown()
        if deadline is not None and time.monotonic() >= deadline - 0.05:
            why = f"timeout after {timeout_s:g} s ({why})"
        if proved is not None:
            why += f"; no violation in slots {first}..{proved}"
        return result("UNKNOWN", why)

    def dump_smt(self, path: str, first: int) -> None:
        """The query as one SMT-LIB 2 script: every constraint built so far and the
        violation at some checked slot (unsat = VERIFIED for the slots built)."""
        dump = z3.SolverFor(self.opt.logic) if self.opt.logic else z3.Solver()
        dump.add(*self.solver.assertions())
        flags = [z3.Bool(f"violation_at_{t}") for t in range(first, len(self.skipped))]
        dump.add(z3.Or(flags) if flags else z3.BoolVal(False))
        with open(path, "w", encoding="utf-8") as f:
            f.write(dump.to_smt2())
