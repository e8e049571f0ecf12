"""Run-time values: typed integers (bit<W>, int<W>), headers, header stacks, structs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tests.p4sim.errors import P4SimError


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
