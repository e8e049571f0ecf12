"""What ``verify-aom`` checks: one deployment, its horizon and the two property bounds.

A ``Deployment`` is validated when it is built, so an impossible configuration never
reaches the solver. Everything time-like is counted in *slots*: one slot is one
update period of the workers (``slot_ms`` milliseconds; every worker produces one
fresh update per slot, or one every ``periods[u]`` slots from slot ``phases[u]``) and
the parameter server sends ``pull_rate`` PULLs per slot.

The default deployment is the one ``verify-aom`` with no flags checks: the switch
defaults (capacity 64, OLAF mode, ``alpha = 0.2``, ``beta = 0.05``) with 8 workers in 2
clusters, one PULL per slot, a horizon of 24 slots after a warm-up of 4, fairness within
3.25 slots of the mean, every worker's AoM at most 4 slots, skip runs of at most 2 slots,
and no worker silent for more than 10 slots; rewards and the controller's threshold
unknown (``CLI_DEFAULT_REWARDS``, the controller's rule). ``Deployment()`` itself keeps
``rewards = "merge"`` (no threshold set yet), the Python API's long-standing default that
the all-T search and the benchmarks build on; ``verify-aom`` passes ``any`` unless told.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from pathlib import Path
from typing import Any

from verification.sending import FEEDBACK_REVISIONS, SEND_RULES
from worker_transport.policy import DEFAULT_ALPHA, DEFAULT_BETA

MODES = ("olaf", "fifo")
SENDERS = ("olaf", "always")
REWARD_MODELS = ("any", "merge", "unbeaten")
"""``any``: rewards and threshold unknown (covers the controller's ``0.15 * |mean reward|``).
``merge``: no threshold set yet, or every reward within the threshold of every other, so
every compatible update merges. ``unbeaten``: the workers a property is about (the one
under test for responsiveness, every worker for fairness) are never out-rewarded: their
updates are never DROPPED_REWARD and a slot holding their contribution is never REPLACED
by another worker's; the others' rewards are unknown."""
CLI_DEFAULT_FEEDBACK = 3
"""The feedback revision ``verify-aom`` checks unless ``--feedback`` or the TOML file
says otherwise: DESIGN.md's (revision 3). ``Deployment()`` keeps 2, which the
brute-force harness (the reference queue's ACKs) and the benchmarks pin."""
CLI_DEFAULT_REWARDS = "any"
"""What ``verify-aom`` assumes of rewards unless ``--rewards`` or the TOML file says
otherwise: nothing (the controller sets its threshold as soon as DATA arrives)."""
PROPERTIES = ("fairness", "responsiveness", "starvation")
"""The AoM properties (``--property all`` checks these three)."""
ISOLATION = "isolation"
"""The isolation property (``verification.isolation``): a cluster that keeps sending gets
into the queue within ``isolation_bound`` slots whatever the other clusters send. Checked
only when asked for by name (it assumes another sender and an adversary)."""
ALL_PROPERTIES = (*PROPERTIES, ISOLATION)
DEFAULT_FEEDBACK_TTL_MS = 100.0
"""DESIGN.md §4's default ``feedback_ttl``."""

MAX_WORKERS = 256
MAX_HORIZON = 1000
MAX_PULLS_PER_SLOT = 64
MAX_PERIOD = MAX_HORIZON
CONTRIBUTOR_BITS = 32
"""Width of the wire's contributors bitmap: worker ``u`` sets bit ``u % 32``."""


class ConfigError(ValueError):
    """A deployment that cannot exist or cannot be checked; the message says why."""


@dataclass(frozen=True)
class Deployment:
    """One configuration to verify (DESIGN.md §3-§5), in slots."""

    workers: int = 8
    clusters: int = 2
    capacity: int = 64
    pull_rate: Fraction = Fraction(1)
    """PULLs per slot (a rational number; 0.5 = one PULL every other slot)."""
    horizon: int = 24
    """T, slots checked (0 .. T-1)."""
    warmup: int = 4
    """Slots at the start where the properties are not required (queues filling)."""
    fairness_threshold: Fraction = Fraction(13, 4)
    """Slots: ``max_u |AoM_u(t) - mean AoM(t)|`` may not exceed this."""
    aom_bound: int = 4
    """Slots: ``AoM_u(t)`` of a worker that keeps sending may not exceed this."""
    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    """Per millisecond, as in DESIGN.md §4."""
    slot_ms: float = 10.0
    """Length of a slot: the workers' update period, in milliseconds."""
    mode: str = "olaf"
    """Queue mode: ``olaf`` (merge/replace/drop) or ``fifo`` (drop-tail baseline)."""
    sender: str | None = None
    """Workers' transmission control: ``olaf`` (P_s, DESIGN.md §4) or ``always``.
    ``None`` picks the natural partner of ``mode``: olaf -> olaf, fifo -> always."""
    max_skip: int | None = 2
    """Assumption for fairness and responsiveness: a worker that *keeps sending* skips
    at most this many slots in a row. ``None``: no assumption beyond the send rule
    itself (which, with expiry, bounds skip runs by the probe gap)."""
    send_rule: str = "design"
    """``design``: DESIGN.md §4 as revised (free share, feedback expiry, probe).
    ``legacy``: the old rule (``Q_free`` in slots, no expiry), kept as a regression case."""
    feedback_ttl_ms: float = DEFAULT_FEEDBACK_TTL_MS
    """Feedback older than this no longer counts; the next update is a probe."""
    feedback: int = 2
    """DESIGN.md §3 Feedback / §4 revision: 3 (the ACK's util from ``room_c``, ``P_s =
    min(N * Q_free + alpha e^(-beta Δ), L)``, probes at ``L``) or 2 (global occupancy,
    ``Q_free / N``, probes at 1). ``verify-aom`` passes ``CLI_DEFAULT_FEEDBACK``. Under 3
    starvation means: at least once per ``starvation_bound`` fresh updates a decision
    with ``P_s >= L_min`` (see ``sending``)."""
    starvation_bound: int | None = None
    """Starvation property: no worker skips more than this many slots in a row while
    the queue has room (revision 3: no worker has more than this many fresh updates in a
    row whose decision may fall below ``P_s = L_min``). ``None``: the probe gap minus one,
    ``ceil(ttl / slot_ms)``."""
    pull_jitter: int = 0
    """The PS's cumulative PULL count by the end of slot t may differ from the nominal
    ``floor((t+1) r)`` by up to this many PULLs (0: exact schedule). Explicit encoding."""
    rewards: str = "merge"
    """``merge``: no reward threshold set (the switch default, every compatible update
    merges). ``any``: rewards and threshold unknown, so an update that meets another
    worker's slot may merge, replace it or be dropped (the adversary picks); what
    ``verify-aom`` uses by default. ``unbeaten``: see ``REWARD_MODELS``."""
    periods: int | tuple[int, ...] = 1
    """Slots between a worker's fresh updates: one value for every worker, or one per
    worker. A worker has a fresh update in slot ``t`` iff ``t >= phase`` and
    ``(t - phase) % period == 0``; without one it cannot send. Explicit encoding."""
    phases: int | tuple[int, ...] = 0
    """The slot of each worker's first fresh update (``0 <= phase < period``)."""
    cluster_quota: int | None = None
    """DESIGN.md §3: the most slots one cluster may hold (one value for every cluster,
    both modes); ``None`` = ``capacity``, the switch default (no limit). Valid 1..capacity.
    In OLAF mode with one block per update a cluster never holds more than one slot, so
    the quota never refuses an UPDATE of fairness, responsiveness and starvation (under
    feedback revision 3 it sets the ACK's ``room_c``, which the send rule reads); it
    matters to ``isolation``, whose other clusters send any block."""
    isolation_bound: int = 1
    """Isolation property: the victim cluster gets an UPDATE into the queue (ENQUEUED,
    MERGED or REPLACED) in every window of this many consecutive slots."""

    def __post_init__(self) -> None:
        def fail(message: str) -> None:
            raise ConfigError(message)

        object.__setattr__(self, "pull_rate", _fraction(self.pull_rate, "pull-rate"))
        object.__setattr__(
            self, "fairness_threshold", _fraction(self.fairness_threshold, "fairness-threshold")
        )
        for name in ("workers", "clusters", "capacity", "horizon", "warmup", "aom_bound",
                     "max_skip", "starvation_bound", "pull_jitter", "cluster_quota",
                     "isolation_bound"):
            value = getattr(self, name)
            if value is None and name in ("max_skip", "starvation_bound", "cluster_quota"):
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                fail(f"{name.replace('_', '-')} must be an integer, got {value!r}")
        if not 1 <= self.workers <= MAX_WORKERS:
            fail(f"workers must be 1..{MAX_WORKERS}, got {self.workers}")
        if not 1 <= self.clusters <= self.workers:
            fail(
                f"clusters must be 1..workers ({self.workers}): every cluster needs a worker, "
                f"got {self.clusters}"
            )
        if self.clusters > 255:
            fail("clusters must be at most 255 (active_clusters is an 8-bit field)")
        if not 1 <= self.capacity <= 65535:
            fail(f"capacity must be 1..65535 slots, got {self.capacity}")
        if self.cluster_quota is not None and not 1 <= self.cluster_quota <= self.capacity:
            fail(f"cluster-quota must be 1..capacity ({self.capacity}) slots, got "
                 f"{self.cluster_quota}")
        if self.isolation_bound < 1:
            fail(f"isolation-bound must be >= 1 slot, got {self.isolation_bound}")
        if not 0 < self.pull_rate <= MAX_PULLS_PER_SLOT:
            fail(f"pull-rate must be > 0 and <= {MAX_PULLS_PER_SLOT} PULLs per slot, "
                 f"got {float(self.pull_rate):g}")
        if not 1 <= self.horizon <= MAX_HORIZON:
            fail(f"horizon must be 1..{MAX_HORIZON} slots, got {self.horizon}")
        if not 0 <= self.warmup < self.horizon:
            fail(f"warmup must be 0..horizon-1 ({self.horizon - 1}), got {self.warmup}")
        if self.fairness_threshold < 0:
            fail("fairness-threshold must be >= 0 slots")
        if self.aom_bound < 0:
            fail("aom-bound must be >= 0 slots")
        if not 0 <= self.pull_jitter <= 4:
            fail(f"pull-jitter must be 0..4 PULLs, got {self.pull_jitter}")
        if self.max_skip is not None and self.max_skip < 0:
            fail("max-skip must be >= 0 slots")
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            fail(f"alpha must be finite and >= 0, got {self.alpha}")
        if not (math.isfinite(self.beta) and self.beta >= 0):
            fail(f"beta must be finite and >= 0 (per ms), got {self.beta}")
        if not (math.isfinite(self.slot_ms) and self.slot_ms > 0):
            fail(f"slot-ms must be > 0, got {self.slot_ms}")
        if self.mode not in MODES:
            fail(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.sender is None:
            object.__setattr__(self, "sender", "olaf" if self.mode == "olaf" else "always")
        if self.sender not in SENDERS:
            fail(f"sender must be one of {', '.join(SENDERS)}, got {self.sender!r}")
        if self.rewards not in REWARD_MODELS:
            fail(f"rewards must be one of {', '.join(REWARD_MODELS)}, got {self.rewards!r}")
        object.__setattr__(self, "periods", self._per_worker("periods", self.periods, 1))
        object.__setattr__(self, "phases", self._per_worker("phases", self.phases, 0))
        for u in range(self.workers):
            if not 0 <= self.phase(u) < self.period(u):
                fail(f"phases must be 0..period-1 for every worker: worker {u} has period "
                     f"{self.period(u)} and phase {self.phase(u)}")
        if self.send_rule not in SEND_RULES:
            fail(f"send-rule must be one of {', '.join(SEND_RULES)}, got {self.send_rule!r}")
        if isinstance(self.feedback_ttl_ms, bool) or not isinstance(self.feedback_ttl_ms,
                                                                     int | float):
            fail(f"feedback-ttl-ms must be a number, got {self.feedback_ttl_ms!r}")
        object.__setattr__(self, "feedback_ttl_ms", float(self.feedback_ttl_ms))
        if not self.feedback_ttl_ms > 0:
            fail(f"feedback-ttl-ms must be > 0 (inf: never expires), got {self.feedback_ttl_ms}")
        if isinstance(self.feedback, bool) or self.feedback not in FEEDBACK_REVISIONS:
            fail(f"feedback must be one of {', '.join(map(str, FEEDBACK_REVISIONS))} "
                 f"(DESIGN.md §3 Feedback revision), got {self.feedback!r}")
        if self.send_rule == "legacy" and self.feedback != 2:
            fail("send-rule legacy is the rule before revision 2 (Q_free in slots, no expiry); "
                 "use it with feedback 2")
        if self.starvation_bound is not None and self.starvation_bound < 0:
            fail("starvation-bound must be >= 0 slots")

    def _per_worker(self, name: str, value: Any, least: int) -> int | tuple[int, ...]:
        """``periods``/``phases`` as one int (the same for every worker) or a tuple of
        ``workers`` ints; a list of equal values collapses to one int, so that a
        deployment with other ``workers`` can be derived from ``as_dict()``."""
        items = [value] if isinstance(value, int) else value
        if isinstance(items, str) or not isinstance(items, list | tuple) or not items:
            raise ConfigError(f"{name} must be an integer or a list of integers, got {value!r}")
        for x in items:
            if isinstance(x, bool) or not isinstance(x, int):
                raise ConfigError(f"{name} must be integers, got {x!r}")
            if x < least or x > MAX_PERIOD:
                raise ConfigError(f"{name} must be {least}..{MAX_PERIOD} slots, got {x}")
        if len(items) not in (1, self.workers):
            raise ConfigError(f"{name} must give one value for all workers or one per worker "
                              f"({self.workers}), got {len(items)}")
        return items[0] if len(set(items)) == 1 else tuple(items)

    # -- derived -------------------------------------------------------------------
    def period(self, worker: int) -> int:
        p = self.periods
        return p if isinstance(p, int) else p[worker]

    def phase(self, worker: int) -> int:
        p = self.phases
        return p if isinstance(p, int) else p[worker]

    def has_update(self, worker: int, t: int) -> bool:
        """Worker ``worker`` has a fresh update in slot ``t`` (it may send only then)."""
        p, f = self.period(worker), self.phase(worker)
        return t >= f and (t - f) % p == 0

    @property
    def quota(self) -> int:
        """The effective ``cluster_quota``: ``capacity`` when none is set."""
        return self.capacity if self.cluster_quota is None else self.cluster_quota

    @property
    def staggered(self) -> bool:
        """Some worker updates less often than every slot or starts late."""
        return self.periods != 1 or self.phases != 0

    def cluster_of(self, worker: int) -> int:
        """Workers are split into contiguous id ranges, cluster sizes differing by <= 1."""
        return worker * self.clusters // self.workers

    def members(self, cluster: int) -> list[int]:
        return [u for u in range(self.workers) if self.cluster_of(u) == cluster]

    def aliases(self, worker: int) -> list[int]:
        """Workers the PS credits when it sees ``worker``'s contributor bit (itself
        included): same cluster and same ``id % 32`` (DESIGN.md §5)."""
        c = self.cluster_of(worker)
        return [v for v in self.members(c) if v % CONTRIBUTOR_BITS == worker % CONTRIBUTOR_BITS]

    @property
    def aliasing(self) -> bool:
        """True when some cluster has more than 32 workers, so contributor bits alias."""
        return any(len(self.aliases(u)) > 1 for u in range(self.workers))

    def pulls_in_slot(self, t: int) -> int:
        """PULLs the PS sends during slot ``t``: a constant rate, ``floor``-scheduled."""
        r = self.pull_rate
        return math.floor((t + 1) * r) - math.floor(t * r)

    @property
    def fairness_limit(self) -> int:
        """Fairness fails when ``|N * AoM_u - sum of AoM| > fairness_limit`` for some
        worker: ``floor(N * threshold)``, the threshold scaled to integers once for every
        encoding and the all-T search."""
        th = self.fairness_threshold
        return (self.workers * th.numerator) // th.denominator

    @property
    def starvation_limit(self) -> int:
        """The starvation property's bound in slots: ``starvation_bound``, or by default
        ``ceil(feedback_ttl / slot)`` (what the probe guarantees), capped at the horizon."""
        if self.starvation_bound is not None:
            return self.starvation_bound
        slots = self.feedback_ttl_ms / self.slot_ms
        return math.ceil(slots) if slots < self.horizon else self.horizon

    def pulled_by(self, t: int) -> int:
        """PULLs the PS has sent by the end of slot ``t`` on the nominal schedule."""
        return math.floor((t + 1) * self.pull_rate)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if math.isinf(self.feedback_ttl_ms):
            d["feedback_ttl_ms"] = "inf"
        d["pull_rate"] = _fraction_out(self.pull_rate)
        d["fairness_threshold"] = _fraction_out(self.fairness_threshold)
        for name in ("periods", "phases"):
            if isinstance(d[name], tuple):
                d[name] = list(d[name])
        return d


def quota_unsupported(dep: Deployment) -> str | None:
    """Why fairness, responsiveness and starvation cannot be checked with ``dep``'s
    ``cluster_quota`` (None: they can). OLAF mode: one block per update, so a cluster
    holds at most one slot and any quota (>= 1) never refuses an UPDATE — exact, nothing
    to model. FIFO mode: every UPDATE takes a slot and a quota below capacity would bind;
    those encodings do not model it (the isolation property does)."""
    if dep.mode == "fifo" and dep.quota < dep.capacity:
        return ("cluster-quota below capacity in FIFO mode is modelled for --property "
                "isolation only")
    return None


def isolation_unsupported(dep: Deployment) -> str | None:
    """Why the isolation property cannot be checked on ``dep`` (None: it can)."""
    if dep.clusters < 2:
        return "isolation needs at least 2 clusters (a victim and another cluster)"
    if dep.pull_jitter:
        return "isolation: --pull-jitter is not modelled (PULLs on the nominal schedule)"
    if dep.staggered:
        return "isolation: per-worker --periods/--phases are not modelled (the victim sends every slot)"
    return None


def _fraction(value: Any, name: str) -> Fraction:
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError
            return Fraction(value).limit_denominator(1000)
        return Fraction(value)
    except (ValueError, TypeError, ZeroDivisionError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None


def _fraction_out(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else float(value)


FIELD_NAMES = frozenset(f.name for f in fields(Deployment))


TOP_LEVEL_KEYS = frozenset({"deployment", "property", "timeout"})


def load_toml(path: str | Path) -> dict[str, Any]:
    """The settings of a TOML file: a ``[deployment]`` table (plus optional top-level
    ``property`` and ``timeout``), or the same keys at the top level; keys as the flags
    spell them (``pull-rate`` or ``pull_rate``). Unknown keys anywhere, an empty file,
    a file that is not UTF-8 or not TOML are errors (ConfigError, one line)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}); TOML files are UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {str(e).splitlines()[0]}") from None
    if not data:
        raise ConfigError(f"{path}: no settings (an empty file would silently verify the "
                          "default deployment)")
    if "deployment" in data:
        table = data["deployment"]
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [deployment] must be a table")
        for key in data:
            if key not in TOP_LEVEL_KEYS:
                raise ConfigError(f"{path}: unknown top-level key {key!r} (settings go in "
                                  "[deployment])")
        table = {**{k: v for k, v in data.items() if k != "deployment"}, **table}
    else:
        table = data
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in FIELD_NAMES and name not in ("timeout", "property"):
            raise ConfigError(f"{path}: unknown key {key!r}")
        if isinstance(value, dict):
            raise ConfigError(f"{path}: {key!r} must be a value, not a table")
        out[name] = value
    return out
