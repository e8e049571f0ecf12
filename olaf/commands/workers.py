"""``olaf workers RUN_DIR add|remove|set N``: grow or shrink a running ``olaf run`` by hand."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from olaf.argtypes import ranged
from olaf.drl.elastic import STATUS_FILE, request_change

HELP = ("add or remove logical workers of a running `olaf run` (through its --out directory), "
        "or show them")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR",
                        help="the running olaf run's --out directory (it holds run.json and "
                        "control/)")
    parser.add_argument("action", choices=("add", "remove", "set", "show"),
                        help="add N inactive workers (lowest ids first), remove N (highest ids "
                        "first), set the active workers to ids 0..N-1, or show them")
    parser.add_argument("count", type=ranged(1), nargs="?", default=None, metavar="N",
                        help="how many workers (not with show)")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the run's answer (default 10)")


def run(args: argparse.Namespace) -> int:

    def fail(message: str, code: int) -> int:
        print(f"olaf workers: error: {message}", file=sys.stderr)
        return code

    status = args.run_dir / STATUS_FILE
    if args.action == "show":
        if args.count is not None:
            return fail("show takes no count", 2)
        if not status.exists():
            return fail(f"{args.run_dir} is not the directory of a run (no {STATUS_FILE})", 2)
        state = json.loads(status.read_text())
        print(f"{len(state['active_workers'])} of {state['max_workers']} workers active: "
              f"{state['active_workers']}; env steps {state['env_steps']:,}, "
              f"restarts {state['restarts']}, processes {state['processes']}")
        return 0
    if args.count is None:
        return fail(f"{args.action} needs a count N", 2)
    if not args.timeout > 0:
        return fail("--timeout must be > 0", 2)
    try:
        reply = request_change(args.run_dir, args.action, args.count, args.timeout)
    except FileNotFoundError as exc:
        return fail(str(exc), 2)
    except TimeoutError as exc:
        return fail(str(exc), 1)
    if not reply.get("ok"):
        return fail(f"the run refused: {reply.get('error')} (active: {reply.get('active')})", 1)
    print(f"{len(reply['active'])} workers active: {reply['active']}")
    return 0
