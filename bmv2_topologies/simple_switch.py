"""bmv2's ``simple_switch`` run from this checkout: ``p4/olaf.p4`` compiled for it by
p4c's bmv2 back end with warnings as errors, the tools that needs, a free port for its
Thrift or gRPC server, and stopping a switch process this process started.

Shared by the vector replay (``tests/p4_replay.py``), the P4Runtime tests, the testbed's
bmv2 switches and ``benchmarks/bench_bmv2.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
P4_MAIN = REPO / "p4" / "olaf.p4"

P4C = "p4c-bm2-ss"
"""p4c's v1model/bmv2 back end; the p4lang packages and the bundle in .p4tools/ both ship it."""


def missing_tools() -> str | None:
    """Why ``simple_switch`` with a program compiled here cannot run, or None when it can."""
    missing = [t for t in (P4C, "simple_switch", "simple_switch_CLI") if not shutil.which(t)]
    return None if not missing else "not on PATH: " + ", ".join(missing)


def compile_p4(
    out_dir: Path, defines: list[str] | None = None, p4info: Path | None = None, main: Path = P4_MAIN
) -> Path:
    """Compile ``main`` (p4/olaf.p4) for bmv2 with warnings as errors; returns the JSON.

    Raises with p4c's output on failure (a warning is a failure).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    produced = out_dir / "olaf.json"
    cmd = [P4C, "--arch", "v1model", "--Werror", *(defines or [])]
    if p4info is not None:
        cmd += ["--p4runtime-files", str(p4info)]
    cmd += ["-o", str(produced), str(main)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0 or not produced.exists():
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stdout}\n{result.stderr}")
    return produced


def free_tcp_port() -> int:
    """A loopback TCP port free now; a switch may still lose it to another program before
    it binds, which its caller must detect."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc: subprocess.Popen) -> None:
    """Stop a switch this process started: SIGTERM by its PID, then SIGKILL if it has not
    exited within 10 s."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
