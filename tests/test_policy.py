"""The send policies of DESIGN.md §4 against hand-computed values: revision 3, P_s =
min(N*Q_free + alpha*exp(-beta*Δ), L) with the AIMD loss ceiling L, and revision 2 (the
paper's form, P_s = min(Q_free/N + alpha*exp(-beta*Δ), 1)), kept as a named policy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worker_transport.policy import (
    AlwaysSend,
    Feedback,
    OlafPolicy,
    OlafRev2Policy,
    SendPolicy,
    make_policy,
)
from worker_transport.protocol import MsgType, Olaf, Outcome
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
        # Empty queue: the whole queue is free for one cluster, clamped to 1.
        (fb(0), T0, 1.0),
        # Full queue (util 255) just acknowledged: only the exploration term, alpha.
        (fb(255), T0, 0.2),
        # Full queue, 20 ms later: 0.2 * e^-1.
        (fb(255), T0 + 20_000, 0.2 * math.exp(-1.0)),
        # Full queue at exactly the 100 ms TTL: the feedback still counts, 0.2 * e^-5.
        (fb(255), T0 + 100_000, 0.2 * math.exp(-5.0)),
        # One microsecond later it has expired: a probe, P_s = 1.
        (fb(255), T0 + 100_001, 1.0),
        # Full queue, Δ -> ∞: expired long ago, so a probe (the old rule gave 0 here).
        (fb(255), T0 + 10**15, 1.0),
        # util 128, one cluster, Δ = 50 ms: 127/255 + 0.2 e^-2.5.
        (fb(128), T0 + 50_000, 127 / 255 + 0.2 * math.exp(-2.5)),
        # util 192 (congested), 4 clusters, fresh: 63/255/4 + 0.2 = 0.261765.
        (fb(192, active=4), T0, 63 / 255 / 4 + 0.2),
        # util 250, 2 clusters, Δ = 10 ms: 5/255/2 + 0.2 e^-0.5 = 0.009804 + 0.121306.
        (fb(250, active=2), T0 + 10_000, 5 / 255 / 2 + 0.2 * math.exp(-0.5)),
        # active_clusters 0 counts as 1 (N = max(active, 1)).
        (fb(200, active=0), T0 + 5_000, 55 / 255 + 0.2 * math.exp(-0.25)),
        # util 51, 1 cluster, fresh: 204/255 + 0.2 = 1.0 exactly, at the clamp.
        (fb(51), T0, 1.0),
        # util 52: 203/255 + 0.2 = 0.996078, just below it.
        (fb(52), T0, 203 / 255 + 0.2),
        # A clock that stepped back counts as Δ = 0, never as a bonus above alpha.
        (fb(255), T0 - 50_000, 0.2),
    ],
)
def test_olaf_policy_hand_computed(feedback: Feedback | None, now: int, expected: float) -> None:
    assert OlafRev2Policy().probability(feedback, now) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_probe_only_on_expired_feedback() -> None:
    policy = OlafRev2Policy()
    assert not policy.is_probe(None, T0)  # before any ACK P_s = 1, but that is no probe
    assert not policy.is_probe(fb(255), T0 + 100_000)
    assert policy.is_probe(fb(255), T0 + 100_001)
    assert policy.is_probe(fb(0), T0 + 10**9)


def test_olaf_policy_parameters() -> None:
    policy = OlafRev2Policy(alpha=0.5, beta=0.1, feedback_ttl_ms=5.0)
    # util 240, 4 clusters, Δ = 3 ms: 15/255/4 + 0.5 e^-0.3.
    expected = 15 / 255 / 4 + 0.5 * math.exp(-0.3)
    assert policy.probability(fb(240, active=4), T0 + 3_000) == pytest.approx(expected)
    # The 5 ms TTL: 6 ms later the same feedback is expired.
    assert policy.probability(fb(240, active=4), T0 + 6_000) == 1.0
    # beta = 0 and a long TTL: the bonus never decays.
    never = OlafRev2Policy(alpha=0.3, beta=0, feedback_ttl_ms=1e9)
    assert never.probability(fb(255), T0 + 10**11) == pytest.approx(0.3)
    # TTL = inf is the rule without expiry: a full queue silences the worker for good.
    old = OlafRev2Policy(feedback_ttl_ms=math.inf)
    assert old.probability(fb(255), T0 + 10**15) == 0.0 and not old.is_probe(fb(255), T0 + 10**15)


def test_always_send_and_factory() -> None:
    assert AlwaysSend().probability(fb(255), T0 + 10**15) == 1.0
    assert AlwaysSend().probability(None, 0) == 1.0
    assert isinstance(make_policy("always"), AlwaysSend)
    assert isinstance(make_policy("olaf-rev2"), OlafRev2Policy)
    olaf = make_policy("olaf", alpha=0.1, beta=0.2, feedback_ttl_ms=30)
    assert isinstance(olaf, OlafPolicy)
    assert (olaf.alpha, olaf.beta, olaf.feedback_ttl_ms) == (0.1, 0.2, 30)
    assert make_policy("olaf").feedback_ttl_ms == 100.0  # DESIGN.md §4's default
    for policy in (AlwaysSend(), olaf, OlafRev2Policy()):
        assert isinstance(policy, SendPolicy)
    with pytest.raises(ValueError, match="unknown send policy"):
        make_policy("sometimes")


@pytest.mark.parametrize(
    "kwargs", [{"alpha": -0.1}, {"beta": -1.0}, {"alpha": math.nan}, {"beta": math.inf},
               {"feedback_ttl_ms": 0}, {"feedback_ttl_ms": -5}, {"feedback_ttl_ms": math.nan}]
)
def test_olaf_policy_rejects_bad_parameters(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        OlafRev2Policy(**kwargs)
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


class InboxTransport(NullTransport):
    """Hands the sender whatever the test put in ``inbox``: a forged ACK, say."""

    def __init__(self) -> None:
        super().__init__()
        self.inbox: list[bytes] = []

    def recv(self, timeout: float | None, max_count: int = 4096) -> list[bytes]:
        out, self.inbox = self.inbox, []
        return out


def forged_ack(worker_id: int, util: int, seq: int = 0, active: int = 1, block: int = 0) -> bytes:
    return bytes(Olaf(msg_type=MsgType.ACK, worker_id=worker_id, queue_util=util,
                      active_clusters=active, flags=1 if util >= 192 else 0, seq=seq, block_id=block,
                      outcome=Outcome.DROPPED_FULL, num_values=0))


def test_forged_full_ack_silences_a_sender_for_at_most_the_ttl_then_it_probes() -> None:
    now = [T0]
    transport = InboxTransport()
    sender = Sender(transport, cluster_id=0, worker_id=5, values=64, policy=OlafRev2Policy(),
                    seed=11, ack_thread=False, clock=lambda: now[0])
    grad = np.ones(64, np.float32)
    assert sender.send_gradient(grad, reward=1.0, model_version=0)  # before any ACK
    transport.inbox.append(forged_ack(5, 255))
    sender.poll()
    ack_at = now[0]
    assert sender.stats()["queue_util"] == 255 and sender.stats()["p_s"] == pytest.approx(0.2)
    # One update per millisecond while the forged "full" counts: P_s = 0.2 e^(-0.05 k).
    expected_p = 0.0
    sent_in_window = 0
    for k in range(1, 101):
        now[0] = ack_at + 1000 * k
        sent_in_window += sender.send_gradient(grad, reward=1.0, model_version=k)
        expected_p += 0.2 * math.exp(-0.05 * k)
    st = sender.stats()
    assert st["probe_updates"] == 0
    # E[sent] = sum of those P_s, about 3.5 of 100; the window is throttled, not open.
    assert sent_in_window < 20 and st["skipped_updates"] == 100 - sent_in_window
    # Past the TTL every update goes out, each one a probe, until an ACK answers.
    for k in range(101, 131):
        now[0] = ack_at + 1000 * k
        assert sender.send_gradient(grad, reward=1.0, model_version=k)
    st = sender.stats()
    assert st["probe_updates"] == 30 and st["p_s"] == 1.0 and st["p_s_last"] == 1.0
    assert st["p_s_sum"] == pytest.approx(1.0 + expected_p + 30)
    assert st["p_s_mean"] == pytest.approx(st["p_s_sum"] / 131)
    # Updates have gone out since the forged ACK and nothing answered them.
    # the first of them went out between 1 ms and 101 ms after the ACK, now is 130 ms.
    assert 0.029 <= st["silent_s"] <= 0.129 and st["answered"]
    # A fresh ACK showing a free queue ends the probing and the silence.
    transport.inbox.append(forged_ack(5, 0, seq=1))
    sender.poll()
    st = sender.stats()
    assert st["p_s"] == 1.0 and st["silent_s"] == 0.0 and st["answered"]
    now[0] += 1000
    assert sender.send_gradient(grad, reward=1.0, model_version=200)
    assert sender.stats()["probe_updates"] == 30
    sender.close()


# -- revision 3 (DESIGN.md §4) ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("feedback", "now", "expected"),
    [
        (None, T0, 1.0),  # before any ACK, P_s = L = 1
        (fb(0), T0, 1.0),
        (fb(255), T0, 0.2),  # nothing left of the cluster's share: the bonus alone
        (fb(255), T0 + 20_000, 0.2 * math.exp(-1.0)),
        (fb(255), T0 + 100_001, 1.0),  # expired: a probe at L = 1
        # util 192, 4 clusters, fresh: 4 * 63/255 + 0.2 = 1.188 -> 1 (revision 2: 0.262).
        (fb(192, active=4), T0, 1.0),
        # four clusters on an empty queue: 1 (revision 2 capped it at 0.45).
        (fb(0, active=4), T0 + 10_000, 1.0),
        # util 240, 4 clusters: 4 * 15/255 + 0.2 = 0.435.
        (fb(240, active=4), T0, 4 * 15 / 255 + 0.2),
        # util 250, 2 clusters, Δ = 10 ms: 2 * 5/255 + 0.2 e^-0.5.
        (fb(250, active=2), T0 + 10_000, 2 * 5 / 255 + 0.2 * math.exp(-0.5)),
        (fb(200, active=0), T0 + 5_000, 55 / 255 + 0.2 * math.exp(-0.25)),  # N = max(active, 1)
        (fb(52), T0, 203 / 255 + 0.2),
        (fb(255), T0 - 50_000, 0.2),
    ],
)
def test_revision_3_hand_computed(feedback: Feedback | None, now: int, expected: float) -> None:
    assert OlafPolicy().probability(feedback, now) == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_revision_3_loss_ceiling_aimd() -> None:
    """a < 0.9: L = max(L * a, 0.05); a >= 0.9: L = min(L + 0.1, 1); P_s never above L."""
    policy = OlafPolicy()
    assert policy.ceiling == 1.0 and policy.answered_share is None
    policy.settle(10, 5)  # a = 0.5
    assert policy.ceiling == pytest.approx(0.5) and policy.answered_share == 0.5
    assert policy.probability(fb(0), T0) == pytest.approx(0.5)  # the ceiling caps a free queue
    assert policy.probability(None, T0) == pytest.approx(0.5)
    policy.settle(10, 8)  # a = 0.8 < 0.9: multiplicative
    assert policy.ceiling == pytest.approx(0.4)
    policy.settle(10, 9)  # a = 0.9: additive increase
    assert policy.ceiling == pytest.approx(0.5)
    for _ in range(10):
        policy.settle(4, 4)
    assert policy.ceiling == 1.0  # capped at 1
    for _ in range(10):
        policy.settle(8, 1)
    assert policy.ceiling == 0.05  # the floor L_min
    policy.settle(8, 0)
    assert policy.ceiling == 0.05 and policy.answered_share == 0.0
    # Expired feedback: the probe goes out at L, not at 1.
    assert policy.probability(fb(255), T0 + 100_001) == pytest.approx(0.05)
    assert policy.is_probe(fb(255), T0 + 100_001)
    policy.settle(0, 0)  # nothing sent: no information, no change
    assert policy.ceiling == 0.05
    assert OlafPolicy(l_min=0.2).l_min == 0.2
    with pytest.raises(ValueError, match="l_min"):
        OlafPolicy(l_min=0)


def test_revision_2_is_unchanged_by_answers() -> None:
    """Revision 2 has no ceiling: it reads the global occupancy and probes at 1."""
    policy = OlafRev2Policy()
    assert not hasattr(policy, "settle") and policy.name == "olaf-rev2"
    assert policy.probability(fb(0, active=4), T0 + 10_000) == pytest.approx(0.25 + 0.2 * math.exp(-0.5))
    assert policy.probability(fb(255), T0 + 100_001) == 1.0


def test_sender_settles_each_update_once_when_answered_or_after_the_ttl() -> None:
    """All ACKs in: settled at once with a = 1; none: settled feedback_ttl after it went out,
    a = 0, and the ceiling falls; late ACKs do not settle it again."""
    now = [T0]
    transport = InboxTransport()
    policy = OlafPolicy()
    sender = Sender(transport, cluster_id=0, worker_id=5, values=64, policy=policy,
                    seed=1, ack_thread=False, clock=lambda: now[0])
    grad = np.ones(4 * 64, np.float32)  # 4 blocks
    assert sender.send_gradient(grad, reward=1.0, model_version=0)
    for b in range(4):
        transport.inbox.append(forged_ack(5, 0, seq=0, block=b))
    sender.poll()
    st = sender.stats()
    assert (st["due_blocks"], st["answered_due_blocks"]) == (4, 4)
    assert st["loss_ceiling"] == 1.0 and st["answered_share"] == 1.0
    assert sender.send_gradient(grad, reward=1.0, model_version=1)  # seq 1, P_s = 1
    now[0] += 100_000
    sender.poll()
    assert sender.stats()["due_blocks"] == 4  # not due before the TTL has passed
    now[0] += 1
    transport.inbox.append(forged_ack(5, 0, seq=1, block=0))
    sender.poll()
    st = sender.stats()
    assert (st["due_blocks"], st["answered_due_blocks"]) == (8, 5)
    assert policy.ceiling == pytest.approx(0.25) and st["answered_share"] == 0.25
    for b in range(1, 4):  # the rest arrive late: no second settle
        transport.inbox.append(forged_ack(5, 0, seq=1, block=b))
    sender.poll()
    assert sender.stats()["due_blocks"] == 8 and policy.ceiling == pytest.approx(0.25)
    sender.close()


def test_revision_3_is_never_silenced() -> None:
    """Starvation-freedom (DESIGN.md §4): a switch that answers nothing after one forged
    "full" ACK drives L down to L_min and no lower, and once per feedback_ttl the sender
    sends with P_s >= L_min; over many TTLs some updates go out."""
    now = [T0]
    transport = InboxTransport()
    policy = OlafPolicy()
    sender = Sender(transport, cluster_id=0, worker_id=5, values=64, policy=policy,
                    seed=3, ack_thread=False, clock=lambda: now[0])
    grad = np.ones(64, np.float32)
    sender.send_gradient(grad, reward=1.0, model_version=0)
    transport.inbox.append(forged_ack(5, 255))
    sender.poll()
    sent = 0
    min_p_per_ttl: list[float] = []
    for window in range(200):  # 200 TTLs, an update every 10 ms
        best = 0.0
        for _ in range(10):
            now[0] += 10_000
            sent += sender.send_gradient(grad, reward=1.0, model_version=window)
            best = max(best, sender.last_p_s)
        min_p_per_ttl.append(best)
    assert policy.ceiling == pytest.approx(0.05)
    assert min(min_p_per_ttl) >= 0.05
    # ~0.05 per update over 2000 updates: about 100; far from none.
    assert 40 <= sent <= 250
    sender.close()
