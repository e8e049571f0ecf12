"""Boosting detection and worker scaling (olaf.drl.boosting)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from olaf.drl.boosting import (
    BoostConfig,
    BoostScheduler,
    Trajectories,
    TrajectoryBuffer,
    WorkerSeconds,
    active_workers,
    boosting_score,
    curvature_ratio,
    extreme_eigenvalues,
    hessian_vector_product,
    lanczos_ritz_values,
    policy_loss,
)
from tests.batches import data_batch


def _batch(n: int, obs_dim: int, n_actions: int, seed: int = 0) -> Trajectories:
    rng = np.random.default_rng(seed)
    return Trajectories(rng.normal(size=(n, obs_dim)).astype(np.float32),
                        rng.integers(0, n_actions, n), rng.normal(size=n).astype(np.float32))


def _small_policy(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)).double()


def _explicit_hessian(policy: nn.Module, batch: Trajectories) -> torch.Tensor:
    """The full Hessian of ``policy_loss`` w.r.t. the flat parameters, by torch.func."""
    names = [n for n, _ in policy.named_parameters()]
    shapes = [p.shape for p in policy.parameters()]

    def loss_of(flat: torch.Tensor) -> torch.Tensor:
        params, at = {}, 0
        for name, shape in zip(names, shapes, strict=True):
            k = math.prod(shape)
            params[name] = flat[at : at + k].view(shape)
            at += k

        class Bound(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return functional_call(policy, params, (x,))

            def parameters(self, recurse: bool = True):  # policy_loss reads the dtype from here
                return iter([flat])

        return policy_loss(Bound(), batch)

    flat = torch.cat([p.detach().reshape(-1) for p in policy.parameters()])
    return torch.autograd.functional.hessian(loss_of, flat)


# -- Hessian-vector products and Lanczos ------------------------------------------------


def test_hvp_matches_the_explicit_hessian() -> None:
    policy, batch = _small_policy(), _batch(64, 4, 3)
    h = _explicit_hessian(policy, batch)
    hvp = hessian_vector_product(policy_loss(policy, batch), list(policy.parameters()))
    v = torch.randn(h.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(hvp(v), h @ v, atol=1e-12)
    assert torch.allclose(h, h.T, atol=1e-12)
    with pytest.raises(ValueError):
        hvp(torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lanczos_extremes_match_eigvalsh_of_the_explicit_hessian(seed: int) -> None:
    policy, batch = _small_policy(seed), _batch(128, 4, 3, seed)
    h = _explicit_hessian(policy, batch)
    exact = torch.linalg.eigvalsh(h)
    dim = h.shape[0]
    assert dim == 67
    hvp = hessian_vector_product(policy_loss(policy, batch), list(policy.parameters()))
    lmax, lmin = extreme_eigenvalues(hvp, dim, iterations=30,
                                     generator=torch.Generator().manual_seed(seed))
    # 30 Krylov steps on a 67-dimensional space: the extremes converge first.
    assert lmax == pytest.approx(float(exact[-1]), rel=1e-4)
    assert lmin == pytest.approx(float(exact[0]), rel=1e-4)
    # The loss of a softmax policy with centred advantages is indefinite.
    assert lmin < 0 < lmax


def test_lanczos_on_a_known_spectrum_and_interlacing() -> None:
    g = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(50, 50, generator=g, dtype=torch.float64))
    spectrum = torch.linspace(-3.0, 5.0, 50, dtype=torch.float64)
    a = q @ torch.diag(spectrum) @ q.T
    full = lanczos_ritz_values(lambda v: a @ v, 50, 50, generator=g)
    assert torch.allclose(full, spectrum, atol=1e-8)
    few = lanczos_ritz_values(lambda v: a @ v, 50, 8, generator=g)
    # Ritz values always lie inside the spectrum.
    assert few[0] >= -3.0 - 1e-9 and few[-1] <= 5.0 + 1e-9
    # A start vector in an invariant subspace ends the iteration early and exactly.
    start = q[:, 0] + q[:, 1]
    two = lanczos_ritz_values(lambda v: a @ v, 50, 10, start=start)
    assert torch.allclose(two, spectrum[:2], atol=1e-9)
    with pytest.raises(ValueError):
        lanczos_ritz_values(lambda v: a @ v, 50, 5, start=torch.zeros(50))


def test_ratio_from_eigenvalues() -> None:
    assert curvature_ratio(2.0, -1.0) == 2.0
    assert curvature_ratio(0.5, -2.0) == 0.25
    assert curvature_ratio(-1.0, -2.0) == -0.5
    assert curvature_ratio(3.0, 0.1) == 1e3  # no negative curvature: nothing to boost
    assert curvature_ratio(1e9, -1e-9, cap=50.0) == 50.0
    with pytest.raises(ValueError):
        curvature_ratio(-1.0, 1.0)
    with pytest.raises(ValueError):
        curvature_ratio(math.inf, -1.0)


# -- score, workers, cost on a synthetic R sequence --------------------------------------

RATIOS = [2.0, 1.0, 3.0, 0.5, 4.0, 2.0, 1.5, 5.0]
# Worked by hand with n = 6, d = 0.96, I_max = 16, I_min = 2:
#   k=0 [2]             no spread -> 1                        -> 16
#   k=1 [2,1]           (2-1)/1 * .96      = 0.96             -> 15
#   k=2 [2,1,3]         (3-3)/2            = 0                -> 2 (I_min)
#   k=3 [2,1,3,.5]      (3-.5)/2.5 * .96^3 = 0.884736         -> 14
#   k=4 [..,4]          (4-4)              = 0                -> 2
#   k=5 [..,4,2]        (4-2)/3.5 * .96^5  = 0.4659272558     -> 7
#   k=6 [1,3,.5,4,2,1.5](4-1.5)/3.5 * .96^6= 0.5591127069     -> 9
#   k=7 [3,.5,4,2,1.5,5](5-5)              = 0                -> 2
SCORES = [1.0, 0.96, 0.0, 0.884736, 0.0, 0.4659272558, 0.5591127069, 0.0]
WORKERS = [16, 15, 2, 14, 2, 7, 9, 2]


def test_score_and_workers_on_a_synthetic_ratio_sequence() -> None:
    window: list[float] = []
    for k, r in enumerate(RATIOS):
        window = (window + [r])[-6:]
        s = boosting_score(window, k)
        assert s == pytest.approx(SCORES[k], abs=1e-9)
        assert active_workers(s, 2, 16) == WORKERS[k]


def test_scheduler_follows_the_sequence_and_accounts_worker_seconds() -> None:
    clock_now = [0.0]
    sched = BoostScheduler(16, BoostConfig(min_workers=2), clock=lambda: clock_now[0])
    for k, r in enumerate(RATIOS):
        clock_now[0] = k + 1.0
        row = sched.record(lambda_max=r, lambda_min=-1.0, detector_s=0.01)
        assert (row.k, row.workers, row.round_s) == (k, WORKERS[k], 1.0)
        assert row.score == pytest.approx(SCORES[k], abs=1e-9)
    # 16 from t=0 until the first round at t=1, then each round's count for one second.
    expected = 16 + sum(WORKERS[:-1])
    assert sched.worker_seconds(8.0) == pytest.approx(expected)
    assert sched.worker_seconds(9.0) == pytest.approx(expected + 2)
    stats = sched.stats(9.0)
    assert stats["max_worker_seconds"] == 16 * 9
    assert stats["detector_overhead_share"] == pytest.approx(0.01)
    assert [w for _, w in stats["workers_over_time"]] == [16, 15, 2, 14, 2, 7, 9, 2]


def test_k_counts_training_iterations_not_detector_rounds() -> None:
    """However often the detector runs, d**k follows the PS's training iterations."""
    cfg = BoostConfig(min_workers=1, round_iterations=10, restart_on_boost=False)
    fast, slow = BoostScheduler(8, cfg, start=0.0), BoostScheduler(8, cfg, start=0.0)
    for i in range(60):  # a probe every iteration ...
        row = fast.record(1.0, -1.0, now=float(i), iteration=i)
    assert row.k == 5 and row.score == pytest.approx(0.96**5)
    for i in (0, 30, 59):  # ... or three probes over the same training: the same k
        row = slow.record(1.0, -1.0, now=float(i), iteration=i)
    assert row.k == 5
    # Rounds without iterations (a stalled PS) do not decay the score.
    frozen = BoostScheduler(8, cfg, start=0.0)
    for i in range(100):
        row = frozen.record(1.0, -1.0, now=float(i), iteration=3)
    assert row.k == 0 and row.workers == 8


def test_a_detected_boost_restarts_the_decay_so_workers_scale_up_again() -> None:
    cfg = BoostConfig(window=3, min_workers=1, decay=0.5, round_iterations=1)
    sched = BoostScheduler(8, cfg, start=0.0)
    # Rising ratios: no boost, the count decays with the iterations down to I_min.
    rows = [sched.record(r, -1.0, now=float(i), iteration=10 * i)
            for i, r in enumerate([1.0, 2.0, 3.0, 4.0])]
    assert rows[-1].workers == 1 and sched.restarts == 0
    # The newest ratio is the window's lowest: a boost, k restarts, all workers again.
    row = sched.record(0.5, -1.0, now=5.0, iteration=50)
    assert (row.k, row.workers, sched.restarts) == (0, 8, 1)
    row = sched.record(0.6, -1.0, now=6.0, iteration=52)
    assert row.k == 2 and row.workers < 8
    assert sched.stats(7.0)["restarts"] == 1


def test_decay_scaling_follows_d_k_alone() -> None:
    from olaf.drl.a2c import A2CConfig
    from olaf.drl.config import RunConfig
    from olaf.drl.policies import RunPolicies
    from olaf.drl.server import ParameterServer

    v = 8
    cfg = RunConfig(workers=8, values=v, scaling="decay",
                    boost=BoostConfig(min_workers=2, decay=0.5, round_iterations=2))
    ps = ParameterServer(np.zeros(2 * v, np.float32), A2CConfig(), v)
    flags = [1] * 8
    policies = RunPolicies(cfg, ps, flags)
    policies.start(0.0)
    seen = []
    for it in range(8):  # one full-model update (2 blocks) per step
        policies.apply(data_batch([0, 1], np.zeros((2, v), np.float32), [1, 1], [0, 0]), 0)
        policies.tick(now=float(it + 1))
        seen.append(sum(flags))
    # k = iterations // 2: 8 * 0.5**k, floored at I_min = 2.
    assert ps.iterations == 8
    assert seen == [8, 4, 4, 2, 2, 2, 2, 2]
    policies.finish(9.0)
    assert policies.stats([])["final_active_workers"] == 2
    with pytest.raises(ValueError):
        RunPolicies(cfg, ps, None)


def test_worker_seconds_meter() -> None:
    m = WorkerSeconds(4, 10.0)
    m.set(4, 11.0)
    m.set(1, 13.0)
    assert m.total(15.0) == pytest.approx(4 * 3 + 1 * 2)
    assert m.timeline == [(10.0, 4), (13.0, 1)]
    with pytest.raises(ValueError):
        m.set(2, 12.0)
    with pytest.raises(ValueError):
        m.set(-1, 16.0)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        active_workers(0.5, 3, 2)
    with pytest.raises(ValueError):
        boosting_score([], 0)
    with pytest.raises(ValueError):
        BoostConfig(window=0)
    with pytest.raises(ValueError):
        BoostScheduler(1, BoostConfig(min_workers=2))


# -- trajectories and a real detector round -----------------------------------------------


def test_trajectory_buffer_keeps_the_most_recent_transitions() -> None:
    buf = TrajectoryBuffer(capacity=10)
    for i in range(5):
        buf.add(Trajectories(np.full((4, 2), i, np.float32), np.zeros(4, np.int64),
                             np.zeros(4, np.float32)))
    assert len(buf) == 12  # whole parts: the oldest is dropped once the rest still cover 10
    sample = buf.sample(100, np.random.default_rng(0))
    assert sorted(set(sample.obs[:, 0].tolist())) == [2.0, 3.0, 4.0]
    assert len(buf.sample(5, np.random.default_rng(0))) == 5
    with pytest.raises(ValueError):
        TrajectoryBuffer().sample(1, np.random.default_rng(0))
    with pytest.raises(ValueError):
        Trajectories(np.zeros((3, 2), np.float32), np.zeros(2, np.int64), np.zeros(3, np.float32))


def test_scheduler_round_on_an_actor_critic_policy() -> None:
    from olaf.drl.model import build_model

    model = build_model("CartPole-v1", 32, 0)
    buf = TrajectoryBuffer()
    for s in range(4):
        buf.add(_batch(64, 4, 2, s))
    sched = BoostScheduler(8, BoostConfig(lanczos_iterations=10, sample_transitions=128), seed=1)
    rows = [sched.step(model.policy, buf) for _ in range(3)]
    for row in rows:
        assert row.lambda_min < 0 < row.lambda_max
        assert row.detector_s > 0
        assert 1 <= row.workers <= 8
    assert rows[0].workers == 8  # the first window has no spread
    # The detector must not leave gradients behind on the live model.
    assert all(p.grad is None for p in model.parameters())


def test_policy_modules_import_without_torch() -> None:
    # RunConfig holds their configs, and `olaf --help` must not pay for importing torch.
    import subprocess
    import sys

    code = ("import sys, olaf.drl.boosting, olaf.drl.staleness; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_curvature_probe_runs_when_due_on_its_recent_trajectories() -> None:
    from olaf.drl.boosting import CurvatureProbe
    from olaf.drl.model import build_model

    probe = CurvatureProbe(BoostConfig(lanczos_iterations=8, sample_transitions=64), 0.5,
                           seed=0, now=10.0)
    assert not probe.due(11.0)  # nothing to estimate on yet
    b = _batch(32, 4, 2)
    probe.add(b.obs, b.actions, b.advantages)
    assert not probe.due(10.4) and probe.due(10.5)
    lmax, lmin, wall_s, cpu_s = probe.run(build_model("CartPole-v1", 32, 0).policy, 10.5)
    assert lmin < 0 < lmax and wall_s > 0 and cpu_s >= 0
    assert not probe.due(10.9) and probe.due(11.0)
    with pytest.raises(ValueError):
        CurvatureProbe(BoostConfig(), 0.0, seed=0, now=0.0)


# -- the runner's side: RunPolicies and a real run -----------------------------------------


def test_run_policies_apply_and_scale_without_processes() -> None:
    from olaf.drl.a2c import A2CConfig
    from olaf.drl.config import RunConfig
    from olaf.drl.policies import RunPolicies
    from olaf.drl.server import ParameterServer

    v = 8
    cfg = RunConfig(workers=4, values=v, aggregation="staleness-aware", scaling="boost",
                    boost=BoostConfig(min_workers=1))
    ps = ParameterServer(np.zeros(2 * v, np.float32), A2CConfig(), v)
    flags = [1, 1, 1, 1]
    policies = RunPolicies(cfg, ps, flags)
    policies.start(100.0)
    g = np.full((2, v), 0.1, np.float32)
    policies.apply(data_batch([0, 1], g, [1, 2], [0, 0]), 0)  # round 0: both applied at once
    assert ps.blocks_applied == 2
    assert policies.record_curvature(1.0, -1.0, 0.01, 101.0) == 4  # first round: no spread
    assert policies.record_curvature(3.0, -1.0, 0.01, 102.0) == 1  # the window's highest R
    assert flags == [1, 0, 0, 0]
    policies.finish(104.0)
    s = policies.stats([0, 0, 1, 3])
    assert s["aggregation"] == "staleness-aware" and s["scaling"] == "boost"
    assert (s["staleness_p50"], s["staleness_max"]) == (0, 3)
    assert s["worker_seconds"] == pytest.approx(4 * 2 + 1 * 2)
    assert s["workers_over_time"] == [(0.0, 4), (2.0, 1)]
    assert s["boost_rounds"] == 2 and s["detector_overhead_share"] == pytest.approx(0.01)
    assert s["releases"]["warmup"] == 2

    plain = RunPolicies(RunConfig(workers=2, values=v), ParameterServer(
        np.zeros(2 * v, np.float32), A2CConfig(), v))
    plain.start(0.0)
    plain.apply(data_batch([1, 1, 0], np.ones((3, v), np.float32), [1, 1, 1], [0, 0, 0]), 5)
    assert plain.ps.blocks_applied == 3
    plain.finish(3.0)
    assert plain.stats([])["worker_seconds"] == 6.0
    with pytest.raises(RuntimeError):
        plain.record_curvature(1.0, -1.0, 0.0, 1.0)
    with pytest.raises(ValueError):
        RunPolicies(cfg, ps, None)


@pytest.mark.timeout(180)
def test_boost_scaling_really_changes_the_active_workers_in_a_short_run() -> None:
    from olaf.drl.config import RunConfig
    from olaf.drl.local import run_experiment

    # d = 0.5 per PS training iteration drives S_k below 1/8 after 3 of them, so I_k
    # settles at I_min = 1 early (no restarts, so it stays there).
    from tests.learners import GRADIENT_IMPACT

    # Many small gradients, so that 9 s hold enough PS training iterations for the rounds.
    cfg = RunConfig(env_id="CartPole-v1", workers=4, processes=2, duration=9.0, seed=3,
                    impact=GRADIENT_IMPACT,
                    aggregation="staleness-aware", scaling="boost", boost_period=0.4,
                    boost=BoostConfig(decay=0.5, min_workers=1, lanczos_iterations=6,
                                      sample_transitions=64, round_iterations=1,
                                      restart_on_boost=False))
    result = run_experiment(cfg)
    s = result.summary()
    counts = [w for _, w in s["workers_over_time"]]
    assert s["boost_rounds"] >= 4, s["workers_over_time"]
    assert counts[0] == 4 and counts[-1] == 1
    assert s["worker_seconds"] < 4 * cfg.duration
    settled = s["workers_over_time"][-1][0]
    # Inactive workers really stop: once only worker 0 is left (plus one rollout in
    # flight), every episode that finishes is worker 0's.
    late = [e for e in result.episodes if e[0] > settled + 1.0]
    assert late, (settled, len(result.episodes))
    assert {e[2] for e in late} == {0}
    # The staleness-aware PS ran on the same DATA.
    assert s["releases"]["warmup"] > 0 and s["ps_rounds"] >= 1
    assert s["staleness_p50"] is not None and s["detector_mean_ms"] > 0


def test_ablation_worker_seconds_at_and_rows() -> None:
    from olaf.commands.ablation import markdown_table, row_of, worker_seconds_at

    timeline = [(0.0, 8), (2.0, 3), (5.0, 1)]
    assert worker_seconds_at(timeline, 0.0) == 0.0
    assert worker_seconds_at(timeline, 1.0) == 8.0
    assert worker_seconds_at(timeline, 4.0) == 16 + 6
    assert worker_seconds_at(timeline, 7.0) == 16 + 9 + 2
    runs = [{"time_to_target_s": 3.0, "steps_to_target": 12_000, "env_steps": 40_000,
             "duration_s": 10.0, "final_return": 100.0,
             "worker_seconds_to_target": 19.0, "worker_seconds": 30.0, "worker_cpu_s": 5.0,
             "mean_active_workers": 3.0, "staleness_p90": 2, "held_share": None,
             "detector_overhead_share": 0.02, "detector_mean_cpu_ms": 12.0},
            {"time_to_target_s": None, "steps_to_target": None, "env_steps": 40_000,
             "duration_s": 10.0, "final_return": 50.0,
             "worker_seconds_to_target": 40.0, "worker_seconds": 40.0, "worker_cpu_s": 7.0,
             "mean_active_workers": 4.0, "staleness_p90": 4, "held_share": None,
             "detector_overhead_share": 0.04, "detector_mean_cpu_ms": 14.0}]
    row = row_of("olaf+boost", runs)
    assert row["reached"] == "1/2"
    assert row["time_to_target_s"] == "6.5 ± 4.9"  # a miss counts its full duration
    assert row["steps_to_target"] == "26,000 ± 19,799"  # and its whole step budget
    assert row["final_return"] == "75.0 ± 35.4"
    assert row["detector_overhead_pct"] == "3.0 ± 1.4"
    assert row["held_share"] == "-"
    table = markdown_table([row])
    assert table.count("\n") == 3 and "| olaf+boost | 2 | 1/2 |" in table
