"""argparse value types shared by the ``olaf`` subcommands."""

import argparse
from collections.abc import Callable


def ranged(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An int within ``lo..hi`` (no upper bound without ``hi``); anything else is argparse's
    one-line error and exit 2."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if hi is None and value < lo:
            raise argparse.ArgumentTypeError(f"{value} must be >= {lo}")
        if hi is not None and not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside {lo}..{hi}")
        return value

    parse.__name__ = "int"  # argparse names the type in its message
    return parse
