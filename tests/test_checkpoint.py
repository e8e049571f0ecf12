"""Checkpoints: the PS's state round trip, atomic writes, ``olaf eval``, and a run whose PS
is killed with SIGKILL, resumed from its last checkpoint with the same versions, env steps
and learning curve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from olaf.drl import checkpoint as ck
from olaf.drl.boosting import BoostConfig
from olaf.drl.config import RunConfig
from olaf.drl.impact import ImpactConfig
from olaf.drl.server import ParameterServer
from tests.test_fault_tolerance import ROOT, OlafRun, assert_session_empty


def _ps(seed: int, n: int = 300, values: int = 64) -> ParameterServer:
    rng = np.random.default_rng(seed)
    return ParameterServer(rng.normal(size=n).astype(np.float32), ImpactConfig(), values)


def _train(ps: ParameterServer, rng: np.random.Generator, blocks: int) -> None:
    for _ in range(blocks):
        ps.apply_block(int(rng.integers(ps.num_blocks)), rng.normal(size=ps.values))
        if rng.random() < 0.3:
            ps.snapshot()


def _checkpoint(ps: ParameterServer, cfg: RunConfig | None = None, steps: int = 1234) -> ck.Checkpoint:
    return ck.Checkpoint(config=cfg or RunConfig(), ps=ps.state(), env_steps=steps, elapsed=12.5,
                         metrics={"episodes": np.array([[1.0, 100, 0, 20.0, 20]])},
                         rng=ck.capture_rng())


def test_a_restored_ps_continues_exactly_as_the_original() -> None:
    original = _ps(0)
    _train(original, np.random.default_rng(1), 200)
    restored = _ps(99)  # other initial weights: everything must come from the checkpoint
    restored.load_state(original.state())
    assert restored.model_version == original.model_version > 0
    # The same gradients from here on give bit-identical weights: Adam's moments and each
    # block's step count (its bias correction) were carried over, not restarted.
    for ps in (original, restored):
        _train(ps, np.random.default_rng(2), 50)
    assert np.array_equal(original.params, restored.params)
    assert np.array_equal(original.block_steps, restored.block_steps)
    assert original.snapshot()[1] == restored.snapshot()[1]
    fresh = _ps(99)
    fresh.load_state({**_ps(0).state()})
    _train(fresh, np.random.default_rng(2), 50)
    assert not np.array_equal(fresh.params, original.params)


def test_load_state_of_another_model_is_refused_and_changes_nothing() -> None:
    ps, other = _ps(0), _ps(1, n=200)
    before = ps.params.copy()
    with pytest.raises(ValueError, match="shape"):
        ps.load_state(other.state())
    assert np.array_equal(ps.params, before)


def test_checkpoint_file_round_trip(tmp_path: Path) -> None:
    ps = _ps(0)
    _train(ps, np.random.default_rng(1), 100)
    cfg = RunConfig(workers=5, seed=7, impact=replace(ImpactConfig(), clip=0.3, adam_betas=(0.8, 0.99)),
                    boost=BoostConfig(window=7), checkpoint_dir=str(tmp_path), checkpoint_every=500)
    path = ck.save(tmp_path, _checkpoint(ps, cfg))
    assert path == tmp_path / ck.CHECKPOINT_NAME and not list(tmp_path.glob(".*tmp"))
    got = ck.load(tmp_path)
    assert got.config == cfg
    assert got.model_version == ps.model_version and got.env_steps == 1234 and got.elapsed == 12.5
    for key in ck.PS_KEYS:
        assert np.array_equal(got.ps[key], ps.state()[key]), key
    assert got.metrics["episodes"].tolist() == [[1.0, 100, 0, 20.0, 20]]
    # No pickled objects inside: the file opens with pickling refused.
    with np.load(path, allow_pickle=False) as z:
        assert "meta" in z.files


def test_evaluation_rows_of_both_policies_round_trip_and_older_ones_still_restore(
        tmp_path: Path) -> None:
    import math

    from olaf.drl.results import RunResult

    cfg = RunConfig(duration=math.inf, eval_policy="stochastic")  # olaf run --total-steps N
    result = RunResult(cfg)
    result.evaluations = [(2.0, 100, 20.0, 4.0, 7, 9.5, 1.0, 20.0, 4.0)]
    ck.save(tmp_path, ck.Checkpoint(config=cfg, ps=_ps(0).state(), env_steps=100, elapsed=2.0,
                                    metrics={"evaluations": np.asarray(result.evaluations)}))
    got = ck.load(tmp_path)
    assert got.config == cfg
    resumed = RunResult(cfg)
    ck.restore_metrics(resumed, got)
    assert resumed.evaluations == result.evaluations
    # A checkpoint written before both policies were evaluated: its rows were greedy ones.
    old = replace(got, metrics={"evaluations": np.array([[2.0, 100, 9.5, 1.0, 7]])})
    ck.restore_metrics(resumed, old)
    (row,) = resumed.evaluations
    assert row[:7] == (2.0, 100, 9.5, 1.0, 7, 9.5, 1.0) and math.isnan(row[7])


def test_timeline_rows_of_both_policies_round_trip_and_older_ones_still_restore(
        tmp_path: Path) -> None:
    import csv
    import math
    from dataclasses import asdict

    from olaf.drl.report import write_metrics
    from olaf.drl.results import RunResult, Snapshot

    cfg = RunConfig(eval_policy="stochastic")
    snap = Snapshot(elapsed=1.0, env_steps=100, episodes=3, mean_return=20.0, aom_ms=4.0,
                    occupied=1, capacity=8, outcomes={"MERGED": 2}, model_version=7,
                    blocks_applied=9, threshold=None, updates_sent=5, updates_skipped=1,
                    eval_return=30.0, eval_greedy=12.0, eval_stochastic=30.0)
    ck.save(tmp_path, ck.Checkpoint(config=cfg, ps=_ps(0).state(), env_steps=100, elapsed=1.0,
                                    timeline=[asdict(snap)]))

    def timeline_csv(ckpt: ck.Checkpoint, out: Path) -> dict[str, str]:
        resumed = RunResult(cfg)
        ck.restore_metrics(resumed, ckpt)
        (row,) = resumed.timeline
        write_metrics(resumed, out)
        with (out / "timeline.csv").open() as f:
            (cells,) = csv.DictReader(f)
        return {"eval_greedy": row.eval_greedy, "eval_stochastic": row.eval_stochastic, **cells}

    got = timeline_csv(ck.load(tmp_path), tmp_path / "new")
    assert (got["eval_greedy"], got["eval_stochastic"]) == (12.0, 30.0)
    assert (got["eval_return"], got["greedy_eval_return"], got["stochastic_eval_return"]) == (
        "30.0", "12.0", "30.0")
    # A row written before evaluations were both policies' (the Snapshot fields of then):
    # it restores, its eval_return was greedy, and it had no stochastic one.
    old_fields = ("elapsed", "env_steps", "episodes", "mean_return", "aom_ms", "occupied",
                  "capacity", "outcomes", "model_version", "blocks_applied", "threshold",
                  "updates_sent", "updates_skipped", "updates_probes", "p_s_mean", "eval_return",
                  "learner", "active_workers", "restarts")
    old_row = {k: v for k, v in asdict(replace(snap, eval_return=12.0)).items() if k in old_fields}
    old = replace(ck.load(tmp_path), timeline=[old_row])
    got = timeline_csv(old, tmp_path / "old")
    assert got["eval_greedy"] == 12.0 and math.isnan(got["eval_stochastic"])
    assert (got["eval_return"], got["greedy_eval_return"], got["stochastic_eval_return"]) == (
        "12.0", "12.0", "")


@pytest.mark.parametrize("policy", ["greedy", "stochastic"])
def test_olaf_eval_reports_both_policies_on_the_run_s_seeds_and_names_the_configured_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str) -> None:
    import argparse

    from olaf.algorithm import flat_parameters
    from olaf.commands import eval as olaf_eval_command
    from olaf.drl.evaluation import Evaluator, evaluate_policy
    from olaf.drl.learners import parameter_server, run_model

    def olaf_eval(ckdir: Path, *flags: str) -> str:
        parser = argparse.ArgumentParser()
        olaf_eval_command.add_arguments(parser)
        assert olaf_eval_command.run(parser.parse_args([str(ckdir), *flags])) == 0
        return capsys.readouterr().out

    def checkpoint(cfg: RunConfig, ckdir: Path) -> np.ndarray:
        model = run_model(cfg)  # a fresh policy: greedy ~10 on CartPole, sampled ~22
        ck.save(ckdir, ck.Checkpoint(config=cfg, ps=parameter_server(cfg, model).state(),
                                     env_steps=100, elapsed=1.0))
        return flat_parameters(model)

    cfg = RunConfig(eval_episodes=4, seed=3, eval_policy=policy)
    weights = checkpoint(cfg, tmp_path / "ck")
    # The run's first evaluation of these weights (a resumed run's first one): the same
    # seeds, both policies.
    first = Evaluator(cfg).evaluate(weights)
    judged = json.loads(olaf_eval(tmp_path / "ck", "--json"))
    assert judged["eval_policy"] == policy and judged["episodes"] == 4
    assert (judged["greedy_mean"], judged["greedy_std"]) == (first.greedy_mean, first.greedy_std)
    assert (judged["stochastic_mean"], judged["stochastic_std"]) == (first.stochastic_mean,
                                                                     first.stochastic_std)
    assert judged["greedy_mean"] != judged["stochastic_mean"]
    # mean and std: the configured policy's, as the run's eval_mean.
    assert (judged["mean"], judged["std"]) == first.of(policy)
    text = olaf_eval(tmp_path / "ck").splitlines()
    assert "4 episodes of each policy" in text[0]
    lines = {line.split()[0]: line for line in text[1:]}
    assert lines.keys() == {"greedy", "stochastic"}
    for name, (mean, std) in (("greedy", first.of("greedy")), ("stochastic", first.of("stochastic"))):
        assert f"{name} return {mean:.1f} ± {std:.1f}" in lines[name]
        assert ("(configured: --eval-policy" in lines[name]) == (name == policy), lines[name]
    # --episodes and --seed still choose the episodes, now of both policies.
    judged = json.loads(olaf_eval(tmp_path / "ck", "--json", "--episodes", "2", "--seed", "11"))
    model = run_model(cfg)
    assert judged["greedy_returns"] == evaluate_policy(model, cfg.env_id, 2, 11).tolist()
    assert judged["stochastic_returns"] == evaluate_policy(model, cfg.env_id, 2, 11,
                                                           greedy=False).tolist()
    # A model that cannot sample: greedy only, said so.
    plain = RunConfig(algo="tests.test_algorithm_api:_NoBoxes", eval_episodes=2, eval_policy="greedy")
    checkpoint(plain, tmp_path / "plain")
    judged = json.loads(olaf_eval(tmp_path / "plain", "--json"))
    assert judged["greedy_mean"] == judged["mean"] > 0 and judged["stochastic_mean"] is None
    assert "stochastic return not played" in olaf_eval(tmp_path / "plain")


def test_rng_states_round_trip() -> None:
    import random

    import torch

    state = ck.capture_rng()
    first = (torch.rand(3).tolist(), np.random.random(3).tolist(), random.random())
    ck.restore_rng(state)
    assert (torch.rand(3).tolist(), np.random.random(3).tolist(), random.random()) == first


def test_a_crash_in_the_middle_of_a_write_leaves_the_last_good_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ps = _ps(0)
    ck.save(tmp_path, _checkpoint(ps, steps=100))
    _train(ps, np.random.default_rng(1), 50)

    def torn_write(f: object, **arrays: np.ndarray) -> None:
        f.write(b"PK\x03\x04 half a zip")  # type: ignore[attr-defined]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ck.np, "savez", torn_write)
    with pytest.raises(OSError):
        ck.save(tmp_path, _checkpoint(ps, steps=200))
    monkeypatch.undo()
    assert ck.load(tmp_path).env_steps == 100
    assert sorted(p.name for p in tmp_path.iterdir()) == [ck.CHECKPOINT_NAME]
    # A torn file at the final name (what a non-atomic write could leave) is refused.
    (tmp_path / ck.CHECKPOINT_NAME).write_bytes(b"PK\x03\x04 half a zip")
    with pytest.raises(ck.CheckpointError, match="not a readable checkpoint"):
        ck.load(tmp_path)


def test_a_checkpoint_of_an_unknown_configuration_is_refused() -> None:
    data = ck.config_to_dict(RunConfig())
    data["no_such_option"] = 1
    with pytest.raises(ck.CheckpointError, match="no_such_option"):
        ck.config_from_dict(RunConfig, data)


@pytest.mark.parametrize(("argv", "message"), [
    (["eval", "{tmp}/none"], "no checkpoint at"),
    (["eval", "{tmp}/bad", "--episodes", "2"], "not a readable checkpoint"),
    (["eval", "{tmp}/bad", "--episodes", "0"], "--episodes"),
    (["eval", "{tmp}/bad", "--gif", "{tmp}/no/such/dir/x.gif"], "does not exist"),
    (["run", "--resume", "{tmp}/none", "--out", "{tmp}/o"], "no checkpoint at"),
    (["run", "--resume", "{tmp}/bad", "--workers", "3", "--out", "{tmp}/o"], "--workers"),
    (["run", "--checkpoint-every", "100", "--out", "{tmp}/o"], "--checkpoint-dir"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / ck.CHECKPOINT_NAME).write_bytes(b"not a checkpoint")
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "olaf.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.timeout(2000)
def test_ps_killed_then_resumed_continues_versions_steps_and_curve(tmp_path: Path) -> None:
    ckdir, gif = tmp_path / "ck", tmp_path / "episode.gif"
    first = OlafRun(["--workers", "2", "--total-steps", "200000", "--duration", "600",
                     "--eval-every", "1500", "--checkpoint-dir", str(ckdir),
                     "--checkpoint-every", "3000", "--seed", "3"], tmp_path / "run1")
    first.wait_for(lambda s: s["checkpoints"] >= 1, 600, "the first checkpoint")
    # The PS (the run's own process) dies without any chance to clean up; its worker
    # processes notice and exit by themselves.
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    assert_session_empty(first.proc.pid)
    saved = ck.load(ckdir)
    assert saved.env_steps >= 3000 and saved.model_version > 0
    assert len(saved.metrics["evaluations"]) >= 1 and len(saved.metrics["episodes"]) > 0

    eval_proc = subprocess.run([sys.executable, "-m", "olaf.cli", "eval", str(ckdir), "--json",
                                "--gif", str(gif)], cwd=ROOT, capture_output=True, text=True,
                               timeout=600)
    assert eval_proc.returncode == 0, eval_proc.stderr
    judged = json.loads(eval_proc.stdout.strip().splitlines()[-1])
    assert judged["model_version"] == saved.model_version
    assert gif.read_bytes()[:6] == b"GIF89a" and judged["gif_frames"] >= 10

    budget = saved.env_steps + 2000
    second = OlafRun(["--resume", str(ckdir), "--total-steps", str(budget), "--duration", "900"],
                     tmp_path / "run2")
    output = second.finish(timeout=900)
    assert second.proc.returncode == 0, output
    summary = second.summary()
    assert summary["resumed_from_steps"] == saved.env_steps
    assert summary["stopped_by"] == "steps" and summary["env_steps"] >= budget
    assert summary["model_version"] > saved.model_version
    evals = second.csv("evaluations.csv")
    old = len(saved.metrics["evaluations"])
    # The curve continues: the checkpoint's evaluations first, unchanged...
    assert [float(e["eval_mean"]) for e in evals[:old]] == saved.metrics["evaluations"][:, 2].tolist()
    # ...then the resumed run's first one: the checkpoint's weights (same version), at the
    # checkpoint's env steps, with the same greedy return olaf eval found for them.
    resumed = evals[old]
    assert int(resumed["env_steps"]) == saved.env_steps
    assert int(resumed["model_version"]) == saved.model_version
    assert float(resumed["eval_mean"]) == pytest.approx(judged["mean"], abs=1e-9)
    assert float(resumed["time_s"]) >= saved.elapsed
    episodes = second.csv("episodes.csv")
    assert len(episodes) > len(saved.metrics["episodes"])
    steps = [int(e["env_steps"]) for e in episodes]
    assert steps == sorted(steps) and steps[-1] > saved.env_steps
    # Checkpoints went on in the same directory.
    assert ck.load(ckdir).env_steps >= budget
    assert time.time() - ck.load(ckdir).written_at < 600
