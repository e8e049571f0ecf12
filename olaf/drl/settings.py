"""``--set algo.NAME=VALUE``: hyperparameters of any learner's config dataclass, by name.

The one parser of these items, for the built-in learners (``olaf run --set``) and a
user's ``MODULE:CLASS`` algorithm (whose ``Config`` is only known once it is imported).
"""

from __future__ import annotations

import dataclasses
from typing import Any


def parse_set(items: list[str], config: Any) -> dict[str, Any]:
    """``algo.NAME=VALUE`` items as keyword arguments of ``config``'s dataclass (ValueError
    naming the item on an unknown name or a value of the wrong type)."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        name = key.strip().removeprefix("algo.")
        if not sep or not key.strip().startswith("algo.") or not text.strip():
            raise ValueError(f"--set {item!r}: expected algo.NAME=VALUE")
        if name not in fields:
            raise ValueError(f"--set {item!r}: {type(config).__name__} has no {name!r}; "
                             f"known: {', '.join(fields)}")
        current = getattr(config, name)
        text = text.strip()
        try:
            if isinstance(current, bool):
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                value: Any = text.lower() in ("true", "1")
            elif isinstance(current, int):
                value = int(text)
            elif isinstance(current, float):
                value = float(text)
            elif isinstance(current, tuple):
                value = tuple(float(v) for v in text.split(","))
            else:
                value = type(current)(text)
        except ValueError:
            raise ValueError(f"--set {item!r}: {text!r} is not a valid "
                             f"{type(current).__name__}") from None
        out[name] = value
    return out


def with_settings(config: Any, items: list[str] | tuple[str, ...]) -> Any:
    """``config`` with the ``algo.NAME=VALUE`` items applied (ValueError as ``parse_set``)."""
    return dataclasses.replace(config, **parse_set(list(items), config)) if items else config
