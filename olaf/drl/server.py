"""The parameter server's learning side: block-wise steps and the model version.

DATA arrives one parameter block at a time, each carrying the average of the
``agg_count`` worker gradients the switch merged into it. The server applies each
block as soon as it arrives, with its optimizer over just that block's parameters
(``PsConfig``: Adam by default, or SGD, or A3C's RMSProp), as the mean of the merged
updates or as their sum (``PsConfig.aggregate``). The moments are per parameter anyway,
and each block keeps its own step count for Adam's bias correction, so a block that
arrives more often is not corrected as if it were as young as a rarely seen one.

``model_version`` counts weight publications that carried at least one new block;
workers stamp their gradients with the version they acted with, so
``model_version - DATA.model_version`` is a block's staleness in publications.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from worker_transport.fixedpoint import num_blocks

PS_AGGREGATES = ("mean", "sum")
PS_OPTIMIZERS = ("auto", "adam", "sgd", "rmsprop")
PS_MERGE_SCALES = ("none", "sqrt", "linear")


@dataclass(frozen=True)
class PsConfig:
    """How the parameter server turns a DATA block into a step (docs/learner.md); set with
    ``olaf run --set ps.NAME=VALUE``.

    A DATA block carries the mean of the ``agg_count`` worker updates the switch summed
    into it (the receiver divides by agg_count). What that block is worth is a choice:
    A3C applies every worker's gradient (so k merged gradients are worth k steps, i.e.
    their sum), SwitchML sums in the network and the host divides (the mean). With Adam
    the choice hardly matters (Adam is invariant to the gradient's scale, so merging buys
    noise reduction only); with SGD or RMSProp it decides whether a merge moves the weights
    k times as far."""

    aggregate: str = "mean"
    """``mean``: a block of agg_count k is one step with the mean of its k updates;
    ``sum``: one step with their sum (k times the mean), as if each had been applied."""
    optimizer: str = "auto"
    """``adam`` (per-block bias correction, the learner's betas and eps), ``sgd`` (plain,
    with ``momentum``), ``rmsprop`` (A3C's shared RMSProp: ``alpha``, ``rmsprop_eps``), or
    ``auto``: what the learner's update needs, ``sgd`` for a parameter delta (the learner's
    config says ``sends_delta``: IMPACT with local epochs) and ``adam`` for a gradient."""
    learning_rate: float = 0.0
    """Step size; 0 takes the learner's: ``delta_rate`` for a parameter delta under SGD,
    else ``learning_rate``."""
    momentum: float = 0.0
    """SGD momentum (0: plain SGD)."""
    alpha: float = 0.99
    """RMSProp's squared-gradient decay (A3C, Mnih et al. 2016: 0.99)."""
    rmsprop_eps: float = 0.1
    """RMSProp's denominator epsilon (A3C's shared RMSProp: 0.1)."""
    merge_scale: str = "none"
    """What a merged block is worth in step size (issue 49): the step of a block of
    agg_count k takes the learning rate times 1 (``none``), ``sqrt(k)`` (``sqrt``) or k
    (``linear``), with every optimizer, so that under Adam, which ignores the gradient's
    scale, k merged gradients can move the weights as far as the FIFO's k steps would."""

    def __post_init__(self) -> None:
        checks = [
            (self.aggregate in PS_AGGREGATES, f"ps.aggregate must be one of {PS_AGGREGATES}"),
            (self.optimizer in PS_OPTIMIZERS, f"ps.optimizer must be one of {PS_OPTIMIZERS}"),
            (self.learning_rate >= 0, "ps.learning_rate must be >= 0"),
            (0.0 <= self.momentum < 1.0, "ps.momentum must be in [0, 1)"),
            (0.0 <= self.alpha < 1.0, "ps.alpha must be in [0, 1)"),
            (self.rmsprop_eps > 0, "ps.rmsprop_eps must be > 0"),
            (self.merge_scale in PS_MERGE_SCALES, f"ps.merge_scale must be one of {PS_MERGE_SCALES}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def merge_factor(merge_scale: str, agg_count: int) -> float:
    """The step-size factor of a block of ``agg_count`` merged updates (``PsConfig.merge_scale``)."""
    if merge_scale == "linear":
        return float(agg_count)
    if merge_scale == "sqrt":
        return float(np.sqrt(agg_count))
    return 1.0


class ParameterServer:
    """Flat float32 weights, optimizer state per parameter, a step count per block."""

    def __init__(self, initial: np.ndarray, config: Any, values: int,
                 ps: PsConfig | None = None) -> None:
        """``config``: the learner's hyperparameters (``learning_rate``, ``adam_betas``,
        ``adam_eps``: an ``olaf.algorithm.AlgorithmConfig`` or the built-in ones);
        ``ps``: aggregate and optimizer (default: mean, and the optimizer the learner's
        update needs)."""
        self.params = np.array(initial, dtype=np.float32).reshape(-1)
        self.config = config
        self.ps = PsConfig() if ps is None else ps
        delta = bool(getattr(config, "sends_delta", False))
        self.optimizer = self.ps.optimizer
        if self.optimizer == "auto":
            self.optimizer = "sgd" if delta else "adam"
        self.learning_rate = self.ps.learning_rate or (
            config.delta_rate if delta and self.optimizer == "sgd" else config.learning_rate)
        self.values = values
        self.num_blocks = num_blocks(len(self.params), values)
        self._m = np.zeros_like(self.params)
        self._v = np.zeros_like(self.params)
        self.block_steps = np.zeros(self.num_blocks, np.int64)
        self.model_version = 0
        self.blocks_applied = 0
        self._unpublished = 0
        self.lock = threading.Lock()
        """Held while applying or snapshotting, so a publication never sees half a block."""

    def block_slice(self, block_id: int) -> slice:
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block_id {block_id} out of range 0..{self.num_blocks - 1}")
        lo = block_id * self.values
        return slice(lo, min(lo + self.values, len(self.params)))

    @property
    def iterations(self) -> int:
        """PS training iterations: full-model updates' worth of applied blocks."""
        return self.blocks_applied // self.num_blocks

    def apply_block(self, block_id: int, gradient: np.ndarray, lr_scale: float = 1.0,
                    agg_count: int = 1) -> None:
        """One optimizer step on the parameters of ``block_id`` with a DATA block's values.

        ``gradient`` holds V values, the mean of ``agg_count`` merged updates (the last
        block's padding is ignored); with ``ps.aggregate == "sum"`` the step takes
        ``agg_count`` times it. ``lr_scale`` multiplies the learning rate of this step only
        (Stellaris's ``1/sqrt(delta)``), and ``ps.merge_scale`` multiplies it by 1,
        sqrt(agg_count) or agg_count. Non-finite values, a scale <= 0 or an agg_count
        < 1 are refused with ``ValueError`` and change nothing.
        """
        if not (lr_scale > 0 and np.isfinite(lr_scale)):
            raise ValueError(f"lr_scale must be a finite value > 0, got {lr_scale}")
        if agg_count < 1:
            raise ValueError(f"agg_count must be >= 1, got {agg_count}")
        where = self.block_slice(block_id)
        g = np.asarray(gradient, np.float32).reshape(-1)
        if len(g) < where.stop - where.start:
            raise ValueError(f"block {block_id} needs {where.stop - where.start} values, got {len(g)}")
        g = g[: where.stop - where.start]
        if not np.isfinite(g).all():
            raise ValueError(f"block {block_id}: non-finite gradient")
        if self.ps.aggregate == "sum" and agg_count > 1:
            g = g * np.float32(agg_count)
        lr = self.learning_rate * lr_scale * merge_factor(self.ps.merge_scale, agg_count)
        with self.lock:
            self.block_steps[block_id] += 1
            self.params[where] -= self._step(where, g, lr, int(self.block_steps[block_id]))
            self.blocks_applied += 1
            self._unpublished += 1

    def _step(self, where: slice, g: np.ndarray, lr: float, t: int) -> np.ndarray:
        """The update of the optimizer on one block (``t``: the block's step count); the
        moments live in ``_m`` (Adam's first, SGD's momentum) and ``_v`` (Adam's second,
        RMSProp's squared average)."""
        ps, m, v = self.ps, self._m[where], self._v[where]
        if self.optimizer == "sgd":
            if ps.momentum == 0:
                return lr * g
            m *= ps.momentum
            m += g
            return lr * m
        if self.optimizer == "rmsprop":
            v *= ps.alpha
            v += (1 - ps.alpha) * g * g
            return lr * g / (np.sqrt(v) + ps.rmsprop_eps)
        b1, b2 = self.config.adam_betas
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        return lr * m_hat / (np.sqrt(v_hat) + self.config.adam_eps)

    def state(self) -> dict[str, np.ndarray | int]:
        """Everything a checkpoint needs to continue exactly: weights, Adam's moments, the
        per-block step counts, the version and the applied-block count, taken together.

        Like ``snapshot``, it publishes the blocks applied since the last publication (the
        version goes up), so the weights saved are exactly the weights of the saved version.
        """
        with self.lock:
            if self._unpublished:
                self.model_version += 1
                self._unpublished = 0
            return {"params": self.params.copy(), "adam_m": self._m.copy(),
                    "adam_v": self._v.copy(), "block_steps": self.block_steps.copy(),
                    "model_version": self.model_version, "blocks_applied": self.blocks_applied}

    def load_state(self, state: dict[str, np.ndarray | int]) -> None:
        """Continue from ``state()`` of a server of the same model and V (ValueError if the
        shapes differ, and nothing changes)."""
        arrays = {k: np.asarray(state[k]) for k in ("params", "adam_m", "adam_v", "block_steps")}
        for key in ("params", "adam_m", "adam_v"):
            if arrays[key].shape != self.params.shape:
                raise ValueError(f"checkpoint {key} has shape {arrays[key].shape}, this model "
                                 f"{self.params.shape}")
        if arrays["block_steps"].shape != self.block_steps.shape:
            raise ValueError(f"checkpoint has {arrays['block_steps'].shape[0]} blocks, this model "
                             f"{self.num_blocks} (different V or model)")
        with self.lock:
            self.params[:] = arrays["params"]
            self._m[:] = arrays["adam_m"]
            self._v[:] = arrays["adam_v"]
            self.block_steps[:] = arrays["block_steps"]
            self.model_version = int(state["model_version"])
            self.blocks_applied = int(state["blocks_applied"])
            self._unpublished = 0

    def snapshot(self) -> tuple[np.ndarray, int]:
        """Weights and their version; bumps the version if blocks arrived since the last one."""
        with self.lock:
            if self._unpublished:
                self.model_version += 1
                self._unpublished = 0
            return self.params.copy(), self.model_version
