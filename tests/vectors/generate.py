"""Generate the shared packet vectors from the reference OlafQueue.

Each scenario lists its input messages and the outcome every step must have
(``ENQUEUED`` ... for an UPDATE's ACK, ``DATA``/``EMPTY`` for a PULL, ``None`` for
a silent drop). The generator runs the reference model, refuses to write a file
whose outcomes differ from the scenario's expectation, and writes the hex of
every input and response. Run: ``python tests/vectors/generate.py``.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dataplane.queue import OlafQueue, QueueConfig
from worker_transport.codec import decode
from worker_transport.fixedpoint import to_fixed
from worker_transport.protocol import INT32_MAX, INT32_MIN, Mode, MsgType, Olaf, Outcome

HERE = Path(__file__).parent
V = 64
SEED = 20300
ONE = 1 << 16
"""1.0 in the default fixed point (16 fraction bits)."""


def fx(x: float) -> int:
    return int(to_fixed(x, 16))


def update(
    worker: int,
    block: int = 0,
    reward: float = 1.0,
    values: list[int] | int | None = None,
    *,
    cluster: int = 0,
    seq: int = 1,
    version: int = 1,
    gen: int = 1000,
    agg: int = 1,
    raw_reward: int | None = None,
    **fields: int,
) -> bytes:
    if values is None:
        values = [worker * 1000 + i for i in range(V)]
    elif isinstance(values, int):
        values = [values] * V
    return bytes(
        Olaf(
            msg_type=MsgType.UPDATE, cluster_id=cluster, worker_id=worker, block_id=block,
            agg_count=agg, seq=seq, model_version=version,
            reward=fx(reward) if raw_reward is None else raw_reward,
            gen_time_us=gen, contributors=1 << (worker % 32), values=values, **fields,
        )
    )


def pull() -> bytes:
    return bytes(Olaf(msg_type=MsgType.PULL))


Step = tuple[bytes, str | None]
"""An input message and the outcome its answer must have."""


def scenarios() -> dict[str, tuple[str, dict, list[Step]]]:
    """name -> (description, config overrides, steps)."""
    t = fx(1.0)
    s: dict[str, tuple[str, dict, list[Step]]] = {}
    s["01_enqueue_pull"] = (
        "§3 rule 4 then PULL: an UPDATE is queued, a PULL returns it as DATA, the next gets EMPTY",
        {}, [(update(1), "ENQUEUED"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["02_pull_empty"] = (
        "PULL on an empty queue returns EMPTY and changes nothing",
        {}, [(pull(), "EMPTY"), (pull(), "EMPTY"), (update(2), "ENQUEUED"), (pull(), "DATA")],
    )
    s["03_replace_same_worker"] = (
        "§3 rule 1: a newer UPDATE of the same worker and block replaces its unmerged older one",
        {"threshold": t},
        [(update(1, seq=1, gen=10), "ENQUEUED"), (update(1, seq=2, gen=20, values=7), "REPLACED"),
         (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["04_merge_close_rewards"] = (
        "§3 rule 2: different workers, same cluster and block, |dr| < threshold: values add, "
        "agg_count+1, reward max, gen_time min, model_version min, contributors OR, seq/worker kept",
        {"threshold": t},
        [(update(1, reward=1.0, seq=5, version=9, gen=500), "ENQUEUED"),
         (update(2, reward=1.5, seq=6, version=7, gen=700), "MERGED"),
         (update(3, reward=0.75, seq=7, version=8, gen=300), "MERGED"),
         (pull(), "DATA")],
    )
    s["05_replace_after_merge"] = (
        "§3 rule 3 after a merge: a much better reward replaces the merged slot in place",
        {"threshold": t},
        [(update(1, reward=1.0), "ENQUEUED"), (update(2, reward=1.2), "MERGED"),
         (update(3, reward=5.0), "REPLACED"), (update(4, block=1), "ENQUEUED"),
         (pull(), "DATA"), (pull(), "DATA")],
    )
    s["06_drop_lower_reward"] = (
        "§3 rule 3: the lower-reward update loses and is dropped",
        {"threshold": t},
        [(update(1, reward=4.0), "ENQUEUED"), (update(2, reward=1.0), "DROPPED_REWARD"),
         (update(2, reward=-3.0), "DROPPED_REWARD"), (pull(), "DATA")],
    )
    s["07_threshold_tie"] = (
        "|dr| == threshold is not a merge: higher replaces, lower is dropped",
        {"threshold": t},
        [(update(1, reward=2.0), "ENQUEUED"), (update(2, reward=1.0), "DROPPED_REWARD"),
         (update(3, reward=3.0), "REPLACED"), (pull(), "DATA")],
    )
    s["08_threshold_just_below"] = (
        "|dr| == threshold - 1 LSB merges",
        {"threshold": t},
        [(update(1, raw_reward=5 * ONE), "ENQUEUED"),
         (update(2, raw_reward=5 * ONE + t - 1), "MERGED"),
         (update(3, raw_reward=5 * ONE + t - 1 - t), "DROPPED_REWARD"), (pull(), "DATA")],
    )
    big, small = INT32_MAX - 10, INT32_MIN + 10
    s["09_merge_saturation"] = (
        "merged values add with signed saturation (P4 |+|), in both directions",
        {},
        [(update(1, values=[big, small, 5, -5] * 16), "ENQUEUED"),
         (update(2, values=[100, -100, INT32_MAX, INT32_MIN] * 16), "MERGED"),
         (update(3, values=[INT32_MAX, INT32_MIN, 1, -1] * 16), "MERGED"), (pull(), "DATA")],
    )
    s["10_same_worker_after_merge"] = (
        "rule 1 needs agg_count == 1: the first worker's newer update merges into a merged slot",
        {"threshold": t},
        [(update(1), "ENQUEUED"), (update(2), "MERGED"), (update(1, seq=2), "MERGED"),
         (pull(), "DATA")],
    )
    s["11_full_queue"] = (
        "§3 rule 5: no slot for the key and the queue full -> DROPPED_FULL; merges still succeed",
        {"capacity": 2, "threshold": t},
        [(update(1, block=0), "ENQUEUED"), (update(1, block=1), "ENQUEUED"),
         (update(1, block=2), "DROPPED_FULL"), (update(2, block=1), "MERGED"),
         (update(1, block=0, seq=2), "REPLACED"), (pull(), "DATA"),
         (update(1, block=2), "ENQUEUED"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["12_map_cleared_on_pull"] = (
        "PULL clears the index entry of the popped slot: the same key is enqueued afresh",
        {"threshold": t},
        [(update(1), "ENQUEUED"), (pull(), "DATA"), (update(2), "ENQUEUED"),
         (update(3), "MERGED"), (pull(), "DATA")],
    )
    s["13_fifo_mode"] = (
        "FIFO mode: drop-tail, no merging or replacing; slots leave in arrival order",
        {"capacity": 3, "mode": "fifo", "threshold": t},
        [(update(1), "ENQUEUED"), (update(1, seq=2), "ENQUEUED"), (update(2), "ENQUEUED"),
         (update(3), "DROPPED_FULL"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"),
         (pull(), "EMPTY")],
    )
    s["14_fifo_index_newest"] = (
        "FIFO keeps the index at the newest slot; popping an older slot leaves it pointing there",
        {"capacity": 4, "mode": "fifo"},
        [(update(1, block=3), "ENQUEUED"), (update(2, block=3), "ENQUEUED"), (pull(), "DATA"),
         (update(3, block=3), "ENQUEUED"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["15_clusters_isolated"] = (
        "merges never cross clusters; active_clusters counts clusters with a queued slot",
        {"threshold": t},
        [(update(1, cluster=0), "ENQUEUED"), (update(2, cluster=1), "ENQUEUED"),
         (update(3, cluster=2), "ENQUEUED"), (update(4, cluster=1), "MERGED"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    ring: list[Step] = [(update(9, block=999), "ENQUEUED")]
    for k in range(7):
        ring += [(update(k % 3 + 1, block=k), "ENQUEUED"), (update(5, block=k + 100), "ENQUEUED"),
                 (pull(), "DATA"), (pull(), "DATA")]
    ring += [(pull(), "DATA"), (pull(), "EMPTY")]
    s["16_ring_wraparound"] = (
        "read and write pointers wrap around the ring; order is preserved",
        {"capacity": 3, "threshold": t}, ring,
    )
    s["17_congestion_flag"] = (
        "queue_util = floor(255*occupied/capacity); CONGESTED when util >= congestion_threshold",
        {"capacity": 4, "congestion_threshold": 191},
        [(update(1, block=b), "ENQUEUED") for b in range(4)]
        + [(update(1, block=9), "DROPPED_FULL")] + [(pull(), "DATA")] * 4 + [(pull(), "EMPTY")],
    )
    bad_len = bytearray(update(1))
    bad_len = bytes(bad_len[:-4])
    s["18_invalid_answered"] = (
        "UPDATEs with wrong num_values, a length that disagrees, wrong frac_bits, or ids out of range "
        "are answered DROPPED_INVALID and change no state",
        {"max_clusters": 4, "max_blocks": 8, "threshold": t},
        [(update(1), "ENQUEUED"),
         (bytes(Olaf(msg_type=1, worker_id=2, values=[1] * 32)), "DROPPED_INVALID"),
         (bad_len, "DROPPED_INVALID"),
         (update(2, frac_bits=8), "DROPPED_INVALID"),
         (update(2, cluster=4), "DROPPED_INVALID"),
         (update(2, block=8), "DROPPED_INVALID"),
         (update(2, cluster=0xFFFF, block=0xFFFF), "DROPPED_INVALID"),
         (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["19_invalid_silent"] = (
        "dropped without an answer: too short, version != 1, unknown type, PULL with values or "
        "extra bytes, ACK/DATA/EMPTY from a host",
        {},
        [(update(1)[:35], None),
         (bytes([0x21]) + update(1)[1:], None),
         (bytes([0x17]) + update(1)[1:], None),
         (bytes([0x10]) + update(1)[1:], None),
         (bytes(Olaf(msg_type=MsgType.PULL, num_values=1, values=[0])), None),
         (pull() + b"\0\0\0\0", None),
         (bytes(Olaf(msg_type=MsgType.ACK)), None),
         (bytes(Olaf(msg_type=MsgType.DATA, values=[0] * V)), None),
         (bytes(Olaf(msg_type=MsgType.EMPTY)), None),
         (update(1), "ENQUEUED"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["20_negative_rewards"] = (
        "rewards are signed: distances and maxima work below zero",
        {"threshold": t},
        [(update(1, reward=-100.0), "ENQUEUED"), (update(2, reward=-100.5), "MERGED"),
         (update(3, reward=-200.0), "DROPPED_REWARD"), (update(4, reward=-50.0), "REPLACED"),
         (pull(), "DATA")],
    )
    s["21_extreme_rewards"] = (
        "reward distance beyond int32 (exact, or saturating, gives the same comparison)",
        {"threshold": INT32_MAX},
        [(update(1, raw_reward=INT32_MIN), "ENQUEUED"),
         (update(2, raw_reward=INT32_MAX), "REPLACED"),
         (update(3, raw_reward=0), "DROPPED_REWARD"), (update(4, raw_reward=1), "MERGED"),
         (pull(), "DATA")],
    )
    s["22_default_threshold_merges"] = (
        "until the controller sets a threshold it is the largest value: every compatible update merges",
        {},
        [(update(1, reward=-1000.0), "ENQUEUED"), (update(2, reward=1000.0), "MERGED"),
         (update(3, reward=30000.0), "MERGED"), (pull(), "DATA")],
    )
    s["23_preaggregated_update"] = (
        "an UPDATE arriving with agg_count > 1 (from another switch) is not replaced by its worker",
        {"threshold": t},
        [(update(1, agg=3), "ENQUEUED"), (update(1, seq=2), "MERGED"), (pull(), "DATA")],
    )
    # -- cluster_quota (DESIGN.md §3 steps 4-5): files in RTL_PENDING, see there --
    s["24_cluster_quota_reached"] = (
        "cluster_quota 2 of capacity 4: a cluster's third new block is DROPPED_FULL while the queue "
        "has room (util 127); its merges and replacements go on, another cluster appends, and a PULL "
        "of one of its slots lets it append again",
        {"capacity": 4, "cluster_quota": 2, "threshold": t},
        [(update(1, block=0), "ENQUEUED"), (update(1, block=1), "ENQUEUED"),
         (update(1, block=2), "DROPPED_FULL"), (update(2, block=1), "MERGED"),
         (update(1, block=0, seq=2), "REPLACED"), (update(3, block=0, cluster=1), "ENQUEUED"),
         (update(4, block=2), "DROPPED_FULL"), (pull(), "DATA"), (update(4, block=2), "ENQUEUED"),
         (update(3, block=1, cluster=1), "ENQUEUED"), (update(3, block=2, cluster=1), "DROPPED_FULL"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["25_cluster_quota_not_reached"] = (
        "cluster_quota 3 of capacity 4: below its quota a cluster appends; DROPPED_FULL comes from "
        "the full queue (util 255), not from the quota, for a cluster with 1 slot as for one with 3",
        {"capacity": 4, "cluster_quota": 3, "threshold": t},
        [(update(1, block=0), "ENQUEUED"), (update(1, block=1), "ENQUEUED"),
         (update(2, block=0, cluster=1), "ENQUEUED"), (update(1, block=2), "ENQUEUED"),
         (update(2, block=1, cluster=1), "DROPPED_FULL"), (update(1, block=3), "DROPPED_FULL"),
         (pull(), "DATA"), (update(2, block=1, cluster=1), "ENQUEUED"), (pull(), "DATA"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["26_cluster_quota_fifo"] = (
        "the quota applies in FIFO mode too: every UPDATE is a new slot, so the same key counts "
        "twice and the third is DROPPED_FULL at quota 2 with room in the queue",
        {"capacity": 4, "cluster_quota": 2, "mode": "fifo", "threshold": t},
        [(update(1), "ENQUEUED"), (update(2), "ENQUEUED"), (update(3), "DROPPED_FULL"),
         (update(4, cluster=3), "ENQUEUED"), (pull(), "DATA"), (update(3), "ENQUEUED"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["27_cluster_quota_one"] = (
        "cluster_quota 1: one slot per cluster, four clusters fill capacity 4; active_clusters 4",
        {"capacity": 4, "cluster_quota": 1, "threshold": t},
        [(update(1, block=0, cluster=0), "ENQUEUED"), (update(1, block=1, cluster=0), "DROPPED_FULL"),
         (update(2, block=0, cluster=1), "ENQUEUED"), (update(3, block=0, cluster=2), "ENQUEUED"),
         (update(4, block=5, cluster=15), "ENQUEUED"), (update(5, block=0, cluster=4), "DROPPED_FULL"),
         (update(6, block=0, cluster=1), "MERGED"),
         (pull(), "DATA"), (update(1, block=1, cluster=0), "ENQUEUED"), (pull(), "DATA"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    # -- feedback revision 3 (DESIGN.md §3 Feedback): "feedback": 3 in the config --
    f3 = {"feedback": 3, "threshold": t}
    s["28_feedback3_own_queue_full"] = (
        "revision 3, one cluster: a queue full of the cluster's own blocks is not congestion; every "
        "ACK says util 0 (room = its 4 held slots), through merges, a replacement and a DROPPED_FULL "
        "of a new block, while CONGESTED (global) is set; DATA and EMPTY carry the global occupancy",
        {"capacity": 4, **f3},
        [(update(1, block=0), "ENQUEUED"), (update(1, block=1), "ENQUEUED"),
         (update(1, block=2), "ENQUEUED"), (update(1, block=3), "ENQUEUED"),
         (update(2, block=0), "MERGED"), (update(1, block=3, seq=2), "REPLACED"),
         (update(2, block=4), "DROPPED_FULL"), (pull(), "DATA"), (update(2, block=4), "ENQUEUED"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["29_feedback3_two_clusters"] = (
        "revision 3, two clusters: cluster 0 holds 1 slot; as cluster 1 fills the rest, cluster 1's "
        "room stays 3 (util 63) and cluster 0's shrinks to its own slot (util 191 on its ACK); "
        "after PULLs cluster 0's room grows back",
        {"capacity": 4, **f3},
        [(update(1, block=0), "ENQUEUED"), (update(2, block=0, cluster=1), "ENQUEUED"),
         (update(1, block=0, seq=2), "REPLACED"), (update(2, block=1, cluster=1), "ENQUEUED"),
         (update(2, block=2, cluster=1), "ENQUEUED"), (update(1, block=0, seq=3), "REPLACED"),
         (update(1, block=1), "DROPPED_FULL"), (update(3, block=2, cluster=1), "MERGED"),
         (pull(), "DATA"), (pull(), "DATA"), (update(1, block=1), "ENQUEUED"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["30_feedback3_quota"] = (
        "revision 3 with cluster_quota 2 of capacity 4: a cluster's room is its held slots plus "
        "what its quota still allows (util 127 at the quota, with room in the queue); another "
        "cluster's room is bounded by the free slots",
        {"capacity": 4, "cluster_quota": 2, **f3},
        [(update(1, block=0), "ENQUEUED"), (update(1, block=1), "ENQUEUED"),
         (update(1, block=2), "DROPPED_FULL"), (update(2, block=1), "MERGED"),
         (update(3, block=0, cluster=1), "ENQUEUED"), (update(3, block=1, cluster=1), "ENQUEUED"),
         (update(3, block=2, cluster=1), "DROPPED_FULL"), (pull(), "DATA"),
         (update(1, block=2), "ENQUEUED"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"),
         (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["31_feedback3_fifo"] = (
        "revision 3 in FIFO mode: a cluster's room is only the new slots it may take (nothing "
        "merges), so a full queue says 255 to its own cluster too; with quota 2 a cluster at its "
        "quota gets no new room (util 255 with room in the queue)",
        {"capacity": 4, "cluster_quota": 2, "mode": "fifo", **f3},
        [(update(1), "ENQUEUED"), (update(2), "ENQUEUED"), (update(3), "DROPPED_FULL"),
         (update(4, cluster=1), "ENQUEUED"), (update(5, cluster=1), "ENQUEUED"),
         (update(6, cluster=2), "DROPPED_FULL"), (pull(), "DATA"), (update(3), "ENQUEUED"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    s["32_feedback3_invalid_global"] = (
        "revision 3: an ACK answering DROPPED_INVALID (here a cluster_id out of range) carries the "
        "global occupancy, since there is no cluster to speak of",
        {"capacity": 4, "max_clusters": 2, **f3},
        [(update(1, block=0), "ENQUEUED"), (update(2, block=0, cluster=5), "DROPPED_INVALID"),
         (update(3, block=1, cluster=1), "ENQUEUED"), (update(2, block=7, frac_bits=3), "DROPPED_INVALID"),
         (pull(), "DATA"), (pull(), "DATA"), (pull(), "EMPTY")],
    )
    return s


RANDOM_FEEDBACK3 = {
    "52_random_feedback3": ("OLAF mode, no quota, capacity 16", {"capacity": 16}, 3000),
    "53_random_feedback3_quota": ("OLAF mode, cluster_quota 3 of capacity 8",
                                  {"capacity": 8, "cluster_quota": 3}, 1500),
    "54_random_feedback3_fifo": ("FIFO mode, no quota, capacity 16",
                                 {"capacity": 16, "mode": "fifo"}, 1500),
    "55_random_feedback3_fifo_quota": ("FIFO mode, cluster_quota 3 of capacity 8",
                                       {"capacity": 8, "cluster_quota": 3, "mode": "fifo"}, 1500),
}
"""Random traffic under feedback revision 3: name -> (what, config, steps). One file per mode
and quota setting, since a file's config is constant; seeds SEED + 2, + 3, ... in this order."""


def random_scenario(seed: int, steps: int) -> list[Step]:
    """Mixed traffic: 8 workers, 3 clusters, 6 blocks, 25 % pulls, and a few invalid messages."""
    rng = random.Random(seed)
    out: list[Step] = []
    for _ in range(steps):
        r = rng.random()
        if r < 0.25:
            out.append((pull(), "?"))
        elif r < 0.97:
            w = rng.randrange(8)
            out.append((update(
                w, block=rng.randrange(6), cluster=w % 3, reward=rng.choice([0.0, 0.5, 1.0, 3.0, -2.0]),
                values=[rng.randrange(-(1 << 20), 1 << 20) for _ in range(V)],
                seq=rng.randrange(1 << 32), version=rng.randrange(100), gen=rng.randrange(1 << 32),
            ), "?"))
        else:
            junk = bytearray(update(1))
            junk[rng.randrange(36)] = rng.randrange(256)
            out.append((bytes(junk[: rng.choice([len(junk), 36, 20])]), "?"))
    return out


CONFIG_DEFAULTS = {
    "capacity": 4, "values": V, "max_clusters": 16, "max_blocks": 1024, "frac_bits": 16,
    "mode": "olaf", "threshold": INT32_MAX, "congestion_threshold": 192,
}


RTL_PENDING = {
    "24_cluster_quota_reached", "25_cluster_quota_not_reached", "26_cluster_quota_fifo",
    "27_cluster_quota_one", "51_random_quota",
}
"""The files that set ``cluster_quota``, written to ``rtl_pending/`` below this folder; every
target replays them from there (``all_vector_files``). The name is historical: the Verilog
queue has the quota since issue 28 and fpga/tb (test_rtl_vectors.py, test_eth_mac.py) replays
this folder too, with ``config_from_vector`` reading ``cluster_quota``. The files have not
moved up only because tests/test_vectors_bmv2.py (the quota file check and the
``quota_off_by_one`` mutant) and tests/test_switch_udp.py name them by their ``rtl_pending/``
path: to move them, empty this set, regenerate and change those paths in the same commit.
The feedback revision 3 files (28_.. and 52_..) live in this folder even where they set a
quota: every target's replay reads both folders."""
PENDING_DIR = HERE / "rtl_pending"


def vector_path(name: str, directory: Path = HERE) -> Path:
    """Where the file of scenario ``name`` lives (RTL_PENDING ones one folder down)."""
    return (directory / PENDING_DIR.name if name in RTL_PENDING else directory) / f"{name}.json"


def all_vector_files(directory: Path = HERE) -> list[Path]:
    """Every vector file, the RTL_PENDING ones included, sorted by name."""
    files = [*directory.glob("*.json"), *(directory / PENDING_DIR.name).glob("*.json")]
    return sorted(files, key=lambda f: f.name)


def queue_config(config: dict) -> QueueConfig:
    """A file's config as the reference's QueueConfig; no ``cluster_quota`` means capacity,
    no ``feedback`` means revision 2 (every file from before revision 3 has none)."""
    return QueueConfig(**{**config, "mode": Mode.OLAF if config["mode"] == "olaf" else Mode.FIFO,
                          "feedback": config.get("feedback", 2)})


def describe(message: bytes, response: bytes | None) -> str:
    def brief(raw: bytes) -> str:
        if len(raw) < 36:
            return f"{len(raw)} bytes"
        p = Olaf(raw)
        name = MsgType(p.msg_type).name if p.msg_type in MsgType._value2member_map_ else f"type{p.msg_type}"
        return (f"{name} c{p.cluster_id} w{p.worker_id} b{p.block_id} agg{p.agg_count} "
                f"r={p.reward / ONE:g}")

    if response is None:
        return f"{brief(message)} -> (no answer)"
    r = Olaf(response)
    kind = MsgType(r.msg_type).name
    what = f"{kind} {Outcome(r.outcome).name}" if kind == "ACK" else brief(response)
    return f"{brief(message)} -> {what} util={r.queue_util} active={r.active_clusters} flags={int(r.flags)}"


def outcome_of(response: bytes | None) -> str | None:
    if response is None:
        return None
    msg_type = response[0] & 0x0F
    return Outcome(response[10]).name if msg_type == MsgType.ACK else MsgType(msg_type).name


def run_steps(config: dict, messages: list[bytes]) -> list[bytes | None]:
    """The reference queue's answer (or None) to each message, one message per batch."""
    queue = OlafQueue(queue_config(config))
    answers: list[bytes | None] = []
    for message in messages:
        responses, _, _ = queue.process(decode([message], config["values"]))
        answers.append(encode_one(responses) if len(responses) else None)
    return answers


def encode_one(responses) -> bytes:
    from worker_transport.codec import encode

    return encode(responses)[0]


def build(name: str, description: str, overrides: dict, steps: list[Step]) -> dict:
    config = {**CONFIG_DEFAULTS, **overrides}
    answers = run_steps(config, [m for m, _ in steps])
    for k, ((_, want), got) in enumerate(zip(steps, answers, strict=True)):
        if want != "?" and outcome_of(got) != want:
            raise AssertionError(f"{name} step {k}: expected {want}, reference gave {outcome_of(got)}")
    return {
        "name": name,
        "description": description,
        "config": config,
        "steps": [
            {"in": m.hex(), "out": None if a is None else a.hex(), "note": describe(m, a)}
            for (m, _), a in zip(steps, answers, strict=True)
        ],
    }


def build_all() -> dict[str, dict]:
    docs = {name: build(name, *spec) for name, spec in scenarios().items()}
    name = "50_random_long"
    docs[name] = build(
        name,
        f"randomized mixed traffic (seed {SEED}): 8 workers in 3 clusters, 6 blocks, 25 % PULL, "
        "3 % corrupted or truncated messages, capacity 16, threshold 1.0",
        {"capacity": 16, "threshold": fx(1.0)},
        random_scenario(SEED, 3000),
    )
    name = "51_random_quota"
    docs[name] = build(
        name,
        f"randomized mixed traffic as 50_random_long (seed {SEED + 1}) with cluster_quota 3 of capacity 8: "
        "a cluster has 6 blocks and 3 clusters x 3 > 8, so both the quota and the full queue drop",
        {"capacity": 8, "cluster_quota": 3, "threshold": fx(1.0)},
        random_scenario(SEED + 1, 3000),
    )
    for k, (name, (what, overrides, steps)) in enumerate(RANDOM_FEEDBACK3.items()):
        docs[name] = build(
            name,
            f"feedback revision 3, randomized mixed traffic as 50_random_long (seed {SEED + 2 + k}), "
            f"{what}, threshold 1.0: every ACK of a valid UPDATE carries its cluster's lost room",
            {**overrides, "threshold": fx(1.0), "feedback": 3},
            random_scenario(SEED + 2 + k, steps),
        )
    return docs


def write_all(directory: Path = HERE, emit: Callable[[str], None] = print) -> None:
    docs = build_all()  # before anything is deleted: a failing scenario leaves the files as they were
    for old in all_vector_files(directory):
        old.unlink()
    for name, doc in docs.items():
        path = vector_path(name, directory)
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        emit(f"wrote {path.relative_to(directory)} ({len(doc['steps'])} steps)")


if __name__ == "__main__":
    np.seterr(all="raise")
    write_all()
    sys.exit(0)
