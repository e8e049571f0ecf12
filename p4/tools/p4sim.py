"""A source-level interpreter for the subset of P4_16 (TNA) that p4/tna/olaf_tna.p4 uses.

Neither Tofino's assembler (bfas) nor a Tofino model is available, so the TNA program's
behaviour is checked by running its own text: preprocessing (#include, #define, -D),
parser states with header stacks, controls with actions and tables (exact and lpm
entries installed at run time; const entries on exact and ternary keys, `value &&& mask`
and `_`, the first matching entry winning; @stage and other annotations skipped),
sub-control calls with copy-in/copy-out, casts, wrap-around and saturating arithmetic
on bit<W>/int<W>, and Tofino 1's pipeline as the program uses it: Register/RegisterAction
(the apply body runs on the cell; one access per Register per packet pass; the index a
field, a constant or a Hash output, as bf-p4c demands), Hash (IDENTITY), Counter,
Random, Checksum, the 64-bit resubmit header (once per packet) and
recirculation through port 68, with intrinsic metadata reduced to the fields used.

What fits Tofino (stages, PHV, stateful ALU programs, gateways) is p4c-barefoot's to
say, not this interpreter's (tests/test_tna.py runs both). Anything outside the subset
raises ``P4SimError`` rather than guessing.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class P4SimError(Exception):
    """The program uses something this interpreter does not implement."""


class ParserError(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


# -- preprocessing and lexing ---------------------------------------------------------------

TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+[ws](?:0x[0-9a-fA-F]+|\d+)|0x[0-9a-fA-F]+|\d+)"
    r'|(?P<str>"[^"\n]*")'
    r"|(?P<id>[A-Za-z_]\w*)"
    r"|(?P<op>\|\+\||\|-\||\+\+|##|<<|>>|<=|>=|==|!=|&&&|&&|\|\||[-+*/!~&|^<>=(){}\[\];,.:?@]))"
)
BUILTIN_INCLUDES = {"core.p4", "tna.p4"}


def preprocess(path: Path, defines: dict[str, str], seen: set[Path] | None = None) -> str:
    """#include (quoted: relative to the including file), #define, #ifndef/#ifdef/#endif."""
    seen = set() if seen is None else seen
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), path.read_text(), flags=re.S)
    text = re.sub(r"\\\n", " ", text)  # line continuations
    out: list[str] = []
    active: list[bool] = []
    for line in text.splitlines():
        line = re.sub(r"//.*", "", line)
        stripped = line.strip()
        enabled = all(active)
        if stripped.startswith("#"):
            parts = stripped[1:].split(None, 2)
            directive = parts[0] if parts else ""
            if directive in ("ifndef", "ifdef"):
                active.append((parts[1] in defines) == (directive == "ifdef"))
            elif directive == "endif":
                active.pop()
            elif directive == "else":
                active[-1] = not active[-1]
            elif not enabled:
                continue
            elif directive == "define":
                m = re.match(r"#\s*define\s+(\w+)\(([^)]*)\)\s*(.*)$", stripped)
                if m:  # function-like: stored as "(params)body"
                    defines.setdefault(m.group(1), f"({m.group(2)})\x00{m.group(3)}")
                else:
                    defines.setdefault(parts[1], parts[2] if len(parts) > 2 else "")
            elif directive == "include":
                target = parts[1]
                if target.startswith("<"):
                    if target.strip("<>") not in BUILTIN_INCLUDES:
                        raise P4SimError(f"unknown system include {target}")
                    continue
                inc = (path.parent / target.strip('"')).resolve()
                if inc not in seen:
                    seen.add(inc)
                    out.append(preprocess(inc, defines, seen))
            else:
                raise P4SimError(f"unsupported directive {stripped}")
            continue
        if enabled:
            out.append(line)
    return "\n".join(out)


def lex(text: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if m is None:
            raise P4SimError(f"cannot lex at {text[pos : pos + 30]!r}")
        pos = m.end()
        tokens.append(m.group(m.lastgroup))
    return tokens


def tokenize(text: str, defines: dict[str, str]) -> list[str]:
    """Lex and expand macros (object-like and function-like, with ## pasting)."""
    return expand(lex(text), defines)


def expand(raw: list[str], defines: dict[str, str]) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(raw):
        tok = raw[i]
        body = defines.get(tok)
        if body is None:
            tokens.append(tok)
            i += 1
            continue
        if "\x00" not in body:
            tokens.extend(expand(lex(body), defines))
            i += 1
            continue
        params_text, text = body.split("\x00", 1)
        params = [p.strip() for p in params_text.strip("()").split(",") if p.strip()]
        if i + 1 >= len(raw) or raw[i + 1] != "(":
            tokens.append(tok)
            i += 1
            continue
        args: list[list[str]] = [[]]
        depth, j = 0, i + 2
        while depth > 0 or raw[j] != ")":
            t = raw[j]
            depth += t == "("
            depth -= t == ")"
            if t == "," and depth == 0:
                args.append([])
            else:
                args[-1].append(t)
            j += 1
        binding = dict(zip(params, args, strict=True))
        substituted: list[str] = []
        for t in lex(text):
            substituted.extend(binding.get(t, [t]))
        pasted: list[str] = []
        k = 0
        while k < len(substituted):
            if substituted[k] == "##":
                pasted[-1] += substituted[k + 1]
                k += 2
            else:
                pasted.append(substituted[k])
                k += 1
        tokens.extend(expand(pasted, defines))
        i = j + 1
    return tokens


# -- values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class T:
    """bit<W> (signed False), int<W> (signed True); width None: an untyped integer literal."""

    width: int | None
    signed: bool = False

    def norm(self, v: int) -> int:
        if self.width is None:
            return v
        v &= (1 << self.width) - 1
        if self.signed and v >> (self.width - 1):
            v -= 1 << self.width
        return v


BOOL = "bool"


@dataclass
class Val:
    v: int
    t: T


def num(tok: str) -> Val:
    m = re.fullmatch(r"(\d+)([ws])(.+)", tok)
    if m:
        t = T(int(m.group(1)), m.group(2) == "s")
        value = int(m.group(3), 0)
        if t.norm(value) != value:
            # p4c: "value does not fit in W bits" (a warning) and truncates; never meant.
            raise P4SimError(f"{tok}: value does not fit in {t.width} bits")
        return Val(t.norm(value), t)
    return Val(int(tok, 0), T(None))


@dataclass
class Header:
    fields: dict[str, T]
    values: dict[str, int] = field(default_factory=dict)
    valid: bool = False

    def set_valid(self) -> None:
        self.valid = True

    def set_invalid(self) -> None:
        self.valid = False
        self.values = {}

    def get(self, name: str) -> Val:
        return Val(self.values.get(name, 0), self.fields[name])

    def bits(self) -> tuple[int, int]:
        acc, width = 0, 0
        for name, t in self.fields.items():
            assert t.width is not None
            acc = (acc << t.width) | (self.values.get(name, 0) & ((1 << t.width) - 1))
            width += t.width
        return acc, width


@dataclass
class Stack:
    elements: list[Header]
    next_index: int = 0


class Struct(dict):
    """A struct instance: field name -> Val, Header, Stack or Struct."""


@dataclass
class Var:
    """A storage cell for a local or a copy-in/copy-out parameter."""

    val: Any


# -- parsing the program ----------------------------------------------------------------------


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


TNA_EXTERNS = {"Register", "RegisterAction", "Counter", "Random", "Resubmit", "Checksum", "Hash"}

TNA_TYPES: dict[str, tuple[str, list[tuple[Any, str]]]] = {
    # Tofino 1's intrinsic metadata, reduced to the fields the program uses; the two
    # 64-bit headers are what the hardware prepends to a packet before each parser.
    "ingress_intrinsic_metadata_t": (
        "header",
        [
            (T(1), "resubmit_flag"),
            (T(1), "_pad1"),
            (T(2), "packet_version"),
            (T(3), "_pad2"),
            (T(9), "ingress_port"),
            (T(48), "ingress_mac_tstamp"),
        ],
    ),
    "egress_intrinsic_metadata_t": ("header", [(T(7), "_pad0"), (T(9), "egress_port"), (T(48), "_pad1")]),
    "ingress_intrinsic_metadata_from_parser_t": ("struct", [(T(16), "parser_err")]),
    "ingress_intrinsic_metadata_for_deparser_t": (
        "struct",
        [(T(3), "drop_ctl"), (T(3), "digest_type"), (T(3), "resubmit_type"), (T(3), "mirror_type")],
    ),
    "ingress_intrinsic_metadata_for_tm_t": ("struct", [(T(9), "ucast_egress_port"), (T(1), "bypass_egress")]),
    "egress_intrinsic_metadata_from_parser_t": ("struct", [(T(16), "parser_err")]),
    "egress_intrinsic_metadata_for_deparser_t": ("struct", [(T(3), "drop_ctl")]),
    "egress_intrinsic_metadata_for_output_port_t": ("struct", [(T(1), "capture_tstamp_on_tx")]),
}
TNA_RECIRC_PORTS = frozenset({68})


# -- execution --------------------------------------------------------------------------------


class Goto(Exception):
    def __init__(self, state: str) -> None:
        self.state = state


@dataclass
class Packet:
    data: bytes
    pos: int = 0
    resubmit: bytes | None = None
    registers_used: set[str] = field(default_factory=set)


class Switch:
    """The program loaded, with its register and counter state, one packet at a time."""

    def __init__(self, main: Path, defines: dict[str, str] | None = None, seed: int = 0) -> None:
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
        self.resubmits = 0
        self.recirculations = 0
        self.entries: dict[str, list[tuple[tuple[int, ...], str, list[int]]]] = {}
        for name in self.program.pipeline:
            ctl = self.program.controls.get(name)
            for inst, (kind, args) in ctl.instances.items() if ctl else ():
                self.allocate(f"{ctl.name}.{inst}", kind, args)

    def add_entry(self, table: str, key: tuple[Any, ...], action: str, args: list[int]) -> None:
        """Install an entry: exact keys as ints, lpm keys as (value, prefix length), e.g.
        ("OlafIngress.util_lookup", (3,), "set_util", [191])."""
        self.entries.setdefault(table, []).append((key, action, args))

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
            return Switch.plain_index(e[1], env)
        if kind == "member":
            return e[1][0] in ("name", "member", "index") and Switch.plain_index(e[1], env)
        if kind == "index":
            return e[2][0] == "num" and Switch.plain_index(e[1], env)
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
            if resubmit is not None:
                raise P4SimError("Tofino resubmits a packet at most once")
            if packet.resubmit is None or len(packet.resubmit) != 8:
                raise P4SimError("resubmit without an 8-byte resubmit header")
            self.resubmits += 1
            return "again", (original, port, packet.resubmit)
        if dprsr["drop_ctl"].v & 1:
            return "drop", None
        egress_port = tm["ucast_egress_port"].v
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
