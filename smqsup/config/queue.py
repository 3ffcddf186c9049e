"""A queue of queues.yaml: its options' table and validators, the ``defaults:`` section, and the frozen QueueConfig.

``consumers`` is a fixed count (``consumers: 4``) or a range the queue is
autoscaled within (``consumers: {min: 1, max: 8}``, min 1 when left out):
QueueConfig.consumers is the count, or the range's min, and consumers_max
its max (None: a fixed count). The scale_* options say when an autoscaled
queue steps; a queue with a fixed count keeps them unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Optional

from smqsup import defaults
from smqsup.config import names, scalars
from smqsup.config.mappings import mapping, required
from smqsup.config.problems import Validator, error, join_key

# --- bounds: every number of a queue has one (durations' and sizes' are in scalars) ---

#: Consumers of one queue. The supervisor's slot table (4096 children) holds
#: four times CONSUMERS_TOTAL_MAX: room for a reload where draining children,
#: rolled ones and their replacements overlap.
CONSUMERS_PER_QUEUE_MAX = 1000
#: Consumers of all queues together (an autoscaled queue counts its max).
CONSUMERS_TOTAL_MAX = 1024
#: Attempt counts travel in the frame prefix (``<attempts>|``, at most 9
#: digits): the threshold stays far below 10**9.
_RETRY_THRESHOLD_MAX = 1_000_000
#: Messages one consumer runs at once.
CONCURRENCY_MAX = 1000
PREFETCH_MAX = 1000
PARTITIONS_MAX = defaults.PARTITIONS_MAX
#: Handler starts a rate-limited queue allows back to back.
RATE_BURST_MAX = 100_000
#: Messages a consumer handles before it is replaced.
_MAX_MESSAGES_MAX = 1_000_000_000
#: Ready messages per running consumer past which an autoscaled queue steps up.
SCALE_UP_BACKLOG_MAX = 1_000_000
#: Messages of one group in consumers' lists at once.
GROUP_CONCURRENCY_MAX = 1_000_000


@dataclass(frozen=True)
class QueueConfig:
    """One queue: its handler and the limits of its consumers."""

    name: str
    handler: str
    #: The consumers the supervisor runs: a fixed count, or the least an autoscaled queue keeps.
    consumers: int = defaults.CONSUMERS
    #: The most consumers an autoscaled queue runs (None: ``consumers`` is a fixed count).
    consumers_max: Optional[int] = None
    retry_threshold: int = defaults.RETRY_THRESHOLD
    retry_delay_s: float = defaults.RETRY_DELAY_S
    retry_backoff: float = defaults.RETRY_BACKOFF
    retry_delay_max_s: float = defaults.RETRY_DELAY_MAX_S
    message_timeout_s: float = defaults.MESSAGE_TIMEOUT_S
    max_messages: int = defaults.MAX_MESSAGES
    max_memory_bytes: int = defaults.MAX_MEMORY_BYTES
    #: Messages one consumer process runs at once: tasks of an async handler,
    #: threads of a plain one (1: one at a time, the sequential loop).
    concurrency: int = defaults.CONCURRENCY
    #: Frames a consumer takes in one round trip: it holds at most
    #: ``concurrency + prefetch - 1`` (the running ones and the rest waiting
    #: in its own list) and settles the finished ones with its next take
    #: (1: nothing waits, one frame per take).
    prefetch: int = defaults.PREFETCH
    #: Handler starts per second for the queue across every consumer on
    #: every host (0: no limit), and how many may start back to back.
    rate_limit_per_s: float = 0.0
    rate_burst: int = 1
    #: Hash tags (queues "name", "name~1", ...) the queue spreads over, so
    #: that the masters of a Redis Cluster share its load.
    partitions: int = 1
    #: Message groups: the most messages of one group in consumers' lists at
    #: once, across every consumer on every host (0: no limit), and the
    #: starts per second one group may have (0: no limit) with its burst.
    group_concurrency: int = 0
    group_rate_limit_per_s: float = 0.0
    group_rate_burst: int = 1
    #: ``module:Class`` specs of the hooks around each handler run, in order
    #: (worker/process_hooks.py imports them in the consumer).
    hooks: tuple[str, ...] = ()
    #: OpenTelemetry: a CONSUMER span per attempt (smqsup/tracing.py).
    tracing: bool = False

    @property
    def group_limits(self) -> tuple[int, int, int]:
        """What the fetch scripts take of the group limits
        (includes/groups.lua): group_concurrency, µs between one group's
        starts (0: none), its burst. A group lives in one partition: each
        group keeps its whole limit."""
        interval = max(1, round(1_000_000 / self.group_rate_limit_per_s)) if self.group_rate_limit_per_s else 0
        return (self.group_concurrency, interval, self.group_rate_burst)

    @property
    def rate(self) -> tuple[int, int]:
        """The limit of the whole queue: µs between starts, burst; (0, 1)
        without one. Partitioned, each partition keeps its share, the
        limit and burst divided by the partition count Redis holds (the
        fetch scripts divide: includes/rate.lua), so the queue as a whole
        keeps both whatever count this file says."""
        if not self.rate_limit_per_s:
            return (0, 1)
        return (max(1, round(1_000_000 / self.rate_limit_per_s)), self.rate_burst)
    #: How long a dedup key refuses duplicates; read by producers only.
    dedup_ttl_s: float = defaults.DEDUP_TTL_S
    #: Messages published without result_ttl are tracked this long after they end (0: not tracked);
    #: declared in Redis by the queue's consumers, read by producers.
    result_ttl_s: int = 0
    #: Whether each message's lifecycle goes to the queue's event stream, and how long it gets (entries);
    #: declared in Redis by the queue's consumers, read by producers.
    events: bool = False
    events_max: int = defaults.EVENTS_MAX
    #: Autoscaled only: a step up when the queue's lag (the age of its oldest ready message) passes
    #: scale_up_lag_s, or its ready messages per running consumer (per unit of concurrency) pass
    #: scale_up_backlog; a step down once consumers sat idle scale_down_after_s; never two steps
    #: within scale_cooldown_s.
    scale_up_lag_s: float = defaults.SCALE_UP_LAG_S
    scale_up_backlog: int = defaults.SCALE_UP_BACKLOG
    scale_down_after_s: float = defaults.SCALE_DOWN_AFTER_S
    scale_cooldown_s: float = defaults.SCALE_COOLDOWN_S

    @property
    def events_cap(self) -> int:
        """The event stream's cap a producer stamps on each message: events_max, or 0 without events."""
        return self.events_max if self.events else 0

    @property
    def autoscaled(self) -> bool:
        """True when the consumers are a range (consumers..consumers_max) rather than a fixed count."""
        return self.consumers_max is not None

    @property
    def consumers_most(self) -> int:
        """The most consumers the queue may run: consumers_max when autoscaled, else consumers."""
        return self.consumers if self.consumers_max is None else self.consumers_max


# --- validators ---------------------------------------------------------------------------

_CONSUMER_COUNT = scalars.int_range(1, CONSUMERS_PER_QUEUE_MAX, " (consumers per queue)")
_RANGE_KEYS = ("min", "max")


def consumers(value: object, key: str, path: str) -> tuple[int, Optional[int]]:
    """(count, None) from a positive integer, or (min, max) from a mapping ``{min: N, max: M}``
    (min optional, 1 when left out; max required; min <= max), each from 1 to CONSUMERS_PER_QUEUE_MAX."""
    if not isinstance(value, dict):
        return _CONSUMER_COUNT(value, key, path), None
    raw = mapping(value, key, path, _RANGE_KEYS)
    if "max" not in raw:
        raise error("missing: a range needs its max (its min is 1 when left out)", path=path,
                    key=join_key(key, "max"))
    most = required(raw["max"], join_key(key, "max"), path, _CONSUMER_COUNT)
    least = required(raw["min"], join_key(key, "min"), path, _CONSUMER_COUNT) if "min" in raw else 1
    if least > most:
        raise error(f"min ({least}) is greater than max ({most})", path=path, key=key)
    return least, most


#: Queue option in YAML -> (QueueConfig field, validator); ``consumers`` fills consumers and consumers_max.
_QUEUE_OPTIONS: dict[str, tuple[str, Validator[object]]] = {
    "consumers": ("consumers", consumers),
    "retry_threshold": ("retry_threshold", scalars.int_range(0, _RETRY_THRESHOLD_MAX)),
    "retry_delay": ("retry_delay_s", scalars.parse_duration),
    "retry_backoff": ("retry_backoff", scalars.multiplier),
    "retry_delay_max": ("retry_delay_max_s", scalars.parse_duration),
    "message_timeout": ("message_timeout_s", scalars.parse_duration),
    "max_messages": ("max_messages", scalars.int_range(0, _MAX_MESSAGES_MAX)),
    "max_memory": ("max_memory_bytes", scalars.parse_size),
    "concurrency": ("concurrency", scalars.int_range(1, CONCURRENCY_MAX, " (messages at once per consumer)")),
    "prefetch": ("prefetch", scalars.int_range(1, PREFETCH_MAX, " (frames one take holds)")),
    "rate_limit": ("rate_limit_per_s", scalars.rate_limit),
    "rate_burst": ("rate_burst", scalars.int_range(1, RATE_BURST_MAX, " (starts back to back)")),
    "partitions": ("partitions", scalars.int_range(1, PARTITIONS_MAX, " (hash tags one queue spreads over)")),
    "group_concurrency": ("group_concurrency", scalars.int_range(
        1, GROUP_CONCURRENCY_MAX, " (messages of one group at once)")),
    "group_rate_limit": ("group_rate_limit_per_s", scalars.rate_limit),
    "group_rate_burst": ("group_rate_burst", scalars.int_range(1, RATE_BURST_MAX, " (one group's starts back to back)")),
    "hooks": ("hooks", names.hook_specs),
    "tracing": ("tracing", scalars.tracing),
    "dedup_ttl": ("dedup_ttl_s", scalars.positive_long_duration),
    "result_ttl": ("result_ttl_s", scalars.result_ttl),
    "events": ("events", scalars.boolean),
    "events_max": ("events_max", scalars.int_range(1, defaults.EVENTS_MAX_MAX, " (entries the event stream keeps)")),
    "scale_up_lag": ("scale_up_lag_s", scalars.duration_range(0.1, 3600.0, "100ms", "1h")),
    "scale_up_backlog": ("scale_up_backlog", scalars.int_range(
        1, SCALE_UP_BACKLOG_MAX, " (ready messages per running consumer)")),
    "scale_down_after": ("scale_down_after_s", scalars.duration_range(1.0, 86400.0, "1s", "1d")),
    "scale_cooldown": ("scale_cooldown_s", scalars.duration_range(0.1, 600.0, "100ms", "10m")),
}


def _options(raw: Mapping[str, object], key: str, path: str) -> dict[str, object]:
    """The queue options present in ``raw``, as QueueConfig field -> value."""
    options = {
        attribute: required(raw[name], join_key(key, name), path, check)
        for name, (attribute, check) in _QUEUE_OPTIONS.items()
        if name in raw
    }
    counts = options.get("consumers")
    if isinstance(counts, tuple):  # both fields at once: a queue's fixed count overrides a default range whole
        options["consumers"], options["consumers_max"] = counts
    return options


# --- sections -------------------------------------------------------------------------------


def defaults_section(value: object, path: str) -> dict[str, object]:
    """queues.yaml's ``defaults:`` (absent or null: none), as QueueConfig field -> value."""
    if isinstance(value, dict) and "handler" in value:
        raise error("a handler cannot be a default: each queue names its own",
                    path=path, key="defaults.handler")
    return _options(mapping(value, "defaults", path, _QUEUE_OPTIONS), "defaults", path)


def one(name: object, value: object, base: Mapping[str, object], path: str) -> QueueConfig:
    """The queue ``name`` of ``queues:``: its own options over ``base`` (the defaults section's)."""
    key = join_key("queues", name)
    name = names.queue_or_namespace(name, key, path)
    raw = mapping(value, key, path, ("handler", *_QUEUE_OPTIONS))
    if "handler" not in raw:
        raise error("missing: every queue needs a handler 'module:function'", path=path,
                    key=join_key(key, "handler"))
    handler = required(raw["handler"], join_key(key, "handler"), path, names.handler_spec)
    options: dict[str, Any] = {**base, **_options(raw, key, path)}  # validated
    return replace(QueueConfig(name=name, handler=handler), **options)


def section(value: object, base: Mapping[str, object], path: str) -> dict[str, QueueConfig]:
    """queues.yaml's ``queues:``, every queue validated over ``base``, at most CONSUMERS_TOTAL_MAX
    consumers in all (an autoscaled queue counts its max)."""
    if not isinstance(value, dict) or not value:
        raise error("expected a non-empty mapping of queue names to their options", value,
                    path=path, key="queues")
    queues = [one(name, item, base, path) for name, item in value.items()]
    total = sum(q.consumers_most for q in queues)
    if total > CONSUMERS_TOTAL_MAX:
        counted = " (an autoscaled queue counts its max)" if any(q.autoscaled for q in queues) else ""
        raise error(f"at most {CONSUMERS_TOTAL_MAX} consumers in all queues together{counted}", total,
                    path=path, key="queues")
    return {q.name: q for q in queues}
