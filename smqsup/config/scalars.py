"""The validators of queues.yaml's plain values: counts and multipliers,
booleans and choices, durations, sizes and rates, each with its bounds.

Each takes (value, key path, file path) and returns the value coerced (a
duration in seconds, a size in bytes, a rate in starts per second), or raises
the one-line ConfigError naming file, key and value (config.problems).
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from smqsup import defaults
from smqsup.config.env import EnvStr
from smqsup.config.problems import Validator, error

#: Longest duration anywhere in the file, in seconds (365 days), dedup_ttl excepted.
DURATION_MAX_S = 365 * 86400.0
#: Longest time a message may wait or live, or a dedup key be kept, in seconds
#: (3650 days: ten years, whatever a queue is kept for, stays far below it).
LONG_DURATION_MAX_S = 3650 * 86400.0
#: Largest size anywhere in the file, in bytes (1 TiB).
SIZE_MAX_BYTES = 1024**4
#: retry_backoff: past it the delay reaches retry_delay_max in a few attempts anyway.
_RETRY_BACKOFF_MAX = 100
#: heartbeat_interval, in seconds: below the minimum it only costs Redis calls.
_HEARTBEAT_INTERVAL_MIN_S = 0.01
_HEARTBEAT_INTERVAL_MAX_S = 3600.0
#: heartbeat_timeout, in seconds: a dead consumer's messages wait this long.
_HEARTBEAT_TIMEOUT_MAX_S = 86400.0
#: Redis refuses a string larger than this (proto-max-bulk-len), in bytes.
REDIS_STRING_MAX_BYTES = 512 * 1024**2


def _as_number(value: object, kind: type[int | float]) -> int | float | None:
    """``value`` as an int or finite float; strings only when they came from ${ENV}."""
    if isinstance(value, EnvStr):
        try:
            value = kind(value.strip())
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if kind is int and not isinstance(value, int):
        return None
    # math.isfinite() of an int past 1e308 raises OverflowError; an int is finite.
    return None if isinstance(value, float) and not math.isfinite(value) else value


def int_range(low: int, high: int, why: str = "") -> Validator[int]:
    """A validator of ints from ``low`` (0 or 1) to ``high``; ``why`` explains the bound."""
    kind = "a positive integer" if low == 1 else f"an integer >= {low}"

    def validate(value: object, key: str, path: str) -> int:
        number = _as_number(value, int)
        if not isinstance(number, int) or number < low:
            raise error(f"expected {kind}", value, path=path, key=key)
        if number > high:
            raise error(f"must be at most {high}{why}", value, path=path, key=key)
        return number

    return validate


def multiplier(value: object, key: str, path: str) -> float:
    number = _as_number(value, float)
    if number is None or number < 1.0:
        raise error("expected a multiplier >= 1.0", value, path=path, key=key)
    if number > _RETRY_BACKOFF_MAX:
        raise error(f"must be at most {_RETRY_BACKOFF_MAX}", value, path=path, key=key)
    return float(number)


def boolean(value: object, key: str, path: str) -> bool:
    if isinstance(value, EnvStr) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise error("expected true or false", value, path=path, key=key)
    return value


def tracing(value: object, key: str, path: str) -> bool:
    """``tracing``: a boolean; true only where OpenTelemetry's API is installed."""
    on = boolean(value, key, path)
    if on and not otel_installed():
        raise error("tracing needs OpenTelemetry: pip install 'smqsup[otel]'", value, path=path, key=key)
    return on


def otel_installed() -> bool:
    """Whether ``opentelemetry.trace`` can be imported (not importing it)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def choice(options: tuple[str, ...]) -> Validator[str]:
    def validate(value: object, key: str, path: str) -> str:
        if value not in options:
            raise error(f"expected one of {', '.join(options)}", value, path=path, key=key)
        return str(value)

    return validate


_QUANTITY = re.compile(r"\s*([-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))\s*([A-Za-z]*)\s*")
_DURATION_UNITS_S = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE_UNITS_BYTES = {"": 1, "b": 1} | {
    prefix + suffix: 1024 ** (power + 1)
    for power, prefix in enumerate("kmgt")
    for suffix in ("", "b", "ib")
}


def _quantity(value: object, units: Mapping[str, float]) -> float | None:
    """A number, or a string of a number and one of ``units`` (case-insensitive)."""
    if not isinstance(value, str):
        return _as_number(value, float)
    match = _QUANTITY.fullmatch(value)
    if match is None or match[2].lower() not in units:
        return None
    return float(match[1]) * units[match[2].lower()]


@dataclass(frozen=True)
class _Measure:
    """A kind of quantity: its units and bound, and the words its errors use."""

    kind: str
    units: Mapping[str, float]
    examples: str
    most: float
    most_text: str


_DURATION = _Measure("duration", _DURATION_UNITS_S, "500ms, 5s, 2m or 1h", DURATION_MAX_S, "365d")
_LONG_DURATION = _Measure("duration", _DURATION_UNITS_S, "500ms, 5s, 2m or 1h", LONG_DURATION_MAX_S, "3650d")
_SIZE = _Measure("size", _SIZE_UNITS_BYTES, "100B, 64KB, 512MB or 1GB", SIZE_MAX_BYTES, "1TB")


def _measured(amount: float | None, measure: _Measure, value: object, key: str, path: str) -> float:
    """``amount`` (what ``value`` came to, None when it is no quantity) if it is
    from 0 to the measure's bound; the error naming the measure otherwise."""
    if amount is None:
        raise error(f"expected a {measure.kind} like {measure.examples}", value, path=path, key=key)
    if amount < 0:
        raise error(f"a {measure.kind} must not be negative", value, path=path, key=key)
    if amount > measure.most:
        raise error(f"a {measure.kind} must be at most {measure.most_text}", value, path=path, key=key)
    return amount


def parse_duration(value: object, key: str = "", path: str = "") -> float:
    """Seconds from ``30``, ``1.5``, ``"500ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"``."""
    return _measured(_quantity(value, _DURATION.units), _DURATION, value, key, path)


def wait_timeout(value: object, key: str = "", path: str = "") -> float:
    """How long a write waits for its replicas: a duration from 1 ms to
    defaults.WAIT_TIMEOUT_MAX_S (WAIT's 0, wait for ever, is not offered)."""
    seconds = parse_duration(value, key, path)
    if not 0.001 <= seconds <= defaults.WAIT_TIMEOUT_MAX_S:
        raise error(f"expected a duration from 1ms to {defaults.WAIT_TIMEOUT_MAX_S:g}s", value, path=path, key=key)
    return seconds


def duration_range(low_s: float, high_s: float, low_text: str, high_text: str) -> Validator[float]:
    """A validator of durations from ``low_s`` to ``high_s`` seconds, which its error names as the texts say."""

    def validate(value: object, key: str, path: str) -> float:
        seconds = parse_duration(value, key, path)
        if not low_s <= seconds <= high_s:
            raise error(f"expected a duration from {low_text} to {high_text}", value, path=path, key=key)
        return seconds

    return validate


def long_duration(value: object, key: str = "", path: str = "") -> float:
    """Seconds, as parse_duration reads them, up to 3650d: a message's delay or
    time to live, or how long its dedup key is kept."""
    return _measured(_quantity(value, _LONG_DURATION.units), _LONG_DURATION, value, key, path)


def positive_long_duration(value: object, key: str = "", path: str = "") -> float:
    """A long_duration greater than 0 (``dedup_ttl``, a message's ``ttl``)."""
    seconds = long_duration(value, key, path)
    if seconds <= 0:
        raise error("expected a duration greater than 0", value, path=path, key=key)
    return seconds


def result_ttl(value: object, key: str = "", path: str = "") -> int:
    """How long a tracked message's outcome is kept after it ended: a
    duration from 0 (not tracked) to defaults.RESULT_TTL_MAX_S, rounded up
    to whole seconds (what a frame's head holds)."""
    seconds = long_duration(value, key, path)
    if seconds > defaults.RESULT_TTL_MAX_S:
        raise error(f"expected a duration from 0 to {defaults.RESULT_TTL_MAX_S}s", value, path=path, key=key)
    return math.ceil(seconds)


#: rate_limit's periods, in seconds.
_RATE_PERIODS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0, "d": 86400.0,
                 "day": 86400.0}
_RATE = re.compile(r"\s*([0-9]{1,9}(?:\.[0-9]{1,6})?)\s*/\s*([a-z]{1,4})\s*")
#: The bounds of a rate limit, in starts per second: 1 a day to a million a second.
RATE_MIN_PER_S = 1 / 86400
RATE_MAX_PER_S = 1_000_000.0


def rate_limit(value: object, key: str = "", path: str = "") -> float:
    """Handler starts per second from ``"100/s"`` (or ``/sec``), ``"5/m"``
    (``/min``), ``"1000/h"`` (``/hour``), ``"1/d"`` (``/day``): a positive
    number of at most 9 digits (and 6 decimals) per period, from one a day
    to a million a second."""
    match = _RATE.fullmatch(value.lower()) if isinstance(value, str) else None
    if match is None or match[2] not in _RATE_PERIODS:
        raise error("expected a rate like 100/s, 30/m, 1000/h or 1/d", value, path=path, key=key)
    per_s = float(match[1]) / _RATE_PERIODS[match[2]]
    if not RATE_MIN_PER_S <= per_s <= RATE_MAX_PER_S:
        raise error("a rate must be from 1 a day to 1000000/s", value, path=path, key=key)
    return per_s


def parse_size(value: object, key: str = "", path: str = "") -> int:
    """Bytes from ``1024``, ``"100B"``, ``"64KB"``, ``"1MiB"``, ``"512MB"``, ``"1GB"``.

    Units are binary whatever their spelling: K, KB and KiB all mean 1024. A
    YAML float (``1.5``) is refused; ``"1.5KB"`` is 1536.
    """
    size = None if isinstance(value, float) else _quantity(value, _SIZE.units)
    return int(_measured(size, _SIZE, value, key, path))


def _positive_duration(value: object, key: str, path: str) -> float:
    seconds = parse_duration(value, key, path)
    if seconds <= 0:
        raise error("expected a duration greater than 0", value, path=path, key=key)
    return seconds


def heartbeat_interval(value: object, key: str, path: str) -> float:
    seconds = _positive_duration(value, key, path)
    if not _HEARTBEAT_INTERVAL_MIN_S <= seconds <= _HEARTBEAT_INTERVAL_MAX_S:
        raise error("expected a duration from 10ms to 1h", value, path=path, key=key)
    return seconds


def heartbeat_timeout(value: object, key: str, path: str) -> float:
    seconds = parse_duration(value, key, path)
    if seconds > _HEARTBEAT_TIMEOUT_MAX_S:
        raise error("must be at most 1d", value, path=path, key=key)
    return seconds


def message_size(value: object, key: str, path: str) -> int:
    size = parse_size(value, key, path)
    if not 1 <= size <= REDIS_STRING_MAX_BYTES:
        raise error("expected a size from 1B to 512MB (Redis' largest string)", value,
                    path=path, key=key)
    return size
