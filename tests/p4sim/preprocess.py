"""Preprocessing and lexing: #include, #define (object- and function-like, ## pasting),
#ifdef/#ifndef/#else/#endif and -D defines, then tokens with the macros expanded."""

from __future__ import annotations

import re
from pathlib import Path

from tests.p4sim.errors import P4SimError

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
