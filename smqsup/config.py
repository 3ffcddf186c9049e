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
  1h, heartbeat_timeout 1d), sizes 1TB, retry_threshold 1,000,000,
  max_messages 10**9, retry_backoff 100. The file itself is at most 256KiB,
  20 levels deep and 25,000 YAML nodes, so that no file, however built, can
  stall or crash a supervisor re-reading it on SIGHUP.
"""

from __future__ import annotations

import difflib
import errno
import importlib
import ipaddress
import math
import os
import re
import stat
from collections.abc import Callable, Collection, Hashable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import urlsplit

# types-PyYAML is optional: without it yaml is Any, with it the ignore is unused.
import yaml  # type: ignore[import-untyped, unused-ignore]

from smqsup import defaults, safe
from smqsup.errors import ConfigError, HandlerImportError


@dataclass(frozen=True)
class RedisConfig:
    """Where Redis is. ``url`` None means: run an embedded redis-server."""

    url: str | None = None
    #: Data directory of the embedded server (AOF, socket, pid file).
    data_dir: Path | None = None
    #: appendfsync of the embedded server: always, everysec or no.
    appendfsync: str = defaults.APPENDFSYNC

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


# --- bounds: every number in the file has one -----------------------------------

#: Consumers of one queue. The supervisor's slot table (4096 children) holds
#: four times CONSUMERS_TOTAL_MAX: room for a reload where draining children,
#: rolled ones and their replacements overlap.
CONSUMERS_PER_QUEUE_MAX = 1000
#: Consumers of all queues together.
CONSUMERS_TOTAL_MAX = 1024
#: Longest duration anywhere in the file, in seconds (365 days).
DURATION_MAX_S = 365 * 86400.0
#: Largest size anywhere in the file, in bytes (1 TiB).
SIZE_MAX_BYTES = 1024**4
#: Attempt counts travel in the frame prefix (``<attempts>|``, at most 9
#: digits): the threshold stays far below 10**9.
_RETRY_THRESHOLD_MAX = 1_000_000
#: Messages a consumer handles before it is replaced.
_MAX_MESSAGES_MAX = 1_000_000_000
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
_MISSING: Any = object()

_TOP_KEYS = (
    "redis", "namespace", "max_message_size", "heartbeat_interval",
    "heartbeat_timeout", "shutdown_timeout", "preload", "stats", "defaults", "queues", "web",
)
_REDIS_KEYS = ("url", "data_dir", "appendfsync")
_WEB_KEYS = ("listen", "token")
_URL_SCHEMES = ("redis", "rediss", "unix", "sentinel")
_APPENDFSYNC = ("always", "everysec", "no")
#: Redis refuses a string larger than this (proto-max-bulk-len), in bytes.
REDIS_STRING_MAX_BYTES = 512 * 1024**2
#: Largest queues.yaml read, in bytes: a real one is a few kilobytes (1,024
#: queues with every option spelled out take about 230 KiB). PyYAML parses
#: in pure Python, about a second per 300 KiB of newlines: this and the node
#: bound below keep what a SIGHUP may stall the supervisor's loop to about a
#: second, well inside any heartbeat_timeout.
_FILE_MAX_BYTES = 256 * 1024
_FILE_TOO_LARGE = "larger than 256KiB (a queues.yaml is a few kilobytes)"
#: Deepest nesting of YAML nodes (a queues.yaml needs 4: file, queues, queue,
#: value). Also bounds chains of merge keys. PyYAML composes recursively, so
#: without it a 5,000-deep ``[[[...]]]`` is a RecursionError.
_MAX_YAML_DEPTH = 20
#: Most YAML nodes in a file, and most mapping entries built once merge keys
#: (``<<``) are expanded. 1,024 queues with every option spelled out take
#: about 20,500 nodes.
_MAX_YAML_NODES = 25_000


# --- errors ------------------------------------------------------------------


def _show(value: object) -> str:
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


def _key_text(name: object) -> str:
    """A key as a key path shows it: one short line, whatever YAML made of it."""
    shown = _show(name) if isinstance(name, int) else ""
    return f"<{shown}>" if shown.startswith("an integer of ") else safe.escape(name, _SHOWN_CHARS)


def _error(
    problem: str,
    value: object = _MISSING,
    *,
    path: str = "",
    key: str = "",
    cls: type[ConfigError] = ConfigError,
) -> ConfigError:
    """The one-line error ``path: key: problem, got value`` (empty parts left out)."""
    if value is not _MISSING:
        problem = f"{problem}, got {_show(value)}"
    text = ": ".join(part for part in (path, key, problem) if part)
    # Exception texts quoted in a problem may span lines; the error never does,
    # nor does it carry a control character, a bidi override or a lone surrogate.
    return cls(safe.escape(re.sub(r"\s*[\r\n]+\s*", " ", text)), path=path, key=key)


def _join(key: str, name: object) -> str:
    return f"{key}.{_key_text(name)}" if key else _key_text(name)


# --- YAML --------------------------------------------------------------------


class _Loader(yaml.SafeLoader):  # type: ignore[misc, unused-ignore]
    """SafeLoader with YAML 1.2 booleans that refuses duplicate keys, and
    bounds depth, size and merge-key expansion so any text fails in one line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._merge_depth = 0
        self._nodes = 0
        self._entries = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        self._nodes += 1
        if self._nodes > _MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {_MAX_YAML_NODES} YAML nodes (not a queues.yaml)",
                self.peek_event().start_mark)  # type: ignore[no-untyped-call, unused-ignore]
        if self._depth >= _MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {_MAX_YAML_DEPTH} levels",
                self.peek_event().start_mark)  # type: ignore[no-untyped-call, unused-ignore]
        self._depth += 1
        try:
            node: yaml.Node = super().compose_node(parent, index)  # type: ignore[arg-type, assignment, unused-ignore]
            return node
        finally:
            self._depth -= 1

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # Merging copies the source's entries: '<<: [*a, *a, ...]' or a chain of
        # mappings each merging the previous one builds far more entries than
        # the file has nodes. PyYAML flattens merge sources recursively.
        if self._merge_depth >= _MAX_YAML_DEPTH:
            raise yaml.constructor.ConstructorError(
                None, None, f"merge keys (<<) chained more than {_MAX_YAML_DEPTH} deep", node.start_mark)
        self._merge_depth += 1
        try:
            super().flatten_mapping(node)
        finally:
            self._merge_depth -= 1
        self._entries += len(node.value)
        if self._entries > _MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"more than {_MAX_YAML_NODES} mapping entries once merge keys (<<) are expanded",
                node.start_mark)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's object for ``node``; a scalar it fails to build (``2001-02-30``,
        ``!!int foo``, an int of more than 4300 digits) is a YAML error at its mark."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            kind = str(node.tag).rsplit(":", 1)[-1]
            # Python's own hint ('use sys.set_int_max_str_digits()') is not for users.
            reason = str(exc).split(";")[0] if isinstance(exc, ValueError) else ""
            problem = f"invalid {kind} {_show(node.value)}" + (f": {reason}" if reason else "")
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None

    def construct_mapping(
        self, node: yaml.MappingNode, deep: bool = False
    ) -> dict[Hashable, Any]:
        # Checked before the merge keys (<<) are flattened in: a key that
        # overrides a merged one is intended, a key written twice is not.
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and not key_node.tag.endswith(":merge"):
                if (key_node.tag, key_node.value) in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add((key_node.tag, key_node.value))
        mapping: dict[Hashable, Any] = super().construct_mapping(node, deep)
        return mapping


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _parse_yaml(text: str, path: str) -> object:
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        raise _error(f"invalid YAML{_where(exc.problem_mark)}: {_yaml_problem(exc)}",
                     path=path) from None
    except yaml.YAMLError as exc:
        raise _error(f"invalid YAML: {exc}", path=path) from None


def _where(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}:{mark.column + 1}" if mark else ""


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's problem, with where the construct it was reading began."""
    problem = exc.problem or exc.context or "unreadable"
    if exc.problem and exc.context:
        problem += f" ({exc.context}{_where(exc.context_mark).replace(' at', ' started at')})"
    return str(problem)


# --- ${ENV} expansion ----------------------------------------------------------


class _EnvStr(str):
    """A string that ${VAR} expansion produced: it may spell a number or a boolean."""


_SURROGATE = re.compile(r"[\ud800-\udfff]")
_ENV_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_ENV_BODY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)


def _expand(value: object, key: str, path: str) -> object:
    """``value`` with ${VAR} / ${VAR:-default} replaced; non-strings unchanged."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        if match[0] == "$${":
            return "${"
        if match[1] is None:
            raise _error("unterminated '${'", value, path=path, key=key)
        body = _ENV_BODY.fullmatch(match[1])
        if body is None:
            raise _error(f"invalid variable reference {match[0]!r}", value, path=path, key=key)
        name, fallback = body[1], body[2]
        current = os.environ.get(name)
        if fallback is not None and not current:
            return fallback
        if current is None:
            problem = f"environment variable {name} is not set (give a default: ${{{name}:-...}})"
            raise _error(problem, value, path=path, key=key)
        return current

    return _EnvStr(_ENV_REF.sub(substitute, value))


# --- mappings and keys ----------------------------------------------------------


def _mapping(value: object, key: str, path: str, allowed: Collection[str]) -> dict[str, object]:
    """A mapping with only ``allowed`` keys, its string values env-expanded."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error("expected a mapping", value, path=path, key=key)
    for name in value:
        if not isinstance(name, str) or name not in allowed:
            raise _unknown_key(name, key, path, allowed)
    expanded: dict[str, object] = {}
    for name, item in value.items():
        where = _join(key, name)
        expanded[name] = _text(_expand(item, where, path), where, path)
    return expanded


def _text(value: object, key: str, path: str) -> object:
    """``value``, unless it is a string no file, log or Redis can hold.

    YAML's ``"\\ud800"`` escape and environment values that were not UTF-8
    (surrogate-escaped bytes) make lone surrogates: encoding one raises later,
    far from the config (a data_dir with one fails the supervisor's start).
    """
    if isinstance(value, str) and _SURROGATE.search(value):
        raise _error("not UTF-8 text (it holds a lone surrogate)", value, path=path, key=key)
    return value


def _unknown_key(name: object, key: str, path: str, allowed: Collection[str]) -> ConfigError:
    close = difflib.get_close_matches(_key_text(name), list(allowed), n=1)
    if close:
        problem = f"unknown key, did you mean {close[0]!r}?"
    else:
        problem = f"unknown key (expected one of: {', '.join(allowed)})"
    return _error(problem, path=path, key=_join(key, name))


def _get(
    raw: Mapping[str, object], name: str, key: str, path: str,
    validate: Validator[_T], default: _T,
) -> _T:
    """``raw[name]`` validated, or ``default`` when the key is absent."""
    if name not in raw:
        return default
    return _required(raw[name], _join(key, name), path, validate)


def _required(value: object, key: str, path: str, validate: Validator[_T]) -> _T:
    if value is None:
        raise _error("a value is required", value, path=path, key=key)
    return validate(value, key, path)


# --- scalar validators ------------------------------------------------------------


def _as_number(value: object, kind: type[int | float]) -> int | float | None:
    """``value`` as an int or finite float; strings only when they came from ${ENV}."""
    if isinstance(value, _EnvStr):
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


def _int_range(low: int, high: int, why: str = "") -> Validator[int]:
    """A validator of ints from ``low`` (0 or 1) to ``high``; ``why`` explains the bound."""
    kind = "a positive integer" if low == 1 else f"an integer >= {low}"

    def validate(value: object, key: str, path: str) -> int:
        number = _as_number(value, int)
        if not isinstance(number, int) or number < low:
            raise _error(f"expected {kind}", value, path=path, key=key)
        if number > high:
            raise _error(f"must be at most {high}{why}", value, path=path, key=key)
        return number

    return validate


def _multiplier(value: object, key: str, path: str) -> float:
    number = _as_number(value, float)
    if number is None or number < 1.0:
        raise _error("expected a multiplier >= 1.0", value, path=path, key=key)
    if number > _RETRY_BACKOFF_MAX:
        raise _error(f"must be at most {_RETRY_BACKOFF_MAX}", value, path=path, key=key)
    return float(number)


def _bool(value: object, key: str, path: str) -> bool:
    if isinstance(value, _EnvStr) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise _error("expected true or false", value, path=path, key=key)
    return value


def _choice(options: tuple[str, ...]) -> Validator[str]:
    def validate(value: object, key: str, path: str) -> str:
        if value not in options:
            raise _error(f"expected one of {', '.join(options)}", value, path=path, key=key)
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


def parse_duration(value: object, key: str = "", path: str = "") -> float:
    """Seconds from ``30``, ``1.5``, ``"500ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"``."""
    seconds = _quantity(value, _DURATION_UNITS_S)
    if seconds is None:
        raise _error("expected a duration like 500ms, 5s, 2m or 1h", value, path=path, key=key)
    if seconds < 0:
        raise _error("a duration must not be negative", value, path=path, key=key)
    if seconds > DURATION_MAX_S:
        raise _error("a duration must be at most 365d", value, path=path, key=key)
    return seconds


def parse_size(value: object, key: str = "", path: str = "") -> int:
    """Bytes from ``1024``, ``"100B"``, ``"64KB"``, ``"1MiB"``, ``"512MB"``, ``"1GB"``.

    Units are binary whatever their spelling: K, KB and KiB all mean 1024.
    """
    size = None if isinstance(value, float) else _quantity(value, _SIZE_UNITS_BYTES)
    if size is None:
        raise _error("expected a size like 100B, 64KB, 512MB or 1GB", value, path=path, key=key)
    if size < 0:
        raise _error("a size must not be negative", value, path=path, key=key)
    if size > SIZE_MAX_BYTES:
        raise _error("a size must be at most 1TB", value, path=path, key=key)
    return int(size)


def _positive_duration(value: object, key: str, path: str) -> float:
    seconds = parse_duration(value, key, path)
    if seconds <= 0:
        raise _error("expected a duration greater than 0", value, path=path, key=key)
    return seconds


def _heartbeat_interval(value: object, key: str, path: str) -> float:
    seconds = _positive_duration(value, key, path)
    if not _HEARTBEAT_INTERVAL_MIN_S <= seconds <= _HEARTBEAT_INTERVAL_MAX_S:
        raise _error("expected a duration from 10ms to 1h", value, path=path, key=key)
    return seconds


def _heartbeat_timeout(value: object, key: str, path: str) -> float:
    seconds = parse_duration(value, key, path)
    if seconds > _HEARTBEAT_TIMEOUT_MAX_S:
        raise _error("must be at most 1d", value, path=path, key=key)
    return seconds


def _message_size(value: object, key: str, path: str) -> int:
    size = parse_size(value, key, path)
    if not 1 <= size <= REDIS_STRING_MAX_BYTES:
        raise _error("expected a size from 1B to 512MB (Redis' largest string)", value,
                     path=path, key=key)
    return size


def _string(value: object, key: str, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _error("expected a non-empty string", value, path=path, key=key)
    return value


def _name(value: object, key: str, path: str) -> str:
    """A queue name or namespace: 1..128 of [A-Za-z0-9_.-], not ``.`` or ``..``."""
    if not isinstance(value, str):
        raise _error("expected a name string (quote it)", value, path=path, key=key)
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
    raise _error(problem, value, path=path, key=key)


def validate_queue_name(name: object, *, path: str = "", key: str = "") -> str:
    """``name`` if it is a valid queue name, else ConfigError (for config and producer)."""
    return _name(name, key, path)


# --- redis and web validators --------------------------------------------------------


def _redis_url(value: object, key: str, path: str) -> str:
    """A redis://, rediss://, unix:// or sentinel:// url (its password never shown)."""
    url = _string(value, key, path)
    shown = re.sub(r"//[^/?#]*@", "//***@", url)  # the userinfo ends at the last '@'
    shown = safe.mask_url(shown)  # password= in the query
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed '[' of an IPv6 host
        raise _error(f"invalid url ({exc})", shown, path=path, key=key) from None
    if parts.scheme not in _URL_SCHEMES:
        problem = f"unsupported url scheme {parts.scheme!r} (expected {', '.join(_URL_SCHEMES)})"
        raise _error(problem, shown, path=path, key=key)
    if parts.scheme == "unix" and not parts.path:
        raise _error("a unix:// url needs a socket path", shown, path=path, key=key)
    if parts.scheme in ("redis", "rediss"):
        try:
            port_ok = parts.port != 0
        except ValueError:  # not a number, or out of 0..65535
            port_ok = False
        if not port_ok:
            raise _error("invalid port in url", shown, path=path, key=key)
        if not parts.hostname:
            raise _error("the url has no host", shown, path=path, key=key)
    if parts.scheme == "sentinel" and not parts.netloc:
        raise _error("a sentinel:// url needs the sentinels' host:port", shown, path=path, key=key)
    return url


def _data_dir(value: object, key: str, path: str) -> Path:
    """A directory; relative to the config file's directory when relative."""
    directory = Path(_string(value, key, path)).expanduser()
    return Path(os.path.abspath(Path(path).parent / directory))


_LISTEN = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s\[\]:/]+):([0-9]{1,5})")


def _listen(value: object, key: str, path: str) -> str:
    """``host:port`` or ``[ipv6]:port`` with a port from 1 to 65535."""
    match = _LISTEN.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise _error("expected host:port (IPv6 in brackets: [::1]:8087)", value,
                     path=path, key=key)
    if match[1].startswith("["):
        try:
            ipaddress.IPv6Address(match[1][1:-1])
        except ValueError:
            raise _error("invalid IPv6 address", value, path=path, key=key) from None
    if not 1 <= int(match[2]) <= 65535:
        raise _error("expected a port from 1 to 65535", value, path=path, key=key)
    return match[0]


def _is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _token(value: object, key: str, path: str) -> str | None:
    """A secret: an error about it never shows it. Empty means no token."""
    if not isinstance(value, str):
        raise _error(f"expected a string, got a value of type {type(value).__name__}",
                     path=path, key=key)
    return value or None


# --- sections -------------------------------------------------------------------------


def _redis(value: object, path: str) -> RedisConfig:
    raw = _mapping(value, "redis", path, _REDIS_KEYS)
    if raw.get("url") == "":  # url: ${REDIS_URL:-} switches to the embedded server
        del raw["url"]
    return RedisConfig(
        url=_get(raw, "url", "redis", path, _redis_url, None),
        data_dir=_get(raw, "data_dir", "redis", path, _data_dir, None),
        appendfsync=_get(raw, "appendfsync", "redis", path, _choice(_APPENDFSYNC),
                         defaults.APPENDFSYNC),
    )


#: Queue option in YAML -> (QueueConfig field, validator).
_QUEUE_OPTIONS: dict[str, tuple[str, Validator[object]]] = {
    "consumers": ("consumers", _int_range(1, CONSUMERS_PER_QUEUE_MAX, " (consumers per queue)")),
    "retry_threshold": ("retry_threshold", _int_range(0, _RETRY_THRESHOLD_MAX)),
    "retry_delay": ("retry_delay_s", parse_duration),
    "retry_backoff": ("retry_backoff", _multiplier),
    "retry_delay_max": ("retry_delay_max_s", parse_duration),
    "message_timeout": ("message_timeout_s", parse_duration),
    "max_messages": ("max_messages", _int_range(0, _MAX_MESSAGES_MAX)),
    "max_memory": ("max_memory_bytes", parse_size),
}


def _queue_options(raw: Mapping[str, object], key: str, path: str) -> dict[str, object]:
    """The queue options present in ``raw``, as QueueConfig field -> value."""
    return {
        attribute: _required(raw[name], _join(key, name), path, validate)
        for name, (attribute, validate) in _QUEUE_OPTIONS.items()
        if name in raw
    }


def _queue_defaults(value: object, path: str) -> dict[str, object]:
    if isinstance(value, dict) and "handler" in value:
        raise _error("a handler cannot be a default: each queue names its own",
                     path=path, key="defaults.handler")
    return _queue_options(_mapping(value, "defaults", path, _QUEUE_OPTIONS), "defaults", path)


def _queue(name: object, value: object, base: Mapping[str, object], path: str) -> QueueConfig:
    key = _join("queues", name)
    name = validate_queue_name(name, path=path, key=key)
    raw = _mapping(value, key, path, ("handler", *_QUEUE_OPTIONS))
    if "handler" not in raw:
        raise _error("missing: every queue needs a handler 'module:function'", path=path,
                     key=_join(key, "handler"))
    handler = _required(raw["handler"], _join(key, "handler"), path, _handler_spec)
    options: dict[str, Any] = {**base, **_queue_options(raw, key, path)}  # validated
    return replace(QueueConfig(name=name, handler=handler), **options)


def _queues(value: object, base: Mapping[str, object], path: str) -> dict[str, QueueConfig]:
    if not isinstance(value, dict) or not value:
        raise _error("expected a non-empty mapping of queue names to their options", value,
                     path=path, key="queues")
    queues = [_queue(name, item, base, path) for name, item in value.items()]
    total = sum(q.consumers for q in queues)
    if total > CONSUMERS_TOTAL_MAX:
        raise _error(f"at most {CONSUMERS_TOTAL_MAX} consumers in all queues together", total,
                     path=path, key="queues")
    return {q.name: q for q in queues}


def _web(value: object, path: str) -> WebConfig | None:
    if value is _MISSING:
        return None
    raw = _mapping(value, "web", path, _WEB_KEYS)
    listen = _get(raw, "listen", "web", path, _listen, defaults.WEB_LISTEN)
    token = _get(raw, "token", "web", path, _token, None)
    if token is None and not _is_loopback(listen):
        raise _error(f"required when web.listen ({listen}) is not a loopback address",
                     path=path, key="web.token")
    return WebConfig(listen=listen, token=token)


def _config(data: object, path: str) -> Config:
    if data is None:
        raise _error("the file is empty (expected a mapping with a 'queues' key)", path=path)
    if not isinstance(data, dict):
        raise _error("expected a mapping at the top level", data, path=path)
    raw = _mapping(data, "", path, _TOP_KEYS)
    interval_s = _get(raw, "heartbeat_interval", "", path, _heartbeat_interval,
                      defaults.HEARTBEAT_INTERVAL_S)
    timeout_s = _get(raw, "heartbeat_timeout", "", path, _heartbeat_timeout,
                     defaults.HEARTBEAT_TIMEOUT_S)
    if timeout_s <= interval_s:
        raise _error(f"must be greater than heartbeat_interval ({interval_s:g}s)",
                     raw.get("heartbeat_timeout", timeout_s), path=path, key="heartbeat_timeout")
    return Config(
        path=Path(path),
        redis=_redis(raw.get("redis"), path),
        namespace=_get(raw, "namespace", "", path, _name, defaults.NAMESPACE),
        max_message_size_bytes=_get(raw, "max_message_size", "", path, _message_size,
                                    defaults.MAX_MESSAGE_SIZE_BYTES),
        heartbeat_interval_s=interval_s,
        heartbeat_timeout_s=timeout_s,
        shutdown_timeout_s=_get(raw, "shutdown_timeout", "", path, parse_duration,
                                defaults.SHUTDOWN_TIMEOUT_S),
        preload=_get(raw, "preload", "", path, _bool, False),
        stats=_get(raw, "stats", "", path, _bool, True),
        queues=_queues(raw.get("queues", _MISSING), _queue_defaults(raw.get("defaults"), path),
                       path),
        web=_web(raw.get("web", _MISSING), path),
    )


# --- public entry points -----------------------------------------------------------------


def loads(text: str, path: str = "<string>") -> Config:
    """Parse and validate queues.yaml text; ``path`` names it in errors."""
    if len(text) > _FILE_MAX_BYTES:  # characters: at most as many as bytes
        raise _error(_FILE_TOO_LARGE, path=path)
    return _config(_parse_yaml(text, path), path)


class NotRegularFile(OSError):
    """A path names a FIFO, a socket or a device where a file was expected."""


def open_regular_file(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; NotRegularFile
    (or another OSError) otherwise.

    Opened without blocking: a FIFO with no writer would stall the caller (a
    supervisor re-reading its config on SIGHUP) for ever, and a device such
    as /dev/zero is no file anyone means.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file (a {_file_kind(mode)})", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"))
    return next((kind for test, kind in kinds if test(mode)), "special file")


def _config_path(path: object) -> str:
    """``path`` as a string; ConfigError when it is no path at all (None, 5)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise _error(f"expected a file path, not a value of type {type(path).__name__}", key="config path")
    return os.fsdecode(path)


def load(path: str | os.PathLike[str]) -> Config:
    """Read and validate a whole queues.yaml; any fault is one ConfigError line."""
    name = _config_path(path)
    try:
        with open_regular_file(name) as stream:
            data = stream.read(_FILE_MAX_BYTES + 1)
        if len(data) > _FILE_MAX_BYTES:
            raise _error(_FILE_TOO_LARGE, path=name)
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise _error("no such file", path=name) from None
    except IsADirectoryError:
        raise _error("is a directory, not a file", path=name) from None
    except PermissionError:
        raise _error("permission denied", path=name) from None
    except NotRegularFile as exc:
        raise _error(str(exc.strerror), path=name) from None
    except OSError as exc:
        raise _error(f"cannot read the file ({exc.strerror or exc})", path=name) from None
    except UnicodeDecodeError as exc:
        raise _error(f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})",
                     path=name) from None
    return loads(text, name)


def from_url(url: str, namespace: str = defaults.NAMESPACE) -> Config:
    """A Config with only a Redis url (no queues), for the CLI and producers."""
    return Config(
        path=Path("<url>"),
        redis=RedisConfig(url=_redis_url(url, "redis.url", "")),
        namespace=_name(namespace, "namespace", ""),
    )


# --- handlers ------------------------------------------------------------------------------

_SPEC = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")


def _handler_spec(value: object, key: str, path: str) -> str:
    """A well-formed ``module:function`` (or ``module:obj.attr``), not imported."""
    match = _SPEC.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        missing_colon = isinstance(value, str) and ":" not in value
        problem = "expected 'module:function'" + (" (no ':' found)" if missing_colon else "")
        raise _error(problem, value, path=path, key=key, cls=HandlerImportError)
    return match[0]


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _import_module(module: str, spec: str, path: str, key: str) -> object:
    def fail(problem: str) -> ConfigError:
        return _error(problem, spec, path=path, key=key, cls=HandlerImportError)

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module + ".").startswith(exc.name + "."):
            raise fail(f"cannot import module {module!r} ({_describe(exc)})") from None
        # The module exists but something it imports does not.
        raise fail(f"module {module!r} raised on import ({_describe(exc)})") from exc
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: user code stops nothing here
        raise fail(f"module {module!r} raised on import ({_describe(exc)})") from None


def _attribute(target: object, name: str, owner: str, spec: str, path: str, key: str) -> object:
    """``getattr(target, name)``; ``owner`` names ``target`` in the error."""
    try:
        return getattr(target, name)
    except AttributeError:
        public = [candidate for candidate in dir(target) if not candidate.startswith("_")]
        close = difflib.get_close_matches(name, public, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _error(f"{owner} has no attribute {name!r}{hint}", spec,
                     path=path, key=key, cls=HandlerImportError) from None


def import_handler(spec: str, *, path: str = "", key: str = "") -> Callable[..., object]:
    """The callable that ``'module:function'`` (or ``'module:obj.attr'``) names.

    Every failure is a one-line HandlerImportError ending in ``got 'module:function'``.
    """
    module, _, attributes = _handler_spec(spec, key, path).partition(":")
    target = _import_module(module, spec, path, key)
    reached: list[str] = []
    for name in attributes.split("."):
        owner = repr(f"{module}:{'.'.join(reached)}") if reached else f"module {module!r}"
        target = _attribute(target, name, owner, spec, path, key)
        reached.append(name)
    if not callable(target):
        raise _error(f"not callable (it is of type {type(target).__name__})", spec,
                     path=path, key=key, cls=HandlerImportError)
    return target
