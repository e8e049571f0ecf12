"""One property check in a child process that the time budget can always stop.

The encodings watch the deadline while they build the model and Z3 gets a timeout
per query, but neither bounds everything (one huge assertion, bit-blasting a large
query, the reward concretisation). ``verify-aom --timeout`` must bound every engine,
so the check runs in a forked child that reports each slot it proved; when the
budget plus a short grace has passed the child is killed (by its own PID) and the
result is UNKNOWN with the slots proved so far.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from dataclasses import dataclass
from typing import Any

from verification.check import check_property
from verification.config import Deployment
from verification.model import Options
from verification.replay import replay
from verification.solving import CheckResult

GRACE_S = 1.5
"""Seconds the child may overrun its budget (its own cooperative stop) before a kill."""


@dataclass
class Outcome:
    result: CheckResult
    replay: Any = None
    """ReplayReport of the counterexample, when one was replayed."""
    error: str | None = None
    """An engine asked for explicitly that cannot encode the deployment."""


def _child(conn: Any, dep: Deployment, prop: str, timeout_s: float, options: Options,
           replay_trace: bool) -> None:

    try:
        result = check_property(dep, prop, timeout_s, options,
                                progress=lambda t: conn.send(("progress", t, None)))
        report = replay(dep, result.trace) if result.trace is not None and replay_trace else None
        conn.send(("result", result, report))
    except ValueError as e:
        conn.send(("error", str(e), None))
    except Exception:  # noqa: BLE001 - the parent reports it; a child must not die silently
        conn.send(("crash", traceback.format_exc(), None))
    finally:
        conn.close()


def run_bounded(dep: Deployment, prop: str, timeout_s: float, options: Options,
                replay_trace: bool = True) -> Outcome:
    """``check_property`` (and the replay of its counterexample) within ``timeout_s``
    plus ``GRACE_S`` of wall time, whatever the engine does."""
    ctx = multiprocessing.get_context("fork")
    parent, child_end = ctx.Pipe(duplex=False)
    start = time.monotonic()
    proc = ctx.Process(target=_child, args=(child_end, dep, prop, timeout_s, options,
                                            replay_trace), daemon=True)
    proc.start()
    child_end.close()
    proved: int | None = None
    deadline = start + timeout_s + GRACE_S
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not parent.poll(left):
                break
            try:
                kind, payload, extra = parent.recv()
            except EOFError:
                break
            if kind == "progress":
                proved = payload
            elif kind == "result":
                return Outcome(payload, extra)
            elif kind == "error":
                return Outcome(CheckResult(prop, "UNKNOWN", time.monotonic() - start),
                               error=payload)
            else:
                raise RuntimeError(f"verify-aom: the {prop} check crashed:\n{payload}")
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
    seconds = time.monotonic() - start
    if proc.exitcode not in (None, 0) and seconds < timeout_s:
        why = f"the check process died (exit {proc.exitcode}, out of memory?)"
    else:
        why = f"timeout after {timeout_s:g} s (stopped)"
    if proved is not None:
        why += f"; no violation up to slot {proved}"
    return Outcome(CheckResult(prop, "UNKNOWN", seconds, reason=why, checked_through=proved))
