"""Register reads from bmv2 through its Thrift runtime (``simple_switch_CLI``).

``simple_switch_grpc`` answers every P4Runtime register read with UNIMPLEMENTED
("Register reads are not supported yet", p4lang/PI#376, open), so the queue state the
software switch serves over P4Runtime is read here from bmv2's other control channel,
the Thrift server every bmv2 process runs (``--thrift-port``). The CLI runs under the
system Python, which has python3-thrift (the venv does not), with bmv2's own
``bm_runtime`` modules from next to its ``bin/``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from bmv2_topologies.simple_switch import CLI, Bmv2Missing, bmv2_binary
from control_plane.p4info import (
    REG_ACTIVE_CLUSTERS,
    REG_CLUSTER_COUNT,
    REG_OCCUPIED,
    REG_READ_PTR,
    REG_WRITE_PTR,
)

QUEUE_REGISTERS = (REG_OCCUPIED, REG_READ_PTR, REG_WRITE_PTR, REG_ACTIVE_CLUSTERS, REG_CLUSTER_COUNT)
SYSTEM_PYTHON = "/usr/bin/python3"
_CELL = re.compile(r"(?:RuntimeCmd: )?(\S+?)(?:\[(\d+)\])?= ?(.*)$")


class ThriftError(RuntimeError):
    """simple_switch_CLI is missing, failed, or did not answer a register."""


def cli_command() -> list[str]:
    """The CLI under the system Python, or ThriftError saying what is missing."""
    try:
        cli = bmv2_binary(CLI)  # the p4tools bundle's, for either bmv2 build
    except Bmv2Missing as e:
        raise ThriftError(str(e)) from None
    if not Path(SYSTEM_PYTHON).exists():
        raise ThriftError(f"{SYSTEM_PYTHON} (with python3-thrift) is missing")
    return [SYSTEM_PYTHON, cli]


def read_registers(thrift_port: int, names: tuple[str, ...] | list[str], timeout: float = 30.0,
                   host: str = "127.0.0.1") -> dict[str, list[int]]:
    """Every cell of each register in ``names`` (the P4Info names, e.g. ``OlafIngress.reg_occupied``)."""
    full = list(names)
    cli = cli_command()
    site = Path(cli[1]).resolve().parent.parent / "lib"
    paths = sorted(str(p) for p in site.glob("python3*/site-packages"))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(paths)}
    script = "".join(f"register_read {n}\n" for n in full)
    try:
        done = subprocess.run([*cli, "--thrift-ip", host, "--thrift-port", str(thrift_port)],
                              input=script, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ThriftError(f"simple_switch_CLI on port {thrift_port} took over {timeout:g} s") from None
    cells: dict[str, list[int]] = {}
    for line in done.stdout.splitlines():
        m = _CELL.match(line.strip())
        if m is None or m.group(1) not in full:
            continue
        values = [int(v) for v in m.group(3).split(",") if v.strip()]
        if m.group(2) is None:
            cells[m.group(1)] = values
    missing = [n for n in full if n not in cells]
    if missing:
        raise ThriftError(f"simple_switch_CLI on port {thrift_port} did not read {', '.join(missing)}: "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return {name: cells[name] for name in full}


def queue_state(thrift_port: int) -> dict[str, Any]:
    """The same dict as ``Controller.queue_state()`` gives on a target that serves registers."""
    regs = read_registers(thrift_port, QUEUE_REGISTERS)
    state: dict[str, Any] = {name.rpartition("reg_")[2]: regs[name][0] for name in QUEUE_REGISTERS[:-1]}
    state["cluster_count"] = regs[REG_CLUSTER_COUNT]
    return state
