"""The learning core of olaf.drl, in process and without any network."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dataplane.queue import OlafQueue, QueueConfig
from olaf.drl.a2c import A2CConfig, RolloutWorker, gae
from olaf.drl.config import RunConfig
from olaf.drl.inproc import _pulls, train_in_process
from olaf.drl.model import ActorCritic, build_model
from olaf.drl.server import ParameterServer
from olaf.drl.weights import WeightBoard
from worker_transport.codec import decode, encode, gradient_updates, mean_values
from worker_transport.fixedpoint import join_blocks, resolution
from worker_transport.protocol import Mode, MsgType, Outcome

FRAC = 16
V = 64


def _worker_gradient(seed: int = 0) -> tuple[RolloutWorker, np.ndarray]:
    cfg = A2CConfig()
    model = build_model("CartPole-v1", cfg.hidden, seed)
    worker = RolloutWorker("CartPole-v1", 0, cfg, seed)
    worker.load_weights(model.flat_parameters(), 0)
    return worker, worker.rollout().flat


def test_gradient_round_trip_through_codec_within_resolution() -> None:
    worker, flat = _worker_gradient()
    worker.close()
    updates = gradient_updates(flat, values=V, frac_bits=FRAC, cluster_id=0, worker_id=3,
                               seq=7, model_version=5, reward=21.5, gen_time_us=1234)
    wire = encode(updates)
    assert all(len(d) == 36 + 4 * V for d in wire)
    back = decode(wire, V)
    assert (back.headers["msg_type"] == MsgType.UPDATE).all()
    assert (back.headers["block_id"] == np.arange(len(wire))).all()
    assert back.headers["reward"][0] == 21.5 * 2**FRAC
    assert back.headers["contributors"][0] == 1 << 3
    blocks = np.stack([mean_values(back.values[i], 1, FRAC) for i in range(len(back))])
    restored = join_blocks(blocks, len(flat))
    assert restored.shape == flat.shape
    # Rounding to nearest: at most half an LSB per value, and a nonzero gradient.
    assert np.abs(restored - flat).max() <= resolution(FRAC) / 2
    assert np.abs(flat).max() > 100 * resolution(FRAC)


def test_merged_data_block_is_the_mean_within_resolution() -> None:
    rng = np.random.default_rng(1)
    grads = [rng.normal(0, 0.05, 3 * V).astype(np.float32) for _ in range(3)]
    queue = OlafQueue(QueueConfig(capacity=8, values=V, max_blocks=3))
    for w, g in enumerate(grads):
        updates = gradient_updates(g, values=V, frac_bits=FRAC, cluster_id=0, worker_id=w,
                                   seq=0, model_version=0, reward=10.0, gen_time_us=0)
        acks, _, _ = queue.process(decode(encode(updates), V))
        expected = Outcome.ENQUEUED if w == 0 else Outcome.MERGED
        assert (acks.headers["outcome"] == expected).all()
    data, _, _ = queue.process(decode(encode(_pulls(3, V)), V))
    assert (data.headers["agg_count"] == 3).all()
    mean = np.mean(grads, axis=0)
    for i in range(3):
        block = mean_values(data.values[i], int(data.headers["agg_count"][i]), FRAC)
        assert np.abs(block - mean[i * V : (i + 1) * V]).max() <= resolution(FRAC)


def test_worker_gradient_is_clipped_and_stamped() -> None:
    worker, flat = _worker_gradient()
    try:
        cfg = worker.config
        assert flat.dtype == np.float32 and flat.shape == (worker.model.num_parameters,)
        assert np.linalg.norm(flat) <= cfg.max_grad_norm * 1.001
        grad = worker.rollout()
        assert grad.model_version == 0 and grad.steps == cfg.rollout_steps
        assert worker.total_steps == 2 * cfg.rollout_steps
    finally:
        worker.close()


def test_gradient_matches_autograd_of_a2c_loss_on_same_rollout() -> None:
    """The flat gradient is exactly the parameters' .grad, in parameters() order."""
    model = ActorCritic(4, 2, 8)
    obs = torch.randn(5, 4)
    logits, values = model(obs)
    (logits.sum() + values.sum()).backward()
    flat = model.flat_gradient()
    expected = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
    np.testing.assert_array_equal(flat, expected)


def test_gae_matches_hand_computation() -> None:
    rewards = np.array([1.0, 1.0, 1.0], np.float32)
    values = np.array([0.5, 0.5, 0.5], np.float32)
    terminal = np.array([0.0, 1.0, 0.0], np.float32)
    adv = gae(rewards, values, terminal, last_value=2.0, gamma=0.9, lam=0.5)
    d2 = 1 + 0.9 * 2.0 - 0.5
    d1 = 1 - 0.5  # episode ended at step 1: no bootstrap
    d0 = 1 + 0.9 * 0.5 - 0.5
    np.testing.assert_allclose(adv, [d0 + 0.45 * d1, d1, d2], rtol=1e-6)


def test_parameter_server_adam_matches_torch_adam_per_block() -> None:
    cfg = A2CConfig(learning_rate=0.01)
    rng = np.random.default_rng(0)
    init = rng.normal(size=100).astype(np.float32)
    ps = ParameterServer(init, cfg, values=64)
    assert ps.num_blocks == 2
    p = torch.nn.Parameter(torch.from_numpy(init[:64].copy()))
    opt = torch.optim.Adam([p], lr=0.01, betas=cfg.adam_betas, eps=cfg.adam_eps)
    for _ in range(3):
        g = rng.normal(size=64).astype(np.float32)
        ps.apply_block(0, g)
        p.grad = torch.from_numpy(g)
        opt.step()
    np.testing.assert_allclose(ps.params[:64], p.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ps.params[64:], init[64:])  # block 1 untouched
    ps.apply_block(1, rng.normal(size=64).astype(np.float32))  # padding of the last block ignored
    assert list(ps.block_steps) == [3, 1]


def test_parameter_server_version_and_bad_input() -> None:
    ps = ParameterServer(np.zeros(10, np.float32), A2CConfig(), values=4)
    assert ps.snapshot()[1] == 0
    ps.apply_block(2, np.ones(4, np.float32))
    assert ps.snapshot()[1] == 1
    assert ps.snapshot()[1] == 1  # nothing new: same version
    before = ps.params.copy()
    with pytest.raises(ValueError, match="out of range"):
        ps.apply_block(3, np.ones(4, np.float32))
    with pytest.raises(ValueError, match="non-finite"):
        ps.apply_block(0, np.array([1, np.nan, 0, 0], np.float32))
    np.testing.assert_array_equal(ps.params, before)
    assert ps.blocks_applied == 1


def test_weight_board_publish_read_and_versioning() -> None:
    board = WeightBoard(5)
    try:
        reader = WeightBoard(5, name=board.name)
        assert reader.read() is None  # nothing published yet
        board.publish(np.arange(5, dtype=np.float32), 3)
        got = reader.read()
        assert got is not None and got[1] == 3
        np.testing.assert_array_equal(got[0], np.arange(5))
        assert reader.read(newer_than=3) is None
        with pytest.raises(ValueError):
            board.publish(np.zeros(4, np.float32), 4)
        reader.close()
    finally:
        board.close()


def test_configs_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="gamma"):
        A2CConfig(gamma=0)
    with pytest.raises(ValueError, match="mode"):
        RunConfig(mode="lifo")
    with pytest.raises(ValueError, match="unknown gymnasium"):
        build_model("NoSuchEnv-v0", 8, 0)
    with pytest.raises(ValueError, match="flat Box observation"):
        build_model("FrozenLake-v1", 8, 0)  # Discrete observations


def test_in_process_training_learns_and_olaf_merges() -> None:
    """Through the reference queue with a bottleneck of half a gradient per turn."""
    olaf = train_in_process(workers=8, turns=600, pulls_per_turn=20, mode=Mode.OLAF, seed=0)
    fifo = train_in_process(workers=8, turns=600, pulls_per_turn=20, mode=Mode.FIFO, seed=0)
    # A random CartPole policy averages ~22; both must have learned something.
    assert np.mean(olaf.returns[-20:]) > 60
    assert olaf.outcomes[Outcome.MERGED] > 0 and olaf.outcomes[Outcome.DROPPED_FULL] == 0
    assert fifo.outcomes[Outcome.MERGED] == 0 and fifo.outcomes[Outcome.DROPPED_FULL] > 0
    assert olaf.blocks_applied == fifo.blocks_applied == 600 * 20


def test_controller_loop_sets_fraction_of_mean_reward_with_floor_on_embedded_switch() -> None:
    import threading
    from types import SimpleNamespace

    from control_plane.controller import ThresholdLoop
    from olaf.drl.controller import RecentRewards, embedded_setter
    from worker_transport.protocol import INT32_MAX

    queue = OlafQueue(QueueConfig(capacity=4, values=V, max_blocks=1))
    switch = SimpleNamespace(queue=queue, lock=threading.Lock())
    loop = ThresholdLoop(embedded_setter(switch, FRAC), floor=1.0, fraction=0.15)
    rewards = RecentRewards(4)
    loop.feed(rewards.snapshot())
    assert loop.step() is None and queue.threshold == INT32_MAX  # no DATA yet: maximum kept
    rewards.extend([-200.0, -100.0])
    loop.feed(rewards.snapshot())
    assert loop.step().threshold == pytest.approx(22.5)
    assert queue.threshold == round(22.5 * 2**FRAC)
    rewards.extend([1.0, 1.0, 1.0, 1.0])  # window of 4: the old rewards are gone
    loop.feed(rewards.snapshot())
    assert loop.step().threshold == 1.0  # 0.15 is below the floor
    assert queue.threshold == 2**FRAC


class _CaptureTransport:
    """A Transport that keeps what is sent and never receives (no network)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, packets: np.ndarray) -> int:
        self.sent.extend(bytes(row) for row in np.asarray(packets))
        return len(packets)

    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        return []

    def close(self) -> None:
        pass


def test_worker_gradient_through_sender_and_queue_is_within_resolution() -> None:
    """The path ``olaf run`` uses: RolloutWorker -> Sender -> OlafQueue -> PS averaging."""
    from worker_transport.policy import AlwaysSend
    from worker_transport.sender import Sender

    worker, flat = _worker_gradient(seed=2)
    worker.close()
    transport = _CaptureTransport()
    sender = Sender(transport, cluster_id=0, worker_id=5, values=V, frac_bits=FRAC,
                    policy=AlwaysSend(), ack_thread=False)
    assert sender.send_gradient(flat, reward=-12.25, model_version=9)
    sender.close()
    updates = decode(transport.sent, V)
    n = len(updates)
    assert n == -(-len(flat) // V)
    assert (updates.headers["model_version"] == 9).all()
    assert (updates.headers["reward"] == -12.25 * 2**FRAC).all()
    queue = OlafQueue(QueueConfig(capacity=n, values=V, max_blocks=n))
    acks, _, _ = queue.process(updates)
    assert (acks.headers["outcome"] == Outcome.ENQUEUED).all()
    data, _, _ = queue.process(decode(encode(_pulls(n, V)), V))
    ps = ParameterServer(np.zeros(len(flat), np.float32), A2CConfig(), V)
    restored = np.zeros(ps.num_blocks * V, np.float32)
    for i in range(n):
        block = int(data.headers["block_id"][i])
        restored[block * V : (block + 1) * V] = mean_values(
            data.values[i], int(data.headers["agg_count"][i]), FRAC)
    assert np.abs(restored[: len(flat)] - flat).max() <= resolution(FRAC) / 2
    assert not restored[len(flat) :].any()  # the last block's padding is zero


def test_rolling_returns_order_episodes_by_end_time_not_arrival() -> None:
    from olaf.drl.results import rolling_returns

    # (end time s, env steps, worker, return, length): process B's batch of old, short
    # episodes arrives after process A's recent long ones.
    a = [(10.0 + i, 1000 + i, 0, 100.0, 100) for i in range(4)]
    b = [(1.0 + i, 500 + i, 1, 10.0, 10) for i in range(4)]
    t, steps, mean = rolling_returns(a + b, window=4)
    assert t.tolist() == [4.0, 10.0, 11.0, 12.0, 13.0]
    assert steps[-1] == 1003
    assert mean[0] == 10.0 and mean[-1] == 100.0
    t, _, mean = rolling_returns(a[:2], window=4)  # fewer episodes than the window
    assert t.tolist() == [11.0] and mean.tolist() == [100.0]
    assert all(len(x) == 0 for x in rolling_returns([], window=4))
