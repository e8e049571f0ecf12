"""The one training loop (olaf.drl.core) over a scripted backend: the stop rule, the
evaluation schedule, the target, the timeline, and the PS's use of DATA (``PsApply``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from olaf.drl.a2c import A2CConfig
from olaf.drl.config import RunConfig
from olaf.drl.controller import RecentRewards
from olaf.drl.core import PsApply, Status, TrainingLoop
from olaf.drl.policies import RunPolicies
from olaf.drl.results import EvalScores, RunResult
from olaf.drl.server import ParameterServer
from tests.batches import data_batch


class ScriptedBackend:
    """A backend whose workers make ``steps_per_poll`` env steps per loop step and finish
    one episode of return ``ret(step)`` each time; its clock advances 10 ms per step and
    its evaluator answers at once with ``evaluate(steps)``: EvalScores, or one mean for
    both policies."""

    def __init__(self, evaluate, steps_per_poll: int = 100, ret=lambda steps: 10.0) -> None:
        self.clock = 1000.0
        self.evaluate, self.steps_per_poll, self.ret = evaluate, steps_per_poll, ret
        self.asked: list[int] = []
        self.published = 0
        self.ticks = 0
        self.pending: tuple[int, float] | None = None
        self.signal: str | None = None

    def now(self) -> float:
        return self.clock

    def poll(self, loop: TrainingLoop) -> None:
        if self.pending is not None:
            steps, elapsed = self.pending
            self.pending = None
            scores = self.evaluate(steps)
            if not isinstance(scores, EvalScores):
                scores = EvalScores(scores, 0.0, scores, 0.0)
            loop.evaluation(steps, elapsed, scores, 7)
        loop.progress("p0", self.steps_per_poll, [(self.clock, 0, self.ret(loop.steps), 20)],
                      {"sent": 2.0, "skipped": 2.0 * loop.steps / 100, "probes": 0.0,
                       "p_s_sum": 1.0 * loop.steps / 100})

    def publish(self) -> None:
        self.published += 1

    def request_eval(self, steps: int, elapsed: float) -> None:
        self.asked.append(steps)
        self.pending = (steps, elapsed)

    def recent_rewards(self) -> list[float]:
        return []

    def status(self) -> Status:
        return Status(aom_ms=5.0, occupied=3, model_version=2, blocks_applied=9)

    def tick(self, loop: TrainingLoop, elapsed: float) -> None:
        self.ticks += 1

    def stop_signal(self) -> str | None:
        return self.signal

    def wait(self, seconds: float) -> None:
        self.clock += 0.01


def loop_of(cfg: RunConfig, backend: ScriptedBackend) -> tuple[TrainingLoop, RunResult]:
    result = RunResult(cfg)
    return TrainingLoop(cfg, result, backend, backend.now()), result


def test_the_loop_stops_at_the_step_budget_and_evaluates_on_schedule() -> None:
    cfg = RunConfig(total_steps=2_000, eval_every=500, target_reward=None, duration=1e9)
    backend = ScriptedBackend(evaluate=lambda steps: 1.0)
    loop, result = loop_of(cfg, backend)
    loop.run()
    assert result.stopped_by == "steps"
    assert loop.steps == result.env_steps == 2_000
    # The first evaluation at once, then one per eval_every (never two in flight).
    assert backend.asked[0] == 100
    assert all(b - a >= 500 for a, b in itertools.pairwise(backend.asked))
    assert len(result.episodes) == 20 and result.episodes[-1][1] == 2_000
    assert result.timeline and result.timeline[0].aom_ms == 5.0
    assert backend.ticks >= 20 and backend.published >= 1


def test_the_target_is_dated_to_when_the_evaluated_weights_were_taken() -> None:
    cfg = RunConfig(total_steps=100_000, eval_every=300, target_reward=50.0, duration=1e9)
    backend = ScriptedBackend(evaluate=lambda steps: 60.0 if steps >= 1_000 else 0.0)
    loop, result = loop_of(cfg, backend)
    loop.run()
    assert result.stopped_by == "target"
    first = next(s for s in backend.asked if s >= 1_000)
    assert result.steps_to_target == first and result.return_at_target == 60.0
    # Asked at the loop step of ``first`` steps, i.e. (first/100 - 1) clock ticks in.
    assert result.time_to_target == pytest.approx((first / 100 - 1) * 0.01)
    # stop_at_target off: the run goes on to its budget and keeps the first target.
    cfg2 = RunConfig(total_steps=3_000, eval_every=300, target_reward=50.0, duration=1e9,
                     stop_at_target=False)
    backend2 = ScriptedBackend(evaluate=lambda steps: 60.0 if steps >= 1_000 else 0.0)
    loop2, result2 = loop_of(cfg2, backend2)
    loop2.run()
    assert result2.stopped_by == "steps" and result2.steps_to_target == result.steps_to_target


@pytest.mark.parametrize("policy", ["greedy", "stochastic"])
def test_the_configured_policy_is_the_evaluation_and_meets_the_target(policy: str) -> None:
    # The greedy policy reaches 60 from 1,000 steps on, the sampled one from 2,000.
    def evaluate(steps: int) -> EvalScores:
        return EvalScores(60.0 if steps >= 1_000 else 0.0, 1.0,
                          60.0 if steps >= 2_000 else 5.0, 2.0)

    cfg = RunConfig(total_steps=100_000, eval_every=300, target_reward=50.0, duration=1e9,
                    eval_policy=policy)
    backend = ScriptedBackend(evaluate=evaluate)
    loop, result = loop_of(cfg, backend)
    loop.run()
    reached = 1_000 if policy == "greedy" else 2_000
    assert result.stopped_by == "target"
    assert result.steps_to_target == next(s for s in backend.asked if s >= reached)
    # Rows: the configured policy's mean and std first, then both policies'.
    last = result.evaluations[-1]
    assert last[2:4] == ((60.0, 1.0) if policy == "greedy" else (60.0, 2.0))
    assert last[5:] == tuple(evaluate(last[1]))
    below = result.evaluations[-2]
    assert below[2] == (0.0 if policy == "greedy" else 5.0) and below[7] == 5.0
    row = loop.sample(1.0)
    stochastic = 5.0 if policy == "greedy" else 60.0  # greedy stopped it before 2,000 steps
    assert (row.eval_return, row.eval_greedy, row.eval_stochastic) == (60.0, 60.0, stochastic)
    summary = result.summary()
    assert summary["eval_policy"] == policy and summary["eval_return_last"] == 60.0
    assert summary["greedy_eval_return_last"] == 60.0
    assert summary["stochastic_eval_return_last"] == stochastic
    with pytest.raises(ValueError, match="eval_policy must be one of"):
        RunConfig(eval_policy="sampled")


def test_a_signal_and_the_duration_cap_end_the_loop() -> None:
    backend = ScriptedBackend(evaluate=lambda steps: 0.0)
    backend.signal = "SIGTERM"
    loop, result = loop_of(RunConfig(total_steps=10**9, duration=1e9), backend)
    loop.run()
    assert result.stopped_by == "signal SIGTERM" and loop.steps == 100
    backend = ScriptedBackend(evaluate=lambda steps: 0.0)
    loop, result = loop_of(RunConfig(total_steps=10**9, duration=0.5), backend)
    loop.run()
    assert result.stopped_by == "duration" and backend.clock - 1000.0 == pytest.approx(0.5, abs=0.011)
    # No cap (olaf run --total-steps N): the step budget ends it.
    backend = ScriptedBackend(evaluate=lambda steps: 0.0)
    loop, result = loop_of(RunConfig(total_steps=1_000, duration=math.inf), backend)
    loop.run()
    assert result.stopped_by == "steps" and loop.steps == 1_000


def test_the_timeline_ends_in_the_state_the_run_stopped_in() -> None:
    """The last row is sampled when the loop stops, however soon after the previous one:
    a run that ends within a sample period of a change (0.2 s of scripted time here)
    still shows it in timeline.csv (test_elastic's removed workers did not, once)."""
    backend = ScriptedBackend(evaluate=lambda steps: 0.0)
    loop, result = loop_of(RunConfig(total_steps=2_000, duration=1e9), backend)
    loop.run()
    assert result.stopped_by == "steps"
    assert [row.env_steps for row in result.timeline] == [100, 2_000]
    backend = ScriptedBackend(evaluate=lambda steps: 0.0)
    loop, result = loop_of(RunConfig(total_steps=10**9, duration=1e9), backend)
    backend.signal = "SIGTERM"
    loop.run()
    assert [row.env_steps for row in result.timeline] == [100]  # stopped in its first step
    backend = ScriptedBackend(evaluate=lambda steps: 0.0)
    loop, result = loop_of(RunConfig(total_steps=10**9, duration=0.75), backend)
    loop.run()
    assert result.stopped_by == "duration"
    rows = [row.env_steps for row in result.timeline]
    assert len(rows) == 3 and rows[0] == 100 and rows[-1] == loop.steps > rows[1]  # one at 0.5 s
    assert result.timeline[-1].elapsed == pytest.approx(0.75, abs=0.011)


def test_timeline_p_s_is_the_mean_of_the_draws_since_the_previous_row() -> None:
    backend = ScriptedBackend(evaluate=lambda steps: 0.0)
    loop, result = loop_of(RunConfig(total_steps=10**9, duration=1e9), backend)
    backend.poll(loop)
    first = loop.sample(0.0)
    backend.poll(loop)
    second = loop.sample(0.01)
    # Draws 2 + 2*s/100, P_s sum s/100 with s the steps before the poll: 0 -> 100 -> 200.
    assert first.p_s_mean == pytest.approx(0.0 / 2.0)
    assert second.p_s_mean == pytest.approx((1.0 - 0.0) / (4.0 - 2.0))
    assert first.mean_return == 10.0 and first.updates_sent == 2
    assert math.isnan(first.eval_return)


def test_ps_apply_logs_staleness_in_versions_and_skips_foreign_blocks() -> None:
    v = 4
    ps = ParameterServer(np.zeros(2 * v, np.float32), A2CConfig(), v)
    policies = RunPolicies(RunConfig(values=v), ps)
    rewards = RecentRewards(8)
    apply = PsApply(ps, policies, rewards, t0=1.0)
    for _ in range(3):  # three publications: the PS is at version 3
        ps.apply_block(0, np.zeros(v, np.float32))
        ps.snapshot()
    assert ps.model_version == 3
    apply(data_batch([0, 1, 7], np.ones((3, v), np.float32), [1, 2, 1], [3, 1, 0],
                     rewards=[5.0, 6.0, 7.0], received_at_us=3_500_000))
    assert apply.data == [(2.5, 0, 1, 0, 5.0), (2.5, 1, 2, 2, 6.0), (2.5, 7, 1, 3, 7.0)]
    assert ps.blocks_applied == 3 + 2  # block 7 is not this model's
    assert policies.foreign_blocks == 1 and rewards.snapshot() == [5.0, 6.0, 7.0]


def test_recent_delivery_gives_quantiles_of_what_came_since_the_last_look() -> None:
    from olaf.drl.core import RecentDelivery

    data = [(0.0, 0, 1, s, 0.0) for s in (5, 5)]  # a resumed run's rows: not counted again
    ages = np.zeros(0)
    delivery = RecentDelivery(data, lambda: ages)
    data.extend((0.0, b, 1, s, 0.0) for b, s in enumerate(range(1, 101)))
    ages = np.arange(1.0, 11.0)
    staleness, age = delivery.take()
    assert staleness == pytest.approx((50.5, 90.1, 99.01))
    assert age == pytest.approx((5.5, 9.1, 9.91))
    data.append((0.0, 0, 1, 7, 0.0))
    staleness, age = delivery.take()
    assert staleness == (7.0, 7.0, 7.0) and all(math.isnan(a) for a in age)


def test_a_timeline_row_carries_the_backend_s_staleness_and_update_age() -> None:
    class Aging(ScriptedBackend):
        def status(self) -> Status:
            return Status(staleness=(1.0, 2.0, 3.0), update_age_ms=(10.0, 20.0, 30.0))

    backend = Aging(evaluate=lambda steps: 0.0)
    loop, _ = loop_of(RunConfig(total_steps=10**9, duration=1e9), backend)
    row = loop.sample(0.0)
    assert (row.staleness_p50, row.staleness_p90, row.staleness_p99) == (1.0, 2.0, 3.0)
    assert (row.update_age_p50_ms, row.update_age_p90_ms, row.update_age_p99_ms) == (10.0, 20.0, 30.0)


def _distinct_scores(steps: int) -> EvalScores:
    """Figures that tell the policies and the evaluations apart: greedy steps/10, stochastic
    half a point more (exact in TensorBoard's float32)."""
    return EvalScores(steps / 10, 1.0, steps / 10 + 0.5, 2.0)


@pytest.mark.parametrize(("policy", "samples"),
                         [("greedy", True), ("stochastic", True), ("greedy", False)])
def test_timeline_csv_has_both_policies_latest_evaluation_beside_the_configured_one(
        tmp_path: Path, policy: str, samples: bool) -> None:
    import csv

    from olaf.drl.report import write_metrics

    def evaluate(steps: int) -> EvalScores:
        # A model that cannot sample: its stochastic scores are NaN (Evaluator.evaluate).
        return _distinct_scores(steps) if samples else EvalScores(steps / 10, 1.0)

    cfg = RunConfig(total_steps=20_000, eval_every=2_000, target_reward=None, duration=1e9,
                    eval_policy=policy)
    loop, result = loop_of(cfg, ScriptedBackend(evaluate=evaluate))
    loop.run()
    loop.sample(9.0)  # a row after the last evaluation
    write_metrics(result, tmp_path)
    with (tmp_path / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(result.timeline) >= 4
    # The first row is sampled before the first evaluation answered: nothing to show yet.
    assert (rows[0]["eval_return"], rows[0]["greedy_eval_return"],
            rows[0]["stochastic_eval_return"]) == ("", "", "")
    by_greedy = {e[5]: e for e in result.evaluations}
    shown = set()
    for row in rows[1:]:
        # Each row: the greedy and stochastic means of one evaluation, and eval_return the
        # configured policy's of that same evaluation.
        e = by_greedy[float(row["greedy_eval_return"])]
        shown.add(e[1])
        if samples:
            assert float(row["stochastic_eval_return"]) == e[7] == e[5] + 0.5
        else:
            assert row["stochastic_eval_return"] == ""
        assert float(row["eval_return"]) == e[2] == (e[5] if policy == "greedy" else e[7])
    assert float(rows[-1]["greedy_eval_return"]) == result.evaluations[-1][5]
    assert len(shown) >= 2  # the columns follow the evaluations, not just the first one


def test_tensorboard_logs_both_policies_evaluations_and_the_configured_one_as_before(
        tmp_path: Path) -> None:
    from olaf.drl.tensorboard import TensorBoardLog
    from tests.test_run import _tensorboard_scalars

    def run(policy: str, evaluate: Callable[[int], EvalScores], logdir: Path) -> tuple[
            RunResult, dict[str, list[tuple[int, float]]]]:
        cfg = RunConfig(total_steps=2_000, eval_every=500, target_reward=None, duration=1e9,
                        eval_policy=policy)
        backend, tb = ScriptedBackend(evaluate=evaluate), TensorBoardLog(logdir)
        result = RunResult(cfg)
        TrainingLoop(cfg, result, backend, backend.now(), tb=tb).run()
        tb.close()
        (events,) = logdir.glob("events.out.tfevents.*")
        return result, _tensorboard_scalars(events)

    result, scalars = run("stochastic", _distinct_scores, tmp_path / "both")
    evals = result.evaluations
    assert len(evals) >= 3
    steps = [e[1] for e in evals]
    for tag, column in [("eval/greedy_return_mean", 5), ("eval/greedy_return_std", 6),
                        ("eval/stochastic_return_mean", 7), ("eval/stochastic_return_std", 8),
                        # The tags of older runs: the configured policy's (here stochastic).
                        ("eval/return_mean", 7), ("eval/return_std", 8)]:
        assert [s for s, _ in scalars[tag]] == steps, tag
        assert [v for _, v in scalars[tag]] == [e[column] for e in evals], tag
    # A model that cannot sample: no stochastic curve (NaN is not logged), greedy as before.
    result, scalars = run("greedy", lambda steps: EvalScores(steps / 10, 1.0), tmp_path / "greedy")
    assert [v for _, v in scalars["eval/return_mean"]] == [e[5] for e in result.evaluations]
    assert scalars["eval/greedy_return_mean"] == scalars["eval/return_mean"]
    assert not any(tag.startswith("eval/stochastic") for tag in scalars)
