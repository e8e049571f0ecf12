"""Traffic on a running ``Testbed``: synthetic ``olaf worker``/``olaf ps`` processes
(``run_synthetic``), the relays of two-level topologies (``start_relays``), and the
pieces a launcher of other host programs needs (``pull_address``, ``LineReader``).
The main job's DRL run is ``olaf.testbed.drl.run_drl``, built on these.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from bmv2_topologies.testbed import Process, Testbed, TestbedError, olaf_command
from worker_transport.protocol import OLAF_PORT

DRAIN_S = 1.0
"""Synthetic runs: seconds the PS (and relays) keep pulling after the workers stop."""


def pull_address(testbed: Testbed, host: str, index: int = 0) -> str:
    """An address that leaves ``host``'s ``eth{index}`` toward its switch: the gateway
    (the first OLAF switch on the way answers every PULL, whatever its destination)."""
    intf = testbed.topology.hosts[host].interfaces[index]
    return f"{intf.ip.network[-2]}:{OLAF_PORT}"


class LineReader:
    """New complete lines of a process's log since the last call."""

    def __init__(self, proc: Process) -> None:
        self.proc = proc
        self._offset = 0
        self._rest = b""

    def lines(self) -> list[str]:
        try:
            with open(self.proc.log, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return []
        self._offset += len(chunk)
        data = self._rest + chunk
        *complete, self._rest = data.split(b"\n")
        return [line.decode(errors="replace") for line in complete]


def python_module(module: str, *args: str) -> list[str]:
    """``python -m MODULE ARGS`` with this interpreter (the venv's)."""
    return [sys.executable, "-m", module, *args]


def run_synthetic(testbed: Testbed, *, duration: float = 3.0, rate: float = 50.0, params: int = 640,
                  pull_rate: float = 0.0, worker_args: list[str] | None = None) -> dict[str, Any]:
    """``olaf ps`` on the PS host and ``olaf worker`` on every worker host for ``duration``
    seconds; returns their ``final`` JSON and the switches' counters."""
    topo = testbed.topology
    n = len(topo.workers)
    relays = start_relays(testbed, pull_rate or 1500.0, 64, 16)
    # The PS runs until the workers are done and the queues drained (then SIGTERM): on a
    # loaded machine the workers may start seconds after it.
    ps_args = ["ps", "--switch", pull_address(testbed, topo.ps.name),
               "--params", str(params), "--workers", str(min(n, 32)), "--stats-interval", "0"]
    if pull_rate:
        ps_args += ["--pull-rate", f"{pull_rate:g}"]
    ps = testbed.spawn("ps", olaf_command(*ps_args), host=topo.ps.name)
    workers = [
        testbed.spawn(f"worker{h.worker_id}", olaf_command(
            "worker", "--switch", f"{topo.ps.ip}:{OLAF_PORT}", "--worker-id", str(h.worker_id),
            "--params", str(params), "--rate", f"{rate:g}", "--duration", f"{duration:g}",
            "--seed", str(h.worker_id), "--stats-interval", "0", *(worker_args or [])), host=h.name)
        for h in topo.workers
    ]
    testbed.wait(workers, duration + 60)
    time.sleep(DRAIN_S)
    testbed.stop_all(relays)
    if relays:
        time.sleep(DRAIN_S)
    testbed.stop_all([ps])
    if ps.popen.returncode != 0:
        raise TestbedError(f"ps exited with {ps.popen.returncode}:\n{ps.output()[-2000:]}")
    return {
        "ps": ps.final(),
        "workers": {p.name: p.final() for p in workers},
        "relays": {p.name: p.final() for p in relays},
        "switches": testbed.control.counters(),
    }


def start_relays(testbed: Testbed, pull_rate: float, values: int, frac_bits: int) -> list[Process]:
    """``bmv2_topologies.relay`` on every relay host, each pulling at ``pull_rate``; waits until ready."""
    topo = testbed.topology
    relays = [
        testbed.spawn(f"relay-{r.name}", python_module(
            "bmv2_topologies.relay", "--pull-from", pull_address(testbed, r.name, 0),
            "--to", f"{topo.ps.ip}:{OLAF_PORT}", "--pull-rate", f"{pull_rate:g}",
            "--values", str(values), "--frac-bits", str(frac_bits)), host=r.name)
        for r in topo.relays
    ]
    for p in relays:
        testbed.wait_for_line(p, "ready", 60)
    return relays
