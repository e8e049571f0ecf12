"""The learner a run's workers use, by ``RunConfig.algo``."""

from __future__ import annotations

from typing import Any

from olaf.drl.config import RunConfig


def make_worker(cfg: RunConfig, worker_id: int, seed: int) -> Any:
    """An ``ImpactWorker`` or an A2C ``RolloutWorker``; both make ``Gradient``s the same way."""
    if cfg.algo == "impact":
        from olaf.drl.impact import ImpactWorker

        return ImpactWorker(cfg.env_id, worker_id, cfg.impact, seed)
    from olaf.drl.worker import RolloutWorker

    return RolloutWorker(cfg.env_id, worker_id, cfg.learner, seed)
