"""Boosting detection and worker scaling (after Nitro, VLDB'25), torch only.

Nitro observes that the value of more workers (a larger effective batch) varies over
training, and that the loss landscape tells when: while the policy loss has strong
negative curvature relative to its positive curvature, added workers "boost"
learning; elsewhere they mostly cost. Per scheduler round:

1. **Curvature.** The extreme Hessian eigenvalues of the policy loss on a sample of
   recent trajectories are estimated by Lanczos iteration on Hessian-vector products
   ``Hv = d(g . v)/dtheta`` (double backward, no Hessian is ever formed); random start
   vectors make it stochastic Lanczos, and the extremes over ``probes`` starts are
   kept (Ritz values never leave the spectrum, so the widest pair is the best).
2. **Ratio.** ``R = -lambda_max / lambda_min``. A landscape with no negative
   curvature (``lambda_min >= 0``) has nothing to boost: ``R`` is set to the cap.
3. **Score.** Over a sliding window of the last ``n = 6`` ratios,
   ``S_k = (R_max - R_k) / (R_max - R_min) * d**k`` with ``d = 0.96``: high when the
   current ratio is the lowest of the window, decaying with the round ``k``. While the
   window holds no spread (its first round, or a constant ratio) the first factor is 1:
   undecided means keep the workers. ``k`` counts PS training iterations (full-model
   updates, ``ParameterServer.iterations``) in units of ``round_iterations``, not detector
   probes in wall time: a schedule per second would decay as fast on a slow machine as
   on a fast one and pinned the count at I_min after ~42 s whatever the curvature. A
   boost (a full window whose newest ratio is its lowest) restarts ``k`` at 0, so the
   count can rise again when a new boosting phase begins (``restart_on_boost``).
   ``scaling="decay"`` in ``olaf run`` applies ``d**k`` alone, the baseline that shows
   what the detector adds.
4. **Workers.** ``I_k = clip(round(I_max * S_k), I_min, I_max)``; the runner activates
   that many logical workers. ``WorkerSeconds`` integrates active workers over wall
   time: the cost the policy is judged on.

The detector's own time is measured, and reported as a share of the time between
rounds (Nitro reports under 5 %).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

# torch is imported where it is used, so that RunConfig (and with it ``olaf --help``) can
# hold a BoostConfig without loading torch.

# -- Hessian-vector products and Lanczos ---------------------------------------------


def hessian_vector_product(
    loss: torch.Tensor, params: Sequence[torch.Tensor]
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``v -> H v`` for the Hessian of ``loss`` w.r.t. ``params`` (flattened, in order).

    The gradient is built once with ``create_graph=True``; each product is one extra
    backward pass of ``g . v``. Parameters the loss does not reach have zero rows.
    """
    import torch

    params = list(params)
    grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
    flat_grad = torch.cat([
        (g if g is not None else torch.zeros_like(p)).reshape(-1)
        for g, p in zip(grads, params, strict=True)
    ])
    dim = flat_grad.numel()

    def hvp(v: torch.Tensor) -> torch.Tensor:
        if v.shape != (dim,):
            raise ValueError(f"vector must have shape ({dim},), got {tuple(v.shape)}")
        if not flat_grad.requires_grad:
            return torch.zeros_like(v)
        dot = flat_grad @ v.to(flat_grad.dtype)
        hv = torch.autograd.grad(dot, params, retain_graph=True, allow_unused=True)
        return torch.cat([
            (h if h is not None else torch.zeros_like(p)).reshape(-1)
            for h, p in zip(hv, params, strict=True)
        ]).to(v.dtype)

    return hvp


def lanczos_ritz_values(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    dim: int,
    iterations: int,
    *,
    generator: torch.Generator | None = None,
    start: torch.Tensor | None = None,
) -> torch.Tensor:
    """Ritz values (ascending, float64) of ``iterations`` Lanczos steps on a symmetric map.

    Full reorthogonalisation (twice, against every earlier vector) keeps the basis
    orthogonal in floating point, which costs ``O(dim * m^2)``: nothing next to the
    ``m`` Hessian-vector products for the networks used here. Stops early when the
    Krylov space is exhausted.
    """
    import torch

    if dim < 1 or iterations < 1:
        raise ValueError("dim and iterations must be >= 1")
    m = min(iterations, dim)
    v = (torch.randn(dim, generator=generator, dtype=torch.float64) if start is None
         else start.detach().to(torch.float64).reshape(-1).clone())
    if v.shape != (dim,):
        raise ValueError(f"start vector must have shape ({dim},)")
    norm = torch.linalg.vector_norm(v)
    if not norm > 0:
        raise ValueError("start vector must be nonzero")
    basis = torch.zeros(m, dim, dtype=torch.float64)
    basis[0] = v / norm
    alphas: list[float] = []
    betas: list[float] = []
    for j in range(m):
        w = matvec(basis[j]).to(torch.float64)
        if not torch.isfinite(w).all():
            raise ValueError("Hessian-vector product is not finite")
        alpha = float(w @ basis[j])
        alphas.append(alpha)
        for _ in range(2):
            w = w - basis[: j + 1].T @ (basis[: j + 1] @ w)
        if j == m - 1:
            break
        beta = float(torch.linalg.vector_norm(w))
        scale = max(abs(a) for a in alphas) + max(betas, default=0.0)
        if beta <= 1e-10 * max(scale, 1e-30):
            break
        betas.append(beta)
        basis[j + 1] = w / beta
    k = len(alphas)
    t = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if k > 1:
        off = torch.tensor(betas[: k - 1], dtype=torch.float64)
        t += torch.diag(off, 1) + torch.diag(off, -1)
    return torch.linalg.eigvalsh(t)


def extreme_eigenvalues(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    dim: int,
    *,
    iterations: int = 20,
    probes: int = 1,
    generator: torch.Generator | None = None,
) -> tuple[float, float]:
    """(lambda_max, lambda_min) estimated by stochastic Lanczos over ``probes`` starts."""
    if probes < 1:
        raise ValueError("probes must be >= 1")
    lo, hi = math.inf, -math.inf
    for _ in range(probes):
        ritz = lanczos_ritz_values(matvec, dim, iterations, generator=generator)
        lo, hi = min(lo, float(ritz[0])), max(hi, float(ritz[-1]))
    return hi, lo


def curvature_ratio(lambda_max: float, lambda_min: float, cap: float = 1e3) -> float:
    """``R = -lambda_max / lambda_min``, in ``[-cap, cap]``; ``cap`` without negative curvature."""
    if not (math.isfinite(lambda_max) and math.isfinite(lambda_min)):
        raise ValueError("eigenvalues must be finite")
    if lambda_max < lambda_min:
        raise ValueError(f"lambda_max {lambda_max} < lambda_min {lambda_min}")
    if cap <= 0:
        raise ValueError("cap must be > 0")
    if lambda_min >= 0.0:
        return cap
    return float(np.clip(-lambda_max / lambda_min, -cap, cap))


# -- the policy loss on recent trajectories ------------------------------------------


@dataclass(frozen=True)
class Trajectories:
    """Transitions a worker acted on: observations, actions and their advantages."""

    obs: np.ndarray
    """(T, obs_dim) float32."""
    actions: np.ndarray
    """(T,) int64."""
    advantages: np.ndarray
    """(T,) float32, as the worker computed them (GAE)."""

    def __post_init__(self) -> None:
        n = len(self.actions)
        if self.obs.ndim != 2 or len(self.obs) != n or self.advantages.shape != (n,):
            raise ValueError("obs (T, d), actions (T,) and advantages (T,) must agree")

    def __len__(self) -> int:
        return len(self.actions)


class TrajectoryBuffer:
    """The most recent ``capacity`` transitions, from any workers."""

    def __init__(self, capacity: int = 2048) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._parts: deque[Trajectories] = deque()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, part: Trajectories) -> None:
        if len(part) == 0:
            return
        self._parts.append(part)
        self._size += len(part)
        while self._size - len(self._parts[0]) >= self.capacity:
            self._size -= len(self._parts.popleft())

    def sample(self, n: int, rng: np.random.Generator) -> Trajectories:
        """``n`` transitions drawn without replacement (all of them if fewer are held)."""
        if self._size == 0:
            raise ValueError("no trajectories yet")
        obs = np.concatenate([p.obs for p in self._parts])
        actions = np.concatenate([p.actions for p in self._parts])
        adv = np.concatenate([p.advantages for p in self._parts])
        if n < len(actions):
            pick = np.sort(rng.choice(len(actions), n, replace=False))
            obs, actions, adv = obs[pick], actions[pick], adv[pick]
        return Trajectories(obs, actions, adv)


def policy_loss(policy: torch.nn.Module, batch: Trajectories) -> torch.Tensor:
    """The A2C policy term ``-mean(log pi(a|s) * A)`` of ``policy`` (a logits network).

    Advantages are normalised: ``R`` is a ratio of eigenvalues, so their scale does not
    matter, and normalising keeps the Lanczos arithmetic in a sane range.
    """
    import torch

    obs = torch.as_tensor(batch.obs, dtype=next(policy.parameters()).dtype)
    adv = torch.as_tensor(batch.advantages, dtype=obs.dtype)
    if len(adv) > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    logits = policy(obs)
    logp = torch.distributions.Categorical(logits=logits).log_prob(torch.as_tensor(batch.actions))
    return -(logp * adv).mean()


def estimate_curvature(policy: torch.nn.Module, batch: Trajectories, config: BoostConfig,
                       generator: torch.Generator | None = None) -> tuple[float, float]:
    """(lambda_max, lambda_min) of ``policy_loss(policy, batch)`` by stochastic Lanczos."""
    params = [p for p in policy.parameters() if p.requires_grad]
    hvp = hessian_vector_product(policy_loss(policy, batch), params)
    dim = sum(p.numel() for p in params)
    return extreme_eigenvalues(hvp, dim, iterations=config.lanczos_iterations,
                               probes=config.probes, generator=generator)


class CurvatureProbe:
    """The detector where the trajectories are: in a worker process, every ``period`` s.

    The parameter server's process also runs the switch and the receiver threads; there,
    every autograd call hands the GIL to a busy thread and one Lanczos run takes tens of
    times longer than alone. A worker process has the recent trajectories at hand, so
    it estimates the curvature between rollouts and reports the two eigenvalues; the
    scheduler (``BoostScheduler.record``) decides at the PS.
    """

    def __init__(self, config: BoostConfig, period: float, seed: int, now: float) -> None:
        import torch

        if period <= 0:
            raise ValueError("period must be > 0 s")
        self.config = config
        self.period = period
        self.buffer = TrajectoryBuffer(4 * config.sample_transitions)
        self._next = now + period
        self._rng = np.random.default_rng(seed)
        self._generator = torch.Generator().manual_seed(seed)

    def add(self, obs: np.ndarray, actions: np.ndarray, advantages: np.ndarray) -> None:
        self.buffer.add(Trajectories(obs, actions, advantages))

    def due(self, now: float) -> bool:
        return now >= self._next and len(self.buffer) >= 2

    def run(self, policy: torch.nn.Module, now: float) -> tuple[float, float, float, float]:
        """(lambda_max, lambda_min, wall seconds, CPU seconds) on a sample of the buffer.

        Both times are kept: on a loaded machine the wall time is mostly waiting for a
        core, the thread's CPU time is what the detector itself costs.
        """
        began, began_cpu = time.perf_counter(), time.thread_time()
        batch = self.buffer.sample(self.config.sample_transitions, self._rng)
        lmax, lmin = estimate_curvature(policy, batch, self.config, self._generator)
        self._next = now + self.period
        return lmax, lmin, time.perf_counter() - began, time.thread_time() - began_cpu


# -- score, workers, cost --------------------------------------------------------------


def boosting_score(window: Sequence[float], k: int, decay: float = 0.96) -> float:
    """``S_k = (R_max - R_k) / (R_max - R_min) * decay**k``; ``R_k`` is the window's last."""
    if not window:
        raise ValueError("empty window")
    if k < 0:
        raise ValueError("k must be >= 0")
    r_max, r_min, r_k = max(window), min(window), window[-1]
    spread = r_max - r_min
    position = (r_max - r_k) / spread if spread > 0 else 1.0
    return float(position * decay**k)


def active_workers(score: float, min_workers: int, max_workers: int) -> int:
    """``I_k = clip(round(I_max * S_k), I_min, I_max)``."""
    if not 1 <= min_workers <= max_workers:
        raise ValueError("need 1 <= min_workers <= max_workers")
    if not math.isfinite(score):
        raise ValueError("score must be finite")
    return int(np.clip(round(max_workers * score), min_workers, max_workers))


class WorkerSeconds:
    """Integral of the number of active workers over wall-clock time."""

    def __init__(self, active: int, now: float) -> None:
        if active < 0:
            raise ValueError("active workers must be >= 0")
        self.active = active
        self._since = now
        self._total = 0.0
        self.timeline: list[tuple[float, int]] = [(now, active)]
        """(time, active workers from then on), one row per change."""

    def set(self, active: int, now: float) -> None:
        if active < 0:
            raise ValueError("active workers must be >= 0")
        if now < self._since:
            raise ValueError("time went backwards")
        self._total += self.active * (now - self._since)
        self._since = now
        if active != self.active:
            self.timeline.append((now, active))
        self.active = active

    def total(self, now: float) -> float:
        return self._total + self.active * max(0.0, now - self._since)


# -- the scheduler ---------------------------------------------------------------------


@dataclass(frozen=True)
class BoostConfig:
    """Parameters of boosting detection and worker scaling."""

    window: int = 6
    """n: rounds in the sliding window of ratios."""
    decay: float = 0.96
    """d in ``S_k``."""
    min_workers: int = 1
    """I_min."""
    lanczos_iterations: int = 12
    """Lanczos steps (Hessian-vector products) per probe."""
    probes: int = 1
    """Random start vectors per round."""
    sample_transitions: int = 256
    """Recent transitions the policy loss is evaluated on."""
    ratio_cap: float = 1e3
    """|R| bound, and R when the loss shows no negative curvature."""
    round_iterations: int = 50
    """PS training iterations (full-model updates) per step of ``k`` in ``d**k`` (ours:
    about 2-3 s of training at the default pull rate, so the decay spans a run)."""
    restart_on_boost: bool = True
    """A detected boost (full window, newest ratio its lowest) restarts ``k`` at 0."""

    def __post_init__(self) -> None:
        checks = [
            (self.window >= 1, "window must be >= 1"),
            (0.0 < self.decay <= 1.0, "decay must be in (0, 1]"),
            (self.min_workers >= 1, "min_workers must be >= 1"),
            (self.lanczos_iterations >= 2, "lanczos_iterations must be >= 2"),
            (self.probes >= 1, "probes must be >= 1"),
            (self.sample_transitions >= 2, "sample_transitions must be >= 2"),
            (self.ratio_cap > 0, "ratio_cap must be > 0"),
            (self.round_iterations >= 1, "round_iterations must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass(frozen=True)
class BoostRound:
    """One scheduler round."""

    k: int
    time: float
    lambda_max: float
    lambda_min: float
    ratio: float
    score: float
    workers: int
    detector_s: float
    """Seconds the curvature estimate took."""
    round_s: float
    """Seconds since the previous round (or since the scheduler started)."""
    detector_cpu_s: float = 0.0
    """CPU seconds of the curvature estimate, where measured."""


@dataclass
class BoostScheduler:
    """Runs the detector once per round and sets the number of active workers."""

    max_workers: int
    config: BoostConfig = field(default_factory=BoostConfig)
    seed: int = 0
    clock: Callable[[], float] = time.monotonic
    start: float | None = None
    """Time the worker-seconds meter starts at (default: now)."""

    def __post_init__(self) -> None:
        if self.max_workers < self.config.min_workers:
            raise ValueError(f"max_workers {self.max_workers} < min_workers "
                             f"{self.config.min_workers}")
        now = self.clock() if self.start is None else self.start
        self.meter = WorkerSeconds(self.max_workers, now)
        self.ratios: deque[float] = deque(maxlen=self.config.window)
        self.rounds: list[BoostRound] = []
        self.restarts = 0
        """Boosts detected: times ``k`` restarted at 0."""
        self._origin = 0
        self._last = now
        import torch

        self._generator = torch.Generator().manual_seed(self.seed)
        self._rng = np.random.default_rng(self.seed)

    @property
    def active(self) -> int:
        return self.meter.active

    def estimate(self, policy: torch.nn.Module, batch: Trajectories) -> tuple[float, float]:
        """(lambda_max, lambda_min) of the policy loss of ``policy`` on ``batch``."""
        return estimate_curvature(policy, batch, self.config, self._generator)

    def step(self, policy: torch.nn.Module, buffer: TrajectoryBuffer,
             now: float | None = None) -> BoostRound:
        """One round: curvature of ``policy`` on a sample of ``buffer``, score, workers."""
        began, began_cpu = time.perf_counter(), time.thread_time()
        batch = buffer.sample(self.config.sample_transitions, self._rng)
        lmax, lmin = self.estimate(policy, batch)
        return self.record(lmax, lmin, time.perf_counter() - began, now,
                           detector_cpu_s=time.thread_time() - began_cpu)

    def record(self, lambda_max: float, lambda_min: float, detector_s: float = 0.0,
               now: float | None = None, *, detector_cpu_s: float = 0.0,
               iteration: int | None = None) -> BoostRound:
        """Score a round from given eigenvalues and move the worker count.

        ``iteration`` is the PS's training iteration; ``k`` counts them in units of
        ``round_iterations`` since the start or the last detected boost. Without it ``k``
        is the number of the round (the bare score schedule of the unit tests).
        """
        now = self.clock() if now is None else now
        ratio = curvature_ratio(lambda_max, lambda_min, self.config.ratio_cap)
        self.ratios.append(ratio)
        if iteration is None:
            k = len(self.rounds)
        else:
            window = list(self.ratios)
            boost = (len(window) == self.config.window and max(window) > min(window)
                     and ratio == min(window))
            if boost and self.config.restart_on_boost:
                self._origin = iteration
                self.restarts += 1
            k = max(iteration - self._origin, 0) // self.config.round_iterations
        score = boosting_score(list(self.ratios), k, self.config.decay)
        workers = active_workers(score, self.config.min_workers, self.max_workers)
        self.meter.set(workers, now)
        row = BoostRound(k, now, lambda_max, lambda_min, ratio, score, workers, detector_s,
                         max(now - self._last, 0.0), detector_cpu_s)
        self._last = now
        self.rounds.append(row)
        return row

    def worker_seconds(self, now: float | None = None) -> float:
        return self.meter.total(self.clock() if now is None else now)

    @property
    def overhead_share(self) -> float:
        """Detector time over the time between rounds, all rounds together."""
        spent = sum(r.detector_s for r in self.rounds)
        elapsed = sum(r.round_s for r in self.rounds)
        return spent / elapsed if elapsed > 0 else math.nan

    def stats(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready summary: rounds, workers over time, worker-seconds, overhead."""
        now = self.clock() if now is None else now
        t0 = self.meter.timeline[0][0]
        return {
            "rounds": len(self.rounds),
            "worker_seconds": self.meter.total(now),
            "max_worker_seconds": self.max_workers * max(now - t0, 0.0),
            "active_workers": self.active,
            "mean_active_workers": (self.meter.total(now) / (now - t0)) if now > t0 else math.nan,
            "workers_over_time": [(round(t - t0, 3), w) for t, w in self.meter.timeline],
            "detector_overhead_share": self.overhead_share,
            "detector_mean_ms": (1e3 * float(np.mean([r.detector_s for r in self.rounds]))
                                 if self.rounds else math.nan),
            "detector_mean_cpu_ms": (1e3 * float(np.mean([r.detector_cpu_s for r in self.rounds]))
                                     if self.rounds else math.nan),
            "ratio_last": self.rounds[-1].ratio if self.rounds else math.nan,
            "restarts": self.restarts,
            "score_last": self.rounds[-1].score if self.rounds else math.nan,
        }
