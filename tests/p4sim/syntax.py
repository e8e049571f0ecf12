"""Parsing the P4 subset: types, expressions and statements into tuples, and the
top-level declarations (constants, headers, structs, parsers, controls with their
actions, tables and extern instances, the TNA Pipeline and Switch) into a Program."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.p4sim.errors import P4SimError
from tests.p4sim.tna import TNA_EXTERNS
from tests.p4sim.values import BOOL, T, num


class Cursor:
    def __init__(self, tokens: list[str]) -> None:
        self.toks = tokens
        self.i = 0

    def peek(self, k: int = 0) -> str:
        return self.toks[self.i + k] if self.i + k < len(self.toks) else ""

    def take(self, expect: str | None = None) -> str:
        tok = self.peek()
        if expect == ">" and tok == ">>":  # bit<16>> closes two type brackets
            self.toks[self.i] = ">"
            return ">"
        if expect is not None and tok != expect:
            context = " ".join(self.toks[max(0, self.i - 8) : self.i + 8])
            raise P4SimError(f"expected {expect!r}, got {tok!r} near: {context}")
        self.i += 1
        return tok

    def accept(self, tok: str) -> bool:
        if self.peek() == tok:
            self.i += 1
            return True
        return False


BINARY = [
    ["&&&"],  # value &&& mask: only in a ternary table's keyset
    ["||"],
    ["&&"],
    ["==", "!="],
    ["<", ">", "<=", ">="],
    ["|"],
    ["^"],
    ["&"],
    ["<<", ">>"],
    ["+", "-", "|+|", "|-|", "++"],
    ["*"],
]


TYPEDEFS = {"PortId_t": (9, False)}
"""Architecture typedefs the programs use (TNA's tofino1_base.p4)."""


def parse_type(c: Cursor) -> Any:
    name = c.take()
    if name in TYPEDEFS:
        return T(*TYPEDEFS[name])
    if name in ("bit", "int"):
        c.take("<")
        width = int(c.take(), 0)
        c.take(">")
        t: Any = T(width, name == "int")
    elif name == "bool":
        t = BOOL
    else:
        t = ("named", name)
    if c.peek() == "[":
        c.take("[")
        size = int(c.take(), 0)
        c.take("]")
        t = ("stack", t, size)
    return t


def is_type_start(c: Cursor, types: set[str]) -> bool:
    tok = c.peek()
    if tok in TYPEDEFS:
        return True
    if tok in ("bit", "int") and c.peek(1) == "<":
        return True
    return (tok == "bool" or tok in types) and re.fullmatch(r"[A-Za-z_]\w*", c.peek(1)) is not None


def parse_expr(c: Cursor, level: int = 0) -> Any:
    if level == len(BINARY):
        return parse_unary(c)
    left = parse_expr(c, level + 1)
    while c.peek() in BINARY[level]:
        op = c.take()
        left = ("bin", op, left, parse_expr(c, level + 1))
    return left


def parse_unary(c: Cursor) -> Any:
    tok = c.peek()
    if tok in ("!", "~", "-"):
        c.take()
        return ("un", tok, parse_unary(c))
    if tok == "(" and c.peek(1) in ("bit", "int") and c.peek(2) == "<":
        c.take("(")
        t = parse_type(c)
        c.take(")")
        return ("cast", t, parse_unary(c))
    return parse_postfix(c)


def parse_postfix(c: Cursor) -> Any:
    tok = c.take()
    if tok == "(":
        items = [parse_expr(c)]
        while c.accept(","):
            items.append(parse_expr(c))
        c.take(")")
        e: Any = items[0] if len(items) == 1 else ("tuple", items)
    elif tok == "{":
        items = []
        while not c.accept("}"):
            items.append(parse_expr(c))
            c.accept(",")
        e = ("list", items)
    elif re.fullmatch(r"\d.*", tok):
        e = ("num", num(tok))
    elif tok in ("true", "false"):
        e = ("bool", tok == "true")
    else:
        e = ("name", tok)
    while True:
        if c.accept("."):
            e = ("member", e, c.take())
        elif c.accept("["):
            index = parse_expr(c)
            if c.accept(":"):
                low = parse_expr(c)
                c.take("]")
                e = ("slice", e, index, low)
            else:
                c.take("]")
                e = ("index", e, index)
        elif c.peek() == "(":
            c.take("(")
            args = []
            while not c.accept(")"):
                args.append(parse_expr(c))
                c.accept(",")
            e = ("call", e, args)
        else:
            return e


def parse_block(c: Cursor, types: set[str]) -> list[Any]:
    c.take("{")
    stmts = []
    while not c.accept("}"):
        stmts.append(parse_stmt(c, types))
    return stmts


def parse_stmt(c: Cursor, types: set[str]) -> Any:
    tok = c.peek()
    if tok == "{":
        return ("block", parse_block(c, types))
    if tok == "if":
        c.take()
        c.take("(")
        cond = parse_expr(c)
        c.take(")")
        then = parse_stmt(c, types)
        other = parse_stmt(c, types) if c.accept("else") else None
        return ("if", cond, then, other)
    if tok == "for":
        # p4c 1.2.5.16 compiles a loop body once (P4-NOTES.md): refuse rather than iterate.
        raise P4SimError("for loops are not supported")
    if tok == "transition":
        c.take()
        if c.accept("select"):
            c.take("(")
            keys = [parse_expr(c)]
            while c.accept(","):
                keys.append(parse_expr(c))
            c.take(")")
            c.take("{")
            cases = []
            while not c.accept("}"):
                keyset = None if c.accept("default") else parse_expr(c)
                c.take(":")
                cases.append((keyset, c.take()))
                c.take(";")
            return ("select", keys, cases)
        target = c.take()
        c.take(";")
        return ("goto", target)
    if is_type_start(c, types):
        t = parse_type(c)
        name = c.take()
        init = parse_expr(c) if c.accept("=") else None
        c.take(";")
        return ("decl", t, name, init)
    e = parse_expr(c)
    if c.accept("="):
        value = parse_expr(c)
        c.take(";")
        return ("assign", e, value)
    c.take(";")
    return ("expr", e)


@dataclass
class Param:
    direction: str
    type: Any
    name: str


def parse_params(c: Cursor) -> list[Param]:
    c.take("(")
    params = []
    while not c.accept(")"):
        direction = c.take() if c.peek() in ("in", "out", "inout") else "none"
        t = parse_type(c)
        params.append(Param(direction, t, c.take()))
        c.accept(",")
    return params


@dataclass
class Control:
    name: str
    params: list[Param]
    actions: dict[str, tuple[list[Param], list[Any]]] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    instances: dict[str, tuple[str, list[Any]]] = field(default_factory=dict)
    body: list[Any] = field(default_factory=list)


@dataclass
class ParserDecl:
    name: str
    params: list[Param]
    states: dict[str, list[Any]]


@dataclass
class Program:
    consts: dict[str, Any]
    types: dict[str, tuple[str, list[tuple[Any, str]]]]
    parsers: dict[str, ParserDecl]
    controls: dict[str, Control]
    pipeline: list[str]
    arch: str = ""


def parse_program(tokens: list[str]) -> Program:
    c = Cursor(tokens)
    prog = Program({}, {}, {}, {}, [])
    type_names: set[str] = set()
    while c.peek():
        tok = take_past_annotations(c)
        if tok == "const":
            t = parse_type(c)
            name = c.take()
            c.take("=")
            prog.consts[name] = ("cast", t, parse_expr(c))
            c.take(";")
        elif tok in ("header", "struct"):
            name = c.take()
            type_names.add(name)
            c.take("{")
            fields = []
            while not c.accept("}"):
                t = parse_type(c)
                fields.append((t, c.take()))
                c.take(";")
            prog.types[name] = (tok, fields)
        elif tok == "parser":
            name = c.take()
            params = parse_params(c)
            c.take("{")
            states: dict[str, list[Any]] = {}
            while not c.accept("}"):
                c.take("state")
                state_name = c.take()
                states[state_name] = parse_block(c, type_names)
            prog.parsers[name] = ParserDecl(name, params, states)
        elif tok == "control":
            ctl = Control(c.take(), parse_params(c))
            c.take("{")
            while not c.accept("}"):
                parse_control_decl(c, ctl, type_names)
            prog.controls[ctl.name] = ctl
            type_names.add(ctl.name)
        elif tok == "Pipeline":
            c.take("(")
            while not c.accept(")"):
                prog.pipeline.append(c.take())
                c.take("(")
                c.take(")")
                c.accept(",")
            c.take()
            c.take(";")
        elif tok == "Switch":
            c.take("(")
            c.take()
            c.take(")")
            c.take("main")
            c.take(";")
            prog.arch = "tna"
        else:
            raise P4SimError(f"unsupported top-level declaration {tok!r}")
    return prog


def take_past_annotations(c: Cursor) -> str:
    """The next token after any annotations: @stage(N) on a table or @noWarn("unused") on a
    constant only guide the compiler."""
    tok = c.take()
    while tok == "@":
        c.take()
        if c.accept("("):
            depth = 1
            while depth:
                depth += {"(": 1, ")": -1}.get(c.take(), 0)
        tok = c.take()
    return tok


def parse_control_decl(c: Cursor, ctl: Control, types: set[str]) -> None:
    tok = take_past_annotations(c)
    if tok == "action":
        name = c.take()
        ctl.actions[name] = (parse_params(c), parse_block(c, types))
    elif tok == "table":
        name = c.take()
        c.take("{")
        props: dict[str, Any] = {}
        while not c.accept("}"):
            prop = c.take()
            if prop == "const":
                prop = c.take()
            c.take("=")
            if prop == "key":
                c.take("{")
                keys = []
                while not c.accept("}"):
                    e = parse_expr(c)
                    c.take(":")
                    keys.append((e, c.take()))
                    while c.accept("@"):  # e.g. @name("...") on a sliced key
                        c.take()
                        if c.accept("("):
                            depth = 1
                            while depth:
                                depth += {"(": 1, ")": -1}.get(c.take(), 0)
                    c.take(";")
                props["key"] = keys
            elif prop == "actions":
                c.take("{")
                acts = []
                while not c.accept("}"):
                    acts.append(c.take())
                    c.take(";")
                props["actions"] = acts
            elif prop == "entries":  # after `const`: `keyset : action(args);`, in priority order
                c.take("{")
                const_entries = []
                while not c.accept("}"):
                    key = parse_expr(c)
                    c.take(":")
                    call = parse_expr(c)
                    c.take(";")
                    if call[0] != "call" or call[1][0] != "name":
                        raise P4SimError(f"table {name}: entry action {call!r}")
                    const_entries.append((key, call[1][1], call[2]))
                props["const_entries"] = const_entries
            else:
                props[prop] = parse_expr(c)
                c.take(";")
        ctl.tables[name] = props
    elif tok == "apply":
        ctl.body = parse_block(c, types)
    elif tok in TNA_EXTERNS:
        targs = []
        if c.accept("<"):
            targs.append(parse_type(c))
            while c.accept(","):
                targs.append(parse_type(c))
            c.take(">")
        c.take("(")
        args = []
        while not c.accept(")"):
            args.append(parse_expr(c))
            c.accept(",")
        name = c.take()
        body = None
        if c.accept("="):
            c.take("{")
            c.take("void")
            c.take("apply")
            body = (parse_params(c), parse_block(c, types))
            c.take("}")
        c.take(";")
        ctl.instances[name] = (tok, [targs, args, body])
    else:
        c.take("(")
        c.take(")")
        ctl.instances[c.take()] = ("control", [tok])
        c.take(";")
