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
  queue and 1024 in all queues (an autoscaled queue, ``consumers: {min: 1,
  max: 8}``, counts its max), durations 365d (heartbeat_interval 10ms to
  1h, heartbeat_timeout 1d, dedup_ttl 3650d, scale_up_lag 100ms to 1h,
  scale_down_after 1s to 1d, scale_cooldown 100ms to 10m), sizes 1TB,
  retry_threshold 1,000,000, max_messages 10**9, retry_backoff 100,
  concurrency 1000, prefetch 1000, rate_limit 1 a day to 1000000/s,
  rate_burst 100000, scale_up_backlog 1,000,000. The file itself is at
  most 256KiB, 20 levels deep and 25,000 YAML nodes, so that no file, however
  built, can stall or crash a supervisor re-reading it on SIGHUP.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from smqsup import defaults, logs, safe
from smqsup.config import addresses, names, queue, scalars, schedule, yamlfile
from smqsup.config.mappings import get, mapping
from smqsup.config.problems import MISSING, error, join_key

# QueueConfig and the bounds of a queue's numbers live in queue.py; they are
# re-exported here, where every reader of the config has always found them.
from smqsup.config.queue import (
    CONCURRENCY_MAX,
    CONSUMERS_PER_QUEUE_MAX,
    CONSUMERS_TOTAL_MAX,
    PARTITIONS_MAX,
    PREFETCH_MAX,
    RATE_BURST_MAX,
    QueueConfig,
)

__all__ = [
    "CONCURRENCY_MAX", "CONSUMERS_PER_QUEUE_MAX", "CONSUMERS_TOTAL_MAX", "PARTITIONS_MAX", "PREFETCH_MAX",
    "RATE_BURST_MAX", "Config", "QueueConfig", "RedisConfig", "WebConfig", "from_url", "load", "loads",
]


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
    #: How the supervisor and its children log: "text" or "json" (logs.py;
    #: --log-format wins). Read at start.
    log_format: str = "text"


_TOP_KEYS = (
    "redis", "namespace", "max_message_size", "heartbeat_interval",
    "heartbeat_timeout", "shutdown_timeout", "preload", "stats", "defaults", "queues", "web",
    "schedules", "log_format",
)
_REDIS_KEYS = ("url", "data_dir", "appendfsync", "wait_replicas", "wait_timeout")
_WEB_KEYS = ("listen", "token")
_APPENDFSYNC = ("always", "everysec", "no")


# --- sections -------------------------------------------------------------------------


def _redis(value: object, path: str) -> RedisConfig:
    raw = mapping(value, "redis", path, _REDIS_KEYS)
    if raw.get("url") == "":  # url: ${REDIS_URL:-} switches to the embedded server
        del raw["url"]
    return RedisConfig(
        url=get(raw, "url", "redis", path, addresses.redis_url, None),
        data_dir=get(raw, "data_dir", "redis", path, addresses.data_dir, None),
        appendfsync=get(raw, "appendfsync", "redis", path, scalars.choice(_APPENDFSYNC),
                         defaults.APPENDFSYNC),
        wait_replicas=get(raw, "wait_replicas", "redis", path,
                           scalars.int_range(0, defaults.WAIT_REPLICAS_MAX), 0),
        wait_timeout_s=get(raw, "wait_timeout", "redis", path, scalars.wait_timeout, defaults.WAIT_TIMEOUT_S),
    )


def _web(value: object, path: str) -> WebConfig | None:
    if value is MISSING:
        return None
    raw = mapping(value, "web", path, _WEB_KEYS)
    listen = get(raw, "listen", "web", path, addresses.listen, defaults.WEB_LISTEN)
    token = get(raw, "token", "web", path, addresses.token, None)
    if token is None and not addresses.is_loopback(addresses.parse_listen(listen)[0]):
        raise error(f"required when web.listen ({listen}) is not a loopback address",
                    path=path, key="web.token")
    return WebConfig(listen=listen, token=token)


def _config(data: object, path: str) -> Config:
    if data is None:
        raise error("the file is empty (expected a mapping with a 'queues' key)", path=path)
    if not isinstance(data, dict):
        raise error("expected a mapping at the top level", data, path=path)
    raw = mapping(data, "", path, _TOP_KEYS)
    interval_s = get(raw, "heartbeat_interval", "", path, scalars.heartbeat_interval,
                      defaults.HEARTBEAT_INTERVAL_S)
    timeout_s = get(raw, "heartbeat_timeout", "", path, scalars.heartbeat_timeout,
                     defaults.HEARTBEAT_TIMEOUT_S)
    if timeout_s <= interval_s:
        raise error(f"must be greater than heartbeat_interval ({interval_s:g}s)",
                    raw.get("heartbeat_timeout", timeout_s), path=path, key="heartbeat_timeout")
    queues = queue.section(raw.get("queues", MISSING), queue.defaults_section(raw.get("defaults"), path), path)
    return _schedules_fit(Config(
        path=Path(path),
        redis=_redis(raw.get("redis"), path),
        namespace=get(raw, "namespace", "", path, names.queue_or_namespace, defaults.NAMESPACE),
        max_message_size_bytes=get(raw, "max_message_size", "", path, scalars.message_size,
                                    defaults.MAX_MESSAGE_SIZE_BYTES),
        heartbeat_interval_s=interval_s,
        heartbeat_timeout_s=timeout_s,
        shutdown_timeout_s=get(raw, "shutdown_timeout", "", path, scalars.parse_duration,
                                defaults.SHUTDOWN_TIMEOUT_S),
        preload=get(raw, "preload", "", path, scalars.boolean, False),
        stats=get(raw, "stats", "", path, scalars.boolean, True),
        queues=queues,
        web=_web(raw.get("web", MISSING), path),
        schedules=schedule.section(raw.get("schedules"), queues, path),
        log_format=get(raw, "log_format", "", path, scalars.choice(logs.FORMATS), "text"),
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
