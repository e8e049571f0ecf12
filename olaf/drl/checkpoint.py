"""Checkpoints of an ``olaf run``: enough to continue the run exactly where it stopped.

One file, ``DIR/checkpoint.npz``, a NumPy archive read with ``allow_pickle=False`` (no
arbitrary objects are ever unpickled from it):

* ``ps.params``, ``ps.adam_m``, ``ps.adam_v``, ``ps.block_steps``: the parameter server's
  weights, Adam's first and second moments per parameter and Adam's step count per block
  (``ParameterServer.state``);
* ``rng.torch``, ``rng.numpy``, ``rng.python``: the PS process's random generators (the
  worker processes do not carry theirs over: each process derives its seeds from the
  run's seed, the worker id and its generation, see ``olaf.drl.worker_turn.worker_seed``);
* ``metrics.*``: the episodes, evaluations (``EVALUATION_COLUMNS``; older checkpoints
  hold their first five), DATA log and AoM samples so far;
* ``meta``: UTF-8 JSON with the format number, the run configuration (``RunConfig`` as a
  dict), model version, applied blocks, env steps, elapsed run time, the timeline rows,
  generation and restart counts, and the scalar parts of the RNG states.

It is written to a temporary file in the same directory, flushed with ``fsync`` and moved
over the previous one with ``os.replace`` (then the directory is synced), so a crash in the
middle of a write leaves the previous checkpoint whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from olaf.drl.config import RunConfig
from olaf.drl.results import EVALUATION_COLUMNS, RunResult, Snapshot

if TYPE_CHECKING:
    from olaf.drl.server import ParameterServer

CHECKPOINT_NAME = "checkpoint.npz"
FORMAT = 1
"""Bumped when the layout changes; a checkpoint of another format is refused."""
PS_KEYS = ("params", "adam_m", "adam_v", "block_steps")
METRIC_KEYS = ("episodes", "evaluations", "data", "aom_t_ms", "aom_global_ms", "update_age_ms")


class CheckpointError(ValueError):
    """A checkpoint that is missing, unreadable or not one this version can continue."""


@dataclass
class Checkpoint:
    """What ``save`` writes and ``load`` returns."""

    config: RunConfig
    ps: dict[str, Any]
    """``ParameterServer.state()``: arrays ``PS_KEYS``, ints model_version, blocks_applied."""
    env_steps: int
    elapsed: float
    """Seconds of run time so far (the resumed run's clock continues from here)."""
    metrics: dict[str, np.ndarray] = field(default_factory=dict)
    """Arrays ``METRIC_KEYS``, rows as ``RunResult`` keeps them."""
    timeline: list[dict[str, Any]] = field(default_factory=list)
    """``Snapshot`` rows as dicts."""
    scalars: dict[str, Any] = field(default_factory=dict)
    """time_to_target, steps_to_target, return_at_target, restarts, evaluations_done."""
    rng: dict[str, Any] = field(default_factory=dict)
    generation: int = 0
    """Highest worker-process generation used so far (seeds of later ones differ)."""
    written_at: float = 0.0

    @property
    def model_version(self) -> int:
        return int(self.ps["model_version"])


# -- configuration as JSON -------------------------------------------------------------
def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild a (nested, frozen) configuration dataclass from ``config_to_dict``'s output.

    CheckpointError names unknown fields (a checkpoint of another version of olaf) and
    values the dataclass refuses.
    """
    # The default instance, not the type hints, says which fields are nested configs or
    # tuples: RunConfig's learner configs are imported only when one is made.
    default = cls()
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise CheckpointError(f"{cls.__name__} has no field(s) {', '.join(unknown)} "
                              "(checkpoint of another olaf version?)")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        current = getattr(default, name)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            value = config_from_dict(type(current), value)
        elif isinstance(current, tuple) and isinstance(value, list):
            value = tuple(value)
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint configuration refused: {exc}") from exc


# -- random generators of the PS process ----------------------------------------------------
def capture_rng() -> dict[str, Any]:
    """The PS process's torch, NumPy (legacy global) and Python generator states."""
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {"torch": torch.get_rng_state().numpy().copy(),
            "numpy": np.asarray(keys, np.uint32),
            "python": np.asarray(internal, np.uint64),
            "numpy_meta": [kind, int(pos), int(has_gauss), float(cached)],
            "python_meta": [int(version), gauss_next]}


def restore_rng(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(torch.from_numpy(np.asarray(state["torch"], np.uint8).copy()))
    kind, pos, has_gauss, cached = state["numpy_meta"]
    np.random.set_state((kind, np.asarray(state["numpy"], np.uint32), pos, has_gauss, cached))
    version, gauss_next = state["python_meta"]
    random.setstate((version, tuple(int(v) for v in state["python"]), gauss_next))


# -- the file --------------------------------------------------------------------------
def checkpoint_path(location: str | Path) -> Path:
    """``location`` itself if it is a file, else ``location/checkpoint.npz``."""
    path = Path(location)
    return path if path.is_file() else path / CHECKPOINT_NAME


def save(directory: str | Path, ckpt: Checkpoint) -> Path:
    """Write ``ckpt`` atomically to ``directory/checkpoint.npz``; returns the path."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    final = d / CHECKPOINT_NAME
    meta = {
        "format": FORMAT,
        "config": config_to_dict(ckpt.config),
        "model_version": int(ckpt.ps["model_version"]),
        "blocks_applied": int(ckpt.ps["blocks_applied"]),
        "env_steps": int(ckpt.env_steps),
        "elapsed": float(ckpt.elapsed),
        "timeline": ckpt.timeline,
        "scalars": ckpt.scalars,
        "generation": int(ckpt.generation),
        "written_at": time.time(),
        "rng": {k: ckpt.rng[k] for k in ("numpy_meta", "python_meta") if k in ckpt.rng},
    }
    arrays: dict[str, np.ndarray] = {
        "meta": np.frombuffer(json.dumps(meta).encode(), np.uint8),
        **{f"ps.{k}": np.asarray(ckpt.ps[k]) for k in PS_KEYS},
        **{f"metrics.{k}": np.asarray(ckpt.metrics.get(k, np.zeros(0)), np.float64)
           for k in METRIC_KEYS},
        **{f"rng.{k}": np.asarray(ckpt.rng[k]) for k in ("torch", "numpy", "python")
           if k in ckpt.rng},
    }
    tmp = d / f".{CHECKPOINT_NAME}.{os.getpid()}.tmp"
    try:
        with tmp.open("wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a power cut
    finally:
        os.close(fd)
    return final


def load(location: str | Path) -> Checkpoint:
    """Read a checkpoint (its file or its directory); CheckpointError on any problem."""
    path = checkpoint_path(location)
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(arrays.pop("meta").tobytes().decode())
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc})") from exc
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')!r}, this olaf "
                              f"reads {FORMAT}")
    missing = [f"ps.{k}" for k in PS_KEYS if f"ps.{k}" not in arrays]
    if missing:
        raise CheckpointError(f"{path}: missing {', '.join(missing)}")
    config = config_from_dict(RunConfig, meta["config"])
    ps: dict[str, Any] = {k: arrays[f"ps.{k}"] for k in PS_KEYS}
    ps["model_version"], ps["blocks_applied"] = meta["model_version"], meta["blocks_applied"]
    rng: dict[str, Any] = {k: arrays[f"rng.{k}"] for k in ("torch", "numpy", "python")
                           if f"rng.{k}" in arrays}
    rng.update(meta.get("rng", {}))
    metrics = {k: arrays.get(f"metrics.{k}", np.zeros(0)) for k in METRIC_KEYS}
    return Checkpoint(config=config, ps=ps, env_steps=int(meta["env_steps"]),
                      elapsed=float(meta["elapsed"]), metrics=metrics,
                      timeline=list(meta.get("timeline", [])), scalars=dict(meta.get("scalars", {})),
                      rng=rng, generation=int(meta.get("generation", 0)),
                      written_at=float(meta.get("written_at", 0.0)))


def timeline_row(row: dict[str, Any]) -> Snapshot:
    """One checkpoint timeline row as a ``Snapshot``. A row written before evaluations were
    both policies' has no ``eval_greedy``: its ``eval_return`` was greedy, as its
    evaluations rows were (see ``restore_metrics``), and it knows no stochastic one."""
    if "eval_greedy" not in row:
        row = {**row, "eval_greedy": row.get("eval_return", math.nan)}
    return Snapshot(**row)


def restore_metrics(result: RunResult, ckpt: Checkpoint) -> None:
    """The checkpoint's learning curve and counters, so the resumed run continues them."""
    m = ckpt.metrics

    def rows(stored: np.ndarray, ints: tuple[int, ...], width: int = 5) -> list[tuple]:
        return [tuple(int(v) if i in ints else float(v) for i, v in enumerate(r))
                for r in np.asarray(stored, np.float64).reshape(-1, width).tolist()]

    evaluations = np.asarray(m.get("evaluations", np.zeros((0, 5))), np.float64)
    if evaluations.size and evaluations.shape[-1] == 5:
        # Written before evaluations were both policies': those were greedy ones.
        evaluations = evaluations.reshape(-1, 5)
        nan = np.full((len(evaluations), 2), math.nan)
        evaluations = np.hstack([evaluations, evaluations[:, 2:4], nan])
    result.episodes = rows(m.get("episodes", np.zeros((0, 5))), (1, 2, 4))
    result.evaluations = rows(evaluations, (1, 4), len(EVALUATION_COLUMNS))
    result.data = rows(m.get("data", np.zeros((0, 5))), (1, 2, 3))
    result.aom_t_ms = np.asarray(m.get("aom_t_ms", np.zeros(0)), np.float64)
    result.aom_global_ms = np.asarray(m.get("aom_global_ms", np.zeros(0)), np.float64)
    result.update_age_ms = np.asarray(m.get("update_age_ms", np.zeros(0)), np.float64)
    result.timeline = [timeline_row(row) for row in ckpt.timeline]
    s = ckpt.scalars
    result.time_to_target, result.steps_to_target = s.get("time_to_target"), s.get("steps_to_target")
    result.return_at_target = float(s.get("return_at_target") or math.nan)
    result.restarts = int(s.get("restarts", 0))
    result.env_steps = ckpt.env_steps


def save_run(cfg: RunConfig, result: RunResult, ps: ParameterServer, generation: int,
                     receiver_series: Any, elapsed: float | None = None) -> Checkpoint:
    """Write the run's checkpoint now (``receiver_series``: the live AoM series, if the
    receiver is still running; None when ``result`` already holds all of it); returns
    what was written, as it was in memory."""
    aom_t, aom_g, ages = result.aom_t_ms, result.aom_global_ms, result.update_age_ms
    if receiver_series is not None:
        series, shift = receiver_series
        aom_t = np.concatenate([aom_t, series.t_ms + shift])
        aom_g = np.concatenate([aom_g, series.global_ms])
        ages = np.concatenate([ages, series.ages_ms])
    ckpt = Checkpoint(
        config=cfg, ps=ps.state(), env_steps=result.env_steps,
        elapsed=result.wall_time if elapsed is None else elapsed,
        metrics={"episodes": np.asarray(result.episodes, np.float64).reshape(-1, 5),
                 "evaluations": np.asarray(result.evaluations, np.float64).reshape(
                     -1, len(EVALUATION_COLUMNS)),
                 "data": np.asarray(result.data, np.float64).reshape(-1, 5),
                 "aom_t_ms": aom_t, "aom_global_ms": aom_g, "update_age_ms": ages},
        timeline=[asdict(s) for s in result.timeline],
        scalars={"time_to_target": result.time_to_target,
                 "steps_to_target": result.steps_to_target,
                 "return_at_target": (result.return_at_target
                                      if math.isfinite(result.return_at_target) else None),
                 "restarts": result.restarts},
        rng=capture_rng(), generation=generation)
    save(cfg.checkpoint_dir, ckpt)
    result.checkpoints += 1
    return ckpt
