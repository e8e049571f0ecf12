"""Software switch throughput over loopback, against a bare Python UDP echo server.

A load generator process keeps a window of UPDATE/PULL datagrams (70 % UPDATE,
V=64, 8 clusters, 32 workers, 64 blocks) in flight against ``olaf switch
--listen`` and counts answers per second; it moves datagrams with
``sendmmsg``/``recvmmsg`` so that it is not the bottleneck. The same generator then runs against
a minimal Python UDP echo server (drain, send back; no parsing), which is the
ceiling for Python socket I/O on this machine. Server and generator are pinned
to different cores where there are two.
Run: ``.venv/bin/python benchmarks/bench_switch.py``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import select
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

from dataplane.mmsg import open_batch_socket, to_sockaddr
from worker_transport.protocol import MsgType, Olaf

ECHO_SERVER = """
import select, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind(("127.0.0.1", 0)); s.setblocking(False)
print("listening on udp 127.0.0.1:%d" % s.getsockname()[1], flush=True)
while True:
    select.select([s], [], [], 1.0)
    batch = []
    try:
        while len(batch) < 512:
            batch.append(s.recvfrom(65535))
    except BlockingIOError:
        pass
    for data, addr in batch:
        s.sendto(data, addr)
"""


def traffic(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            out.append(bytes(Olaf(msg_type=MsgType.PULL)))
        else:
            w = rng.randrange(32)
            out.append(bytes(Olaf(msg_type=MsgType.UPDATE, cluster_id=w % 8, worker_id=w,
                                  block_id=rng.randrange(64), reward=rng.randrange(-(1 << 20), 1 << 20),
                                  contributors=1 << w, values=[rng.randrange(-1000, 1000)] * 64)))
    return out


def generate(address: tuple[str, int], seconds: float, window: int, cpu: int | None, result) -> None:
    """Closed loop: keep ``window`` datagrams in flight, one sendmmsg per refill."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    messages = traffic(4096)
    width = max(map(len, messages))
    rows = np.zeros((len(messages), width), np.uint8)
    for row, m in zip(rows, messages, strict=True):
        row[: len(m)] = np.frombuffer(m, np.uint8)
    lengths = np.array([len(m) for m in messages], np.int64)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.setblocking(False)
    io = open_batch_socket(s, batch=window)
    peer = to_sockaddr(address)
    sent = answered = k = 0
    start = time.perf_counter()
    end = start + seconds
    last_answer = start
    while time.perf_counter() < end:
        room = window - (sent - answered)
        if room > 0:
            idx = (k + np.arange(room)) % len(messages)
            sent += io.send(rows[idx], lengths[idx], np.repeat(peer, room))
            k = (k + room) % len(messages)
        select.select([s], [], [], 0.05)
        got = len(io.recv()[0])
        answered += got
        now = time.perf_counter()
        if got:
            last_answer = now
        elif now - last_answer > 0.2:
            answered, last_answer = sent, now  # lost datagrams: reopen the window rather than stall
    result.put(answered / (time.perf_counter() - start))


def start_server(cmd: list[str], cpu: int | None) -> tuple[subprocess.Popen, tuple[str, int]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None)
    line = proc.stdout.readline()
    host, _, port = line.split()[-1].rpartition(":")
    return proc, (host, int(port))


def measure(cmd: list[str], seconds: float, window: int) -> float:
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu, load_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    proc, address = start_server(cmd, server_cpu)
    try:
        result: mp.Queue = mp.Queue()
        gen = mp.Process(target=generate, args=(address, seconds, window, load_cpu, result))
        gen.start()
        rate = result.get(timeout=seconds + 30)
        gen.join()
        return rate
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--window", type=int, default=256, help="datagrams in flight")
    p.add_argument("--rounds", type=int, default=3,
                   help="echo/switch pairs, interleaved so that both see the same machine load")
    args = p.parse_args()
    switch = [sys.executable, "-m", "olaf.cli", "switch", "--listen", "127.0.0.1:0", "--stats-interval", "0"]
    echo = [sys.executable, "-c", ECHO_SERVER]
    print(f"load: 70% UPDATE (V=64, 292 B) / 30% PULL, window {args.window}, {args.seconds:g} s each, "
          f"server and load generator on separate cores")
    ratios = []
    for k in range(args.rounds):
        echo_rate = measure(echo, args.seconds, args.window)
        switch_rate = measure(switch, args.seconds, args.window)
        ratios.append(switch_rate / echo_rate)
        print(f"round {k + 1}: python UDP echo server {echo_rate:8.0f} packets/s, "
              f"olaf switch (OlafQueue) {switch_rate:8.0f} packets/s, ratio {ratios[-1]:.2f}")
    print(f"ratio switch/echo: median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}, {args.rounds} rounds)")


if __name__ == "__main__":
    main()
