"""verify-aom's isolation property (issue 28 item 3): a cluster that keeps sending gets an
UPDATE into the queue within a bound whatever another cluster sends, with DESIGN.md §3's
``cluster_quota``; refuted, with a trace the reference queue replays, without it.

The bounds pinned here (see verification/README.md, *Isolation*): with ``A = min(capacity,
(clusters - 1) * quota)`` slots at most for the other clusters together,

* OLAF mode (the victim's one block needs one slot): ``A < capacity`` -> the victim gets in
  in every slot (bound 1), else the other clusters keep it out for ever;
* FIFO mode, one PULL a slot: ``A < capacity`` -> at most ``A + 1`` slots in a row without
  getting in (bound ``A + 2``, and ``A + 1`` refuted), else for ever.
"""

from __future__ import annotations

import inspect
import json
import random
import textwrap
from fractions import Fraction
from typing import Any

import pytest

from dataplane.queue import OlafQueue, QueueConfig
from verification import isolation, isolation_replay
from verification.cli import EXIT_USAGE, EXIT_VERIFIED, EXIT_VIOLATED, main
from verification.config import ConfigError, Deployment
from verification.isolation import check_isolation, lemmas_inductive, search_isolation
from verification.isolation_replay import quota_supported, replay_isolation
from verification.isolation_trace import Simulator
from verification.model import Options
from worker_transport.codec import decode
from worker_transport.protocol import Mode, MsgType, Outcome

ALL_T = Options(all_t=True, all_t_budget=30)
BOUNDED = Options(all_t=False)
needs_quota = pytest.mark.skipif(not quota_supported(),
                                 reason="the reference QueueConfig has no cluster_quota yet")


def fifo(bound: int, quota: int = 2, capacity: int = 6, clusters: int = 2) -> Deployment:
    """A small FIFO deployment: two workers per cluster, one PULL a slot."""
    return Deployment(workers=2 * clusters, clusters=clusters, capacity=capacity,
                      cluster_quota=quota, mode="fifo", isolation_bound=bound, horizon=12)


def test_default_deployment_with_half_quota_is_verified_for_all_t() -> None:
    r = check_isolation(Deployment(cluster_quota=32), 60, ALL_T)
    assert r.status == "VERIFIED" and r.scope == "unbounded", r.reason
    assert r.checked_through == Deployment().horizon - 1
    assert r.unbounded is not None and r.unbounded["status"] == "closed"
    assert any("always send" in a for a in r.assumptions)


def test_default_deployment_without_quota_is_violated_and_replays() -> None:
    dep = Deployment()  # cluster_quota = capacity: no limit
    r = check_isolation(dep, 60, BOUNDED)
    assert r.status == "VIOLATED" and r.trace is not None
    # The other cluster fills all 64 slots before the victim's first UPDATE.
    assert r.trace.violation_slot == 0
    victim = [e for e in r.trace.slots[0].events if e.kind == "update" and e.cluster == 0]
    assert len(victim) == 4 and {e.outcome for e in victim} == {"DROPPED_FULL"}
    report = replay_isolation(dep, r.trace)
    assert report.ok, report.summary()
    # Longer windows do not help: the attacker keeps every freed slot.
    long = Deployment(isolation_bound=6, horizon=8)
    r = check_isolation(long, 60, BOUNDED)
    assert r.status == "VIOLATED" and r.trace is not None and r.trace.violation_slot == 5
    assert replay_isolation(long, r.trace).ok


@pytest.mark.parametrize(("clusters", "capacity", "tight"), [(2, 64, 63), (3, 8, 3)])
def test_the_largest_isolating_quota_is_pinned(clusters: int, capacity: int, tight: int) -> None:
    """OLAF: the others hold at most (clusters - 1) * quota; one slot must stay free."""
    workers = 8 if clusters == 2 else 3
    base = dict(workers=workers, clusters=clusters, capacity=capacity, horizon=6)
    assert check_isolation(Deployment(**base, cluster_quota=tight), 60, ALL_T).status == "VERIFIED"
    over = Deployment(**base, cluster_quota=tight + 1)
    r = check_isolation(over, 60, BOUNDED)
    assert r.status == "VIOLATED" and r.trace is not None
    if quota_supported():
        assert replay_isolation(over, r.trace).ok


@pytest.mark.parametrize(("quota", "capacity", "clusters"), [(2, 6, 2), (1, 6, 3), (3, 7, 3)])
def test_fifo_bound_is_tight(quota: int, capacity: int, clusters: int) -> None:
    """FIFO: A + 2 verified for all T, A + 1 refuted, by both engines, at the same slot."""
    attackers = min(capacity, (clusters - 1) * quota)
    bound = attackers + 2
    r = check_isolation(fifo(bound, quota, capacity, clusters), 60, ALL_T)
    assert r.status == "VERIFIED" and r.scope == "unbounded", r.reason
    under = fifo(bound - 1, quota, capacity, clusters)
    r = check_isolation(under, 60, BOUNDED)
    assert r.status == "VIOLATED" and r.trace is not None
    found = search_isolation(under)
    assert found.status == "violated" and found.depth == r.trace.violation_slot
    if quota_supported():
        report = replay_isolation(under, r.trace)
        assert report.ok, report.summary()


@needs_quota
def test_quota_traces_replay_on_the_reference_queue() -> None:
    dep = fifo(3)
    r = check_isolation(dep, 60, BOUNDED)
    assert r.trace is not None
    # Some refusal is the quota's, not a full ring: the reference must apply it.
    refused = [e for s in r.trace.slots for e in s.events
               if e.kind == "update" and e.outcome == "DROPPED_FULL" and e.occupied < 6]
    assert refused
    assert replay_isolation(dep, r.trace).ok
    edited = json.loads(json.dumps(r.trace.to_dict()))
    edited["slots"][-1]["events"][-1]["occupied"] += 1
    from verification.trace import Trace

    assert not replay_isolation(dep, Trace.from_dict(edited)).ok


def test_quota_free_replay_needs_nothing_from_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without cluster_quota in the reference, a quota trace is skipped (with the reason),
    and the no-quota violation still replays."""
    monkeypatch.setattr(isolation_replay, "quota_supported", lambda: False)
    trace = check_isolation(fifo(3), 60, BOUNDED).trace
    assert trace is not None
    report = replay_isolation(fifo(3), trace)
    assert report.skipped and "cluster_quota" in report.skipped and not report.ok
    dep = Deployment(workers=4, capacity=4, horizon=4, warmup=0)
    trace = check_isolation(dep, 60, BOUNDED).trace
    assert trace is not None and replay_isolation(dep, trace).ok


def test_the_lemmas_are_inductive() -> None:
    for dep in (Deployment(cluster_quota=32), Deployment(), fifo(4), fifo(4, 1, 6, 3),
                Deployment(workers=4, capacity=5, cluster_quota=2, pull_rate=Fraction(3, 2))):
        assert lemmas_inductive(dep, 0) is True


@needs_quota
@pytest.mark.parametrize("mode", ["olaf", "fifo"])
def test_reference_behaviours_stay_within_the_proved_bound(mode: str) -> None:
    """Random attackers on the reference queue (with the quota): the victim's longest run
    of slots without getting in stays below the verified bound, and the Simulator (the
    model's rules with workers and blocks) predicts every outcome."""
    rng = random.Random(28)
    dep = Deployment(workers=4, capacity=6, cluster_quota=2, mode=mode,
                     isolation_bound=1 if mode == "olaf" else 4)
    worst = 0
    for _ in range(30):
        queue = OlafQueue(QueueConfig(capacity=6, values=4, max_clusters=2, max_blocks=7,
                                      mode=Mode.OLAF if mode == "olaf" else Mode.FIFO,
                                      cluster_quota=2))
        sim = Simulator(dep, 0)
        run = 0
        for t in range(12):
            msgs = [(rng.choice([0, 0, 1, 2, 4]), p) for p in rng.sample([True, False, False], 3)]
            events = sim.slot(t, msgs)
            for e in events:
                raw = isolation_replay._datagram(MsgType.UPDATE if e.kind == "update" else MsgType.PULL,
                                                 e.worker or 0, e.cluster or 0, e.block or 0, t)
                r = queue.process(decode([raw], 4))[0].headers[0]
                if e.kind == "update":
                    assert Outcome(int(r["outcome"])).name == e.outcome
                assert queue.occupied == e.occupied
            got = any(e.kind == "update" and e.cluster == 0 and e.outcome != "DROPPED_FULL"
                      for e in events)
            run = 0 if got else run + 1
            worst = max(worst, run)
    assert worst < dep.isolation_bound


def _patch(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, old: str, new: str) -> None:
    """Replace ``owner.name`` by its source with ``old`` -> ``new`` (a mutant)."""
    func = getattr(owner, name)
    source = textwrap.dedent(inspect.getsource(func))
    assert source.count(old) == 1, f"mutation site not found in {name}: {old!r}"
    namespace = dict(vars(inspect.getmodule(func)))
    exec(compile(source.replace(old, new), f"<mutant {name}>", "exec"), namespace)  # noqa: S102
    monkeypatch.setattr(owner, name, namespace[name])


def _half_quota_verified() -> None:
    assert check_isolation(Deployment(cluster_quota=32, horizon=6), 60, ALL_T).status == "VERIFIED"


def _fifo_tight() -> None:
    assert check_isolation(fifo(3), 60, BOUNDED).status == "VIOLATED"
    assert check_isolation(fifo(4), 60, ALL_T).scope == "unbounded"


def _no_quota_searched() -> None:
    assert search_isolation(Deployment(horizon=4, warmup=0)).status == "violated"


def _replays() -> None:
    dep = fifo(3)
    trace = check_isolation(dep, 60, BOUNDED).trace
    # Through the module: the mutant replaces the module's function.
    assert trace is not None and isolation_replay.replay_isolation(dep, trace).ok


MUTANTS = [
    # The quota ignored for the other clusters, in both engines.
    ("attackers-unlimited", isolation, "attacker_quota",
     "return min(dep.capacity, (dep.clusters - 1) * dep.quota)", "return dep.capacity",
     _half_quota_verified),
    # The victim's own quota ignored in the Z3 encoding only.
    ("victim-quota-ignored", isolation.IsolationModel, "add_slot",
     "z3.ULT(self.vic, dep.quota)", "z3.BoolVal(True)", _fifo_tight),
    # The attackers' fill capped by the room only, not by their quota, in the encoding.
    ("fill-quota-ignored", isolation.IsolationModel, "add_slot",
     "z3.ULE(x, self._c(attacker_quota(dep)) - (self.occ - self.vic))", "z3.BoolVal(True)",
     _half_quota_verified),
    # A PULL that forgets the victim's slot: the lemma check must refuse the model.
    ("pop-keeps-victim", isolation.IsolationModel, "add_slot",
     "z3.And(pop, head), self.vic - one", "z3.BoolVal(False), self.vic - one", _half_quota_verified),
    # The search without attacker UPDATEs after the slot's last message... or anywhere.
    ("search-no-attacker", isolation, "_image",
     "if attacker_may_enqueue(dep, ring):", "if False:", _no_quota_searched),
    # The replay without the quota: the reference queue is another queue.
    ("replay-without-quota", isolation_replay, "replay_isolation",
     'extra["cluster_quota"] = dep.quota', "pass", _replays),
]


@pytest.mark.parametrize(("name", "owner", "attr", "old", "new", "killer"), MUTANTS,
                         ids=[m[0] for m in MUTANTS])
def test_mutant_is_killed(name: str, owner: Any, attr: str, old: str, new: str, killer: Any,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    if name == "replay-without-quota" and not quota_supported():
        pytest.skip("the reference QueueConfig has no cluster_quota yet")
    killer()  # passes on the real code
    _patch(monkeypatch, owner, attr, old, new)
    with pytest.raises(AssertionError):
        killer()


def test_cluster_quota_is_validated(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--cluster-quota", "0"], ["--cluster-quota", "65"],
                ["--capacity", "4", "--cluster-quota", "5", "--property", "isolation"],
                ["--property", "isolation", "--clusters", "1", "--workers", "2"],
                ["--property", "isolation", "--isolation-bound", "0"],
                ["--mode", "fifo", "--cluster-quota", "2", "--property", "fairness"]):
        assert main(bad) == EXIT_USAGE, bad
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("verify-aom: error: "), err
    with pytest.raises(ConfigError):
        Deployment(cluster_quota=65)
    assert Deployment().quota == 64 and Deployment(cluster_quota=1).quota == 1


def test_cli_isolation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--property", "isolation", "--cluster-quota", "32", "--json",
                 "--timeout", "60"]) == EXIT_VERIFIED
    doc = json.loads(capsys.readouterr().out)
    (entry,) = doc["results"]
    assert entry["property"] == "isolation" and entry["scope"] == "unbounded"
    assert doc["deployment"]["cluster_quota"] == 32
    assert main(["--property", "isolation", "--timeout", "60"]) == EXIT_VIOLATED
    out = capsys.readouterr().out
    assert "isolation       VIOLATED" in out and "replay: reproduced" in out
    assert "w4c1b63:ENQ" in out  # the other cluster's 64th block takes the last slot
