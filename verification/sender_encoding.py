"""When the workers of the explicit encoding must send: one job, the transmission
control (``P_s`` windows from the ACK's feedback, the skip bound, probes) as Z3
constraints on each slot's sends.

A mixin of ``model.AomModel``; the window table itself is built by
``AomModel._init_transmission`` from ``verification.sending``.
"""

from __future__ import annotations

from typing import Any

import z3


class SenderEncoding:
    """The send rule of ``AomModel``: forced-send windows and what they force."""

    def _window_of(self, occ: Any, active: Any) -> Any:
        """The forced-send window for an ACK carrying (occ, active), as a term."""
        expr = self._const(self.window_default, self.wT)
        for (o, a), w in self.window_table.items():
            if w == self.window_default:
                continue
            cond = occ == o if self.dep.mode == "olaf" else z3.And(occ == o, active == a)
            expr = z3.If(cond, self._const(w, self.wT), expr)
        return expr

    def _active(self) -> Any:
        w = self.wO
        if self.dep.mode == "olaf":
            return self.occ
        return z3.Sum([z3.If(self.count[k] != 0, self._const(1, w + 8), self._const(0, w + 8))
                       for k in range(self.dep.clusters)])

    def _transmission(self, t: int, sends: list[Any]) -> None:
        """Sends allowed by P_s: forced while P_s = 1 (always before the first ACK);
        free otherwise, except that a worker that keeps sending skips at most
        ``max_skip`` slots in a row (an assumption of fairness and responsiveness, not
        of starvation); a worker whose feedback expired probes."""
        dep, s = self.dep, self.solver
        fresh = [u for u in range(dep.workers) if dep.has_update(u, t)]
        if t == 0 or self.always_forced:
            s.add(*[sends[u] for u in fresh])
            return
        tc = self._const(t, self.wT)
        pg = self.probe_gap
        for u in fresh:
            # Before its first send a worker has no ACK: the initial window (the
            # horizon) forces its first fresh update, as P_s = 1 before any ACK.
            gap = tc - self.last_send[u]
            s.add(z3.Implies(z3.ULE(gap, self.window[u]), sends[u]))
            if pg is not None and pg <= t:
                # Stale feedback: the next update is a probe (DESIGN.md §4).
                s.add(z3.Implies(z3.UGE(gap, pg), sends[u]))
            if self.prop == "starvation" or dep.max_skip is None:
                continue
            # At most max_skip fresh updates skipped in a row: sends are period slots apart.
            keeps = z3.Implies(z3.UGT(gap, dep.max_skip * dep.period(u)), sends[u])
            if self.target is None:
                s.add(keeps)
            else:
                s.add(z3.Implies(self.target[u], keeps))
