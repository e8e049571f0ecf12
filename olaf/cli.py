"""The ``olaf`` command: one subcommand per module in ``olaf.commands``.

Each module there defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Modules keep heavy imports (torch, gymnasium, grpc) inside
``run`` so that ``olaf --help`` and argument errors stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from olaf import commands


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error message and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="olaf",
        description="OLAF: in-network aggregation for asynchronous distributed RL.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=ArgumentParser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"olaf.commands.{info.name}")
        name = info.name.replace("_", "-")
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
