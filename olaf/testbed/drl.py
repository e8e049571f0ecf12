"""The Mininet-hosts backend of the one training loop (``olaf testbed run --experiment drl``).

``run_drl`` starts ``olaf.testbed.hosts`` on the PS host and on every worker host (and
``bmv2_topologies.relay`` on relay hosts), waits until every worker holds the PS's
first weights, starts them together and drives them with ``olaf.drl.core.TrainingLoop``,
as ``olaf run`` drives its local processes: the same evaluation schedule (greedy and
stochastic, by this launcher's ``Evaluator`` on the weights the PS writes), the same stop
rule and the same ``RunResult``, so ``olaf.drl.report`` writes the same CSV/JSON files and
plots.

What is the testbed's own: the hosts report through their stdout lines
(``MininetHosts.poll``); the PS's reward reports feed the control plane's
``ThresholdLoop`` on a thread of its own (it sets every switch's threshold over
P4Runtime, which can take a second on a loaded machine); the switches' counters are read
on another thread for the same reason.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bmv2_topologies.experiment import (
    LineReader,
    pull_address,
    python_module,
    start_relays,
)
from bmv2_topologies.testbed import Testbed, TestbedError
from control_plane.threshold import ThresholdLoop
from olaf.drl.config import RunConfig
from olaf.drl.core import Status, TrainingLoop, finish_returns, real_clock
from olaf.drl.evaluation import Evaluator
from olaf.drl.results import EvalScores, RunResult, Snapshot
from olaf.drl.worker_turn import TX_FIELDS
from olaf.testbed.hosts import config_json, read_weights
from worker_transport.protocol import OLAF_PORT

PS_STOP_GRACE = 20.0
"""Seconds the PS gets to stop its receiver and write its metrics after SIGTERM."""
PROCESS_STOP_GRACE = 20.0
"""Seconds each worker and relay gets after SIGTERM (a loaded 2-core machine is slow)."""
COUNTER_PERIOD = 2.0
"""Seconds between counter reads over P4Runtime, on a thread of their own: on a loaded
machine a session can take a second, which must not stall the sampling loop."""
WORKER_PREFIX = "drl-worker"


class MininetHosts:
    """The testbed as a ``Backend``: processes on Mininet hosts, heard through their logs."""

    def __init__(self, testbed: Testbed, cfg: RunConfig, ps: Any, workers: list[Any],
                 relays: list[Any], weights: Path, threshold: ThresholdLoop) -> None:
        self.testbed, self.cfg, self.ps, self.workers, self.relays = testbed, cfg, ps, workers, relays
        self.weights, self.threshold = weights, threshold
        self.readers = {p.name: LineReader(p) for p in [ps, *workers]}
        self.steps: dict[str, int] = {}
        nan3 = (math.nan, math.nan, math.nan)
        self.ps_state: dict[str, Any] = {"version": 0, "applied": 0, "aom": math.nan,
                                         "staleness": nan3, "update_age_ms": nan3}
        self.evaluator = Evaluator(cfg)
        self._eval_thread: threading.Thread | None = None
        self._eval_answer: tuple[int, float, EvalScores, int] | None = None
        self._eval_error: BaseException | None = None
        topo = testbed.topology
        self.first_hop = sorted({topo.switch_of(h.name)[0] for h in topo.workers})
        self.outcomes: dict[str, int] = {}
        self.occupied = 0
        self.counter_errors: list[str] = []
        self._sampler_stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_counters,
                                         name="olaf-testbed-counters", daemon=True)
        self.t0 = time.time()

    def start(self) -> None:
        self._sampler.start()

    def _sample_counters(self) -> None:
        while True:
            try:
                counters = self.testbed.control.counters()
                self.outcomes = sum_outcomes(counters, self.first_hop)
                self.occupied = sum((counters[s].get("queue") or {}).get("occupied", 0)
                                    for s in self.first_hop)
            except (ConnectionError, RuntimeError) as e:  # one missed sample; keep going
                self.counter_errors.append(str(e))
            if self._sampler_stop.wait(COUNTER_PERIOD):
                return

    # -- Backend ------------------------------------------------------------------------
    def now(self) -> float:
        return real_clock()

    def poll(self, loop: TrainingLoop) -> None:
        for name, reader in self.readers.items():
            for line in reader.lines():
                self._absorb(loop, name, line)
        if self._eval_thread is not None and not self._eval_thread.is_alive():
            self._eval_thread = None
            if self._eval_error is not None:
                raise RuntimeError("the launcher's evaluation failed") from self._eval_error
            loop.evaluation(*self._eval_answer)

    def _absorb(self, loop: TrainingLoop, name: str, line: str) -> None:
        kind, _, rest = line.partition(" ")
        f = rest.split()
        if kind == "episode" and len(f) == 3:
            loop.progress(name, 0, [(float(f[0]), int(name[len(WORKER_PREFIX):]), float(f[1]),
                                     int(f[2]))])
        elif kind == "progress" and name == "drl-ps" and len(f) == 9:
            self.ps_state.update(version=int(f[0]), applied=int(f[1]), aom=float(f[2]),
                                 staleness=tuple(map(float, f[3:6])),
                                 update_age_ms=tuple(map(float, f[6:9])))
        elif kind == "progress" and len(f) == 1 + len(TX_FIELDS):
            # Workers report running totals; the loop counts new steps.
            total = int(f[0])
            loop.progress(name, total - self.steps.get(name, 0), [],
                          dict(zip(TX_FIELDS, map(float, f[1:]), strict=True)))
            self.steps[name] = total
        elif kind == "rewards" and f:
            self.threshold.report(float(f[0]))
        elif kind == "start" and f:
            # The PS's receiver started: the run's clock counts from here.
            self.t0 = loop.t0 = float(f[0])

    def publish(self) -> None:
        """The PS broadcasts MODEL itself every ``broadcast_period``."""

    def request_eval(self, steps: int, elapsed: float) -> None:
        published = read_weights(self.weights)
        if published is None:
            raise TestbedError("the PS has written no weights")

        def evaluate() -> None:
            weights, version = published
            try:
                self._eval_answer = (steps, elapsed, self.evaluator.evaluate(weights), version)
            except BaseException as exc:  # raised in the loop's thread by poll()
                self._eval_error = exc

        # A thread: the loop goes on sampling while the episodes run.
        self._eval_thread = threading.Thread(target=evaluate, name="olaf-testbed-eval", daemon=True)
        self._eval_thread.start()

    def recent_rewards(self) -> list[float]:
        return []  # the ThresholdLoop is fed from the PS's lines, on its own thread

    def status(self) -> Status:
        history = self.threshold.history
        return Status(aom_ms=self.ps_state["aom"], occupied=self.occupied,
                      outcomes=dict(self.outcomes), model_version=self.ps_state["version"],
                      blocks_applied=self.ps_state["applied"], active_workers=self.cfg.workers,
                      threshold=history[-1].threshold if history else None,
                      staleness=self.ps_state["staleness"],
                      update_age_ms=self.ps_state["update_age_ms"])

    def tick(self, loop: TrainingLoop, elapsed: float) -> None:
        dead = [p for p in [self.ps, *self.relays, *self.workers] if p.popen.poll() is not None]
        if dead:
            raise TestbedError(f"{dead[0].name} exited with {dead[0].popen.returncode}:\n"
                               f"{dead[0].output()[-2000:]}")

    def stop_signal(self) -> str | None:
        return None  # olaf testbed turns SIGTERM into SystemExit, which unwinds the loop

    def wait(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.05))

    def close(self, loop: TrainingLoop) -> float:
        """Stop the sampler, the PS, then the workers and relays; seconds it took."""
        self._sampler_stop.set()
        if self._sampler.is_alive():
            self._sampler.join()
        # The PS first: AoM is sampled up to the end of the run, not through the shutdown.
        begin = time.monotonic()
        self.testbed.stop(self.ps, grace=PS_STOP_GRACE)
        self.testbed.stop_all([*self.relays, *self.workers], grace=PROCESS_STOP_GRACE)
        stop_s = round(time.monotonic() - begin, 3)
        for name, reader in self.readers.items():  # what they wrote while stopping
            for line in reader.lines():
                self._absorb(loop, name, line)
        if self._eval_thread is not None:
            self._eval_thread.join()
            self.poll(loop)
        return stop_s


def run_drl(testbed: Testbed, cfg: RunConfig, *, progress: Callable[[Snapshot], None] | None = None,
            ready_timeout: float = 180.0) -> RunResult:
    """The main job's experiment across the testbed's hosts; returns a ``RunResult``."""
    topo = testbed.topology
    workers = topo.workers
    if cfg.workers != len(workers):
        raise ValueError(f"the config has {cfg.workers} workers, the topology {len(workers)}")
    if cfg.scaling != "fixed":
        raise ValueError(f"--scaling {cfg.scaling} / --elastic auto: the testbed's worker hosts "
                         "are the topology's, all of them active (not supported)")
    out = testbed.out
    config_path = out / "run_config.json"
    config_path.write_text(config_json(cfg))
    go = out / "go"
    go.unlink(missing_ok=True)
    npz, weights = out / "ps_metrics.npz", out / "ps_weights.npy"
    conf = ["--config", str(config_path), "--go", str(go)]
    ps = testbed.spawn("drl-ps", python_module(
        "olaf.testbed.hosts", "ps", *conf, "--pull-from", pull_address(testbed, topo.ps.name),
        "--workers", ",".join(h.ip for h in workers), "--npz", str(npz),
        "--weights", str(weights)), host=topo.ps.name)
    testbed.wait_for_line(ps, "ready", ready_timeout)
    # The PS's pull rate is the bottleneck; leaves drain at their share of it, not faster,
    # so that idle PULLs do not eat the CPU the (software) switches need.
    relays = start_relays(testbed, cfg.pull_rate / max(len(topo.relays), 1), cfg.values, cfg.frac_bits)
    procs = [
        testbed.spawn(f"{WORKER_PREFIX}{h.worker_id}", python_module(
            "olaf.testbed.hosts", "worker", *conf, "--worker-id", str(h.worker_id),
            "--ps", f"{topo.ps.ip}:{OLAF_PORT}"), host=h.name)
        for h in workers
    ]
    deadline = time.monotonic() + ready_timeout
    for p in procs:
        testbed.wait_for_line(p, "ready", max(1.0, deadline - time.monotonic()))

    torch.set_num_threads(1)  # the launcher's evaluations must not take both cores
    result = RunResult(cfg, weights_downlink="MODEL messages through the switch")  # hosts.send_paced
    threshold = ThresholdLoop(testbed.control, floor=cfg.threshold_floor,
                              interval=cfg.controller_interval, fraction=cfg.threshold_fraction,
                              rule=cfg.reward_rule)  # congested: refused (no CONGESTED read here)
    backend = MininetHosts(testbed, cfg, ps, procs, relays, weights, threshold)
    go.touch()
    loop = TrainingLoop(cfg, result, backend, time.time(), progress=progress)
    threshold.start()
    backend.start()
    try:
        loop.run()
        result.wall_time = time.time() - loop.t0
    finally:
        threshold.stop()
        stop_s = backend.close(loop)
    if not ps.final():
        raise TestbedError(f"drl-ps ended ({ps.popen.returncode}) without its final line:\n"
                           f"{ps.output()[-2000:]}")
    finals = [p.final() or {} for p in procs]
    result.senders = finals
    result.env_steps = sum(f.get("env_steps", 0) for f in finals) or loop.steps
    ps_final = ps.final() or {}
    result.receiver = ps_final.get("receiver", {})
    result.aom = ps_final.get("aom", {})
    result.policies = ps_final.get("policies", {})
    result.model_version = ps_final.get("model_version", backend.ps_state["version"])
    result.blocks_applied = ps_final.get("blocks_applied", backend.ps_state["applied"])
    result.num_parameters = ps_final.get("num_parameters", 0)
    result.num_blocks = ps_final.get("num_blocks", 0)
    result.active_workers = cfg.workers
    if npz.exists():
        with np.load(npz) as z:
            result.aom_t_ms, result.aom_global_ms = z["aom_t_ms"], z["aom_global_ms"]
            result.update_age_ms = z["update_age_ms"]
            result.data = [tuple(row) for row in z["data"].tolist()]
    published = read_weights(weights)
    if published is not None:
        result.final_eval_return = backend.evaluator.final(published[0])
    counters = testbed.control.counters()
    result.switch = {"outcomes": sum_outcomes(counters, backend.first_hop), "per_switch": counters,
                     "relays": {p.name: p.final() for p in relays}, "stop_s": stop_s,
                     "counter_errors": backend.counter_errors, "threshold_errors": threshold.errors,
                     "thresholds": [(s.time, s.mean_reward, s.threshold) for s in threshold.history]}
    finish_returns(result)
    return result


def sum_outcomes(counters: dict[str, dict[str, Any]], switches: list[str]) -> dict[str, int]:
    """UPDATE outcomes summed over ``switches`` (the workers' first hops)."""
    total: dict[str, int] = {}
    for s in switches:
        for k, v in counters[s]["outcomes"].items():
            total[k] = total.get(k, 0) + int(v)
    return total


def write_report(result: RunResult, out: Path) -> list[Path]:
    """The same metric files and plots as ``olaf run``."""
    from olaf.drl.report import write_metrics, write_plots  # matplotlib: only when writing

    return write_metrics(result, out) + write_plots(result, out)
