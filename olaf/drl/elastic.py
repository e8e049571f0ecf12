"""Elastic workers: changing the set of active logical workers while a run trains.

The mechanism is the one boost scaling uses: a shared byte array with one flag per
logical worker (``max_workers`` of them), which the worker processes read before every
rollout; a process builds a logical worker (environment, sender, socket) the first time
its flag goes up. What this module adds:

* ``WorkerControl``, the run's side of a file-based control channel in the run's
  directory (no signals, no HTTP): ``olaf workers DIR add|remove|set N`` drops a request
  file into ``DIR/control/`` (written to a temporary name and renamed, so it is never read
  half-written); the runner polls the directory, applies each request and answers with
  ``<request>.reply.json``. It also keeps ``DIR/run.json`` current: PIDs of the run and its
  worker processes, active workers, env steps, restarts.
* ``change_active``, the rule for which ids an add/remove/set touches.
* ``ElasticAoM``, an ``AoMTracker`` that knows which contributor bits belong to active
  workers: a worker that joins starts with AoM 0 (as every worker does at the start of a
  run), and per-worker AoM and the fairness gap only count workers while they are active,
  so a removed worker's ever-growing AoM does not read as unfairness.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from worker_transport.aom import MAX_WORKER_BITS, AoMTracker

CONTROL_DIR = "control"
STATUS_FILE = "run.json"
ACTIONS = ("add", "remove", "set")


def write_json_atomic(path: Path, payload: Any) -> None:
    """Readers see the old file or the new one, never a half-written one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, path)


def change_active(active_ids: list[int], action: str, count: int, max_workers: int) -> list[int]:
    """The active ids after ``action``: ``add`` the lowest inactive ids, ``remove`` the
    highest active ones, ``set`` ids ``0..count-1``. ValueError if the result would have
    no worker or more than ``max_workers``."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
    if count < (0 if action == "set" else 1):
        raise ValueError(f"count must be >= 1, got {count}")
    current = sorted(active_ids)
    if action == "add":
        free = [w for w in range(max_workers) if w not in set(current)]
        if count > len(free):
            raise ValueError(f"cannot add {count}: {len(current)} of at most {max_workers} "
                             "workers are active (olaf run --max-workers)")
        return sorted(current + free[:count])
    if action == "remove":
        if count >= len(current):
            raise ValueError(f"cannot remove {count} of {len(current)} active workers: "
                             "at least one must stay")
        return current[: len(current) - count]
    if not 1 <= count <= max_workers:
        raise ValueError(f"set needs 1..{max_workers} workers, got {count}")
    return list(range(count))


class WorkerControl:
    """The run's end of the control directory; one per run, polled by the main loop."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.requests = self.run_dir / CONTROL_DIR
        self.requests.mkdir(parents=True, exist_ok=True)
        for stale in self.requests.glob("*.json"):
            # Requests and replies of an earlier run in the same directory mean nothing now.
            stale.unlink(missing_ok=True)

    def pending(self) -> list[tuple[Path, dict[str, Any]]]:
        """Requests waiting, oldest first; each is removed as it is read."""
        out = []
        for path in sorted(self.requests.glob("*.request.json")):
            try:
                request = json.loads(path.read_text())
            except (OSError, ValueError):
                request = {"id": path.name.split(".")[0], "malformed": True}
            path.unlink(missing_ok=True)
            out.append((path, request))
        return out

    def reply(self, request: dict[str, Any], payload: dict[str, Any]) -> None:
        rid = str(request.get("id", "unknown"))
        write_json_atomic(self.requests / f"{rid}.reply.json", payload)

    def write_status(self, status: dict[str, Any]) -> None:
        write_json_atomic(self.run_dir / STATUS_FILE, status)


def request_change(run_dir: Path, action: str, count: int, timeout: float = 10.0) -> dict[str, Any]:
    """The client side (``olaf workers``): drop a request and wait for the run's reply.

    Raises FileNotFoundError if ``run_dir`` is not a running run's directory and
    TimeoutError if no reply comes within ``timeout`` seconds (the request is withdrawn).
    """
    control = Path(run_dir) / CONTROL_DIR
    if not (Path(run_dir) / STATUS_FILE).exists() or not control.is_dir():
        raise FileNotFoundError(f"{run_dir} is not the directory of a run (no {STATUS_FILE} "
                                f"and {CONTROL_DIR}/; give olaf run's --out)")
    rid = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
    path = control / f"{rid}.request.json"
    write_json_atomic(path, {"id": rid, "action": action, "count": count})
    reply = control / f"{rid}.reply.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reply.exists():
            payload = json.loads(reply.read_text())
            reply.unlink(missing_ok=True)
            return payload
        time.sleep(0.05)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    raise TimeoutError(f"no answer from the run in {run_dir} within {timeout:g} s "
                       "(has it ended?)")


def worker_bits(ids: list[int], bits: int) -> np.ndarray:
    """Contributor bits (``worker_id % 32``) of ``ids`` as a bool mask of ``bits`` entries."""
    mask = np.zeros(bits, bool)
    for w in ids:
        if w % MAX_WORKER_BITS < bits:
            mask[w % MAX_WORKER_BITS] = True
    return mask


class ElasticAoM(AoMTracker):
    """AoM with a changing set of active workers (see the module doc).

    A change goes through ``AoMTracker.join``, which orders it like a DATA arrival:
    samples before a change see the old set and samples after it the new one.
    """

    def __init__(self, *, active_bits: np.ndarray, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if len(active_bits) != self.workers:
            raise ValueError(f"active_bits needs {self.workers} entries, got {len(active_bits)}")
        self.active_bits = np.asarray(active_bits, bool).copy()
        self._changes: list[tuple[int, np.ndarray]] = [(0, self.active_bits.copy())]
        """(first sample index, active bits from then on)."""

    def set_active(self, bits: np.ndarray, now_us: int | None = None) -> None:
        """The bits active from ``now_us`` on (default: the clock's now); bits that were
        inactive join with AoM 0."""
        bits = np.asarray(bits, bool)
        first = self.join(bits & ~self.active_bits, now_us)
        self.active_bits = bits.copy()
        self._changes.append((first, bits.copy()))

    def active_matrix(self, samples: int) -> np.ndarray:
        """``(samples, workers)``: whether each bit was active at each sample."""
        out = np.zeros((samples, self.workers), bool)
        for i, (start, bits) in enumerate(self._changes):
            end = self._changes[i + 1][0] if i + 1 < len(self._changes) else samples
            out[start:end] = bits
        return out

    def _masked(self) -> np.ndarray:
        per = self.series.per_worker_ms.astype(np.float64)
        return np.where(self.active_matrix(len(per)), per, np.nan)

    def fairness_gap_ms(self) -> float:
        per = self._masked()
        if not len(per) or np.isnan(per).all():
            return float("nan")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return float(np.nanmax(np.abs(per - np.nanmean(per, axis=1, keepdims=True))))

    def summary(self) -> dict:
        """``AoMTracker.summary`` with per-worker figures over active periods only (NaN for
        a bit never active) and the bits active at the end."""
        out = super().summary()
        per = self._masked()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out["per_worker"] = {
                "mean": np.nanmean(per, axis=0).tolist() if len(per) else [],
                "max": np.nanmax(per, axis=0).tolist() if len(per) else [],
                "last": per[-1].tolist() if len(per) else [],
                "active": self.active_bits.tolist(),
            }
        out["fairness_gap_ms"] = self.fairness_gap_ms()
        return out
