"""queues.yaml -> frozen dataclasses, validated completely before anything starts.

Every error is one line naming the file, the key path and the bad value:
``queues.yaml: queues.orders.consumers: expected a positive integer, got 'four'``.

Value syntax, the same everywhere in the file:

- durations: a number of seconds (``30``, ``1.5``) or a string with a unit:
  ``500ms``, ``5s``, ``2m``, ``1h``, ``1d`` (``1.5s`` allowed, units in any case);
- sizes: a number of bytes or a string with a BINARY unit, in any case:
  ``B``; ``K``/``KB``/``KiB`` = 1024; ``M``/``MB``/``MiB`` = 1024**2;
  ``G``/``GB``/``GiB`` = 1024**3; ``T``/``TB``/``TiB`` = 1024**4 (so ``512MB``
  is 512 MiB, ``1.5KB`` is 1536 bytes);
- booleans are YAML 1.2's ``true`` / ``false`` only: ``yes``, ``no``, ``on``,
  ``off`` stay strings, so ``appendfsync: no`` means what it says and
  ``preload: yes`` is refused rather than guessed;
- ``${VAR}`` and ``${VAR:-default}`` (default when unset or empty) expand in
  every string value, once, without nesting; ``$${`` is a literal ``${``. A
  value that came from the environment may spell a number or a boolean
  (``consumers: ${N}``); a literal string never does.
- null sections (``redis:``, ``defaults:``, ``web:`` with nothing under them)
  are empty mappings: ``web:`` alone runs the web UI with its defaults.
- every number has a bound, and past it a one-line error: consumers 1000 per
  queue and 1024 in all queues, durations 365d (heartbeat_interval 10ms to
  1h, heartbeat_timeout 1d, dedup_ttl 3650d), sizes 1TB, retry_threshold
  1,000,000, max_messages 10**9, retry_backoff 100, concurrency 1000, prefetch 1000,
  rate_limit 1 a day to 1000000/s, rate_burst 100000. The file itself is at
  most 256KiB, 20 levels deep and 25,000 YAML nodes, so that no file, however
  built, can stall or crash a supervisor re-reading it on SIGHUP.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from smqsup import defaults, safe
from smqsup.config import addresses, names, scalars, schedule, yamlfile
from smqsup.config.env import expand_env, storable
from smqsup.config.problems import MISSING, Validator, error, join_key, key_text
from smqsup.errors import ConfigError


@dataclass(frozen=True)
class RedisConfig:
    """Where Redis is. ``url`` None means: run an embedded redis-server."""

    url: str | None = None
    #: Data directory of the embedded server (AOF, socket, pid file).
    data_dir: Path | None = None
    #: appendfsync of the embedded server: always, everysec or no.
    appendfsync: str = defaults.APPENDFSYNC
    #: Replicas that must confirm a publish (and a schedule's firing) before
    #: it is reported done (WAIT), and how long to wait for them.
    wait_replicas: int = 0
    wait_timeout_s: float = defaults.WAIT_TIMEOUT_S

    @property
    def embedded(self) -> bool:
        return self.url is None


@dataclass(frozen=True)
class QueueConfig:
    """One queue: its handler and the limits of its consumers."""

    name: str
    handler: str
    consumers: int = defaults.CONSUMERS
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

    @property
    def events_cap(self) -> int:
        """The event stream's cap a producer stamps on each message: events_max, or 0 without events."""
        return self.events_max if self.events else 0


@dataclass(frozen=True)
class WebConfig:
    listen: str = defaults.WEB_LISTEN
    token: str | None = None


@dataclass(frozen=True)
class Config:
    """A whole validated queues.yaml."""

    path: Path
    redis: RedisConfig = field(default_factory=RedisConfig)
    namespace: str = defaults.NAMESPACE
    max_message_size_bytes: int = defaults.MAX_MESSAGE_SIZE_BYTES
    heartbeat_interval_s: float = defaults.HEARTBEAT_INTERVAL_S
    heartbeat_timeout_s: float = defaults.HEARTBEAT_TIMEOUT_S
    shutdown_timeout_s: float = defaults.SHUTDOWN_TIMEOUT_S
    preload: bool = False
    #: Count messages and keep the per-second history (statistics on).
    stats: bool = True
    queues: dict[str, QueueConfig] = field(default_factory=dict)
    web: WebConfig | None = None
    #: Schedules fired by each queue's elected collector (schedule.py).
    schedules: dict[str, schedule.ScheduleConfig] = field(default_factory=dict)


# --- bounds: every number in the file has one (durations' and sizes' are in validate) ---

#: Consumers of one queue. The supervisor's slot table (4096 children) holds
#: four times CONSUMERS_TOTAL_MAX: room for a reload where draining children,
#: rolled ones and their replacements overlap.
CONSUMERS_PER_QUEUE_MAX = 1000
#: Consumers of all queues together.
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

_T = TypeVar("_T")

_TOP_KEYS = (
    "redis", "namespace", "max_message_size", "heartbeat_interval",
    "heartbeat_timeout", "shutdown_timeout", "preload", "stats", "defaults", "queues", "web",
    "schedules",
)
_REDIS_KEYS = ("url", "data_dir", "appendfsync", "wait_replicas", "wait_timeout")
_WEB_KEYS = ("listen", "token")
_APPENDFSYNC = ("always", "everysec", "no")


# --- mappings and keys ----------------------------------------------------------


def _mapping(value: object, key: str, path: str, allowed: Collection[str]) -> dict[str, object]:
    """A mapping with only ``allowed`` keys, its string values env-expanded."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error("expected a mapping", value, path=path, key=key)
    for name in value:
        if not isinstance(name, str) or name not in allowed:
            raise _unknown_key(name, key, path, allowed)
    expanded: dict[str, object] = {}
    for name, item in value.items():
        where = join_key(key, name)
        expanded[name] = storable(expand_env(item, where, path), where, path)
    return expanded


def _unknown_key(name: object, key: str, path: str, allowed: Collection[str]) -> ConfigError:
    close = difflib.get_close_matches(key_text(name), list(allowed), n=1)
    if close:
        problem = f"unknown key, did you mean {close[0]!r}?"
    else:
        problem = f"unknown key (expected one of: {', '.join(allowed)})"
    return error(problem, path=path, key=join_key(key, name))


def _get(
    raw: Mapping[str, object], name: str, key: str, path: str,
    check: Validator[_T], default: _T,
) -> _T:
    """``raw[name]`` validated, or ``default`` when the key is absent."""
    if name not in raw:
        return default
    return _required(raw[name], join_key(key, name), path, check)


def _required(value: object, key: str, path: str, check: Validator[_T]) -> _T:
    if value is None:
        raise error("a value is required", value, path=path, key=key)
    return check(value, key, path)


# --- sections -------------------------------------------------------------------------


def _redis(value: object, path: str) -> RedisConfig:
    raw = _mapping(value, "redis", path, _REDIS_KEYS)
    if raw.get("url") == "":  # url: ${REDIS_URL:-} switches to the embedded server
        del raw["url"]
    return RedisConfig(
        url=_get(raw, "url", "redis", path, addresses.redis_url, None),
        data_dir=_get(raw, "data_dir", "redis", path, addresses.data_dir, None),
        appendfsync=_get(raw, "appendfsync", "redis", path, scalars.choice(_APPENDFSYNC),
                         defaults.APPENDFSYNC),
        wait_replicas=_get(raw, "wait_replicas", "redis", path,
                           scalars.int_range(0, defaults.WAIT_REPLICAS_MAX), 0),
        wait_timeout_s=_get(raw, "wait_timeout", "redis", path, scalars.wait_timeout, defaults.WAIT_TIMEOUT_S),
    )


#: Queue option in YAML -> (QueueConfig field, validator).
_QUEUE_OPTIONS: dict[str, tuple[str, Validator[object]]] = {
    "consumers": ("consumers", scalars.int_range(1, CONSUMERS_PER_QUEUE_MAX, " (consumers per queue)")),
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
    "dedup_ttl": ("dedup_ttl_s", scalars.positive_long_duration),
    "result_ttl": ("result_ttl_s", scalars.result_ttl),
    "events": ("events", scalars.boolean),
    "events_max": ("events_max", scalars.int_range(1, defaults.EVENTS_MAX_MAX, " (entries the event stream keeps)")),
}


def _queue_options(raw: Mapping[str, object], key: str, path: str) -> dict[str, object]:
    """The queue options present in ``raw``, as QueueConfig field -> value."""
    return {
        attribute: _required(raw[name], join_key(key, name), path, check)
        for name, (attribute, check) in _QUEUE_OPTIONS.items()
        if name in raw
    }


def _queue_defaults(value: object, path: str) -> dict[str, object]:
    if isinstance(value, dict) and "handler" in value:
        raise error("a handler cannot be a default: each queue names its own",
                    path=path, key="defaults.handler")
    return _queue_options(_mapping(value, "defaults", path, _QUEUE_OPTIONS), "defaults", path)


def _queue(name: object, value: object, base: Mapping[str, object], path: str) -> QueueConfig:
    key = join_key("queues", name)
    name = names.queue_or_namespace(name, key, path)
    raw = _mapping(value, key, path, ("handler", *_QUEUE_OPTIONS))
    if "handler" not in raw:
        raise error("missing: every queue needs a handler 'module:function'", path=path,
                    key=join_key(key, "handler"))
    handler = _required(raw["handler"], join_key(key, "handler"), path, names.handler_spec)
    options: dict[str, Any] = {**base, **_queue_options(raw, key, path)}  # validated
    return replace(QueueConfig(name=name, handler=handler), **options)


def _queues(value: object, base: Mapping[str, object], path: str) -> dict[str, QueueConfig]:
    if not isinstance(value, dict) or not value:
        raise error("expected a non-empty mapping of queue names to their options", value,
                    path=path, key="queues")
    queues = [_queue(name, item, base, path) for name, item in value.items()]
    total = sum(q.consumers for q in queues)
    if total > CONSUMERS_TOTAL_MAX:
        raise error(f"at most {CONSUMERS_TOTAL_MAX} consumers in all queues together", total,
                    path=path, key="queues")
    return {q.name: q for q in queues}


def _web(value: object, path: str) -> WebConfig | None:
    if value is MISSING:
        return None
    raw = _mapping(value, "web", path, _WEB_KEYS)
    listen = _get(raw, "listen", "web", path, addresses.listen, defaults.WEB_LISTEN)
    token = _get(raw, "token", "web", path, addresses.token, None)
    if token is None and not addresses.is_loopback(addresses.parse_listen(listen)[0]):
        raise error(f"required when web.listen ({listen}) is not a loopback address",
                    path=path, key="web.token")
    return WebConfig(listen=listen, token=token)


def _config(data: object, path: str) -> Config:
    if data is None:
        raise error("the file is empty (expected a mapping with a 'queues' key)", path=path)
    if not isinstance(data, dict):
        raise error("expected a mapping at the top level", data, path=path)
    raw = _mapping(data, "", path, _TOP_KEYS)
    interval_s = _get(raw, "heartbeat_interval", "", path, scalars.heartbeat_interval,
                      defaults.HEARTBEAT_INTERVAL_S)
    timeout_s = _get(raw, "heartbeat_timeout", "", path, scalars.heartbeat_timeout,
                     defaults.HEARTBEAT_TIMEOUT_S)
    if timeout_s <= interval_s:
        raise error(f"must be greater than heartbeat_interval ({interval_s:g}s)",
                    raw.get("heartbeat_timeout", timeout_s), path=path, key="heartbeat_timeout")
    queues = _queues(raw.get("queues", MISSING), _queue_defaults(raw.get("defaults"), path), path)
    return _schedules_fit(Config(
        path=Path(path),
        redis=_redis(raw.get("redis"), path),
        namespace=_get(raw, "namespace", "", path, names.queue_or_namespace, defaults.NAMESPACE),
        max_message_size_bytes=_get(raw, "max_message_size", "", path, scalars.message_size,
                                    defaults.MAX_MESSAGE_SIZE_BYTES),
        heartbeat_interval_s=interval_s,
        heartbeat_timeout_s=timeout_s,
        shutdown_timeout_s=_get(raw, "shutdown_timeout", "", path, scalars.parse_duration,
                                defaults.SHUTDOWN_TIMEOUT_S),
        preload=_get(raw, "preload", "", path, scalars.boolean, False),
        stats=_get(raw, "stats", "", path, scalars.boolean, True),
        queues=queues,
        web=_web(raw.get("web", MISSING), path),
        schedules=schedule.section(raw.get("schedules"), queues, path),
    ), path)


def _schedules_fit(cfg: Config, path: str) -> Config:
    """``cfg``, once the largest message of each schedule fits its
    max_message_size: one that does not would pass every other check and
    never fire (the collector refuses to publish it)."""
    for s in cfg.schedules.values():
        size = schedule.largest_message_bytes(s)
        if size > cfg.max_message_size_bytes:
            raise error(f"its message (body, headers and envelope) would be over max_message_size "
                        f"({cfg.max_message_size_bytes} bytes)", f"{size} bytes", path=path,
                        key=join_key(join_key("schedules", s.name), "body"))
    return cfg


# --- public entry points -----------------------------------------------------------------


def loads(text: str, path: str = "<string>") -> Config:
    """Parse and validate queues.yaml text; ``path`` names it in errors. Its
    secrets (the Redis url's password, the web token) are registered with
    safe.register_secret, so that no text this process (and every process
    it forks: the consumers) shows or stores, a dead letter's error
    included, holds them."""
    cfg = _config(yamlfile.parse(text, path), path)
    safe.register_url(cfg.redis.url)
    if cfg.web is not None:
        safe.register_secret(cfg.web.token)
    return cfg


def _config_path(path: object) -> str:
    """``path`` as a string; ConfigError when it is no path at all (None, 5)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise error(f"expected a file path, not a value of type {type(path).__name__}", key="config path")
    return os.fsdecode(path)


def load(path: str | os.PathLike[str]) -> Config:
    """Read and validate a whole queues.yaml; any fault is one ConfigError line."""
    name = _config_path(path)
    return loads(yamlfile.read(name), name)


def from_url(url: str, namespace: str = defaults.NAMESPACE) -> Config:
    """A Config with only a Redis url (no queues), for the CLI and producers."""
    return Config(
        path=Path("<url>"),
        redis=RedisConfig(url=addresses.redis_url(url, "redis.url", "")),
        namespace=names.queue_or_namespace(namespace, "namespace", ""),
    )
