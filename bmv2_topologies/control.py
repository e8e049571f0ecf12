"""The testbed's control plane: every switch programmed over P4Runtime with
``control_plane.controller.Controller``, the same way for the software switch
(``olaf switch --p4runtime``) and for bmv2 (``simple_switch_grpc``).

p4runtime-shell allows one session per process at a time, so ``SwitchControl`` opens a
short session per operation (about 70 ms) under a lock, switch after switch; the
reward-threshold loop (``control_plane.controller.ThresholdLoop``) runs on top of it and
writes the threshold to every switch. bmv2's queue registers, which its P4Runtime server
does not serve, are read through its Thrift server (``bmv2_thrift``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_P4INFO = REPO / "p4" / "olaf.p4info.txtpb"


@dataclass
class Target:
    """One switch's P4Runtime server."""

    switch: str
    address: str
    device_id: int = 1
    device_config: bytes = b""
    p4info: Path = DEFAULT_P4INFO
    thrift_port: int | None = None
    """bmv2's Thrift server, for the register reads its P4Runtime server does not serve."""


class SwitchControl:
    """P4Runtime sessions with the testbed's switches, one at a time."""

    def __init__(self, targets: list[Target], timeout: float = 5.0) -> None:
        self.targets = {t.switch: t for t in targets}
        self.timeout = timeout
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def session(self, switch: str) -> Iterator[Any]:
        # grpc and p4runtime-shell are slow to import: only when a session opens, so that
        # building olaf testbed's parser does not pay for them.
        from control_plane.controller import Controller

        t = self.targets[switch]
        with self._lock, Controller(t.address, device_id=t.device_id, timeout=self.timeout) as c:
            yield c

    def wait_ready(self, switch: str, timeout: float,
                   failed: Callable[[], str | None] = lambda: None) -> None:
        """Wait until ``switch`` accepts a P4Runtime session (bmv2 needs a moment to start).

        ``failed`` returns why the switch can no longer come up (its process exited), which
        ends the wait with a ``ConnectionError`` at once."""
        deadline = time.monotonic() + timeout
        # p4runtime-shell logs every refused attempt at CRITICAL on the root logger.
        logging.disable(logging.CRITICAL)
        try:
            while True:
                try:
                    with self.session(switch):
                        return
                except ConnectionError:
                    reason = failed()
                    if reason is not None:
                        raise ConnectionError(f"{switch}: {reason}") from None
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        finally:
            logging.disable(logging.NOTSET)

    def program(self, switch: str, routes: list[Any], **settings: Any) -> None:
        """Push the pipeline, install ``routes`` (``topology.Route``) and the queue settings."""
        t = self.targets[switch]
        with self.session(switch) as c:
            c.push_pipeline(t.p4info, t.device_config)
            for r in routes:
                c.add_route(r.prefix, r.port, r.mac, replace=True)
            if settings:
                c.configure(**settings)

    def set_reward_threshold(self, threshold: float) -> int | None:
        """The reward threshold (reward units) on every switch; returns the raw value."""
        raw = None
        for switch in self.targets:
            with self.session(switch) as c:
                raw = c.set_reward_threshold(threshold)
        return raw

    def counters(self) -> dict[str, dict[str, Any]]:
        """Per switch: outcome and message-type counters, the settings it holds and its queue
        state (occupancy, pointers) where the target serves registers."""
        out = {}
        for switch, t in self.targets.items():
            with self.session(switch) as c:
                # simple_switch_grpc answers P4Runtime register reads UNIMPLEMENTED (and logs
                # an error each time, p4lang/PI#376): bmv2's queue state comes over Thrift.
                queue = c.queue_state() if t.thrift_port is None else None
                out[switch] = dict(c.counters(), settings=c.settings().as_dict(), queue=queue)
            if t.thrift_port is not None:
                # The Thrift path is bmv2's only: the software switch's testbed never loads it.
                from bmv2_topologies.bmv2_thrift import ThriftError, queue_state

                try:  # outside the P4Runtime lock: the CLI takes a second or two
                    out[switch]["queue"] = queue_state(t.thrift_port)
                except ThriftError as e:
                    out[switch]["queue_error"] = str(e)
        return out
