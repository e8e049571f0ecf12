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
from tests.vectors.generate import (
    PENDING_DIR,
    RTL_PENDING,
    all_vector_files,
    build_all,
    outcome_of,
    queue_config,
    vector_path,
)
from worker_transport.codec import decode, encode
from worker_transport.protocol import Outcome

VECTORS = Path(__file__).parent / "vectors"
FILES = all_vector_files(VECTORS)
"""Every file, those under rtl_pending/ included: the software switch replays them all."""


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
        assert f == vector_path(f.stem, VECTORS), f"{f.name} is in the wrong folder: regenerate"
        assert load(f) == json.loads(json.dumps(built[f.stem])), f"{f.name} is stale: regenerate"


def test_files_use_only_the_config_fields_the_rtl_reads() -> None:
    """fpga/tb/test_rtl_vectors.py and test_eth_mac.py replay tests/vectors/*.json and
    rtl_pending/*.json (the RTL has cluster_quota since issue 28): every file uses the config
    fields the RTL bench reads and no other; rtl_pending/ holds the RTL_PENDING files, which
    set cluster_quota (generate.py says why they have not moved up)."""
    required = {"capacity", "values", "max_clusters", "max_blocks", "frac_bits", "mode", "threshold",
                "congestion_threshold"}  # fpga/tb/queue_bench.py config_from_vector
    # raw.get("cluster_quota"): absent = capacity; raw.get("feedback"): absent = revision 2
    rtl_reads = required | {"cluster_quota", "feedback"}
    for f in FILES:
        assert required <= set(load(f)["config"]) <= rtl_reads, f.name
    pending = sorted(PENDING_DIR.glob("*.json"))
    assert {f.stem for f in pending} == RTL_PENDING
    for f in pending:
        assert "cluster_quota" in load(f)["config"], f.name


def test_quota_vectors_drop_for_the_quota_and_for_the_full_queue() -> None:
    """DROPPED_FULL with room in the queue (queue_util < 255 on the ACK, which shows the
    state the drop left unchanged) is the quota's; at 255 the queue's."""
    by_cause: Counter[str] = Counter()
    for f in FILES:
        if load(f)["config"].get("feedback", 2) != 2:
            continue  # revision 3's ACK says the cluster's room, not the queue's
        quota = load(f)["config"].get("cluster_quota")
        for step in load(f)["steps"]:
            out = None if step["out"] is None else bytes.fromhex(step["out"])
            if outcome_of(out) == "DROPPED_FULL":
                assert out is not None
                cause = "full" if out[12] == 255 else "quota"  # byte 12: queue_util
                assert cause == "full" or quota is not None, f"{f.name}: DROPPED_FULL with room, no quota"
                by_cause[f"{cause} quota={quota is not None}"] += 1
    assert by_cause["quota quota=True"] > 0 and by_cause["full quota=True"] > 0
    assert by_cause["full quota=False"] > 0


FEEDBACK3 = [f for f in FILES if load(f)["config"].get("feedback") == 3]


def test_feedback_revision_3_files_pin_the_new_feedback() -> None:
    """The files from before revision 3 have no ``feedback`` key (absent means 2, so they are
    what they were); the revision 3 files (28_.., 52_..) say 3, cover both modes with and
    without a quota, and replayed under revision 2 give other answers: a target that ignores
    the setting fails them. FIFO mode without a quota is the exception that the formula
    makes: room = capacity - occupied, the global occupancy (a target that applied OLAF
    mode's room in FIFO mode fails that file instead)."""
    assert all(load(f)["config"].get("feedback") in (None, 3) for f in FILES)
    assert {f.stem[:2] for f in FEEDBACK3} >= {"28", "29", "30", "31", "32", "52", "53", "54", "55"}
    kinds = {(load(f)["config"]["mode"], "cluster_quota" in load(f)["config"]) for f in FEEDBACK3}
    assert kinds == {("olaf", False), ("olaf", True), ("fifo", False), ("fifo", True)}
    for f in FEEDBACK3:
        doc = load(f)
        queue = OlafQueue(queue_config({**doc["config"], "feedback": 2}))
        messages = [bytes.fromhex(s["in"]) for s in doc["steps"]]
        responses, source, _ = queue.process(decode(messages, doc["config"]["values"]))
        got = dict(zip(source.tolist(), (r.hex() for r in encode(responses)), strict=True))
        differs = any(got.get(i) != s["out"] for i, s in enumerate(doc["steps"]))
        fifo_no_quota = doc["config"]["mode"] == "fifo" and "cluster_quota" not in doc["config"]
        assert differs != fifo_no_quota, f.name


def test_feedback_3_one_cluster_full_own_queue_says_0() -> None:
    """28_: every ACK of the one cluster says util 0 while CONGESTED (global) is set."""
    doc = load(VECTORS / "28_feedback3_own_queue_full.json")
    acks = [bytes.fromhex(s["out"]) for s in doc["steps"] if outcome_of(bytes.fromhex(s["out"])) not in
            ("DATA", "EMPTY")]
    assert [a[12] for a in acks] == [0] * len(acks)  # byte 12: queue_util
    assert sum(a[1] & 1 for a in acks) >= 4  # byte 1: flags, CONGESTED bit 0


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
