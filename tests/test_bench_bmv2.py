"""benchmarks/bench_bmv2.py's machinery: one very short round of each switch, then nothing left behind."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from benchmarks import bench_bmv2
from bmv2_topologies.netns import can_create_namespaces
from bmv2_topologies.simple_switch import missing_tools


def test_logging_marker_detection(tmp_path: Path) -> None:
    without = tmp_path / "plain"
    without.write_bytes(b"\x7fELF no per-packet strings here")
    with_marker = tmp_path / "logging"
    with_marker.write_bytes(b"\x7fELF ... [{}] [cxt {}] " + bench_bmv2.LOGGING_MARKER + b" {}")
    assert not bench_bmv2.bmv2_logging_macros(str(without))
    assert bench_bmv2.bmv2_logging_macros(str(with_marker))


@pytest.mark.skipif((can_create_namespaces() or missing_tools()) is not None,
                    reason=str(can_create_namespaces() or missing_tools()))
def test_one_short_round_reports_both_rates_and_cleans_up(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_bmv2.main(["--rounds", "1", "--seconds", "0.5", "--window", "16"]) == 0
    out = capsys.readouterr().out
    assert "logging macros" in out
    m = re.search(r"interface mode\)\s+(\d+) answers/s, simple_switch\s+(\d+) answers/s, "
                  r"ratio soft/bmv2 ([\d.]+)", out)
    assert m is not None, out
    soft, bmv2, ratio = int(m[1]), int(m[2]), float(m[3])
    assert soft > 0 and bmv2 > 0
    assert ratio == pytest.approx(soft / bmv2, rel=0.02)
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "olaf-bmv2bench" not in spaces
