"""benchmarks/bench_bmv2.py's machinery: one very short round of each switch (the software switch,
bmv2's fast build and its logging build), then nothing left behind."""

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


def test_rounds_rotate_and_ratios_pair_the_builds() -> None:
    assert [bench_bmv2.rotated(["soft", "fast", "debug"], k) for k in range(4)] == [
        ["soft", "fast", "debug"], ["fast", "debug", "soft"], ["debug", "soft", "fast"],
        ["soft", "fast", "debug"]]
    assert bench_bmv2.ratio_pairs(("fast", "debug")) == [("soft", "fast"), ("fast", "debug")]
    assert bench_bmv2.ratio_pairs(("debug",)) == [("soft", "debug")]


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_bmv2.main(["--rounds", "0"]) == 2
    assert "--rounds" in capsys.readouterr().err


NO_BENCH = can_create_namespaces() or missing_tools("fast") or missing_tools("debug")


@pytest.mark.skipif(NO_BENCH is not None, reason=str(NO_BENCH))
def test_one_short_round_reports_three_rates_and_cleans_up(capsys: pytest.CaptureFixture[str]) -> None:
    """Soft switch, fast bmv2 and logging bmv2 on the same traffic, with both ratios."""
    assert bench_bmv2.main(["--rounds", "1", "--seconds", "0.5", "--window", "16"]) == 0
    out = capsys.readouterr().out
    # Each build is resolved to its own binary and checked for the per-packet log strings.
    assert re.search(r"bmv2 fast: \S*bmv2-fast/bin/simple_switch .*logging macros compiled out", out), out
    assert re.search(r"bmv2 debug: \S*p4tools/bin/simple_switch .*logging macros COMPILED IN", out), out
    m = re.search(r"interface mode\)\s+(\d+) answers/s, simple_switch fast\s+(\d+) answers/s, "
                  r"simple_switch debug\s+(\d+) answers/s; "
                  r"ratio soft/fast ([\d.]+), ratio fast/debug ([\d.]+)", out)
    assert m is not None, out
    soft, fast, debug = int(m[1]), int(m[2]), int(m[3])
    assert soft > 0 and fast > 0 and debug > 0
    assert float(m[4]) == pytest.approx(soft / fast, rel=0.02)
    assert float(m[5]) == pytest.approx(fast / debug, rel=0.02)
    assert re.search(r"ratio fast/debug: median [\d.]+ \(min", out), out
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "olaf-bmv2bench" not in spaces
