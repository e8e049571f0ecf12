"""Chaos during training (``olaf run --chaos PLAN``, docs/platform.md "Chaos"): CartPole-v1
trains through loss on both paths, a switch restart, two worker processes killed with
SIGKILL and a PS crash, is resumed from its last checkpoint and reaches a greedy 475; then
everything the design promises to keep is checked, and the check itself is shown to fail
on a checkpoint with one flipped weight."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dataplane.impairment import Impairment
from olaf.drl import chaos
from olaf.drl import checkpoint as ck
from tests.test_fault_tolerance import ROOT, OlafRun
from worker_transport.protocol import MsgType

SEED = 1
TARGET = 475.0
"""CartPole-v1's reward threshold: the greedy policy balances (almost) every episode."""
EVERY = 2000
"""Env steps between checkpoints: the most a PS crash may lose (plus one loop step)."""
PLAN = """
[[event]]
at_steps = 500
action = "loss"
path = "worker-switch"
p = 0.1
for_steps = 2500

[[event]]
at_steps = 500
action = "loss"
path = "switch-ps"
p = 0.1
for_steps = 2500

[[event]]
at_steps = 1500
action = "switch-restart"

[[event]]
at_steps = 2500
action = "kill-workers"
n = 2

[[event]]
at_steps = 4000
action = "ps-crash"
"""
FAST = ["--set", "algo.epochs=4", "--set", "algo.minibatches=4", "--set", "algo.rollout_steps=128",
        "--set", "ps.optimizer=sgd", "--set", "ps.learning_rate=1"]
"""A learner that solves CartPole in a few tens of thousands of env steps."""


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _flip_one_weight(ckpt: ck.Checkpoint) -> ck.Checkpoint:
    params = np.array(ckpt.ps["params"], copy=True)
    params.view(np.uint32)[len(params) // 2] ^= 1  # the lowest mantissa bit of one weight
    return replace(ckpt, ps={**ckpt.ps, "params": params})


def _restored(ckpt: ck.Checkpoint) -> dict[str, np.ndarray]:
    """What ``olaf run --resume`` restores from ``ckpt`` (run_experiment's steps), as a record."""
    from olaf.drl.learners import parameter_server, run_model
    from olaf.drl.results import RunResult

    ps = parameter_server(ckpt.config, run_model(ckpt.config))
    ps.load_state(ckpt.ps)
    result = RunResult(ckpt.config, num_parameters=len(ps.params), num_blocks=ps.num_blocks)
    ck.restore_metrics(result, ckpt)
    return chaos.resumed_record(ps, result)


def _olaf_namespaces() -> set[str]:
    """The network namespaces named olaf-* (the testbed's); a local run must add none."""
    if shutil.which("ip") is None:
        return set()
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    return {line.split()[0] for line in listing.stdout.splitlines() if line.startswith("olaf-")}


@pytest.mark.timeout(2400)
def test_a_run_survives_the_chaos_plan_and_keeps_what_the_design_promises(tmp_path: Path) -> None:
    ckdir, plan = tmp_path / "ck", tmp_path / "plan.toml"
    plan.write_text(PLAN)
    namespaces = _olaf_namespaces()  # a testbed run elsewhere on the machine may own some
    first = OlafRun(["--chaos", str(plan), "--workers", "8", "--processes", "4", "--seed", str(SEED),
                     "--checkpoint-dir", str(ckdir), "--checkpoint-every", str(EVERY),
                     "--eval-every", "2000", "--total-steps", "400000", "--duration", "1200", *FAST],
                    tmp_path / "run1")
    output = first.finish(timeout=1200)  # also: nothing of its session is left
    assert first.proc.returncode == -signal.SIGKILL, output
    crash = json.loads((ckdir / chaos.CRASH_RECORD).read_text())
    (tmp_path / "crashed").mkdir()
    shutil.copy(ckdir / ck.CHECKPOINT_NAME, tmp_path / "crashed")
    saved = ck.load(tmp_path / "crashed")
    before = chaos.read_record(ckdir / chaos.BEFORE_RECORD)

    # What the PS held when the last checkpoint was taken is what the file holds.
    assert chaos.compare_records(before, chaos.checkpoint_record(saved)) == []
    assert crash["checkpoint_env_steps"] == saved.env_steps == int(before["env_steps"])
    assert crash["checkpoint_model_version"] == saved.model_version > 0
    # The crash came after the whole plan, and lost at most one checkpoint interval.
    actions = [e["action"] for e in crash["log"]]
    assert sorted(actions) == sorted(["loss", "loss", "loss-end", "loss-end", "switch-restart",
                                      "kill-workers", "worker-back", "worker-back", "ps-crash"])
    assert actions[-1] == "ps-crash" and actions.index("worker-back") > actions.index("kill-workers")
    assert 0 <= crash["env_steps"] - saved.env_steps <= 2 * EVERY
    # Loss on both paths, and the switch restart, are in the counters.
    assert crash["dropped"]["worker-switch"] > 0 and crash["dropped"]["switch-ps"] > 0
    assert crash["switch_restarts"] == 1
    restart = next(e for e in crash["log"] if e["action"] == "switch-restart")
    assert restart["switch_before"]["outcomes"]["ENQUEUED"] > 0
    enqueued = [row["outcomes"].get("ENQUEUED", 0) for row in saved.timeline]
    assert any(b < a for a, b in zip(enqueued, enqueued[1:], strict=False)), enqueued
    # Every killed worker process was restarted (new PID, same name), reported again, and
    # is counted: the SIGKILLed restarts are exactly the killed processes.
    killed = crash["killed"]
    assert len(killed) == 2 and {k["name"] for k in killed} == {"olaf-worker-0", "olaf-worker-1"}
    for k in killed:
        assert k["new_pid"] != k["pid"] and k["back_at_steps"] >= k["at_steps"]
        assert crash["processes"][k["name"]] == k["new_pid"]
    sigkilled = sorted(r[1] for r in crash["restart_log"] if r[2] == -signal.SIGKILL)
    assert sigkilled == sorted(k["name"] for k in killed)
    assert crash["restarts"] == len(crash["restart_log"]) == int(before["restarts"])
    # Nothing of the crashed run is left: processes (by the PIDs it reported), its shared
    # memory, namespaces.
    for pid in [crash["pid"], *crash["processes"].values(), *(k["pid"] for k in killed)]:
        assert not Path(f"/proc/{pid}").exists(), pid
    assert not (Path("/dev/shm") / crash["weight_board"]).exists()
    assert _olaf_namespaces() <= namespaces

    second = OlafRun(["--resume", str(ckdir), "--checkpoint-dir", str(tmp_path / "ck2"),
                      "--duration", "1500"], tmp_path / "run2")
    output = second.finish(timeout=1500)
    assert second.proc.returncode == 0, output
    summary = second.summary()
    assert summary["stopped_by"] == "target", output
    assert summary["return_at_target"] >= TARGET
    # The resumed PS started from exactly the checkpoint: weights, optimizer moments, block
    # steps, version, applied blocks, env steps, restarts, episodes, evaluations, DATA rows.
    after = chaos.read_record(tmp_path / "run2" / chaos.AFTER_RECORD)
    assert chaos.compare_records(before, after) == []
    assert chaos.compare_records(chaos.checkpoint_record(saved), after) == []
    # The counters go on: env steps, episodes (the checkpoint's rows first, no step counted
    # twice), restarts.
    assert summary["resumed_from_steps"] == saved.env_steps
    assert summary["worker_restarts"] == crash["restarts"] + len(summary["restart_log"])
    episodes = _rows(tmp_path / "run2" / "episodes.csv")
    old = saved.metrics["episodes"]
    assert [int(e["env_steps"]) for e in episodes[:len(old)]] == old[:, 1].astype(int).tolist()
    steps = [int(e["env_steps"]) for e in episodes]
    assert steps == sorted(steps)
    if saved.scalars["steps_to_target"] is None:
        # The target came after the crash (a ps-crash holds the target stop back, and on a
        # loaded machine the killed processes take long to come back, so it may come
        # before): at the resumed run's first evaluation, which is of the checkpoint's own
        # weights at its steps (on an idle machine the checkpoint can already be that good),
        # or later, after the resumed run trained on from the checkpoint's steps.
        assert summary["steps_to_target"] >= saved.env_steps
        if summary["steps_to_target"] > saved.env_steps:
            assert summary["env_steps"] > saved.env_steps and steps[len(old)] > saved.env_steps
    else:
        assert summary["steps_to_target"] == saved.scalars["steps_to_target"] <= saved.env_steps
    evaluations = _rows(tmp_path / "run2" / "evaluations.csv")
    assert int(evaluations[len(saved.metrics["evaluations"])]["model_version"]) == saved.model_version
    for pid in [*summary["worker_pids"]]:
        assert not Path(f"/proc/{pid}").exists(), pid
    assert _olaf_namespaces() <= namespaces

    # The check fails on a broken checkpoint: one weight's lowest bit flipped, in the file
    # and in what a resume from it restores.
    ck.save(tmp_path / "broken", _flip_one_weight(saved))
    broken = ck.load(tmp_path / "broken")
    for record in (chaos.checkpoint_record(broken), _restored(broken)):
        problems = chaos.compare_records(before, record)
        assert len(problems) == 1 and problems[0].startswith("ps.params: 1 value(s) differ"), problems
    assert chaos.compare_records(before, _restored(saved)) == []


def test_the_check_names_every_broken_guarantee() -> None:
    rng = np.random.default_rng(0)
    state = {"params": rng.normal(size=50).astype(np.float32), "adam_m": np.zeros(50, np.float32),
             "adam_v": np.zeros(50, np.float32), "block_steps": np.arange(4), "model_version": 7,
             "blocks_applied": 30}
    metrics = {"episodes": [(1.0, 100, 0, 20.0, 20)],
               "evaluations": [(2.0, 100, 9.5, 1.0, 7, 9.5, 1.0, 20.0, 4.0)],
               "data": [(0.5, 1, 2, 0, float("nan"))]}
    before = chaos.state_record(state, 100, 2, metrics)
    assert chaos.compare_records(before, chaos.state_record(state, 100, 2, metrics)) == []  # NaN too
    moments = {**state, "adam_v": state["adam_v"] + np.float32(1e-30)}
    changed = chaos.state_record(moments, 101, 1, {**metrics, "episodes": []})
    assert [p.split(":")[0] for p in chaos.compare_records(before, changed)] == [
        "env_steps", "metrics.episodes", "ps.adam_v", "restarts"]
    assert chaos.compare_records(before, {**before, "model_version": np.int64(8)})[0].startswith(
        "model_version")


def test_type_drop_drops_one_message_type_only() -> None:
    imp = Impairment(seed=3, type_drop={int(MsgType.UPDATE): 0.5})
    kinds = np.array([MsgType.UPDATE, MsgType.PULL] * 1000)
    keep = imp.keep_types(kinds)
    assert keep[kinds == MsgType.PULL].all()
    assert 400 < (~keep).sum() < 600 and imp.dropped_types == {int(MsgType.UPDATE): int((~keep).sum())}


@pytest.mark.parametrize(("plan", "changes", "message"), [
    ("nope.toml", {}, "no plan file"),
    ('event = [{at_steps = 1, action = "melt"}]', {}, "action must be one of"),
    ('event = [{at_steps = 1, action = "loss", path = "ps-switch", p = 0.1}]', {}, "loss path"),
    ('event = [{at_steps = 1, action = "loss", path = "switch-ps", p = 2}]', {}, "probability"),
    ('event = [{at_steps = 1, action = "loss", path = "switch-ps", p = true}]', {}, "probability"),
    ('event = [{at_steps = -1, action = "switch-restart"}]', {}, "at_steps"),
    ('event = [{at_steps = 1, action = "kill-workers", n = 0}]', {}, "n must be >= 1"),
    ('event = [{at_steps = 1, action = "kill-workers", n = 3}]', {}, "worker processes"),
    ('event = [{at_steps = 1, action = "kill-workers", n = 2}]', {"max_restarts": 1}, "max-restarts"),
    ('event = [{at_steps = 1, action = "switch-restart", n = 1}]', {}, "takes no field"),
    ("events = []", {}, "unknown plan key"),
    ("event = []", {}, "at least one event"),
    ('event = [{at_steps = 9, action = "ps-crash"}, {at_steps = 10, action = "switch-restart"}]',
     {"checkpoint_dir": "c", "checkpoint_every": 5}, "last event"),
    ('event = [{at_steps = 9, action = "ps-crash"}, {at_steps = 9, action = "ps-crash"}]', {},
     "at most one"),
    ('event = [{at_steps = 9000, action = "ps-crash"}]', {}, "needs --checkpoint-dir"),
    ('event = [{at_steps = 1, action = "ps-crash"}]', {"checkpoint_dir": "c", "checkpoint_every": 5},
     "before the first checkpoint"),
    ('event = [{at_steps = 9, action = "ps-crash"}]', {"clock": "virtual"}, "virtual clock"),
    ('[{"at_steps": 1, "action": "switch-restart"', {}, "not a JSON plan"),
    ("event = [", {}, "not a TOML plan"),
])
def test_a_bad_plan_is_refused_with_one_line(plan: str, changes: dict, message: str) -> None:
    from olaf.drl.config import RunConfig

    cfg = RunConfig(workers=8, processes=2, **changes)
    with pytest.raises(chaos.PlanError, match=message) as caught:
        chaos.check_plan(chaos.read_plan(plan), cfg)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("plan", "extra", "message"), [
    ("nope.toml", [], "no plan file"),
    ('event = [{at_steps = 9000, action = "ps-crash"}]', [], "needs --checkpoint-dir"),
    ('event = [{at_steps = 1, action = "switch-restart"}]', ["--backend", "ray"], "--backend local"),
])
def test_a_bad_plan_is_one_line_and_exit_2(plan: str, extra: list[str], message: str,
                                            tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "olaf.cli", "run", "--chaos", plan, *extra,
                           "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "o").exists()


VIRTUAL_PLAN = """
event = [
  {at_steps = 500, action = "loss", path = "worker-switch", p = 0.2, for_steps = 1000},
  {at_steps = 500, action = "loss", path = "switch-ps", p = 0.2},
  {at_steps = 1500, action = "switch-restart"},
  {at_steps = 2000, action = "kill-workers", n = 1},
]
"""


def test_the_plan_on_the_virtual_clock_is_simulated_events_and_the_same_run_bit_for_bit() -> None:
    from olaf.drl.config import RunConfig
    from olaf.drl.simulated import run_simulated
    from tests.learners import GRADIENT_IMPACT
    from tests.test_simulated import fingerprint

    # Small frequent gradients: the plan's events at env-step counts all fall inside 4,000.
    cfg = RunConfig(workers=4, clock="virtual", total_steps=4_000, eval_every=1_000, eval_episodes=2,
                    target_reward=None, duration=1e6, seed=5, impact=GRADIENT_IMPACT)
    plan = chaos.read_plan(VIRTUAL_PLAN)
    chaos.check_plan(plan, cfg)
    runs = [chaos.Chaos(plan), chaos.Chaos(plan)]
    a, b = (run_simulated(cfg, chaos=c) for c in runs)
    assert fingerprint(a) == fingerprint(b)
    assert runs[0].log == runs[1].log
    actions = [e["action"] for e in runs[0].log]
    assert actions == ["loss", "loss", "loss-end", "switch-restart", "kill-workers"]
    kill = runs[0].log[-1]
    assert kill["killed"] == {"olaf-worker-0": [0, 2]}  # worker w lives in process w % 2
    assert a.restarts == 1 and [r[1:] for r in a.restart_log] == [("olaf-worker-0", -signal.SIGKILL)]
    final = runs[0].log[-2]["switch_before"]["outcomes"]
    assert final["ENQUEUED"] > 0
    assert runs[0].log[2]["dropped"]["worker-switch"] > 0 and a.receiver["data_blocks"] > 0
    assert a.env_steps >= 4_000 and a.data
    with pytest.raises(chaos.PlanError, match="virtual clock"):
        chaos.check_plan(chaos.read_plan('event = [{at_steps = 9, action = "ps-crash"}]'), cfg)
