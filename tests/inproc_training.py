"""Workers taking turns against the block-wise Adam PS in one process: no queue, no
network, no clock, so a learning test is deterministic and judges the learner alone
(olaf/drl/inproc.py is the same loop through a reference OlafQueue)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from olaf.algorithm import Gradient, Worker
from olaf.drl.server import ParameterServer


def take_turn(ps: ParameterServer, worker: Worker) -> Gradient:
    """``worker`` rolls out with the PS's current weights; its gradient is applied block
    by block, the last block zero-padded as a switch would carry it."""
    worker.load_weights(*ps.snapshot())
    grad = worker.rollout()
    padded = np.zeros(ps.num_blocks * ps.values, np.float32)
    padded[: len(grad.flat)] = grad.flat
    for b, block in enumerate(padded.reshape(ps.num_blocks, ps.values)):
        ps.apply_block(b, block)
    return grad


def train_round_robin(ps: ParameterServer, workers: Sequence[Worker], env_steps: int) -> None:
    """``workers`` take turns in order until they have taken ``env_steps`` environment
    steps between them; closes them at the end."""
    steps = turn = 0
    try:
        while steps < env_steps:
            steps += take_turn(ps, workers[turn % len(workers)]).steps
            turn += 1
    finally:
        for worker in workers:
            worker.close()
