"""The algorithm a run's workers carry, by ``RunConfig.algo``: ``impact``, ``a2c``, or a
user's own ``olaf.algorithm.Algorithm`` subclass named ``MODULE:CLASS``."""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from olaf.algorithm import Algorithm, Worker, flat_parameters, initial_model
from olaf.drl.a2c import A2C
from olaf.drl.config import ALGOS, RunConfig
from olaf.drl.impact import LUNAR_LANDER, Impact, ImpactConfig
from olaf.drl.server import ParameterServer
from olaf.drl.settings import with_settings


@dataclass(frozen=True)
class EnvLearner:
    """IMPACT's settings for an environment its defaults do not learn, as rl-baselines3-zoo
    keeps one set per environment: ``olaf run --env ID`` starts from them, and the flags
    apply on top."""

    impact: ImpactConfig
    capacity: int
    """Queue slots when neither --capacity nor a buffer is given: the learner's updates are
    larger than the default queue (a delta learner needs D >= 1, docs/archive/results-2026-12-06.md)."""


ENV_LEARNERS: dict[str, EnvLearner] = {
    # 154-block updates; 2,048 slots hold one from each of 8 workers, even in a FIFO.
    "LunarLander-v3": EnvLearner(LUNAR_LANDER, capacity=2048),
}


def env_learner(env_id: str, algo: str) -> EnvLearner | None:
    """The environment's own IMPACT settings if the run trains IMPACT there, else None."""
    return ENV_LEARNERS.get(env_id) if algo == "impact" else None


def load_algorithm(spec: str) -> type[Algorithm]:
    """The ``Algorithm`` subclass named ``MODULE:CLASS`` (ValueError saying what is wrong)."""
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(f"algo {spec!r}: expected {', '.join(ALGOS)} or MODULE:CLASS")
    if os.getcwd() not in sys.path:
        # The current directory is searched too (as ``python -m`` and uvicorn do): the
        # ``olaf`` console script's sys.path starts at its own bin directory instead.
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"algo {spec!r}: cannot import {module_name!r}: {exc}") from None
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ValueError(f"algo {spec!r}: {module_name} has no olaf.algorithm.Algorithm "
                         f"subclass {class_name!r}")
    return cls


def algorithm_config(spec: str, settings: tuple[str, ...] = ()) -> Any:
    """A user algorithm's ``Config`` with ``algo.NAME=VALUE`` settings applied."""
    return with_settings(load_algorithm(spec).Config(), settings)


def algo_config(cfg: RunConfig) -> Any:
    """Hyperparameters of the run's learner (the PS reads its optimizer settings here); for
    ``MODULE:CLASS`` its ``Config`` with ``algo_set`` applied (imports the module)."""
    if cfg.algo == "impact":
        return cfg.impact
    if cfg.algo == "a2c":
        return cfg.learner
    return algorithm_config(cfg.algo, cfg.algo_set)


def make_algorithm(cfg: RunConfig) -> Algorithm:
    """The run's algorithm with its hyperparameters from ``cfg``."""
    if cfg.algo == "impact":
        return Impact(cfg.impact, budget_steps=cfg.total_steps // cfg.workers)
    if cfg.algo == "a2c":
        # Staleness-aware aggregation pairs with the truncated importance-weighted loss.
        rho = cfg.staleness.rho if cfg.aggregation == "staleness-aware" else None
        return A2C(cfg.learner, rho)
    return load_algorithm(cfg.algo)(algo_config(cfg))


def make_worker(cfg: RunConfig, worker_id: int, seed: int) -> Worker:
    """One logical worker of the run: the platform's ``Worker`` carrying its algorithm."""
    return Worker(make_algorithm(cfg), cfg.env_id, worker_id, seed)


def run_model(cfg: RunConfig) -> nn.Module:
    """The run's model at its first weights, built as every process of the run builds it."""
    return initial_model(make_algorithm(cfg), cfg.env_id, cfg.seed)


def parameter_server(cfg: RunConfig, model: nn.Module) -> ParameterServer:
    """The run's parameter server, starting from ``model``'s weights (IMPACT's delta share
    taken for the run's number of workers: ``ImpactConfig.delta_share``)."""
    config = algo_config(cfg)
    if isinstance(config, ImpactConfig):
        config = replace(config, delta_rate=config.delta_share(cfg.workers))
    return ParameterServer(flat_parameters(model), config, cfg.values, cfg.ps)
