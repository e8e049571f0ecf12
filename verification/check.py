"""Checking one property of one deployment: pick the encoding, run it, state the scope.

``verification.model`` holds the explicit encoding and the base every encoding
shares; ``segments`` and ``counting`` refine it. This module is the only one that
knows all of them, so the imports run one way (check -> encodings -> model).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace

from verification.ceiling import check_ceiling
from verification.config import ISOLATION, Deployment, quota_unsupported
from verification.counting import CountingModel
from verification.isolation import check_isolation
from verification.model import ENGINES, FAIRNESS_CAP, AomModel, Options
from verification.replay import realize_rewards
from verification.segments import SegmentModel
from verification.sending import probe_gap
from verification.solving import CheckResult, DeadlineExceeded
from verification.unbounded import describe_open, search
from verification.unbounded_system import Unsupported, unsupported_reason


def segments_apply(dep: Deployment) -> bool:
    """True when the segment encoding is exact for ``dep``: OLAF mode without a reward
    threshold (every UPDATE that meets its cluster's slot merges or replaces), the exact
    PULL schedule, every worker updating every slot."""
    return (dep.mode == "olaf" and dep.rewards == "merge" and not dep.pull_jitter
            and not dep.staggered)


def rewards_irrelevant(dep: Deployment, prop: str) -> bool:
    """True when no reward decision can change ``prop``'s verdict, so ``dep`` may be
    checked as ``rewards=merge`` (see README, "Rewards"):

    * FIFO mode never compares rewards, and neither do clusters of one worker (an UPDATE
      meeting its cluster's slot meets its own slot with ``agg_count == 1``: REPLACED by
      rule 1, which comes before any reward comparison);
    * starvation: a reward decision only picks MERGED, REPLACED or DROPPED_REWARD for an
      UPDATE whose cluster already has a slot, and none of them changes the occupancy,
      the ring or the active clusters, so no ACK's feedback and no send; starvation reads
      only the sends and the occupancy;
    * ``unbeaten``: for fairness every worker is unbeaten, which leaves no decision but
      MERGED; for responsiveness the worker under test keeps its contributor bit in every
      allowed decision (its update merges or replaces, a slot holding it merges or drops
      the other's), exactly as under ``merge``, and no other worker's send depends on
      rewards."""
    return (dep.rewards == "merge" or dep.mode == "fifo" or prop == "starvation"
            or dep.rewards == "unbeaten" or dep.workers == dep.clusters)


def as_checked(dep: Deployment, prop: str) -> Deployment:
    """``dep`` as the fast encodings and the all-T search see it: ``rewards=merge``
    where the rewards cannot matter (``rewards_irrelevant``)."""
    if dep.rewards != "merge" and rewards_irrelevant(dep, prop):
        return replace(dep, rewards="merge")
    return dep


def build_model(dep: Deployment, prop: str, options: Options | None = None,
                aom_cap: int | None = None) -> AomModel:
    opt = options or Options()
    if opt.engine not in ENGINES:
        raise ValueError(f"unknown engine {opt.engine!r}")
    engine = opt.engine
    fast = as_checked(dep, prop)
    if engine == "auto":
        engine = "segments" if segments_apply(fast) else "explicit"
        # The explicit encoding asked for by name keeps every reward decision (a
        # cross-check of rewards_irrelevant); chosen automatically it need not.
        dep = fast
    if engine == "counting":
        if prop == "starvation":
            raise ValueError("the counting encoding checks fairness and responsiveness only")
        return CountingModel(fast, prop, opt, aom_cap)
    if engine == "segments":
        return SegmentModel(fast, prop, opt, aom_cap)
    return AomModel(dep, prop, opt, aom_cap)


def initial_cap(dep: Deployment, prop: str) -> int:
    """AoM counters saturate at a cap that keeps them narrow: responsiveness needs
    ``bound + 1`` (exact for "> bound"), starvation does not read AoM, fairness starts
    small and is widened while a counterexample touches the cap."""
    if prop == "responsiveness":
        return dep.aom_bound + 1
    if prop == "starvation":
        return 1
    return FAIRNESS_CAP


def check_property(dep: Deployment, prop: str, timeout_s: float | None = None,
                   options: Options | None = None,
                   progress: Callable[[int], None] | None = None) -> CheckResult:
    """Build the model of ``dep`` and ask Z3 for a violation of ``prop`` (bounded to
    the horizon). The counterexample's AoM values are the true ones."""
    if prop == ISOLATION:
        return check_isolation(dep, timeout_s, options, progress)
    reason = quota_unsupported(dep)
    if reason is not None:
        raise ValueError(reason)
    start = time.monotonic()
    cap = initial_cap(dep, prop)
    opt = options or Options()
    if timeout_s is not None:
        opt = replace(opt, deadline=start + timeout_s)
    while True:
        left = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - start))
        try:
            model = build_model(dep, prop, opt, cap)
        except DeadlineExceeded:
            return CheckResult(prop, "UNKNOWN", time.monotonic() - start,
                               reason=f"timeout after {timeout_s:g} s while building the model",
                               assumptions=assumptions(dep, prop))
        result = model.check(left, progress)
        if result.trace is None or not model.saturated(result.trace) or prop != "fairness":
            break
        cap *= 2
    result.seconds = time.monotonic() - start
    result.size["aom_cap"] = model.aom_cap
    result.engine = model.ENGINE
    result.assumptions = assumptions(dep, prop)
    if prop == "starvation" and dep.feedback == 3 and dep.sender != "always":
        _rests_on_the_ceiling(result)
    if (result.trace is not None and dep.rewards != "merge" and dep.mode == "olaf"
            and not realize_rewards(result.trace)):
        result.status = "UNKNOWN"
        result.reason = (f"the solver's trace needs reward decisions that no concrete "
                         f"rewards produce (rewards={dep.rewards} over-approximates): "
                         + result.reason)
        result.trace = None
    if result.status == "VERIFIED" and opt.all_t:
        budget = time.monotonic() + opt.all_t_budget
        _search_all_t(dep, prop, result,
                      budget if opt.deadline is None else min(budget, opt.deadline))
        result.seconds = time.monotonic() - start
    return result


def _rests_on_the_ceiling(result: CheckResult) -> None:
    """Revision 3's starvation reads the loss ceiling only as ``L_min <= L <= 1`` (a probe
    at ``L`` is an opportunity): prove that (``ceiling.check_ceiling("bounds")``, for all
    T and every loss pattern) and say so. A ceiling that breaks it turns a VERIFIED into
    VIOLATED: a worker whose blocks are lost reaches ``L < L_min`` and probes below it (the
    ceiling's counterexample step is the reason; a slot-model VIOLATED stays as it is, more
    decisions fall below ``L_min`` with a lower ceiling, not fewer)."""
    bounds = check_ceiling("bounds")
    result.size["ceiling_bounds"] = bounds.status
    if bounds.status == "VERIFIED":
        if result.status == "VERIFIED":
            result.reason += ("; with the loss ceiling L_min <= L <= 1 proved for all T under "
                              "any loss (verification.ceiling)")
        return
    if result.status == "VERIFIED":
        result.status = "VIOLATED"
        result.reason = ("the loss ceiling falls below L_min, so a probe at P_s = L is no "
                         f"send opportunity: {bounds.detail}")


ALL_T_ASSUMPTION = ("every slot from an empty queue (for all T: every state reachable after "
                    "the warm-up was enumerated and checked)")


def _search_all_t(dep: Deployment, prop: str, result: CheckResult, deadline: float | None) -> None:
    """Try to lift a bounded VERIFIED to every horizon (``verification.unbounded``):
    closed -> scope ``unbounded``; a violation beyond the horizon or an open search
    keeps the bounded scope and says so; a violation inside the horizon contradicts
    the bounded proof and makes the verdict UNKNOWN."""
    try:
        searched = as_checked(dep, prop)
        reason = unsupported_reason(searched)
        if reason is not None:
            raise Unsupported(reason)
        found = search(searched, prop, deadline=deadline)
    except Unsupported as e:
        result.reason += f"; not for all T: {e}"
        result.unbounded = {"engine": "explicit-state", "status": "unsupported", "reason": str(e)}
        return
    result.unbounded = found.to_dict()
    first = 0 if prop == "starvation" else dep.warmup
    if found.status == "closed":
        result.scope = "unbounded"
        result.reason += (f"; for all T: the reachable state set closed at slot {found.depth} "
                          f"({found.states} states from slot {first} on, none violating"
                          + (f"; searched with {found.abstraction}" if found.abstraction else "")
                          + ")")
        result.assumptions = [ALL_T_ASSUMPTION, *result.assumptions[1:]]
    elif found.status == "violated" and found.depth >= dep.horizon:
        result.reason += (f"; NOT for all T: the all-T search reaches a violation at slot "
                          f"{found.depth}, beyond the horizon (--horizon {found.depth + 1} "
                          "shows its trace)")
    elif found.status == "violated":
        result.status = "UNKNOWN"
        result.reason = (f"model disagreement: the bounded encoding verified slots up to "
                         f"{dep.horizon - 1} but the all-T search reaches a violation at slot "
                         f"{found.depth}")
    else:
        result.reason += "; " + describe_open(found)


def assumptions(dep: Deployment, prop: str) -> list[str]:
    """What a verdict on ``prop`` for ``dep`` rests on, in words (printed with it)."""
    out = [
        f"slots 0..{dep.horizon - 1} from an empty queue (bounded: nothing is claimed after "
        f"slot {dep.horizon - 1})",
        (f"every worker has one fresh update per slot of {dep.slot_ms:g} ms (one common "
         "period and phase)" if not dep.staggered else
         f"update periods {_per_worker(dep.periods)} slots and phases "
         f"{_per_worker(dep.phases)} (slot {dep.slot_ms:g} ms): a worker has a fresh update in "
         "slots phase, phase + period, ... and sends only in those; skip runs count fresh "
         "updates"),
        MULTI_BLOCK,
        (f"the PS sends exactly floor((t+1)r) - floor(tr) PULLs in slot t, r = "
         f"{float(dep.pull_rate):g} (no stalls, no jitter)" if not dep.pull_jitter else
         f"the PS has sent floor((t+1)r) ± {dep.pull_jitter} PULLs by the end of slot t, r = "
         f"{float(dep.pull_rate):g} (jitter; no longer stalls)"),
        ("messages of a slot reach the switch in any order; every ACK returns within its slot; "
         "any UPDATE may be lost before the switch (a lost UPDATE leaves the queue and the "
         "worker's feedback as a skip does); no reordering"
         if prop == "starvation" and dep.feedback == 3 else
         "messages of a slot reach the switch in any order; every ACK returns within its slot; "
         "no loss or reordering between hosts and switch"),
        f"queue mode {dep.mode} fixed for the run",
    ]
    out.append(_rewards_assumption(dep, prop))
    if dep.sender == "always":
        out.append("workers always send (P_s = 1)")
    else:
        pg = probe_gap(dep)
        rule = ("DESIGN.md §4 revision 3: P_s = min(N x Q_free + alpha e^(-beta D), L), "
                "Q_free = 1 - util/255 with util from the ACK'd cluster's room_c (quota "
                f"{dep.quota}), N = max(active, 1), probes at L; no loss in this model, so every "
                "update is answered and L stays 1"
                if dep.send_rule == "design" and dep.feedback == 3 and prop != "starvation" else
                "DESIGN.md §4 revision 3: P_s = min(N x Q_free + alpha e^(-beta D), L), "
                "Q_free = 1 - util/255 with util from the ACK'd cluster's room_c (quota "
                f"{dep.quota}), N = max(active, 1), probes at L; any UPDATE may be lost (sends "
                "are free), and L_min <= L <= 1 (verification.ceiling, proved for every loss "
                "pattern)"
                if dep.send_rule == "design" and dep.feedback == 3 else
                "DESIGN.md §4 revision 2: Q_free / N, Q_free = 1 - util/255 from the global "
                "occupancy, N = max(active, 1)"
                if dep.send_rule == "design" else
                "legacy rule: Q_free = capacity * (1 - util/255), N = max(active, 1), no expiry")
        ttl = ("" if pg is None else
               f"; feedback older than {dep.feedback_ttl_ms:g} ms expires and the worker "
               f"probes (forced send {pg} slots after its last ACK)")
        out.append(f"send rule {rule}, alpha {dep.alpha:g}, beta {dep.beta:g}{ttl}; a send is "
                   "forced only where P_s = 1 for every timing in the slot, otherwise the coin "
                   "may fall either way")
    if prop in ("fairness", "responsiveness") and dep.max_skip is not None:
        who = "every worker" if prop == "fairness" else "the worker under test"
        unit = "fresh updates" if dep.staggered else "slots"
        out.append(f"{who} keeps sending: skips at most {dep.max_skip} {unit} in a row "
                   "(an assumption on the coin flips; the send rule alone allows longer runs)")
    if prop == "fairness":
        out.append(f"checked from slot {dep.warmup} (warm-up)")
    if prop == "responsiveness":
        out.append(f"checked from slot {dep.warmup} (warm-up); other workers skip whenever "
                   "their P_s < 1")
    if prop == "starvation" and dep.feedback == 3:
        unit = "fresh updates" if dep.staggered else "slots"
        out.append(f"a decision is a send opportunity when P_s >= L_min = 0.05 at every instant "
                   f"of its slot; bound {dep.starvation_limit} {unit} of decisions that may fall "
                   "below, whether the queue has room or not")
    elif prop == "starvation":
        unit = "skipped fresh updates in a row" if dep.staggered else "slots"
        out.append(f"'room': the queue is not full at the start of the slot; bound "
                   f"{dep.starvation_limit} {unit}")
    if dep.aliasing:
        out.append("more than 32 workers in a cluster: contributor bits alias and the PS "
                   "credits all aliases")
    if math.isinf(dep.feedback_ttl_ms) and dep.send_rule == "design":
        out.append("feedback never expires (feedback-ttl-ms = inf)")
    return out


MULTI_BLOCK = (
    "each update is one block (block_id 0); multi-block updates are not modelled: every "
    "block is its own UPDATE with its own [cluster][block] index key, ACK and outcome, so "
    "the queue could hold C x blocks slots and one block be dropped while another merges, "
    "and DESIGN.md §5 credits a worker on any DATA carrying its bit, so one block would "
    "count as the whole update received")


def _per_worker(value: int | tuple[int, ...]) -> str:
    return str(value) if isinstance(value, int) else ",".join(map(str, value))


def _rewards_assumption(dep: Deployment, prop: str) -> str:
    """The reward line of the assumptions: what is assumed and, where the rewards
    cannot change the verdict, why."""
    if dep.mode == "fifo":
        return "rewards: never compared (FIFO mode), so any rewards and threshold"
    if dep.workers == dep.clusters:
        return ("rewards: never compared (one worker per cluster: its update only meets its "
                "own slot, REPLACED by rule 1), so any rewards and threshold")
    if dep.rewards == "merge":
        return ("rewards: no threshold set yet, or every reward within the threshold of every "
                "other (--rewards merge): every compatible update merges")
    if prop == "starvation":
        return ("rewards: any rewards and any threshold, e.g. the controller's "
                "0.15 x |mean reward| (starvation does not depend on them: no reward decision "
                "changes the occupancy, so no ACK and no send)")
    if dep.rewards == "any":
        return ("rewards: any rewards and any threshold, e.g. the controller's "
                "0.15 x |mean reward|, changing during the run or not (merge, replace or drop "
                "chosen freely)")
    if prop == "fairness":
        return ("rewards: no worker is ever out-rewarded (--rewards unbeaten: every reward "
                "within the threshold of every other it meets), so every compatible update "
                "merges")
    return ("rewards: the worker under test is never out-rewarded (--rewards unbeaten): no "
            "update it meets in the queue has a reward the threshold or more above its own, so "
            "its update is never DROPPED_REWARD and no other worker REPLACES a slot holding its "
            "contribution; all other rewards and the threshold unknown")
