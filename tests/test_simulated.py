"""The virtual clock (olaf.drl.simulated): the one training loop in simulated time over
the reference queue, the same result bit for bit for a seed, and 128 workers in one
process."""

from __future__ import annotations

import json

import pytest

from olaf.drl.bottleneck import block_bytes, buffer_for
from olaf.drl.config import RunConfig
from olaf.drl.simulated import run_simulated
from tests.learners import GRADIENT_IMPACT


def short(**kw) -> RunConfig:
    base = dict(workers=4, clock="virtual", total_steps=3_000, eval_every=1_000,
                eval_episodes=2, target_reward=None, duration=1e6, shuffle_blocks=True)
    return RunConfig(**{**base, **kw})


def fingerprint(result) -> str:
    summary = {k: v for k, v in result.summary().items()}
    rows = [vars(s) for s in result.timeline]
    return json.dumps([summary, rows, result.evaluations, result.episodes, result.data],
                      default=str, sort_keys=True)


def test_the_same_seed_gives_the_same_run_bit_for_bit() -> None:
    cfg = short(egress_rate=60_000.0, buffer_bytes=buffer_for(2, 40, 64), clusters=2)
    a, b = run_simulated(cfg), run_simulated(cfg)
    assert fingerprint(a) == fingerprint(b)
    assert a.summary()["clock"] == "simulated"
    assert a.summary()["weights_downlink"].startswith("modelled delay")
    assert a.evaluations and a.data and a.timeline
    other = run_simulated(short(egress_rate=60_000.0, buffer_bytes=buffer_for(2, 40, 64),
                                clusters=2, seed=1))
    assert fingerprint(other) != fingerprint(a)


def test_every_block_goes_through_the_reference_queue_and_time_is_simulated() -> None:
    cfg = short(mode="fifo", egress_rate=30_000.0, buffer_bytes=20 * block_bytes(64))
    result = run_simulated(cfg)
    s = result.summary()
    outcomes = s["outcomes"]
    # Every UPDATE block a worker sent was answered by the queue, FIFO drops when full.
    assert sum(outcomes.values()) == s["worker_blocks_sent"]
    assert outcomes["DROPPED_FULL"] > 0 and outcomes["MERGED"] == 0
    # DATA leave at C / 292 blocks/s of simulated time, whatever the host's speed.
    assert s["data_blocks"] <= result.wall_time * 30_000 / 292 + 1
    assert s["data_blocks"] >= 0.9 * result.wall_time * 30_000 / 292 - 20
    assert s["capacity"] == 20 and s["rho"] > 1


def test_olaf_merges_within_clusters_only() -> None:
    result = run_simulated(short(workers=4, clusters=4, egress_rate=60_000.0))
    # Four workers in four clusters: no two UPDATEs of a cluster come from two workers, so
    # nothing merges (a worker's own newer update replaces its older one).
    assert result.summary()["outcomes"]["MERGED"] == 0
    assert result.summary()["mean_agg_count"] == pytest.approx(1.0)


def test_128_workers_take_turns_in_one_process() -> None:
    result = run_simulated(short(workers=128, total_steps=128 * 128, eval_every=100_000,
                                 egress_rate=1e6, impact=GRADIENT_IMPACT))
    s = result.summary()
    assert s["env_steps"] >= 128 * 128
    assert len(s["per_worker"]) == 128
    assert all(w["sent"] + w["skipped"] >= 1 for w in s["per_worker"])


def test_the_timeline_reports_the_staleness_and_update_age_of_what_the_ps_applied() -> None:
    # Deep FIFO under oversubscription: applied blocks are versions old.
    # Slow simulated env steps, so that the run spans several timeline rows.
    result = run_simulated(short(mode="fifo", egress_rate=30_000.0, buffer_bytes=200 * block_bytes(64),
                                 step_time_us=2_000.0))
    rows = [s for s in result.timeline if s.staleness_p50 == s.staleness_p50]  # not NaN
    assert rows, "no timeline row carries the staleness of the applied blocks"
    applied = [r[3] for r in result.data]
    assert max(r.staleness_p99 for r in rows) <= max(applied)
    assert max(r.staleness_p90 for r in rows) >= 1
    assert all(r.update_age_p50_ms > 0 for r in rows if r.update_age_p50_ms == r.update_age_p50_ms)


def test_elastic_auto_grows_then_shrinks_the_pool_and_logs_every_decision() -> None:
    from olaf.drl.autoscale import AutoscaleConfig

    # One worker offers about half of C; a FIFO at rho 2 throws half of the blocks away.
    offered_one = 40 * block_bytes(64) / 0.0178  # a 17.8 ms turn's 40 blocks
    cfg = short(mode="fifo", workers=16, scaling="auto", total_steps=60_000,
                egress_rate=offered_one / 0.5, buffer_bytes=buffer_for(25, 40, 64),
                autoscale=AutoscaleConfig(window_s=0.5, rho_high=8.0))
    result = run_simulated(cfg)
    decisions = result.scale_decisions
    actions = [d[2] for d in decisions]
    assert actions[0] == "grow" and "shrink" in actions
    assert all(d[7] for d in decisions)  # every decision says why
    sizes = [n for _, n in result.worker_changes]
    assert sizes[0] == 4 and min(sizes) < max(sizes)
    # The timeline carries the decisions and the pool they made, and nothing was lost.
    rows = [s for s in result.timeline if s.scale_action]
    assert [s.scale_action for s in rows] == actions
    assert result.timeline[-1].active_workers == sizes[-1] == result.active_workers
    applied = [s.blocks_applied for s in result.timeline]
    assert applied == sorted(applied) and result.summary()["blocks_applied"] == applied[-1]
    s = result.summary()
    assert s["worker_seconds"] < 16 * result.wall_time  # fewer worker-seconds than the ceiling's
    assert s["env_steps"] >= 60_000 and result.evaluations
    assert run_simulated(cfg).scale_decisions == decisions  # the same seed, the same decisions


def test_feedback_revision_picks_the_queue_and_the_workers_rule_together() -> None:
    """RunConfig.feedback sets both halves (DESIGN.md §3-4): one cluster's queue full of
    its own blocks throttles revision 2's workers (global occupancy) and not revision 3's
    (the cluster's room), whose loss ceiling and answered share reach the timeline."""
    from olaf.drl.worker_turn import build_worker
    from worker_transport.policy import OlafPolicy, OlafRev2Policy

    for revision, rule in ((3, OlafPolicy), (2, OlafRev2Policy)):
        worker, sender = build_worker(short(feedback=revision), 0, 0, ("127.0.0.1", 9),
                                      lambda version: None)
        try:
            assert type(sender.policy) is rule
        finally:
            sender.close()
            worker.close()
    with pytest.raises(ValueError, match="feedback must be revision 2 or 3"):
        short(feedback=4)
    # Long enough for a timeline row with the senders' totals in it (0.5 s simulated).
    runs = {revision: run_simulated(short(feedback=revision, egress_rate=30_000.0,
                                          buffer_bytes=20 * block_bytes(64), total_steps=20_000,
                                          eval_every=20_000))
            for revision in (2, 3)}
    skipped = {r: res.summary()["skipped_share"] for r, res in runs.items()}
    assert runs[3].summary()["feedback"] == 3 and runs[2].summary()["feedback"] == 2
    assert skipped[2] > 0.2 and skipped[3] < skipped[2] / 2, skipped
    ceilings = [s.loss_ceiling for s in runs[3].timeline if s.loss_ceiling == s.loss_ceiling]
    assert ceilings and all(0.05 <= c <= 1.0 for c in ceilings)
    assert any(s.answered_share == s.answered_share for s in runs[3].timeline)
    assert all(s.loss_ceiling != s.loss_ceiling for s in runs[2].timeline)  # NaN: no ceiling


def test_reward_rule_off_and_congested_on_the_virtual_clock() -> None:
    """``off``: the controller never writes, nothing is DROPPED_REWARD; ``congested`` runs."""
    base = dict(egress_rate=30_000.0, buffer_bytes=20 * block_bytes(64))
    off = run_simulated(short(reward_rule="off", **base)).summary()["outcomes"]
    assert off["DROPPED_REWARD"] == 0 and off["MERGED"] > 0
    assert run_simulated(short(reward_rule="congested", **base)).summary()["outcomes"]["MERGED"] > 0
    with pytest.raises(ValueError, match="reward_rule must be one of"):
        short(reward_rule="never")
