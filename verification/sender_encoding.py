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

    def _window_of(self, occ: Any, active: Any, refused: Any = None) -> Any:
        """The forced-send window for an ACK carrying (occ, active), as a term;
        ``refused``: the UPDATE was DROPPED_FULL, its cluster holds no slot (OLAF mode,
        read where the table has such an entry: revision 3's ``room_c``)."""
        expr = self._const(self.window_default, self.wT)
        full = None
        for (o, a, held), w in self.window_table.items():
            if not held:
                full = w
                continue
            if w == self.window_default:
                continue
            cond = occ == o if self.dep.mode == "olaf" else z3.And(occ == o, active == a)
            expr = z3.If(cond, self._const(w, self.wT), expr)
        if full is not None and refused is not None:
            expr = z3.If(refused, self._const(full, self.wT), expr)
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
        if self.starv3:
            self._opportunities(t, fresh)
            return
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

    def _opportunities(self, t: int, fresh: list[int]) -> None:
        """Revision 3's starvation: every send is free (a sent UPDATE may be lost, which
        the queue and the worker's feedback see as a skip), and a fresh update's decision
        may fall below ``L_min`` when the last ACK is past its window (``P_s >= L_min`` at
        every instant) and not yet expired. Before any ACK ``P_s = L >= L_min``: the
        initial window (the horizon) covers it."""
        dep = self.dep
        tc = self._const(t, self.wT)
        pg = self.probe_gap
        low = []
        for u in range(dep.workers):
            if u not in fresh or self.always_forced:
                low.append(z3.BoolVal(False))
                continue
            gap = tc - self.last_send[u]
            cond = z3.UGT(gap, self.window[u])
            if pg is not None:
                cond = z3.And(cond, z3.ULT(gap, pg))
            low.append(self._fresh(f"low_{t}_{u}", cond))
        self.low_now = low
