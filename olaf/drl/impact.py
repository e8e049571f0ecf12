"""IMPACT, the default learner: clipped surrogate + V-trace, one worker's side, top to bottom.

IMPACT (Luo et al., ICLR 2020) is IMPALA's actor-learner split (Espeholt et al., 2018)
with PPO's clipped surrogate. Here every worker is its own learner that never steps an
optimiser: it sends a gradient through the switch and the parameter server applies it
with Adam (olaf.drl.server). One gradient is made in three steps:

1. **Experience** (``collect``): ``envs_per_worker`` environments (gymnasium.vector)
   act ``rollout_steps`` times with the behaviour policy ``mu`` (the weights the worker
   holds), recording log mu(a|s) of every action taken.
2. **Refresh**: the worker takes the newest published weights ``theta`` just before the
   loss, so the gradient is computed at (and stamped with the version of) the freshest
   model it can get; the gap between ``mu`` and ``theta`` is what the next step corrects.
3. **Loss** (``impact_loss``) at ``theta``:

   * V-trace (``vtrace``) value targets ``v_s`` with truncated weights
     ``rho_t = min(rho_bar, pi_theta/mu)`` and traces ``c_t = lambda * min(c_bar, pi_theta/mu)``;
   * advantages ``A_s = r_s + gamma * v_{s+1} - V(x_s)``, normalised per gradient;
   * the clipped surrogate ``-mean(min(r A, clip(r, 1 - eps, 1 + eps) A))`` with
     ``r = pi_theta(a|s) / mu(a|s)``: the ratio is the importance weight, so V-trace's own
     ``rho_s`` factor of the policy gradient is left out of ``A`` (it would count twice);
   * the critic's squared error to ``v_s`` and an entropy bonus.

   The actor's and the critic's gradients are clipped to their own L2 norms (they are
   separate networks, olaf.drl.model), and the two are sent as one flat vector.

Time limits are not terminal states: a truncated episode's last reward is bootstrapped
with ``gamma * V(final observation)``.

Hyperparameters: ``ImpactConfig`` (olaf.drl.config), with the source of every default.
The pieces are plain functions over a ``Rollout`` so that other losses can reuse the
experience source (the algorithm API of issue 16 grows from here).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from olaf.drl.config import ImpactConfig
from olaf.drl.model import ActorCritic, env_dimensions
from olaf.drl.worker import Episode, Gradient

# -- 1. experience -----------------------------------------------------------------------


@dataclass
class Rollout:
    """``T`` steps of ``N`` environments acted by the behaviour policy ``mu``."""

    obs: np.ndarray
    """(T, N, obs_dim) float32: the observation each action was chosen on."""
    actions: np.ndarray
    """(T, N) int64."""
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
    behaviour_version: int
    """Model version of ``mu``."""


class VectorActor:
    """The experience source: vectorised environments and episode bookkeeping."""

    def __init__(self, env_id: str, n_envs: int, seed: int, reward_window: int) -> None:
        self.envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make(env_id) for _ in range(n_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        obs, _ = self.envs.reset(seed=seed)
        self.obs = np.asarray(obs, np.float32)
        self.returns = np.zeros(n_envs)
        self.lengths = np.zeros(n_envs, np.int64)
        self.recent_returns: deque[float] = deque(maxlen=reward_window)
        self.generator = torch.Generator().manual_seed(seed)

    def collect(self, model: ActorCritic, steps: int, version: int) -> tuple[Rollout, list[Episode]]:
        """Act ``steps`` times in every environment with ``model``'s policy."""
        n, dim = self.obs.shape
        obs = np.empty((steps, n, dim), np.float32)
        actions = np.empty((steps, n), np.int64)
        logp = np.empty((steps, n), np.float32)
        rewards = np.empty((steps, n), np.float32)
        terminated = np.zeros((steps, n), bool)
        truncated = np.zeros((steps, n), bool)
        final_obs: dict[tuple[int, int], np.ndarray] = {}
        episodes: list[Episode] = []
        for t in range(steps):
            obs[t] = self.obs
            with torch.no_grad():
                log_probs = torch.log_softmax(model.policy(torch.from_numpy(self.obs)), -1)
                action = torch.multinomial(log_probs.exp(), 1, generator=self.generator).squeeze(1)
            actions[t] = action.numpy()
            logp[t] = log_probs.gather(1, action[:, None]).squeeze(1).numpy()
            next_obs, reward, term, trunc, info = self.envs.step(actions[t])
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
        rollout = Rollout(obs, actions, logp, rewards, terminated, truncated, final_obs,
                          self.obs.copy(), version)
        return rollout, episodes

    def close(self) -> None:
        self.envs.close()


# -- 2. V-trace ---------------------------------------------------------------------------


def vtrace(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    *,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets ``v_s`` and advantages ``r_s + discount_s * v_{s+1} - V(x_s)``.

    All inputs are ``(T, ...)`` over time except ``bootstrap_value`` (``V(x_T)``, shape
    ``(...)``); ``log_rhos = log pi(a|s) - log mu(a|s)``; ``discounts[t]`` is ``gamma``, or
    0 where the episode ended at t. Computed without gradient (IMPALA, Espeholt et al.
    2018, eq. 1 and its recursion ``v_s - V(x_s) = delta_s + discount_s c_s (v_{s+1} - V(x_{s+1}))``).
    """
    with torch.no_grad():
        rhos = torch.exp(log_rhos)
        clipped_rhos = rhos.clamp(max=rho_bar)
        cs = lam * rhos.clamp(max=c_bar)
        next_values = torch.cat([values[1:], bootstrap_value[None]])
        deltas = clipped_rhos * (rewards + discounts * next_values - values)
        acc = torch.zeros_like(bootstrap_value)
        vs_minus_v = torch.empty_like(values)
        for t in range(len(values) - 1, -1, -1):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            vs_minus_v[t] = acc
        vs = vs_minus_v + values
        next_vs = torch.cat([vs[1:], bootstrap_value[None]])
        advantages = rewards + discounts * next_vs - values
    return vs, advantages


# -- 3. the loss --------------------------------------------------------------------------


def clipped_surrogate(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor,
                      advantages: torch.Tensor, clip: float) -> torch.Tensor:
    """``-mean(min(r A, clip(r, 1 - clip, 1 + clip) A))`` with ``r = exp(log_probs - behaviour)``."""
    ratio = torch.exp(log_probs - behaviour_log_probs)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    return -torch.min(unclipped, clipped).mean()


def impact_loss(model: ActorCritic, rollout: Rollout,
                cfg: ImpactConfig) -> tuple[torch.Tensor, dict[str, float], np.ndarray]:
    """The loss at ``model``'s weights (theta), its statistics and the advantages (T, N)."""
    obs = torch.from_numpy(rollout.obs)
    logits, values = model(obs)
    rewards = torch.from_numpy(rollout.rewards).clone()
    with torch.no_grad():
        bootstrap = model.value(torch.from_numpy(rollout.last_obs)).squeeze(-1)
        for (t, i), final in rollout.final_obs.items():
            rewards[t, i] += cfg.gamma * float(model.value(torch.from_numpy(final)))
    done = torch.from_numpy(rollout.terminated | rollout.truncated)
    discounts = cfg.gamma * (~done).float()
    dist = torch.distributions.Categorical(logits=logits)
    log_probs = dist.log_prob(torch.from_numpy(rollout.actions))
    behaviour = torch.from_numpy(rollout.behaviour_log_probs)
    vs, advantages = vtrace(log_probs.detach() - behaviour, discounts, rewards, values.detach(),
                            bootstrap, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar, lam=cfg.vtrace_lambda)
    adv = advantages
    if cfg.normalize_advantages and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy_loss = clipped_surrogate(log_probs, behaviour, adv, cfg.clip)
    value_loss = (vs - values).pow(2).mean()
    entropy = dist.entropy().mean()
    loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
    with torch.no_grad():
        log_ratio = log_probs - behaviour
        stats = {
            "policy_loss": float(policy_loss),
            "value_loss": float(value_loss),
            "entropy": float(entropy),
            "clip_fraction": float(((log_ratio.exp() - 1).abs() > cfg.clip).float().mean()),
            "approx_kl": float(((log_ratio.exp() - 1) - log_ratio).mean()),
        }
    return loss, stats, advantages.numpy()


def clip_grad_norms(model: ActorCritic, actor_max: float, critic_max: float) -> tuple[float, float]:
    """Clip the actor's and the critic's gradients apart; their norms before clipping."""
    actor = float(torch.nn.utils.clip_grad_norm_(model.policy.parameters(), actor_max))
    critic = float(torch.nn.utils.clip_grad_norm_(model.value.parameters(), critic_max))
    return actor, critic


# -- the worker ---------------------------------------------------------------------------


class ImpactWorker:
    """One logical worker: act, refresh, and make the IMPACT gradient.

    Same surface as ``olaf.drl.worker.RolloutWorker`` (``load_weights``, ``rollout``,
    ``reward``, ``refresh``, ``last_rollout``), so the runner and the transport do not care
    which learner they carry.
    """

    def __init__(self, env_id: str, worker_id: int, config: ImpactConfig, seed: int) -> None:
        obs_dim, n_actions = env_dimensions(env_id)
        self.worker_id = worker_id
        self.config = config
        self.model = ActorCritic(obs_dim, n_actions, config.hidden)
        self.model_version = -1
        self.actor = VectorActor(env_id, config.envs_per_worker, seed, config.reward_window)
        self.total_steps = 0
        self.refresh: Callable[[int], tuple[np.ndarray, int] | None] | None = None
        """Newer weights than the given version, or None; taken just before the loss."""
        self.rho: float | None = None
        """Unused: IMPACT's ratio and V-trace already correct for mu != theta."""
        self.last_rollout: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        """(observations, actions, advantages) of the latest rollout (boosting detector)."""

    def close(self) -> None:
        self.actor.close()

    def load_weights(self, flat: np.ndarray, version: int) -> None:
        self.model.load_flat_parameters(flat)
        self.model_version = version

    @property
    def reward(self) -> float:
        """Recent mean episode return (0 before the first episode ends)."""
        recent = self.actor.recent_returns
        return float(np.mean(recent)) if recent else 0.0

    def rollout(self) -> Gradient:
        cfg = self.config
        rollout, episodes = self.actor.collect(self.model, cfg.rollout_steps, self.model_version)
        if self.refresh is not None:
            fresh = self.refresh(self.model_version)
            if fresh is not None:
                self.load_weights(*fresh)
        self.model.zero_grad(set_to_none=True)
        loss, stats, advantages = impact_loss(self.model, rollout, cfg)
        loss.backward()
        actor_norm, critic_norm = clip_grad_norms(self.model, cfg.actor_max_grad_norm,
                                                  cfg.critic_max_grad_norm)
        steps = rollout.actions.size
        self.total_steps += steps
        stats.update(actor_grad_norm=actor_norm, critic_grad_norm=critic_norm,
                     refresh_versions=float(self.model_version - rollout.behaviour_version))
        self.last_rollout = (rollout.obs.reshape(steps, -1), rollout.actions.reshape(-1),
                             advantages.reshape(-1).astype(np.float32))
        return Gradient(flat=self.model.flat_gradient(), norm=float(np.hypot(actor_norm, critic_norm)),
                        model_version=self.model_version, reward=self.reward, steps=steps,
                        episodes=episodes, stats=stats)
