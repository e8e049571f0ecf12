"""Expressions and assignments on run-time values, with the type rules p4c enforces
(no implicit width or sign change, bool-only logic, saturating arithmetic)."""

from __future__ import annotations

from typing import Any

from tests.p4sim.errors import P4SimError
from tests.p4sim.syntax import Program
from tests.p4sim.values import BOOL, Header, Stack, Struct, T, Val, Var


class Evaluator:
    """Values of expressions in an environment (name -> Var, Header, Struct...). Calls
    are the Switch's (they run actions, tables and externs)."""

    program: Program
    consts: dict[str, Val]

    def call(self, e: Any, env: dict[str, Any]) -> Any:
        raise NotImplementedError  # Switch.call

    # -- instances of types
    def new(self, t: Any) -> Any:
        if isinstance(t, T):
            return Val(0, t)
        if t == BOOL:
            return False
        if t[0] == "stack":
            return Stack([self.new(t[1]) for _ in range(t[2])])
        kind, fields = self.program.types[t[1]]
        if kind == "header":
            return Header({name: ft for ft, name in fields})
        s = Struct()
        for ft, name in fields:
            s[name] = self.new(ft)
        return s

    # -- expressions
    def lookup(self, name: str, env: dict[str, Any]) -> Any:
        if name in env:
            v = env[name]
            return v.val if isinstance(v, Var) else v
        if name in self.consts:
            return self.consts[name]
        raise P4SimError(f"unknown name {name}")

    def eval(self, e: Any, env: dict[str, Any]) -> Any:
        kind = e[0]
        if kind == "num":
            return e[1]
        if kind == "bool":
            return e[1]
        if kind == "name":
            return self.lookup(e[1], env)
        if kind == "member":
            if e[1] == ("name", "error"):
                return e[2]
            base = self.eval(e[1], env)
            if isinstance(base, Header):
                return base.get(e[2])
            if isinstance(base, Struct):
                return base[e[2]]
            if isinstance(base, dict) and "hit" in base:
                return base[e[2]]
            raise P4SimError(f"member {e[2]} of {base!r}")
        if kind == "index":
            stack = self.eval(e[1], env)
            return stack.elements[self.eval(e[2], env).v]
        if kind == "slice":
            v = self.eval(e[1], env)
            hi, lo = self.eval(e[2], env).v, self.eval(e[3], env).v
            t = T(hi - lo + 1)
            return Val(t.norm(v.v >> lo), t)
        if kind == "cast":
            v = self.eval(e[2], env)
            t = e[1]
            typed = isinstance(v, Val) and v.t.width is not None
            if typed and v.t.signed != t.signed and v.t.width != t.width:
                raise P4SimError(f"cast from {v.t} to {t} changes sign and width at once: p4c rejects it")
            return Val(t.norm(v.v), t)
        if kind == "un":
            v = self.eval(e[2], env)
            if e[1] == "!":
                if not isinstance(v, bool):
                    raise P4SimError("! on a non-bool operand: p4c rejects it")
                return not v
            if e[1] == "~":
                return Val(v.t.norm(~v.v), v.t)
            return Val(v.t.norm(-v.v), v.t)
        if kind == "bin":
            return self.binary(e[1], e[2], e[3], env)
        if kind == "call":
            return self.call(e, env)
        if kind in ("tuple", "list"):
            return [self.eval(x, env) for x in e[1]]
        raise P4SimError(f"cannot evaluate {e!r}")

    def binary(self, op: str, le: Any, re_: Any, env: dict[str, Any]) -> Any:
        if op in ("&&", "||"):
            # p4c: both operands of && and || must be bool (no C-style truthiness).
            left = self.eval(le, env)
            if not isinstance(left, bool):
                raise P4SimError(f"{op} on a non-bool operand: p4c rejects it")
            if (op == "&&") != left:
                return left
            right = self.eval(re_, env)
            if not isinstance(right, bool):
                raise P4SimError(f"{op} on a non-bool operand: p4c rejects it")
            return right
        a, b = self.eval(le, env), self.eval(re_, env)
        if isinstance(a, str) or isinstance(b, str) or isinstance(a, bool) or isinstance(b, bool):
            if type(a) is not type(b):
                raise P4SimError(f"{op} between {a!r} and {b!r}: p4c rejects mixed kinds")
            if op == "==":
                return a == b
            if op == "!=":
                return a != b
            raise P4SimError(f"{op} on {a!r}, {b!r}")
        if op == "++":
            t = T(a.t.width + b.t.width)
            return Val((T(a.t.width).norm(a.v) << b.t.width) | T(b.t.width).norm(b.v), t)
        if op in ("<<", ">>"):
            if b.t.signed:
                raise P4SimError(f"shift by a signed amount ({b.t}): p4c rejects it")
            if a.t.width is None and b.t.width is not None:
                raise P4SimError("shift of an untyped literal by a run-time amount: p4c needs its width")
            t = a.t
            return Val(t.norm(a.v << b.v if op == "<<" else a.v >> b.v), t)
        t = a.t if a.t.width is not None else b.t
        if a.t.width is not None and b.t.width is not None and a.t != b.t:
            raise P4SimError(f"{op} between {a.t} and {b.t}: p4c would reject it")
        x, y = a.v, b.v
        if op in ("==", "!=", "<", ">", "<=", ">="):
            return {"==": x == y, "!=": x != y, "<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op]
        if op in ("|+|", "|-|"):
            assert t.width is not None
            r = x + y if op == "|+|" else x - y
            half = 1 << (t.width - 1)
            lo, hi = (-half, half - 1) if t.signed else (0, (1 << t.width) - 1)
            return Val(min(max(r, lo), hi), t)
        if op in ("&", "|", "^"):
            r = {"&": x & y, "|": x | y, "^": x ^ y}[op]
            return Val(r if t.signed else t.norm(r), t)
        r = {"+": x + y, "-": x - y, "*": x * y}[op]
        return Val(t.norm(r), t)

    # -- lvalues
    def assign(self, target: Any, value: Any, env: dict[str, Any]) -> None:
        kind = target[0]
        if kind == "name":
            cell = env[target[1]]
            if isinstance(cell, Var):
                cell.val = self.coerce(value, cell.val)
            else:
                raise P4SimError(f"cannot assign to {target[1]}")
        elif kind == "member":
            base = self.eval(target[1], env)
            if isinstance(base, Header):
                if not base.valid:
                    return  # a write to an invalid header is lost
                self.check_type(value, base.fields[target[2]])
                base.values[target[2]] = base.fields[target[2]].norm(self.as_int(value))
            elif isinstance(base, Struct):
                base[target[2]] = self.coerce(value, base[target[2]])
            else:
                raise P4SimError(f"cannot assign member of {base!r}")
        else:
            raise P4SimError(f"cannot assign to {target!r}")

    def as_int(self, value: Any) -> int:
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, Val):
            return value.v
        raise P4SimError(f"not a scalar: {value!r}")

    def coerce(self, value: Any, old: Any) -> Any:
        if isinstance(old, Val):
            if isinstance(value, bool):
                raise P4SimError(f"bool assigned to {old.t}: p4c needs a cast")
            self.check_type(value, old.t)
            return Val(old.t.norm(self.as_int(value)), old.t)
        if isinstance(old, bool) and not isinstance(value, bool):
            raise P4SimError(f"{value!r} assigned to a bool: p4c needs a bool")
        return value

    @staticmethod
    def check_type(value: Any, t: T) -> None:
        """p4c converts only untyped literals implicitly: any other width or sign change
        needs a cast, so the interpreter refuses it too."""
        if isinstance(value, Val) and value.t.width is not None and value.t != t:
            raise P4SimError(f"implicit conversion from {value.t} to {t}: p4c would reject it")
