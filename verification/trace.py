"""A counterexample: what happened in every slot, as data and as a readable table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from worker_transport.protocol import Outcome

OUTCOME_SHORT = {
    Outcome.ENQUEUED: "ENQ",
    Outcome.MERGED: "MRG",
    Outcome.REPLACED: "REP",
    Outcome.DROPPED_REWARD: "DRW",
    Outcome.DROPPED_FULL: "DFL",
}


@dataclass
class Event:
    """One message at the switch, in arrival order within its slot."""

    kind: str
    """``update`` or ``pull``."""
    occupied: int
    """Queue occupancy right after the switch handled the message."""
    worker: int | None = None
    """update: the sender."""
    cluster: int | None = None
    """update: the sender's cluster; pull with DATA: the popped slot's cluster."""
    outcome: str | None = None
    """update: the ACK's outcome name (ENQUEUED, MERGED, ...)."""
    merge_choice: str | None = None
    """update with rewards=any meeting another worker's slot: what the rewards decided."""
    response: str | None = None
    """pull: DATA or EMPTY."""
    contributors: list[int] = field(default_factory=list)
    """pull with DATA: workers whose updates the slot carried (before bit aliasing)."""
    credited: list[int] = field(default_factory=list)
    """pull with DATA: workers whose AoM the PS resets (contributor bits, aliased)."""
    reward: int | None = None
    """update with rewards=any: a concrete reward (raw fixed point) realising the outcome."""
    block: int | None = None
    """The block id where it is not 0 by construction (the isolation property, whose other
    clusters send any block): update: its block; pull with DATA: the popped slot's."""


@dataclass
class Slot:
    slot: int
    events: list[Event]
    skipped: list[int]
    """Workers that did not send in this slot (allowed because their P_s < 1)."""
    occupied: int
    """Occupancy at the end of the slot."""
    aom: list[int]
    """AoM_u at the end of the slot, per worker, in slots."""
    global_aom: int
    idle: list[int] = field(default_factory=list)
    """Workers without a fresh update in this slot (per-worker periods and phases): they
    can neither send nor skip."""


@dataclass
class Trace:
    """A finite behaviour of the deployment that violates ``prop``."""

    prop: str
    violation_slot: int
    violation_worker: int
    detail: str
    slots: list[Slot]
    reward_threshold: int | None = None
    """rewards=any: the raw fixed-point threshold the concrete rewards go with."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        slots = [
            Slot(**{**s, "events": [Event(**e) for e in s["events"]]}) for s in data["slots"]
        ]
        return cls(**{**data, "slots": slots})

    def table(self) -> str:
        """Per-slot table: messages in order with outcomes, occupancy, per-worker AoM."""
        n = len(self.slots[0].aom) if self.slots else 0
        head = ["slot", "messages (in arrival order) -> outcome [occupancy]", "skip", "occ",
                "AoM per worker", "glob"]
        rows = []
        for s in self.slots:
            parts = []
            for e in s.events:
                if e.kind == "update":
                    blk = f"b{e.block}" if e.block else ""
                    label = f"w{e.worker}c{e.cluster}{blk}:{OUTCOME_SHORT[Outcome[e.outcome]]}"
                    if e.reward is not None:
                        label += f"(r={e.reward})"
                    parts.append(f"{label}[{e.occupied}]")
                elif e.response == "DATA":
                    who = ",".join(f"w{w}" for w in e.credited)
                    blk = f"b{e.block}" if e.block else ""
                    parts.append(f"PULL:c{e.cluster}{blk}{{{who}}}[{e.occupied}]")
                else:
                    parts.append(f"PULL:EMPTY[{e.occupied}]")
            mark = " <==" if s.slot == self.violation_slot else ""
            rows.append([
                str(s.slot),
                " ".join(parts) or "-",
                ",".join([*(f"w{w}" for w in s.skipped), *(f"(w{w})" for w in s.idle)]) or "-",
                str(s.occupied),
                " ".join(f"{a:>2}" for a in s.aom) + mark,
                str(s.global_aom),
            ])
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip()]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                  for r in rows]
        if self.reward_threshold is not None:
            lines.append(f"rewards r and threshold {self.reward_threshold} (raw fixed point) "
                         "realise the trace's reward decisions")
        legend = (f"workers w0..w{n - 1}; ENQ enqueued, MRG merged, REP replaced, "
                  "DRW dropped (reward), DFL dropped (full); PULL:cK{...} = DATA of cluster K "
                  "crediting those workers")
        if any(s.idle for s in self.slots):
            legend += "; skip (wK) = worker K had no fresh update in that slot"
        return "\n".join([*lines, legend])
