"""``--set algo.NAME=VALUE``: hyperparameters of any learner's config dataclass, by name.

The one parser of these items, for the built-in learners (``olaf run --set``) and a
user's ``MODULE:CLASS`` algorithm (whose ``Config`` is only known once it is imported).
"""

from __future__ import annotations

import dataclasses
from typing import Any


def parse_set(items: list[str], config: Any, prefix: str = "algo.") -> dict[str, Any]:
    """``PREFIX NAME=VALUE`` items (``algo.clip=0.2``) as keyword arguments of ``config``'s
    dataclass (ValueError naming the item on an unknown name or a value of the wrong type)."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        name = key.strip().removeprefix(prefix)
        if not sep or not key.strip().startswith(prefix) or not text.strip():
            raise ValueError(f"--set {item!r}: expected {prefix}NAME=VALUE")
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


def with_settings(config: Any, items: list[str] | tuple[str, ...], prefix: str = "algo.") -> Any:
    """``config`` with the ``PREFIX NAME=VALUE`` items applied (ValueError as ``parse_set``)."""
    return dataclasses.replace(config, **parse_set(list(items), config, prefix)) if items else config


def split_settings(items: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``--set`` items for the learner (``algo.*``) and for the parameter server (``ps.*``);
    ``autoscale.*`` items are the worker pool's (olaf.drl.cli_args.policies_from_args)."""
    ps = [i for i in items if i.strip().startswith("ps.")]
    return [i for i in items if not i.strip().startswith(("ps.", "autoscale."))], ps
