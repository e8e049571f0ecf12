"""The switch's queue in the explicit encoding: one job, applying DESIGN.md §3 to one
message position (an UPDATE, a PULL or nothing) in OLAF or FIFO mode, as Z3 terms.

A mixin of ``model.AomModel``, whose state (``pos``, ``queued``, ``single``, ``inb``,
``count``, ``occ``) it reads and replaces message by message.
"""

from __future__ import annotations

from typing import Any

import z3

from worker_transport.protocol import Outcome

CODE_DATA = 5
CODE_EMPTY = 6
CODE_IDLE = 7


def _code(value: int) -> Any:
    return z3.BitVecVal(int(value), 3)


class _Step:
    """Symbolic terms of one message position, kept for the counterexample."""

    __slots__ = ("ev", "code", "occ", "choice", "own", "credit", "inb_before", "pos0")

    def __init__(self) -> None:
        self.ev: Any = None
        self.code: Any = None
        self.occ: Any = None
        self.choice: Any = None
        self.own: Any = z3.BoolVal(False)
        self.credit: list[Any] = []
        self.inb_before: list[Any] = []
        self.pos0: Any = None


class QueueEncoding:
    """One message position through the queue (``AomModel``'s state), as Z3 terms."""

    def _message(self, t: int, j: int, ev: Any, is_w: list[Any], received: list[list[Any]]) -> _Step:
        dep, s = self.dep, self.solver
        step = _Step()
        step.ev = ev
        step.pos0 = self.pos[0]
        step.inb_before = list(self.inb)
        is_pull = ev == self.PULL
        nonempty = self.occ != 0
        pop = z3.And(is_pull, nonempty)
        can_enq = z3.ULT(self.occ, self.K)
        one_o = self._const(1, self.wO)
        choice = None
        if dep.mode == "olaf":
            if self.reward_choices:
                choice = self._bv(f"choice_{t}_{j}", 2)
                s.add(z3.ULE(choice, 2))
            code, enq_any = self._olaf_message(t, j, ev, is_w, pop, can_enq, choice, received,
                                               step)
        else:
            code, enq_any = self._fifo_message(t, j, ev, is_w, pop, can_enq, received, step)
        occ = z3.If(pop, self.occ - one_o, z3.If(enq_any, self.occ + one_o, self.occ))
        self.occ = self._fresh(f"occ_{t}_{j}", occ)
        step.code = self._fresh(f"code_{t}_{j}", code)
        step.occ = self.occ
        step.choice = choice
        return step

    def _shift_or_write(self, pop: Any, write: Any, value: Any, tag: str) -> None:
        new = []
        for k in range(self.K):
            nxt = self.pos[k + 1] if k + 1 < self.K else self._const(0, self.pos_width)
            new.append(self._fresh(
                f"pos_{tag}_{k}",
                z3.If(pop, nxt, z3.If(z3.And(write, self.occ == k), value, self.pos[k])),
            ))
        self.pos = new

    def _olaf_message(self, t: int, j: int, ev: Any, is_w: list[Any], pop: Any, can_enq: Any,
                      choice: Any, received: list[list[Any]], step: _Step) -> tuple[Any, Any]:
        dep = self.dep
        code = z3.If(ev == self.PULL, z3.If(pop, _code(CODE_DATA), _code(CODE_EMPTY)), _code(CODE_IDLE))
        enq_any = []
        owns = []
        head = [z3.And(pop, self.pos[0] == k) for k in range(dep.clusters)]
        new_inb = list(self.inb)
        cval = self._const(0, self.pos_width)
        for k, mem in enumerate(self.members):
            send_k = z3.Or([is_w[u] for u in mem])
            own = z3.And(self.single[k], z3.Or([z3.And(is_w[u], self.inb[u]) for u in mem]))
            owns.append(z3.And(send_k, self.queued[k], own))
            hit = z3.And(send_k, self.queued[k])
            if choice is None:
                repl = z3.And(hit, own)
                merge = z3.And(hit, z3.Not(own))
                drop = z3.BoolVal(False)
            else:
                repl = z3.And(hit, z3.Or(own, choice == 1))
                merge = z3.And(hit, z3.Not(own), choice == 0)
                drop = z3.And(hit, z3.Not(own), choice == 2)
                if dep.rewards == "unbeaten" and self.target is not None:
                    # The worker under test is never out-rewarded: its update is not
                    # dropped for its reward, and no other worker's update replaces a
                    # slot that holds its contribution.
                    other = z3.And(hit, z3.Not(own))
                    for u in mem:
                        self.solver.add(
                            z3.Implies(z3.And(other, self.target[u], is_w[u]), choice != 2),
                            z3.Implies(z3.And(other, self.target[u], z3.Not(is_w[u]),
                                              self.inb[u]), choice != 1))
            enq = z3.And(send_k, z3.Not(self.queued[k]), can_enq)
            full = z3.And(send_k, z3.Not(self.queued[k]), z3.Not(can_enq))
            enq_any.append(enq)
            cval = z3.If(send_k, self._const(k, self.pos_width), cval)
            code = z3.If(enq, _code(Outcome.ENQUEUED), code)
            code = z3.If(merge, _code(Outcome.MERGED), code)
            code = z3.If(repl, _code(Outcome.REPLACED), code)
            code = z3.If(drop, _code(Outcome.DROPPED_REWARD), code)
            code = z3.If(full, _code(Outcome.DROPPED_FULL), code)
            for u in mem:
                # The PS credits every worker whose bit is set, aliases included.
                bit = z3.Or([self.inb[v] for v in dep.aliases(u)])
                received[u].append(z3.And(head[k], bit))
                new_inb[u] = z3.If(
                    is_w[u],
                    z3.Or(enq, merge, repl, self.inb[u]),
                    z3.If(z3.Or(repl, head[k]), False, self.inb[u]),
                )
            self.queued[k] = self._fresh(
                f"queued_{t}_{j}_{k}", z3.If(enq, True, z3.If(head[k], False, self.queued[k]))
            )
            self.single[k] = self._fresh(
                f"single_{t}_{j}_{k}",
                z3.If(z3.Or(enq, repl), True, z3.If(merge, False, self.single[k])),
            )
        self.inb = [self._fresh(f"inb_{t}_{j}_{u}", x) for u, x in enumerate(new_inb)]
        any_enq = z3.Or(enq_any)
        self._shift_or_write(pop, any_enq, cval, f"{t}_{j}")
        step.credit = [r[-1] for r in received]
        step.own = z3.Or(owns)
        return code, any_enq

    def _fifo_message(self, t: int, j: int, ev: Any, is_w: list[Any], pop: Any, can_enq: Any,
                      received: list[list[Any]], step: _Step) -> tuple[Any, Any]:
        dep = self.dep
        is_send = z3.ULT(ev, self.PULL)
        enq = z3.And(is_send, can_enq)
        code = z3.If(ev == self.PULL, z3.If(pop, _code(CODE_DATA), _code(CODE_EMPTY)), _code(CODE_IDLE))
        code = z3.If(enq, _code(Outcome.ENQUEUED), code)
        code = z3.If(z3.And(is_send, z3.Not(can_enq)), _code(Outcome.DROPPED_FULL), code)
        head = self.pos[0]
        for u in range(dep.workers):
            received[u].append(z3.And(pop, z3.Or([head == v for v in dep.aliases(u)])))
        if not self.always_forced:
            one = self._const(1, self.wO)
            for k, mem in enumerate(self.members):
                in_k = z3.Or([head == v for v in mem])
                send_k = z3.Or([is_w[u] for u in mem])
                self.count[k] = self._fresh(
                    f"count_{t}_{j}_{k}",
                    z3.If(z3.And(pop, in_k), self.count[k] - one,
                          z3.If(z3.And(enq, send_k), self.count[k] + one, self.count[k])),
                )
        self._shift_or_write(pop, enq, ev, f"{t}_{j}")
        step.credit = [r[-1] for r in received]
        return code, enq
