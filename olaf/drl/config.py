"""The configuration of one ``olaf run`` experiment (``RunConfig``).

The learners' hyperparameters live beside their algorithms (``ImpactConfig`` in
olaf.drl.impact, ``A2CConfig`` in olaf.drl.a2c) and the parameter server's in
olaf.drl.server (``PsConfig``). Every field carries its own docstring so that
``olaf run --help`` and the docs can point here instead of repeating the numbers.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from olaf.drl.autoscale import AutoscaleConfig
from olaf.drl.boosting import BoostConfig
from olaf.drl.bottleneck import PRESETS, block_bytes, blocks_per_second, slots_of
from olaf.drl.staleness import StalenessConfig
from worker_transport.policy import DEFAULT_FEEDBACK_TTL_MS
from worker_transport.protocol import DEFAULT_FRAC_BITS, MAX_VALUES_P4

if TYPE_CHECKING:
    from olaf.drl.a2c import A2CConfig
    from olaf.drl.impact import ImpactConfig
    from olaf.drl.server import PsConfig

CLOCKS = ("real", "virtual")
AGGREGATIONS = ("plain", "staleness-aware")
SCALINGS = ("fixed", "boost", "decay", "auto")
ALGOS = ("impact", "a2c")
EVAL_POLICIES = ("greedy", "stochastic")


def _beside_its_code(module: str, name: str) -> Callable[[], Any]:
    """A default factory for a configuration that lives beside its algorithm. The import
    waits until a RunConfig is made, because the learners import torch, and the CLI builds
    every subcommand's parser (``run_defaults``) without one."""

    def make() -> Any:
        return getattr(importlib.import_module(module), name)()

    return make


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
    feedback: int = 3
    """Feedback revision of the switch's queue and the workers' P_s together (DESIGN.md §3
    Feedback and §4): 3, the ACK's queue_util from the cluster's room and P_s with the
    loss ceiling; 2, the global occupancy and the paper's P_s (the sweep mode
    ``olaf-rev2``)."""
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
    whichever comes first (env steps measure the method, wall time the machine);
    ``math.inf``: no cap (``olaf run --total-steps N`` without ``--duration``)."""
    total_steps: int = 1_000_000
    """Budget in environment steps over all workers."""
    eval_every: int = 10_000
    """Environment steps between evaluations of the PS's weights."""
    eval_episodes: int = 10
    """Episodes per evaluation and policy, run side by side on separate environments."""
    eval_policy: str = "greedy"
    """The policy whose evaluation counts (``eval_mean``, the target, the final evaluation):
    ``greedy`` (the most likely action, or the Gaussian's mean) or ``stochastic`` (actions
    sampled from the policy, as the workers act). Every evaluation plays both on the same
    seeds and records both (olaf.drl.evaluation)."""
    target_reward: float | None = None
    """Stop when an evaluation's mean return (of ``eval_policy``) reaches this (``olaf run``
    defaults it to the environment's ``spec.reward_threshold``); None: no target."""
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
    reward_rule: str = "always"
    """The controller's reward rule (issue 49 item 2): ``always`` (DESIGN.md §3: the
    threshold every round), ``congested`` (the threshold only while the queue is CONGESTED,
    read once per ``controller_interval``; otherwise every compatible update merges), ``off``
    (no threshold: every compatible update merges). Virtual clock and local runs."""
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
    impact: ImpactConfig = field(default_factory=_beside_its_code("olaf.drl.impact", "ImpactConfig"))
    """Hyperparameters of the IMPACT learner."""
    learner: A2CConfig = field(default_factory=_beside_its_code("olaf.drl.a2c", "A2CConfig"))
    """Hyperparameters of the A2C learner."""
    ps: PsConfig = field(default_factory=_beside_its_code("olaf.drl.server", "PsConfig"))
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
    ``d**k`` schedule, without the detector (the baseline that isolates the detector);
    ``auto`` (``olaf run --elastic auto``) sizes the pool to the bottleneck
    (olaf.drl.autoscale), from ``autoscale.start_workers`` up to ``workers``."""
    autoscale: AutoscaleConfig = field(default_factory=AutoscaleConfig)
    """Thresholds of ``scaling="auto"`` (``--set autoscale.NAME=VALUE``)."""
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
            (self.eval_policy in EVAL_POLICIES, f"eval_policy must be one of {EVAL_POLICIES}"),
            (self.scaling in ("fixed", "auto") or self.boost.min_workers <= self.workers,
             "min_workers must be <= workers"),
            (self.scaling != "auto" or self.autoscale.start_workers <= self.workers,
             "autoscale.start_workers must be <= workers (the pool's ceiling)"),
            (self.workers >= 1, "workers must be >= 1"),
            (self.processes >= 0, "processes must be >= 0"),
            (self.mode in ("olaf", "fifo"), "mode must be 'olaf' or 'fifo'"),
            (self.pull_rate > 0, "pull_rate must be > 0"),
            (self.feedback_ttl_ms > 0, "feedback_ttl_ms must be > 0"),
            (not isinstance(self.feedback, bool) and self.feedback in (2, 3),
             "feedback must be revision 2 or 3"),
            (self.capacity >= 1, "capacity must be >= 1"),
            (1 <= self.values <= 255, "values must be 1..255"),
            (self.duration > 0, "duration must be > 0"),
            (self.target_window >= 1, "target_window must be >= 1"),
            (self.broadcast_period > 0, "broadcast_period must be > 0"),
            (self.controller_interval > 0, "controller_interval must be > 0"),
            (self.threshold_fraction >= 0, "threshold_fraction must be >= 0"),
            (self.threshold_floor >= 0, "threshold_floor must be >= 0"),
            (self.reward_rule in ("always", "congested", "off"),
             "reward_rule must be one of always, congested, off"),
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


def run_defaults() -> Any:
    """RunConfig's plain field defaults as attributes, without making a RunConfig (which
    would import the learners, and torch with them): what the CLI's parsers show."""
    return SimpleNamespace(**{f.name: f.default for f in dataclasses.fields(RunConfig)
                              if f.default is not dataclasses.MISSING})
