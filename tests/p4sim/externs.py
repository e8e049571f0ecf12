"""TNA's externs: Register and RegisterAction (one access per Register per pass, an
index that is a field, a constant or a Hash output, as bf-p4c demands), Counter, Hash
(IDENTITY), Random, Checksum and Resubmit."""

from __future__ import annotations

import random
from typing import Any

from tests.p4sim.errors import P4SimError
from tests.p4sim.evaluate import Evaluator
from tests.p4sim.tna import TNA_EXTERNS
from tests.p4sim.values import T, Val, Var


class Externs(Evaluator):
    """The state behind the externs (register cells, counters, the random source) and
    their methods. RegisterAction bodies are run by the Switch's statements."""

    registers: dict[str, list[int]]
    register_types: dict[str, T]
    index_types: dict[str, T]
    counters: dict[str, list[int]]
    rng: random.Random

    def run(self, stmts: list[Any], env: dict[str, Any]) -> None:
        raise NotImplementedError  # Switch.run

    def allocate(self, key: str, kind: str, args: list[Any]) -> None:
        """Create the state of a register or counter instance the first time it is seen."""
        if key in self.registers or key in self.counters:
            return
        if kind == "Register":
            targs, cargs, _ = args
            t = targs[0]
            init = self.as_int(self.eval(cargs[1], {})) if len(cargs) > 1 else 0
            self.registers[key] = [t.norm(init)] * self.eval(cargs[0], {}).v
            self.register_types[key] = t
            self.index_types[key] = targs[1]
        elif kind == "Counter":
            self.counters[key] = [0] * self.eval(args[1][0], {}).v
            self.index_types[key] = args[0][1]

    def call_extern(self, inst: tuple[Any, ...], method: str, args: list[Any], env: dict[str, Any]) -> Any:
        kind, key = inst[0], inst[1]
        if kind in TNA_EXTERNS:
            return self.call_tna_extern(kind, key, inst[2], method, args, env)
        raise P4SimError(f"unsupported extern call {key}.{method}")

    def call_tna_extern(
        self, kind: str, key: str, decl: list[Any], method: str, args: list[Any], env: dict[str, Any]
    ) -> Any:
        targs, cargs, body = decl
        if kind == "RegisterAction" and method == "execute":
            reg = f"{env['__path__']}.{cargs[0][1]}"
            cells, t = self.registers[reg], self.register_types[reg]
            if (targs[0], targs[1]) != (t, self.index_types[reg]):
                raise P4SimError(f"RegisterAction<{targs[0]}, {targs[1]}> on {reg}: type arguments differ")
            if not self.plain_index(args[0], env):
                # bf-p4c: "The index is too complex for the primitive to be handled".
                raise P4SimError(
                    f"{reg}: index {args[0]!r} is too complex: Tofino wants a field, constant or Hash output"
                )
            index_val = self.eval(args[0], env)
            self.check_type(index_val, targs[1])
            index = index_val.v
            # One stateful ALU serves a Register, once per packet per pass: a second
            # RegisterAction on the same Register in the same pass cannot be placed.
            used = env["__packet__"].registers_used
            if reg in used:
                raise P4SimError(f"{reg} accessed twice in one pass: bf-p4c cannot place it")
            used.add(reg)
            if index >= len(cells):
                raise P4SimError(f"{reg}[{index}] out of bounds")
            params, stmts = body
            local = dict(env)
            local[params[0].name] = Var(Val(cells[index], t))
            if len(params) > 1:
                local[params[1].name] = Var(self.new(params[1].type))
            self.run(stmts, local)
            cells[index] = t.norm(self.as_int(local[params[0].name].val))
            return local[params[1].name].val if len(params) > 1 else None
        if kind == "Counter" and method == "count":
            index_val = self.eval(args[0], env)
            self.check_type(index_val, self.index_types[key])
            index = index_val.v
            self.counters[key][index] += 1
            return None
        if kind == "Hash" and method == "get":
            # Only IDENTITY: the fields concatenated, cut to the output width, as Tofino's
            # hash unit delivers them.
            if cargs[0] != ("member", ("name", "HashAlgorithm_t"), "IDENTITY"):
                raise P4SimError(f"{key}: only HashAlgorithm_t.IDENTITY is modelled")
            acc = 0
            for v in self.eval(args[0], env):
                acc = (acc << v.t.width) | (self.as_int(v) & ((1 << v.t.width) - 1))
            t = targs[0]
            return Val(t.norm(acc), t)
        if kind == "Random" and method == "get":
            t = targs[0]
            return Val(self.rng.getrandbits(t.width), t)
        if kind == "Checksum" and method == "update":
            return Val(self.csum16(args[0][1], env), T(16))
        if kind == "Resubmit" and method == "emit":
            header = self.eval(args[0], env)
            acc, width = header.bits()
            env["__packet__"].resubmit = acc.to_bytes(width // 8, "big")
            return None
        raise P4SimError(f"unsupported {kind}.{method}")

    @staticmethod
    def plain_index(e: Any, env: dict[str, Any]) -> bool:
        """A stateful ALU's address comes from the hash/ixbar: a constant, a field (or a slice
        of one), a control parameter or a Hash.get(), never arithmetic on them."""
        kind = e[0]
        if kind in ("num", "name"):
            return True
        if kind == "slice":
            return Externs.plain_index(e[1], env)
        if kind == "member":
            return e[1][0] in ("name", "member", "index") and Externs.plain_index(e[1], env)
        if kind == "index":
            return e[2][0] == "num" and Externs.plain_index(e[1], env)
        if kind == "call":
            fn = e[1]
            instances = env.get("__instances__", {})
            return (
                fn[0] == "member"
                and fn[2] == "get"
                and fn[1][0] == "name"
                and instances.get(fn[1][1], ("",))[0] == "Hash"
            )
        return False

    def csum16(self, fields: list[Any], env: dict[str, Any]) -> int:
        acc, width = 0, 0
        for f in fields:
            v = self.eval(f, env)
            acc = (acc << v.t.width) | (v.v & ((1 << v.t.width) - 1))
            width += v.t.width
        data = acc.to_bytes(width // 8, "big")
        total = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
        while total >> 16:
            total = (total & 0xFFFF) + (total >> 16)
        return ~total & 0xFFFF
