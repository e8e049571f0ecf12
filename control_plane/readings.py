"""What a ``Controller`` reads from the data plane: one job, the counters (and their
reset) and the registers, through the session's p4runtime-shell client."""

from __future__ import annotations

from typing import Any

from p4.v1 import p4runtime_pb2
from p4runtime_sh import shell as sh

from control_plane.p4info import (
    MSG_TYPE_COUNTER,
    OUTCOME_COUNTER,
    REFUSED_COUNTER,
    REG_ACTIVE_CLUSTERS,
    REG_CLUSTER_COUNT,
    REG_OCCUPIED,
    REG_READ_PTR,
    REG_WRITE_PTR,
)
from control_plane.session import ControllerError, Session, _p4rt_errors
from dataplane.acl import Refusal
from worker_transport.protocol import MsgType, Outcome

QUEUE_REGISTERS = (REG_OCCUPIED, REG_READ_PTR, REG_WRITE_PTR, REG_ACTIVE_CLUSTERS, REG_CLUSTER_COUNT)


class Readings(Session):
    """Counters and registers of the target, read over the session."""

    # -- counters and registers -------------------------------------------------------------
    def counters(self) -> dict[str, dict[str, int]]:
        """Packets per outcome and per message type, and what the source checks refused, by name."""
        self._require_pipeline()
        out: dict[str, dict[str, int]] = {"outcomes": {}, "msg_types": {}}
        with _p4rt_errors("read counters"):
            for c in sh.CounterEntry(OUTCOME_COUNTER).read():
                if c.index in tuple(Outcome):
                    out["outcomes"][Outcome(c.index).name] = c.packet_count
            for c in sh.CounterEntry(MSG_TYPE_COUNTER).read():
                if c.index in tuple(MsgType):
                    out["msg_types"][MsgType(c.index).name] = c.packet_count
            if any(c.preamble.name == REFUSED_COUNTER for c in sh.context.p4info.counters):
                out["refused"] = {Refusal(c.index).name: c.packet_count
                                  for c in sh.CounterEntry(REFUSED_COUNTER).read() if c.index < len(Refusal)}
        return out

    def reset_counters(self) -> None:
        """Every cell of both counters to 0, cell by cell: bmv2 refuses a wildcard write
        to an indirect counter (UNIMPLEMENTED)."""
        self._require_pipeline(write=True)
        sizes = {c.preamble.name: c.size for c in sh.context.p4info.counters}
        for name in (n for n in (OUTCOME_COUNTER, MSG_TYPE_COUNTER, REFUSED_COUNTER) if n in sizes):
            for index in range(sizes[name]):
                c = sh.CounterEntry(name)
                c.index = index
                c.packet_count = 0
                with _p4rt_errors(f"reset {name}[{index}]"):
                    c.modify()

    def register(self, name: str, index: int | None = None) -> list[int]:
        """A register's cells (one if ``index`` is given), via a P4Runtime RegisterEntry read.

        p4runtime-shell has no RegisterEntry class, so the request is built here and sent
        with its client. bmv2 answers UNIMPLEMENTED (p4lang/PI#376): ``ControllerError``.
        """
        self._require_pipeline()
        regs = {r.preamble.name: r for r in sh.context.p4info.registers}
        reg = regs.get(name) or next((r for r in regs.values() if r.preamble.alias == name), None)
        if reg is None:
            raise ControllerError("NOT_FOUND", f"the pipeline has no register {name}")
        entity = p4runtime_pb2.Entity()
        entity.register_entry.register_id = reg.preamble.id
        if index is not None:
            entity.register_entry.index.index = index
        signed = reg.type_spec.bitstring.WhichOneof("type_spec") == "int"
        cells: dict[int, int] = {}
        with _p4rt_errors(f"read {name}"):
            for rep in self.client.read_one(entity):
                for e in rep.entities:
                    cells[e.register_entry.index.index] = int.from_bytes(
                        e.register_entry.data.bitstring, "big", signed=signed)
        return [cells[i] for i in sorted(cells)]

    def queue_state(self) -> dict[str, Any] | None:
        """Occupancy, pointers and per-cluster counts, or None where the target serves no registers."""
        try:
            state: dict[str, Any] = {name.rpartition("reg_")[2]: self.register(name)[0]
                                     for name in QUEUE_REGISTERS[:-1]}
            state["cluster_count"] = self.register(REG_CLUSTER_COUNT)
        except ControllerError as e:
            # A target answers a batch error (UNKNOWN) or the code itself.
            unserved = e.code in ("UNIMPLEMENTED", "NOT_FOUND")
            if unserved or (e.code == "UNKNOWN" and "UNIMPLEMENTED" in e.message):
                return None
            raise
        return state
