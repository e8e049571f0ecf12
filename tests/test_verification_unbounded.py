"""verify-aom's all-T results (issue 19 item 1): the explicit-state search of
``verification.unbounded`` closes the reachable state set, or says why it did not.

* the search, stopped at the horizon, finds the same worst case and first slot as the
  brute force over the reference ``OlafQueue`` of tests/test_verification_harness.py;
* small deployments get VERIFIED for all T (text and JSON say so);
* a deployment that fails only after its horizon stays "up to T", and the slot the
  search names is confirmed by Z3 and the reference queue with a longer horizon;
* mutants that drop part of the state from the search (the AoM, the ACK feedback,
  the skip run) or remember states before the warm-up are each killed by a check here;
* the counted fairness search (``CountedSystem``) equals the per-worker search of the same
  over-approximation slot by slot and at closure, and the reference queue where no window
  is forced; mutants of it that drop state or behaviours are killed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from tests.test_verification_harness import (
    DEPLOYMENTS,
    FIFO,
    RING,
    THROTTLED,
    WINDOWED,
    _patch,
    brute,
    brute_force,
)
from verification import unbounded
from verification.check import check_property
from verification.cli import main
from verification.config import Deployment
from verification.model import Options
from verification.replay import replay
from verification.unbounded import System
from verification.unbounded_system import Unsupported

pytestmark = pytest.mark.timeout(300)

ALL_T = Options(all_t=True)
FIFO_AT_HORIZON = Deployment(**{**FIFO.as_dict(), "fairness_threshold": Fraction(10, 3)})
"""FIFO's worst deviation within its horizon (slots 2..5) is 10/3; it keeps growing."""
LATE = Deployment(**{**RING.as_dict(), "aom_bound": 1, "warmup": 12, "horizon": 14})
"""AoM 2 is reachable from slot 2 on, but only checked from slot 12: by then every state
has been seen before (a search that remembered unchecked states would close at slot 11)."""


def search_matches_brute_force(dep: Deployment, prop: str, reference: tuple[Fraction, int]) -> None:
    """The search stopped after slot T-1 has the reference queue's worst case over the
    checked slots, first reached at the same slot."""
    found = unbounded.search(dep, prop, max_depth=dep.horizon - 1)
    checked = found.worst[dep.warmup:dep.horizon]
    worst = max(checked)
    assert (worst, dep.warmup + checked.index(worst)) == reference, (prop, found.worst)


def check_against_reference(name: str, prop: str) -> None:
    search_matches_brute_force(DEPLOYMENTS[name], prop, brute(name, prop))


def check_windowed() -> None:
    for prop in ("fairness", "responsiveness"):
        search_matches_brute_force(WINDOWED, prop, brute_force(WINDOWED, prop))


@pytest.mark.parametrize(("name", "prop"), [("throttled", "fairness"),
                                            ("throttled", "responsiveness"),
                                            ("ring", "fairness"), ("fifo", "fairness")])
def test_search_matches_the_reference_queue(name: str, prop: str) -> None:
    check_against_reference(name, prop)


def test_search_respects_forced_sends() -> None:
    # WINDOWED: after an ACK the next send is forced (P_s = 1 for one slot).
    check_windowed()


def check_all_t_proof() -> None:
    dep = Deployment(workers=2, horizon=12)  # starvation (bound 10) can fail from slot 11
    for prop in ("fairness", "responsiveness", "starvation"):
        r = check_property(dep, prop, 120, ALL_T)
        assert r.status == "VERIFIED" and r.scope == "unbounded", (prop, r.reason)
        assert r.unbounded is not None and r.unbounded["status"] == "closed"
        assert "for all T" in r.reason and "every slot" in r.assumptions[0]


def test_small_deployment_is_verified_for_all_t() -> None:
    check_all_t_proof()


def test_cli_says_for_all_t(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--workers", "2", "--horizon", "8", "--property", "responsiveness"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "VERIFIED  for all T" in out and "every slot from an empty queue" in out
    assert main([*args, "--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)["results"]
    assert res["scope"] == "unbounded" and res["all_t_search"]["status"] == "closed"
    assert main([*args, "--all-t-timeout", "0"]) == 2
    assert "all-t-timeout" in capsys.readouterr().err


def check_late_violation_is_not_all_t() -> None:
    r = check_property(FIFO_AT_HORIZON, "fairness", 120, ALL_T)
    assert r.status == "VERIFIED" and r.scope == "bounded", r.reason
    assert r.unbounded is not None and r.unbounded["status"] == "violated"
    slot = r.unbounded["depth"]
    assert slot >= FIFO_AT_HORIZON.horizon and "NOT for all T" in r.reason
    # Z3 with a longer horizon and the reference queue confirm the slot the search names.
    longer = Deployment(**{**FIFO_AT_HORIZON.as_dict(), "horizon": slot + 1})
    bad = check_property(longer, "fairness", 120)
    assert bad.status == "VIOLATED" and bad.trace is not None
    assert bad.trace.violation_slot == slot
    assert replay(longer, bad.trace).ok


def test_violation_after_the_horizon_is_reported_up_to_t(capsys: pytest.CaptureFixture[str]) -> None:
    check_late_violation_is_not_all_t()
    args = ["--workers", "3", "--clusters", "1", "--capacity", "1", "--mode", "fifo",
            "--horizon", "6", "--warmup", "2", "--fairness-threshold", "10/3",
            "--property", "fairness"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "VERIFIED  up to T = 6" in out and "NOT for all T" in out and "for all T (" not in out


def check_checked_after_warmup() -> None:
    # The violation is reachable before the warm-up ends and must still be found after it.
    r = unbounded.search(LATE, "responsiveness")
    assert r.status == "violated" and r.depth == LATE.warmup, r.reason
    z = check_property(LATE, "responsiveness", 120)
    assert z.status == "VIOLATED" and z.trace is not None and z.trace.violation_slot == LATE.warmup


def test_states_seen_before_the_warmup_are_checked_after_it() -> None:
    check_checked_after_warmup()


def test_unsupported_deployments_stay_bounded() -> None:
    dep = Deployment(workers=2, clusters=1, horizon=5, warmup=2, rewards="any")
    r = check_property(dep, "responsiveness", 120, ALL_T)
    assert r.status == "VERIFIED" and r.scope == "bounded"
    assert r.unbounded is not None and r.unbounded["status"] == "unsupported"
    assert "not for all T" in r.reason


def test_open_search_reports_the_slots_it_proved() -> None:
    # One slot of search budget is far too little for eight throttled workers.
    r = unbounded.search(Deployment(), "fairness", deadline=0.0)
    assert r.status == "open" and r.depth == -1
    dep = Deployment(workers=2, horizon=8)
    r = check_property(dep, "fairness", 120, Options(all_t=True, all_t_budget=1e-9))
    assert r.scope == "bounded" and r.unbounded is not None and r.unbounded["status"] == "open"


# -- mutants of the search: each must fail one of the checks above ---------------------------

MUTANTS: list[tuple[str, Any, str, str, str, Callable[[], None]]] = [
    ("aom-dropped-from-state", System, "successors",
     "row.append((since, win, aom, True, 0))", "row.append((since, win, 0, True, 0))",
     check_late_violation_is_not_all_t),
    ("ack-feedback-dropped-from-state", System, "successors",
     "win = acks[u] if sent else old[1]", "win = 0", check_windowed),
    ("skip-run-dropped-from-state", System, "successors",
     "nxt = min(since + 1, self.gap_cap)", "nxt = 0",
     lambda: check_against_reference("throttled", "fairness")),
    ("states-remembered-before-warmup", unbounded, "_search_one",
     "if not bounded and t >= first:", "if not bounded:", check_checked_after_warmup),
    ("queue-dropped-from-state", System, "successors",
     "raw.add((q, tuple(row)))", "raw.add(((), tuple(row)))",
     lambda: check_against_reference("throttled", "fairness")),
]


@pytest.mark.parametrize(("name", "owner", "attr", "old", "new", "killer"), MUTANTS,
                         ids=[m[0] for m in MUTANTS])
def test_search_mutant_is_killed(name: str, owner: Any, attr: str, old: str, new: str,
                                 killer: Callable[[], None],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    killer()  # passes on the real code
    _patch(monkeypatch, owner, attr, old, new)
    with pytest.raises(AssertionError):
        killer()


def test_three_workers_close_for_all_t() -> None:
    # THROTTLED's throttled rule with a third worker: still closes quickly.
    dep = Deployment(**{**THROTTLED.as_dict(), "workers": 3})
    r = unbounded.search(dep, "fairness")
    assert r.status in ("closed", "violated")
    z = check_property(Deployment(**{**dep.as_dict(), "horizon": max(dep.horizon, r.depth + 1)}),
                       "fairness", 120)
    assert (z.status == "VIOLATED") == (r.status == "violated"), (r.reason, z.reason)


def test_search_finds_the_legacy_rules_starvation_where_z3_does() -> None:
    # Without expiry (the old §4 rule) the slots since the last send saturate instead of
    # ending in a probe: the search must still find the starvation at Z3's slot.
    from tests.test_verification import LEGACY_TOML
    from verification.config import load_toml

    values = load_toml(LEGACY_TOML)
    values.pop("property", None)
    dep = Deployment(**values)
    r = unbounded.search(dep, "starvation")
    z = check_property(dep, "starvation", 120)
    assert z.status == "VIOLATED" and z.trace is not None
    assert r.status == "violated" and r.depth == z.trace.violation_slot
    assert unbounded.search(Deployment(**{**values, "send_rule": "design"}),
                            "starvation").status == "closed"


HALF = Deployment(workers=2, clusters=2, capacity=1, pull_rate=Fraction(1, 2), horizon=7, warmup=2,
                  max_skip=1, aom_bound=20)
"""One PULL every other slot: the PULL schedule's phase is part of the search."""


@pytest.mark.parametrize("prop", ["fairness", "responsiveness"])
def test_search_follows_a_fractional_pull_rate(prop: str) -> None:
    search_matches_brute_force(HALF, prop, brute_force(HALF, prop))


# -- the over-approximations tried first (other workers free, forced windows ignored) --------

@pytest.mark.parametrize("prop", ["fairness", "responsiveness", "starvation"])
def test_abstract_search_agrees_with_the_exact_one(prop: str) -> None:
    # A closed over-approximation is a proof; a violating one hands over to the exact search,
    # so the verdict (and the slot of a real violation) is the exact search's.
    for dep in (Deployment(workers=3, horizon=12), THROTTLED,
                Deployment(**{**THROTTLED.as_dict(), "aom_bound": 1, "fairness_threshold": 0,
                              "starvation_bound": 0})):
        rough = unbounded.search(dep, prop)
        exact = unbounded.search(dep, prop, abstract=False)
        assert (rough.status, rough.status == "violated" and rough.depth) == \
            (exact.status, exact.status == "violated" and exact.depth), (dep, rough.reason)


def test_default_deployment_closes_for_every_property() -> None:
    # Eight workers: the per-target searches with the others unconstrained close in about a
    # second of CPU (the exact search does not get past slot 2 in minutes); fairness, counted
    # per cluster, in a few seconds (113 742 states; per worker it did not close in 60 s).
    for prop in ("responsiveness", "starvation", "fairness"):
        r = unbounded.search(Deployment(), prop)
        assert r.status == "closed" and "over-approximation" in r.abstraction, (prop, r.reason)
        assert ("counted" in r.abstraction) == (prop == "fairness")


def test_abstraction_keeps_the_targets_credits(monkeypatch: pytest.MonkeyPatch) -> None:
    # The contributor sets keep only the workers whose credits are read, taken from the
    # state (the relabelling moves the worker under test): losing them is caught.
    assert unbounded.search(Deployment(workers=3, horizon=12), "responsiveness").status == "closed"
    _patch(monkeypatch, System, "successors",
           'if workers[u][3] and self.prop != "starvation")',
           "if u == 0 and workers[u][3])")
    rough = unbounded._search_targets(Deployment(workers=3, horizon=12), "responsiveness",
                                      None, None, unbounded.MAX_STATES, free=True)
    assert rough.status == "violated"


# -- the counted search of fairness (workers counted per cluster, clusters exchanged) ---------

COUNTED = [
    Deployment(workers=3, clusters=2, capacity=2, horizon=8, warmup=2),
    Deployment(workers=4, clusters=2, capacity=2, max_skip=1, horizon=8, warmup=2),
    Deployment(workers=4, clusters=2, capacity=2, pull_rate=Fraction(1, 2), horizon=8, warmup=2),
    Deployment(workers=3, clusters=3, capacity=3, max_skip=None, feedback_ttl_ms=30, horizon=8,
               warmup=2),
    Deployment(workers=3, clusters=3, capacity=3, max_skip=1, horizon=8, warmup=2),
]
"""Unequal clusters (2 + 1), two equal ones, a PULL every other slot, three clusters of one
worker whose skip runs only the probe ends (violated at slot 6; the others close), and
three clusters with skip runs of one (where the order new slots join the queue matters)."""


def counted_matches_per_worker(dep: Deployment) -> None:
    """The counted search and the per-worker search of the same over-approximation agree:
    the worst deviation of every slot up to 6, and the closure (or first violating slot)."""
    def per_worker() -> System:
        return System(dep, "fairness", free_window=True)

    counted = unbounded._search_one(unbounded.CountedSystem(dep), "fairness", None, 6, 10**6)
    named = unbounded._search_one(per_worker(), "fairness", None, 6, 10**6)
    assert counted.worst == named.worst, (dep, counted.worst, named.worst)
    counted = unbounded._search_one(unbounded.CountedSystem(dep), "fairness", None, None, 10**6)
    named = unbounded._search_one(per_worker(), "fairness", None, None, 10**6)
    assert (counted.status, counted.depth) == (named.status, named.depth), (dep, counted.reason)


@pytest.mark.parametrize("dep", COUNTED, ids=["unequal", "equal", "half-rate", "probe-only",
                                           "three-clusters"])
def test_counted_search_matches_the_per_worker_search(dep: Deployment) -> None:
    counted_matches_per_worker(dep)


def test_counted_search_matches_the_reference_queue() -> None:
    # THROTTLED leaves P_s < 1 after every ACK (no forced window), so the window
    # over-approximation adds nothing and the counted search is exact here: its worst
    # deviation and first slot equal the brute force over the reference queue.
    system = System(THROTTLED, "fairness")
    assert all(system.window(o, a) == 0 for o in range(1, THROTTLED.capacity + 1)
               for a in range(1, THROTTLED.clusters + 1))
    found = unbounded._search_one(unbounded.CountedSystem(THROTTLED), "fairness", None,
                                  THROTTLED.horizon - 1, 10**6)
    checked = found.worst[THROTTLED.warmup:THROTTLED.horizon]
    worst = max(checked)
    assert (worst, THROTTLED.warmup + checked.index(worst)) == brute("throttled", "fairness")


def test_counted_search_covers_only_what_it_models() -> None:
    for dep, why in ((Deployment(workers=2, capacity=1), "capacity"),
                     (Deployment(workers=2, pull_rate=Fraction(3, 2)), "one PULL"),
                     (Deployment(workers=2, mode="fifo", sender="olaf"), "OLAF mode")):
        assert why in (unbounded.counted_reason(dep) or ""), dep
        with pytest.raises(Unsupported):
            unbounded.CountedSystem(dep)
    # search() falls back to the per-worker system there (RING: one slot, two clusters).
    assert "counted" not in unbounded.search(RING, "fairness").abstraction


COUNTED_MUTANTS: list[tuple[str, str, str, str, Deployment]] = [
    ("pending-credit-dropped", "options", "((0, later, True),) * early",
     "((0, later, False),) * early", COUNTED[1]),
    ("skip-run-dropped", "options", "skipped = min(since + 1, self.since_cap)", "skipped = 0",
     COUNTED[1]),
    ("queue-order-dropped", "canonical", "out.update((order, g) for g in gs if g[0] < g[1])",
     "out.update(((), g) for g in gs if g[0] < g[1])", COUNTED[1]),
    ("opening-order-fixed", "image", "for perm in itertools.permutations(opened):",
     "for perm in (opened,):", COUNTED[4]),
    ("empty-queue-pull-finds-nothing", "image", "heads, rest = (None, *clusters), ()",
     "heads, rest = (None,), ()", COUNTED[0]),
]
"""Each drops part of the state or of the behaviours from the counted search."""


@pytest.mark.parametrize(("name", "attr", "old", "new", "dep"), COUNTED_MUTANTS,
                         ids=[m[0] for m in COUNTED_MUTANTS])
def test_counted_search_mutant_is_killed(name: str, attr: str, old: str, new: str,
                                         dep: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    counted_matches_per_worker(dep)
    _patch(monkeypatch, unbounded.CountedSystem, attr, old, new)
    with pytest.raises(AssertionError):
        counted_matches_per_worker(dep)
