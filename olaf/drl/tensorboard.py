"""``--tensorboard DIR``: the run's scalars as TensorBoard event files.

The same figures as the timeline CSV, keyed by environment steps (the x axis RL users
compare runs on): training returns, evaluation returns (the configured policy's and
both the greedy and the stochastic one's), AoM, queue occupancy and outcomes,
the workers' P_s, and the learner's losses and gradient norms.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from olaf.drl.results import EvalScores


class TensorBoardLog:
    """A ``torch.utils.tensorboard.SummaryWriter`` fed with a run's snapshots and evaluations."""

    def __init__(self, logdir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(logdir))

    def _scalar(self, tag: str, value: float | None, step: int, wall: float | None = None) -> None:
        if value is not None and math.isfinite(value):
            self.writer.add_scalar(tag, value, step, walltime=wall)

    def snapshot(self, snap: Any) -> None:
        """One ``olaf.drl.results.Snapshot``."""
        step = snap.env_steps
        self._scalar("train/mean_return", snap.mean_return, step)
        self._scalar("aom/global_ms", snap.aom_ms, step)
        for q in ("p50", "p90", "p99"):
            self._scalar(f"aom/staleness_{q}_versions", getattr(snap, f"staleness_{q}"), step)
            self._scalar(f"aom/update_age_{q}_ms", getattr(snap, f"update_age_{q}_ms"), step)
        self._scalar("queue/occupied_slots", float(snap.occupied), step)
        self._scalar("model/version", float(snap.model_version), step)
        self._scalar("tx/p_s_mean", snap.p_s_mean, step)
        self._scalar("tx/updates_sent", float(snap.updates_sent), step)
        self._scalar("tx/updates_skipped", float(snap.updates_skipped), step)
        self._scalar("tx/updates_probes", float(snap.updates_probes), step)
        if snap.threshold is not None:
            self._scalar("queue/reward_threshold", snap.threshold, step)
        for name, count in snap.outcomes.items():
            self._scalar(f"outcomes/{name.lower()}", float(count), step)
        for name, value in snap.learner.items():
            self._scalar(f"learner/{name}", value, step)

    def episode(self, ret: float, step: int) -> None:
        self._scalar("train/episode_return", ret, step)

    def evaluation(self, scores: EvalScores, policy: str, step: int) -> None:
        """One evaluation: ``eval/return_mean`` and ``_std`` are ``policy``'s (the
        configured one, ``RunConfig.eval_policy``: the tags older runs have), and both
        policies' under ``eval/greedy_*`` and ``eval/stochastic_*`` (none for a model that
        cannot sample: its stochastic scores are NaN)."""
        mean, std = scores.of(policy)
        self._scalar("eval/return_mean", mean, step)
        self._scalar("eval/return_std", std, step)
        for name in ("greedy", "stochastic"):
            mean, std = scores.of(name)
            self._scalar(f"eval/{name}_return_mean", mean, step)
            self._scalar(f"eval/{name}_return_std", std, step)

    def close(self) -> None:
        self.writer.close()
