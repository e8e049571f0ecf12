"""The red-team flood in small (issue 28, item 3; benchmarks/bench_flood.py measures it
on a training run): one cluster floods UPDATEs with distinct (cluster, block) keys while a
neighbour cluster sends its gradients and a PS drains the queue. Without a quota the
neighbour's new blocks are DROPPED_FULL; with ``cluster_quota`` (DESIGN.md §3 steps 4-5)
they are ENQUEUED. Once on the reference queue, round by round, and once through the
software switch over loopback with the workers' own ``Sender``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dataplane.queue import OlafQueue, QueueConfig
from dataplane.switch import UdpSwitch
from worker_transport.codec import Batch, encode_array
from worker_transport.policy import make_policy
from worker_transport.protocol import DEFAULT_FRAC_BITS, VERSION, MsgType, Outcome
from worker_transport.sender import Sender
from worker_transport.transport import UdpTransport

V = 8
CAPACITY = 16
ATTACKER, VICTIM = 1, 0
VICTIM_BLOCKS = 4
"""A victim gradient within the quota for both quotas tried: the quota caps the victim's
cluster too, so a larger gradient would have its own blocks beyond Q DROPPED_FULL."""


def updates(cluster: int, blocks: np.ndarray, worker: int, reward: int = 1 << 16) -> Batch:
    """UPDATEs of ``cluster`` for ``blocks``, as the switch decodes them."""
    batch = Batch.zeros(len(blocks), V)
    h = batch.headers
    h["version"], h["msg_type"], h["num_values"] = VERSION, MsgType.UPDATE, V
    h["frac_bits"] = DEFAULT_FRAC_BITS
    h["cluster_id"], h["worker_id"], h["block_id"] = cluster, worker, blocks
    h["reward"], h["contributors"], h["seq"] = reward, 1 << worker, np.arange(len(blocks))
    batch.values[:] = 1
    return batch


def pulls(n: int) -> Batch:
    batch = Batch.zeros(n, V)
    h = batch.headers
    h["version"], h["msg_type"], h["frac_bits"] = VERSION, MsgType.PULL, DEFAULT_FRAC_BITS
    return batch


def flood_rounds(quota: int | None, rounds: int = 50, drain: int = 4) -> tuple[dict[str, int], int]:
    """Each round: the attacker sends a whole queue's worth of new block ids, the victim
    one gradient, the PS pulls ``drain`` slots. The victim's outcomes, and the most slots
    the attacker ever held."""
    q = OlafQueue(QueueConfig(capacity=CAPACITY, values=V, max_clusters=2, max_blocks=1024,
                              cluster_quota=quota))
    counts = dict.fromkeys((o.name for o in Outcome), 0)
    most = 0
    next_block = 0
    for _ in range(rounds):
        # New keys every round: a block id the attacker used is free again once pulled.
        flood = (next_block + np.arange(CAPACITY)) % 1024
        next_block += CAPACITY
        q.process(updates(ATTACKER, flood, worker=31))
        most = max(most, q.cluster_count[ATTACKER])
        answers, _, _ = q.process(updates(VICTIM, np.arange(VICTIM_BLOCKS), worker=0))
        for outcome in answers.headers["outcome"].tolist():
            counts[Outcome(outcome).name] += 1
        q.process(pulls(drain))
    return counts, most


def test_without_a_quota_the_flood_starves_the_neighbour() -> None:
    counts, most = flood_rounds(None)
    assert counts["DROPPED_FULL"] == 50 * VICTIM_BLOCKS  # every victim block, every round
    assert counts["ENQUEUED"] == 0
    assert most == CAPACITY


@pytest.mark.parametrize("quota", [CAPACITY // 2, CAPACITY // 4])
def test_with_a_quota_the_neighbour_keeps_its_slots(quota: int) -> None:
    counts, most = flood_rounds(quota)
    assert most == quota  # the attacker is held at Q slots ...
    assert counts["DROPPED_FULL"] == 0  # ... so the victim's blocks always fit
    assert counts["ENQUEUED"] >= VICTIM_BLOCKS  # its first gradient, then merges/replacements
    assert counts["ENQUEUED"] + counts["REPLACED"] + counts["MERGED"] == 50 * VICTIM_BLOCKS


def test_the_quota_caps_the_victims_own_cluster_too() -> None:
    """No attacker: a victim gradient of more than Q blocks has the blocks beyond Q
    DROPPED_FULL while the first Q are queued (the cost bench_flood.py's quota-only run shows)."""
    q = OlafQueue(QueueConfig(capacity=CAPACITY, values=V, max_clusters=2, cluster_quota=4))
    answers, _, _ = q.process(updates(VICTIM, np.arange(6), worker=0))
    outcomes = [Outcome(o).name for o in answers.headers["outcome"].tolist()]
    assert outcomes == ["ENQUEUED"] * 4 + ["DROPPED_FULL"] * 2


def udp_flood(quota: int | None, seconds: float = 1.5) -> dict[str, int]:
    """The software switch over loopback, a PS pulling 2000 blocks/s, an attacker sending
    back to back and a victim worker sending a gradient every 20 ms; the victim's ACK
    outcomes."""
    switch = UdpSwitch(OlafQueue(QueueConfig(capacity=CAPACITY, values=V, max_clusters=2,
                                             max_blocks=256, cluster_quota=quota)), "127.0.0.1", 0)
    thread, stop = switch.start()
    attacker = Sender(UdpTransport(switch.address), cluster_id=ATTACKER, worker_id=31, values=V,
                      policy=make_policy("always"), seed=1)
    victim = Sender(UdpTransport(switch.address), cluster_id=VICTIM, worker_id=0, values=V,
                    policy=make_policy("always"), seed=2)
    ps = UdpTransport(switch.address)
    pull_row = encode_array(pulls(1))
    flood = np.zeros(256 * V, np.float32)  # every block id the queue accepts
    gradient = np.ones(VICTIM_BLOCKS * V, np.float32)
    try:
        start = time.monotonic()
        next_victim = start + 0.1  # the flood fills the queue first
        next_pull, pulled = start, 0
        while (now := time.monotonic()) - start < seconds:
            attacker.send_gradient(flood, reward=-1.0, model_version=0)
            if now >= next_pull:
                due = int((now - start) * 2000) - pulled
                if due > 0:
                    ps.send(np.repeat(pull_row, due, axis=0))
                    pulled += due
                    ps.recv(0.0)
            if now >= next_victim:
                victim.send_gradient(gradient, reward=1.0, model_version=0)
                next_victim += 0.02
            time.sleep(0.001)
        victim.wait_for_acks(1.5)
        return victim.stats()["outcomes"]
    finally:
        for s in (attacker, victim):
            s.close()
        ps.close()
        stop.set()
        thread.join()
        switch.close()


def test_over_udp_the_quota_keeps_the_neighbour_enqueued() -> None:
    without = udp_flood(None)
    with_quota = udp_flood(CAPACITY // 2)
    answered = sum(without.values())
    assert answered and without["DROPPED_FULL"] > 0.5 * answered, without
    assert with_quota["DROPPED_FULL"] == 0 and with_quota["ENQUEUED"] > 0, with_quota


def test_the_run_settings_reach_the_queue_config_and_refuse_bad_values() -> None:
    """``olaf run --cluster-quota Q --max-clusters M``: RunConfig fields, checked; bad
    values are one line and exit 2 on the command line."""
    import argparse

    from olaf.drl.cli_args import add_run_arguments, config_from_args
    from olaf.drl.config import RunConfig

    assert RunConfig().queue_cluster_quota == 64 and RunConfig().queue_max_clusters == 1
    cfg = RunConfig(cluster_quota=16, max_clusters=2)
    assert (cfg.queue_cluster_quota, cfg.queue_max_clusters) == (16, 2)
    # The quota is checked against the capacity the bottleneck derives from B.
    assert RunConfig(buffer_bytes=32 * 292, cluster_quota=32).queue_cluster_quota == 32
    for bad in ({"cluster_quota": 65}, {"cluster_quota": -1}, {"max_clusters": 1, "clusters": 2},
                {"buffer_bytes": 16 * 292, "cluster_quota": 32}):
        with pytest.raises(ValueError):
            RunConfig(**bad)
    parser = argparse.ArgumentParser()
    add_run_arguments(parser, duration=10.0)
    args = parser.parse_args(["--cluster-quota", "32", "--max-clusters", "3"])
    cfg = config_from_args(args, mode="olaf", seed=0, target=None)
    assert (cfg.cluster_quota, cfg.max_clusters) == (32, 3)
    with pytest.raises(SystemExit) as exit_info:
        config_from_args(parser.parse_args(["--cluster-quota", "65"]), mode="olaf", seed=0, target=None)
    assert exit_info.value.code == 2
