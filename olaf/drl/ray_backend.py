"""``olaf run --backend ray``: the parameter server and the worker processes as Ray actors
on the nodes of an existing Ray cluster, the gradients still through an OLAF switch as UDP.

What runs where (docs/ray.md):

* the **switch**: ``--switch HOST:PORT`` names one that already runs (``olaf switch
  --listen``, bmv2, Tofino, the FPGA); without it a software switch (``UdpSwitch``, the
  reference OlafQueue) runs as a Ray actor on the head node, bound to the head's node
  address and ``--switch-port``;
* the **parameter server** (``ParameterServerHost``): one actor, placed where Ray finds
  room; it PULLs DATA from the switch over UDP at ``pull_rate`` and applies each block
  with Adam, exactly as the local backend's PS does (``ParameterServer``, ``RunPolicies``);
* the **worker processes** (``WorkerHost``): ``cfg.worker_processes`` actors spread over
  the nodes (``SPREAD``), each hosting its logical workers round-robin as the local
  backend's worker processes do; every gradient leaves as UPDATE datagrams from the
  worker's own UDP socket toward the switch, which ACKs them;
* the **evaluator** (``EvaluatorHost``): greedy and stochastic evaluation on environments
  of its own;
* this process, the **driver**: starts and stops the actors, polls progress, feeds the
  reward-threshold controller, samples the metrics and decides when to stop.

Weights go back over a Ray object channel, not as MODEL messages: the PS publishes
``(weights, version)`` every ``broadcast_period`` and each worker process keeps one
non-blocking fetch of "anything newer than what I hold" in flight (``WeightChannel``).
Why not MODEL: the software switch's UDP mode answers only the sender of a message and
forwards nothing, MODEL carries fixed-point weights (quantised), and a UDP broadcast to
workers whose addresses Ray chooses would need its own loss handling and an open port on
every worker node. Ray moves the exact float32 vector reliably, over the connections
the cluster already has; what OLAF aggregates, the gradients, still crosses the switch.

Ray is an optional extra (``pip install -e '.[ray]'``) imported only here, and only
when this backend runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from control_plane.threshold import ThresholdLoop
from olaf.drl.cli_args import check_env, config_from_args, resolve_target, usage_error
from olaf.drl.config import RunConfig
from olaf.drl.core import Status, TrainingLoop, finish_returns, real_clock
from olaf.drl.display import Progress, summary_table
from olaf.drl.ray_actors import (
    READY_TIMEOUT,
    EvaluatorHost,
    ParameterServerHost,
    SwitchHost,
    WorkerHost,
    first_pool,
)
from olaf.drl.report import write_metrics, write_plots
from olaf.drl.results import RunResult
from olaf.drl.tensorboard import TensorBoardLog
from worker_transport.protocol import OLAF_PORT

PS_CPUS = 0.5
"""CPUs the parameter server actor reserves (a scheduling share, not a limit)."""
WORKER_CPUS = 0.5
"""CPUs each worker-process actor reserves; ``SPREAD`` places them on as many nodes as it can."""
SWITCH_CPUS = 0.25
"""CPUs the software switch actor reserves on the head node."""
EVALUATOR_CPUS = 0.25
"""CPUs the evaluator actor reserves."""
PROGRESS_PERIOD = 0.25
"""Seconds between the driver's progress polls of the worker actors."""
CALL_TIMEOUT = 60.0
"""Seconds the driver waits for one answer of an actor during the run."""
STOP_TIMEOUT = 30.0
"""Seconds the worker actors get to finish their rollout and report after being stopped."""
RAY_EXTRA_HINT = "install the extra: pip install -e '.[ray]'"
UNSUPPORTED = {
    "resume": "--resume", "checkpoint_dir": "--checkpoint-dir",
    "checkpoint_every": "--checkpoint-every", "max_workers": "--max-workers",
}
"""``olaf run`` options the local backend has and this one does not (yet)."""


class RayBackendError(RuntimeError):
    """Something about the cluster the user can fix, said in one line."""


@dataclass(frozen=True)
class RayOptions:
    """Where the run goes: the cluster and the switch."""

    address: str = "auto"
    """Ray cluster address (``ray.init(address=...)``): ``auto`` finds the local one."""
    switch: tuple[str, int] | None = None
    """A running switch's UDP address; None starts a software switch on the head node."""
    switch_port: int = OLAF_PORT
    """UDP port of the software switch this run starts (0: any free port)."""


# -- the driver ------------------------------------------------------------------------------
def import_ray() -> Any:
    """The ``ray`` module, or RayBackendError saying how to get it."""
    try:
        # ray: an optional extra (pip install -e '.[ray]'), imported only when this backend runs.
        import ray
    except ImportError as exc:
        raise RayBackendError(f"--backend ray needs Ray, which is not importable ({exc}); "
                              f"{RAY_EXTRA_HINT}") from None
    return ray


def check_config(cfg: RunConfig) -> None:
    """ValueError for what this backend cannot run (nothing is started)."""
    if cfg.scaling not in ("fixed", "auto"):
        raise ValueError(f"--scaling {cfg.scaling} is not supported with --backend ray "
                         "(its worker flags live in one machine's shared memory); "
                         "--elastic auto is")


def _connect(ray: Any, address: str) -> None:
    try:
        # log_to_driver off: the live display owns the terminal; actor errors come back
        # as exceptions of the calls that hit them.
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        hint = ("start one with `ray start --head`, or give --address HOST:PORT"
                if address == "auto" else "is the address right and the cluster up?")
        raise RayBackendError(f"no Ray cluster at {address}: {exc} ({hint})") from None


def _get(ray: Any, refs: Any, timeout: float, what: str) -> Any:
    """``ray.get`` that names what did not answer (RuntimeError) instead of a Ray traceback."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise RayBackendError(
            f"{what} did not answer within {timeout:g} s; the cluster has "
            f"{ray.available_resources().get('CPU', 0):g} of "
            f"{ray.cluster_resources().get('CPU', 0):g} CPUs free (the PS asks for {PS_CPUS:g}, "
            f"each worker process {WORKER_CPUS:g}, the switch {SWITCH_CPUS:g} on the head node, "
            f"the evaluator {EVALUATOR_CPUS:g})") from None
    except ray.exceptions.RayError as exc:
        cause = exc.cause if isinstance(getattr(exc, "cause", None), BaseException) else exc
        raise RuntimeError(f"{what} failed: {_first_line(cause)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"


@dataclass
class _Actors:
    ps: Any = None
    switch: Any = None
    workers: list[Any] | None = None
    evaluator: Any = None

    def all(self) -> list[Any]:
        return [a for a in (self.ps, self.switch, self.evaluator, *(self.workers or [])) if a]


def run_on_ray(cfg: RunConfig, options: RayOptions,
               progress: Callable[[Any], None] | None = None,
               tensorboard: Path | None = None) -> RunResult:
    """One run on a Ray cluster (see the module doc); returns a ``RunResult`` like the
    local backend's (same summary keys), with ``placement`` added: where each worker
    process and the evaluator ran."""
    check_config(cfg)
    ray = import_ray()
    owns = not ray.is_initialized()
    if owns:
        _connect(ray, options.address)
    result = RunResult(cfg, weights_downlink="a Ray object channel (WeightChannel)")
    actors = _Actors()
    tb = None
    if tensorboard is not None:
        tb = TensorBoardLog(tensorboard)
    try:
        _run(ray, cfg, options, result, actors, progress, tb)
    finally:
        for actor in actors.all():
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if tb is not None:
            tb.close()
        if owns:
            ray.shutdown()
    return result


def _run(ray: Any, cfg: RunConfig, options: RayOptions, result: RunResult, actors: _Actors,
         progress: Callable[[Any], None] | None, tb: Any) -> None:
    remote = {cls: ray.remote(cls) for cls in (SwitchHost, ParameterServerHost, WorkerHost,
                                               EvaluatorHost)}
    # Threaded: the workers' weight fetches and the driver's polls must not queue behind
    # each other.
    actors.ps = remote[ParameterServerHost].options(num_cpus=PS_CPUS,
                                                    max_concurrency=8).remote(cfg)
    result.num_parameters, result.num_blocks = _get(
        ray, actors.ps.shape.remote(), READY_TIMEOUT, "the parameter server actor")
    if options.switch is None:
        # The head node: the one address a user knows before the run, to open in a firewall.
        actors.switch = remote[SwitchHost].options(
            num_cpus=SWITCH_CPUS, resources={"node:__internal_head__": 0.001}
        ).remote(cfg, result.num_blocks, options.switch_port)
        switch_address = tuple(_get(ray, actors.switch.address.remote(), READY_TIMEOUT,
                                    "the software switch actor on the head node"))
    else:
        switch_address = options.switch
    result.switch_address = switch_address
    nproc = cfg.worker_processes
    actors.workers = [
        remote[WorkerHost].options(num_cpus=WORKER_CPUS, max_concurrency=2,
                                   scheduling_strategy="SPREAD").remote(
            cfg, list(range(p, cfg.workers, nproc)), switch_address, actors.ps)
        for p in range(nproc)]
    actors.evaluator = remote[EvaluatorHost].options(num_cpus=EVALUATOR_CPUS).remote(cfg)
    placed = _get(ray, [w.ready.remote() for w in actors.workers] + [actors.evaluator.ready.remote()],
                  READY_TIMEOUT, "the worker and evaluator actors")
    result.worker_pids = [p["pid"] for p in placed]
    result.placement = placed
    # The clock starts when every worker is built, as in the local backend.
    t0 = _get(ray, actors.ps.start.remote(switch_address), CALL_TIMEOUT, "the parameter server")
    runs = [w.run.remote() for w in actors.workers]
    backend = RayActors(ray, cfg, actors, runs)
    controller = None
    if actors.switch is not None:
        # A switch given by address keeps its own threshold (set it over P4Runtime).
        switch = actors.switch
        controller = ThresholdLoop(
            lambda th: ray.get(switch.set_threshold.remote(th), timeout=CALL_TIMEOUT),
            floor=cfg.threshold_floor, interval=cfg.controller_interval,
            fraction=cfg.threshold_fraction, rule=cfg.reward_rule)  # congested: refused
    loop = TrainingLoop(cfg, result, backend, t0, controller=controller, progress=progress, tb=tb)
    try:
        loop.run()
    except BaseException:
        # The error that ended the loop is the one to report, not a follow-up of the stop.
        with contextlib.suppress(Exception):
            backend.close(loop)
        raise
    backend.close(loop)
    finish_returns(result)


class RayActors:
    """The Ray backend of the training loop: the PS, the workers, the evaluator and maybe
    the switch as actors; the driver hears of them through actor calls."""

    def __init__(self, ray: Any, cfg: RunConfig, actors: _Actors, runs: list[Any]) -> None:
        self.ray, self.cfg, self.actors, self.runs = ray, cfg, actors, runs
        self.pending_eval: Any = None
        self.next_progress = 0.0
        self.tx: dict[int, dict[str, Any]] = {}
        self.pool = first_pool(cfg)

    def set_workers(self, n: int) -> None:
        """``--elastic auto``: ids 0..n-1 take turns from now, in whichever worker actor holds
        them; the PS counts the worker-seconds and the AoM's active set."""
        calls = [w.set_workers.remote(n) for w in self.actors.workers]
        calls.append(self.actors.ps.set_workers.remote(n, time.time()))
        _get(self.ray, calls, CALL_TIMEOUT, "the pool's change")
        self.pool = n

    def now(self) -> float:
        return real_clock()

    def _poll_progress(self, loop: TrainingLoop) -> None:
        reports = _get(self.ray, [w.progress.remote() for w in self.actors.workers], CALL_TIMEOUT,
                       "a worker actor's progress")
        for i, (steps, episodes, tx, learner) in enumerate(reports):
            loop.progress(i, steps, episodes, tx, learner)
            self.tx[i] = tx

    def poll(self, loop: TrainingLoop) -> None:
        ray = self.ray
        now = time.time()
        if now >= self.next_progress:
            self._poll_progress(loop)
            self.next_progress = now + PROGRESS_PERIOD
        ended, _ = ray.wait(self.runs, num_returns=len(self.runs), timeout=0)
        if ended:
            i = self.runs.index(ended[0])
            _get(ray, ended[0], CALL_TIMEOUT, f"worker actor {i}")
            raise RuntimeError(f"worker actor {i} stopped before it was told to")
        if self.pending_eval is not None:
            done, _ = ray.wait([self.pending_eval], timeout=0)
            if done:
                self.pending_eval = None
                loop.evaluation(*_get(ray, done[0], CALL_TIMEOUT, "the evaluator"))

    def publish(self) -> None:
        """The PS actor publishes by itself every ``broadcast_period``."""

    def request_eval(self, steps: int, elapsed: float) -> None:
        actors = self.actors
        # On the weights published now: a slow evaluator skips points, as in every backend.
        self.pending_eval = actors.evaluator.evaluate.remote(actors.ps.weights.remote(-1),
                                                            steps, elapsed)

    def recent_rewards(self) -> list[float]:
        return _get(self.ray, self.actors.ps.recent_rewards.remote(), CALL_TIMEOUT,
                    "the parameter server")

    def _acked_outcomes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for tx in self.tx.values():
            for name, n in tx["outcomes"].items():
                out[name] = out.get(name, 0) + n
        return out

    def status(self) -> Status:
        ray, cfg, actors = self.ray, self.cfg, self.actors
        status = _get(ray, actors.ps.status.remote(), CALL_TIMEOUT, "the parameter server")
        if actors.switch is not None:
            switch = _get(ray, actors.switch.snapshot.remote(), CALL_TIMEOUT, "the switch actor")
            outcomes, occupied = dict(switch["outcomes"]), int(switch["occupied"])
        else:
            # A switch given by address is seen through its answers: the ACK outcomes the
            # workers counted and the queue utilisation the PS's last DATA/EMPTY carried.
            outcomes = self._acked_outcomes()
            util = status["queue_util"]
            occupied = 0 if util is None else round(util * cfg.capacity / 255)
        return Status(aom_ms=status["aom_ms"], occupied=occupied, outcomes=outcomes,
                      model_version=status["model_version"],
                      blocks_applied=status["blocks_applied"], active_workers=self.pool,
                      staleness=tuple(status["staleness"]),
                      update_age_ms=tuple(status["update_age_ms"]))

    def tick(self, loop: TrainingLoop, elapsed: float) -> None:
        """Nothing of its own: this backend restarts no actor and writes no checkpoint."""

    def stop_signal(self) -> str | None:
        return None

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self, loop: TrainingLoop) -> None:
        """Stop the workers, then the PS, then the switch; collect what each measured."""
        ray, result, actors = self.ray, loop.result, self.actors
        for w in actors.workers:
            w.stop.remote()
        finals: list[dict[str, Any]] = []
        errors: list[str] = []
        for i, ref in enumerate(self.runs):
            try:
                finals.extend(ray.get(ref, timeout=STOP_TIMEOUT))
            except Exception as exc:  # a dead worker actor: report the others' figures
                errors.append(f"worker actor {i}: {_first_line(exc)}")
        with contextlib.suppress(Exception):
            self._poll_progress(loop)  # what the workers did between the last poll and the stop
        for w in actors.workers:
            with contextlib.suppress(Exception):
                ray.get(w.close.remote(), timeout=STOP_TIMEOUT)
        if self.pending_eval is not None:
            # As the local backend drains its evaluator's last report: an evaluation asked
            # for during the run counts even if it ends after the stop.
            with contextlib.suppress(Exception):
                loop.evaluation(*ray.get(self.pending_eval, timeout=READY_TIMEOUT))
        result.senders = finals
        result.active_workers = self.pool
        ps = _get(ray, actors.ps.finish.remote(), CALL_TIMEOUT, "the parameter server")
        result.wall_time = time.time() - loop.t0
        result.model_version, result.blocks_applied = ps["model_version"], ps["blocks_applied"]
        result.data = ps["data"]
        result.receiver, result.policies, result.aom = ps["receiver"], ps["policies"], ps["aom"]
        result.aom_t_ms, result.aom_global_ms = ps["aom_t_ms"], ps["aom_global_ms"]
        result.update_age_ms = ps["update_age_ms"]
        if actors.switch is not None:
            result.switch = _get(ray, actors.switch.close.remote(), CALL_TIMEOUT, "the switch actor")
        else:
            result.switch = {"outcomes": self._acked_outcomes(),
                             "source": "ACK outcomes counted by the workers"}
        result.final_eval_return = _get(ray, actors.evaluator.final.remote(ps["weights"]),
                                        READY_TIMEOUT, "the final evaluation")
        if ps["error"] is not None:
            errors.append(f"parameter server: {ps['error']}")
        if errors:
            raise RuntimeError("; ".join(errors))


# -- ``olaf run --backend ray`` ------------------------------------------------------------------
def run_command(args: argparse.Namespace) -> int:
    """``olaf run`` when ``--backend ray`` (or one of its options) is given; exit code."""
    if args.backend != "ray":
        usage_error("olaf run: error: --address, --switch and --switch-port are options of "
                    "--backend ray")
    if args.switch is not None and args.switch_port is not None:
        usage_error("olaf run: error: --switch-port is the port of the switch this run starts; "
                    "--switch names a running one")
    given = [flag for name, flag in UNSUPPORTED.items() if getattr(args, name, None)]
    if given:
        usage_error(f"olaf run: error: not supported with --backend ray: {', '.join(given)}")
    cfg = check_env(config_from_args(args, mode=args.mode, seed=args.seed,
                                     target=resolve_target(args), always_send=args.always_send))
    try:
        check_config(cfg)
        import_ray()
    except (ValueError, RayBackendError) as exc:
        usage_error(f"olaf run: error: {exc}")
    options = RayOptions(address=args.address or "auto", switch=args.switch,
                         switch_port=OLAF_PORT if args.switch_port is None else args.switch_port)
    out = args.out or Path("runs") / time.strftime("run-%Y%m%d-%H%M%S")
    console = Console() if Console().is_terminal else Console(width=120)
    where = (f"switch {options.switch[0]}:{options.switch[1]}" if options.switch
             else "software switch on the head node")
    title = (f"olaf run on Ray ({options.address}): {cfg.algo} on {cfg.env_id}, {cfg.workers} "
             f"workers in {cfg.worker_processes} actors, {where}, pull {cfg.pull_rate:g}/s, "
             f"target {cfg.target_reward}")
    try:
        with Progress(title, cfg.duration, console, total_steps=cfg.total_steps) as progress:
            result = run_on_ray(cfg, options, progress, tensorboard=args.tensorboard)
    except RayBackendError as exc:
        print(f"olaf run: error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"olaf run: error: {exc}", file=sys.stderr)
        return 1
    console.print(summary_table(result.summary()))
    files = write_metrics(result, out) + write_plots(result, out)
    _write_placement(result, out)
    console.print(f"wrote {len(files) + 1} files to {out}/: "
                  + ", ".join([p.name for p in files] + ["placement.json"]))
    return 0


def _write_placement(result: Any, out: Path) -> None:
    """Which node each actor ran on, and the switch address: the run's Ray-specific facts."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "placement.json").write_text(json.dumps({
        "switch_address": list(result.switch_address),
        "worker_processes": getattr(result, "placement", []),
    }, indent=2) + "\n")
