"""The shared packet vectors: present, complete, and what the reference OlafQueue produces.

This is the software half of the vector replay; the P4 and RTL halves replay the
same files (tests/test_vectors_bmv2.py, fpga/tb/).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from dataplane.queue import OlafQueue
from tests.vectors.generate import build_all, outcome_of, queue_config
from worker_transport.codec import decode, encode
from worker_transport.protocol import Outcome

VECTORS = Path(__file__).parent / "vectors"
FILES = sorted(VECTORS.glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def test_enough_vector_files() -> None:
    assert len(FILES) >= 21
    assert any("random" in f.name for f in FILES)


def test_files_are_what_the_generator_writes() -> None:
    """A changed queue rule or scenario shows up here until the vectors are regenerated."""
    built = build_all()
    assert sorted(built) == [f.stem for f in FILES]
    for f in FILES:
        assert load(f) == json.loads(json.dumps(built[f.stem])), f"{f.name} is stale: regenerate"


def test_every_outcome_and_response_kind_is_covered() -> None:
    seen: Counter[str | None] = Counter()
    for f in FILES:
        for step in load(f)["steps"]:
            seen[outcome_of(None if step["out"] is None else bytes.fromhex(step["out"]))] += 1
    for name in [o.name for o in Outcome] + ["DATA", "EMPTY", None]:
        assert seen[name] > 0, f"no vector produces {name}"


def test_vectors_fit_every_target() -> None:
    for f in FILES:
        c = load(f)["config"]
        assert c["values"] == 64 and c["capacity"] <= 64
        assert c["max_clusters"] <= 16 and c["max_blocks"] <= 1024


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_replay_as_one_batch(path: Path) -> None:
    """The same answers when the whole file arrives as one batch (the switch's fast path)."""
    doc = load(path)
    queue = OlafQueue(queue_config(doc["config"]))
    messages = [bytes.fromhex(s["in"]) for s in doc["steps"]]
    responses, source, _ = queue.process(decode(messages, doc["config"]["values"]))
    got = [None] * len(messages)
    for i, raw in zip(source.tolist(), encode(responses), strict=True):
        got[i] = raw.hex()
    assert got == [s["out"] for s in doc["steps"]]
