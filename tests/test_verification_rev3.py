"""verify-aom under feedback revision 3 (DESIGN.md §3 Feedback, §4; issue 49 item 1).

The ACK's queue_util from the UPDATE's cluster's room_c, P_s = min(N*Q_free + alpha*e^(-beta*D),
L), the AIMD loss ceiling, probes at L; revision 2 selectable. Pinned: the results
verification/README.md states under revision 3, the ceiling's proofs, and one failing
property per mutant of the new rule. About 30 s of CPU.
"""

from __future__ import annotations

import inspect
import json
import random
import textwrap
from pathlib import Path
from typing import Any

import pytest

from dataplane.queue import OlafQueue, QueueConfig
from verification import sending
from verification.ceiling import CEILING_PROPERTIES, check_ceiling, mutant
from verification.check import check_property
from verification.cli import main
from verification.config import ConfigError, Deployment
from verification.model import Options
from verification.replay import replay
from worker_transport.protocol import Mode

DEFAULT = {"feedback": 3}
"""The default deployment (8 workers, 2 clusters, capacity 64) under revision 3."""
ONE_CLUSTER = {"feedback": 3, "workers": 2, "clusters": 1, "capacity": 2, "horizon": 10,
               "warmup": 2}
"""One cluster whose queue is half full of its own mergeable slot."""
TWO_CLUSTERS = {"feedback": 3, "workers": 4, "clusters": 2, "horizon": 10, "warmup": 4}
RING = {"feedback": 3, "workers": 3, "clusters": 3, "capacity": 2, "horizon": 14,
        "warmup": 4, "rewards": "merge"}
"""A ring smaller than the clusters: a DROPPED_FULL ACK carries room_c = 0 (util 255)."""


def verdict(prop: str, all_t: bool = True, **kw: Any) -> Any:
    return check_property(Deployment(**kw), prop, 120, Options(all_t=all_t, all_t_budget=30))


# -- the formula -----------------------------------------------------------------------------

def test_room_c_follows_design() -> None:
    """DESIGN.md §3 Feedback by hand: one cluster holding its slot of a full queue sees
    util 0 (a queue full of its own mergeable blocks is not congestion); a quota at what
    it holds leaves only its own slots; FIFO mode counts new room only."""
    assert sending.cluster_util("olaf", 2, 2, 2, 1) == 127  # 1 of 2 slots its own: room 1 + 0
    assert sending.cluster_util("olaf", 64, 64, 1, 1) == 0
    assert sending.cluster_util("olaf", 64, 64, 64, 1) == 251  # its one slot of 64
    assert sending.cluster_util("olaf", 64, 1, 2, 1) == 251  # at its quota: its own slot only
    assert sending.cluster_util("olaf", 2, 2, 2, 0) == 255  # DROPPED_FULL: no room at all
    assert sending.cluster_util("fifo", 64, 64, 16, 3) == 255 * 16 // 64  # = the global figure
    assert sending.cluster_util("fifo", 8, 2, 3, 2) == 255  # at its quota: nothing new
    dep2 = Deployment(capacity=2, clusters=1, workers=2, feedback=2)
    assert sending.ack_util(dep2, 1, 1) == 127  # revision 2: the global occupancy


@pytest.mark.parametrize("mode", ["olaf", "fifo"])
def test_room_c_matches_the_reference_queue(mode: str) -> None:
    """Random traffic on the reference queue: every ACK's queue_util is what the model's
    formula gives from the queue's occupancy and the cluster's count after the
    operation (revision 3 in the reference when it has the setting; otherwise the
    formula against itself is no check, so the test needs it)."""
    if "feedback" not in QueueConfig.__dataclass_fields__:
        pytest.skip("the reference queue has no feedback setting yet")
    from verification.replay import VALUES, datagram
    from worker_transport.codec import decode
    from worker_transport.protocol import MsgType

    rng = random.Random(49)
    for quota in (8, 3, 1):
        dep = Deployment(workers=6, clusters=3, capacity=8, mode=mode, feedback=3,
                         cluster_quota=quota if mode == "olaf" or quota == 8 else None)
        q = OlafQueue(QueueConfig(capacity=8, values=VALUES, max_clusters=3, max_blocks=1,
                                  mode=Mode.OLAF if mode == "olaf" else Mode.FIFO,
                                  cluster_quota=dep.quota, feedback=3))
        acks = 0
        for _ in range(400):
            if rng.random() < 0.3:
                q.process(decode([datagram(dep, MsgType.PULL)], VALUES))
                continue
            u = rng.randrange(6)
            raw = datagram(dep, MsgType.UPDATE, u, dep.cluster_of(u), 0, rng.randrange(3))
            r = q.process(decode([raw], VALUES))[0].headers[0]
            held = q.cluster_count[dep.cluster_of(u)]
            assert int(r["queue_util"]) == sending.ack_util(dep, q.occupied, held)
            acks += 1
        assert acks > 200


def test_send_probability_revision_3() -> None:
    """P_s = min(N*Q_free + alpha*e^(-beta*D), L); probes and the first update at L (at 1
    under revision 2); the ceiling's AIMD steps."""
    d3, d2 = Deployment(feedback=3), Deployment(feedback=2)
    # 4 clusters, empty queue: revision 2 capped P_s at 1/4 + 0.2 = 0.45 (issue 49).
    assert sending.probability(d2, 0, 4, 0.0) == pytest.approx(0.45)
    assert sending.probability(d3, 0, 4, 0.0) == 1.0
    assert sending.probability(d3, 0, 4, 0.0, ceiling=0.3) == pytest.approx(0.3)
    assert sending.probability(d3, 255, 2, 0.0) == pytest.approx(0.2)
    assert sending.probability(d3, 128, 2, 50.0) == pytest.approx(
        min(2 * (1 - 128 / 255) + 0.2 * 2.718281828 ** -2.5, 1.0))
    assert sending.probability(d3, None, 1, 0.0, ceiling=0.4) == 0.4  # before any ACK
    assert sending.probability(d3, 255, 1, 101.0, ceiling=0.05) == 0.05  # probe at L
    assert sending.probability(d2, 255, 1, 101.0) == 1.0  # revision 2: probe at 1
    assert sending.next_ceiling(1.0, 0.5) == 0.5
    assert sending.next_ceiling(0.08, 0.5) == 0.05  # the floor
    assert sending.next_ceiling(0.5, 0.0) == 0.05
    assert sending.next_ceiling(0.5, 0.9) == pytest.approx(0.6)
    assert sending.next_ceiling(0.95, 1.0) == 1.0


# -- the CLI ---------------------------------------------------------------------------------

def test_feedback_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """--feedback 2|3, default 3; anything else (flag or TOML) one line, exit 2."""
    for bad in ("4", "x", "3.0"):
        with pytest.raises(SystemExit) as e:
            main(["--feedback", bad])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "must be 2 or 3" in err and err.count("\n") == 1
    toml = tmp_path / "d.toml"
    toml.write_text("[deployment]\nfeedback = 1\n")
    assert main([str(toml)]) == 2
    err = capsys.readouterr().err
    assert "feedback must be one of 2, 3" in err and err.count("\n") == 1
    assert main(["--send-rule", "legacy", "--feedback", "3"]) == 2
    assert "use it with feedback 2" in capsys.readouterr().err
    with pytest.raises(ConfigError):
        Deployment(feedback=True)
    args = ["--workers", "2", "--clusters", "1", "--capacity", "2", "--horizon", "6",
            "--warmup", "2", "--rewards", "merge", "--aom-bound", "1", "--property",
            "responsiveness", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["deployment"]["feedback"] == 3
    assert main([*args, "--feedback", "2"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["deployment"]["feedback"] == 2 and doc["results"][0]["replay"]["reproduced"]


# -- fairness and responsiveness re-proved --------------------------------------------------

def test_default_deployment_bounds_tighten_under_revision_3() -> None:
    """With two clusters every ACK says N*Q_free >= 1: nobody is throttled, AoM <= 2 and
    fairness 1.5 for all T (revision 2: 4 and 3.25), both tight; the refutations replay."""
    r = verdict("responsiveness", aom_bound=2, **DEFAULT)
    assert r.status == "VERIFIED" and r.scope == "unbounded", r.reason
    r = verdict("responsiveness", aom_bound=1, **DEFAULT)
    assert r.status == "VIOLATED" and r.trace.violation_slot == 4
    assert replay(Deployment(aom_bound=1, **DEFAULT), r.trace).ok
    r = verdict("fairness", fairness_threshold=1.25, **DEFAULT)
    assert r.status == "VIOLATED" and r.trace.violation_slot == 4
    assert replay(Deployment(fairness_threshold=1.25, **DEFAULT), r.trace).ok


def test_quota_one_throttles_under_revision_3() -> None:
    """A quota of 1 slot: a cluster holding it is told its share is used (util 251), so the
    workers are throttled again and the tight AoM bound is 4; the refutation replays on the
    reference queue with the quota."""
    r = verdict("responsiveness", aom_bound=3, cluster_quota=1, **DEFAULT)
    assert r.status == "VIOLATED" and r.trace.violation_slot == 4
    report = replay(Deployment(aom_bound=3, cluster_quota=1, **DEFAULT), r.trace)
    assert report.ok, report.mismatches


# -- starvation under revision 3 ------------------------------------------------------------

def test_starvation_revision_3_is_tight_and_replays() -> None:
    """A DROPPED_FULL ACK (util 255) leaves P_s = alpha*e^(-beta*D) >= L_min for D <= 27.7 ms:
    2 slots of opportunity, then up to 8 decisions that may fall below L_min before the
    probe at L. Bound 8 VERIFIED for all T, 7 VIOLATED (replayed); the default bound 10
    holds. With alpha < L_min (0.04) a send at low P_s refreshes the feedback to a window
    of none, for ever: VIOLATED at the default bound, replayed."""
    assert verdict("starvation", starvation_bound=8, **RING).scope == "unbounded"
    r = verdict("starvation", starvation_bound=7, **RING)
    assert r.status == "VIOLATED" and r.trace.violation_slot == 10
    report = replay(Deployment(starvation_bound=7, **RING), r.trace)
    assert report.ok, report.mismatches
    r = verdict("starvation", alpha=0.04, **RING)
    assert r.status == "VIOLATED"
    assert replay(Deployment(alpha=0.04, **RING), r.trace).ok
    # The all-T search reaches the same first violation (exact search after the
    # over-approximation), and closes for bound 8.
    from verification.unbounded import search

    found = search(Deployment(starvation_bound=7, **RING), "starvation")
    assert (found.status, found.depth) == ("violated", 10)
    assert search(Deployment(starvation_bound=8, **RING), "starvation").status == "closed"
    # The explicit encoding agrees (every message position, not segments).
    r = check_property(Deployment(starvation_bound=7, **RING), "starvation", 120,
                       Options(engine="explicit"))
    assert r.status == "VIOLATED" and r.trace.violation_slot == 10


def test_replay_rejects_a_starvation_run_that_is_not_low() -> None:
    """The replay checks the run from the ACKs the queue sent: the same trace under a
    higher alpha (every decision >= L_min) is not a violation."""
    r = verdict("starvation", starvation_bound=7, **RING)
    report = replay(Deployment(starvation_bound=7, **{**RING, "alpha": 0.5}), r.trace)
    assert not report.ok and any("L_min" in m for m in report.mismatches)


# -- the loss ceiling -----------------------------------------------------------------------

@pytest.mark.parametrize("prop", CEILING_PROPERTIES)
def test_ceiling_properties_hold_for_all_t(prop: str) -> None:
    assert check_ceiling(prop).status == "VERIFIED"


@pytest.mark.parametrize(("name", "changes", "killed"), [
    ("ceiling-never-decreases", {"decrease": False}, "backoff"),
    ("decrease-without-floor", {"floored": False}, "bounds"),
    ("probes-at-1-not-L", {"probe_at_ceiling": False}, "bounds"),
])
def test_ceiling_mutant_is_killed(name: str, changes: dict, killed: str) -> None:
    r = check_ceiling(killed, mutant(**changes))
    assert r.status == "VIOLATED" and r.step is not None, name


def test_probes_at_1_lose_the_backoff() -> None:
    """The star8 failure of issue 49: with probes at 1, a worker whose every block is lost
    keeps offering P_s = 1; the back-off property refutes it."""
    r = check_ceiling("backoff", mutant(probe_at_ceiling=False))
    assert r.status == "VIOLATED" and r.step["probe"] and r.step["P_s"] == 1.0


# -- mutants of the slot model's new rule ----------------------------------------------------

def _patch(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, old: str, new: str) -> None:
    func = getattr(owner, name)
    source = textwrap.dedent(inspect.getsource(func))
    assert source.count(old) == 1, f"mutation site not found in {name}: {old!r}"
    namespace = dict(vars(inspect.getmodule(func)))
    exec(compile(source.replace(old, new), f"<mutant {name}>", "exec"), namespace)  # noqa: S102
    monkeypatch.setattr(owner, name, namespace[name])


def _one_cluster_verified() -> None:
    r = verdict("responsiveness", aom_bound=1, **ONE_CLUSTER)
    assert r.status == "VERIFIED", r.reason


def _two_clusters_verified() -> None:
    r = verdict("responsiveness", aom_bound=2, **TWO_CLUSTERS)
    assert r.status == "VERIFIED", r.reason


def _ring_starvation_refuted() -> None:
    r = verdict("starvation", all_t=False, starvation_bound=7, **RING)
    assert r.status == "VIOLATED", r.reason


def _ring_starvation_verified() -> None:
    r = verdict("starvation", all_t=False, starvation_bound=8, **RING)
    assert r.status == "VERIFIED", r.reason


SLOT_MUTANTS = [
    ("util-from-global-occupancy", sending, "ack_util",
     "return cluster_util(dep.mode, dep.capacity, dep.quota, occupied, held)",
     "return queue_util(occupied, dep.capacity)", _one_cluster_verified),
    ("q-free-over-n", sending, "share",
     "return n * q_free if dep.feedback == 3 else q_free / n", "return q_free / n",
     _two_clusters_verified),
    ("dropped-full-keeps-its-room", sending, "room",
     "new_room = max(0, min(capacity - occupied, quota - held))",
     "new_room = max(0, min(capacity - occupied, quota - held)) + (1 - held)",
     _ring_starvation_refuted),
    ("opportunity-at-p-s-1", sending, "forced",
     "return base_probability(dep, util, active, latest) >= level",
     "return base_probability(dep, util, active, latest) >= 1.0", _ring_starvation_verified),
]


@pytest.mark.parametrize(("name", "owner", "attr", "old", "new", "killer"), SLOT_MUTANTS,
                         ids=[m[0] for m in SLOT_MUTANTS])
def test_slot_model_mutant_is_killed(name: str, owner: Any, attr: str, old: str, new: str,
                                     killer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    killer()  # passes on the real rule
    _patch(monkeypatch, owner, attr, old, new)
    with pytest.raises(AssertionError):
        killer()


def test_starvation_rests_on_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """verify-aom's starvation under revision 3 proves the ceiling's bounds with it, and a
    ceiling without its floor (a mutant) turns the verdict into VIOLATED."""
    r = verdict("starvation", all_t=False, starvation_bound=8, **RING)
    assert r.status == "VERIFIED" and "L_min <= L <= 1 proved for all T" in r.reason
    from verification import ceiling

    monkeypatch.setattr(ceiling, "DESIGN", mutant(floored=False))
    monkeypatch.setattr(ceiling.check_ceiling, "__defaults__",
                        (ceiling.DESIGN, ceiling.check_ceiling.__defaults__[1]))
    r = verdict("starvation", all_t=False, starvation_bound=8, **RING)
    assert r.status == "VIOLATED" and "falls below L_min" in r.reason


def test_cli_starvation_revision_3(capsys: pytest.CaptureFixture[str]) -> None:
    """The refutation through verify-aom: VIOLATED, exit 1, replayed on the reference queue;
    the text names L_min and the assumption that any UPDATE may be lost."""
    args = ["--workers", "3", "--clusters", "3", "--capacity", "2", "--horizon", "14",
            "--property", "starvation", "--no-all-t"]
    assert main([*args, "--starvation-bound", "7", "--json"]) == 1
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["status"] == "VIOLATED" and res["replay"]["reproduced"], res.get("replay")
    assert "below L_min" in res["reason"]
    assert main([*args, "--starvation-bound", "8"]) == 0
    out = capsys.readouterr().out
    assert "starvation      VERIFIED" in out and "any UPDATE may be lost" in out


# -- the brute force over the reference queue, under revision 3 -----------------------------

NATIVE = "feedback" in QueueConfig.__dataclass_fields__
needs_native = pytest.mark.skipif(not NATIVE, reason="the reference queue has no feedback "
                                  "setting yet: its ACKs are revision 2's")
RING3 = Deployment(workers=2, clusters=2, capacity=1, horizon=6, warmup=2, max_skip=1,
                   feedback=3)
"""One slot, two clusters: the holder's ACK says util 0 (its own slot), the refused
cluster's DROPPED_FULL says 255 (revision 2: both 255)."""
QUOTA3 = Deployment(workers=2, clusters=2, capacity=4, horizon=5, warmup=2, max_skip=1,
                    feedback=3, cluster_quota=1)
"""A quota of one slot of four: a cluster holding it is told util 191 and is throttled."""


@needs_native
@pytest.mark.parametrize(("dep", "engine"), [(RING3, "segments"), (RING3, "explicit"),
                                             (QUOTA3, "segments")],
                         ids=["ring3-seg", "ring3-exp", "quota3-seg"])
def test_reference_behaviours_are_model_behaviours_rev3(dep: Deployment, engine: str) -> None:
    from tests.test_verification_harness import check_reference_accepted, model_solutions_replay

    check_reference_accepted(dep, engine, runs=4)
    model_solutions_replay(dep, engine)


@needs_native
@pytest.mark.parametrize(("dep", "prop"), [(RING3, "fairness"), (QUOTA3, "fairness"),
                                           (QUOTA3, "responsiveness")],
                         ids=["ring3-fairness", "quota3-fairness", "quota3-responsiveness"])
def test_tight_bounds_match_brute_force_rev3(dep: Deployment, prop: str) -> None:
    """The tightest bound the model verifies is the worst case of a breadth-first search
    over the reference queue (configured with revision 3) and §4 workers, first at the
    same slot; the refutation just below it replays."""
    from tests.test_verification_harness import brute_force, pinned_bound

    worst, first = brute_force(dep, prop)
    pinned_bound(dep, prop, worst, first)


def test_cli_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    """verify-aom --property ceiling: the three proofs, text and JSON; revision 2 refused."""
    assert main(["--property", "ceiling"]) == 0
    out = capsys.readouterr().out
    for prop in CEILING_PROPERTIES:
        assert f"{prop:<15} VERIFIED  for all T" in out
    assert main(["--property", "ceiling", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in doc["results"]] == ["VERIFIED"] * 3
    assert main(["--property", "ceiling", "--feedback", "2"]) == 2
    assert "revision 3's" in capsys.readouterr().err
