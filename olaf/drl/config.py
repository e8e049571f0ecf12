"""Hyperparameters of the two learners (IMPACT, the default, and A2C) and of one
``olaf run`` experiment.

Every field carries its own docstring so that ``olaf run --help`` and the docs can
point here instead of repeating the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from olaf.drl.boosting import BoostConfig
from olaf.drl.bottleneck import PRESETS, block_bytes, blocks_per_second, slots_of
from olaf.drl.staleness import StalenessConfig
from worker_transport.policy import DEFAULT_FEEDBACK_TTL_MS
from worker_transport.protocol import DEFAULT_FRAC_BITS, MAX_VALUES_P4

CLOCKS = ("real", "virtual")
AGGREGATIONS = ("plain", "staleness-aware")
PS_AGGREGATES = ("mean", "sum")
PS_OPTIMIZERS = ("adam", "sgd", "rmsprop")
SCALINGS = ("fixed", "boost", "decay")
ALGOS = ("impact", "a2c")


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
class ImpactConfig:
    """Hyperparameters of the IMPACT learner (olaf.drl.impact), each with where its default
    comes from. Set any of them with ``olaf run --set algo.NAME=VALUE``."""

    hidden: int = 32
    """Width of the two tanh hidden layers of the actor and of the critic. CleanRL's PPO
    uses 64; 32 keeps a CartPole gradient at 40 blocks of 64 values, and the PS's pull rate
    counts blocks."""
    rollout_steps: int = 32
    """Steps per environment per gradient (IMPALA's unroll length is 20, RLlib APPO's
    rollout_fragment_length 50; 32 as the A2C learner)."""
    envs_per_worker: int = 4
    """Environments a worker steps together (gymnasium.vector), so one gradient carries
    ``envs_per_worker * rollout_steps`` transitions (CleanRL PPO's CartPole num_envs = 4)."""
    gamma: float = 0.99
    """Discount factor (IMPALA, CleanRL PPO, RLlib APPO)."""
    vtrace_lambda: float = 0.95
    """lambda of V-trace's traces ``c_s = lambda * min(c_bar, ratio)`` (IMPALA §4.2 allows
    lambda < 1; 0.95 is CleanRL PPO's gae_lambda, to which V-trace reduces on-policy)."""
    rho_bar: float = 1.0
    """Truncation of V-trace's importance weights in the value targets (IMPALA: 1)."""
    c_bar: float = 1.0
    """Truncation of V-trace's traces (IMPALA: 1)."""
    clip: float = 0.2
    """epsilon of the clipped surrogate ``min(r A, clip(r, 1-eps, 1+eps) A)`` with
    ``r = pi_theta / mu`` (CleanRL PPO clip_coef 0.2; IMPACT and RLlib APPO use 0.4)."""
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
    """Adam step size at the parameter server (RLlib APPO lr 5e-4)."""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam's moment decay rates (PyTorch/CleanRL defaults)."""
    adam_eps: float = 1e-5
    """Adam's denominator epsilon (CleanRL PPO 1e-5)."""
    reward_window: int = 10
    """Episodes in a worker's "recent mean episode return", the reward it sends (OLAF)."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this in the loss (not in the returns reported): the
    critic's targets then stay near unit scale when rewards are large, as for Pendulum-v1
    (CleanRL's continuous PPO normalises rewards for the same reason)."""
    epochs: int = 1
    """1: the worker sends the gradient of one loss (IMPACT). More: the worker runs PPO's
    epochs on its rollout with an Adam of its own (``local_learning_rate``, ``minibatches``
    per epoch, advantages and V-trace targets computed once before the epochs, as PPO does)
    and sends the parameter delta, which a PS with ``ps.optimizer=sgd`` and
    ``ps.learning_rate=1`` applies as it is (rl-baselines3-zoo's PPO: 4 epochs for
    LunarLander; the delta is what DD-PPO-style and federated learners exchange)."""
    minibatches: int = 4
    """Minibatches per local epoch (with ``epochs > 1``)."""
    local_learning_rate: float = 3e-4
    """The worker's own Adam step size for the local epochs (rl-baselines3-zoo PPO: 3e-4)."""

    def __post_init__(self) -> None:
        checks = [
            (self.hidden >= 1, "hidden must be >= 1"),
            (self.rollout_steps >= 1, "rollout_steps must be >= 1"),
            (self.envs_per_worker >= 1, "envs_per_worker must be >= 1"),
            (self.reward_scale > 0, "reward_scale must be > 0"),
            (self.epochs >= 1 and self.minibatches >= 1, "epochs and minibatches must be >= 1"),
            (self.local_learning_rate > 0, "local_learning_rate must be > 0"),
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


@dataclass(frozen=True)
class PsConfig:
    """How the parameter server turns a DATA block into a step (docs/learner.md); set with
    ``olaf run --set ps.NAME=VALUE``.

    A DATA block carries the mean of the ``agg_count`` worker updates the switch summed
    into it (the receiver divides by agg_count). What that block is worth is a choice:
    A3C applies every worker's gradient (so k merged gradients are worth k steps, i.e.
    their sum), SwitchML sums in the network and the host divides (the mean). With Adam
    the choice hardly matters (Adam is invariant to the gradient's scale, so merging buys
    noise reduction only); with SGD or RMSProp it decides whether a merge moves the weights
    k times as far."""

    aggregate: str = "mean"
    """``mean``: a block of agg_count k is one step with the mean of its k updates;
    ``sum``: one step with their sum (k times the mean), as if each had been applied."""
    optimizer: str = "adam"
    """``adam`` (per-block bias correction, the learner's betas and eps), ``sgd`` (plain,
    with ``momentum``), or ``rmsprop`` (A3C's shared RMSProp: ``alpha``, ``rmsprop_eps``)."""
    learning_rate: float = 0.0
    """Step size; 0 takes the learner's ``learning_rate``."""
    momentum: float = 0.0
    """SGD momentum (0: plain SGD)."""
    alpha: float = 0.99
    """RMSProp's squared-gradient decay (A3C, Mnih et al. 2016: 0.99)."""
    rmsprop_eps: float = 0.1
    """RMSProp's denominator epsilon (A3C's shared RMSProp: 0.1)."""

    def __post_init__(self) -> None:
        checks = [
            (self.aggregate in PS_AGGREGATES, f"ps.aggregate must be one of {PS_AGGREGATES}"),
            (self.optimizer in PS_OPTIMIZERS, f"ps.optimizer must be one of {PS_OPTIMIZERS}"),
            (self.learning_rate >= 0, "ps.learning_rate must be >= 0"),
            (0.0 <= self.momentum < 1.0, "ps.momentum must be in [0, 1)"),
            (0.0 <= self.alpha < 1.0, "ps.alpha must be in [0, 1)"),
            (self.rmsprop_eps > 0, "ps.rmsprop_eps must be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


@dataclass(frozen=True)
class RunConfig:
    """One experiment: switch, parameter server and workers on this machine."""

    env_id: str = "CartPole-v1"
    """Any gymnasium id with a flat Box observation space and a Discrete or Box action
    space (the built-in learners; a user's algorithm decides for itself)."""
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
    duration: float = 180.0
    """Wall-clock cap in seconds: the run ends at ``total_steps``, at the target, or here,
    whichever comes first (env steps measure the method, wall time the machine)."""
    total_steps: int = 1_000_000
    """Budget in environment steps over all workers."""
    eval_every: int = 10_000
    """Environment steps between greedy evaluations of the PS's weights."""
    eval_episodes: int = 10
    """Episodes per evaluation, run side by side on separate environments."""
    target_reward: float | None = None
    """Stop when a greedy evaluation's mean return reaches this (``olaf run`` defaults it to
    the environment's ``spec.reward_threshold``); None: no target."""
    stop_at_target: bool = True
    """End the run when the target is reached; ``olaf compare`` keeps running to its budget
    so that every run also has a final return over the same budget."""
    target_window: int = 20
    """Training episodes (over all workers) in the rolling mean shown beside evaluations."""
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
    algo: str = "impact"
    """Learner: ``impact`` (olaf.drl.impact, clipped surrogate + V-trace), ``a2c``, or
    ``MODULE:CLASS``, a user's ``olaf.algorithm.Algorithm`` subclass (docs/algorithm.md)."""
    algo_set: tuple[str, ...] = ()
    """``algo.NAME=VALUE`` settings of a ``MODULE:CLASS`` algorithm's ``Config`` (the
    built-in learners carry theirs in ``impact`` and ``learner``)."""
    impact: ImpactConfig = field(default_factory=ImpactConfig)
    """Hyperparameters of the IMPACT learner."""
    learner: A2CConfig = field(default_factory=A2CConfig)
    """Hyperparameters of the A2C learner."""
    ps: PsConfig = field(default_factory=PsConfig)
    """How the parameter server applies DATA: aggregate and optimizer."""
    aggregation: str = "plain"
    """PS policy: ``plain`` applies each DATA block as it arrives; ``staleness-aware``
    holds and weights blocks by staleness (olaf.drl.staleness) and makes workers use the
    truncated importance-sampled policy loss."""
    staleness: StalenessConfig = field(default_factory=StalenessConfig)
    """Parameters of the staleness-aware policy."""
    scaling: str = "fixed"
    """Worker policy: ``fixed`` keeps every worker active; ``boost`` activates as many as
    the boosting detector asks for (olaf.drl.boosting); ``decay`` follows only the
    ``d**k`` schedule, without the detector (the baseline that isolates the detector)."""
    boost: BoostConfig = field(default_factory=BoostConfig)
    """Parameters of boosting detection and worker scaling."""
    boost_period: float = 1.0
    """Seconds between rounds of the boosting detector."""
    checkpoint_dir: str = ""
    """Directory the run writes its checkpoint to (olaf.drl.checkpoint); empty: none."""
    checkpoint_every: int = 0
    """Environment steps between checkpoints (0: only the one at the end of the run)."""
    max_workers: int = 0
    """Logical workers the run can grow to by hand (``olaf workers DIR add N``); 0 means
    ``workers``. Workers ``workers..max_workers-1`` start inactive."""
    max_restarts: int = 10
    """Restarts of dead worker processes a run tolerates before it ends with an error."""

    # -- the bottleneck (DESIGN.md §7, olaf.drl.bottleneck) and the clock ---------------
    bottleneck: str = ""
    """The preset the bottleneck came from (``olaf.drl.bottleneck.PRESETS``); "" if none."""
    egress_rate: float = 0.0
    """C, bytes/s of the egress link toward the PS: DATA leaves at ``C / (36 + 4V)``
    blocks/s, which replaces ``pull_rate`` (filled in here); 0: ``pull_rate`` is given."""
    buffer_bytes: int = 0
    """B, the queue's buffer in bytes: ``floor(B / (36 + 4V))`` slots for OLAF and FIFO
    alike, which replaces ``capacity`` (filled in here); 0: ``capacity`` is given."""
    propagation_s: float = 0.0
    """One-way propagation delay of every link (virtual clock; real clock: loopback)."""
    uplink_rate: float = 0.0
    """Bytes/s of each worker's own link: its UPDATEs serialise at this rate, and the
    weights come back over it (virtual clock); 0: no serialisation delay."""
    clusters: int = 1
    """K training clusters (tenants): worker ``w`` is in cluster ``w % K``; OLAF merges
    within a cluster only and holds one slot per (cluster, block)."""
    clock: str = "real"
    """``real``: processes and sockets in wall time (olaf.drl.local); ``virtual``: one
    process, every worker, link, the switch and the PS in simulated time
    (olaf.drl.simulated); ``duration`` and every reported time are then simulated."""
    step_time_us: float = 100.0
    """Virtual clock: simulated microseconds per environment step of a worker (before its
    heterogeneity factor): a CartPole step with the policy's forward pass on one core is
    of this order here (IMPACT's 4 x 32-step rollout: 12.8 ms)."""
    compute_time_us: float = 5000.0
    """Virtual clock: simulated microseconds a worker spends on the loss and backward pass
    of one gradient (before its heterogeneity factor)."""
    heterogeneity: float = 0.25
    """Virtual clock: sigma of each worker's lognormal speed factor (drawn from the seed);
    0: identical workers."""
    jitter: float = 0.05
    """Virtual clock: sigma of a lognormal factor drawn per turn (0: none)."""
    max_clusters: int = 0
    """Cluster ids the switch's queue accepts (its ``max_clusters``, DESIGN.md §3); 0 means
    ``clusters``. More leaves ids ``clusters..max_clusters-1`` to other tenants sharing the
    switch (the neighbour of docs/security.md's flood measurement)."""
    cluster_quota: int = 0
    """Slots one cluster may hold in the switch's queue at once (DESIGN.md §3 step 4,
    1..capacity); 0 means ``capacity``, i.e. no limit (the default)."""

    def __post_init__(self) -> None:
        checks = [
            (self.aggregation in AGGREGATIONS, f"aggregation must be one of {AGGREGATIONS}"),
            (self.scaling in SCALINGS, f"scaling must be one of {SCALINGS}"),
            (self.boost_period > 0, "boost_period must be > 0"),
            (self.algo in ALGOS or ":" in self.algo,
             f"algo must be one of {ALGOS} or MODULE:CLASS"),
            (self.total_steps >= 1, "total_steps must be >= 1"),
            (self.eval_every >= 1, "eval_every must be >= 1"),
            (self.eval_episodes >= 1, "eval_episodes must be >= 1"),
            (self.scaling == "fixed" or self.boost.min_workers <= self.workers,
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
        self._bottleneck()
        self._queue_limits()

    def _bottleneck(self) -> None:
        """Check the bottleneck block and derive ``capacity``/``pull_rate`` from B and C."""
        checks = [
            (self.bottleneck == "" or self.bottleneck in PRESETS,
             f"bottleneck must be one of {tuple(PRESETS)}"),
            (self.egress_rate >= 0, "egress_rate must be >= 0 bytes/s"),
            (self.buffer_bytes >= 0, "buffer_bytes must be >= 0"),
            (self.buffer_bytes == 0 or 1 <= slots_of(self.buffer_bytes, self.values) <= 65535,
             f"buffer_bytes must hold 1..65535 blocks of {block_bytes(self.values)} bytes"),
            (self.propagation_s >= 0, "propagation_s must be >= 0"),
            (self.uplink_rate >= 0, "uplink_rate must be >= 0 bytes/s"),
            (1 <= self.clusters <= min(self.workers, 65535) or self.clusters == 1,
             "clusters must be 1..workers"),
            (self.clock in CLOCKS, f"clock must be one of {CLOCKS}"),
            (self.step_time_us > 0 and self.compute_time_us >= 0,
             "step_time_us must be > 0 and compute_time_us >= 0"),
            (self.heterogeneity >= 0 and self.jitter >= 0, "heterogeneity and jitter must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        # Frozen: the derived fields are set here, so everything that reads capacity and
        # pull_rate (queue, receiver, display, summary) sees the bottleneck.
        if self.buffer_bytes:
            object.__setattr__(self, "capacity", slots_of(self.buffer_bytes, self.values))
        if self.egress_rate:
            object.__setattr__(self, "pull_rate", blocks_per_second(self.egress_rate, self.values))

    def _queue_limits(self) -> None:
        """Check ``max_clusters`` and ``cluster_quota`` (after ``_bottleneck``, which may
        derive ``capacity`` from B)."""
        checks = [
            (self.max_clusters == 0 or self.clusters <= self.max_clusters <= 65536,
             "max_clusters must be 0 (= clusters) or clusters..65536"),
            (0 <= self.cluster_quota <= self.capacity,
             f"cluster_quota must be 0 (no limit) or 1..capacity ({self.capacity})"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def queue_max_clusters(self) -> int:
        """The switch queue's ``max_clusters``: ``max_clusters``, or ``clusters`` if 0."""
        return self.max_clusters or self.clusters

    @property
    def queue_cluster_quota(self) -> int:
        """The switch queue's ``cluster_quota``: ``cluster_quota``, or ``capacity`` if 0."""
        return self.cluster_quota or self.capacity

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
