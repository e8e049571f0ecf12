"""Command-line flags shared by ``olaf run`` and ``olaf compare``, and their RunConfig."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn

from olaf.drl.autoscale import AutoscaleConfig
from olaf.drl.boosting import BoostConfig
from olaf.drl.bottleneck import PRESETS
from olaf.drl.config import AGGREGATIONS, ALGOS, CLOCKS, EVAL_POLICIES, SCALINGS, RunConfig, run_defaults
from olaf.drl.settings import parse_set, split_settings, with_settings
from olaf.drl.staleness import StalenessConfig

if TYPE_CHECKING:
    from olaf.drl.a2c import A2CConfig
    from olaf.drl.impact import ImpactConfig

TARGET_HELP = ("evaluation mean return (of --eval-policy) that ends the run (default: the "
               "environment's spec.reward_threshold, 475 CartPole-v1, 200 LunarLander-v3)")


def usage_error(message: str) -> NoReturn:
    """One line on stderr and exit code 2, as for any bad command-line value."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def add_run_arguments(parser: argparse.ArgumentParser, *, duration: float | None,
                      total_steps: int | None = None) -> None:
    """The flags of one run. ``duration``: the --duration default in seconds; None (``olaf
    run``): no wall-clock cap when --total-steps is given, else RunConfig's (``run_budget``
    decides, so both flags default to None here)."""
    d = run_defaults()
    total_steps = d.total_steps if total_steps is None else total_steps
    parser.add_argument("--env", default=d.env_id,
                        help="gymnasium id; the built-in learners take flat Box observations and "
                        f"Discrete or Box actions (default {d.env_id})")
    parser.add_argument("--workers", type=int, default=d.workers,
                        help=f"logical workers (default {d.workers})")
    parser.add_argument("--processes", type=int, default=d.processes,
                        help="worker processes hosting them round-robin (default: min(workers, 2))")
    parser.add_argument("--pull-rate", type=float, default=d.pull_rate,
                        help=f"PULLs/s of the PS, the bottleneck in blocks/s (default {d.pull_rate:g})")
    parser.add_argument("--capacity", type=int, default=None,
                        help=f"switch queue slots (default {d.capacity}, or what the environment's "
                        "learner needs: docs/learner.md)")
    parser.add_argument("--values", type=int, default=d.values,
                        help=f"V, values per block (default {d.values})")
    parser.add_argument("--shuffle-blocks", action="store_true",
                        help="workers send each gradient's blocks in random order, not by block id")
    parser.add_argument("--feedback-ttl-ms", type=float, default=d.feedback_ttl_ms, metavar="MS",
                        help="workers' P_s: ACK feedback older than this no longer counts and the "
                        f"next update is a probe, DESIGN.md §4 (default {d.feedback_ttl_ms:g})")
    # olaf run (duration None) leaves both None, "not given", so that run_budget can tell an
    # explicit --total-steps apart.
    budget_help = (f"default: none when --total-steps is given, else {d.duration:g}"
                   if duration is None else f"default {duration:g}")
    parser.add_argument("--total-steps", type=int, default=None if duration is None else total_steps,
                        help=f"budget in environment steps, all workers (default {total_steps:,})")
    parser.add_argument("--duration", type=float, default=duration,
                        help=f"wall-clock cap in seconds ({budget_help})")
    parser.add_argument("--target-reward", type=float, default=None, help=TARGET_HELP)
    parser.add_argument("--eval-every", type=int, default=d.eval_every,
                        help=f"env steps between evaluations (default {d.eval_every:,})")
    parser.add_argument("--eval-episodes", type=int, default=d.eval_episodes,
                        help=f"episodes per evaluation and policy (default {d.eval_episodes})")
    # No argparse choices: RunConfig checks it, so a bad value is one line, exit 2.
    parser.add_argument("--eval-policy", default=d.eval_policy,
                        metavar="{" + ",".join(EVAL_POLICIES) + "}",
                        help="every evaluation plays greedy and stochastic (sampled) episodes "
                        "and records both; this one's mean is the evaluation that meets the "
                        f"target (default {d.eval_policy})")
    learner = parser.add_argument_group("learner (docs/learner.md)")
    learner.add_argument("--algo", default=d.algo, metavar="{impact,a2c,MODULE:CLASS}",
                         help="impact (clipped surrogate + V-trace), a2c, or your own "
                         "olaf.algorithm.Algorithm subclass, docs/algorithm.md "
                         f"(default {d.algo})")
    learner.add_argument("--envs-per-worker", type=int, default=None,
                         help="IMPACT: environments per worker, gymnasium.vector (default: "
                         "ImpactConfig's envs_per_worker)")
    learner.add_argument("--lr", type=float, default=None,
                         help="learning rate at the PS (default: the learner's learning_rate)")
    learner.add_argument("--hidden", type=int, default=None,
                         help="hidden layer width (default: the learner's hidden)")
    learner.add_argument("--set", action="append", default=[], metavar="algo.NAME=VALUE",
                         dest="algo_set",
                         help="any hyperparameter of the selected learner, e.g. algo.clip=0.2, "
                         "or of the parameter server, e.g. ps.aggregate=sum, ps.optimizer=sgd "
                         "(repeatable; names in docs/learner.md)")
    add_policy_arguments(parser)
    add_bottleneck_arguments(parser)


def add_bottleneck_arguments(parser: argparse.ArgumentParser) -> None:
    """The bottleneck toward the PS (DESIGN.md §7) and the clock the run keeps."""
    d = run_defaults()
    group = parser.add_argument_group("bottleneck and clock (DESIGN.md §7, olaf.drl.bottleneck)")
    group.add_argument("--bottleneck", choices=tuple(PRESETS), default=None, metavar="NAME",
                       help="a named bottleneck: " + "; ".join(
                           f"{name}: {p.emulates}" for name, p in PRESETS.items())
                       + " (the flags below override its numbers)")
    group.add_argument("--egress-rate", type=float, default=None, metavar="BYTES/S",
                       help="C, the egress link toward the PS; DATA leaves at C/(36+4V) blocks/s "
                       "(replaces --pull-rate)")
    group.add_argument("--buffer-bytes", type=int, default=None, metavar="B",
                       help="B, the queue's buffer: floor(B/(36+4V)) slots for olaf and fifo alike "
                       "(replaces --capacity)")
    group.add_argument("--propagation-us", type=float, default=None, metavar="US",
                       help="one-way propagation delay of every link (virtual clock)")
    group.add_argument("--uplink-rate", type=float, default=None, metavar="BYTES/S",
                       help="each worker's own link rate, 0: no serialisation (virtual clock)")
    group.add_argument("--clusters", type=int, default=d.clusters, metavar="K",
                       help=f"training clusters: worker w in cluster w %% K (default {d.clusters})")
    group.add_argument("--max-clusters", type=int, default=d.max_clusters, metavar="M",
                       help="cluster ids the switch's queue accepts, so that ids K..M-1 are left to "
                       "other tenants (default: K)")
    group.add_argument("--feedback", type=int, choices=(2, 3), default=d.feedback,
                       help="feedback revision of the switch and the workers' P_s together, "
                       "DESIGN.md §3-4: 3, the cluster's room and the loss ceiling; 2, the global "
                       f"occupancy and the paper's P_s (default {d.feedback})")
    group.add_argument("--cluster-quota", type=int, default=d.cluster_quota, metavar="Q",
                       help="slots one cluster may hold in the switch's queue, 1..capacity, "
                       "DESIGN.md §3 (default 0: capacity, no limit)")
    group.add_argument("--clock", choices=CLOCKS, default=d.clock,
                       help="real: processes and sockets in wall time; virtual: one process, "
                       f"simulated time for workers, links, switch and PS (default {d.clock})")
    group.add_argument("--step-time-us", type=float, default=d.step_time_us, metavar="US",
                       help=f"virtual clock: microseconds per env step (default {d.step_time_us:g})")
    group.add_argument("--compute-time-us", type=float, default=d.compute_time_us, metavar="US",
                       help="virtual clock: microseconds per gradient's loss and backward "
                       f"(default {d.compute_time_us:g})")
    group.add_argument("--heterogeneity", type=float, default=d.heterogeneity, metavar="SIGMA",
                       help="virtual clock: sigma of each worker's lognormal speed factor "
                       f"(default {d.heterogeneity:g})")


def bottleneck_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """RunConfig keyword arguments of the bottleneck: a preset's numbers, then the flags."""
    # getattr: a namespace built without these two flags (an older caller) keeps the defaults.
    out: dict[str, Any] = {"clusters": args.clusters, "clock": args.clock,
                           "max_clusters": getattr(args, "max_clusters", 0),
                           "cluster_quota": getattr(args, "cluster_quota", 0),
                           "feedback": getattr(args, "feedback", 3),
                           "step_time_us": args.step_time_us,
                           "compute_time_us": args.compute_time_us,
                           "heterogeneity": args.heterogeneity}
    if args.bottleneck is not None:
        p = PRESETS[args.bottleneck]
        out.update(bottleneck=args.bottleneck, egress_rate=p.egress_rate,
                   buffer_bytes=p.buffer_bytes, propagation_s=p.propagation_s,
                   uplink_rate=p.uplink_rate)
    for flag, key, scale in (("egress_rate", "egress_rate", 1.0),
                             ("buffer_bytes", "buffer_bytes", 1),
                             ("propagation_us", "propagation_s", 1e-6),
                             ("uplink_rate", "uplink_rate", 1.0)):
        value = getattr(args, flag)
        if value is not None:
            out[key] = value * scale
    return out


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """The PS aggregation and worker-scaling policies (both off by default)."""
    s, b, d = StalenessConfig(), BoostConfig(), run_defaults()
    group = parser.add_argument_group("policies (Stellaris staleness-aware aggregation, "
                                      "Nitro boosting-driven worker scaling)")
    group.add_argument("--aggregation", choices=AGGREGATIONS, default=d.aggregation,
                       help="PS aggregation: plain (apply each DATA block) or staleness-aware "
                            f"(default {d.aggregation})")
    group.add_argument("--staleness-decay", type=float, default=s.decay,
                       help=f"d in beta_k = delta_max * d^k (default {s.decay:g})")
    group.add_argument("--max-hold", type=float, default=s.max_hold,
                       help=f"seconds a held block waits at most (default {s.max_hold:g})")
    group.add_argument("--max-pending", type=int, default=s.max_pending,
                       help=f"held DATA blocks per parameter block at most (default {s.max_pending})")
    group.add_argument("--is-rho", type=float, default=s.rho,
                       help=f"truncation rho of the importance weight (default {s.rho:g})")
    group.add_argument("--scaling", choices=SCALINGS, default=d.scaling,
                       help="worker scaling: fixed, boost (detector), decay (its d^k schedule "
                       f"alone) or auto (= --elastic auto) (default {d.scaling})")
    group.add_argument("--elastic", choices=("off", "auto"), default="off",
                       help="auto: the pool sizes itself to the bottleneck (olaf.drl.autoscale): "
                       "from autoscale.start_workers up to --workers, every decision in "
                       "timeline.csv; thresholds by --set autoscale.NAME=VALUE (default off)")
    group.add_argument("--min-workers", type=int, default=b.min_workers,
                       help=f"I_min of boost scaling (default {b.min_workers}; I_max is --workers)")
    group.add_argument("--boost-period", type=float, default=d.boost_period,
                       help="seconds between curvature probes of the detector "
                       f"(default {d.boost_period:g}); rounds k count PS training iterations")
    group.add_argument("--round-iterations", type=int, default=b.round_iterations,
                       help="PS training iterations (full-model updates) per scaling round k "
                       f"(default {b.round_iterations})")
    group.add_argument("--boost-decay", type=float, default=b.decay,
                       help=f"d in S_k (default {b.decay:g})")
    group.add_argument("--boost-window", type=int, default=b.window,
                       help=f"rounds in the sliding window of S_k (default {b.window})")
    group.add_argument("--lanczos-iterations", type=int, default=b.lanczos_iterations,
                       help=f"Hessian-vector products per Lanczos probe (default {b.lanczos_iterations})")


def policies_from_args(args: argparse.Namespace) -> dict:
    """RunConfig keyword arguments of the policies (ValueError on bad values)."""
    scaling = args.scaling
    if getattr(args, "elastic", "off") == "auto":
        if scaling not in ("fixed", "auto"):
            raise ValueError(f"--elastic auto and --scaling {scaling} both set the active workers")
        scaling = "auto"
    auto_items = [i for i in getattr(args, "algo_set", []) if i.strip().startswith("autoscale.")]
    return {
        "autoscale": with_settings(AutoscaleConfig(), auto_items, "autoscale."),
        "aggregation": args.aggregation,
        "staleness": StalenessConfig(decay=args.staleness_decay, max_hold=args.max_hold,
                                     max_pending=args.max_pending, rho=args.is_rho),
        "scaling": scaling,
        "boost": BoostConfig(window=args.boost_window, decay=args.boost_decay,
                             min_workers=args.min_workers,
                             lanczos_iterations=args.lanczos_iterations,
                             round_iterations=args.round_iterations),
        "boost_period": args.boost_period,
    }


def run_budget(args: argparse.Namespace) -> tuple[int, float]:
    """(total_steps, duration) of the flags: as given, or, where ``olaf run`` left them None
    (``add_run_arguments(duration=None)``), RunConfig's defaults, except that an explicit
    --total-steps lifts the wall-clock cap (math.inf): a budget in env steps means to
    spend it, whatever the machine's speed."""
    d = run_defaults()
    total_steps = d.total_steps if args.total_steps is None else args.total_steps
    if args.duration is not None:
        return total_steps, args.duration
    return total_steps, math.inf if args.total_steps is not None else d.duration


def config_from_args(args: argparse.Namespace, *, mode: str, seed: int,
                     target: float | None, stop_at_target: bool = True,
                     always_send: bool = False) -> RunConfig:
    """A RunConfig, or exit 2 with a one-line message on bad values. ``always_send``:
    workers send every update in olaf mode too (the OLAF queue without P_s)."""
    try:
        algo_items, ps_items = split_settings(args.algo_set)
        defaults = RunConfig()  # imports the learners (torch): the run is about to need them
        impact, learner = algo_configs(args, algo_items, defaults)
        ps = with_settings(defaults.ps, ps_items, "ps.")
        total_steps, duration = run_budget(args)
        return RunConfig(env_id=args.env, workers=args.workers, processes=args.processes,
                         mode=mode, always_send=always_send,
                         feedback_ttl_ms=args.feedback_ttl_ms,
                         pull_rate=args.pull_rate, capacity=queue_capacity(args),
                         values=args.values, shuffle_blocks=args.shuffle_blocks,
                         duration=duration, total_steps=total_steps,
                         eval_every=args.eval_every, eval_episodes=args.eval_episodes,
                         eval_policy=args.eval_policy,
                         target_reward=target, stop_at_target=stop_at_target, seed=seed,
                         algo=args.algo, algo_set=custom_settings(args, algo_items),
                         impact=impact, learner=learner, ps=ps,
                         **policies_from_args(args), **bottleneck_from_args(args))
    except ValueError as exc:
        usage_error(f"olaf: error: {exc}")


def env_learner(args: argparse.Namespace) -> Any:
    """``learners.env_learner`` of the flags' environment and algorithm."""
    from olaf.drl import learners  # torch: only once a run is being built

    return learners.env_learner(args.env, args.algo)


def queue_capacity(args: argparse.Namespace) -> int:
    """--capacity, else the environment's learner's, else RunConfig's (a buffer in bytes,
    if given, replaces it in RunConfig)."""
    if args.capacity is not None:
        return args.capacity
    preset = env_learner(args)
    return preset.capacity if preset is not None else run_defaults().capacity


def algo_configs(args: argparse.Namespace, items: list[str],
                 defaults: RunConfig) -> tuple[ImpactConfig, A2CConfig]:
    """The two learners' configurations, the selected one with the flags and ``--set`` applied."""
    common: dict[str, Any] = {}
    if args.lr is not None:
        common["learning_rate"] = args.lr
    if args.hidden is not None:
        common["hidden"] = args.hidden
    preset = env_learner(args)
    impact = defaults.impact if preset is None else preset.impact
    a2c = defaults.learner
    if args.algo not in ALGOS:
        if args.envs_per_worker is not None:
            raise ValueError("--envs-per-worker is an option of --algo impact")
        return impact, a2c  # a MODULE:CLASS algorithm's settings: custom_settings()
    if args.algo == "impact":
        if args.envs_per_worker is not None:
            common["envs_per_worker"] = args.envs_per_worker
        impact = replace(impact, **{**common, **parse_set(items, impact)})
    else:
        if args.envs_per_worker is not None:
            raise ValueError("--envs-per-worker is an option of --algo impact")
        a2c = replace(a2c, **{**common, **parse_set(items, a2c)})
    return impact, a2c


def custom_settings(args: argparse.Namespace, items: list[str]) -> tuple[str, ...]:
    """``--lr``, ``--hidden`` and ``--set`` as ``algo.NAME=VALUE`` items of a ``MODULE:CLASS``
    algorithm (checked against its ``Config`` by ``check_env``); () for the built-in ones."""
    if args.algo in ALGOS:
        return ()
    shortcuts = [f"algo.{name}={value}" for name, value in (("learning_rate", args.lr),
                                                            ("hidden", args.hidden))
                 if value is not None]
    return (*shortcuts, *items)


def resolve_target(args: argparse.Namespace) -> float | None:
    """``--target-reward``, else the environment's ``spec.reward_threshold``."""
    # torch and gymnasium (via evaluation): only once the arguments are known good.
    from olaf.drl.evaluation import default_target

    return args.target_reward if args.target_reward is not None else default_target(args.env)


def check_env(cfg: RunConfig) -> RunConfig:
    """Fail early, before any process starts, on an algorithm that does not load or an
    environment it cannot use (its model factory refuses the spaces)."""
    # torch and gymnasium: only once the arguments are known good, so --help stays fast.
    import gymnasium as gym

    from olaf.algorithm import env_spaces
    from olaf.drl.evaluation import can_sample
    from olaf.drl.learners import make_algorithm

    try:
        algorithm = make_algorithm(cfg)
        observation_space, action_space = env_spaces(cfg.env_id)
    except ValueError as exc:
        usage_error(f"olaf: error: {exc}")
    try:
        model = algorithm.make_model(observation_space, action_space)
        if cfg.scaling == "boost" and (cfg.algo not in ALGOS
                                       or not isinstance(action_space, gym.spaces.Discrete)):
            raise ValueError("boost scaling needs a built-in learner and a Discrete action space "
                             "(its curvature probe is categorical)")
    except ValueError as exc:
        usage_error(f"olaf: error: {cfg.env_id}: {exc}")
    if not can_sample(model):
        what = f"{cfg.algo}'s model has no act(obs, generator)"
        if cfg.eval_policy == "stochastic":
            # No evaluation could ever meet the target: refuse now rather than run blind.
            usage_error(f"olaf: error: --eval-policy stochastic: {what}, it cannot sample")
        print(f"olaf: note: {what}: stochastic evaluations are not played (NaN)",
              file=sys.stderr)
    return replace(cfg)


def _switch_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT of a running switch, got {text!r}")
    return host.strip("[]"), int(port)


def _udp_port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a UDP port 0..65535, got {text!r}")
    return int(text)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Where ``olaf run`` runs: here (local) or across a Ray cluster (docs/ray.md)."""
    group = parser.add_argument_group("backend (docs/ray.md)")
    group.add_argument("--backend", choices=("local", "ray"), default="local",
                       help="local: every process on this machine (default); ray: the PS and "
                       "the worker processes as actors on an existing Ray cluster")
    group.add_argument("--address", default=None, metavar="ADDR",
                       help="--backend ray: the cluster, as ray.init takes it (default auto: "
                       "the one `ray start --head` started here)")
    group.add_argument("--switch", type=_switch_address, default=None, metavar="HOST:PORT",
                       help="--backend ray: a running switch's UDP address (olaf switch --listen, "
                       "bmv2, Tofino, FPGA); default: a software switch actor on the head node")
    group.add_argument("--switch-port", type=_udp_port, default=None, metavar="PORT",
                       help="--backend ray without --switch: UDP port of the software switch on "
                       "the head node (default 20300; 0 picks a free one)")
