"""The one training loop of ``olaf run``, whichever backend runs the processes.

A run is always the same dance: workers roll out and send gradients through the switch,
the parameter server applies the DATA it pulls (``PsApply``), publishes weights, and a
driver loop (``TrainingLoop``) counts env steps and episodes, asks for evaluations
(greedy and stochastic), feeds the reward-threshold controller, samples the metrics timeline,
and decides when to stop. What differs between backends is only *where* things run and
how the driver hears about them:

==============  ===============================  ====================================
backend         workers, PS, evaluator           how the driver hears of them
==============  ===============================  ====================================
local           processes on this machine        event queues, PS in this process
                (olaf.drl.local)
Ray             actors on a Ray cluster          actor calls
                (olaf.drl.ray_backend)
Mininet hosts   processes on testbed hosts       their stdout lines
                (olaf.testbed.drl)
==============  ===============================  ====================================

A backend implements ``Backend``; the loop calls it and is called back through
``TrainingLoop.progress`` and ``TrainingLoop.evaluation``. The clock is the backend's
too (``Backend.now``), so that a simulated one can drive the same loop.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from olaf.drl.autoscale import STEADY, Autoscaler, Counters, Decision, Signals, signals
from olaf.drl.bottleneck import block_bytes
from olaf.drl.config import RunConfig
from olaf.drl.controller import RecentRewards
from olaf.drl.results import EvalScores, RunResult, Snapshot, quantiles, rolling_returns

if TYPE_CHECKING:  # the PS's numpy side only: no torch, no sockets, at import
    from olaf.drl.policies import RunPolicies
    from olaf.drl.server import ParameterServer
    from worker_transport.receiver import DataBatch

SAMPLE_PERIOD = 0.5
"""Seconds between rows of the metrics timeline; its last row is taken when the run stops."""
TX_KEYS = ("sent", "skipped", "probes", "p_s_sum", "ceiling_sum", "ceilings", "due_blocks",
           "answered_due_blocks")
"""What each worker process reports of its senders (``olaf.drl.worker_turn.tx_totals``)."""

Episode = tuple[float, int, float, int]
"""(end time in epoch s, worker id, return, length) of a finished training episode."""


class PsApply:
    """The parameter server's use of DATA, the same on every backend.

    Called with each read's ``DataBatch`` (the receiver thread): the blocks go to the
    run's policies (straight into the PS, or through the staleness-aware aggregator),
    their rewards into the controller's window, and one row per block into ``data``:
    (time s since ``t0``, block_id, agg_count, staleness in versions, reward).
    """

    def __init__(self, ps: ParameterServer, policies: RunPolicies, rewards: RecentRewards,
                 t0: float = 0.0) -> None:
        self.ps, self.policies, self.rewards = ps, policies, rewards
        self.t0 = t0
        """Epoch seconds the data log's times count from (set when training starts)."""
        self.data: list[tuple[float, int, int, int, float]] = []

    def __call__(self, batch: DataBatch) -> None:
        version = self.ps.model_version
        self.policies.apply(batch, version)
        rewards = batch.rewards.tolist()
        self.rewards.extend(rewards)
        h = batch.headers
        t = batch.received_at / 1e6 - self.t0
        staleness = (version - h["model_version"].astype(np.int64)).tolist()
        self.data.extend((t, b, a, s, r) for b, a, s, r in zip(
            h["block_id"].tolist(), h["agg_count"].tolist(), staleness, rewards, strict=True))


@dataclass
class Status:
    """What a backend reports for one row of the timeline (the loop adds the rest)."""

    aom_ms: float = math.nan
    occupied: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    model_version: int = 0
    blocks_applied: int = 0
    active_workers: int = 0
    restarts: int = 0
    threshold: float | None = None
    """The switch's reward threshold, if the backend knows it better than the loop's
    controller (a backend that runs its controller itself)."""
    staleness: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    """p50/p90/p99 staleness in versions of the blocks applied since the previous status."""
    update_age_ms: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    """p50/p90/p99 update age of the DATA received since the previous status."""


class RecentDelivery:
    """Staleness and update-age quantiles of what the PS took since the last look, for
    ``Status``: ``data`` is the PS's DATA log (``PsApply.data`` rows), ``ages`` a callable
    returning the receiver's update ages so far (ms)."""

    def __init__(self, data: list[tuple[float, int, int, int, float]],
                 ages: Callable[[], np.ndarray]) -> None:
        self.data, self.ages = data, ages
        self._data_seen, self._ages_seen = len(data), 0

    def take(self) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
        """(staleness p50/p90/p99, update age p50/p90/p99) of the blocks since the last call."""
        rows = self.data[self._data_seen:]
        self._data_seen += len(rows)
        ages = self.ages()
        new_ages = ages[self._ages_seen:]
        self._ages_seen = len(ages)
        return quantiles([r[3] for r in rows]), quantiles(new_ages)


class Backend(Protocol):
    """Where a run's processes live; see the module doc. Every method is called from the
    loop's thread, between its steps, and must not block for long."""

    def now(self) -> float:
        """The run's clock, in epoch seconds (real time, or a simulated clock)."""

    def poll(self, loop: TrainingLoop) -> None:
        """Hand what the workers and the evaluator reported to ``loop.progress`` and
        ``loop.evaluation``; raise if a process is gone that cannot be brought back."""

    def publish(self) -> None:
        """Publish the PS's weights to the workers (a backend whose PS publishes by
        itself does nothing)."""

    def request_eval(self, steps: int, elapsed: float) -> None:
        """Ask for an evaluation of the weights as they are now; its answer (``EvalScores``)
        comes back through ``loop.evaluation`` with the same ``steps`` and ``elapsed``."""

    def recent_rewards(self) -> list[float]:
        """The PS's window of recent DATA rewards, for the threshold controller."""

    def status(self) -> Status:
        """The PS's and the switch's figures for one timeline row."""

    def tick(self, loop: TrainingLoop, elapsed: float) -> None:
        """The backend's own duties once per loop step (restarts, checkpoints, worker
        control, the PS's timed policies)."""

    def stop_signal(self) -> str | None:
        """The name of a signal that asked the run to stop, if any."""

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass before the next loop step."""

    # Backends that run ``scaling="auto"`` (local processes, Ray, the virtual clock) also have
    # ``set_workers(n)``: ids 0..n-1 active from now (olaf.drl.autoscale).


class TrainingLoop:
    """The driver loop of one run (see the module doc): counts, evaluation schedule,
    controller, timeline and stop rule, over any ``Backend``."""

    def __init__(self, cfg: RunConfig, result: RunResult, backend: Backend, t0: float, *,
                 controller: Any = None, progress: Callable[[Snapshot], None] | None = None,
                 tb: Any = None) -> None:
        """``t0``: epoch seconds the run's times count from; ``controller``: a
        ``ThresholdLoop`` to feed every ``controller_interval`` (None: the backend runs
        its own); ``progress``: called with every timeline row; ``tb``: a TensorBoardLog."""
        self.cfg, self.result, self.backend, self.t0 = cfg, result, backend, t0
        self.controller, self.on_snapshot, self.tb = controller, progress, tb
        self.steps = result.env_steps
        self.recent: deque[float] = deque(maxlen=cfg.target_window)
        self.tx: dict[Any, dict[str, float]] = {}
        self.learner: dict[Any, dict[str, float]] = {}
        self.eval_pending = False
        self.next_eval = result.env_steps
        self._last_draws, self._last_p_sum = 0.0, 0.0
        self._last_due, self._last_answered = 0.0, 0.0
        self.autoscaler = (Autoscaler(cfg.autoscale, cfg.workers) if cfg.scaling == "auto"
                           else None)
        self.pool = cfg.autoscale.start_workers if self.autoscaler is not None else cfg.workers
        if self.autoscaler is not None and result.timeline:
            # A resumed run goes on with the pool and the phase its checkpoint recorded.
            self.pool = max(result.timeline[-1].active_workers, cfg.autoscale.start_workers)
            if any(s.scale_action for s in result.timeline):
                self.autoscaler.phase = STEADY
        self._scale_from: Counters | None = None
        self.sample_period = (min(SAMPLE_PERIOD, cfg.autoscale.window_s)
                              if self.autoscaler is not None else SAMPLE_PERIOD)
        """The autoscaler decides at timeline rows, so a window shorter than the usual
        sample period makes the rows as frequent as the windows."""

    # -- what the backend reports ---------------------------------------------------------
    def progress(self, source: Any, steps: int, episodes: list[Episode],
                 tx: dict[str, float] | None = None, learner: dict[str, float] | None = None) -> None:
        """``steps`` new env steps and the ``episodes`` finished by one worker process
        (``source`` names it); ``tx`` its senders' running totals, ``learner`` the mean
        loss terms of its gradients since its last report."""
        self.steps += steps
        self.result.env_steps = self.steps
        for t, worker, ret, length in episodes:
            self.result.episodes.append((t - self.t0, self.steps, worker, ret, length))
            self.recent.append(ret)
            if self.tb is not None:
                self.tb.episode(ret, self.steps)
        if tx is not None:
            self.tx[source] = tx
        if learner:
            self.learner[source] = learner

    def evaluation(self, steps: int, elapsed: float, scores: EvalScores, version: int) -> None:
        """One evaluation (greedy and stochastic) of the weights taken at ``steps`` /
        ``elapsed``; the configured policy's mean is the run's evaluation and target."""
        result = self.result
        mean, std = scores.of(self.cfg.eval_policy)
        result.evaluations.append((elapsed, steps, mean, std, version, *scores))
        self.eval_pending = False
        if self.tb is not None:
            self.tb.evaluation(scores, self.cfg.eval_policy, steps)
        target = self.cfg.target_reward
        if target is not None and mean >= target and result.time_to_target is None:
            # When the evaluated weights were taken, not when the evaluator finished.
            result.time_to_target, result.steps_to_target = elapsed, steps
            result.return_at_target = mean

    # -- the loop ----------------------------------------------------------------------------
    def request_eval(self, elapsed: float) -> None:
        """One evaluation at a time: a slow evaluator skips points, it never queues them."""
        self.backend.request_eval(self.steps, elapsed)
        self.eval_pending = True
        self.next_eval = self.steps + self.cfg.eval_every

    def run(self) -> None:
        """Step until the stop rule says so; ``result.stopped_by`` says why."""
        cfg, backend = self.cfg, self.backend
        if self.autoscaler is not None and self.pool != cfg.autoscale.start_workers:
            backend.set_workers(self.pool)  # type: ignore[attr-defined]  # a resumed pool
        next_publish = next_control = next_sample = backend.now()
        while True:
            now = backend.now()
            elapsed = now - self.t0
            backend.poll(self)
            if now >= next_publish:
                backend.publish()
                next_publish = now + cfg.broadcast_period
            if not self.eval_pending and self.steps >= self.next_eval:
                self.request_eval(elapsed)
            if self.controller is not None and now >= next_control:
                self.controller.feed(backend.recent_rewards())
                self.controller.step()
                next_control = now + cfg.controller_interval
            sampled = now >= next_sample
            if sampled:
                self.sample(elapsed)
                next_sample = now + self.sample_period
            backend.tick(self, elapsed)
            stopped_by = self.stop_rule(elapsed)
            if stopped_by is not None:
                if not sampled:
                    # The timeline ends in the state the run ended in, not up to a sample
                    # period before it (a change of workers in the last 0.5 s would be lost).
                    self.sample(elapsed)
                self.result.stopped_by = stopped_by
                return
            backend.wait(min(cfg.broadcast_period, 0.02))

    def stop_rule(self, elapsed: float) -> str | None:
        """Why the run ends now, or None: a signal, the target, the step budget, the cap."""
        cfg = self.cfg
        signal_name = self.backend.stop_signal()
        if signal_name is not None:
            return f"signal {signal_name}"
        if self.result.time_to_target is not None and cfg.stop_at_target:
            return "target"
        if self.steps >= cfg.total_steps:
            return "steps"
        if elapsed >= cfg.duration:
            return "duration"
        return None

    def autoscale(self, elapsed: float, tx: dict[str, float],
                  status: Status) -> tuple[Signals, Decision] | None:
        """``scaling="auto"``: once a window, measure its signals, decide the pool and
        apply it through the backend; the decision goes into this timeline row."""
        if self.autoscaler is None:
            return None
        now = Counters(t=elapsed, sent=int(tx["sent"]), skipped=int(tx["skipped"]),
                       outcomes=dict(status.outcomes), applied=status.blocks_applied,
                       score=_score(self.result, self.recent))
        before = self._scale_from
        if before is None or elapsed - before.t < self.cfg.autoscale.window_s:
            if before is None:
                self._scale_from = now
            return None
        cfg = self.cfg
        measured = signals(before, now, self.result.num_blocks, block_bytes(cfg.values),
                           cfg.pull_rate * block_bytes(cfg.values))
        decision = self.autoscaler.decide(self.pool, measured)
        if decision.workers != self.pool:
            self.backend.set_workers(decision.workers)  # type: ignore[attr-defined]
            self.pool = decision.workers
            self.result.worker_changes.append((elapsed, decision.workers))
        self.result.scale_decisions.append(
            (elapsed, decision.workers, decision.action, decision.phase, measured.rho,
             measured.waste, measured.applied_per_s, decision.reason))
        self._scale_from = now
        return measured, decision

    def sample(self, elapsed: float) -> Snapshot:
        """One timeline row: the backend's status, the senders' P_s since the last row,
        the learner's mean statistics, the latest evaluation."""
        status = self.backend.status()
        tx = {k: sum(t.get(k, 0.0) for t in self.tx.values()) for k in TX_KEYS}
        draws = tx["sent"] + tx["skipped"]
        p_s_mean = ((tx["p_s_sum"] - self._last_p_sum) / (draws - self._last_draws)
                    if draws > self._last_draws else math.nan)
        self._last_draws, self._last_p_sum = draws, tx["p_s_sum"]
        # Revision 3's loss ceiling: the workers' mean L now, and the share of the blocks
        # answered among those whose answers fell due since the previous row.
        ceiling = tx["ceiling_sum"] / tx["ceilings"] if tx["ceilings"] else math.nan
        due = tx["due_blocks"] - self._last_due
        answered = (tx["answered_due_blocks"] - self._last_answered) / due if due > 0 else math.nan
        self._last_due, self._last_answered = tx["due_blocks"], tx["answered_due_blocks"]
        decision = self.autoscale(elapsed, tx, status)
        threshold = status.threshold
        if threshold is None and self.controller is not None and self.controller.history:
            threshold = self.controller.history[-1].threshold
        result = self.result
        snap = Snapshot(
            elapsed=elapsed, env_steps=self.steps, episodes=len(result.episodes),
            mean_return=float(np.mean(self.recent)) if self.recent else math.nan,
            aom_ms=status.aom_ms, occupied=status.occupied, capacity=self.cfg.capacity,
            outcomes=dict(status.outcomes), model_version=status.model_version,
            blocks_applied=status.blocks_applied, threshold=threshold,
            updates_sent=int(tx["sent"]), updates_skipped=int(tx["skipped"]),
            updates_probes=int(tx["probes"]), p_s_mean=p_s_mean,
            loss_ceiling=ceiling, answered_share=answered,
            **last_evaluation(result),
            learner=mean_learner(self.learner), active_workers=status.active_workers,
            restarts=status.restarts, staleness_p50=status.staleness[0],
            staleness_p90=status.staleness[1], staleness_p99=status.staleness[2],
            update_age_p50_ms=status.update_age_ms[0], update_age_p90_ms=status.update_age_ms[1],
            update_age_p99_ms=status.update_age_ms[2],
            **({} if decision is None else {
                "scale_rho": decision[0].rho, "scale_waste": decision[0].waste,
                "scale_action": decision[1].action, "scale_reason": decision[1].reason}))
        self.learner = {}
        result.timeline.append(snap)
        if self.tb is not None:
            self.tb.snapshot(snap)
        if self.on_snapshot is not None:
            self.on_snapshot(snap)
        return snap


def _score(result: RunResult, recent: deque[float]) -> float:
    """What the autoscaler calls learning: the latest evaluation, else the training mean."""
    if result.evaluations:
        return float(result.evaluations[-1][2])
    return float(np.mean(recent)) if recent else math.nan


def last_evaluation(result: RunResult) -> dict[str, float]:
    """The Snapshot fields of the latest evaluation: the configured policy's, greedy and
    stochastic mean returns (NaN before the first)."""
    if not result.evaluations:
        return {}
    last = result.evaluations[-1]
    return {"eval_return": last[2], "eval_greedy": last[5], "eval_stochastic": last[7]}


def mean_learner(per_source: dict[Any, dict[str, float]]) -> dict[str, float]:
    """Mean over the worker processes that reported learner statistics since the last sample."""
    keys = sorted({k for stats in per_source.values() for k in stats})
    return {k: float(np.mean([s[k] for s in per_source.values() if k in s])) for k in keys}


def finish_returns(result: RunResult) -> None:
    """The first and last rolling training returns of a finished run."""
    _, _, rolling = rolling_returns(result.episodes, result.config.target_window)
    if len(rolling):
        result.initial_return = float(rolling[0])
        result.final_return = float(rolling[-1])


def real_clock() -> float:
    """The clock of every backend that runs in real time."""
    return time.time()
