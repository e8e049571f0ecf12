"""Start ``olaf switch`` as a subprocess for tests, and stop it by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class SwitchProcess:
    proc: subprocess.Popen
    address: tuple[str, int] | None
    final: dict = field(default_factory=dict)
    stderr: str = ""


def olaf_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "olaf.cli", *args]


@contextmanager
def running_switch(
    *args: str, prefix: list[str] | None = None, timeout: float = 20.0
) -> Iterator[SwitchProcess]:
    """``olaf switch ARGS`` until the block ends; then SIGTERM, and ``final`` holds its counters."""
    proc = subprocess.Popen(
        [*(prefix or []), *olaf_command("switch", "--stats-interval", "0", *args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    sw = SwitchProcess(proc, None)
    try:
        deadline = time.monotonic() + timeout
        line = proc.stdout.readline()
        while not line.startswith("listening on") and time.monotonic() < deadline and proc.poll() is None:
            line = proc.stdout.readline()
        if not line.startswith("listening on"):
            raise RuntimeError(f"switch did not start: {line!r} {proc.stderr.read()}")
        if line.startswith("listening on udp "):
            host, _, port = line.split()[-1].rpartition(":")
            sw.address = (host, int(port))
        yield sw
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        sw.stderr = err
        for line in out.splitlines():
            if line.startswith("final "):
                sw.final = json.loads(line[len("final ") :])
