"""P_s = min(Q_free/N + alpha*exp(-beta*Δ), 1) (DESIGN.md §4) against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worker_transport.policy import AlwaysSend, Feedback, OlafPolicy, SendPolicy, make_policy
from worker_transport.sender import Sender
from worker_transport.transport import Packets, Transport

T0 = 1_000_000_000  # an arbitrary ACK arrival time, microseconds


def fb(util: int, active: int = 1, at: int = T0) -> Feedback:
    return Feedback(queue_util=util, active_clusters=active, congested=util >= 192, received_us=at)


@pytest.mark.parametrize(
    ("feedback", "now", "expected"),
    [
        # No ACK yet: always send.
        (None, T0, 1.0),
        # Empty queue: 64 free slots for one cluster, clamped to 1.
        (fb(0), T0, 1.0),
        # Full queue (util 255) just acknowledged: only the exploration term, alpha.
        (fb(255), T0, 0.2),
        # Full queue, 20 ms later: 0.2 * e^-1.
        (fb(255), T0 + 20_000, 0.2 * math.exp(-1.0)),
        # Full queue, Δ -> ∞: nothing left.
        (fb(255), T0 + 10**15, 0.0),
        # util 252: Q_free = 64 * 3/255 = 0.752941...; Δ -> ∞ leaves Q_free / N.
        (fb(252), T0 + 10**15, 64 * 3 / 255),
        (fb(252, active=3), T0 + 10**15, 64 * 3 / 255 / 3),
        # util 250, 2 clusters, Δ = 10 ms: 64*5/255/2 + 0.2*e^-0.5 = 0.627451 + 0.121306.
        (fb(250, active=2), T0 + 10_000, 0.62745098039 + 0.12130613194),
        # active_clusters 0 counts as 1 (N = max(active, 1)).
        (fb(253, active=0), T0 + 5_000, 64 * 2 / 255 + 0.2 * math.exp(-0.25)),
        # util 127, 40 clusters: 64*128/255/40 + 0.2 = 1.0031, clamped to 1.
        (fb(127, active=40), T0, 1.0),
        # util 128, 40 clusters: 64*127/255/40 + 0.2 = 0.99686, just below the clamp.
        (fb(128, active=40), T0, 64 * 127 / 255 / 40 + 0.2),
        # A clock that stepped back counts as Δ = 0, never as a bonus above alpha.
        (fb(255), T0 - 50_000, 0.2),
    ],
)
def test_olaf_policy_hand_computed(feedback: Feedback | None, now: int, expected: float) -> None:
    assert OlafPolicy().probability(feedback, now) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_olaf_policy_parameters() -> None:
    policy = OlafPolicy(capacity=16, alpha=0.5, beta=0.1)
    # util 240: Q_free = 16 * 15/255 = 0.941176; / 4 clusters = 0.235294; + 0.5 e^-0.3.
    expected = 16 * 15 / 255 / 4 + 0.5 * math.exp(-0.3)
    assert policy.probability(fb(240, active=4), T0 + 3_000) == pytest.approx(expected)
    # beta = 0: the bonus never decays.
    assert OlafPolicy(alpha=0.3, beta=0).probability(fb(255), T0 + 10**12) == pytest.approx(0.3)


def test_always_send_and_factory() -> None:
    assert AlwaysSend().probability(fb(255), T0 + 10**15) == 1.0
    assert AlwaysSend().probability(None, 0) == 1.0
    assert isinstance(make_policy("always"), AlwaysSend)
    olaf = make_policy("olaf", capacity=8, alpha=0.1, beta=0.2)
    assert isinstance(olaf, OlafPolicy) and (olaf.capacity, olaf.alpha, olaf.beta) == (8, 0.1, 0.2)
    for policy in (AlwaysSend(), olaf):
        assert isinstance(policy, SendPolicy)
    with pytest.raises(ValueError, match="unknown send policy"):
        make_policy("sometimes")


@pytest.mark.parametrize(
    "kwargs", [{"capacity": 0}, {"alpha": -0.1}, {"beta": -1.0}, {"alpha": math.nan},
               {"beta": math.inf}]
)
def test_olaf_policy_rejects_bad_parameters(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        OlafPolicy(**kwargs)


class NullTransport(Transport):
    """Counts what is sent; nothing ever comes back."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, packets: Packets) -> int:
        self.sent += len(packets)
        return len(packets)

    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        return []

    def close(self) -> None:
        pass


class FixedPolicy:
    """A third-party policy: pluggability needs nothing but ``probability``."""

    def __init__(self, p: float) -> None:
        self.p = p
        self.calls = 0

    def probability(self, feedback: Feedback | None, now_us: int) -> float:
        self.calls += 1
        return self.p


def test_sender_draws_once_per_update_with_policy_probability() -> None:
    policy = FixedPolicy(0.2)
    transport = NullTransport()
    sender = Sender(transport, cluster_id=0, worker_id=3, policy=policy, seed=7, ack_thread=False)
    n = 5000
    sent = sum(sender.send_gradient(np.ones(200, np.float32), reward=1.0, model_version=0)
               for _ in range(n))
    # Binomial(5000, 0.2): mean 1000, sd ~28; 5 sd is a failure, not noise.
    assert abs(sent - 1000) < 5 * math.sqrt(n * 0.2 * 0.8)
    assert policy.calls == n
    stats = sender.stats()
    assert stats["sent_updates"] == sent and stats["skipped_updates"] == n - sent
    # A skipped update puts nothing on the wire: 4 blocks per sent update only.
    assert transport.sent == 4 * sent == stats["sent_blocks"]
    sender.close()


def test_sender_sends_everything_before_any_ack_and_with_always_send() -> None:
    for policy in (None, AlwaysSend()):
        transport = NullTransport()
        sender = Sender(transport, cluster_id=1, worker_id=1, policy=policy, ack_thread=False)
        assert all(sender.send_gradient(np.zeros(64), reward=0.0, model_version=1)
                   for _ in range(20))
        assert sender.stats()["p_s"] == 1.0
        sender.close()
