"""bmv2 as the testbed's data plane: ``p4/olaf.p4`` compiled with p4c, one
``simple_switch_grpc`` per switch on the switch-side veth ends, started without a program
(``--no-p4``) and then given the pipeline, routes and queue settings over P4Runtime by
``bmv2_topologies.control`` (the same controller code as for the software switch).

Runs the fast bmv2 build by default (``Testbed(bmv2_build="debug")`` for the logging one;
``simple_switch.bmv2_binary`` resolves both). Needs that ``simple_switch_grpc`` and ``p4c``
(or ``p4c-bm2-ss``), in ``.p4tools/`` or on PATH; ``missing()`` says which is absent. The
P4 program fixes V at 64 values per block (DESIGN.md §2), so the experiment must use
``values=64``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from bmv2_topologies.control import Target
from bmv2_topologies.errors import TestbedError
from bmv2_topologies.simple_switch import (
    BMV2_DEFAULT_BUILD,
    P4_MAIN,
    P4C,
    bmv2_binary,
    bmv2_missing,
    free_tcp_port,
    p4tools_binary,
)

if TYPE_CHECKING:
    from bmv2_topologies.testbed import Testbed

P4_VALUES = 64


def missing(build: str = BMV2_DEFAULT_BUILD) -> str | None:
    """None when the bmv2 path (``build``: fast or debug) can run here, else what is not installed."""
    absent = []
    grpc = bmv2_missing(("simple_switch_grpc",), build)
    if grpc is not None:
        absent.append(grpc)
    if shutil.which("p4c") is None and p4tools_binary(P4C) is None:
        absent.append("p4c (or p4c-bm2-ss) not installed")
    return "; ".join(absent) if absent else None


def compile_program(out_dir: Path) -> tuple[Path, Path]:
    """``p4/olaf.p4`` for bmv2 into ``out_dir``: (bmv2 JSON, P4Info the compiler wrote)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    program, p4info = out_dir / "olaf.json", out_dir / "olaf.p4info.txtpb"
    if shutil.which("p4c"):
        cmd = ["p4c", "--target", "bmv2", "--arch", "v1model", "--p4runtime-files", str(p4info),
               "-o", str(out_dir), str(P4_MAIN)]
    else:
        cmd = [p4tools_binary(P4C) or P4C, "--arch", "v1model", "--p4runtime-files", str(p4info),
               "-o", str(program), str(P4_MAIN)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0 or not program.exists() or not p4info.exists():
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return program, p4info


class Bmv2Switches:
    """The ``simple_switch_grpc`` processes of one testbed (tracked by the testbed)."""

    def __init__(self, testbed: Testbed) -> None:
        self.testbed = testbed

    def start(self) -> list[Target]:
        tb = self.testbed
        reason = missing(tb.bmv2_build)
        if reason:
            raise TestbedError(f"--switch bmv2 needs bmv2 and p4c: {reason}")
        values = tb.queue.get("values", P4_VALUES)
        if values != P4_VALUES:
            raise TestbedError(f"p4/olaf.p4 carries {P4_VALUES} values per block, not {values}")
        program, p4info = compile_program(tb.out / "p4build")
        config = program.read_bytes()
        targets = []
        for device, name in enumerate(tb.topology.switches, start=1):
            grpc, thrift = f"127.0.0.1:{free_tcp_port()}", free_tcp_port()
            # The log stays at 'warn' on both builds: per-packet lines (debug build only)
            # would slow bmv2 further; raise it by hand when tracing a packet.
            argv = [bmv2_binary("simple_switch_grpc", tb.bmv2_build), "--device-id", str(device),
                    "--thrift-port", str(thrift),
                    "--notifications-addr", f"ipc://{tb.out}/bmv2-{device}-notifications.ipc",
                    "--log-file", str(tb.out / f"bmv2-{name}"), "--log-flush", "--log-level", "warn"]
            for port, intf in sorted(tb.switch_ports[name].items()):
                argv += ["-i", f"{port}@{intf}"]
            argv += ["--no-p4", "--", "--grpc-server-addr", grpc, "--cpu-port", "255"]
            tb.spawn(f"switch-{name}", argv)
            targets.append(Target(name, grpc, device, config, p4info, thrift_port=thrift))
        return targets

    def close(self) -> None:
        """Nothing beyond the processes, which the testbed stops by PID."""
