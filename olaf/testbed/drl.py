"""The main job's DRL run across a ``Testbed``'s hosts (``olaf testbed run --experiment drl``).

``run_drl`` starts ``olaf.testbed.hosts`` on the PS host and on every worker host (and
``bmv2_topologies.relay`` on relay hosts), waits until every worker holds the PS's
first weights, starts them together, feeds the PS's reward reports to the control
plane's ``ThresholdLoop`` (which sets every switch's threshold over P4Runtime), samples
the switches' counters, and stops at the duration or the target return. The result is an
``olaf.drl.runner.RunResult``, so ``olaf.drl.report`` writes the same CSV/JSON files and
plots as ``olaf run``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bmv2_topologies.experiment import (
    LineReader,
    pull_address,
    python_module,
    start_relays,
)
from bmv2_topologies.testbed import Testbed, TestbedError
from olaf.testbed.hosts import config_json
from worker_transport.protocol import OLAF_PORT

SAMPLE_PERIOD = 0.5
PS_STOP_GRACE = 20.0
"""Seconds the PS gets to stop its receiver and write its metrics after SIGTERM."""
PROCESS_STOP_GRACE = 20.0
"""Seconds each worker and relay gets after SIGTERM (a loaded 2-core machine is slow)."""
COUNTER_PERIOD = 2.0
"""Seconds between counter reads over P4Runtime, on a thread of their own: on a loaded
machine a session can take a second, which must not stall the sampling loop."""


def run_drl(testbed: Testbed, cfg: Any, *, progress: Callable[[Any], None] | None = None,
            ready_timeout: float = 180.0) -> Any:
    """The main job's experiment across the testbed's hosts; returns a ``RunResult``."""
    from control_plane.threshold import ThresholdLoop
    from olaf.drl.runner import RunResult, Snapshot

    topo = testbed.topology
    workers = topo.workers
    if cfg.workers != len(workers):
        raise ValueError(f"the config has {cfg.workers} workers, the topology {len(workers)}")
    out = testbed.out
    config_path = out / "run_config.json"
    config_path.write_text(config_json(cfg))
    go = out / "go"
    go.unlink(missing_ok=True)
    npz = out / "ps_metrics.npz"
    conf = ["--config", str(config_path), "--go", str(go)]
    ps = testbed.spawn("drl-ps", python_module(
        "olaf.testbed.hosts", "ps", *conf, "--pull-from", pull_address(testbed, topo.ps.name),
        "--workers", ",".join(h.ip for h in workers), "--npz", str(npz)), host=topo.ps.name)
    testbed.wait_for_line(ps, "ready", ready_timeout)
    # The PS's pull rate is the bottleneck; leaves drain at their share of it, not faster,
    # so that idle PULLs do not eat the CPU the (software) switches need.
    relays = start_relays(testbed, cfg.pull_rate / max(len(topo.relays), 1), cfg.values, cfg.frac_bits)
    procs = [
        testbed.spawn(f"drl-worker{h.worker_id}", python_module(
            "olaf.testbed.hosts", "worker", *conf, "--worker-id", str(h.worker_id),
            "--ps", f"{topo.ps.ip}:{OLAF_PORT}"), host=h.name)
        for h in workers
    ]
    deadline = time.monotonic() + ready_timeout
    for p in procs:
        testbed.wait_for_line(p, "ready", max(1.0, deadline - time.monotonic()))

    result = RunResult(cfg)
    readers = {p.name: LineReader(p) for p in [ps, *procs]}
    recent: deque[float] = deque(maxlen=cfg.target_window)
    steps: dict[str, int] = {}
    sent: dict[str, int] = {}
    skipped: dict[str, int] = {}
    ps_state = {"version": 0, "applied": 0, "aom": math.nan}
    loop = ThresholdLoop(testbed.control, floor=cfg.threshold_floor,
                         interval=cfg.controller_interval, fraction=cfg.threshold_fraction)
    first_hop = sorted({topo.switch_of(h.name)[0] for h in workers})
    outcomes: dict[str, int] = {}
    occupied = [0]
    sampler_stop = threading.Event()
    counter_errors: list[str] = []

    def sample_counters() -> None:
        nonlocal outcomes
        while True:
            try:
                counters = testbed.control.counters()
                outcomes = sum_outcomes(counters, first_hop)
                occupied[0] = sum((counters[s].get("queue") or {}).get("occupied", 0) for s in first_hop)
            except (ConnectionError, RuntimeError) as e:  # one missed sample; keep going
                counter_errors.append(str(e))
            if sampler_stop.wait(COUNTER_PERIOD):
                return

    sampler = threading.Thread(target=sample_counters, name="olaf-testbed-counters", daemon=True)
    go.touch()
    t0 = time.time()
    loop.start()
    sampler.start()

    def absorb() -> None:
        nonlocal t0
        for name, reader in readers.items():
            for line in reader.lines():
                kind, _, rest = line.partition(" ")
                f = rest.split()
                if kind == "episode" and len(f) == 3:
                    ret = float(f[1])
                    result.episodes.append((float(f[0]) - t0, sum(steps.values()),
                                            int(name[len("drl-worker"):]), ret, int(f[2])))
                    recent.append(ret)
                elif kind == "progress" and name == "drl-ps" and len(f) == 3:
                    ps_state.update(version=int(f[0]), applied=int(f[1]), aom=float(f[2]))
                elif kind == "progress" and len(f) == 3:
                    steps[name], sent[name], skipped[name] = int(f[0]), int(f[1]), int(f[2])
                elif kind == "rewards" and f:
                    loop.report(float(f[0]))
                elif kind == "start" and f:
                    t0 = float(f[0])

    try:
        next_sample = time.time()
        while True:
            now = time.time()
            absorb()
            elapsed = now - t0
            reached = (cfg.target_reward is not None and len(recent) == cfg.target_window
                       and float(np.mean(recent)) >= cfg.target_reward)
            if reached and result.time_to_target is None:
                result.time_to_target, result.steps_to_target = elapsed, sum(steps.values())
            if now >= next_sample:
                last = loop.history[-1].threshold if loop.history else None
                snap = Snapshot(
                    elapsed=elapsed, env_steps=sum(steps.values()), episodes=len(result.episodes),
                    mean_return=float(np.mean(recent)) if recent else math.nan,
                    aom_ms=ps_state["aom"], occupied=occupied[0], capacity=cfg.capacity,
                    outcomes=dict(outcomes),
                    model_version=ps_state["version"], blocks_applied=ps_state["applied"],
                    threshold=last, updates_sent=sum(sent.values()),
                    updates_skipped=sum(skipped.values()))
                result.timeline.append(snap)
                if progress is not None:
                    progress(snap)
                next_sample = now + SAMPLE_PERIOD
            if reached and cfg.stop_at_target:
                result.stopped_by = "target"
                break
            if elapsed >= cfg.duration:
                result.stopped_by = "duration"
                break
            dead = [p for p in [ps, *relays, *procs] if p.popen.poll() is not None]
            if dead:
                raise TestbedError(f"{dead[0].name} exited with {dead[0].popen.returncode}:\n"
                                   f"{dead[0].output()[-2000:]}")
            time.sleep(0.05)
        result.wall_time = time.time() - t0
    finally:
        loop.stop()
        sampler_stop.set()
        if sampler.is_alive():
            sampler.join()
        # The PS first: AoM is sampled up to the end of the run, not through the shutdown.
        begin = time.monotonic()
        testbed.stop(ps, grace=PS_STOP_GRACE)
        testbed.stop_all([*relays, *procs], grace=PROCESS_STOP_GRACE)
        stop_s = round(time.monotonic() - begin, 3)
        absorb()
    if not ps.final():
        raise TestbedError(f"drl-ps ended ({ps.popen.returncode}) without its final line:\n"
                           f"{ps.output()[-2000:]}")
    finals = [p.final() or {} for p in procs]
    result.senders = finals
    result.env_steps = sum(f.get("env_steps", 0) for f in finals) or sum(steps.values())
    ps_final = ps.final() or {}
    result.receiver = ps_final.get("receiver", {})
    result.aom = ps_final.get("aom", {})
    result.model_version = ps_final.get("model_version", ps_state["version"])
    result.blocks_applied = ps_final.get("blocks_applied", ps_state["applied"])
    result.num_parameters = ps_final.get("num_parameters", 0)
    result.num_blocks = ps_final.get("num_blocks", 0)
    if npz.exists():
        with np.load(npz) as z:
            result.aom_t_ms, result.aom_global_ms = z["aom_t_ms"], z["aom_global_ms"]
            result.update_age_ms = z["update_age_ms"]
            result.data = [tuple(row) for row in z["data"].tolist()]
    counters = testbed.control.counters()
    result.switch = {"outcomes": sum_outcomes(counters, first_hop), "per_switch": counters,
                     "relays": {p.name: p.final() for p in relays}, "stop_s": stop_s,
                     "counter_errors": counter_errors, "threshold_errors": loop.errors,
                     "thresholds": [(s.time, s.mean_reward, s.threshold) for s in loop.history]}
    episodes = sorted(result.episodes)
    if episodes:
        returns = [e[3] for e in episodes]
        w = min(cfg.target_window, len(returns))
        result.initial_return = float(np.mean(returns[:w]))
        result.final_return = float(np.mean(returns[-w:]))
    return result


def sum_outcomes(counters: dict[str, dict[str, Any]], switches: list[str]) -> dict[str, int]:
    """UPDATE outcomes summed over ``switches`` (the workers' first hops)."""
    total: dict[str, int] = {}
    for s in switches:
        for k, v in counters[s]["outcomes"].items():
            total[k] = total.get(k, 0) + int(v)
    return total


def write_report(result: Any, out: Path) -> list[Path]:
    """The same metric files and plots as ``olaf run``."""
    from olaf.drl.report import write_metrics, write_plots

    return write_metrics(result, out) + write_plots(result, out)
