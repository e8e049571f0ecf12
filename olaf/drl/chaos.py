"""Chaos during training: ``olaf run --chaos PLAN`` injects a small schedule of faults into
a real run, and the functions here check afterwards that what the design promises to
keep survived them (docs/platform.md, "Chaos").

A plan is a list of events, each keyed by the run's env steps (all workers), as TOML::

    [[event]]
    at_steps = 2000
    action = "loss"            # drop packets on one path
    path = "worker-switch"     # UPDATEs at the switch's input; "switch-ps": DATA replies
    p = 0.1                    # drop probability, 0 < p <= 1
    for_steps = 3000           # how long (env steps); 0 or absent: to the end of the run

    [[event]]
    at_steps = 4000
    action = "switch-restart"  # the switch loses its state: a fresh OlafQueue, same address

    [[event]]
    at_steps = 5000
    action = "kill-workers"    # SIGKILL to the first n worker processes; the run restarts them
    n = 2

    [[event]]
    at_steps = 8000
    action = "ps-crash"        # the run's process (PS + switch) dies by SIGKILL

or the same as JSON (``{"event": [...]}`` or the bare list), in a file (``.json`` is read
as JSON, anything else as TOML) or inline (``--chaos 'event = [{at_steps = 100, action =
"switch-restart"}]'``). A bad plan is a one-line error (``PlanError``; exit 2 from the CLI).

The executor (``Chaos``) is called by the local backend once per loop step
(``LocalProcesses.tick``), or by the virtual clock's (``Simulated.tick``: loss, switch
restart and worker kills as simulated events); an event fires at the first step at or
after its ``at_steps``.

A ``ps-crash`` is the last event. While it is pending the run does not stop at its target
(the crash ends it; the run resumed from it stops at the target again), and it waits,
beyond its ``at_steps``, until a checkpoint was written after every earlier event and
after every killed process came back, so that what is restored has seen the whole plan.
Before the process kills itself it writes, next to the checkpoint, ``chaos-before.npz``
(what that checkpoint held, taken from memory, not from the file) and
``chaos-crash.json`` (the event log, the killed and restarted PIDs, the counters at the
crash). A run resumed from that directory writes ``chaos-after.npz`` into its ``--out``:
what its PS and counters held right after the restore. ``compare_records`` compares two
such records bit for bit.
"""

from __future__ import annotations

import json
import math
import os
import signal
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dataplane.queue import OlafQueue
from olaf.drl.results import EVALUATION_COLUMNS
from worker_transport.protocol import MsgType

ACTIONS = ("loss", "switch-restart", "kill-workers", "ps-crash")
PATHS = {"worker-switch": MsgType.UPDATE, "switch-ps": MsgType.DATA}
"""A path and the message type that is dropped on it (at the switch's input or output)."""
FIELDS = {"loss": {"path", "p", "for_steps"}, "switch-restart": set(), "kill-workers": {"n"},
          "ps-crash": set()}
"""The fields each action takes besides ``at_steps`` and ``action``."""
CRASH_RECORD = "chaos-crash.json"
BEFORE_RECORD = "chaos-before.npz"
AFTER_RECORD = "chaos-after.npz"
LOG_NAME = "chaos.json"
"""The event log a chaos run keeps current in its ``--out`` directory."""
METRICS = ("episodes", "evaluations", "data")


class PlanError(ValueError):
    """A chaos plan that cannot be read or does not fit the run (one line)."""


@dataclass(frozen=True)
class Event:
    """One fault of a plan (see the module doc for the fields)."""

    at_steps: int
    action: str
    path: str = ""
    p: float = 0.0
    for_steps: int = 0
    n: int = 0


@dataclass(frozen=True)
class Plan:
    """A validated plan: its events in the order they fire."""

    events: tuple[Event, ...]

    @property
    def crash(self) -> Event | None:
        return next((e for e in self.events if e.action == "ps-crash"), None)

    @property
    def kills(self) -> int:
        """Worker processes the plan kills in all."""
        return sum(e.n for e in self.events if e.action == "kill-workers")


# -- reading a plan -----------------------------------------------------------------------
def read_plan(spec: str) -> Plan:
    """The plan in file ``spec`` (``.json``: JSON, else TOML) or in ``spec`` itself."""
    path = Path(spec)
    try:
        is_file = path.is_file()
    except OSError:  # inline text too long for a file name
        is_file = False
    if path.suffix in (".toml", ".json") and not is_file:
        raise PlanError(f"no plan file {spec}")
    if is_file:
        text, as_json = path.read_text(), path.suffix == ".json"
    else:
        text, as_json = spec, spec.lstrip().startswith(("{", "[{", "[ {", "[]"))
    try:
        data = json.loads(text) if as_json else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if as_json else "TOML"
        raise PlanError(f"not a {kind} plan: {str(exc).splitlines()[0]}") from None
    return parse_plan(data)


def parse_plan(data: Any) -> Plan:
    """Validate a plan's parsed form (``{"event": [...]}`` or the list)."""
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"event"})
        if unknown:
            raise PlanError(f"unknown plan key(s) {', '.join(unknown)} (a plan is a list 'event')")
        data = data.get("event", [])
    if not isinstance(data, list) or not data:
        raise PlanError("a plan needs at least one event")
    events = [_event(i, e) for i, e in enumerate(data)]
    events.sort(key=lambda e: e.at_steps)  # stable: events at the same step keep their order
    crashes = [e for e in events if e.action == "ps-crash"]
    if len(crashes) > 1:
        raise PlanError("a plan has at most one ps-crash")
    if crashes and events[-1] is not crashes[0]:
        raise PlanError("ps-crash must be the plan's last event (the run ends there)")
    return Plan(tuple(events))


def _event(i: int, raw: Any) -> Event:
    where = f"event {i + 1}"
    if not isinstance(raw, dict):
        raise PlanError(f"{where}: an event is a table of fields")
    action = raw.get("action")
    if action not in ACTIONS:
        raise PlanError(f"{where}: action must be one of {', '.join(ACTIONS)}, not {action!r}")
    unknown = sorted(set(raw) - {"at_steps", "action"} - FIELDS[action])
    if unknown:
        raise PlanError(f"{where}: {action} takes no field(s) {', '.join(unknown)}")
    at = _count(raw, "at_steps", where, required=True)
    if action == "loss":
        path = raw.get("path")
        if path not in PATHS:
            raise PlanError(f"{where}: loss path must be one of {', '.join(PATHS)}, not {path!r}")
        p = raw.get("p")
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p <= 1:
            raise PlanError(f"{where}: loss p must be a probability in (0, 1], not {p!r}")
        return Event(at, action, path=path, p=float(p), for_steps=_count(raw, "for_steps", where))
    if action == "kill-workers":
        n = _count(raw, "n", where, required=True)
        if n < 1:
            raise PlanError(f"{where}: kill-workers n must be >= 1")
        return Event(at, action, n=n)
    return Event(at, action)


def _count(raw: dict[str, Any], key: str, where: str, required: bool = False) -> int:
    value = raw.get(key)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"{where}: {key} must be an integer >= 0, not {value!r}")
    return value


def check_plan(plan: Plan, cfg: Any) -> None:
    """Refuse a plan that the run ``cfg`` (a ``RunConfig``) cannot carry out."""
    kills = [e.n for e in plan.events if e.action == "kill-workers"]
    if kills and max(kills) > cfg.worker_processes:
        raise PlanError(f"kill-workers n={max(kills)}: the run has {cfg.worker_processes} worker "
                        "processes (--processes)")
    if plan.kills > cfg.max_restarts:
        raise PlanError(f"the plan kills {plan.kills} worker processes, more than --max-restarts "
                        f"{cfg.max_restarts}")
    crash = plan.crash
    if crash is None:
        return
    if cfg.clock == "virtual":
        raise PlanError("ps-crash does not apply on the virtual clock (no checkpoints, no resume)")
    if not cfg.checkpoint_dir or not cfg.checkpoint_every:
        raise PlanError("ps-crash needs --checkpoint-dir and --checkpoint-every (it is survived "
                        "by --resume from the last checkpoint)")
    if crash.at_steps < cfg.checkpoint_every:
        raise PlanError(f"ps-crash at_steps {crash.at_steps} comes before the first checkpoint "
                        f"(--checkpoint-every {cfg.checkpoint_every})")


# -- the executor ---------------------------------------------------------------------------
class Chaos:
    """Carries out a plan: ``tick`` is called once per loop step with the backend and the
    loop, by the local backend (``olaf.drl.local.LocalProcesses``: real faults) or the
    virtual clock (``olaf.drl.simulated.Simulated``: simulated events, no ps-crash)."""

    def __init__(self, plan: Plan, out: Path | None = None) -> None:
        self.plan = plan
        self.out = out
        self.pending = list(plan.events)
        self.loss: dict[str, tuple[float, float]] = {}
        """Active loss per path: (p, env steps it ends at)."""
        self.log: list[dict[str, Any]] = []
        self.killed: list[dict[str, Any]] = []
        """Per killed process: name, pid, at_steps; new_pid and back_at_steps once it is back."""
        self.switch_restarts = 0
        self.generation = 0
        """Worker generations the virtual clock's kill-workers used (seeds of new workers)."""
        self._checkpoints_seen = 0
        """``result.checkpoints`` when the plan last changed something (the crash waits for more)."""

    def tick(self, backend: Any, loop: Any) -> None:
        steps = loop.steps
        for path, (_, end) in list(self.loss.items()):
            if steps >= end:
                del self.loss[path]
                self._set_loss(backend)
                self._note(backend, loop, {"action": "loss-end", "path": path,
                                           "dropped": dropped(_impairment(backend))})
        if hasattr(backend, "children"):  # the local backend's processes
            self._watch_restarts(backend, loop)
        while self.pending and self.pending[0].at_steps <= steps:
            event = self.pending[0]
            if event.action == "ps-crash" and not self._crash_ready(backend):
                return
            self.pending.pop(0)
            self._fire(event, backend, loop)

    # -- the actions ---------------------------------------------------------------------
    def _fire(self, event: Event, backend: Any, loop: Any) -> None:
        entry: dict[str, Any] = {"action": event.action, "at_steps": event.at_steps}
        if event.action == "loss":
            end = loop.steps + event.for_steps if event.for_steps else math.inf
            self.loss[event.path] = (event.p, end)
            self._set_loss(backend)
            entry.update(path=event.path, p=event.p, for_steps=event.for_steps)
        elif event.action == "switch-restart":
            entry.update(switch_before=restart_switch(backend.switch) if hasattr(backend, "switch")
                         else restart_simulated_switch(backend))
            self.switch_restarts += 1
        elif event.action == "kill-workers" and not hasattr(backend, "children"):
            self.generation += 1
            entry.update(killed=restart_simulated_workers(backend, event.n, self.generation))
        elif event.action == "kill-workers":
            victims = [c for c in backend.children if not c.is_evaluator][:event.n]
            for child in victims:
                os.kill(child.proc.pid, signal.SIGKILL)
                self.killed.append({"name": child.name, "pid": child.proc.pid,
                                    "at_steps": loop.steps})
            entry.update(killed={c.name: c.proc.pid for c in victims})
        self._note(backend, loop, entry)
        if event.action == "ps-crash":
            self._crash(backend, loop)

    def _set_loss(self, backend: Any) -> None:
        # One assignment of a new dict: the switch thread reads it without a lock.
        _impairment(backend).type_drop = {int(PATHS[path]): p for path, (p, _) in self.loss.items()}

    def _watch_restarts(self, backend: Any, loop: Any) -> None:
        """A killed process is back when its successor (same name, new PID) reported."""
        for entry in self.killed:
            if "back_at_steps" in entry:
                continue
            child = next(c for c in backend.children if c.name == entry["name"])
            pid = child.proc.pid
            if pid != entry["pid"] and pid in loop.tx:
                entry.update(new_pid=pid, back_at_steps=loop.steps)
                self._checkpoints_seen = backend.result.checkpoints
                self._note(backend, loop, {"action": "worker-back", "name": entry["name"],
                                           "pid": entry["pid"], "new_pid": pid})

    def _crash_ready(self, backend: Any) -> bool:
        return (backend.last_checkpoint is not None
                and backend.result.checkpoints > self._checkpoints_seen
                and all("back_at_steps" in k for k in self.killed))

    def _crash(self, backend: Any, loop: Any) -> None:
        """Record what the last checkpoint held and the counters, then die as a crash does."""
        ckpt, result = backend.last_checkpoint, backend.result
        where = Path(backend.cfg.checkpoint_dir)
        write_record(where / BEFORE_RECORD, checkpoint_record(ckpt))
        crash = {
            "pid": os.getpid(),
            "env_steps": loop.steps,
            "episodes": len(result.episodes),
            "model_version": backend.ps.model_version,
            "checkpoint_env_steps": ckpt.env_steps,
            "checkpoint_model_version": ckpt.model_version,
            "checkpoint_every": backend.cfg.checkpoint_every,
            "checkpoints": result.checkpoints,
            "restarts": result.restarts,
            "restart_log": [list(r) for r in result.restart_log],
            "killed": self.killed,
            "switch_restarts": self.switch_restarts,
            "dropped": dropped(backend.switch.impairment),
            "processes": {c.name: c.proc.pid for c in backend.children},
            "weight_board": result.weight_board,
            "stop_at_target": True,  # olaf run's, suspended while the crash was pending
            "log": self.log,
        }
        _write_json(where / CRASH_RECORD, crash)
        os.kill(os.getpid(), signal.SIGKILL)

    def _note(self, backend: Any, loop: Any, entry: dict[str, Any]) -> None:
        entry.update(steps=loop.steps, elapsed=round(loop.backend.now() - loop.t0, 3))
        self._checkpoints_seen = backend.result.checkpoints
        self.log.append(entry)
        if self.out is not None:
            _write_json(self.out / LOG_NAME, {"log": self.log, "killed": self.killed,
                                              "switch_restarts": self.switch_restarts})


def restart_switch(switch: Any) -> dict[str, Any]:
    """The embedded switch loses its state, as a rebooted one would: a fresh queue (empty
    slots, counters at zero, the default threshold until the controller sets it again) on
    the same socket, so the workers keep their addresses. Returns what it held before."""
    with switch.lock:
        before = switch.pipeline.snapshot()
        switch.pipeline.queue = OlafQueue(switch.queue.config)
    return {"occupied": before["occupied"], "outcomes": before["outcomes"]}


def restart_simulated_switch(sim: Any) -> dict[str, Any]:
    """``restart_switch`` on the virtual clock (``olaf.drl.simulated.Simulated``)."""
    before = {"occupied": sim.queue.occupied, "outcomes": sim.outcomes()}
    sim.queue = OlafQueue(sim.queue.config)
    return before


def restart_simulated_workers(sim: Any, n: int, generation: int) -> dict[str, list[int]]:
    """kill-workers on the virtual clock: the logical workers of the first ``n`` worker
    processes (worker ``w`` lives in process ``w % P``) start again at once, in zero
    simulated time, as the local backend restarts them: new environments, learner and
    sender (no feedback, P_s = 1), seeds of a new ``generation``; a gradient computed
    but not yet sent is lost, the turn is acted again. Counted as the local backend counts."""
    from olaf.drl.simulated import SimTransport
    from olaf.drl.worker_turn import build_worker, worker_seed

    cfg, procs = sim.cfg, sim.cfg.worker_processes
    killed = {f"olaf-worker-{p}": [w for w in range(cfg.workers) if w % procs == p]
              for p in range(n)}
    ids = {w for ws in killed.values() for w in ws}
    for w in sorted(ids):
        worker, sender = sim.pool[w]
        worker.close()
        sender.close()
        sim.transports[w] = SimTransport(sim, w)
        sim.pool[w] = build_worker(cfg, w, worker_seed(cfg.seed, w, generation), None, sim.newest,
                                   transport=sim.transports[w], clock=sim.now_us)
    # Each worker has one pending event; a pending send (a gradient of the dead worker)
    # becomes acting again. Same time and order: the heap stays a heap.
    for i, (t, order, kind, w, _) in enumerate(sim._events):
        if w in ids and kind == "send":
            sim._events[i] = (t, order, "act", w, None)
    for name in killed:
        sim.result.restarts += 1
        sim.result.restart_log.append((sim.seconds(), name, -signal.SIGKILL))
    return killed


def _impairment(backend: Any) -> Any:
    """Where a backend's chaos loss lives: the embedded switch's, or the simulated links'."""
    return backend.switch.impairment if hasattr(backend, "switch") else backend.impairment


def dropped(impairment: Any) -> dict[str, int]:
    """The impairment's chaos drops by path name."""
    names = {int(t): path for path, t in PATHS.items()}
    return {names.get(t, str(t)): n for t, n in impairment.dropped_types.items()}


# -- records: what the PS held, compared bit for bit -------------------------------------------
def state_record(ps_state: dict[str, Any], env_steps: int, restarts: int,
                 metrics: dict[str, Any]) -> dict[str, np.ndarray]:
    """The state a checkpoint promises to keep, as arrays: the PS's weights, optimizer
    moments and per-block steps, its version and applied blocks, the env steps, restarts
    and the episode, evaluation and DATA rows."""
    record = {f"ps.{k}": np.asarray(ps_state[k]) for k in ("params", "adam_m", "adam_v",
                                                            "block_steps")}
    record.update({"model_version": np.int64(ps_state["model_version"]),
                   "blocks_applied": np.int64(ps_state["blocks_applied"]),
                   "env_steps": np.int64(env_steps), "restarts": np.int64(restarts)})
    for key in METRICS:
        width = len(EVALUATION_COLUMNS) if key == "evaluations" else 5
        record[f"metrics.{key}"] = np.asarray(metrics.get(key, ()), np.float64).reshape(-1, width)
    return {k: np.asarray(v) for k, v in record.items()}


def checkpoint_record(ckpt: Any) -> dict[str, np.ndarray]:
    """``state_record`` of an ``olaf.drl.checkpoint.Checkpoint`` (in memory or loaded)."""
    return state_record(ckpt.ps, ckpt.env_steps, int(ckpt.scalars.get("restarts", 0)),
                        ckpt.metrics)


def resumed_record(ps: Any, result: Any) -> dict[str, np.ndarray]:
    """``state_record`` of a resumed run's PS and counters, right after the restore."""
    return state_record(ps.state(), result.env_steps, result.restarts,
                        {k: getattr(result, k) for k in METRICS})


def crash_record(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The ``chaos-crash.json`` a ps-crash left in ``checkpoint_dir``, if any."""
    path = Path(checkpoint_dir) / CRASH_RECORD
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None


def record_resumed(out: Path) -> Any:
    """The ``on_resume`` callback of a run resumed after a chaos ps-crash."""

    def record(ps: Any, result: Any) -> None:
        out.mkdir(parents=True, exist_ok=True)
        write_record(out / AFTER_RECORD, resumed_record(ps, result))

    return record


def write_record(path: Path, record: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        np.savez(f, **record)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def compare_records(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> list[str]:
    """What differs between two ``state_record``s, one line per key; [] if they are equal
    bit for bit (same dtype, shape and bytes: a NaN equals the same NaN, -0.0 is not 0.0)."""
    problems = []
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            problems.append(f"{key}: only in {'after' if key not in before else 'before'}")
            continue
        a, b = before[key], after[key]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{key}: {a.dtype}{list(a.shape)} before, {b.dtype}{list(b.shape)} after")
        elif a.tobytes() != b.tobytes():
            bytes_a, bytes_b = (np.ascontiguousarray(x).reshape(-1).view(np.uint8)
                                .reshape(-1, x.itemsize) for x in (a, b))
            differ = np.flatnonzero((bytes_a != bytes_b).any(axis=1))
            problems.append(f"{key}: {len(differ)} value(s) differ, the first at flat index "
                            f"{int(differ[0])}")
    return problems


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_plain))
    os.replace(tmp, path)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isinf(value):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON")
