"""verify-aom: the Z3 model, its encodings, the CLI, and the replay of every
counterexample through the reference OlafQueue (the model must not drift from it)."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path

import pytest

from verification.cli import main
from verification.config import ConfigError, Deployment
from verification.model import CheckResult, Options, build_model, check_property, forced_window
from verification.replay import replay
from worker_transport.policy import Feedback, OlafPolicy

pytestmark = pytest.mark.timeout(300)

# Small deployments keep the suite fast; each one exercises a different part of the model.
FAIR = Deployment(workers=4, clusters=2, horizon=10, warmup=3)
"""OLAF defaults (capacity 64, 1 PULL/slot) with 4 workers: fair and responsive."""
FIFO_BROKEN = Deployment(workers=6, clusters=2, capacity=4, mode="fifo", horizon=8, warmup=3)
"""FIFO drop-tail, capacity below the worker count, 6 UPDATEs per PULL."""
OLAF_TIGHT = Deployment(workers=6, clusters=2, horizon=8, warmup=3,
                        fairness_threshold=Fraction(6, 5))
"""OLAF, fair within 1.5 slots but not within 1.2: merges credit a cluster at once."""
SMALL_RING = Deployment(workers=4, clusters=4, capacity=2, horizon=7, warmup=2,
                        fairness_threshold=Fraction(1), aom_bound=2)
"""OLAF with fewer slots than clusters: DROPPED_FULL, and P_s < 1 lets workers skip."""
HALF_RATE = Deployment(workers=4, clusters=2, pull_rate=Fraction(1, 2), horizon=9, warmup=3,
                       aom_bound=2)
"""One PULL every other slot: slots without a PULL, AoM 2 is not enough."""
ALIASED = Deployment(workers=34, clusters=1, horizon=6, warmup=2,
                     fairness_threshold=Fraction(1, 4))
"""34 workers in one cluster: contributor bits of w0/w32 and w1/w33 alias (DESIGN.md §5)."""
ANY_REWARDS = Deployment(workers=4, clusters=2, capacity=2, horizon=7, warmup=2,
                         rewards="any", aom_bound=2)
"""Rewards unknown: low-reward updates are dropped or replaced (DESIGN.md §3 rule 3)."""


def check(dep: Deployment, prop: str, engine: str = "auto") -> CheckResult:
    return check_property(dep, prop, timeout_s=240, options=Options(engine=engine))


@pytest.mark.parametrize("prop", ["fairness", "responsiveness"])
def test_fair_deployment_verifies(prop: str) -> None:
    result = check(FAIR, prop)
    assert result.status == "VERIFIED", result.reason
    assert result.trace is None


@pytest.mark.parametrize(
    ("dep", "prop"),
    [
        (FIFO_BROKEN, "fairness"),
        (FIFO_BROKEN, "responsiveness"),
        (OLAF_TIGHT, "fairness"),
        (SMALL_RING, "fairness"),
        (SMALL_RING, "responsiveness"),
        (ANY_REWARDS, "responsiveness"),
        (HALF_RATE, "responsiveness"),
        (ALIASED, "fairness"),
    ],
    ids=["fifo-fair", "fifo-resp", "olaf-tight", "ring-fair", "ring-resp", "any-rewards",
         "half-rate", "aliased"],
)
def test_counterexample_is_a_real_queue_behaviour(dep: Deployment, prop: str) -> None:
    result = check(dep, prop)
    assert result.status == "VIOLATED", result.reason
    trace = result.trace
    assert trace is not None and trace.slots[-1].slot == trace.violation_slot
    report = replay(dep, trace)
    assert report.ok, report.mismatches
    assert report.messages == sum(len(s.events) for s in trace.slots)


def test_counterexamples_exercise_every_rule() -> None:
    """Between them the counterexamples above cover drops, merges, replacements, reward
    decisions and skipped sends, so the replay compares all of them with the queue."""
    seen: set[str] = set()
    for dep, prop in [(FIFO_BROKEN, "fairness"), (SMALL_RING, "fairness"),
                      (ANY_REWARDS, "responsiveness"), (OLAF_TIGHT, "fairness")]:
        trace = check(dep, prop).trace
        assert trace is not None
        seen |= {e.outcome for s in trace.slots for e in s.events if e.outcome}
        seen |= {e.response for s in trace.slots for e in s.events if e.response}
    assert {"ENQUEUED", "MERGED", "DROPPED_FULL", "DATA"} <= seen
    assert seen & {"REPLACED", "DROPPED_REWARD"}


def test_skipped_sends_are_allowed_by_the_worker_policy() -> None:
    """Ask for a violating trace in which some worker skips: the replay recomputes P_s
    from the ACKs the reference queue sends and confirms each skip had P_s < 1."""
    import z3

    dep = SMALL_RING
    model = build_model(dep, "fairness")
    for t in range(dep.horizon):
        model.add_slot(t)
    last = dep.horizon - 1
    model.solver.add(z3.Or([x for row in model.skipped for x in row]), model.violation(last))
    assert model.solver.check() == z3.sat
    trace = model.extract(model.solver.model(), last)
    assert any(s.skipped for s in trace.slots)
    report = replay(dep, trace)
    assert report.ok, report.mismatches


def test_replay_catches_a_drifted_trace() -> None:
    """The cross-check can fail: a trace edited to disagree with the queue is rejected."""
    trace = check(FIFO_BROKEN, "fairness").trace
    assert trace is not None
    for edit in ("outcome", "occupancy", "aom", "credit"):
        bad = copy.deepcopy(trace)
        update = next(e for s in bad.slots for e in s.events if e.kind == "update")
        pull = next(e for s in bad.slots for e in s.events if e.response == "DATA")
        if edit == "outcome":
            update.outcome = "MERGED" if update.outcome != "MERGED" else "ENQUEUED"
        elif edit == "occupancy":
            update.occupied += 1
        elif edit == "aom":
            bad.slots[-1].aom[0] += 1
        else:
            pull.credited = [w for w in range(FIFO_BROKEN.workers) if w not in pull.credited][:1]
        assert not replay(FIFO_BROKEN, bad).ok, edit


@pytest.mark.parametrize("dep", [FAIR, OLAF_TIGHT, SMALL_RING, HALF_RATE],
                         ids=["fair", "tight", "ring", "half-rate"])
def test_encodings_agree(dep: Deployment) -> None:
    """counting, segments and explicit encode the same behaviours: same verdicts."""
    engines = ["explicit"]
    if build_model(dep, "fairness").ENGINE == "segments":
        engines += ["segments", "counting"]
    for prop in ("fairness", "responsiveness"):
        verdicts = {e: check(dep, prop, e).status for e in engines}
        assert len(set(verdicts.values())) == 1, (prop, verdicts)


def test_contributor_bits_alias_beyond_32_workers_per_cluster() -> None:
    dep = Deployment(workers=40, clusters=1)
    assert dep.aliasing
    assert dep.aliases(3) == [3, 35] and dep.aliases(35) == [3, 35] and dep.aliases(8) == [8]
    assert not Deployment(workers=64, clusters=2).aliasing


def test_forced_window_follows_the_worker_policy() -> None:
    dep = Deployment(workers=4, clusters=4, capacity=4, horizon=20)
    policy = OlafPolicy(4, dep.alpha, dep.beta)
    for occupied in range(5):
        for active in range(min(occupied, 4) + 1):
            window = forced_window(dep, occupied, active)
            fb = Feedback(255 * occupied // 4, active, False, 0)
            for gap in range(1, 21):
                forced = policy.probability(fb, gap * 10_000) >= 1.0
                assert forced == (gap <= window), (occupied, active, gap)
    assert forced_window(Deployment(), 2, 2) == Deployment().horizon
    assert forced_window(Deployment(mode="fifo"), 64, 1) == Deployment().horizon


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"clusters": 9, "workers": 8}, "every cluster needs a worker"),
        ({"warmup": 30, "horizon": 24}, "warmup"),
        ({"pull_rate": 0}, "pull-rate"),
        ({"capacity": 0}, "capacity"),
        ({"mode": "lifo"}, "mode"),
        ({"rewards": "any", "mode": "fifo"}, "FIFO mode never compares rewards"),
    ],
)
def test_impossible_configurations(kwargs: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Deployment(**kwargs)


def test_cli_exit_codes_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    small = ["--workers", "4", "--horizon", "8", "--warmup", "3"]
    assert main(small) == 0
    out = capsys.readouterr().out
    assert "fairness        VERIFIED" in out and "responsiveness  VERIFIED" in out

    broken = ["--workers", "6", "--capacity", "4", "--mode", "fifo", "--horizon", "8",
              "--warmup", "3", "--property", "fairness", "--json"]
    assert main(broken) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_code"] == 1
    (res,) = doc["results"]
    assert res["status"] == "VIOLATED" and res["replay"]["reproduced"]
    assert res["engine"] == "explicit"
    cex = res["counterexample"]
    assert cex["slots"][-1]["slot"] == cex["violation_slot"]
    assert {"kind", "occupied"} <= set(cex["slots"][0]["events"][0])

    assert main(["--workers", "3", "--clusters", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "every cluster needs a worker" in err
    with pytest.raises(SystemExit) as exc:
        main(["--pull-rate", "fast"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage" not in err

    toml = tmp_path / "dep.toml"
    toml.write_text('[deployment]\nworkers = 6\ncapacity = 4\nmode = "fifo"\nhorizon = 8\n'
                    'warmup = 3\nproperty = "fairness"\n')
    assert main([str(toml)]) == 1
    capsys.readouterr()
    assert main([str(toml), "--mode", "olaf", "--workers", "4"]) == 0
    capsys.readouterr()
    assert main(["--workers", "4", "--mode", "fifo", "--engine", "segments"]) == 2
    assert "segment encoding" in capsys.readouterr().err
    toml.write_text("[deployment]\nwokers = 6\n")
    assert main([str(toml)]) == 2
    assert "unknown key 'wokers'" in capsys.readouterr().err

    timeout = ["--workers", "8", "--horizon", "24", "--property", "fairness",
               "--timeout", "0.01"]
    assert main(timeout) == 3
    assert "UNKNOWN" in capsys.readouterr().out
