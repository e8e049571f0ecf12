"""``olaf run --backend ray`` on a Ray head started here, with gradients through the switch.

The cluster is a real one: ``ray start --head`` with a temporary directory, a free GCS
port and 2 CPUs, in a process group of its own; it is torn down by that group (and any
process whose command line names its temporary directory), never by name, so that a
Ray cluster of someone else on the machine is left alone. Loopback only:
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray bind its node to 127.0.0.1 instead of
the machine's first routable address (the single-node mode Ray uses on laptops).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procfs import processes, stat_fields
from tests.switch_process import running_switch

RAY_START_TIMEOUT = 600.0
"""Seconds ``ray start`` gets; a loaded 2-core machine takes minutes to bring up the head."""
RUN_TIMEOUT = 900.0
"""Seconds the whole ``olaf run`` may take, actor start-up (torch imports) included."""


def _olaf(*args: str, env: dict[str, str] | None = None,
          timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "olaf.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


# -- argument checks: no cluster, no Ray needed -------------------------------------------------
@pytest.mark.parametrize(("args", "message"), [
    (["--address", "127.0.0.1:1"], "are options of --backend ray"),
    (["--switch", "127.0.0.1:9"], "are options of --backend ray"),
    (["--backend", "ray", "--switch", "nowhere"], "expected HOST:PORT"),
    (["--backend", "ray", "--switch", "127.0.0.1:9", "--switch-port", "5"], "--switch-port"),
    (["--backend", "ray", "--switch-port", "70000"], "expected a UDP port"),
    (["--backend", "ray", "--checkpoint-dir", "ckpt"], "not supported with --backend ray"),
])
def test_bad_backend_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from olaf.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["run", "--out", str(tmp_path / "out"),
              *[str(tmp_path / a) if a == "ckpt" else a for a in args]])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()


# -- a cluster of our own -------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_env() -> dict[str, str]:
    return {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            # On a loaded machine Ray's Python processes (the agents the raylet waits for,
            # a worker importing torch) start late; these waits are Ray's own settings.
            "RAY_raylet_start_wait_time_s": "600",
            "RAY_worker_register_timeout_seconds": "600", "RAY_USAGE_STATS_ENABLED": "0",
            # No idle workers started ahead of the first driver: the run's actors are the load.
            "RAY_prestart_worker_first_driver": "0"}


def _pids_naming(text: str) -> list[int]:
    return [pid for pid, cmdline in processes("cmdline") if text.encode() in cmdline]


def _stop_cluster(group: int, temp_dir: str) -> None:
    """SIGTERM to the group ``ray start`` made, then SIGKILL to what is left of it and to
    any process still naming our temporary directory: ours, found by PID."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _group_alive(group):
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    for pid in _pids_naming(temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _group_alive(group: int) -> bool:
    """Whether a process of ``group`` still runs (zombies, which a container's init may
    never reap, do not count: a signal to them succeeds but they hold nothing)."""
    for _, stat in processes("stat"):
        fields = stat_fields(stat)
        if int(fields[2]) == group and fields[0] != b"Z":
            return True
    return False


START_ATTEMPTS = 3
"""``ray start`` gives its raylet a fixed 30 s to register; on a loaded machine the Python
agents it waits for can take longer, and a fresh attempt usually makes it."""


def _start_head(env: dict[str, str]) -> tuple[str, int, str, str]:
    """(GCS address, process group, temporary dir, output) of one ``ray start --head``;
    the address is empty if it failed (then nothing of it is left running)."""
    # Short: Ray's socket paths under it must fit a sockaddr_un (108 bytes).
    temp_dir = tempfile.mkdtemp(prefix="olaf-ray-")
    port = _free_port()
    start = subprocess.Popen(
        [str(Path(sys.executable).with_name("ray")), "start", "--head", "--temp-dir", temp_dir,
         "--port", str(port), "--num-cpus", "2", "--include-dashboard=false",
         "--disable-usage-stats"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True)
    try:
        out, _ = start.communicate(timeout=RAY_START_TIMEOUT)
    except subprocess.TimeoutExpired:
        start.kill()
        out, _ = start.communicate()
    if start.returncode == 0:
        return f"127.0.0.1:{port}", start.pid, temp_dir, out
    _stop_cluster(start.pid, temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return "", start.pid, temp_dir, out


@pytest.fixture(scope="module")
def ray_head() -> Iterator[tuple[str, dict[str, str]]]:
    """(GCS address, environment) of a one-node Ray cluster started for this module."""
    pytest.importorskip("ray", reason="Ray is not importable: pip install -e '.[ray]'")
    env = _loopback_env()
    for _ in range(START_ATTEMPTS):
        address, group, temp_dir, out = _start_head(env)
        if address:
            break
    else:
        pytest.fail(f"ray start failed {START_ATTEMPTS} times; the last:\n{out[-3000:]}")
    try:
        yield address, env
    finally:
        _stop_cluster(group, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_ray_backend_trains_through_the_software_switch(ray_head: tuple[str, dict[str, str]],
                                                        tmp_path: Path) -> None:
    address, env = ray_head
    out = tmp_path / "run"
    proc = _olaf("run", "--backend", "ray", "--address", address, "--switch-port", "0",
                 "--env", "CartPole-v1", "--workers", "2", "--processes", "2",
                 "--total-steps", "3000", "--duration", "300", "--eval-every", "1000000",
                 "--eval-episodes", "2", "--out", str(out), env=env, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = _summary(out)
    assert s["stopped_by"] == "steps"
    assert s["env_steps"] >= 3000
    outcomes = s["outcomes"]
    # The switch (an actor on the head node) judged the workers' UPDATEs ...
    assert outcomes["ENQUEUED"] + outcomes["MERGED"] + outcomes["REPLACED"] > 0
    assert outcomes["DROPPED_INVALID"] == 0
    # ... the PS pulled them out as DATA and applied them, and published new versions ...
    assert s["data_blocks"] > 0 and s["blocks_applied"] > 0
    assert s["model_version"] > 0
    # ... and the workers sent from sockets of their own, in two actors.
    assert s["updates_sent"] > 0 and s["worker_blocks_sent"] >= s["data_blocks"]
    placement = json.loads((out / "placement.json").read_text())
    assert len(placement["worker_processes"]) == 3  # two worker actors and the evaluator
    assert len({p["pid"] for p in placement["worker_processes"]}) == 3
    assert placement["switch_address"][0] == "127.0.0.1"
    assert s["evaluations"] >= 1 and s["final_eval_return"] > 0


def test_elastic_auto_sizes_the_ray_pool_itself(ray_head: tuple[str, dict[str, str]],
                                               tmp_path: Path) -> None:
    """--elastic auto on Ray: one worker at first, the warm-up grows the pool (a link ten
    times the default's), every decision in timeline.csv, and the worker actors run only the
    active ids (fewer worker-seconds than the ceiling's)."""
    import csv

    address, env = ray_head
    out = tmp_path / "auto"
    proc = _olaf("run", "--backend", "ray", "--address", address, "--switch-port", "0",
                 "--elastic", "auto", "--workers", "4", "--processes", "2",
                 "--total-steps", "40000", "--duration", "120", "--eval-every", "1000000",
                 "--eval-episodes", "2", "--egress-rate", "2920000", "--buffer-bytes", "292000",
                 "--set", "autoscale.window_s=1", "--out", str(out), env=env, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = _summary(out)
    with (out / "timeline.csv").open() as f:
        rows = list(csv.DictReader(f))
    decisions = [r for r in rows if r["decision"]]
    assert decisions and decisions[0]["decision"] == "grow"
    assert int(rows[0]["active_workers"]) == 1
    sizes = [n for _, n in s["worker_changes"]]
    assert sizes and sizes[0] > 1 and max(sizes) <= 4
    assert s["scaling"] == "auto" and s["active_workers"] == sizes[-1]
    assert s["worker_seconds"] < 4 * s["wall_time_s"]


def test_ray_backend_trains_through_a_switch_given_by_address(
        ray_head: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = ray_head
    out = tmp_path / "run"
    with running_switch("--listen", "127.0.0.1:0", timeout=120) as sw:
        proc = _olaf("run", "--backend", "ray", "--address", address,
                     "--switch", f"{sw.address[0]}:{sw.address[1]}", "--env", "CartPole-v1",
                     "--workers", "2", "--processes", "1", "--total-steps", "2000",
                     "--eval-every", "1000000", "--eval-episodes", "2", "--out", str(out),
                     env=env, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    s = _summary(out)
    judged = sw.final["outcomes"]
    # The running switch (no actor of the run) judged the UPDATEs and answered PULLs ...
    assert judged["ENQUEUED"] + judged["MERGED"] + judged["REPLACED"] > 0
    assert sw.final["msg_types"].get("3", 0) > 0
    # ... the summary's outcomes are the ACKs the workers counted, never more than it judged ...
    assert sum(s["outcomes"].values()) > 0
    assert all(n <= judged[name] for name, n in s["outcomes"].items())
    # ... and the PS learned from what it pulled.
    assert s["data_blocks"] > 0 and s["blocks_applied"] > 0 and s["model_version"] > 0
    assert s["env_steps"] >= 2000
