"""``verify-aom``: prove or refute AoM fairness, responsiveness and starvation-freedom.

Exit codes: 0 every checked property VERIFIED, 1 some property VIOLATED (a
counterexample is printed), 2 bad arguments or an impossible configuration, 3 some
property UNKNOWN (solver timeout, or a counterexample that could not be confirmed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from verification.config import (
    CLI_DEFAULT_FEEDBACK,
    CLI_DEFAULT_REWARDS,
    ISOLATION,
    MODES,
    PROPERTIES,
    REWARD_MODELS,
    SEND_RULES,
    SENDERS,
    ConfigError,
    Deployment,
    isolation_unsupported,
    load_toml,
    quota_unsupported,
)

CEILING = "ceiling"
"""``verification.ceiling``'s three properties of the loss ceiling (by name only)."""
EXIT_VERIFIED = 0
EXIT_VIOLATED = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
DEFAULT_TIMEOUT_S = 300.0


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a one-line error message (no usage dump) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _number(text: str) -> Fraction:
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def build_parser() -> ArgumentParser:
    d = Deployment()
    p = ArgumentParser(
        prog="verify-aom",
        description=(
            "Prove with Z3 that an OLAF deployment keeps Age-of-Model fair across workers "
            "and bounded, or print a trace where it does not. Time is counted in slots "
            "(one worker update period). With no options it checks the default deployment."
        ),
    )
    p.add_argument("config", nargs="?", metavar="DEPLOYMENT.toml",
                   help="TOML file with a [deployment] table (keys as the long options); "
                        "options given on the command line override it")
    g = p.add_argument_group("deployment")
    g.add_argument("--workers", type=int, help=f"workers N (default {d.workers})")
    g.add_argument("--clusters", type=int, help=f"clusters C (default {d.clusters})")
    g.add_argument("--capacity", type=int, help=f"queue slots (default {d.capacity})")
    g.add_argument("--pull-rate", type=_number,
                   help=f"PULLs per slot, e.g. 0.5 or 3/2 (default {d.pull_rate})")
    g.add_argument("--mode", choices=MODES, help=f"queue mode (default {d.mode})")
    g.add_argument("--sender", choices=SENDERS,
                   help="workers' transmission control (default: olaf in olaf mode, "
                        "always in fifo mode)")
    g.add_argument("--alpha", type=float, help=f"P_s exploration weight (default {d.alpha})")
    g.add_argument("--beta", type=float, help=f"P_s decay per ms (default {d.beta})")
    g.add_argument("--slot-ms", type=float, help=f"slot length in ms (default {d.slot_ms:g})")
    g.add_argument("--pull-jitter", type=int,
                   help="the PS's cumulative PULL count may be off the schedule by up to this "
                        "many PULLs (default 0; explicit encoding)")
    g.add_argument("--send-rule", choices=SEND_RULES,
                   help="design: DESIGN.md §4 (free share, feedback expiry, probe; default); "
                        "legacy: the old rule (Q_free in slots, no expiry)")
    g.add_argument("--feedback-ttl-ms", type=float,
                   help=f"feedback expiry in ms, inf = never (default {d.feedback_ttl_ms:g})")
    g.add_argument("--feedback", type=_revision,
                   help=f"DESIGN.md §3 Feedback / §4 revision: 3 = queue_util from the "
                        f"cluster's room_c, P_s = min(N*Q_free + alpha*exp(-beta*D), L), "
                        f"probes at L; 2 = global occupancy, Q_free/N, probes at 1 "
                        f"(default {CLI_DEFAULT_FEEDBACK})")
    g.add_argument("--rewards", choices=REWARD_MODELS,
                   help=f"any: rewards and threshold unknown, e.g. the controller's "
                        f"0.15*|mean reward| (default {CLI_DEFAULT_REWARDS}); merge: no threshold "
                        "set yet / all rewards within it; unbeaten: the workers the property "
                        "is about are never out-rewarded")
    g.add_argument("--cluster-quota", type=int,
                   help="DESIGN.md §3 cluster_quota: the most slots one cluster may hold, "
                        "1..capacity (default capacity: no limit)")
    g.add_argument("--periods", type=_per_worker,
                   help="slots between a worker's fresh updates: one value for all or one per "
                        "worker, e.g. 1,1,2,2 (default 1; explicit encoding)")
    g.add_argument("--phases", type=_per_worker,
                   help="each worker's first slot with a fresh update, 0..period-1: one value "
                        "for all or one per worker (default 0)")
    c = p.add_argument_group("check")
    c.add_argument("--horizon", type=int, help=f"slots T to check (default {d.horizon})")
    c.add_argument("--warmup", type=int,
                   help=f"initial slots exempt from the properties (default {d.warmup})")
    c.add_argument("--fairness-threshold", type=_number,
                   help=f"slots (default {d.fairness_threshold})")
    c.add_argument("--aom-bound", type=int, help=f"slots (default {d.aom_bound})")
    c.add_argument("--max-skip", type=_skip,
                   help=f"assumption: a worker that keeps sending skips at most this many "
                        f"slots in a row; 'none' = only the send rule limits it "
                        f"(default {d.max_skip})")
    c.add_argument("--starvation-bound", type=int,
                   help="starvation: no worker skips more than this many slots in a row while "
                        "the queue has room; under --feedback 3: has more than this many "
                        "decisions in a row that may fall below P_s = L_min "
                        "(default ceil(feedback-ttl / slot))")
    c.add_argument("--isolation-bound", type=int,
                   help=f"isolation: the victim cluster gets an UPDATE into the queue in every "
                        f"window of this many slots (default {d.isolation_bound})")
    c.add_argument("--property", choices=(*PROPERTIES, ISOLATION, CEILING, "both", "all"),
                   default=None,
                   help="which property to check (default all = the three AoM properties; "
                        "both = fairness and responsiveness; isolation: a cluster that keeps "
                        "sending gets into the queue within --isolation-bound slots whatever "
                        "the other clusters send; ceiling: revision 3's loss ceiling under any "
                        "loss, bounds, backoff and recovery, for all T)")
    c.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per property (default {DEFAULT_TIMEOUT_S:g})")
    c.add_argument("--engine", choices=("auto", "counting", "segments", "explicit"),
                   default="auto", help="encoding (default auto: the fastest exact one)")
    c.add_argument("--no-all-t", action="store_true",
                   help="stop at the bounded proof: do not search the reachable state set for "
                        "a result that holds for every horizon")
    c.add_argument("--all-t-timeout", type=float, default=60.0,
                   help="seconds the all-T search may take within --timeout (default 60)")
    c.add_argument("--no-replay", action="store_true",
                   help="do not replay counterexamples through the reference OlafQueue")
    c.add_argument("--dump-smt", metavar="PATH",
                   help="write each property's final query as SMT-LIB 2 to PATH "
                        "(PATH.<property>.smt2)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    return p


def _per_worker(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer or a comma-separated list of "
                                         f"integers: {text!r}") from None


def _revision(text: str) -> int:
    if text not in ("2", "3"):
        raise argparse.ArgumentTypeError(f"must be 2 or 3, got {text!r}")
    return int(text)


def _skip(text: str) -> int | str:
    if text.lower() == "none":
        return "none"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer or 'none': {text!r}") from None


FLAG_FIELDS = ("workers", "clusters", "capacity", "pull_rate", "mode", "sender", "alpha", "beta",
               "slot_ms", "rewards", "horizon", "warmup", "fairness_threshold", "aom_bound",
               "max_skip", "send_rule", "feedback_ttl_ms", "starvation_bound", "pull_jitter",
               "periods", "phases", "cluster_quota", "isolation_bound", "feedback")


def deployment_from_args(args: argparse.Namespace) -> tuple[Deployment, str, float]:
    """The deployment, the property selection and the timeout; ConfigError if impossible."""
    values: dict[str, Any] = load_toml(args.config) if args.config else {}
    prop = values.pop("property", None)
    timeout = values.pop("timeout", None)
    for name in FLAG_FIELDS:
        value = getattr(args, name)
        if value is not None:
            values[name] = value
    values.setdefault("rewards", CLI_DEFAULT_REWARDS)
    # The legacy rule predates revision 2, so it keeps its own feedback unless told.
    values.setdefault("feedback", 2 if values.get("send_rule") == "legacy"
                      else CLI_DEFAULT_FEEDBACK)
    if values.get("max_skip") == "none":
        values["max_skip"] = None
    if isinstance(values.get("feedback_ttl_ms"), str) and values["feedback_ttl_ms"] == "inf":
        values["feedback_ttl_ms"] = float("inf")
    prop = args.property or prop or "all"
    if prop not in (*PROPERTIES, ISOLATION, CEILING, "both", "all"):
        raise ConfigError(f"property must be one of {', '.join(PROPERTIES)}, {ISOLATION}, "
                          f"{CEILING}, both "
                          f"or all, got {prop!r}")
    timeout = args.timeout if args.timeout is not None else timeout
    timeout = DEFAULT_TIMEOUT_S if timeout is None else timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    dep = Deployment(**values)
    # Refused here, with the one-line error and exit code 2, rather than by the engine.
    if prop == CEILING and (dep.feedback != 3 or dep.sender == "always"):
        raise ConfigError("the loss ceiling is revision 3's (--feedback 3) and the §4 sender's "
                          "(--sender olaf)")
    reason = isolation_unsupported(dep) if prop == ISOLATION else quota_unsupported(dep)
    if reason is not None:
        raise ConfigError(reason)
    return dep, prop, float(timeout)


def describe(dep: Deployment) -> str:
    sizes = sorted({len(dep.members(k)) for k in range(dep.clusters)})
    per = "/".join(map(str, sizes))
    return (
        f"{dep.workers} workers in {dep.clusters} clusters ({per} each), capacity "
        f"{dep.capacity}, {dep.mode.upper()} mode, sender {dep.sender}, "
        f"{float(dep.pull_rate):g} PULL/slot (jitter ±{dep.pull_jitter}), slot {dep.slot_ms:g} ms, "
        + (f"periods {_listed(dep.periods)} phases {_listed(dep.phases)}, " if dep.staggered
           else "")
        + f"alpha {dep.alpha:g}, "
        f"beta {dep.beta:g}, send rule {dep.send_rule}, feedback revision {dep.feedback}, "
        f"feedback ttl {dep.feedback_ttl_ms:g} ms, "
        f"rewards={dep.rewards}, cluster quota {dep.quota}; slots {dep.warmup}..{dep.horizon - 1} "
        f"checked, fairness <= {float(dep.fairness_threshold):g}, AoM <= {dep.aom_bound}, "
        f"max skip {dep.max_skip}, starvation bound {dep.starvation_limit}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        dep, prop, timeout = deployment_from_args(args)
    except ConfigError as e:
        print(f"verify-aom: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not args.all_t_timeout > 0:
        print(f"verify-aom: error: all-t-timeout must be a positive number of seconds, got "
              f"{args.all_t_timeout:g}", file=sys.stderr)
        return EXIT_USAGE
    if prop == CEILING:
        return _ceiling(dep, args.json)
    # z3 is slow to import; argument errors above stay fast.
    from verification.model import Options
    from verification.watchdog import run_bounded

    props = {"both": ("fairness", "responsiveness"), "all": PROPERTIES}.get(prop, (prop,))
    results = []
    for name in props:
        dump = f"{args.dump_smt}.{name}.smt2" if args.dump_smt else None
        outcome = run_bounded(dep, name, timeout, Options(engine=args.engine, dump_smt=dump,
                                                           all_t=not args.no_all_t,
                                                           all_t_budget=args.all_t_timeout),
                              replay_trace=not args.no_replay)
        if outcome.error is not None:
            # An engine asked for explicitly that cannot represent this deployment.
            print(f"verify-aom: error: --engine {args.engine}: {outcome.error}", file=sys.stderr)
            return EXIT_USAGE
        result = outcome.result
        entry = result.to_dict()
        report = outcome.replay
        if report is not None:
            entry["replay"] = {"reproduced": report.ok, "messages": report.messages,
                               "mismatches": report.mismatches}
            if report.skipped is not None:
                entry["replay"]["skipped"] = report.skipped
                entry["replay_summary"] = report.summary()
            elif not report.ok:
                result.status = entry["status"] = "UNKNOWN"
                result.reason = entry["reason"] = (
                    f"model/queue disagreement: {report.summary()}")
            else:
                entry["replay_summary"] = report.summary()
        results.append((result, entry))
    statuses = [r.status for r, _ in results]
    code = (EXIT_VIOLATED if "VIOLATED" in statuses
            else EXIT_UNKNOWN if "UNKNOWN" in statuses else EXIT_VERIFIED)
    if args.json:
        doc = {"deployment": dep.as_dict(), "results": [e for _, e in results],
               "exit_code": code}
        print(json.dumps(doc, indent=2))
        return code
    print(f"deployment: {describe(dep)}")
    for result, entry in results:
        scope = ""
        if result.status == "VERIFIED":
            scope = ("for all T " if result.scope == "unbounded"
                     else f"up to T = {dep.horizon} ")
        print(f"{result.prop:<15} {result.status:<9} {scope}({result.seconds:.1f} s, "
              f"{result.engine or 'stopped'}) {result.reason}")
        if result.status == "VERIFIED" and result.assumptions:
            print("  assuming:")
            for line in result.assumptions:
                print(f"  - {line}")
        if result.trace is not None:
            print(result.trace.table())
            if "replay_summary" in entry:
                print(f"replay: {entry['replay_summary']}")
    return code


def _ceiling(dep: Deployment, as_json: bool) -> int:
    """``--property ceiling``: the worker's loss ceiling under any loss (a few hundredths
    of a second, no child process)."""
    from verification.ceiling import CEILING_PROPERTIES, check_ceiling

    alpha = Fraction(dep.alpha).limit_denominator(10**6)
    results = [check_ceiling(p, alpha=alpha) for p in CEILING_PROPERTIES]
    code = EXIT_VERIFIED if all(r.status == "VERIFIED" for r in results) else EXIT_VIOLATED
    if as_json:
        print(json.dumps({"deployment": dep.as_dict(), "exit_code": code, "results": [
            {"property": f"ceiling.{r.prop}", "status": r.status, "scope": "unbounded",
             "reason": r.detail, "counterexample_step": r.step} for r in results]}, indent=2))
        return code
    print("loss ceiling (DESIGN.md §4 revision 3), one worker under any loss:")
    for r in results:
        print(r.line())
    return code


if __name__ == "__main__":
    sys.exit(main())


def _listed(value: int | tuple[int, ...]) -> str:
    return str(value) if isinstance(value, int) else ",".join(map(str, value))
