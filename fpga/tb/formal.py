"""The OlafQueue proof flow: build the proof model with yosys, check it with yosys-smtbmc
and cvc4. test_rtl_formal.py says what is proved and how.

The induction step is the longest check of ``make test`` (minutes of one core), so the
suite starts it in the background as soon as its tests are collected (fpga/tb/conftest.py),
at the lowest priority: it then runs on the CPU the rest of the suite leaves idle, and
test_invariants_by_induction collects its verdict. By hand::

    python fpga/tb/formal.py DIR    # build the model in DIR, run the induction step
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from sim_runner import FPGA_DIR, RTL_SOURCES

# k of the queue's k-induction; the bounded run from reset is its base case (DEPTH >= IND_K).
IND_K = 2
MODEL_SCRIPT = FPGA_DIR / "formal" / "olaf_queue_model.ys"
SOLVER = ["-s", "cvc4", "--noincr", "--logic", "QF_BV", "-S", "--bitblast=eager"]
TOOLS = {"yosys": "yosys", "yosys-smtbmc": "yosys", "cvc4": "cvc4"}
INDUCTION_DONE = "Temporal induction successful."


def missing_packages() -> list[str]:
    """Debian packages whose tools the proofs need and this machine lacks."""
    return sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})


def build_model(sources: list[Path], smt2: Path, *defines: str) -> None:
    # OLAF_FORMAL_NO_PAYLOAD: the payload-stability asserts are proved on the output
    # FIFO alone (test_output_fifo_holds), since the model cuts the payload.
    flags = " ".join(f"-D{name}" for name in ("OLAF_FORMAL_NO_PAYLOAD", *defines))
    script = (
        f"read_verilog -defer -formal -sv {flags} {' '.join(map(str, sources))}; "
        f"script {MODEL_SCRIPT}; write_smt2 -stbv {smt2}"
    )
    yosys(script)


def yosys(script: str) -> None:
    proc = subprocess.run(["yosys", "-q", "-p", script], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"yosys failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def smtbmc(smt2: Path, depth: int, *mode: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run the BMC (or ``-i``: the induction step); returns the process, wall seconds and
    CPU seconds of the children it reaped."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.run(
        ["yosys-smtbmc", *SOLVER, "--noprogress", *mode, "-t", str(depth), str(smt2)],
        capture_output=True, text=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, time.monotonic() - start, cpu


def prove_induction_step(workdir: Path) -> tuple[bool, str]:
    """Build the queue's proof model in ``workdir`` and run its induction step with k =
    IND_K; returns whether it held and the report (smtbmc's output, then one summary line)."""
    smt2 = workdir / "olaf_queue.smt2"
    build_model(RTL_SOURCES, smt2)
    proc, wall, cpu = smtbmc(smt2, IND_K, "-i")
    held = proc.returncode == 0 and INDUCTION_DONE in proc.stdout
    summary = (f"formal: invariants {'inductive' if held else 'NOT inductive'} with k = {IND_K} "
               f"(yosys-smtbmc + cvc4, {cpu:.0f} s CPU, {wall:.0f} s wall)")
    return held, f"{proc.stdout}{proc.stderr}\n{summary}\n"


@dataclass
class BackgroundProof:
    """``python formal.py DIR`` running at the lowest priority, its report going to DIR."""

    process: subprocess.Popen[bytes]
    report: Path

    @classmethod
    def start(cls, workdir: Path) -> BackgroundProof:
        report = workdir / "induction.log"
        with report.open("wb") as out:
            # A session of its own, so stop() reaches the solver it spawns as well.
            process = subprocess.Popen(
                ["nice", "-n", "19", sys.executable, __file__, str(workdir)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        return cls(process, report)

    def result(self, timeout: float) -> tuple[bool, str]:
        """Wait for the verdict; returns whether the step held (main's exit code, which
        prove_induction_step decides) and the report."""
        self.process.wait(timeout)
        return self.process.returncode == 0, self.report.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


INDUCTION = pytest.StashKey[BackgroundProof]()
"""Where the session keeps the induction step it started at collection."""


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: formal.py DIR (an existing directory for the model and its files)", file=sys.stderr)
        return 2
    held, report = prove_induction_step(Path(argv[0]))
    print(report, end="")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
