"""Every rule of the reference OlafQueue (DESIGN.md §3), field by field."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.queue import OlafQueue, QueueConfig
from worker_transport.codec import decode
from worker_transport.protocol import FLAG_CONGESTED, INT32_MAX, INT32_MIN, Mode, MsgType, Olaf, Outcome

V = 4
ONE = 1 << 16


def make(**config) -> OlafQueue:
    return OlafQueue(QueueConfig(**{"capacity": 4, "values": V, "threshold": ONE, **config}))


def update(
    worker: int,
    block: int = 0,
    reward: float = 1.0,
    values=None,
    *,
    cluster: int = 0,
    raw_reward: int | None = None,
    **kw,
):
    fields = dict(
        msg_type=1,
        cluster_id=cluster,
        worker_id=worker,
        block_id=block,
        reward=int(reward * ONE) if raw_reward is None else raw_reward,
        contributors=1 << (worker % 32),
        seq=worker,
        gen_time_us=100,
        model_version=10,
    )
    fields.update(kw)
    return bytes(Olaf(**fields, values=values if values is not None else [worker] * V))


PULL = bytes(Olaf(msg_type=3))


def send(q: OlafQueue, *raws: bytes) -> list:
    """Responses as dicts of header fields plus ``values``."""
    responses, _, _ = q.process(decode(list(raws), V))
    out = []
    for h, v in zip(responses.headers, responses.values, strict=True):
        d = {name: int(h[name]) for name in h.dtype.names}
        d["values"] = v.tolist()
        out.append(d)
    return out


def outcomes(q: OlafQueue, *raws: bytes) -> list[str]:
    return [
        Outcome(r["outcome"]).name if r["msg_type"] == MsgType.ACK else MsgType(r["msg_type"]).name
        for r in send(q, *raws)
    ]


def test_ack_is_the_update_header_with_outcome_and_feedback() -> None:
    q = make()
    raw = update(7, 3, 2.5, seq=99, gen_time_us=1234, model_version=5, cluster=2)
    (ack,) = send(q, raw)
    sent = Olaf(raw)
    assert ack["msg_type"] == MsgType.ACK and ack["num_values"] == 0 and ack["values"] == [0] * V
    for name in (
        "cluster_id",
        "worker_id",
        "block_id",
        "seq",
        "model_version",
        "reward",
        "gen_time_us",
        "contributors",
        "agg_count",
        "frac_bits",
    ):
        assert ack[name] == getattr(sent, name), name
    assert ack["outcome"] == Outcome.ENQUEUED
    # Revision 3: cluster 2 holds 1 slot and 3 are free, all 4 are its room.
    assert ack["queue_util"] == 0 and ack["active_clusters"] == 1 and ack["flags"] == 0


def test_replace_same_worker_unmerged() -> None:
    q = make()
    got = outcomes(q, update(1, values=[1] * V), update(1, values=[9] * V, seq=2))
    assert got == ["ENQUEUED", "REPLACED"]
    (data,) = send(q, PULL)
    assert data["values"] == [9] * V and data["seq"] == 2 and data["agg_count"] == 1
    assert q.occupied == 0


def test_merge_combines_fields() -> None:
    q = make()
    send(q, update(1, reward=1.0, gen_time_us=500, model_version=9, seq=5))
    assert outcomes(q, update(2, reward=1.5, gen_time_us=700, model_version=7, seq=6)) == ["MERGED"]
    (data,) = send(q, PULL)
    assert data["values"] == [3] * V and data["agg_count"] == 2
    assert data["reward"] == int(1.5 * ONE) and data["gen_time_us"] == 500 and data["model_version"] == 7
    assert data["contributors"] == 0b110 and data["seq"] == 5 and data["worker_id"] == 1


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (ONE - 1, "MERGED"),
        (ONE, "DROPPED_REWARD"),
        (ONE + 1, "DROPPED_REWARD"),
        (-(ONE - 1), "MERGED"),
        (-ONE, "REPLACED"),
    ],
)
def test_threshold_boundaries(delta: int, expected: str) -> None:
    q = make()
    send(q, update(1, raw_reward=ONE))
    assert outcomes(q, update(2, raw_reward=ONE - delta)) == [expected]


def test_replace_after_merge_keeps_position() -> None:
    q = make()
    send(q, update(1, block=0), update(2, block=0), update(3, block=1))
    assert outcomes(q, update(4, block=0, reward=9.0)) == ["REPLACED"]
    first, second = send(q, PULL, PULL)
    assert (first["worker_id"], first["agg_count"], first["block_id"]) == (4, 1, 0)
    assert second["block_id"] == 1


def test_same_worker_after_merge_merges() -> None:
    q = make()
    assert outcomes(q, update(1), update(2), update(1)) == ["ENQUEUED", "MERGED", "MERGED"]
    assert send(q, PULL)[0]["agg_count"] == 3


def test_merge_saturates() -> None:
    q = make()
    send(q, update(1, values=[INT32_MAX - 1, INT32_MIN + 1, 5, -5]))
    send(q, update(2, values=[10, -10, INT32_MAX, INT32_MIN]))
    assert send(q, PULL)[0]["values"] == [INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN]


def test_full_queue_drops_new_keys_but_merges_existing() -> None:
    q = make(capacity=2)
    assert outcomes(q, update(1, 0), update(1, 1), update(1, 2), update(2, 1)) == [
        "ENQUEUED",
        "ENQUEUED",
        "DROPPED_FULL",
        "MERGED",
    ]
    assert q.counters.outcomes[Outcome.DROPPED_FULL] == 1


def test_pull_clears_index_only_for_the_popped_slot() -> None:
    q = make(mode=Mode.FIFO)
    send(q, update(1, 0), update(2, 0))
    key = 0
    assert q.index[key] == 1
    send(q, PULL)
    assert q.index[key] == 1  # still the newer slot
    send(q, PULL)
    assert q.index[key] == -1
    q.mode = Mode.OLAF
    assert outcomes(q, update(3, 0), update(4, 0)) == ["ENQUEUED", "MERGED"]


def test_fifo_never_merges_and_mode_switches_at_run_time() -> None:
    q = make(mode=Mode.FIFO)
    assert outcomes(q, update(1), update(1), update(2)) == ["ENQUEUED"] * 3
    q.mode = Mode.OLAF
    assert outcomes(q, update(3)) == ["MERGED"]  # merges into the newest slot for the key
    assert [d["worker_id"] for d in send(q, PULL, PULL, PULL)] == [1, 1, 2]


def test_empty_pull_changes_nothing() -> None:
    q = make()
    (empty,) = send(q, PULL)
    assert empty["msg_type"] == MsgType.EMPTY and empty["num_values"] == 0
    assert all(empty[f] == 0 for f in ("cluster_id", "worker_id", "block_id", "agg_count", "seq", "reward"))
    assert (q.read_ptr, q.write_ptr, q.occupied) == (0, 0, 0)


@pytest.mark.parametrize("feedback, utils", [(2, [63, 127, 191, 255]), (3, [0, 63, 63, 191])])
def test_feedback_counts_clusters_and_congestion(feedback: int, utils: list[int]) -> None:
    """active_clusters and CONGESTED are global in both revisions; queue_util is the
    global occupancy in revision 2 and the cluster's lost room in revision 3: cluster 1
    after its 2nd block holds 2 of 4 slots with 1 free, room 3, 255 * 1 // 4 = 63."""
    q = make(congestion_threshold=191, feedback=feedback)
    acks = send(
        q, update(1, cluster=0), update(2, cluster=1), update(3, cluster=1, block=1), update(4, cluster=5)
    )
    assert [a["active_clusters"] for a in acks] == [1, 2, 2, 3]
    assert [a["queue_util"] for a in acks] == utils
    assert [a["flags"] & FLAG_CONGESTED for a in acks] == [0, 0, 1, 1]
    data = send(q, PULL, PULL, PULL, PULL)
    assert [d["active_clusters"] for d in data] == [2, 2, 1, 0]
    assert q.cluster_count[1] == 0 and q.active_clusters == 0


def test_invalid_updates_change_no_state() -> None:
    q = make(max_clusters=2, max_blocks=2)
    send(q, update(1))
    before = (q.occupied, q.write_ptr, list(q.index), q.values.copy(), dict(q.slots))
    bad = [
        update(2, cluster=2),
        update(2, block=2),
        update(2, frac_bits=3),
        bytes(Olaf(msg_type=1, values=[1, 2])),
    ]
    acks = send(q, *bad)
    assert [a["outcome"] for a in acks] == [Outcome.DROPPED_INVALID] * 4
    assert (q.occupied, q.write_ptr, list(q.index)) == before[:3]
    assert (q.values == before[3]).all() and q.slots == before[4]
    assert q.counters.outcomes[Outcome.DROPPED_INVALID] == 4


def test_config_rejects_impossible_values() -> None:
    for bad in ({"capacity": 0}, {"values": 256}, {"threshold": -1}, {"congestion_threshold": 256}):
        with pytest.raises(ValueError):
            QueueConfig(**bad)


def test_cluster_quota_drops_a_new_block_while_the_queue_has_room() -> None:
    """DESIGN.md §3 steps 4-5: a cluster at its quota gets DROPPED_FULL for a new block,
    merges and replacements into its slots still happen, other clusters still append,
    and a PULL of one of its slots lets it append again."""
    q = make(cluster_quota=2, capacity=4)
    assert q.cluster_quota == 2
    assert outcomes(q, update(1, 0), update(1, 1), update(1, 2)) == ["ENQUEUED", "ENQUEUED", "DROPPED_FULL"]
    assert q.occupied == 2 and q.cluster_count[0] == 2
    assert outcomes(q, update(2, 1), update(1, 0, seq=9)) == ["MERGED", "REPLACED"]
    assert outcomes(q, update(3, 0, cluster=1), update(3, 1, cluster=1)) == ["ENQUEUED", "ENQUEUED"]
    assert outcomes(q, update(3, 2, cluster=1)) == ["DROPPED_FULL"]
    assert q.counters.outcomes[Outcome.DROPPED_FULL] == 2
    send(q, PULL)  # cluster 0's block 0
    assert outcomes(q, update(1, 2)) == ["ENQUEUED"]


def test_cluster_quota_applies_in_fifo_mode() -> None:
    q = make(mode=Mode.FIFO, cluster_quota=1)
    assert outcomes(q, update(1), update(2), update(3, cluster=1)) == ["ENQUEUED", "DROPPED_FULL", "ENQUEUED"]


def test_cluster_quota_default_is_capacity() -> None:
    assert QueueConfig().cluster_quota == QueueConfig().capacity == 64
    assert QueueConfig(capacity=4).cluster_quota == 4
    q = make(capacity=3)
    assert outcomes(q, update(1, 0), update(1, 1), update(1, 2), update(1, 3)) == [
        "ENQUEUED", "ENQUEUED", "ENQUEUED", "DROPPED_FULL"]


@pytest.mark.parametrize("bad", [0, -1, 5, 1.0, True, "2", None])
def test_cluster_quota_out_of_range_is_refused_and_changes_nothing(bad: object) -> None:
    if bad is not None:  # None is QueueConfig's "no limit"
        with pytest.raises(ValueError, match="cluster_quota must be an integer 1..capacity"):
            QueueConfig(capacity=4, cluster_quota=bad)  # type: ignore[arg-type]
    q = make(cluster_quota=2)
    send(q, update(1, 0))
    with pytest.raises(ValueError, match=r"1\.\.capacity \(4\)"):
        q.cluster_quota = bad  # type: ignore[assignment]
    assert q.cluster_quota == 2
    assert outcomes(q, update(1, 1), update(1, 2)) == ["ENQUEUED", "DROPPED_FULL"]


def test_lowering_the_quota_below_a_clusters_count_loses_no_slot() -> None:
    """The quota only stops appends: a cluster above a new, lower quota keeps its slots,
    and drains below it through PULLs."""
    q = make(capacity=4)
    send(q, update(1, 0), update(1, 1), update(1, 2))
    q.cluster_quota = 1
    assert q.occupied == 3 and q.cluster_count[0] == 3
    assert outcomes(q, update(1, 3), update(2, 2)) == ["DROPPED_FULL", "MERGED"]
    assert [d["block_id"] for d in send(q, PULL, PULL)] == [0, 1]
    assert outcomes(q, update(1, 3)) == ["DROPPED_FULL"]  # still one queued: at the quota
    send(q, PULL)
    assert outcomes(q, update(1, 3)) == ["ENQUEUED"]
    q.cluster_quota = 4  # back to no limit
    assert outcomes(q, update(1, 0), update(1, 1)) == ["ENQUEUED", "ENQUEUED"]


# -- feedback revision 3 (DESIGN.md §3 Feedback) ---------------------------------------------
def room_util(capacity: int, occupied: int, held: int, quota: int, olaf: bool) -> int:
    """DESIGN.md §3's formula written out once more, apart from the queue's numpy."""
    new_room = max(0, min(capacity - occupied, quota - held))
    room = held + new_room if olaf else new_room
    return 255 * (capacity - room) // capacity


@pytest.mark.parametrize("capacity, occupied, held, quota, olaf, want", [
    (4, 4, 4, 4, True, 0),      # one cluster, queue full of its own blocks: no congestion
    (4, 4, 4, 4, False, 255),   # FIFO: a full queue is full
    (4, 2, 1, 4, True, 63),     # room 1 + 2 free = 3
    (4, 2, 1, 4, False, 127),   # room 2 free
    (4, 2, 1, 2, True, 127),    # quota 2: room 1 held + 1 new
    (64, 10, 5, 8, True, 223),  # room 5 + 3 = 8: 255 * 56 // 64
    (64, 10, 5, 3, False, 255),  # quota below held: no new room in FIFO mode
    (64, 10, 5, 3, True, 235),  # ... and only its own 5 slots in OLAF mode: 255 * 59 // 64
])
def test_revision_3_formula_at_hand_worked_points(capacity: int, occupied: int, held: int,
                                                  quota: int, olaf: bool, want: int) -> None:
    assert room_util(capacity, occupied, held, quota, olaf) == want
    q = make(capacity=capacity, max_clusters=2, mode=Mode.OLAF if olaf else Mode.FIFO)
    # cluster 0 takes `held` slots, cluster 1 the rest of `occupied`
    send(q, *(update(1, b) for b in range(held)),
         *(update(2, b, cluster=1) for b in range(occupied - held)))
    q.cluster_quota = quota
    assert (q.occupied, q.cluster_count[0]) == (occupied, held)
    assert q.cluster_util(0) == want
    # The ACK of an UPDATE that merges or replaces into cluster 0 (held unchanged) says so.
    if held and olaf:
        assert send(q, update(1, 0, seq=77))[0]["queue_util"] == want


def test_one_cluster_with_a_full_queue_of_its_own_blocks_gets_queue_util_0() -> None:
    """The revision's point: a queue full of the cluster's own mergeable blocks is not
    congestion (revision 2 said 255), and CONGESTED still says the queue is full."""
    for feedback, want in ((3, 0), (2, 255)):
        q = make(feedback=feedback)
        acks = send(q, *(update(1, b) for b in range(4)), update(2, 0), update(1, 3, seq=9))
        assert [Outcome(a["outcome"]).name for a in acks][-2:] == ["MERGED", "REPLACED"]
        assert [a["queue_util"] for a in acks[3:]] == [want] * 3
        assert all(a["flags"] & FLAG_CONGESTED for a in acks[3:])
        # A new block that does not fit is DROPPED_FULL, and still the cluster's room is
        # its 4 slots: the next update of the same blocks merges.
        ack = send(q, update(1, 5))[0]
        assert ack["outcome"] == Outcome.DROPPED_FULL and ack["queue_util"] == want
        # DATA and EMPTY carry the global occupancy in both revisions.
        assert send(q, PULL)[0]["queue_util"] == 255 * 3 // 4


def test_two_clusters_one_fills_and_the_others_room_shrinks() -> None:
    q = make(max_clusters=2)
    assert send(q, update(1, 0))[0]["queue_util"] == 0  # cluster 0: 1 held + 3 free
    utils, others = [], []
    for b in range(3):
        utils.append(send(q, update(2, b, cluster=1))[0]["queue_util"])
        others.append(q.cluster_util(0))
    assert utils == [63, 63, 63]  # cluster 1: held b+1, free 2-b: room 3 throughout
    assert others == [63, 127, 191]  # cluster 0: 1 held + 2-b free
    # cluster 0 now sees its 1 slot and nothing free
    ack = send(q, update(1, 0, seq=5))[0]
    assert ack["outcome"] == Outcome.REPLACED and ack["queue_util"] == 191
    assert q.cluster_util(0) == 191 and q.cluster_util(1) == 63


def test_quota_lowered_below_held_gives_no_new_room_in_fifo_mode() -> None:
    q = make(mode=Mode.FIFO)
    assert [a["queue_util"] for a in send(q, update(1, 0), update(1, 1))] == [63, 127]
    q.cluster_quota = 1
    ack = send(q, update(1, 2))[0]
    assert ack["outcome"] == Outcome.DROPPED_FULL and ack["queue_util"] == 255
    q.mode = Mode.OLAF  # its own 2 slots are room again in OLAF mode
    assert q.cluster_util(0) == 127


def test_dropped_invalid_carries_the_global_occupancy() -> None:
    q = make(max_clusters=2)
    send(q, update(1, 0))
    ack = send(q, update(2, 0, cluster=7))[0]  # out of range: no cluster to speak of
    assert ack["outcome"] == Outcome.DROPPED_INVALID and ack["queue_util"] == 63


def test_feedback_revision_is_validated_and_settable_at_run_time() -> None:
    assert QueueConfig().feedback == 3
    for bad in (1, 4, True, "3", 3.0, None):
        with pytest.raises(ValueError, match="feedback must be revision 2 or 3"):
            QueueConfig(feedback=bad)  # type: ignore[arg-type]
    q = make()
    send(q, *(update(1, b) for b in range(4)))
    assert send(q, update(1, 0, seq=3))[0]["queue_util"] == 0
    q.feedback = 2
    assert send(q, update(1, 0, seq=4))[0]["queue_util"] == 255
    with pytest.raises(ValueError, match="revision 2 or 3"):
        q.feedback = 5
    assert q.feedback == 2


def step_by_step(q: OlafQueue, raws: list[bytes]) -> list:
    return [send(q, r) for r in raws]


@pytest.mark.parametrize("quota", [5, 2])
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 2), st.integers(-3, 3), st.booleans()),
        max_size=60,
    )
)
def test_invariants_under_random_traffic(quota: int, ops: list) -> None:
    q = make(capacity=5, threshold=ONE, cluster_quota=quota)
    raws = [PULL if is_pull else update(w, b, float(r), cluster=c) for w, b, c, r, is_pull in ops]
    batch_q = make(capacity=5, threshold=ONE, cluster_quota=quota)
    one_batch = send(batch_q, *raws) if raws else []
    singles = [r for step in step_by_step(q, raws) for r in step]
    assert singles == one_batch
    # Every ACK of a valid UPDATE carries the formula's value of its cluster after it.
    check = make(capacity=5, threshold=ONE, cluster_quota=quota)
    for raw in raws:
        r = send(check, raw)[0]
        if r["msg_type"] == MsgType.ACK:
            c = r["cluster_id"]
            assert r["queue_util"] == room_util(5, check.occupied, check.cluster_count[c], quota, True)
    assert 0 <= q.occupied <= 5
    assert (q.write_ptr - q.read_ptr) % 5 == q.occupied % 5
    assert sum(q.cluster_count) == q.occupied
    assert max(q.cluster_count) <= quota
    assert q.active_clusters == sum(1 for c in q.cluster_count if c)
    queued = [(q.read_ptr + k) % 5 for k in range(q.occupied)]
    for key, slot in enumerate(q.index):
        if slot >= 0:
            assert slot in queued
            where = (q.slots["cluster_id"][slot], q.slots["block_id"][slot])
            assert where == divmod(key, q.config.max_blocks)
    assert np.isfinite(q.values).all()
