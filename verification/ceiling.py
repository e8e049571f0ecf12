"""The worker's send decision under revision 3 (DESIGN.md §4) with its AIMD loss ceiling,
as a Z3 transition system over the reals, and its properties proved for every horizon.

The slot model (``model``, ``segments``, ``unbounded``) has no loss, so there the ceiling
stays 1; this module covers what the ceiling does under **any** loss. One worker; its
state is the ceiling ``L``, the runs of consecutive lossy and clean due updates (``k``,
``j``, capped) and whether it has feedback that counts. Each step is one decision or one
update falling due, in any order the network allows:

* **due**: an update's answers are due (all its ACKs came, or ``feedback_ttl`` passed)
  with answered share ``a``, any real in ``[0, 1]`` (any number of blocks, any loss):
  ``a < 0.9 -> L = max(L * a, L_min)``, else ``L = min(L + 0.1, 1)``;
* **decide**: the worker decides its next update with ``P_s = min(N * Q_free + alpha * E,
  L)``, where ``N * Q_free`` is any value ``>= 0`` (any ACK, any number of active
  clusters) and ``E = exp(-beta * Δ)`` any value in ``(0, 1]`` (every age of the
  feedback: the exponential enters only through this interval); ``P_s = L`` when the
  feedback expired or before any ACK.

Properties, each checked as an inductive invariant (initial states satisfy it, one step
of either kind from any state satisfying it keeps it: so it holds after any number of
steps, for all T):

* ``bounds``: ``L_min <= L <= 1`` and every decision has ``P_s <= L``; a probe or a first
  update has ``P_s >= L_min`` (starvation-freedom's ingredient: never silenced);
* ``backoff``: after ``k`` lossy updates in a row, ``L <= max(0.9^k, L_min)`` and so every
  decision ``P_s <= max(0.9^k, L_min)``: the offered load falls to ``L_min`` within
  ``K = 29`` lossy updates (``0.9^29 < 0.05``), probes included;
* ``recovery``: after ``j`` clean updates in a row, ``L >= min(L_min + 0.1 j, 1)``: back
  to ``L = 1`` (the revision 2 behaviour) within 10 clean updates.

A refuted property comes with a counterexample step (the state before, the step's inputs,
the state after); a mutant of the rule (``Rule``) must refute one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import z3

from verification.sending import ANSWERED_ENOUGH, CEILING_STEP, L_MIN

CEILING_PROPERTIES = ("bounds", "backoff", "recovery")
BACKOFF_CAP = 29
"""``0.9^29 < L_min``: a lossy run this long leaves ``L = L_min``."""
RECOVERY_CAP = 10
"""``L_min + 0.1 * 10 >= 1``: a clean run this long leaves ``L = 1``."""


@dataclass(frozen=True)
class Rule:
    """DESIGN.md §4's ceiling rule; the flags are mutants for the tests."""

    floor: Fraction = Fraction(L_MIN).limit_denominator(1000)
    step: Fraction = Fraction(CEILING_STEP).limit_denominator(1000)
    enough: Fraction = Fraction(ANSWERED_ENOUGH).limit_denominator(1000)
    decrease: bool = True
    """False: the ceiling never decreases (a mutant)."""
    floored: bool = True
    """False: the decrease without the floor, ``L = L * a`` (a mutant)."""
    probe_at_ceiling: bool = True
    """False: probes and first updates at ``P_s = 1`` (revision 2's probe; a mutant)."""


DESIGN = Rule()


@dataclass
class CeilingResult:
    prop: str
    status: str
    """VERIFIED (for all T) or VIOLATED."""
    detail: str
    step: dict[str, Any] | None = None
    """The counterexample step: the state before it, its inputs and the state after."""

    def line(self) -> str:
        return f"{self.prop:<15} {self.status:<9} {self.detail}"


def _q(x: Fraction) -> Any:
    return z3.RealVal(f"{x.numerator}/{x.denominator}")


def _min(a: Any, b: Any) -> Any:
    return z3.If(a <= b, a, b)


def _max(a: Any, b: Any) -> Any:
    return z3.If(a >= b, a, b)


def _state(tag: str) -> dict[str, Any]:
    return {"L": z3.Real(f"L_{tag}"), "k": z3.Int(f"k_{tag}"), "j": z3.Int(f"j_{tag}")}


def _due(rule: Rule, s: dict[str, Any], a: Any) -> dict[str, Any]:
    """The state after an update falls due with answered share ``a``."""
    lossy = a < _q(rule.enough)
    down = s["L"] * a
    if rule.floored:
        down = _max(down, _q(rule.floor))
    if not rule.decrease:
        down = s["L"]
    up = _min(s["L"] + _q(rule.step), z3.RealVal(1))
    return {"L": z3.If(lossy, down, up),
            "k": z3.If(lossy, _min(s["k"] + 1, z3.IntVal(BACKOFF_CAP)), z3.IntVal(0)),
            "j": z3.If(lossy, z3.IntVal(0), _min(s["j"] + 1, z3.IntVal(RECOVERY_CAP)))}


def decision(rule: Rule, ceiling: Any, share: Any, e: Any, alpha: Fraction,
             probe: Any) -> Any:
    """``P_s`` of a decision: ``min(N * Q_free + alpha * E, L)``, or the probe's."""
    at_probe = ceiling if rule.probe_at_ceiling else z3.RealVal(1)
    return z3.If(probe, at_probe, _min(share + _q(alpha) * e, ceiling))


def _invariant(rule: Rule, prop: str, s: dict[str, Any]) -> Any:
    floor = _q(rule.floor)
    lo = z3.And(s["L"] >= floor, s["L"] <= 1)
    if prop == "bounds":
        return lo
    if prop == "backoff":
        # L <= max(0.9^k, L_min), one clause per run length (the cap is exact: at k = 29
        # the bound is L_min itself).
        nine = Fraction(9, 10)
        return z3.And(lo, s["k"] >= 0, s["k"] <= BACKOFF_CAP, *[
            z3.Implies(s["k"] == k, s["L"] <= _q(max(nine ** k, rule.floor)))
            for k in range(BACKOFF_CAP + 1)])
    return z3.And(lo, s["j"] >= 0, s["j"] <= RECOVERY_CAP, *[
        z3.Implies(s["j"] == j, s["L"] >= _q(min(rule.floor + rule.step * j, Fraction(1))))
        for j in range(RECOVERY_CAP + 1)])


def _decision_goal(rule: Rule, prop: str, s: dict[str, Any], p: Any, probe: Any) -> Any:
    """What every decision from a state satisfying the invariant must satisfy."""
    floor = _q(rule.floor)
    if prop == "bounds":
        return z3.And(p <= s["L"], p >= 0, z3.Implies(probe, p >= floor))
    if prop == "backoff":
        nine = Fraction(9, 10)
        return z3.And(*[z3.Implies(s["k"] == k, p <= _q(max(nine ** k, rule.floor)))
                        for k in range(BACKOFF_CAP + 1)])
    return z3.BoolVal(True)


def check_ceiling(prop: str, rule: Rule = DESIGN, alpha: Fraction = Fraction(1, 5)) -> CeilingResult:
    """Prove ``prop`` for every horizon by induction, or return the step that breaks it."""
    if prop not in CEILING_PROPERTIES:
        raise ValueError(f"unknown ceiling property {prop!r}")
    s0 = _state("0")
    init = z3.And(s0["L"] == 1, s0["k"] == 0, s0["j"] == 0)
    solver = z3.Solver()
    # Base: the initial state satisfies the invariant.
    solver.add(init, z3.Not(_invariant(rule, prop, s0)))
    if solver.check() == z3.sat:
        return CeilingResult(prop, "VIOLATED", "the initial state L = 1 breaks it")
    a, share, e, probe = z3.Real("a"), z3.Real("share"), z3.Real("E"), z3.Bool("probe")
    inputs = z3.And(a >= 0, a <= 1, share >= 0, e > 0, e <= 1)
    s1 = _due(rule, s0, a)
    p = decision(rule, s0["L"], share, e, alpha, probe)
    step = z3.Or(z3.Not(_invariant(rule, prop, s1)), z3.Not(_decision_goal(rule, prop, s0, p,
                                                                           probe)))
    solver = z3.Solver()
    solver.add(_invariant(rule, prop, s0), inputs, step)
    if solver.check() == z3.unsat:
        return CeilingResult(prop, "VERIFIED", "for all T: " + _PROVED[prop])
    m = solver.model()

    def num(x: Any) -> float:
        v = m.eval(x, model_completion=True)
        return float(Fraction(str(v.as_fraction()))) if z3.is_rational_value(v) else \
            float(v.as_decimal(12).rstrip("?"))

    found = {"L": num(s0["L"]), "k": m.eval(s0["k"], model_completion=True).as_long(),
             "j": m.eval(s0["j"], model_completion=True).as_long(), "answered": num(a),
             "share": num(share), "E": num(e),
             "probe": z3.is_true(m.eval(probe, model_completion=True)),
             "L_after_due": num(s1["L"]), "P_s": num(p)}
    kind = "probe" if found["probe"] else "fresh ACK"
    return CeilingResult(prop, "VIOLATED",
                         f"from L = {found['L']:g} (k = {found['k']}, j = {found['j']}): an "
                         f"update due with answered share {found['answered']:g} leaves L = "
                         f"{found['L_after_due']:g}; a decision ({kind}, "
                         f"N*Q_free = {found['share']:g}, E = {found['E']:g}) has P_s = "
                         f"{found['P_s']:g}", found)


_PROVED = {
    "bounds": "L_min <= L <= 1 after any sequence of due updates with any answered shares, "
              "every decision P_s <= L, probes and first updates P_s >= L_min",
    "backoff": "after k lossy updates in a row (answered < 90 %) L and every P_s <= "
               "max(0.9^k, L_min): P_s = L_min after 29, probes included",
    "recovery": "after j clean updates in a row L >= min(L_min + 0.1 j, 1): L = 1 after 10",
}


def mutant(**changes: Any) -> Rule:
    """``DESIGN`` with some of its flags changed (the tests' mutants)."""
    return replace(DESIGN, **changes)
