"""The program loaded and run: statements, tables (const entries in priority order,
run-time exact and lpm entries), controls with copy-in/copy-out, parsers and
deparsers, and Tofino's passes (resubmit once, recirculation through port 68)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.p4sim.errors import P4SimError, ParserError
from tests.p4sim.externs import Externs
from tests.p4sim.preprocess import preprocess, tokenize
from tests.p4sim.syntax import Control, ParserDecl, parse_program
from tests.p4sim.tna import TNA_DROP_PORT, TNA_RECIRC_PORTS, TNA_TYPES
from tests.p4sim.values import Header, Stack, Struct, T, Val, Var


class Goto(Exception):
    def __init__(self, state: str) -> None:
        self.state = state


@dataclass
class Packet:
    data: bytes
    pos: int = 0
    resubmit: bytes | None = None
    registers_used: set[str] = field(default_factory=set)


class Switch(Externs):
    """The program loaded, with its register and counter state, one packet at a time."""

    def __init__(self, main: Path, defines: dict[str, str] | None = None, seed: int = 0,
                 model_resubmit: bool = True) -> None:
        macro = dict(defines or {})
        self.program = parse_program(tokenize(preprocess(main, macro), macro))
        if self.program.arch != "tna":
            raise P4SimError(f"{main}: not a TNA program (Switch(pipe) main)")
        self.program.types.update(TNA_TYPES)
        self.consts: dict[str, Val] = {"PORT_METADATA_SIZE": Val(64, T(32))}
        for name, expr in self.program.consts.items():
            self.consts[name] = self.eval(expr, {})
        # A cell is a number of its Register's T (an int<32> -1 is -1).
        self.registers: dict[str, list[int]] = {}
        self.register_types: dict[str, T] = {}
        self.index_types: dict[str, T] = {}
        self.counters: dict[str, list[int]] = {}
        self.rng = random.Random(seed)
        # False: one ingress pass per packet, as P4Testgen's Tofino target models it (it sets
        # resubmit_flag to 0 and implements no Resubmit.emit): a packet its first pass
        # resubmits comes out nowhere, so that its tests replay against the same model.
        self.model_resubmit = model_resubmit
        self.resubmits = 0
        self.recirculations = 0
        self.entries: dict[str, list[tuple[tuple[int, ...], str, list[int]]]] = {}
        self.defaults: dict[str, tuple[str, list[int]]] = {}
        for name in self.program.pipeline:
            ctl = self.program.controls.get(name)
            for inst, (kind, args) in ctl.instances.items() if ctl else ():
                self.allocate(f"{ctl.name}.{inst}", kind, args)

    def add_entry(self, table: str, key: tuple[Any, ...], action: str, args: list[int]) -> None:
        """Install an entry: exact keys as ints, lpm keys as (value, prefix length), e.g.
        ("OlafIngress.util_lookup", (3,), "set_util", [191])."""
        self.entries.setdefault(table, []).append((key, action, args))

    def set_default(self, table: str, action: str, args: list[int]) -> None:
        """Replace a table's default action, as a controller modifies a non-const default
        entry (e.g. ("OlafIngress.olaf_config", "set_config", [...]) at run time)."""
        self.defaults[table] = (action, args)

    @staticmethod
    def match(keys: list[tuple[Val, str]], want: tuple[Any, ...]) -> int | None:
        """None if the entry does not match; else its priority (longest prefix first).
        A ternary key takes (value, mask)."""
        score = 0
        for (value, kind), w in zip(keys, want, strict=True):
            if kind == "exact":
                if value.v != w:
                    return None
            elif kind == "lpm":
                prefix, length = w
                shift = value.t.width - length
                if value.v >> shift != prefix >> shift:
                    return None
                score += length
            elif kind == "ternary":
                wanted, mask = w
                if (value.v ^ wanted) & mask:
                    return None
            else:
                raise P4SimError(f"match kind {kind} is not supported")
        return score

    def keyset_matches(self, keys: list[tuple[Any, str]], keyset: list[Any], env: dict[str, Any]) -> bool:
        """A const entry's keyset against the key values: `_` (or `default`) matches
        anything, `value &&& mask` a ternary key's masked bits, anything else equality."""
        for (value, kind), element in zip(keys, keyset, strict=True):
            if element in (("name", "_"), ("name", "default")):
                continue
            if element[0] == "bin" and element[1] == "&&&":
                if kind != "ternary":
                    raise P4SimError(f"a mask on a {kind} key")
                wanted = self.as_int(self.eval(element[2], env))
                mask = self.as_int(self.eval(element[3], env))
                if (self.as_int(value) ^ wanted) & mask:
                    return False
                continue
            if kind not in ("exact", "ternary"):
                raise P4SimError(f"const entries on a {kind} key")
            if self.as_int(value) != self.as_int(self.eval(element, env)):
                return False
        return True

    # -- calls
    def call(self, e: Any, env: dict[str, Any]) -> Any:
        fn, args = e[1], e[2]
        if fn[0] == "name":
            return self.call_function(fn[1], args, env)
        if fn[0] != "member":
            raise P4SimError(f"call of {fn!r}")
        method = fn[2]
        if method == "apply":
            return self.apply_member(fn[1], args, env)
        if fn[1][0] == "name" and fn[1][1] in env.get("__instances__", {}):
            return self.call_extern(env["__instances__"][fn[1][1]], method, args, env)
        target = self.eval(fn[1], env)
        if isinstance(target, Header):
            if method == "isValid":
                return target.valid
            if method == "setValid":
                target.set_valid()
                return None
            if method == "setInvalid":
                target.set_invalid()
                return None
        if isinstance(target, Packet) and method == "extract":
            return self.extract(args[0], target, env)
        if isinstance(target, Packet) and method == "advance":
            target.pos += self.eval(args[0], env).v // 8
            if target.pos > len(target.data):
                raise ParserError("PacketTooShort")
            return None
        if isinstance(target, dict) and target.get("__packet_out__") and method == "emit":
            return self.emit(self.eval(args[0], env), target)
        raise P4SimError(f"unsupported method {method} on {target!r}")

    def call_function(self, name: str, args: list[Any], env: dict[str, Any]) -> None:
        if name in env.get("__actions__", {}):
            self.run_action(name, [self.eval(a, env) for a in args], env)
        else:
            raise P4SimError(f"unsupported function {name}")

    def run_action(self, name: str, values: list[Any], env: dict[str, Any]) -> None:
        if name == "NoAction" and not values:
            return
        params, body = env["__actions__"][name]
        local = dict(env)
        for p, v in zip(params, values, strict=True):
            self.check_type(v, p.type)
            local[p.name] = Var(Val(p.type.norm(self.as_int(v)), p.type))
        self.run(body, local)

    def apply_member(self, target: Any, args: list[Any], env: dict[str, Any]) -> Any:
        name = target[1]
        tables = env.get("__tables__", {})
        if name in tables:
            props = tables[name]
            if props.get("const_entries"):
                # The first matching entry wins: for a ternary table, the order is the priority.
                keys = [(self.eval(k, env), kind) for k, kind in props["key"]]
                for keyset, action, arg_exprs in props["const_entries"]:
                    elements = keyset[1] if keyset[0] == "tuple" else [keyset]
                    if self.keyset_matches(keys, elements, env):
                        self.run_action(action, [self.eval(a, env) for a in arg_exprs], env)
                        return {"hit": True, "miss": False}
            entries = self.entries.get(f"{env['__path__']}.{name}", [])
            if entries:
                keys = [(self.eval(k, env), kind) for k, kind in props["key"]]
                best: tuple[int, str, list[int]] | None = None
                for want, action, values in entries:
                    score = self.match(keys, want)
                    if score is not None and (best is None or score > best[0]):
                        best = (score, action, values)
                if best is not None:
                    self.run_action(best[1], [Val(v, T(None)) for v in best[2]], env)
                    return {"hit": True, "miss": False}
            written = self.defaults.get(f"{env['__path__']}.{name}")
            if written is not None:
                self.run_action(written[0], [Val(v, T(None)) for v in written[1]], env)
                return {"hit": False, "miss": True}
            default = props["default_action"]
            self.run_action(default[1][1], [self.eval(a, env) for a in default[2]], env)
            return {"hit": False, "miss": True}
        inst = env["__instances__"].get(name)
        if inst and inst[0] == "control":
            return self.run_control(self.program.controls[inst[1]], args, env, inst[2])
        raise P4SimError(f"apply of {name}")

    def run_control(
        self, ctl: Control, args: list[Any], caller: dict[str, Any], path: str | None = None
    ) -> None:
        path = path or ctl.name
        instances = {}
        for n, (k, a) in ctl.instances.items():
            if k == "control":
                instances[n] = ("control", a[0], f"{path}.{n}")
            else:
                self.allocate(f"{path}.{n}", k, a)
                instances[n] = (k, f"{path}.{n}", a)
        env: dict[str, Any] = {
            "__actions__": ctl.actions,
            "__tables__": ctl.tables,
            "__instances__": instances,
            "__path__": path,
            "__packet__": caller["__packet__"],
        }
        copy_back = []
        for p, a in zip(ctl.params, args, strict=True):
            if isinstance(a, tuple):  # an expression from a sub-control call
                value = self.eval(a, caller) if p.direction != "out" else self.new(p.type)
                if isinstance(value, Val):
                    env[p.name] = Var(self.coerce(value, self.new(p.type)))
                    if p.direction in ("out", "inout"):
                        copy_back.append((a, p.name))
                elif isinstance(value, bool):
                    env[p.name] = Var(value)
                    if p.direction in ("out", "inout"):
                        copy_back.append((a, p.name))
                else:
                    env[p.name] = value  # headers and structs: by reference
            else:
                env[p.name] = a
        self.run(ctl.body, env)
        for target, name in copy_back:
            self.assign(target, env[name].val, caller)

    # -- statements
    def run(self, stmts: list[Any], env: dict[str, Any]) -> None:
        for s in stmts:
            self.step(s, env)

    def step(self, s: Any, env: dict[str, Any]) -> None:
        kind = s[0]
        if kind == "block":
            self.run(s[1], dict(env))
        elif kind == "decl":
            cell = self.new(s[1])
            if s[3] is not None:
                cell = self.coerce(self.eval(s[3], env), cell)
            env[s[2]] = Var(cell)
        elif kind == "assign":
            self.assign(s[1], self.eval(s[2], env), env)
        elif kind == "expr":
            self.eval(s[1], env)
        elif kind == "if":
            cond = self.eval(s[1], env)
            if not isinstance(cond, bool):
                raise P4SimError(f"condition is not bool: {s[1]!r}")
            if cond:
                self.step(s[2], dict(env))
            elif s[3] is not None:
                self.step(s[3], dict(env))
        elif kind == "select":
            keys = [self.eval(k, env) for k in s[1]]
            for keyset, state in s[2]:
                if keyset is None:
                    raise Goto(state)
                want = self.eval(keyset, env)
                want = want if isinstance(want, list) else [want]
                if all(k.t.norm(k.v) == k.t.norm(w.v) for k, w in zip(keys, want, strict=True)):
                    raise Goto(state)
            raise ParserError("NoMatch")
        elif kind == "goto":
            raise Goto(s[1])
        else:
            raise P4SimError(f"unsupported statement {kind}")

    # -- parser / deparser
    def extract(self, target: Any, packet: Packet, env: dict[str, Any]) -> None:
        if target[0] == "member" and target[2] == "next":
            stack = self.eval(target[1], env)
            if stack.next_index >= len(stack.elements):
                raise ParserError("StackOutOfBounds")
            header = stack.elements[stack.next_index]
            self.fill(header, packet)
            stack.next_index += 1
        else:
            self.fill(self.eval(target, env), packet)

    def fill(self, header: Header, packet: Packet) -> None:
        width = sum(t.width for t in header.fields.values())
        size = width // 8
        if packet.pos + size > len(packet.data):
            raise ParserError("PacketTooShort")
        acc = int.from_bytes(packet.data[packet.pos : packet.pos + size], "big")
        packet.pos += size
        header.set_valid()
        shift = width
        for name, t in header.fields.items():
            shift -= t.width
            header.values[name] = t.norm(acc >> shift)

    def emit(self, item: Any, out: dict[str, Any]) -> None:
        if isinstance(item, Struct):
            for member in item.values():
                if isinstance(member, Header | Stack | Struct):
                    self.emit(member, out)
            return
        headers = item.elements if isinstance(item, Stack) else [item]
        for h in headers:
            if h.valid:
                acc, width = h.bits()
                out["bytes"] += acc.to_bytes(width // 8, "big")

    def process(self, frame: bytes, ingress_port: int = 0) -> list[tuple[int, bytes]]:
        """Run one frame through the pipeline; returns [(egress_port, frame)], empty if dropped."""
        return self.process_tna(frame, ingress_port)

    # -- TNA -----------------------------------------------------------------------------------
    def run_parser(self, parser: ParserDecl, packet: Packet, objects: list[Any]) -> str:
        env: dict[str, Any] = {parser.params[0].name: packet, "__packet__": packet}
        for p, obj in zip(parser.params[1:], objects, strict=True):
            env[p.name] = obj
        state = "start"
        try:
            while state != "accept":
                if state == "reject":
                    raise ParserError("reject")
                try:
                    self.run(parser.states[state], dict(env))
                    raise P4SimError(f"state {state} has no transition")
                except Goto as g:
                    state = g.state
        except ParserError as err:
            return err.name
        return "NoError"

    def deparse(self, deparser: Control, packet: Packet, args: list[Any]) -> bytes:
        out: dict[str, Any] = {"__packet_out__": True, "bytes": b""}
        self.run_control(deparser, [out, *args], {"__packet__": packet})
        return out["bytes"] + packet.data[packet.pos :]

    def process_tna(self, frame: bytes, ingress_port: int) -> list[tuple[int, bytes]]:
        """Tofino, one packet at a time: all its passes (resubmit, recirculation) run
        before the next packet arrives."""
        return [out for _, out in self.process_tna_interleaved([(frame, ingress_port)], window=1)]

    def process_tna_interleaved(
        self, frames: list[tuple[bytes, int]], window: int
    ) -> list[tuple[int, tuple[int, bytes]]]:
        """Tofino with up to ``window`` packets in flight: passes run in one FIFO, so a
        packet's second pass (after resubmit) can come after other packets' first passes,
        which then find the queue locked and recirculate. Returns (packet number, output)."""
        outputs: list[tuple[int, tuple[int, bytes]]] = []
        arrivals = list(enumerate(frames))
        passes: list[tuple[int, bytes, int, bytes | None]] = []
        in_flight: dict[int, int] = {}
        budget = 64 * (len(frames) + 1) * max(window, 1)
        while arrivals or passes:
            while arrivals and len(in_flight) < window:
                n, (frame, port) = arrivals.pop(0)
                in_flight[n] = 0
                passes.append((n, frame, port, None))
            n, original, port, resubmit = passes.pop(0)
            budget -= 1
            if budget < 0:
                raise P4SimError("packets keep looping (resubmit/recirculation)")
            result = self.tna_pass(original, port, resubmit)
            if result[0] == "out":
                outputs.append((n, result[1]))
                in_flight.pop(n)
            elif result[0] == "drop":
                in_flight.pop(n)
            else:
                passes.append((n, *result[1]))
        return outputs

    def tna_pass(self, original: bytes, port: int, resubmit: bytes | None) -> tuple[str, Any]:
        """One traversal of ingress (and egress unless resubmitted or dropped).

        Returns ("out", (port, frame)), ("drop", None) or ("again", (frame, port, resubmit)).
        """
        ig_parser, ingress, ig_deparser, eg_parser, egress, eg_deparser = (
            self.program.parsers.get(n) or self.program.controls[n] for n in self.program.pipeline
        )
        intr = self.new(("named", "ingress_intrinsic_metadata_t"))
        intr.set_valid()
        intr.values.update(resubmit_flag=int(resubmit is not None), ingress_port=port)
        acc, width = intr.bits()
        prefix = acc.to_bytes(width // 8, "big") + (resubmit if resubmit is not None else bytes(8))
        packet = Packet(prefix + original)
        hdr = self.new(ig_parser.params[1].type)
        md = self.new(ig_parser.params[2].type)
        ig_intr_md = self.new(ig_parser.params[3].type)
        error = self.run_parser(ig_parser, packet, [hdr, md, ig_intr_md])
        prsr = self.new(("named", "ingress_intrinsic_metadata_from_parser_t"))
        prsr["parser_err"] = Val(0 if error == "NoError" else 1, T(16))
        dprsr = self.new(("named", "ingress_intrinsic_metadata_for_deparser_t"))
        tm = self.new(("named", "ingress_intrinsic_metadata_for_tm_t"))
        self.run_control(ingress, [hdr, md, ig_intr_md, prsr, dprsr, tm], {"__packet__": packet})
        out_frame = self.deparse(ig_deparser, packet, [hdr, md, dprsr])
        if dprsr["resubmit_type"].v != 0:
            if not self.model_resubmit:
                # Resubmitted: this pass sends nothing out (P4Testgen's model ends here).
                return "drop", None
            if resubmit is not None:
                raise P4SimError("Tofino resubmits a packet at most once")
            if packet.resubmit is None or len(packet.resubmit) != 8:
                raise P4SimError("resubmit without an 8-byte resubmit header")
            self.resubmits += 1
            return "again", (original, port, packet.resubmit)
        egress_port = tm["ucast_egress_port"].v
        if dprsr["drop_ctl"].v & 1 or egress_port == TNA_DROP_PORT:
            return "drop", None
        eintr = self.new(("named", "egress_intrinsic_metadata_t"))
        eintr.set_valid()
        eintr.values["egress_port"] = egress_port
        acc, width = eintr.bits()
        epacket = Packet(acc.to_bytes(width // 8, "big") + out_frame)
        ehdr = self.new(eg_parser.params[1].type)
        emd = self.new(eg_parser.params[2].type)
        eg_intr_md = self.new(eg_parser.params[3].type)
        self.run_parser(eg_parser, epacket, [ehdr, emd, eg_intr_md])
        eprsr = self.new(("named", "egress_intrinsic_metadata_from_parser_t"))
        edprsr = self.new(("named", "egress_intrinsic_metadata_for_deparser_t"))
        oport = self.new(("named", "egress_intrinsic_metadata_for_output_port_t"))
        self.run_control(egress, [ehdr, emd, eg_intr_md, eprsr, edprsr, oport], {"__packet__": epacket})
        sent = self.deparse(eg_deparser, epacket, [ehdr, emd, edprsr])
        if edprsr["drop_ctl"].v & 1:
            return "drop", None
        if egress_port in TNA_RECIRC_PORTS:
            self.recirculations += 1
            return "again", (sent, egress_port, None)
        return "out", (egress_port, sent)
