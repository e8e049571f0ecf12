"""Every generated table in docs/, rebuilt from the committed CSVs.

A block in a Markdown file under docs/ (or README.md)::

    <!-- generated: olaf sweep docs/results/sweep-map.toml --report -->
    ...
    <!-- end generated -->

holds exactly what its command prints, run from the repository's root. The commands
are ``olaf sweep FILE --report [ratios|modes] [--baseline M] [--top M] [--metric steps|time]``
(the sweep's CSV: olaf.commands.sweep.report_text),
``python docs/results/tc-bottleneck/table.py --report`` (its table.csv), and
``csv FILE COLUMN,COLUMN,... [COLUMN=VALUE ...]`` (the named columns of a committed CSV's
rows, those whose COLUMN is VALUE when given, as a Markdown table).

    .venv/bin/python docs/results/tables.py          # rewrite every block
    .venv/bin/python docs/results/tables.py --check  # exit 1 naming each block that differs

tests/test_results_tables.py runs the check, so a committed table that its command no
longer prints fails CI.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"(<!-- generated: (?P<cmd>[^\n]*?) -->\n)(?P<body>.*?)(<!-- end generated -->)",
                   re.DOTALL)


def output_of(command: str) -> str:
    """What ``command`` prints (one of the two forms in the module docstring)."""
    argv = shlex.split(command)
    if argv[:2] == ["olaf", "sweep"] and "--report" in argv:
        from olaf.commands import sweep

        parser = argparse.ArgumentParser(prog="olaf sweep")
        sweep.add_arguments(parser)
        args = parser.parse_args(argv[2:])
        return sweep.report_text(sweep.load(ROOT / args.file, None if args.out is None
                                            else ROOT / args.out), args)
    if argv[:2] == ["python", "docs/results/tc-bottleneck/table.py"] and argv[2:] == ["--report"]:
        spec = importlib.util.spec_from_file_location("tc_table", ROOT / argv[1])
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        return module.report_from_csv()
    if argv[:1] == ["csv"] and len(argv) >= 3:
        return csv_table(ROOT / argv[1], argv[2].split(","), dict(a.split("=", 1) for a in argv[3:]))
    raise ValueError(f"not a table command: {command!r}")


def csv_table(path: Path, columns: list[str], where: dict[str, str]) -> str:
    """The ``columns`` of the rows of ``path`` that match ``where``, as Markdown."""
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if all(r.get(k) == v for k, v in where.items())]
    missing = [c for c in [*columns, *where] if rows and c not in rows[0]]
    if missing or not rows:
        raise ValueError(f"{path.name}: no rows, or no column(s) {missing}")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Numbers as the docs print them: thousands separated, at most three decimals."""
    try:
        value = float(text)
    except ValueError:
        return text
    if value.is_integer() and "." not in text:
        return f"{int(value):,}"
    return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:.3g}"


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def rebuild(text: str) -> str:
    """``text`` with every generated block's body replaced by its command's output."""
    return BLOCK.sub(lambda m: m.group(1) + _fenced(output_of(m.group("cmd"))) + m.group(4), text)


def _fenced(body: str) -> str:
    return body if body.endswith("\n") else body + "\n"


def stale_blocks() -> list[str]:
    """``path: command`` of every block whose body differs from its command's output."""
    out = []
    for path in documents():
        for m in BLOCK.finditer(path.read_text()):
            if m.group("body") != _fenced(output_of(m.group("cmd"))):
                out.append(f"{path.relative_to(ROOT)}: {m.group('cmd')}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_blocks()
        for line in stale:
            print(f"stale: {line}", file=sys.stderr)
        return 1 if stale else 0
    for path in documents():
        text = path.read_text()
        new = rebuild(text)
        if new != text:
            path.write_text(new)
            print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
