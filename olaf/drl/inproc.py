"""The whole learning loop in one process, through a reference OlafQueue, no network.

Workers take turns: each rolls out with the weights last published, its gradient
becomes UPDATE blocks that go through ``OlafQueue.process``, and the parameter server
PULLs ``pulls_per_turn`` blocks after each turn (the bottleneck, counted in blocks per
worker gradient instead of per second) and applies them. Deterministic for a seed:
this is what the unit tests and quick hyperparameter checks run. Any algorithm of the
algorithm API trains here (``algorithm``; A2C with ``config`` by default), through the
same platform ``Worker`` that ``olaf run`` uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from control_plane.controller import ThresholdLoop
from dataplane.queue import OlafQueue, QueueConfig
from olaf.algorithm import Algorithm, Worker, flat_parameters, initial_model
from olaf.drl.a2c import A2C, A2CConfig
from olaf.drl.controller import RecentRewards, threshold_raw
from olaf.drl.server import ParameterServer
from worker_transport.codec import Batch, decode, encode, gradient_updates, mean_values
from worker_transport.protocol import VERSION, Mode, MsgType, Outcome


@dataclass
class InProcessResult:
    returns: list[float] = field(default_factory=list)
    """Every finished episode's return, in the order they finished."""
    outcomes: list[int] = field(default_factory=lambda: [0] * len(Outcome))
    blocks_applied: int = 0
    model_version: int = 0
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    """The parameter server's weights at the end."""
    env_steps: int = 0


def _pulls(n: int, values: int) -> Batch:
    batch = Batch.zeros(n, values)
    batch.headers["version"] = VERSION
    batch.headers["msg_type"] = MsgType.PULL
    return batch


def train_in_process(
    env_id: str = "CartPole-v1",
    *,
    workers: int = 4,
    turns: int = 400,
    pulls_per_turn: int = 64,
    capacity: int = 64,
    mode: Mode = Mode.OLAF,
    values: int = 64,
    frac_bits: int = 16,
    config: A2CConfig | None = None,
    seed: int = 0,
    algorithm: Algorithm | None = None,
) -> InProcessResult:
    """Run ``turns`` worker gradients through the queue and return what happened.

    ``algorithm``: what the workers run (default ``A2C(config)``); the PS's Adam takes its
    ``config``'s settings. No refresh is needed before the loss: turns are sequential, so
    nothing is applied between a worker's acting and its loss.
    """
    algo = algorithm if algorithm is not None else A2C(config or A2CConfig())
    torch.set_num_threads(1)
    model = initial_model(algo, env_id, seed)
    ps = ParameterServer(flat_parameters(model), algo.config, values)
    queue = OlafQueue(QueueConfig(capacity=capacity, values=values, frac_bits=frac_bits,
                                  max_blocks=ps.num_blocks, mode=mode))
    pool = [Worker(algo, env_id, w, seed * 1000 + w) for w in range(workers)]
    result = InProcessResult()

    def set_threshold(threshold: float) -> int:
        queue.threshold = threshold_raw(threshold, frac_bits)
        return queue.threshold

    controller = ThresholdLoop(set_threshold, floor=1.0)
    rewards = RecentRewards(256)
    try:
        for turn in range(turns):
            worker = pool[turn % workers]
            weights, version = ps.snapshot()
            worker.load_weights(weights, version)
            grad = worker.rollout()
            result.env_steps += grad.steps
            result.returns.extend(e.ret for e in grad.episodes)
            updates = gradient_updates(
                grad.flat, values=values, frac_bits=frac_bits, cluster_id=0,
                worker_id=worker.worker_id, seq=turn, model_version=grad.model_version,
                reward=grad.reward, gen_time_us=turn,
            )
            queue.process(decode(encode(updates), values))
            data, _, _ = queue.process(decode(encode(_pulls(pulls_per_turn, values)), values))
            for i in np.flatnonzero(data.headers["msg_type"] == MsgType.DATA).tolist():
                h = data.headers[i]
                ps.apply_block(int(h["block_id"]), mean_values(data.values[i], h["agg_count"], frac_bits))
                rewards.extend([int(h["reward"]) / 2**frac_bits])
            controller.feed(rewards.snapshot())
            controller.step()
    finally:
        for worker in pool:
            worker.close()
    result.outcomes = list(queue.counters.outcomes)
    result.blocks_applied = ps.blocks_applied
    result.model_version = ps.model_version
    result.weights = ps.params.copy()
    return result
