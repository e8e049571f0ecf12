"""bmv2's ``simple_switch`` run from this checkout: which bmv2 binary to run (the fast or
the logging build, ``bmv2_binary``), ``p4/olaf.p4`` compiled for it by p4c's bmv2 back end
with warnings as errors, the tools that needs, a free port for its Thrift or gRPC server,
and stopping a switch process this process started.

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

P4TOOLS = REPO / ".p4tools"
BMV2_BUILDS: dict[str, Path] = {
    "fast": P4TOOLS / "bmv2-fast" / "bin",
    "debug": P4TOOLS / "p4tools" / "bin",
}
"""Where ``scripts/setup.sh`` unpacks each bmv2 build (../shared/p4tools/README.md).

``fast``: bmv2 1.15.5 built with ``-O3 --disable-logging-macros --disable-elogger``, about
6-9x the packet rate of the other; its per-packet log lines are compiled out, so
``--log-console``/``--log-level debug`` print no packet trace. ``debug``: the same version
with bmv2's logging macros compiled in, for tracing a packet through the pipeline.
"""
BMV2_DEFAULT_BUILD = "fast"
CLI = "simple_switch_CLI"
"""Only the p4tools bundle ships the CLI (a Python script); it talks Thrift to either build."""


class Bmv2Missing(RuntimeError):
    """A bmv2 binary of the requested build is not installed; the message says where it was looked for."""


def bmv2_binary(name: str, build: str = BMV2_DEFAULT_BUILD) -> str:
    """The path of bmv2 program ``name`` (``simple_switch``, ``simple_switch_grpc`` or
    ``simple_switch_CLI``) of ``build`` (``fast`` or ``debug``), the one place that decides it.

    Looked up in the build's folder in ``.p4tools/`` first, then on PATH (a bmv2 installed
    system-wide: whichever build that is, it is the user's). ``simple_switch_CLI`` always
    comes from the p4tools bundle, whatever ``build`` says (the fast bundle has none).
    Raises ``Bmv2Missing`` naming both places when neither has it.
    """
    if build not in BMV2_BUILDS:
        raise ValueError(f"bmv2 build must be one of {', '.join(BMV2_BUILDS)}, not {build!r}")
    folder = BMV2_BUILDS["debug" if name == CLI else build]
    candidate = folder / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is not None:
        return found
    raise Bmv2Missing(f"{name} ({build} build) not found in {folder} nor on PATH; scripts/setup.sh "
                      "unpacks it from ../shared/p4tools/ (see its README)")


def p4tools_binary(name: str) -> str | None:
    """A program of the p4tools bundle (``p4c-bm2-ss``, ``p4test``...): from
    ``.p4tools/p4tools/bin``, else PATH, else None; so a shell needs no PATH export."""
    candidate = BMV2_BUILDS["debug"] / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def bmv2_missing(names: tuple[str, ...], build: str = BMV2_DEFAULT_BUILD) -> str | None:
    """Why one of the bmv2 programs ``names`` of ``build`` cannot be found, or None."""
    for name in names:
        try:
            bmv2_binary(name, build)
        except Bmv2Missing as e:
            return str(e)
    return None


def missing_tools(build: str | None = None) -> str | None:
    """Why ``simple_switch`` with a program compiled here cannot run, or None when it can.

    ``build`` None: the tools on PATH (the vector replay runs whatever ``simple_switch``
    PATH gives); ``fast``/``debug``: that build's binaries as ``bmv2_binary`` finds them.
    """
    if build is not None:
        if p4tools_binary(P4C) is None:
            return f"{P4C} not found in {BMV2_BUILDS['debug']} nor on PATH"
        return bmv2_missing(("simple_switch", CLI), build)
    missing = [t for t in (P4C, "simple_switch", CLI) if not shutil.which(t)]
    return None if not missing else "not on PATH: " + ", ".join(missing)


def compile_p4(
    out_dir: Path, defines: list[str] | None = None, p4info: Path | None = None, main: Path = P4_MAIN
) -> Path:
    """Compile ``main`` (p4/olaf.p4) for bmv2 with warnings as errors; returns the JSON.

    Raises with p4c's output on failure (a warning is a failure).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    produced = out_dir / "olaf.json"
    cmd = [p4tools_binary(P4C) or P4C, "--arch", "v1model", "--Werror", *(defines or [])]
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
