"""The controller loop's rule: reward threshold = ``fraction * |mean reward|`` (DESIGN.md §3).

The parameter server feeds the reward of every DATA it receives into ``observe``;
every ``controller_interval`` the runner calls ``step``, which computes the new
threshold from the mean of the recent rewards and hands the raw fixed-point value to
``apply``. In the embedded mode ``apply`` sets ``queue.threshold`` under the switch's
lock; with a P4 switch it is a P4Runtime register write (the control plane's job).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from worker_transport.fixedpoint import to_fixed
from worker_transport.protocol import INT32_MAX


class RewardThresholdController:
    """Keeps recent DATA rewards; ``step`` sets the switch's threshold from their mean."""

    def __init__(
        self,
        apply: Callable[[int], None],
        *,
        fraction: float = 0.15,
        floor: float = 1.0,
        history: int = 256,
        frac_bits: int = 16,
    ) -> None:
        if fraction < 0 or floor < 0 or history < 1:
            raise ValueError("fraction and floor must be >= 0 and history >= 1")
        self.apply = apply
        self.fraction = fraction
        self.floor = floor
        self.frac_bits = frac_bits
        self._rewards: deque[float] = deque(maxlen=history)
        self._lock = threading.Lock()
        self.threshold: float | None = None
        """The last threshold set, in reward units (None until the first DATA)."""

    def observe(self, rewards: list[float]) -> None:
        with self._lock:
            self._rewards.extend(rewards)

    def step(self) -> float | None:
        """Set the threshold from the recent mean; None (and nothing set) without DATA yet."""
        with self._lock:
            if not self._rewards:
                return None
            mean = sum(self._rewards) / len(self._rewards)
        threshold = max(self.fraction * abs(mean), self.floor)
        raw = int(min(int(to_fixed(np.array([threshold]), self.frac_bits)[0]), INT32_MAX))
        self.apply(raw)
        self.threshold = threshold
        return threshold
