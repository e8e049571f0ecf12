"""Topology files for the controller: one job, reading a switch's routes and drop
probabilities from JSON (``olaf ctl push --topology``, ``Controller.install_topology``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from dataplane.forwarding import Route, parse_routes


@dataclass
class Topology:
    """Forwarding and emulation settings for one switch, from a JSON topology file.

    Either the switch's own section ``{"routes": [...], "drop_prob": {...}}`` or a file
    with several, ``{"switches": {"s1": {...}, ...}}``; routes are
    ``{"prefix": "10.0.1.1/32", "port": 1, "mac": "08:00:00:00:01:11"}`` (the format
    ``olaf switch --forwarding`` reads), ``drop_prob`` maps a port (or ``"*"``, every
    port) to a probability.
    """

    routes: list[Route] = field(default_factory=list)
    drop_prob: dict[int | None, float] = field(default_factory=dict)

    @classmethod
    def load(cls, path: str | Path, switch: str | None = None) -> Topology:
        try:
            spec = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read topology {path}: {e}") from None
        if "switches" in spec:
            switches = spec["switches"]
            if switch is None:
                if len(switches) != 1:
                    raise ValueError(f"{path} describes switches {sorted(switches)}: name one")
                switch = next(iter(switches))
            if switch not in switches:
                raise ValueError(f"{path} has no switch {switch!r} (it has {sorted(switches)})")
            spec = switches[switch]
        try:
            routes = parse_routes(spec.get("routes", []))
            drop = {None if k == "*" else int(k): float(v) for k, v in spec.get("drop_prob", {}).items()}
        except (TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"bad topology {path}: {e}") from None
        return cls(routes, drop)
