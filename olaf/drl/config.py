"""Hyperparameters of the asynchronous advantage actor-critic (A3C-style A2C) learner
and of one ``olaf run`` experiment.

Every field carries its own docstring so that ``olaf run --help`` and the docs can
point here instead of repeating the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from olaf.drl.boosting import BoostConfig
from olaf.drl.staleness import StalenessConfig
from worker_transport.policy import DEFAULT_FEEDBACK_TTL_MS
from worker_transport.protocol import DEFAULT_FRAC_BITS, MAX_VALUES_P4

AGGREGATIONS = ("plain", "staleness-aware")
SCALINGS = ("fixed", "boost")


@dataclass(frozen=True)
class A2CConfig:
    """Learner hyperparameters, shared by every worker and the parameter server."""

    hidden: int = 32
    """Width of the two tanh hidden layers of the actor and of the critic (32 keeps a
    CartPole gradient at 40 blocks of 64 values, LunarLander at 45)."""
    rollout_steps: int = 32
    """Environment steps per worker per gradient (the n of n-step returns)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE(lambda) mixing between one-step TD (0) and Monte-Carlo (1) advantages."""
    value_coef: float = 0.5
    """Weight of the critic's squared-error loss against the policy loss."""
    entropy_coef: float = 0.01
    """Weight of the entropy bonus that keeps the policy exploring."""
    max_grad_norm: float = 0.5
    """Each worker clips its gradient to this L2 norm before sending it, which also
    bounds every fixed-point value far below int32 saturation even after many merges."""
    learning_rate: float = 1e-3
    """Adam step size at the parameter server."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's first- and second-moment decay rates."""
    adam_eps: float = 1e-8
    """Adam's denominator epsilon."""
    reward_window: int = 10
    """Episodes in a worker's "recent mean episode return", the reward it sends."""

    def __post_init__(self) -> None:
        checks = [
            (self.hidden >= 1, "hidden must be >= 1"),
            (self.rollout_steps >= 1, "rollout_steps must be >= 1"),
            (0.0 < self.gamma <= 1.0, "gamma must be in (0, 1]"),
            (0.0 <= self.gae_lambda <= 1.0, "gae_lambda must be in [0, 1]"),
            (self.max_grad_norm > 0, "max_grad_norm must be > 0"),
            (self.learning_rate > 0, "learning_rate must be > 0"),
            (self.reward_window >= 1, "reward_window must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass(frozen=True)
class RunConfig:
    """One experiment: switch, parameter server and workers on this machine."""

    env_id: str = "CartPole-v1"
    """Any gymnasium id with a Box observation and a Discrete action space."""
    workers: int = 8
    """Logical workers (each its own environment, sender and worker_id)."""
    processes: int = 0
    """Worker processes hosting the logical workers round-robin; 0 picks
    ``min(workers, 2)``, because this machine has 2 cores."""
    mode: str = "olaf"
    """Switch mode: ``olaf`` (merge/replace/drop by reward, workers use P_s) or
    ``fifo`` (drop-tail baseline, workers always send)."""
    always_send: bool = False
    """Workers send every update (P_s = 1) in ``olaf`` mode too: the OLAF queue without
    the workers' transmission control, to ablate the worker's part."""
    feedback_ttl_ms: float = DEFAULT_FEEDBACK_TTL_MS
    """Workers' P_s: ACK feedback older than this no longer counts, and the next update
    is sent as a probe (DESIGN.md §4)."""
    pull_rate: float = 1000.0
    """PULLs per second the parameter server sends: the bottleneck, in blocks/s."""
    capacity: int = 64
    """OlafQueue slots at the switch."""
    shuffle_blocks: bool = False
    """Workers send each gradient's blocks in a random order instead of by block id
    (a FIFO baseline that does not favour low block ids when the queue is full)."""
    values: int = MAX_VALUES_P4
    """V, gradient values per block."""
    frac_bits: int = DEFAULT_FRAC_BITS
    """Fixed-point fraction bits of values and reward."""
    duration: float = 150.0
    """Wall-clock budget in seconds; the run ends earlier once ``target_reward`` is met."""
    target_reward: float | None = None
    """Stop when the mean return of the last ``target_window`` episodes reaches this."""
    stop_at_target: bool = True
    """End the run when the target is reached; ``olaf compare`` keeps running to
    ``duration`` so that every run also has a final return over the same budget."""
    target_window: int = 20
    """Episodes (over all workers) in the running mean that the target is checked on."""
    broadcast_period: float = 0.05
    """Seconds between weight publications of the parameter server."""
    controller_interval: float = 0.5
    """Seconds between reward-threshold updates of the controller loop."""
    threshold_fraction: float = 0.15
    """The switch's reward threshold is this fraction of |mean reward of recent DATA|."""
    threshold_floor: float = 1.0
    """Smallest reward threshold (in return units), so that a mean near 0 still merges."""
    reward_history: int = 256
    """DATA blocks in the controller's "recent" mean reward."""
    seed: int = 0
    """Seeds torch, numpy, the environments and the senders' P_s draws."""
    learner: A2CConfig = field(default_factory=A2CConfig)
    """Learner hyperparameters."""
    aggregation: str = "plain"
    """PS policy: ``plain`` applies each DATA block as it arrives; ``staleness-aware``
    holds and weights blocks by staleness (olaf.drl.staleness) and makes workers use the
    truncated importance-sampled policy loss."""
    staleness: StalenessConfig = field(default_factory=StalenessConfig)
    """Parameters of the staleness-aware policy."""
    scaling: str = "fixed"
    """Worker policy: ``fixed`` keeps every worker active; ``boost`` activates as many as
    the boosting detector asks for (olaf.drl.boosting)."""
    boost: BoostConfig = field(default_factory=BoostConfig)
    """Parameters of boosting detection and worker scaling."""
    boost_period: float = 1.0
    """Seconds between rounds of the boosting detector."""

    def __post_init__(self) -> None:
        checks = [
            (self.aggregation in AGGREGATIONS, f"aggregation must be one of {AGGREGATIONS}"),
            (self.scaling in SCALINGS, f"scaling must be one of {SCALINGS}"),
            (self.boost_period > 0, "boost_period must be > 0"),
            (self.scaling != "boost" or self.boost.min_workers <= self.workers,
             "min_workers must be <= workers"),
            (self.workers >= 1, "workers must be >= 1"),
            (self.processes >= 0, "processes must be >= 0"),
            (self.mode in ("olaf", "fifo"), "mode must be 'olaf' or 'fifo'"),
            (self.pull_rate > 0, "pull_rate must be > 0"),
            (self.feedback_ttl_ms > 0, "feedback_ttl_ms must be > 0"),
            (self.capacity >= 1, "capacity must be >= 1"),
            (1 <= self.values <= 255, "values must be 1..255"),
            (self.duration > 0, "duration must be > 0"),
            (self.target_window >= 1, "target_window must be >= 1"),
            (self.broadcast_period > 0, "broadcast_period must be > 0"),
            (self.controller_interval > 0, "controller_interval must be > 0"),
            (self.threshold_fraction >= 0, "threshold_fraction must be >= 0"),
            (self.threshold_floor >= 0, "threshold_floor must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def workers_use_p_s(self) -> bool:
        """True when the workers follow DESIGN.md §4's P_s; otherwise they always send."""
        return self.mode == "olaf" and not self.always_send

    @property
    def variant(self) -> str:
        """``olaf``, ``olaf-always`` (OLAF queue, workers always send) or ``fifo``."""
        return "olaf-always" if self.mode == "olaf" and self.always_send else self.mode

    @property
    def worker_processes(self) -> int:
        return min(self.workers, self.processes or 2)
