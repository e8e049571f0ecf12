"""The controller loop of a run: the PS's recent DATA rewards drive the switch's threshold.

The rule itself, ``threshold = max(fraction * |mean reward|, floor)`` (DESIGN.md §3),
is ``control_plane.controller.ThresholdLoop``'s; this module feeds it and gives it the
embedded switch as its target:

* ``RecentRewards``: the reward of every DATA the PS receives goes in (receiver
  thread); the loop reads the window's mean every interval (main thread);
* ``embedded_setter``: the target for the in-process switch, which writes the raw
  fixed-point threshold under the switch's lock. With a P4 switch the target is a
  ``control_plane.controller.Controller`` instead (P4Runtime register write).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from worker_transport.fixedpoint import to_fixed
from worker_transport.protocol import INT32_MAX


class RecentRewards:
    """A thread-safe window of the last ``size`` DATA rewards (reward units)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size must be >= 1")
        self._window: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()

    def extend(self, rewards: list[float]) -> None:
        with self._lock:
            self._window.extend(rewards)

    def snapshot(self) -> list[float]:
        with self._lock:
            return list(self._window)


def threshold_raw(threshold: float, frac_bits: int) -> int:
    """A threshold in reward units as the queue's raw fixed point, capped to int32."""
    return int(min(int(to_fixed(np.array([threshold]), frac_bits)[0]), INT32_MAX))


def embedded_setter(switch: Any, frac_bits: int) -> Callable[[float], int]:
    """ThresholdLoop target for an in-process ``UdpSwitch``: returns the raw value set."""

    def apply(threshold: float) -> int:
        raw = threshold_raw(threshold, frac_bits)
        with switch.lock:
            switch.queue.threshold = raw
        return raw

    return apply
