"""The reward-threshold rule (DESIGN.md §3), for a switch over P4Runtime or in process.

Kept apart from ``controller`` so that an in-process user (``olaf run``) does not load
p4runtime-shell.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from dataplane.switch import Pipeline
from worker_transport.protocol import INT32_MAX

log = logging.getLogger(__name__)


REWARD_RULES = ("always", "congested", "off")
"""``always``: DESIGN.md §3's rule every round; ``congested``: the rule only while the queue
is CONGESTED, otherwise every compatible update merges; ``off``: never set (every
compatible update merges), issue 49 item 2."""
NO_THRESHOLD = float(2**31)
"""A threshold in reward units that saturates to the largest raw value: every compatible
update merges (the queue's value before any controller)."""


class ThresholdTarget(Protocol):
    def set_reward_threshold(self, threshold: float) -> Any: ...


@dataclass
class ThresholdStep:
    time: float
    mean_reward: float
    threshold: float
    raw: int | None = None


class ThresholdLoop:
    """The reward-threshold rule of DESIGN.md §3: ``max(fraction * |mean reward|, floor)``.

    The parameter server reports the mean reward of recently received DATA with
    ``report()``; every ``interval`` seconds the loop writes the threshold derived from the
    latest report to ``target``: a ``Controller`` (over P4Runtime) or any callable taking
    the threshold in reward units (e.g. an in-process switch's setter). ``step()`` runs one
    round by hand; ``start()``/``stop()`` run it in a thread.
    """

    def __init__(self, target: ThresholdTarget | Callable[[float], Any], floor: float, interval: float = 1.0,
                 fraction: float = 0.15, rule: str = "always",
                 congested: Callable[[], bool] | None = None) -> None:
        """``rule`` (``REWARD_RULES``); ``congested``: whether the queue is CONGESTED now,
        which the ``congested`` rule asks once per round."""
        if not floor >= 0 or not interval > 0 or not fraction >= 0:
            raise ValueError("floor and fraction must be >= 0 and interval > 0")
        if rule not in REWARD_RULES:
            raise ValueError(f"reward rule must be one of {REWARD_RULES}, not {rule!r}")
        if rule == "congested" and congested is None:
            raise ValueError("reward rule congested needs the switch's CONGESTED state, which "
                             "this backend does not read")
        self.rule, self.congested = rule, congested
        setter = getattr(target, "set_reward_threshold", None)
        self.apply: Callable[[float], Any] = setter if callable(setter) else target  # type: ignore[assignment]
        self.floor, self.interval, self.fraction = floor, interval, fraction
        self.history: list[ThresholdStep] = []
        self.errors = 0
        self._pending: float | None = None
        self._report_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def threshold_for(self, mean_reward: float) -> float:
        return max(self.fraction * abs(mean_reward), self.floor)

    def report(self, mean_reward: float) -> None:
        """The PS's latest mean reward of recent DATA (NaN and inf are ignored)."""
        if math.isfinite(mean_reward):
            with self._report_lock:
                self._pending = mean_reward

    def feed(self, rewards: Iterable[float]) -> None:
        """Report the mean of a window of rewards (no-op for an empty window)."""
        values = [r for r in rewards if math.isfinite(r)]
        if values:
            self.report(sum(values) / len(values))

    def step(self) -> ThresholdStep | None:
        """Apply the threshold for the latest report, if one came since the last step."""
        with self._report_lock:
            mean, self._pending = self._pending, None
        if mean is None or self.rule == "off":
            return None
        threshold = self.threshold_for(mean)
        if self.rule == "congested" and not self.congested():  # type: ignore[misc]
            threshold = NO_THRESHOLD
        raw = self.apply(threshold)
        step = ThresholdStep(time.monotonic(), mean, threshold, raw if isinstance(raw, int) else None)
        self.history.append(step)
        return step

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except (RuntimeError, ConnectionError, ValueError) as e:  # ControllerError is a RuntimeError
                # A missed round is retried at the next report; the loop outlives a hiccup.
                self.errors += 1
                log.warning("threshold loop: %s", e)

    def start(self) -> ThresholdLoop:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="olaf-threshold-loop", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> ThresholdLoop:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def raw_threshold(threshold: float, frac_bits: int) -> int:
    """A reward threshold in raw fixed point: rounded to nearest (ties to even, as
    ``fixedpoint.to_fixed``), saturated to the int32 range."""
    if not threshold >= 0:
        raise ValueError("the reward threshold must be >= 0")
    return min(round(math.ldexp(threshold, frac_bits)), INT32_MAX)


def pipeline_threshold_setter(pipeline: Pipeline) -> Callable[[float], int]:
    """A ``ThresholdLoop`` target for an in-process switch: sets the queue's threshold
    directly (under the pipeline lock, taken once per batch by the switch)."""

    def apply(threshold: float) -> int:
        raw = raw_threshold(threshold, pipeline.queue.config.frac_bits)
        with pipeline.lock:
            pipeline.queue.threshold = raw
        return raw

    return apply
