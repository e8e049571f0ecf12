"""The main job's DRL processes for separate hosts: ``python -m olaf.testbed.hosts
ps|worker ...``, the Mininet-hosts backend's ends of the one training core: the PS applies
DATA through ``PsApply`` (the run's policies, the same as ``olaf run``'s), the workers are
the run's learner (``build_worker``, IMPACT by default) taking turns (``take_turn``).

``olaf run`` (olaf.drl.local) keeps the switch and the PS in one process and hands
weights to the workers through shared memory. Here every role is its own program on
its own Mininet host, and everything crosses the network:

* gradients: workers send UPDATE blocks to the PS's address; the first switch queues
  them and ACKs; the PS PULLs DATA from the switch it is plugged into;
* weights: every ``broadcast_period`` the PS sends the weights as MODEL messages
  (DESIGN.md §1: V values per block, fixed point with ``frac_bits``, ``model_version``
  and ``block_id`` set, ``seq`` the broadcast number) to UDP port 20300 of every
  worker, block by block, spread over half the period (``send_paced``: bmv2 loses bursts);
  switches forward MODEL like any IPv4 packet. A worker loads a version once it has all
  of its blocks, so a lost MODEL packet only delays the next version;
* evaluation: the PS also rewrites its float32 weights into the ``--weights`` file with every
  broadcast; the launcher's ``Evaluator`` reads them (hosts share the file system);
* the reward threshold: the PS prints ``rewards MEAN`` lines (the mean reward of recent
  DATA); the launcher, in the root namespace where the switches' P4Runtime servers are,
  feeds them to the control plane's ``ThresholdLoop``.

Output (line-oriented, read by ``olaf.testbed.drl``): ``ready``; the worker's
``episode TIME RETURN LENGTH`` and ``progress STEPS SENT SKIPPED PROBES P_S_SUM``; the PS's ``rewards``,
``progress VERSION APPLIED AOM_MS`` (then staleness p50/p90/p99 and update age p50/p90/p99
since the previous line) and, on exit, ``final {json}``. Both stop cleanly on
SIGTERM. They start work when the ``--go`` file appears, so that every process's start-up
(importing torch) is not counted as training time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from olaf.algorithm import flat_parameters
from olaf.drl.checkpoint import config_from_dict
from olaf.drl.config import RunConfig
from olaf.drl.controller import RecentRewards
from olaf.drl.core import PsApply, RecentDelivery
from olaf.drl.learners import parameter_server, run_model
from olaf.drl.policies import RunPolicies
from olaf.drl.worker_turn import TX_FIELDS, build_worker, take_turn, tx_totals, worker_seed
from olaf.shutdown import stop_on_signals
from worker_transport.codec import Batch, decode, encode_array
from worker_transport.fixedpoint import from_fixed, join_blocks, split_blocks, to_fixed
from worker_transport.protocol import OLAF_PORT, VERSION, MsgType
from worker_transport.receiver import Receiver
from worker_transport.transport import UdpTransport

PROGRESS_PERIOD = 0.25
MODEL_SPREAD = 0.5
"""Fraction of ``broadcast_period`` over which one MODEL broadcast's blocks are spread."""


# -- weights as MODEL messages ---------------------------------------------------------
def model_messages(weights: np.ndarray, version: int, broadcast: int, *, values: int,
                   frac_bits: int) -> np.ndarray:
    """The MODEL packets (rows of bytes) carrying ``weights`` at ``version``."""
    blocks = split_blocks(to_fixed(np.asarray(weights, np.float32), frac_bits), values)
    batch = Batch.zeros(len(blocks), values)
    h = batch.headers
    h["version"] = VERSION
    h["msg_type"] = MsgType.MODEL
    h["block_id"] = np.arange(len(blocks))
    h["num_values"] = values
    h["frac_bits"] = frac_bits
    h["seq"] = broadcast & 0xFFFFFFFF
    h["model_version"] = version & 0xFFFFFFFF
    h["gen_time_us"] = int(time.time() * 1e6) & 0xFFFFFFFF
    batch.values[:] = blocks
    return encode_array(batch)


class ModelAssembler:
    """Collects MODEL blocks; ``feed`` returns ``(weights, version)`` when a newer version
    is complete. Blocks of older versions than the newest complete one are ignored."""

    def __init__(self, num_params: int, values: int, frac_bits: int) -> None:
        self.num_params = num_params
        self.values = values
        self.frac_bits = frac_bits
        self.num_blocks = -(-num_params // values)
        self.version = -1
        self._partial: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.foreign = 0

    def feed(self, payloads: list[bytes]) -> tuple[np.ndarray, int] | None:
        if not payloads:
            return None
        batch = decode(payloads, self.values)
        h = batch.headers
        done: tuple[np.ndarray, int] | None = None
        for i in range(len(h)):
            if (h["msg_type"][i] != MsgType.MODEL or h["num_values"][i] != self.values
                    or h["block_id"][i] >= self.num_blocks):
                self.foreign += 1
                continue
            version = int(h["model_version"][i])
            if version <= self.version:
                continue
            blocks, seen = self._partial.setdefault(
                version, (np.zeros((self.num_blocks, self.values), np.int32),
                          np.zeros(self.num_blocks, bool)))
            b = int(h["block_id"][i])
            blocks[b] = batch.values[i]
            seen[b] = True
            if seen.all():
                self.version = version
                done = (from_fixed(join_blocks(blocks, self.num_params), self.frac_bits)
                        .astype(np.float32), version)
                self._partial = {v: p for v, p in self._partial.items() if v > version}
        # A version that never completes must not pile up.
        while len(self._partial) > 8:
            del self._partial[min(self._partial)]
        return done


def send_paced(sock: socket.socket, rows: np.ndarray, addrs: list[tuple[str, int]],
               spread: float, stop: threading.Event) -> None:
    """Send every row to every address, block by block (block 0 to each address, then
    block 1, ...), the blocks spaced evenly over ``spread`` seconds.

    Not one burst of ``len(rows) * len(addrs)`` packets: bmv2 loses bursts at its input
    (bmv2_topologies/README.md), and a worker loads a version only when all of its blocks
    arrive, so a burst cost whole versions (on star2 bmv2 counted 25-33 % of burst MODEL
    packets, 62-75 % of paced ones, as many as of the evenly spaced PULLs)."""
    gap = spread / max(len(rows), 1)
    begin = time.monotonic()
    for i, row in enumerate(rows):
        if i and gap > 0:
            delay = begin + i * gap - time.monotonic()
            if delay > 0 and stop.wait(delay):
                return
        for addr in addrs:
            with contextlib.suppress(OSError):  # a full socket buffer drops one copy
                sock.sendto(row, addr)


def _recv_all(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(65535))
        except (BlockingIOError, InterruptedError):
            return out


def load_config(path: str) -> RunConfig:
    """The ``RunConfig`` that ``config_json`` wrote."""
    return config_from_dict(RunConfig, json.loads(Path(path).read_text()))


def config_json(cfg: Any) -> str:
    return json.dumps(dataclasses.asdict(cfg), indent=1)


def _wait_go(go: Path, stop: threading.Event) -> bool:
    while not go.exists():
        if stop.wait(0.02):
            return False
    return True


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


# -- parameter server --------------------------------------------------------------------
def ps_main(args: argparse.Namespace) -> int:
    stop = stop_on_signals()
    cfg = load_config(args.config)
    torch.set_num_threads(1)
    ps = parameter_server(cfg, run_model(cfg))
    policies = RunPolicies(cfg, ps)
    # The mean reward of recent DATA; the launcher's ThresholdLoop (control_plane) turns
    # it into the switches' threshold (DESIGN.md §3).
    rewards = RecentRewards(cfg.reward_history)
    apply = PsApply(ps, policies, rewards, t0=time.time())
    workers = [(w, OLAF_PORT) for w in args.workers.split(",")]
    model_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    broadcasts = 0

    def broadcast() -> None:
        nonlocal broadcasts
        weights, version = ps.snapshot()
        rows = model_messages(weights, version, broadcasts, values=cfg.values, frac_bits=cfg.frac_bits)
        send_paced(model_sock, rows, workers, MODEL_SPREAD * cfg.broadcast_period, stop)
        broadcasts += 1
        # The launcher evaluates these (the exact float32 weights, not MODEL's fixed point).
        write_weights(Path(args.weights), weights, version)

    print(f"ready ps {len(ps.params)} params in {ps.num_blocks} blocks", flush=True)
    receiver = None
    error: BaseException | None = None
    try:
        # Weights go out before the start, so workers can build their first policy.
        while not Path(args.go).exists():
            broadcast()
            if stop.wait(0.2):
                break
        receiver = Receiver(UdpTransport(_host_port(args.pull_from)), values=cfg.values,
                            frac_bits=cfg.frac_bits, pull_rate=cfg.pull_rate, on_batch=apply,
                            workers=min(cfg.workers, 32))
        apply.t0 = receiver.aom.start_us / 1e6
        delivery = RecentDelivery(apply.data, lambda: receiver.aom.series.ages_ms)
        policies.start(apply.t0)
        receiver.start()
        print(f"start {apply.t0:.6f}", flush=True)
        next_publish = next_control = next_progress = time.time()
        while not stop.is_set() and receiver.running:
            now = time.time()
            if now >= next_publish:
                broadcast()
                next_publish = now + cfg.broadcast_period
            policies.tick()
            if now >= next_control:
                recent = rewards.snapshot()
                if recent:
                    print(f"rewards {sum(recent) / len(recent):.6f}", flush=True)
                next_control = now + cfg.controller_interval
            if now >= next_progress:
                receiver.aom.advance()
                tail = receiver.aom.series.global_ms
                aom = float(tail[-1]) if len(tail) else math.nan
                staleness, ages = delivery.take()
                quantiles = " ".join(f"{q:.3f}" for q in (*staleness, *ages))
                print(f"progress {ps.model_version} {ps.blocks_applied} {aom:.3f} {quantiles}",
                      flush=True)
                next_progress = now + PROGRESS_PERIOD
            stop.wait(min(cfg.broadcast_period, 0.02))
    finally:
        stopping = time.monotonic()
        if receiver is not None:
            try:
                receiver.close()
            except Exception as e:  # reported after the final line
                error = e
        model_sock.close()
        policies.finish(time.time())
    print(f"stopped receiver in {time.monotonic() - stopping:.3f}s", flush=True)
    final: dict = {"model_version": ps.model_version, "blocks_applied": ps.blocks_applied,
                   "num_parameters": len(ps.params), "num_blocks": ps.num_blocks,
                   "broadcasts": broadcasts, "t0": apply.t0,
                   "policies": policies.stats([d[3] for d in apply.data])}
    if receiver is not None:
        final["receiver"] = receiver.stats()
        final["aom"] = receiver.aom.summary()
        s = receiver.aom.series
        np.savez(args.npz, aom_t_ms=s.t_ms, aom_global_ms=s.global_ms, update_age_ms=s.ages_ms,
                 data=np.array(apply.data, np.float64).reshape(-1, 5))
    print("final " + json.dumps(final, default=str).replace("NaN", "null"), flush=True)
    if error is not None:
        print(f"ps: receiver failed: {error!r}", file=sys.stderr, flush=True)
        return 1
    return 0


def write_weights(path: Path, weights: np.ndarray, version: int) -> None:
    """``(weights, version)`` to ``path`` atomically: a reader sees the old file or the new."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.save(f, np.append(weights.astype(np.float64), float(version)))
    os.replace(tmp, path)


def read_weights(path: Path) -> tuple[np.ndarray, int] | None:
    """What ``write_weights`` wrote, or None before the first write."""
    try:
        flat = np.load(path)
    except (FileNotFoundError, ValueError, OSError):
        return None
    return flat[:-1].astype(np.float32), int(flat[-1])


# -- worker ------------------------------------------------------------------------------
def worker_main(args: argparse.Namespace) -> int:
    stop = stop_on_signals()
    cfg = load_config(args.config)
    torch.set_num_threads(1)
    w = args.worker_id
    model_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    model_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    model_sock.bind(("0.0.0.0", OLAF_PORT))
    model_sock.setblocking(False)
    newest: list[tuple[np.ndarray, int] | None] = [None]

    def receive_weights(newer_than: int) -> tuple[np.ndarray, int] | None:
        """The newest complete MODEL version if newer than ``newer_than`` (``NewestWeights``)."""
        got = weights.feed(_recv_all(model_sock))
        if got is not None:
            newest[0] = got
        return newest[0] if newest[0] is not None and newest[0][1] > newer_than else None

    worker, sender = build_worker(cfg, w, worker_seed(cfg.seed, w, 0), _host_port(args.ps),
                                  receive_weights)
    weights = ModelAssembler(flat_parameters(worker.model).size, cfg.values, cfg.frac_bits)
    steps = 0

    def report() -> None:
        # The same totals a local worker process reports (``tx_totals``), revision 3's loss
        # ceiling and answered blocks included, in TX_FIELDS order.
        tx = tx_totals([sender.stats()])
        print(f"progress {steps} " + " ".join(f"{tx[k]:.6f}" for k in TX_FIELDS), flush=True)

    try:
        deadline = time.monotonic() + args.weights_timeout
        while worker.model_version < 0:
            got = receive_weights(-1)
            if got is not None:
                worker.load_weights(*got)
            elif stop.wait(0.02) or time.monotonic() > deadline:
                print(f"worker {w}: no complete MODEL from the PS", file=sys.stderr, flush=True)
                return 1
        print(f"ready worker {w} version {worker.model_version}", flush=True)
        if not _wait_go(Path(args.go), stop):
            return 0
        last_report = time.monotonic()
        while not stop.is_set():
            grad = take_turn(worker, sender, receive_weights)
            now = time.time()
            for e in grad.episodes:
                print(f"episode {now:.6f} {e.ret:.6f} {e.length}", flush=True)
            steps += grad.steps
            if time.monotonic() - last_report >= PROGRESS_PERIOD:
                report()
                last_report = time.monotonic()
        sender.poll(0.05)
    finally:
        stats = sender.stats()
        sender.close()
        worker.close()
        model_sock.close()
    report()
    print("final " + json.dumps(dict(stats, env_steps=steps, model_version=worker.model_version,
                                     foreign_model_packets=weights.foreign)), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m olaf.testbed.hosts",
                                     description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("ps", help="the parameter server")
    p.add_argument("--config", required=True, help="RunConfig as JSON")
    p.add_argument("--pull-from", required=True, metavar="IP:PORT",
                   help="where PULLs go (any address through the PS's switch)")
    p.add_argument("--workers", required=True, metavar="IP,IP,...", help="workers' addresses for MODEL")
    p.add_argument("--go", required=True, help="start when this file exists")
    p.add_argument("--npz", required=True, help="AoM series and DATA log written here at the end")
    p.add_argument("--weights", required=True,
                   help="the published weights, rewritten atomically with every broadcast")
    w = sub.add_parser("worker", help="one worker")
    w.add_argument("--config", required=True, help="RunConfig as JSON")
    w.add_argument("--worker-id", type=int, required=True)
    w.add_argument("--ps", required=True, metavar="IP:PORT", help="the PS's address (UPDATEs go there)")
    w.add_argument("--go", required=True, help="start when this file exists")
    w.add_argument("--weights-timeout", type=float, default=120.0,
                   help="seconds to wait for the first complete weights (default 120)")
    args = parser.parse_args(argv)
    # A launcher that finds this process stuck sends SIGUSR1 before it kills it.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    return ps_main(args) if args.role == "ps" else worker_main(args)


if __name__ == "__main__":
    sys.exit(main())
