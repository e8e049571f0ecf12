"""What a run measured, whichever backend ran it: the live ``Snapshot`` rows, the
``RunResult`` with its ``summary()``, and the helpers that read them.

Every backend (local processes, Ray actors, Mininet hosts) fills the same ``RunResult``
through the one training loop (olaf.drl.core), so ``olaf.drl.report`` writes the same
files and ``olaf compare`` reads the same keys for all of them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from olaf.drl.bottleneck import figures
from olaf.drl.config import RunConfig


class EvalScores(NamedTuple):
    """One evaluation of one model version under both policies, on the same seeds: (mean,
    std) of the greedy returns and of the stochastic ones (NaN: the model cannot sample,
    olaf.drl.evaluation.can_sample)."""

    greedy_mean: float
    greedy_std: float
    stochastic_mean: float = math.nan
    stochastic_std: float = math.nan

    def of(self, policy: str) -> tuple[float, float]:
        """(mean, std) of ``policy``, ``greedy`` or ``stochastic`` (RunConfig.eval_policy)."""
        if policy == "greedy":
            return self.greedy_mean, self.greedy_std
        return self.stochastic_mean, self.stochastic_std


EVALUATION_COLUMNS = ("time_s", "env_steps", "eval_mean", "eval_std", "model_version",
                      "greedy_mean", "greedy_std", "stochastic_mean", "stochastic_std")
"""One ``RunResult.evaluations`` row, as ``evaluations.csv`` names its columns: ``eval_*``
are the configured policy's (``RunConfig.eval_policy``), the columns after the version are
both policies' (``EvalScores``). Older rows had the first five only."""


@dataclass
class Snapshot:
    """What the live display shows, sampled every ``SAMPLE_PERIOD``."""

    elapsed: float
    env_steps: int
    episodes: int
    mean_return: float
    aom_ms: float
    occupied: int
    capacity: int
    outcomes: dict[str, int]
    model_version: int
    blocks_applied: int
    threshold: float | None
    updates_sent: int
    updates_skipped: int
    updates_probes: int = 0
    """Sent only because the worker's feedback had expired (DESIGN.md §4)."""
    p_s_mean: float = math.nan
    """Mean P_s of the workers' draws since the previous sample (NaN: no draw)."""
    loss_ceiling: float = math.nan
    """Mean loss ceiling L of the workers at the sample (DESIGN.md §4 revision 3; NaN:
    workers without one, revision 2 or always-send)."""
    answered_share: float = math.nan
    """Answered share of the blocks of the updates whose answers fell due since the
    previous sample (NaN: none fell due)."""
    eval_return: float = math.nan
    """Mean return of the latest evaluation, of the configured policy (NaN before the first)."""
    eval_greedy: float = math.nan
    """The same evaluation's greedy mean return."""
    eval_stochastic: float = math.nan
    """The same evaluation's stochastic mean return (NaN: the model cannot sample)."""
    learner: dict[str, float] = field(default_factory=dict)
    """Mean loss terms and gradient norms of the gradients made since the previous sample."""
    active_workers: int = 0
    """Logical workers active at the sample (boost scaling, ``olaf workers``)."""
    restarts: int = 0
    """Worker processes restarted so far."""
    staleness_p50: float = math.nan
    """Median staleness (PS version at apply - DATA's model_version) of the blocks applied
    since the previous sample (NaN: none, or a backend that reports it only at the end)."""
    staleness_p90: float = math.nan
    staleness_p99: float = math.nan
    update_age_p50_ms: float = math.nan
    """Median update age (received - generated) of the DATA received since the previous sample."""
    update_age_p90_ms: float = math.nan
    update_age_p99_ms: float = math.nan
    scale_rho: float = math.nan
    """``--elastic auto``: the oversubscription the decision at this row measured."""
    scale_waste: float = math.nan
    """The share of the pool's update blocks wasted in that window."""
    scale_action: str = ""
    """grow, hold or shrink ("": no decision at this row)."""
    scale_reason: str = ""


@dataclass
class RunResult:
    """Everything a run measured; ``summary()`` is what the table and JSON show."""

    config: RunConfig
    wall_time: float = 0.0
    time_to_target: float | None = None
    steps_to_target: int | None = None
    episodes: list[tuple[float, int, int, float, int]] = field(default_factory=list)
    """(time s, env steps when reported, worker, return, length) per finished episode."""
    timeline: list[Snapshot] = field(default_factory=list)
    data: list[tuple[float, int, int, int, float]] = field(default_factory=list)
    """(time s, block_id, agg_count, staleness in versions, reward) per DATA block."""
    aom: dict[str, Any] = field(default_factory=dict)
    aom_t_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    aom_global_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    update_age_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    switch: dict[str, Any] = field(default_factory=dict)
    receiver: dict[str, Any] = field(default_factory=dict)
    senders: list[dict[str, Any]] = field(default_factory=list)
    env_steps: int = 0
    model_version: int = 0
    blocks_applied: int = 0
    num_parameters: int = 0
    num_blocks: int = 0
    initial_return: float = math.nan
    final_return: float = math.nan
    """Mean of the last window of episodes, including those reported while the run shut down."""
    return_at_target: float = math.nan
    """The evaluation that first reached the target (NaN if none did)."""
    evaluations: list[tuple[float, int, float, float, int, float, float, float, float]] = field(
        default_factory=list)
    """(time s, env steps, mean, std, model version, greedy mean, greedy std, stochastic
    mean, stochastic std) per evaluation (``EVALUATION_COLUMNS``); mean and std are the
    configured policy's."""
    final_eval_return: float = math.nan
    """Evaluation of the weights the run ended with, of the configured policy."""
    stopped_by: str = "duration"
    switch_address: tuple[str, int] = ("", 0)
    weight_board: str = ""
    """Name of the shared-memory segment (removed at the end of the run)."""
    worker_pids: list[int] = field(default_factory=list)
    policies: dict[str, Any] = field(default_factory=dict)
    """Aggregation and worker-scaling figures (``RunPolicies.stats``)."""
    restarts: int = 0
    """Child processes that died and were started again (over every resumed part)."""
    restart_log: list[tuple[float, str, int | None]] = field(default_factory=list)
    """(time s, process name, exit code) per restart in this part of the run."""
    checkpoints: int = 0
    """Checkpoints written by this part of the run."""
    resumed_from: int | None = None
    """Env steps of the checkpoint this run continued, if it was resumed."""
    weights_downlink: str = "shared memory"
    """How the PS's weights reach the workers; each backend that does not use the embedded
    path's shared memory says what it uses."""
    error: str = ""
    """Why the run ended early (``stopped_by == "error"``), else empty."""
    active_workers: int = 0
    """Logical workers active when the run ended."""
    worker_changes: list[tuple[float, int]] = field(default_factory=list)
    """(time s, active workers) per change made by hand (``olaf workers``) or by
    ``--elastic auto``."""
    scale_decisions: list[tuple[float, int, str, str, float, float, float, str]] = field(
        default_factory=list)
    """``--elastic auto``: (time s, workers, action, phase, rho, waste share, applied
    blocks/s, reason) per decision (olaf.drl.autoscale)."""

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        _, _, rolling = rolling_returns(self.episodes, cfg.target_window)
        block_bytes = 36 + 4 * cfg.values
        data_blocks = int(self.receiver.get("data_blocks", 0))
        sent = sum(s.get("sent_updates", 0) for s in self.senders)
        skipped = sum(s.get("skipped_updates", 0) for s in self.senders)
        per_worker = [worker_tx(s) for s in self.senders]
        shares = [w["skipped_share"] for w in per_worker if w["skipped_share"] is not None]
        p_sum = sum(s.get("p_s_sum", 0.0) for s in self.senders)
        per_aom = self.aom.get("per_worker", {}).get("mean", [])
        agg = [d[2] for d in self.data]
        stale = [d[3] for d in self.data]
        return {
            "env": cfg.env_id,
            "mode": cfg.mode,
            "variant": cfg.variant,
            "workers_send": "P_s" if cfg.workers_use_p_s else "always",
            "feedback_ttl_ms": cfg.feedback_ttl_ms,
            "feedback": cfg.feedback,
            "workers": cfg.workers,
            "worker_processes": cfg.worker_processes,
            "pull_rate": cfg.pull_rate,
            "capacity": cfg.capacity,
            "seed": cfg.seed,
            "algo": cfg.algo,
            # IMPACT with local epochs: delta_rate as taken for this many workers.
            "delta_share": (cfg.impact.delta_share(cfg.workers)
                            if cfg.algo == "impact" and cfg.impact.sends_delta else None),
            "target_reward": cfg.target_reward,
            "total_steps_budget": cfg.total_steps,
            "wall_time_s": self.wall_time,
            "stopped_by": self.stopped_by,
            "time_to_target_s": self.time_to_target,
            "steps_to_target": self.steps_to_target,
            "env_steps": self.env_steps,
            "episodes": len(self.episodes),
            "initial_return": self.initial_return,
            "final_return": self.final_return,
            "return_at_target": self.return_at_target,
            "best_return": float(rolling.max()) if len(rolling) else math.nan,
            "evaluations": len(self.evaluations),
            "eval_policy": cfg.eval_policy,
            "eval_return_last": self.evaluations[-1][2] if self.evaluations else math.nan,
            "best_eval_return": (max(e[2] for e in self.evaluations) if self.evaluations
                                 else math.nan),
            # Both policies' last evaluation: how far sampling is from the greedy policy.
            "greedy_eval_return_last": self.evaluations[-1][5] if self.evaluations else math.nan,
            "stochastic_eval_return_last": (self.evaluations[-1][7] if self.evaluations
                                            else math.nan),
            "final_eval_return": self.final_eval_return,
            "aom_mean_ms": self.aom.get("mean", math.nan),
            "aom_p99_ms": self.aom.get("p99", math.nan),
            "aom_fairness_gap_ms": self.aom.get("fairness_gap_ms", math.nan),
            "aom_worker_spread_ms": (float(max(per_aom) - min(per_aom)) if per_aom else math.nan),
            "update_age_mean_ms": self.aom.get("update_age", {}).get("mean", math.nan),
            **dict(zip(("update_age_p50_ms", "update_age_p90_ms", "update_age_p99_ms"),
                       quantiles(self.update_age_ms), strict=True)),
            "data_blocks": data_blocks,
            "bytes_to_ps": data_blocks * block_bytes,
            "aggregated_updates": int(self.receiver.get("aggregated_updates", 0)),
            "mean_agg_count": float(np.mean(agg)) if agg else math.nan,
            "mean_staleness_versions": float(np.mean(stale)) if stale else math.nan,
            "updates_sent": sent,
            "updates_skipped": skipped,
            "updates_probes": sum(s.get("probe_updates", 0) for s in self.senders),
            "skipped_share": skipped / (sent + skipped) if sent + skipped else math.nan,
            "skipped_share_min": min(shares) if shares else math.nan,
            "skipped_share_max": max(shares) if shares else math.nan,
            "p_s_mean": p_sum / (sent + skipped) if sent + skipped else math.nan,
            "worker_blocks_sent": sum(s.get("sent_blocks", 0) for s in self.senders),
            "worker_bytes": sum(s.get("sent_blocks", 0) for s in self.senders) * block_bytes,
            "per_worker": per_worker,
            "model_version": self.model_version,
            "blocks_applied": self.blocks_applied,
            "num_parameters": self.num_parameters,
            "blocks_per_gradient": self.num_blocks,
            "outcomes": self.switch.get("outcomes", {}),
            "worker_restarts": self.restarts,
            "checkpoints_written": self.checkpoints,
            "resumed_from_steps": self.resumed_from,
            "max_workers": cfg.max_workers or cfg.workers,
            "active_workers": self.active_workers,
            "error": self.error or None,
            **self.bottleneck_keys(sent + skipped),
            **self.policies,
        }

    def bottleneck_keys(self, updates: int) -> dict[str, Any]:
        """The bottleneck as run (DESIGN.md §7): C, B, D, K, the clock, and the measured
        oversubscription rho (every update a worker made, sent or skipped, over C)."""
        cfg = self.config
        fig = figures(cfg.capacity, cfg.pull_rate, cfg.values, max(self.num_blocks, 1))
        offered = fig.offered(updates, self.wall_time)
        return {
            "clock": "simulated" if cfg.clock == "virtual" else "real",
            "bottleneck": cfg.bottleneck or None,
            "egress_rate": fig.egress_rate,
            "buffer_bytes": fig.buffer_bytes,
            "depth_gradients": fig.depth,
            "offered_bytes_per_s": offered,
            "rho": fig.rho(offered),
            "clusters": cfg.clusters,
            "propagation_us": cfg.propagation_s * 1e6,
            "uplink_rate": cfg.uplink_rate,
            "weights_downlink": self.weights_downlink,
        }


QUANTILES = (50, 90, 99)


def quantiles(values: Any) -> tuple[float, float, float]:
    """p50, p90 and p99 of ``values`` (NaN each when there are none)."""
    v = np.asarray(values, np.float64)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    p50, p90, p99 = np.percentile(v, QUANTILES)
    return float(p50), float(p90), float(p99)


def worker_tx(stats: dict[str, Any]) -> dict[str, Any]:
    """One worker's sending figures from its ``Sender.stats()``."""
    sent, skipped = stats.get("sent_updates", 0), stats.get("skipped_updates", 0)
    draws = sent + skipped
    return {
        "worker_id": stats.get("worker_id"),
        "sent": sent,
        "skipped": skipped,
        "probes": stats.get("probe_updates", 0),
        "skipped_share": skipped / draws if draws else None,
        "p_s_mean": stats.get("p_s_sum", 0.0) / draws if draws else None,
        "blocks_sent": stats.get("sent_blocks", 0),
        "blocks_acked": stats.get("acked_blocks", 0),
        "blocks_lost": stats.get("lost_blocks", 0),
    }


def rolling_returns(
    episodes: list[tuple[float, int, int, float, int]], window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(end time s, env steps, mean return of the last ``window`` episodes), one row per episode.

    Episodes arrive in batches per worker process, so arrival order is not the order in
    which they ended: a process starved for a while delivers old episodes late. Ordering
    by end time makes "the last ``window`` episodes" mean what it says.
    """
    ep = sorted(episodes, key=lambda e: e[0])
    if not ep:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    t = np.array([e[0] for e in ep])
    steps = np.array([e[1] for e in ep])
    ret = np.array([e[3] for e in ep], np.float64)
    w = min(window, len(ret))
    mean = np.convolve(ret, np.ones(w) / w, mode="valid")
    return t[w - 1 :], steps[w - 1 :], mean


class RunFailed(RuntimeError):
    """The run ended on an error; ``result`` holds everything measured until then."""

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


def result_json(result: RunResult) -> dict[str, Any]:
    """The summary plus the configuration, JSON-ready."""
    out = result.summary()
    out["config"] = asdict(result.config)
    out["aom"] = result.aom
    out["senders"] = result.senders
    out["receiver"] = result.receiver
    out["switch"] = result.switch
    out["switch_address"] = list(result.switch_address)
    out["weight_board"] = result.weight_board
    out["worker_pids"] = result.worker_pids
    out["restart_log"] = [list(r) for r in result.restart_log]
    out["worker_changes"] = [list(r) for r in result.worker_changes]
    out["scale_decisions"] = [list(r) for r in result.scale_decisions]
    return out
