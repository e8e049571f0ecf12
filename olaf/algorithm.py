"""The algorithm API: what a learner supplies, and what the platform does with it.

A learner (an ``Algorithm``) supplies three things and nothing else:

* a **model factory**, ``make_model(observation_space, action_space)``: a torch module;
  its ``parameters()``, in their order, are the weights the platform moves around, and
  its ``greedy(obs)`` method, if it has one, is the action greedy evaluation takes;
* an **experience source**, ``make_experience(env_id, seed)``: an ``ExperienceSource``
  whose ``collect(model)`` acts in (vectorised) environments with the model and returns
  an ``Experience``, a batch of whatever form its loss wants (``VectorActor`` below is a
  ready one for any gymnasium environment with flat observations);
* a **loss over a batch**, ``loss(model, batch)``: a scalar tensor and a dict of
  statistics; plus, optionally, ``clip_groups(model)``: which parameters are clipped to
  which L2 norm (an actor and a critic apart, say).

The platform does the rest, the same for every learner: the ``Worker`` below loads the
newest weights, refreshes them before the loss when the algorithm asks
(``refresh_before_loss``), differentiates the loss, clips, and hands the gradient on as
one flat float32 vector (``flat_gradient``); the run cuts it into blocks of V values,
sends them through the switch's OlafQueue, and the parameter server applies them with
Adam (reading ``learning_rate``, ``adam_betas`` and ``adam_eps`` from the algorithm's
``config``), counts model versions, and records metrics (the loss's statistics among
them). Workers never step an optimiser.

A user's own algorithm is a subclass of ``Algorithm`` in any importable module:
``olaf run --algo mypkg.mymodule:MyAlgorithm`` (docs/algorithm.md,
docs/examples/reinforce.py). The built-in learners are written against this interface
and nothing else: IMPACT (olaf.drl.impact.Impact) and A2C (olaf.drl.a2c.A2C).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

# -- what a worker hands on -----------------------------------------------------------------


@dataclass
class Episode:
    """A finished episode: its undiscounted return and length."""

    ret: float
    length: int


@dataclass
class Gradient:
    """One worker gradient, ready to send."""

    flat: np.ndarray
    """Clipped gradient (or, from an algorithm with a ``local_update``, the parameter delta
    ``before - after``), float32, model parameter order."""
    norm: float
    """L2 norm before clipping."""
    model_version: int
    """Version of the weights the loss was computed at."""
    reward: float
    """The worker's recent mean episode return when the gradient was made."""
    steps: int
    """Environment steps in the rollout."""
    episodes: list[Episode] = field(default_factory=list)
    """Episodes that finished during the rollout."""
    stats: dict[str, float] = field(default_factory=dict)
    """Loss terms and gradient norms of this gradient (for the metrics and TensorBoard)."""


# -- what an algorithm supplies -------------------------------------------------------------


@dataclass(frozen=True)
class AlgorithmConfig:
    """Hyperparameters every algorithm has: the parameter server's Adam reads these three.
    Subclass it (a frozen dataclass) to add your own; ``olaf run --set algo.NAME=VALUE``
    sets any field."""

    learning_rate: float = 1e-3
    """Adam step size at the parameter server."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's moment decay rates."""
    adam_eps: float = 1e-8
    """Adam's denominator epsilon."""


@dataclass
class Experience:
    """What an experience source collected: a batch for the loss, and the bookkeeping."""

    batch: Any
    """Whatever the algorithm's ``loss`` takes (``Rollout`` for the built-in source)."""
    steps: int
    """Environment steps it took (the run's step budget counts these)."""
    episodes: list[Episode] = field(default_factory=list)
    """Episodes that finished while collecting."""


class ExperienceSource(Protocol):
    """Acts in environments with a model; one per worker."""

    def collect(self, model: nn.Module) -> Experience:
        """Act with ``model`` (its weights are the behaviour policy) and return a batch."""
        ...

    @property
    def recent_return(self) -> float:
        """Recent mean episode return: the reward the worker's updates carry to the switch."""
        ...

    def close(self) -> None: ...


@dataclass
class ClipGroup:
    """Parameters whose gradient is clipped to ``max_norm`` together; the norm before
    clipping is reported as the statistic ``{name}_grad_norm``."""

    name: str
    parameters: list[nn.Parameter]
    max_norm: float


class Algorithm(ABC):
    """A learner: model factory, experience source and loss (see the module doc)."""

    Config: ClassVar[type] = AlgorithmConfig
    """The hyperparameter dataclass; ``Algorithm()`` uses its defaults."""
    refresh_before_loss: ClassVar[bool] = False
    """True: the worker takes the newest published weights between collecting and the
    loss, and stamps the gradient with their version (IMPACT); the loss then runs at
    weights newer than those that acted, which it must correct for."""

    def __init__(self, config: Any = None) -> None:
        self.config = self.Config() if config is None else config

    @abstractmethod
    def make_model(self, observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
        """A fresh model for these spaces (ValueError for spaces it cannot handle)."""

    @abstractmethod
    def make_experience(self, env_id: str, seed: int) -> ExperienceSource:
        """One worker's experience source, its environments seeded from ``seed``."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """The scalar loss whose gradient the worker sends, and statistics to record."""

    def clip_groups(self, model: nn.Module) -> list[ClipGroup]:
        """Gradient clipping; none by default."""
        return []

    def local_update(self, model: nn.Module, batch: Any) -> tuple[np.ndarray, dict[str, float]] | None:
        """Optional: improve ``model`` on ``batch`` with an optimiser of the worker's own
        (several epochs, as PPO does) and return (the parameter delta ``before - after`` to
        send in place of a gradient, statistics), leaving ``model``'s weights as they were.
        None (the default): the worker sends the clipped gradient of ``loss``. A parameter
        server that applies the delta with SGD at learning rate 1 moves to the locally
        improved weights (docs/learner.md)."""
        return None

    def curvature_sample(self, batch: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(observations, discrete actions, advantages) of a batch after its loss, for the
        boosting detector (olaf.drl.boosting); None: this algorithm does not feed it."""
        return None


# -- what the platform does -----------------------------------------------------------------


def flat_parameters(model: nn.Module) -> np.ndarray:
    """Every parameter, in ``parameters()`` order, as one float32 vector (a copy)."""
    with torch.no_grad():
        return torch.cat([p.reshape(-1) for p in model.parameters()]).numpy().astype(
            np.float32, copy=True)


def load_flat_parameters(model: nn.Module, flat: np.ndarray) -> None:
    """Set every parameter from a vector made by ``flat_parameters`` (ValueError on its size)."""
    total = sum(p.numel() for p in model.parameters())
    if flat.shape != (total,):
        raise ValueError(f"expected {total} parameters, got shape {flat.shape}")
    src = torch.from_numpy(np.ascontiguousarray(flat, dtype=np.float32))
    with torch.no_grad():
        at = 0
        for p in model.parameters():
            n = p.numel()
            p.copy_(src[at : at + n].view_as(p))
            at += n


def flat_gradient(model: nn.Module) -> np.ndarray:
    """The current ``.grad`` of every parameter as one float32 vector (zeros where None)."""
    parts = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
             for p in model.parameters()]
    return torch.cat(parts).numpy().astype(np.float32, copy=True)


def env_spaces(env_id: str) -> tuple[gym.Space, gym.Space]:
    """(observation space, action space) of a gymnasium environment (ValueError if unknown)."""
    try:
        env = gym.make(env_id)
    except gym.error.Error as exc:
        raise ValueError(f"unknown gymnasium environment {env_id!r}: {exc}") from exc
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def initial_model(algorithm: Algorithm, env_id: str, seed: int) -> nn.Module:
    """The first weights of a run: the same seed gives the same model in every process."""
    observation_space, action_space = env_spaces(env_id)
    torch.manual_seed(seed)
    return algorithm.make_model(observation_space, action_space)


class Worker:
    """One logical worker: the platform's side of an algorithm, the same for every one.

    ``rollout()`` collects experience with the weights last loaded, refreshes them
    (``refresh``) when the algorithm asks, computes the loss, clips and returns the
    ``Gradient``; sending it is the caller's job. Everything algorithm-specific goes
    through the ``Algorithm`` interface.
    """

    def __init__(self, algorithm: Algorithm, env_id: str, worker_id: int, seed: int) -> None:
        self.algorithm = algorithm
        self.worker_id = worker_id
        self.model = algorithm.make_model(*env_spaces(env_id))
        self.model_version = -1
        self.experience = algorithm.make_experience(env_id, seed)
        self.total_steps = 0
        self.refresh: Callable[[int], tuple[np.ndarray, int] | None] | None = None
        """Newer weights than the given version, or None: set by the run when
        ``algorithm.refresh_before_loss`` (or its aggregation policy) asks for the newest
        weights just before the loss."""
        self.rho: float | None = None
        """Not read here: A2C's truncated importance weight comes from RunConfig when the
        algorithm is built (olaf.drl.learners.make_algorithm); kept for callers that set it."""
        self.last_rollout: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """``algorithm.curvature_sample`` of the latest batch (boosting detector)."""

    @property
    def config(self) -> Any:
        return self.algorithm.config

    def close(self) -> None:
        self.experience.close()

    def load_weights(self, flat: np.ndarray, version: int) -> None:
        load_flat_parameters(self.model, flat)
        self.model_version = version

    @property
    def reward(self) -> float:
        """Recent mean episode return (0 before the first episode ends)."""
        return float(self.experience.recent_return)

    def rollout(self) -> Gradient:
        experience = self.experience.collect(self.model)
        acted_version = self.model_version
        if self.refresh is not None:
            fresh = self.refresh(self.model_version)
            if fresh is not None:
                self.load_weights(*fresh)
        local = self.algorithm.local_update(self.model, experience.batch)
        if local is None:
            flat, norm, stats = self._gradient(experience.batch)
        else:
            flat, stats = local
            norm = float(np.linalg.norm(flat))
        if self.refresh is not None:
            stats["refresh_versions"] = float(self.model_version - acted_version)
        self.total_steps += experience.steps
        self.last_rollout = self.algorithm.curvature_sample(experience.batch)
        return Gradient(flat=flat, norm=norm, model_version=self.model_version,
                        reward=self.reward, steps=experience.steps, episodes=experience.episodes,
                        stats=stats)

    def _gradient(self, batch: Any) -> tuple[np.ndarray, float, dict[str, float]]:
        """The clipped gradient of the algorithm's loss, its norm before clipping, statistics."""
        self.model.zero_grad(set_to_none=True)
        loss, stats = self.algorithm.loss(self.model, batch)
        loss.backward()
        stats = dict(stats)
        grads = [p.grad.reshape(-1) for p in self.model.parameters() if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.cat(grads))) if grads else 0.0
        for group in self.algorithm.clip_groups(self.model):
            stats[f"{group.name}_grad_norm"] = float(
                torch.nn.utils.clip_grad_norm_(group.parameters, group.max_norm))
        return flat_gradient(self.model), norm, stats


# -- a ready experience source ------------------------------------------------------------


@dataclass
class Rollout:
    """``T`` steps of ``N`` environments acted by the behaviour policy ``mu``."""

    obs: np.ndarray
    """(T, N, obs_dim) float32: the observation each action was chosen on."""
    actions: np.ndarray
    """(T, N) int64 for Discrete actions, (T, N, action_dim) float32 for Box actions (as
    sampled: the environment got them clipped to its bounds)."""
    behaviour_log_probs: np.ndarray
    """(T, N) float32: log mu(a_t|x_t)."""
    rewards: np.ndarray
    """(T, N) float32."""
    terminated: np.ndarray
    """(T, N) bool: the episode ended in a terminal state at step t."""
    truncated: np.ndarray
    """(T, N) bool: the episode was cut by a time limit at step t (not terminal)."""
    final_obs: dict[tuple[int, int], np.ndarray]
    """(t, env) -> last observation of an episode truncated there (for its bootstrap)."""
    last_obs: np.ndarray
    """(N, obs_dim): where the rollout stopped (bootstraps the last step)."""
    advantages: np.ndarray | None = None
    """(T, N), filled in by a loss that computes advantages (the boosting detector reads them)."""


def discrete_sample(batch: Rollout) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(observations, actions, advantages) flattened over time and environments, for the
    boosting detector, whose policy loss is categorical: None for Box actions."""
    if batch.advantages is None or batch.actions.ndim != 2:
        return None
    steps = batch.actions.size
    return (batch.obs.reshape(steps, -1), batch.actions.reshape(-1),
            batch.advantages.reshape(-1).astype(np.float32))


class VectorActor:
    """An experience source for any gymnasium environment with flat observations:
    ``envs`` environments (gymnasium.vector, same-step autoreset) act ``steps`` times
    each per ``collect``, and the result is a ``Rollout``.

    The model must have ``act(obs, generator) -> (actions, log_probs)`` (as
    ``olaf.drl.model.ActorCritic`` has); actions are drawn from the actor's own
    generator, so a worker's rollouts repeat for its seed.
    """

    def __init__(self, env_id: str, *, envs: int, steps: int, seed: int,
                 reward_window: int = 10) -> None:
        self.envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make(env_id) for _ in range(envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.steps = steps
        space = self.envs.single_action_space
        self.bounds = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
        obs, _ = self.envs.reset(seed=seed)
        self.obs = np.asarray(obs, np.float32)
        self.returns = np.zeros(envs)
        self.lengths = np.zeros(envs, np.int64)
        self.recent_returns: deque[float] = deque(maxlen=reward_window)
        self.generator = torch.Generator().manual_seed(seed)

    @property
    def recent_return(self) -> float:
        return float(np.mean(self.recent_returns)) if self.recent_returns else 0.0

    def collect(self, model: nn.Module) -> Experience:
        """Act ``steps`` times in every environment with ``model``'s policy."""
        steps = self.steps
        n, dim = self.obs.shape
        obs = np.empty((steps, n, dim), np.float32)
        actions: np.ndarray | None = None
        logp = np.empty((steps, n), np.float32)
        rewards = np.empty((steps, n), np.float32)
        terminated = np.zeros((steps, n), bool)
        truncated = np.zeros((steps, n), bool)
        final_obs: dict[tuple[int, int], np.ndarray] = {}
        episodes: list[Episode] = []
        for t in range(steps):
            obs[t] = self.obs
            action, log_prob = model.act(torch.from_numpy(self.obs), self.generator)
            action = action.numpy()
            if actions is None:
                actions = np.empty((steps, *action.shape), action.dtype)
            actions[t] = action
            logp[t] = log_prob.numpy()
            if self.bounds is not None:
                action = np.clip(action, *self.bounds)
            next_obs, reward, term, trunc, info = self.envs.step(action)
            rewards[t], terminated[t], truncated[t] = reward, term, trunc & ~term
            self.returns += reward
            self.lengths += 1
            for i in np.flatnonzero(term | trunc).tolist():
                if truncated[t, i]:
                    final_obs[(t, i)] = np.asarray(info["final_obs"][i], np.float32)
                episodes.append(Episode(float(self.returns[i]), int(self.lengths[i])))
                self.recent_returns.append(float(self.returns[i]))
                self.returns[i], self.lengths[i] = 0.0, 0
            self.obs = np.asarray(next_obs, np.float32)
        assert actions is not None  # steps >= 1
        rollout = Rollout(obs, actions, logp, rewards, terminated, truncated, final_obs,
                          self.obs.copy())
        return Experience(rollout, steps * n, episodes)

    def close(self) -> None:
        self.envs.close()


def parameters_of(*modules: nn.Module | nn.Parameter | None) -> list[nn.Parameter]:
    """The parameters of some modules and loose parameters, for a ``ClipGroup``."""
    out: list[nn.Parameter] = []
    for m in modules:
        if isinstance(m, nn.Parameter):
            out.append(m)
        elif m is not None:
            out.extend(m.parameters())
    return out


__all__ = ["Algorithm", "AlgorithmConfig", "ClipGroup", "Episode", "Experience",
           "ExperienceSource", "Gradient", "Rollout", "VectorActor", "Worker",
           "discrete_sample", "env_spaces", "flat_gradient", "flat_parameters", "initial_model",
           "load_flat_parameters", "parameters_of"]
