"""verify-aom: the Z3 model, its encodings, the CLI, and the replay of every
counterexample through the reference OlafQueue (the model must not drift from it)."""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path

import pytest

from verification.check import build_model, check_property
from verification.cli import main
from verification.config import ConfigError, Deployment
from verification.model import Options
from verification.replay import replay
from verification.sending import forced, forced_window, probability, probe_gap
from verification.solving import CheckResult
from worker_transport.policy import Feedback, OlafPolicy, OlafRev2Policy

pytestmark = pytest.mark.timeout(300)

# Small deployments keep the suite fast; each one exercises a different part of the model.
FAIR = Deployment(workers=4, clusters=2, horizon=10, warmup=3, sender="always")
"""OLAF queue defaults (capacity 64, 1 PULL/slot) with 4 workers that always send: fair
and responsive (segment encoding)."""
FIFO_BROKEN = Deployment(workers=6, clusters=2, capacity=4, mode="fifo", horizon=8, warmup=3)
"""FIFO drop-tail, capacity below the worker count, 6 UPDATEs per PULL."""
OLAF_TIGHT = Deployment(workers=6, clusters=2, horizon=8, warmup=3, sender="always",
                        fairness_threshold=Fraction(6, 5), aom_bound=2)
"""OLAF, fair within 1.5 slots but not within 1.2: merges credit a cluster at once."""
SMALL_RING = Deployment(workers=4, clusters=4, capacity=2, horizon=7, warmup=2,
                        fairness_threshold=Fraction(1), aom_bound=2)
"""OLAF with fewer slots than clusters: DROPPED_FULL, and P_s < 1 lets workers skip."""
HALF_RATE = Deployment(workers=4, clusters=2, pull_rate=Fraction(1, 2), horizon=9, warmup=3,
                       aom_bound=2)
"""One PULL every other slot: slots without a PULL, AoM 2 is not enough."""
ALIASED = Deployment(workers=34, clusters=1, horizon=6, warmup=2, sender="always",
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


THROTTLED = Deployment(workers=3, clusters=2, horizon=7, warmup=3, aom_bound=3,
                      fairness_threshold=Fraction(2))
"""The revised §4 rule with the default capacity: P_s < 1 after every ACK (N = 2 active
clusters), so workers may skip; the segment encoding tracks each sender's feedback."""


@pytest.mark.parametrize("dep", [FAIR, OLAF_TIGHT, SMALL_RING, HALF_RATE, THROTTLED],
                         ids=["fair", "tight", "ring", "half-rate", "throttled"])
def test_encodings_agree(dep: Deployment) -> None:
    """counting, segments and explicit encode the same behaviours: same verdicts."""
    dep = Deployment(**{**dep.as_dict(), "horizon": min(dep.horizon, 8)})
    engines = ["explicit"]
    model = build_model(dep, "fairness")
    if model.ENGINE == "segments":
        engines.append("segments")
        if model.always_forced:
            engines.append("counting")
    for prop in ("fairness", "responsiveness"):
        verdicts = {e: check(dep, prop, e).status for e in engines}
        assert len(set(verdicts.values())) == 1, (prop, verdicts)


def test_contributor_bits_alias_beyond_32_workers_per_cluster() -> None:
    dep = Deployment(workers=40, clusters=1)
    assert dep.aliasing
    assert dep.aliases(3) == [3, 35] and dep.aliases(35) == [3, 35] and dep.aliases(8) == [8]
    assert not Deployment(workers=64, clusters=2).aliasing


def test_send_rule_matches_the_worker_implementation() -> None:
    """The model's DESIGN.md §4 rule gives the same P_s as worker_transport's policy of the
    same revision: revision 2 OlafRev2Policy (free share / N), revision 3 OlafPolicy
    (N * free share, capped by the ceiling L) at L = 1 and at L = 0.05; N = max(active,
    1), expiry after feedback_ttl with a probe (at 1, at L)."""
    for revision, make in ((2, OlafRev2Policy), (3, OlafPolicy)):
        dep = Deployment(workers=4, clusters=4, capacity=4, horizon=20, feedback=revision)
        ceilings = (1.0, 0.05) if revision == 3 else (1.0,)
        for ceiling in ceilings:
            policy = make(alpha=dep.alpha, beta=dep.beta, feedback_ttl_ms=dep.feedback_ttl_ms)
            while ceiling < 1.0 and policy.ceiling > ceiling:  # type: ignore[union-attr]
                policy.settle(10, 0)  # type: ignore[union-attr]
            assert policy.probability(None, 0) == probability(dep, None, 0, 0.0, ceiling) == ceiling
            for util in (0, 1, 63, 127, 191, 254, 255):
                for active in (0, 1, 2, 4, 255):
                    for delta_us in (0, 1, 5_000, 10_000, 99_999, 100_000, 100_001, 250_000):
                        fb = Feedback(util, active, False, 1_000_000)
                        want = policy.probability(fb, 1_000_000 + delta_us)
                        got = probability(dep, util, active, delta_us / 1000, ceiling)
                        assert got == pytest.approx(want, abs=1e-12), (revision, util, active, delta_us)


def test_forced_sends_follow_the_send_rule() -> None:
    """A send is forced exactly when P_s = 1 at every instant of its slot; stale
    feedback forces a probe ceil(ttl/slot) + 1 slots after the ACK's slot."""
    dep = Deployment(workers=4, clusters=4, capacity=4, horizon=20)
    assert probe_gap(dep) == 11
    for occupied in range(5):
        for active in range(min(occupied, 4) + 1):
            window = forced_window(dep, occupied, active)
            util = 255 * occupied // 4
            for gap in range(1, 21):
                instants = [(gap - 1) * 10 + 0.001 * k for k in range(1, 10_001, 500)] + [gap * 10]
                all_one = all(probability(dep, util, active, d) >= 1.0 for d in instants)
                assert forced(dep, occupied, active, gap) == all_one, (occupied, active, gap)
                if window < dep.horizon:
                    assert (gap <= window or gap >= 11) == all_one, (occupied, active, gap)
    # An empty queue leaves P_s = 1; the legacy rule's Q_free in slots kept it at 1 too.
    assert forced_window(Deployment(), 0, 0) == Deployment().horizon
    assert forced_window(Deployment(send_rule="legacy"), 2, 2) == Deployment().horizon
    assert forced_window(Deployment(), 2, 2) == 0
    assert forced_window(Deployment(mode="fifo"), 64, 1) == Deployment().horizon
    legacy = Deployment(send_rule="legacy", capacity=2, workers=2)
    assert probe_gap(legacy) is None and not forced(legacy, 2, 2, 500)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"clusters": 9, "workers": 8}, "every cluster needs a worker"),
        ({"warmup": 30, "horizon": 24}, "warmup"),
        ({"pull_rate": 0}, "pull-rate"),
        ({"capacity": 0}, "capacity"),
        ({"mode": "lifo"}, "mode"),
        ({"periods": (1, 2)}, "one value for all workers or one per worker"),
        ({"periods": 0}, "periods must be 1.."),
        ({"periods": (1, 1, 1, -2, 1, 1, 1, 1)}, "periods must be 1.."),
        ({"periods": 2, "phases": 2}, "phases must be 0..period-1"),
        ({"phases": -1}, "phases must be 0.."),
    ],
)
def test_impossible_configurations(kwargs: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Deployment(**kwargs)


def test_cli_exit_codes_and_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    small = ["--workers", "4", "--horizon", "8", "--warmup", "3", "--sender", "always",
             "--property", "both", "--rewards", "merge"]
    assert main(small) == 0
    out = capsys.readouterr().out
    assert "fairness        VERIFIED" in out and "responsiveness  VERIFIED" in out
    assert "assuming:" in out and "workers always send" in out

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
    assert main([str(toml), "--mode", "olaf", "--workers", "4", "--sender", "always",
                 "--rewards", "merge"]) == 0
    capsys.readouterr()
    assert main(["--workers", "4", "--mode", "fifo", "--engine", "segments"]) == 2
    assert "segment encoding" in capsys.readouterr().err
    toml.write_text("[deployment]\nwokers = 6\n")
    assert main([str(toml)]) == 2
    assert "unknown key 'wokers'" in capsys.readouterr().err

    timeout = ["--workers", "8", "--horizon", "24", "--property", "fairness", "--sender",
               "always", "--timeout", "0.01"]
    assert main(timeout) == 3
    assert "UNKNOWN" in capsys.readouterr().out


# -- issue 19 item 3: true AoM values, real violations reported as VIOLATED ----------------

@pytest.mark.parametrize(
    "dep",
    [Deployment(workers=4, pull_rate=Fraction(1, 4), horizon=10, warmup=6),
     Deployment(rewards="any")],
    ids=["quarter-rate", "any-rewards-default"],
)
def test_responsiveness_violation_has_true_aom_and_replays(dep: Deployment) -> None:
    result = check(dep, "responsiveness")
    assert result.status == "VIOLATED", result.reason
    trace = result.trace
    assert trace is not None
    report = replay(dep, trace)
    assert report.ok, report.mismatches
    # The model's counters saturate at bound + 1; the printed trace must not.
    last = trace.slots[-1]
    assert last.aom[trace.violation_worker] > dep.aom_bound
    for s in trace.slots:
        assert all(0 <= a <= s.slot for a in s.aom)
    if dep.pull_rate == Fraction(1, 4):
        assert max(last.aom) > dep.aom_bound + 1
        assert max(last.aom) == last.slot  # never credited: AoM = t, far above the cap


def test_cli_reports_real_violation_as_violated(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--workers", "4", "--pull-rate", "1/4", "--horizon", "10", "--warmup", "6",
            "--property", "responsiveness", "--json"]
    assert main(args) == 1
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["status"] == "VIOLATED" and res["replay"]["reproduced"]


# -- issue 18 item 3: --timeout bounds every engine; bad TOML files exit 2 -----------------

def test_timeout_bounds_the_explicit_engine_on_the_largest_size(
        capsys: pytest.CaptureFixture[str]) -> None:
    import time

    timeout = 2.0
    args = ["--engine", "explicit", "--workers", "256", "--clusters", "255", "--horizon",
            "1000", "--pull-rate", "64", "--capacity", "65535", "--mode", "fifo",
            "--property", "fairness", "--timeout", str(timeout)]
    start = time.monotonic()
    assert main(args) == 3
    assert time.monotonic() - start < timeout + 5
    assert "UNKNOWN" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "no settings"),
        (b"\xff\xfeworkers = 3\n", "not UTF-8"),
        (b"workers = 200\n[deployment]\nclusters = 2\n", "unknown top-level key 'workers'"),
        (b"[deployment]\nworkers = \n", "not valid TOML"),
        (b"[deploy]\nworkers = 3\n", "unknown key 'deploy'"),
    ],
    ids=["empty", "not-utf8", "key-above-table", "bad-toml", "misspelt-table"],
)
def test_bad_toml_files_exit_2_with_one_line(content: bytes, words: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "dep.toml"
    path.write_bytes(content)
    assert main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and words in captured.err, captured.err


def test_unreadable_toml_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2  # a directory: cannot be read as a file
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read" in err
    assert main([str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot read" in err


# -- issue 14 item 3: the revised §4 rule, and no starvation -------------------------------

LEGACY_TOML = Path(__file__).resolve().parents[1] / "verification" / "examples" / \
    "legacy-rule-starvation.toml"


def test_legacy_send_rule_starves_a_worker(capsys: pytest.CaptureFixture[str]) -> None:
    """Regression case: the old rule (Q_free in slots, no expiry) lets one full ACK
    silence a worker while the queue is empty; the counterexample replays."""
    assert main([str(LEGACY_TOML), "--json"]) == 1
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["property"] == "starvation" and res["status"] == "VIOLATED"
    assert res["replay"]["reproduced"], res["replay"]
    cex = res["counterexample"]
    worker = cex["violation_worker"]
    silent = [s for s in cex["slots"] if worker in s["skipped"]]
    assert len(silent) >= 11
    # ... while the queue had room: never full at the start of those slots.
    assert all(s["occupied"] < 2 for s in cex["slots"][-12:-1])


def test_design_send_rule_never_starves(capsys: pytest.CaptureFixture[str]) -> None:
    """The same deployment with the revised rule: the probe after feedback_ttl bounds every
    silence by ceil(ttl / slot) = 10 slots, and the bound is tight (feedback revision 2;
    revision 3's starvation is tested in tests/test_verification_rev3.py)."""
    assert main([str(LEGACY_TOML), "--send-rule", "design", "--feedback", "2"]) == 0
    assert "starvation      VERIFIED" in capsys.readouterr().out
    assert main([str(LEGACY_TOML), "--send-rule", "design", "--feedback", "2",
                 "--starvation-bound", "9", "--json"]) == 1
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["status"] == "VIOLATED" and res["replay"]["reproduced"]


def test_stale_feedback_forces_a_probe() -> None:
    """A worker whose last ACK said 'full' may skip, but not past the feedback's expiry:
    no trace has a worker skipping gap >= probe gap after its last send."""
    import z3

    dep = Deployment(workers=2, clusters=2, capacity=2, horizon=14, warmup=2)
    model = build_model(dep, "starvation")
    for t in range(dep.horizon):
        model.add_slot(t)
    # Ask for worker 1 silent in slots 1..11: 11 skips, one more than the probe allows.
    model.solver.add(*[model.skipped[t][1] for t in range(1, 12)])
    assert model.solver.check() == z3.unsat
    model.solver.reset()
    legacy = Deployment(workers=2, clusters=2, capacity=2, horizon=14, warmup=2,
                        send_rule="legacy")
    model = build_model(legacy, "starvation")
    for t in range(legacy.horizon):
        model.add_slot(t)
    model.solver.add(*[model.skipped[t][1] for t in range(1, 14)])
    assert model.solver.check() == z3.sat


def test_verified_states_its_assumptions_and_dumps_the_query(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import z3

    prefix = tmp_path / "q"
    args = ["--workers", "2", "--horizon", "6", "--warmup", "2", "--sender", "always",
            "--property", "responsiveness", "--rewards", "merge", "--json", "--dump-smt",
            str(prefix)]
    assert main([*args, "--no-all-t"]) == 0
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["status"] == "VERIFIED" and res["scope"] == "bounded"
    assert res["checked_through_slot"] == 5 and res["all_t_search"] is None
    text = " ".join(res["assumptions"])
    assert "workers always send" in text and "slots 0..5" in text and "no stalls" in text
    # Without --no-all-t the reachable state set closes: the verdict holds for all T.
    assert main(args) == 0
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["status"] == "VERIFIED" and res["scope"] == "unbounded"
    assert res["all_t_search"]["status"] == "closed"
    text = " ".join(res["assumptions"])
    assert "every slot from an empty queue" in text and "slots 0..5" not in text
    # The dumped query is the verdict's: unsat, and sat once the bound is lowered.
    solver = z3.Solver()
    solver.from_file(str(tmp_path / "q.responsiveness.smt2"))
    assert solver.check() == z3.unsat
    assert main([*args[:-2], "--aom-bound", "0", "--dump-smt", str(prefix)]) == 1
    capsys.readouterr()
    solver = z3.Solver()
    solver.from_file(str(tmp_path / "q.responsiveness.smt2"))
    assert solver.check() == z3.sat


def test_pull_jitter_widens_the_scope() -> None:
    """Two workers, one cluster, one PULL per slot: AoM <= 1 holds on the exact schedule,
    but a PS one PULL behind (then catching up) breaks it; the trace replays and keeps
    within the jitter."""
    exact = Deployment(workers=2, clusters=1, horizon=8, warmup=2, sender="always",
                       aom_bound=1)
    assert check(exact, "responsiveness", "explicit").status == "VERIFIED"
    jittery = Deployment(**{**exact.as_dict(), "pull_jitter": 1})
    result = check(jittery, "responsiveness")
    assert result.status == "VIOLATED" and result.trace is not None
    assert result.engine == "explicit"
    assert replay(jittery, result.trace).ok
    assert not replay(exact, result.trace).ok  # off the exact schedule: an assumption fails
    with pytest.raises(ValueError, match="exact PULL schedule"):
        build_model(jittery, "fairness", Options(engine="segments"))


# -- issue 19 item 4: the reward threshold on by default; per-worker update periods ----------

def test_default_assumes_nothing_of_rewards(capsys: pytest.CaptureFixture[str]) -> None:
    """verify-aom's default is rewards=any (the controller's threshold rule): on the default
    deployment a worker that keeps sending loses its update to higher rewards, and the
    replay with the concrete rewards reproduces it."""
    assert main(["--property", "responsiveness", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["deployment"]["rewards"] == "any"
    (res,) = doc["results"]
    assert res["status"] == "VIOLATED" and res["replay"]["reproduced"], res["reason"]
    cex = res["counterexample"]
    assert cex["reward_threshold"] is not None
    updates = [e for s in cex["slots"] for e in s["events"] if e["kind"] == "update"]
    assert all(e["reward"] is not None for e in updates)
    assert any(e["outcome"] == "DROPPED_REWARD" for e in updates)


def test_unbeaten_worker_keeps_the_default_guarantee(capsys: pytest.CaptureFixture[str]) -> None:
    """--rewards unbeaten: the worker under test is never out-rewarded, the others' rewards
    and the threshold are unknown; responsiveness holds again, for all T, and the verdict
    prints the assumption."""
    args = ["--rewards", "unbeaten", "--property", "responsiveness", "--horizon", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "responsiveness  VERIFIED  for all T" in out
    assert "the worker under test is never out-rewarded (--rewards unbeaten)" in out
    assert main(["--property", "fairness", "--horizon", "6", "--warmup", "2", "--rewards",
                 "merge", "--no-all-t", "--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert any("(--rewards merge)" in a for a in res["assumptions"])
    assert any("each update is one block" in a and "multi-block updates are not modelled" in a
               for a in res["assumptions"])


UNBEATEN_SMALL = Deployment(workers=3, clusters=1, horizon=7, warmup=2, aom_bound=2,
                            rewards="unbeaten")
"""One cluster of three: with any rewards a worker's update is dropped or its slot replaced
(AoM 3 at slot 3); never out-rewarded, its AoM stays within 2."""


def test_unbeaten_is_encoded_and_replayed() -> None:
    anything = Deployment(**{**UNBEATEN_SMALL.as_dict(), "rewards": "any"})
    bad = check(anything, "responsiveness")
    assert bad.status == "VIOLATED" and bad.trace is not None
    assert bad.trace.violation_slot == 3 and replay(anything, bad.trace).ok
    # The explicit encoding keeps the other workers' reward decisions and restricts the
    # target's; the fast path checks it as rewards=merge (check.rewards_irrelevant).
    for engine in ("explicit", "auto"):
        result = check(UNBEATEN_SMALL, "responsiveness", engine)
        assert result.status == "VERIFIED", (engine, result.reason)
    # The any-rewards counterexample breaks the assumption, and the replay says so.
    report = replay(UNBEATEN_SMALL, bad.trace)
    assert any("never out-rewarded" in m for m in report.mismatches), report.mismatches
    # Where the target is not protected by its rewards alone, both encodings find the same
    # first violation, and the explicit one's concrete rewards replay.
    ring = Deployment(workers=4, clusters=2, capacity=2, horizon=7, warmup=2, aom_bound=3,
                      rewards="unbeaten")
    slots = set()
    for engine in ("explicit", "auto"):
        result = check(ring, "responsiveness", engine)
        assert result.status == "VIOLATED" and result.trace is not None
        assert result.trace.reward_threshold is not None
        assert replay(ring, result.trace).ok
        slots.add(result.trace.violation_slot)
    assert slots == {4}


def test_starvation_does_not_depend_on_rewards() -> None:
    """Reward decisions change no occupancy, so starvation under rewards=any is checked as
    merge; the explicit encoding, which keeps every reward decision, agrees."""
    dep = Deployment(workers=3, clusters=1, capacity=1, horizon=9, warmup=2,
                     starvation_bound=3, rewards="any")
    verdicts = {(r.status, r.trace.violation_slot if r.trace else None)
                for r in (check(dep, "starvation", "explicit"), check(dep, "starvation"))}
    assert len(verdicts) == 1, verdicts
    # Clusters of one worker never compare rewards (rule 1 first): same verdicts as merge.
    for ring, expected in ((Deployment(workers=3, clusters=3, capacity=2, horizon=7, warmup=2,
                                       aom_bound=2, rewards="any"), ("VIOLATED", 3)),
                           (Deployment(workers=3, clusters=3, capacity=3, pull_rate=Fraction(3),
                                       horizon=7, warmup=2, aom_bound=1, rewards="any",
                                       sender="always"), ("VERIFIED", None))):
        results = [check(ring, "responsiveness", "explicit"), check(ring, "responsiveness")]
        assert [r.engine for r in results] == ["explicit", "segments"]
        assert {(r.status, r.trace.violation_slot if r.trace else None)
                for r in results} == {expected}


STAGGERED = Deployment(workers=2, clusters=2, capacity=2, pull_rate=Fraction(2), horizon=8,
                       warmup=2, sender="always", periods=(1, 3), aom_bound=2)
"""Worker 1 has a fresh update every third slot. Two PULLs a slot drain the queue, so an
update is credited in its slot (if it arrives before the PULLs) or the next. Worker 1's
slot-0 update credited at once and its slot-3 update arriving after both PULLs give
AoM_1(3) = 3; before slot 3 AoM_1(t) <= t <= 2, and no later gap is longer (an update is
credited by the slot after it, the next comes 3 slots after it): the worst is 3, at slot 3.
Worker 0 is credited within a slot, so fairness (N = 2: |AoM_0 - AoM_1| / 2) is worst at
1.5, first at slot 3."""


@pytest.mark.parametrize(
    ("changes", "prop", "slot"),
    [({}, "responsiveness", 3), ({"phases": (0, 1)}, "responsiveness", 4),
     ({"aom_bound": 3}, "responsiveness", None),
     ({"fairness_threshold": Fraction(5, 4)}, "fairness", 3),
     ({"fairness_threshold": Fraction(3, 2)}, "fairness", None),
     ({"periods": 1}, "responsiveness", None)],
    ids=["slow-worker", "phase-one-later", "bound-3-holds", "fairness-1.25", "fairness-1.5",
         "common-period"],
)
def test_update_periods_and_phases(changes: dict, prop: str, slot: int | None) -> None:
    dep = Deployment(**{**STAGGERED.as_dict(), **changes})
    result = check(dep, prop)
    if slot is None:
        assert result.status == "VERIFIED", result.reason
        return
    assert result.status == "VIOLATED" and result.trace is not None, result.reason
    trace = result.trace
    assert trace.violation_slot == slot and trace.violation_worker in (0, 1)
    assert replay(dep, trace).ok, replay(dep, trace).mismatches
    # Worker 1 sits out the slots between its updates: no send, no skip.
    for s in trace.slots:
        assert (1 in s.idle) == (not dep.has_update(1, s.slot))
        assert all(e.worker != 1 for e in s.events) or dep.has_update(1, s.slot)
    # Under one common period the same messages are not a behaviour: worker 1 would have
    # had an update to send or skip in the slots it sat out.
    common = Deployment(**{**dep.as_dict(), "periods": 1, "phases": 0})
    assert not replay(common, trace).ok


def test_staggered_deployments_stay_bounded_and_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--workers", "2", "--capacity", "2", "--pull-rate", "2", "--sender", "always",
            "--periods", "1,3", "--horizon", "8", "--warmup", "2", "--aom-bound", "3",
            "--property", "responsiveness", "--rewards", "merge", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["deployment"]["periods"] == [1, 3]
    (res,) = doc["results"]
    assert res["status"] == "VERIFIED" and res["scope"] == "bounded"
    assert "update periods or phases other than every slot are not modelled" in res["reason"]
    text = " ".join(res["assumptions"])
    assert "update periods 1,3 slots and phases 0" in text and "one common period" not in text
    assert main(["--property", "starvation", "--workers", "2", "--no-all-t", "--horizon", "12",
                 "--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert any("one common period and phase" in a for a in res["assumptions"])


@pytest.mark.parametrize(
    ("args", "words"),
    [(["--periods", "1,2,3"], "one value for all workers or one per worker (8), got 3"),
     (["--periods", "0"], "periods must be 1.."),
     (["--periods=-1"], "periods must be 1.."),
     (["--periods", "2", "--phases", "2"], "phases must be 0..period-1"),
     (["--phases=-1"], "phases must be 0.."),
     (["--periods", "1,x"], "not an integer or a comma-separated list")],
    ids=["count", "zero", "negative", "phase-too-late", "negative-phase", "not-a-number"],
)
def test_bad_periods_exit_2(args: list[str], words: str,
                            capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(args)
    except SystemExit as e:  # argparse's own type errors
        code = e.code
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and words in captured.err


def test_periods_from_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = LEGACY_TOML.parent / "slow-worker.toml"
    assert main([str(example), "--json"]) == 1
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["counterexample"]["violation_slot"] == 3 and res["replay"]["reproduced"]
    toml = tmp_path / "dep.toml"
    toml.write_text("[deployment]\nworkers = 2\nclusters = 2\ncapacity = 2\npull-rate = 2\n"
                    "sender = \"always\"\nperiods = [1, 3]\nphases = [0, 1]\nhorizon = 8\n"
                    "warmup = 2\naom-bound = 2\nproperty = \"responsiveness\"\n")
    assert main([str(toml), "--json"]) == 1
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["counterexample"]["violation_slot"] == 4 and res["replay"]["reproduced"]
    toml.write_text("[deployment]\nworkers = 2\nperiods = [1, 3, 3]\n")
    assert main([str(toml)]) == 2
    assert "one value for all workers or one per worker" in capsys.readouterr().err


def test_starvation_counts_fresh_updates() -> None:
    """Period 2, feedback expiring after 50 ms (the probe is forced 6 slots after the last
    ACK): a throttled worker skips its updates 2 and 4 slots after a send and must send the
    one 6 slots after, so at most 2 fresh updates in a row are skipped."""
    dep = Deployment(workers=2, clusters=1, capacity=1, periods=2, phases=(0, 1), horizon=16,
                     warmup=2, feedback_ttl_ms=50, starvation_bound=2)
    assert check(dep, "starvation").status == "VERIFIED"
    tight = Deployment(**{**dep.as_dict(), "starvation_bound": 1})
    bad = check(tight, "starvation")
    assert bad.status == "VIOLATED" and bad.trace is not None
    assert "2 fresh updates in a row" in bad.trace.detail
    assert replay(tight, bad.trace).ok
