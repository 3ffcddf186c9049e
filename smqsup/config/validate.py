"""The validators of queues.yaml's values: each takes (value, key path, file
path) and returns the value coerced, or raises the one-line ConfigError that
names the file, the key and the bad value.

Also here: the error builder every config error goes through, ``${VAR}``
expansion (a value from the environment may spell a number or a boolean),
and the listen-address rule the config and ``smqsup web --listen`` share.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import SplitResult, urlsplit

from smqsup import defaults, safe
from smqsup.errors import ConfigError, HandlerImportError

# --- bounds ------------------------------------------------------------------

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
#: Longest bad value or key an error shows, in characters (integers longer
#: than this are shown by their number of digits).
_SHOWN_CHARS = 80


_T = TypeVar("_T")
#: A validator takes (value, key path, file path) and returns the coerced value.
Validator = Callable[[object, str, str], _T]

#: Marks an absent key (None is YAML's null, which is a value).
MISSING: Any = object()

_URL_SCHEMES = ("redis", "rediss", "unix", "sentinel", "redis+cluster", "rediss+cluster")
#: Redis refuses a string larger than this (proto-max-bulk-len), in bytes.
REDIS_STRING_MAX_BYTES = 512 * 1024**2


# --- errors ------------------------------------------------------------------


def show(value: object) -> str:
    """A short printable form of a bad value (containers by kind, not content)."""
    if isinstance(value, (dict, list)) and value:
        return "a mapping" if isinstance(value, dict) else "a list"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # repr() of an int past 4300 digits raises ValueError: count without it.
        digits = int(value.bit_length() * math.log10(2))
        while 10**digits <= abs(value):
            digits += 1
        if digits > _SHOWN_CHARS:
            return f"an integer of {digits} digits"
    text = repr(str(value)) if isinstance(value, str) else repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def key_text(name: object) -> str:
    """A key as a key path shows it: one short line, whatever YAML made of it."""
    shown = show(name) if isinstance(name, int) else ""
    return f"<{shown}>" if shown.startswith("an integer of ") else safe.escape(name, _SHOWN_CHARS)


def error(
    problem: str,
    value: object = MISSING,
    *,
    path: str = "",
    key: str = "",
    cls: type[ConfigError] = ConfigError,
) -> ConfigError:
    """The one-line error ``path: key: problem, got value`` (empty parts left out)."""
    if value is not MISSING:
        problem = f"{problem}, got {show(value)}"
    text = ": ".join(part for part in (path, key, problem) if part)
    # Exception texts quoted in a problem may span lines; the error never does,
    # nor does it carry a control character, a bidi override or a lone surrogate.
    return cls(safe.escape(re.sub(r"\s*[\r\n]+\s*", " ", text)), path=path, key=key)


def join_key(key: str, name: object) -> str:
    return f"{key}.{key_text(name)}" if key else key_text(name)


# --- ${ENV} expansion ----------------------------------------------------------


class EnvStr(str):
    """A string that ${VAR} expansion produced: it may spell a number or a boolean."""


_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ENV_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_ENV_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)


def expand_env(value: object, key: str, path: str) -> object:
    """``value`` with ${VAR} / ${VAR:-default} replaced; non-strings unchanged."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        if match[0] == "$${":
            return "${"
        if match[1] is None:
            raise error("unterminated '${'", value, path=path, key=key)
        body = _ENV_BODY.fullmatch(match[1])
        if body is None:
            raise error(f"invalid variable reference {match[0]!r}", value, path=path, key=key)
        name, fallback = body[1], body[2]
        current = os.environ.get(name)
        if fallback is not None and not current:
            return fallback
        if current is None:
            problem = f"environment variable {name} is not set (give a default: ${{{name}:-...}})"
            raise error(problem, value, path=path, key=key)
        return current

    return EnvStr(_ENV_REF.sub(substitute, value))


def storable(value: object, key: str, path: str) -> object:
    """``value``, unless it is a string no file, log or Redis can hold.

    YAML's ``"\\ud800"`` escape and environment values that were not UTF-8
    (surrogate-escaped bytes) make lone surrogates: encoding one raises later,
    far from the config (a data_dir with one fails the supervisor's start).
    """
    if isinstance(value, str) and _SURROGATE.search(value):
        raise error("not UTF-8 text (it holds a lone surrogate)", value, path=path, key=key)
    return value


# --- scalar validators ------------------------------------------------------------


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


def _string(value: object, key: str, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise error("expected a non-empty string", value, path=path, key=key)
    return value


def queue_or_namespace(value: object, key: str, path: str) -> str:
    """A queue name or namespace: 1..128 of [A-Za-z0-9_.-], not ``.`` or ``..``."""
    if not isinstance(value, str):
        raise error("expected a name string (quote it)", value, path=path, key=key)
    if re.search(r"[{}]", value):
        problem = "a name must not contain '{' or '}' (they delimit Redis hash tags)"
    elif ":" in value:
        problem = "a name must not contain ':' (it separates Redis key parts)"
    elif not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", value):
        problem = "a name is 1 to 128 characters of A-Z a-z 0-9 _ . -"
    elif value in (".", ".."):
        # A browser resolves them as path segments: /queues/../dead is /dead.
        problem = "a name must not be '.' or '..' (the web UI's paths could not reach it)"
    else:
        return value
    raise error(problem, value, path=path, key=key)


def validate_queue_name(name: object, *, path: str = "", key: str = "") -> str:
    """``name`` if it is a valid queue name, else ConfigError (for config and producer)."""
    return queue_or_namespace(name, key, path)


# --- redis and web validators --------------------------------------------------------


def redis_url(value: object, key: str, path: str) -> str:
    """A redis://, rediss://, unix://, sentinel://, redis+cluster:// or
    rediss+cluster:// url (its password never shown)."""
    url = _string(value, key, path)
    shown = re.sub(r"//[^/?#]*@", "//***@", url)  # the userinfo ends at the last '@'
    shown = safe.mask_url(shown)  # password= in the query
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed '[' of an IPv6 host
        raise error(f"invalid url ({exc})", shown, path=path, key=key) from None
    if parts.scheme not in _URL_SCHEMES:
        problem = f"unsupported url scheme {parts.scheme!r} (expected {', '.join(_URL_SCHEMES)})"
        raise error(problem, shown, path=path, key=key)
    if parts.scheme == "unix" and not parts.path:
        raise error("a unix:// url needs a socket path", shown, path=path, key=key)
    if parts.scheme in ("redis", "rediss"):
        try:
            port_ok = parts.port != 0
        except ValueError:  # not a number, or out of 0..65535
            port_ok = False
        if not port_ok:
            raise error("invalid port in url", shown, path=path, key=key)
        if not parts.hostname:
            raise error("the url has no host", shown, path=path, key=key)
        try:  # as connecting does first: else a UnicodeError there, not a connection error
            parts.hostname.encode("idna")
        except UnicodeError:
            raise error("invalid host name in url", shown, path=path, key=key) from None
    if parts.scheme == "sentinel" and not parts.netloc:
        raise error("a sentinel:// url needs the sentinels' host:port", shown, path=path, key=key)
    if parts.scheme.endswith("+cluster"):
        _cluster_seeds(parts, shown, key, path)
    return url


def _cluster_seeds(parts: SplitResult, shown: str, key: str, path: str) -> None:
    """The seed nodes of a cluster url: host:port[,host:port...], database 0."""
    hosts = parts.netloc.rpartition("@")[2]
    if not hosts:
        raise error("a cluster url needs its seed nodes' host:port", shown, path=path, key=key)
    for item in hosts.split(","):
        try:
            host_port(item)
        except ValueError as exc:
            raise error(f"bad seed node ({exc})", shown, path=path, key=key) from None
    if parts.path.strip("/") not in ("", "0"):
        raise error("a cluster has only database 0", shown, path=path, key=key)


def host_port(item: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (port default 6379)."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"bad port in {item!r}")
    if not host or any(c in host for c in " /?#@[]"):
        raise ValueError(f"no host in {item!r}")
    host.encode("idna")  # UnicodeError (a ValueError) for a name no resolver takes
    return host, int(port) if port else 6379


def data_dir(value: object, key: str, path: str) -> Path:
    """A directory; relative to the config file's directory when relative."""
    directory = Path(_string(value, key, path)).expanduser()
    return Path(os.path.abspath(Path(path).parent / directory))


#: ``HOST:PORT`` or ``[IPV6]:PORT`` (the port's range is checked apart).
_LISTEN = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s\[\]:/]+):([0-9]{1,5})")


def parse_listen(value: object, key: str = "web.listen", path: str = "", *,
                 any_port: bool = False) -> tuple[str, int]:
    """``(host, port)`` of a listen address, the host without brackets; ConfigError otherwise.

    The one rule for a listen address, wherever it is given: ``HOST:PORT``
    with HOST a name or an IPv4 address, or ``[IPV6]:PORT``; the port from 1
    to 65535. ``any_port`` also takes port 0, any free port, as ``smqsup web
    --listen`` does (it prints the port it bound; the tests start it so).
    queues.yaml's ``web.listen`` does not: the supervisor restarts its web
    child, and the UI it runs keeps one address across restarts.
    """
    match = _LISTEN.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise error("expected host:port (IPv6 in brackets: [::1]:8087)", value, path=path, key=key)
    host, port, lowest = match[1], int(match[2]), 0 if any_port else 1
    if host.startswith("["):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise error("invalid IPv6 address", value, path=path, key=key) from None
    else:
        # What binding does first: a name IDNA cannot encode (a label over 63
        # characters, an empty one, a lone surrogate from undecodable argv
        # bytes) would fail there with a UnicodeError, not an OSError.
        try:
            host.encode("idna")
        except UnicodeError:
            raise error("invalid host name", value, path=path, key=key) from None
    if not lowest <= port <= 65535:
        raise error(f"expected a port from {lowest} to 65535", value, path=path, key=key)
    return host, port


def listen(value: object, key: str, path: str) -> str:
    """queues.yaml's ``web.listen``: an address parse_listen takes, port 0 excepted."""
    parse_listen(value, key, path)
    return str(value)


def is_loopback(host: str) -> bool:
    """True for ``localhost``, the names under it (RFC 6761) and the loopback
    addresses (127.0.0.0/8, ::1), in any case, brackets or not.

    The one rule for where the web UI may listen without a token (config and
    ``smqsup web`` alike) and which Host headers it answers without one.
    """
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token(value: object, key: str, path: str) -> str | None:
    """A secret: an error about it never shows it. Empty means no token."""
    if not isinstance(value, str):
        raise error(f"expected a string, got a value of type {type(value).__name__}",
                    path=path, key=key)
    return value or None


# --- handlers ------------------------------------------------------------------------------

_SPEC = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def handler_spec(value: object, key: str, path: str) -> str:
    """A well-formed ``module:function`` (or ``module:obj.attr``), not imported."""
    match = _SPEC.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        missing_colon = isinstance(value, str) and ":" not in value
        problem = "expected 'module:function'" + (" (no ':' found)" if missing_colon else "")
        raise error(problem, value, path=path, key=key, cls=HandlerImportError)
    return match[0]
