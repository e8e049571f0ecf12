"""IMPACT, the default learner: clipped surrogate + V-trace, one worker's side, top to bottom.

IMPACT (Luo et al., ICLR 2020) is IMPALA's actor-learner split (Espeholt et al., 2018)
with PPO's clipped surrogate. Here every worker is its own learner: it sends its update
through the switch and the parameter server applies it (olaf.drl.server). By default the
update is one gradient, which the PS applies with Adam, as IMPACT does; with local epochs
(step 4, ``LUNAR_LANDER``) it is the parameter delta of PPO's epochs, which the PS applies
with SGD at ``delta_rate``. The update is made in these steps:

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

4. **Local epochs** (``epochs > 1``): instead of one gradient, the worker
   runs PPO's update on its rollout with an Adam of its own: V-trace targets and
   advantages once at theta, then ``epochs`` passes of ``minibatches`` shuffled
   minibatches of the surrogate, each clipped per network. The ratio is taken against
   theta, IMPACT's target network (``trust_region=refreshed``), and each term weighted
   by ``min(rho_bar, pi_theta / mu)``, so the clip bounds the worker's own move and the
   weight the rollout's age. It sends the parameter delta ``theta - theta'`` and returns
   to theta (the PS's weights) to act; the PS applies ``delta_rate`` of it, merged
   deltas averaged (``ps.aggregate=mean``). More optimizer steps per env step: the PS's
   single Adam step per gradient block caps the full-model updates at pull rate / blocks.

Time limits are not terminal states by default: a truncated episode's last reward is
bootstrapped with ``gamma * V(final observation)`` (``bootstrap_truncated``).

The policy is categorical for Discrete actions and a diagonal Gaussian with a
state-independent log-std for Box actions (olaf.drl.model.ActorCritic): the ratio, the
entropy and V-trace only see per-state log-probabilities, so the loss is the same.

Hyperparameters: ``ImpactConfig``, just below, with the source of every default.
``Impact`` is written against the algorithm API (olaf.algorithm): the model, the experience
source (``VectorActor``) and the loss below are all it supplies; the platform's ``Worker``
does the refresh, the backward pass, the clipping and the flattening.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from olaf.algorithm import (
    Algorithm,
    ClipGroup,
    Rollout,
    VectorActor,
    Worker,
    discrete_sample,
    flat_parameters,
    load_flat_parameters,
    parameters_of,
)
from olaf.drl.model import ActorCritic

__all__ = ["Impact", "ImpactWorker", "Rollout", "VectorActor", "clip_grad_norms",
           "clipped_surrogate", "impact_loss", "vtrace"]

TRUST_REGIONS = ("refreshed", "behaviour")


@dataclass(frozen=True)
class ImpactConfig:
    """Hyperparameters of the IMPACT learner (olaf.drl.impact), each with where its default
    comes from. Set any of them with ``olaf run --set algo.NAME=VALUE``."""

    hidden: int = 32
    """Width of the two tanh hidden layers of the actor and of the critic. CleanRL's PPO
    uses 64 (and LUNAR_LANDER below); 32 keeps a CartPole gradient at 40 blocks of 64
    values, and the PS's pull rate counts blocks: at 64 an update is 144 blocks, more than
    the default queue's 64 slots hold (docs/archive/results-2026-12-06.md)."""
    rollout_steps: int = 32
    """Steps per environment per update (IMPALA's unroll length is 20, RLlib APPO's
    rollout_fragment_length 50; 32 as the A2C learner)."""
    envs_per_worker: int = 4
    """Environments a worker steps together (gymnasium.vector), so one update carries
    ``envs_per_worker * rollout_steps`` transitions (CleanRL PPO's CartPole num_envs = 4)."""
    gamma: float = 0.99
    """Discount factor (IMPALA, CleanRL PPO, RLlib APPO; rl-baselines3-zoo's LunarLander
    PPO 0.999, as LUNAR_LANDER)."""
    vtrace_lambda: float = 0.95
    """lambda of V-trace's traces ``c_s = lambda * min(c_bar, ratio)`` (IMPALA §4.2 allows
    lambda < 1; 0.95 is CleanRL PPO's gae_lambda, to which V-trace reduces on-policy;
    rl-baselines3-zoo's LunarLander PPO 0.98)."""
    rho_bar: float = 1.0
    """Truncation of V-trace's importance weights in the value targets (IMPALA: 1)."""
    c_bar: float = 1.0
    """Truncation of V-trace's traces (IMPALA: 1)."""
    clip: float = 0.2
    """epsilon of the clipped surrogate ``min(r A, clip(r, 1-eps, 1+eps) A)`` with
    ``r = pi_theta / mu`` (CleanRL PPO clip_coef 0.2; IMPACT and RLlib APPO use 0.4;
    LUNAR_LANDER 0.1, PPO's Atari setting)."""
    normalize_advantages: bool = True
    """Advantages are normalised to zero mean, unit std per gradient (CleanRL PPO norm_adv)."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus (CleanRL PPO ent_coef 0.01; RLlib APPO 0.01)."""
    value_coef: float = 0.5
    """Weight of the critic's squared error against the V-trace target (CleanRL PPO
    vf_coef 0.5; RLlib APPO vf_loss_coeff 0.5)."""
    actor_max_grad_norm: float = 0.5
    """L2 clip of the actor's gradient, clipped apart from the critic's (CleanRL PPO's
    max_grad_norm 0.5, applied per network: one joint clip lets the critic's large
    errors shrink the policy gradient to ~1 % of itself)."""
    critic_max_grad_norm: float = 0.5
    """L2 clip of the critic's gradient (CleanRL PPO max_grad_norm 0.5)."""
    learning_rate: float = 5e-4
    """Adam step size at the parameter server for gradients, ``epochs=1`` (RLlib APPO lr
    5e-4); deltas take ``delta_rate``."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's moment decay rates (PyTorch/CleanRL defaults)."""
    adam_eps: float = 1e-5
    """Adam's denominator epsilon (CleanRL PPO 1e-5)."""
    bootstrap_truncated: bool = True
    """A time-limit truncation adds ``gamma * V(final observation)`` to the last reward, as
    Stable-Baselines3's PPO does (the observation has no clock, so the episode would have
    gone on). False treats it as terminal, as CleanRL's PPO does (``next_done =
    terminations | truncations``): then an episode that runs into the limit earns nothing
    beyond it. On LunarLander-v3's seeds whose lander learned to hover until the limit it
    did not stop the hovering (2 seeds, docs/archive/results-2026-12-06.md), so the default stays."""
    reward_window: int = 10
    """Episodes in a worker's "recent mean episode return", the reward it sends (OLAF)."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this in the loss (not in the returns reported): the
    critic's targets then stay near unit scale when rewards are large, as for Pendulum-v1
    (CleanRL's continuous PPO normalises rewards for the same reason)."""
    epochs: int = 1
    """1: the worker sends the gradient of one loss (IMPACT as published; the PS steps Adam
    at ``learning_rate``). More: the worker runs PPO's epochs on its rollout with an Adam of
    its own (``local_learning_rate``, ``minibatches`` per epoch, advantages and V-trace
    targets computed once before the epochs, as PPO does) and sends the parameter delta,
    which the PS applies with SGD at ``delta_rate`` (rl-baselines3-zoo's PPO: 4 epochs for
    LunarLander; the delta is what DD-PPO-style and federated learners exchange). The
    deltas learn LunarLander-v3 where one gradient does not (LUNAR_LANDER), but their
    updates do not fit the default queue and did not learn CartPole-v1 through it, so 1
    stays the default (docs/archive/results-2026-12-06.md)."""
    minibatches: int = 4
    """Minibatches per local epoch (with ``epochs > 1``)."""
    local_learning_rate: float = 3e-4
    """The worker's own Adam step size for the local epochs (rl-baselines3-zoo PPO: 3e-4)."""
    delta_rate: float = 0.5
    """Local epochs: the share of a worker's parameter delta the PS applies (its SGD step
    size under ``ps.optimizer=auto``). 1 moves the PS to the worker's improved weights;
    with 8 workers, whose deltas from nearly the same weights land one after another,
    0.5 learned LunarLander-v3 where 1 was unstable (docs/archive/results-2026-12-06.md)."""
    delta_rate_workers: int = 0
    """Local epochs: the number of workers ``delta_rate`` is the share for; a run of N
    workers applies ``delta_rate * sqrt(delta_rate_workers / N)`` (at most 1) instead.
    N workers' deltas from nearly the same weights add up at the PS: a share that does not
    fall with N overshoots (32 LunarLander-v3 workers at 0.5 collapsed), one that falls as
    1/N moves the weights N times less per env step (0.125 at 32 hovered), and the square
    root between them (0.25 at 32) is the only share that reached 200 there, on 6 of 18
    runs (docs/archive/results-2026-12-06.md). 0: ``delta_rate`` whatever N."""
    anneal_lr: bool = False
    """Local epochs: the local Adam's step size falls linearly from ``local_learning_rate``
    toward 0 over the worker's share of the run's env-step budget (``total_steps /
    workers``), as CleanRL's PPO anneals over its budget (``anneal_lr``, on by default
    there; rl-baselines3-zoo's LunarLander PPO keeps it constant). The count is the
    worker process's own: a worker restarted by the supervisor, and every worker of a resumed run,
    starts the schedule again at the full rate (known, not fixed: it is off by default)."""
    trust_region: str = "refreshed"
    """Local epochs: what the clipped ratio is taken against. ``behaviour``: mu, the policy
    that acted, as synchronous PPO does (while a worker collects, the other workers' deltas
    move the weights, so the ratio starts away from 1 and the clip brakes each worker's move
    toward its own old policy); ``refreshed``: the PS weights the worker refreshed to before
    its epochs (IMPACT's target network), each step's term weighted by the truncated
    ``min(rho_bar, pi_refreshed / mu)``, so that the clip bounds only this worker's own move
    (docs/archive/results-2026-12-06.md: learns faster at first, less stably at ps.learning_rate 1)."""

    @property
    def sends_delta(self) -> bool:
        """The worker sends a parameter delta (local epochs), not a gradient: the PS's
        ``ps.optimizer=auto`` then applies it with SGD at ``delta_rate``."""
        return self.epochs > 1

    def delta_share(self, workers: int) -> float:
        """The share of each delta the PS applies in a run of ``workers`` workers."""
        if not self.delta_rate_workers:
            return self.delta_rate
        return min(1.0, self.delta_rate * math.sqrt(self.delta_rate_workers / max(workers, 1)))

    def __post_init__(self) -> None:
        checks = [
            (self.hidden >= 1, "hidden must be >= 1"),
            (self.rollout_steps >= 1, "rollout_steps must be >= 1"),
            (self.envs_per_worker >= 1, "envs_per_worker must be >= 1"),
            (self.reward_scale > 0, "reward_scale must be > 0"),
            (self.epochs >= 1 and self.minibatches >= 1, "epochs and minibatches must be >= 1"),
            (self.local_learning_rate > 0, "local_learning_rate must be > 0"),
            (self.delta_rate > 0, "delta_rate must be > 0"),
            (self.delta_rate_workers >= 0, "delta_rate_workers must be >= 0"),
            (self.trust_region in TRUST_REGIONS, f"trust_region must be one of {TRUST_REGIONS}"),
            (0.0 < self.gamma <= 1.0, "gamma must be in (0, 1]"),
            (0.0 <= self.vtrace_lambda <= 1.0, "vtrace_lambda must be in [0, 1]"),
            (self.rho_bar > 0 and self.c_bar > 0, "rho_bar and c_bar must be > 0"),
            (0.0 < self.clip < 1.0, "clip must be in (0, 1)"),
            (self.entropy_coef >= 0 and self.value_coef >= 0, "coefficients must be >= 0"),
            (self.actor_max_grad_norm > 0 and self.critic_max_grad_norm > 0,
             "max grad norms must be > 0"),
            (self.learning_rate > 0, "learning_rate must be > 0"),
            (all(0.0 <= b < 1.0 for b in self.adam_betas) and len(self.adam_betas) == 2,
             "adam_betas must be two values in [0, 1)"),
            (self.adam_eps > 0, "adam_eps must be > 0"),
            (self.reward_window >= 1, "reward_window must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


# -- 1. experience is olaf.algorithm.VectorActor's: a Rollout of T steps x N environments --
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


def vtrace_targets(model: ActorCritic, rollout: Rollout,
                   cfg: ImpactConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """V-trace's value targets ``v_s``, advantages and the log-probabilities of the actions
    taken (all T, N) of ``rollout`` at ``model``'s weights (no gradient flows through them)."""
    with torch.no_grad():
        actor_out, values = model(torch.from_numpy(rollout.obs))
        log_probs = model.distribution(actor_out).log_prob(torch.from_numpy(rollout.actions))
    rewards = torch.from_numpy(rollout.rewards) * cfg.reward_scale
    with torch.no_grad():
        bootstrap = model.value(torch.from_numpy(rollout.last_obs)).squeeze(-1)
        if cfg.bootstrap_truncated:
            for (t, i), final in rollout.final_obs.items():
                rewards[t, i] += cfg.gamma * float(model.value(torch.from_numpy(final)))
    done = torch.from_numpy(rollout.terminated | rollout.truncated)
    discounts = cfg.gamma * (~done).float()
    behaviour = torch.from_numpy(rollout.behaviour_log_probs)
    vs, advantages = vtrace(log_probs - behaviour, discounts, rewards, values.detach(),
                            bootstrap, rho_bar=cfg.rho_bar, c_bar=cfg.c_bar, lam=cfg.vtrace_lambda)
    return vs, advantages, log_probs


def surrogate_loss(model: ActorCritic, obs: torch.Tensor, actions: torch.Tensor,
                   behaviour: torch.Tensor, adv: torch.Tensor, vs: torch.Tensor,
                   cfg: ImpactConfig,
                   weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate (ratio to ``behaviour``'s log-probabilities, each step's term times
    its importance weight in ``weights`` if given) + critic error to ``vs`` - entropy bonus."""
    actor_out, values = model(obs)
    dist = model.distribution(actor_out)
    log_probs = dist.log_prob(actions)
    if cfg.normalize_advantages and adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    if weights is not None:
        adv = weights * adv
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
    return loss, stats


def impact_loss(model: ActorCritic, rollout: Rollout,
                cfg: ImpactConfig) -> tuple[torch.Tensor, dict[str, float], np.ndarray]:
    """The loss at ``model``'s weights (theta), its statistics and the advantages (T, N)."""
    vs, advantages, _ = vtrace_targets(model, rollout, cfg)
    loss, stats = surrogate_loss(model, torch.from_numpy(rollout.obs),
                                 torch.from_numpy(rollout.actions),
                                 torch.from_numpy(rollout.behaviour_log_probs), advantages, vs, cfg)
    return loss, stats, advantages.numpy()


def actor_parameters(model: ActorCritic) -> list[nn.Parameter]:
    """The actor's network and, for a Gaussian policy, its log-std."""
    return parameters_of(model.policy, getattr(model, "log_std", None))


def clip_grad_norms(model: ActorCritic, actor_max: float, critic_max: float) -> tuple[float, float]:
    """Clip the actor's and the critic's gradients apart; their norms before clipping."""
    actor = float(torch.nn.utils.clip_grad_norm_(actor_parameters(model), actor_max))
    critic = float(torch.nn.utils.clip_grad_norm_(model.value.parameters(), critic_max))
    return actor, critic


# -- the algorithm ------------------------------------------------------------------------


LUNAR_LANDER = ImpactConfig(hidden=64, rollout_steps=1024, envs_per_worker=4, gamma=0.999,
                            vtrace_lambda=0.98, epochs=4, minibatches=64, clip=0.1,
                            delta_rate_workers=8)
"""The learner measured on LunarLander-v3 (docs/archive/results-2026-12-06.md, issue 27): rl-baselines3-zoo's
LunarLander PPO (64-wide networks, gamma 0.999, lambda 0.98, 4 epochs of minibatches of
64) as local epochs at 8 workers of 4 x 1024 steps, half of each delta applied, with the
clip at 0.1 (PPO's paper tried 0.1-0.3 and uses 0.1 for Atari, as rl-baselines3-zoo's
Atari PPO does): the eight workers' clipped moves add up at the PS, and at the zoo's 0.2
4 of 10 seeds learned to hover into the time limit after a greedy peak of 145-199. It
needs a queue that holds a whole update (154 blocks): ``docs/learner.md`` gives its flags.
The share is 0.5 at 8 workers and scales as ``sqrt(8 / N)`` with N workers
(``delta_rate_workers``): 0.25 at 32."""


class Impact(Algorithm):
    """IMPACT as an ``olaf.algorithm.Algorithm``: the built-in model, ``VectorActor``,
    ``impact_loss``, the actor and the critic clipped apart, weights refreshed before the loss."""

    Config = ImpactConfig
    refresh_before_loss = True
    config: ImpactConfig

    def __init__(self, config: ImpactConfig | None = None, budget_steps: int = 0) -> None:
        """``budget_steps``: this worker's share of the run's env steps, over which
        ``anneal_lr`` anneals (0: no schedule)."""
        super().__init__(config)
        self.optimizer: torch.optim.Optimizer | None = None
        """The worker's own Adam for the local epochs (``epochs > 1``)."""
        self.budget_steps = budget_steps
        self.steps_learned = 0
        """Env steps of the rollouts the local epochs have learned from."""

    def make_model(self, observation_space: gym.Space, action_space: gym.Space) -> ActorCritic:
        return ActorCritic.for_spaces(observation_space, action_space, self.config.hidden)

    def make_experience(self, env_id: str, seed: int) -> VectorActor:
        cfg = self.config
        return VectorActor(env_id, envs=cfg.envs_per_worker, steps=cfg.rollout_steps, seed=seed,
                           reward_window=cfg.reward_window)

    def loss(self, model: ActorCritic, batch: Rollout) -> tuple[torch.Tensor, dict[str, float]]:
        loss, stats, batch.advantages = impact_loss(model, batch, self.config)
        return loss, stats

    def clip_groups(self, model: ActorCritic) -> list[ClipGroup]:
        return [ClipGroup("actor", actor_parameters(model), self.config.actor_max_grad_norm),
                ClipGroup("critic", list(model.value.parameters()), self.config.critic_max_grad_norm)]

    def curvature_sample(self, batch: Rollout) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        return discrete_sample(batch)

    def local_update(self, model: ActorCritic,
                     batch: Rollout) -> tuple[np.ndarray, dict[str, float]] | None:
        """With ``epochs > 1``: PPO's epochs on this rollout at the worker (see the module
        doc, step 4); the parameter delta goes to the switch instead of a gradient."""
        cfg = self.config
        if cfg.epochs <= 1:
            return None
        if self.optimizer is None or self.optimizer.param_groups[0]["params"][0] is not next(
                iter(model.parameters())):
            # Kept across rollouts, as PPO keeps its Adam: the model object stays the same,
            # only its weights are replaced by the PS's.
            self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.local_learning_rate,
                                              eps=cfg.adam_eps)
        if cfg.anneal_lr and self.budget_steps:
            # CleanRL's schedule: the first update at the full rate, then linearly down.
            frac = max(0.0, 1.0 - self.steps_learned / self.budget_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = cfg.local_learning_rate * frac
        before = flat_parameters(model)
        obs = torch.from_numpy(batch.obs)
        actions = torch.from_numpy(batch.actions)
        vs, advantages, refreshed = vtrace_targets(model, batch, cfg)
        batch.advantages = advantages.numpy()
        steps = advantages.numel()
        self.steps_learned += steps
        behaviour = torch.from_numpy(batch.behaviour_log_probs)
        if cfg.trust_region == "refreshed":
            anchor = refreshed
            weights = (refreshed - behaviour).exp().clamp(max=cfg.rho_bar).reshape(steps)
        else:
            anchor, weights = behaviour, None
        flat = {"obs": obs.reshape(steps, *obs.shape[2:]),
                "actions": actions.reshape(steps, *actions.shape[2:]),
                "anchor": anchor.reshape(steps), "adv": advantages.reshape(steps),
                "vs": vs.reshape(steps)}
        size = max(1, steps // cfg.minibatches)
        stats: dict[str, float] = {}
        for _ in range(cfg.epochs):
            order = torch.randperm(steps)
            for lo in range(0, steps - size + 1, size):
                mb = order[lo:lo + size]
                loss, stats = surrogate_loss(model, flat["obs"][mb], flat["actions"][mb],
                                             flat["anchor"][mb], flat["adv"][mb], flat["vs"][mb],
                                             cfg, None if weights is None else weights[mb])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                actor, critic = clip_grad_norms(model, cfg.actor_max_grad_norm, cfg.critic_max_grad_norm)
                self.optimizer.step()
        stats = {**stats, "actor_grad_norm": actor, "critic_grad_norm": critic}
        delta = before - flat_parameters(model)
        load_flat_parameters(model, before)  # the worker keeps acting with the PS's weights
        return delta, stats


class ImpactWorker(Worker):
    """The platform's ``Worker`` carrying ``Impact``: one logical IMPACT worker."""

    def __init__(self, env_id: str, worker_id: int, config: ImpactConfig, seed: int) -> None:
        super().__init__(Impact(config), env_id, worker_id, seed)

