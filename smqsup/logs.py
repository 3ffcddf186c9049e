"""Log setup for the command line: journald priority prefixes under systemd,
plain timestamps otherwise, or one JSON object a line (``--log-format
json``, ``log_format: json``); every line one record, with secrets masked.

Untrusted text reaches the logs as arguments (exception texts of handlers,
message ids, request values): each argument is escaped and capped
(``safe.escape``), so a value holding newlines or terminal sequences cannot
forge a line and a 1 MiB exception text costs one bounded line. The
formatted line is scrubbed of every registered secret (``safe.scrub``), and
the lines of a traceback are indented under their record.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
from collections.abc import Hashable, Mapping
from typing import Optional

from smqsup import safe

# syslog priorities journald reads from a "<N>" line prefix.
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}
#: Prefix of the continuation lines of a record (a traceback): never a "<N>"
#: priority, never mistaken for a record of its own.
_CONTINUATION = "\n    "


def _clean(value: object) -> object:
    """A log argument made safe: numbers as they are (for %d, %.1f), anything
    else as one escaped, bounded line."""
    if isinstance(value, (int, float)):
        return value
    return safe.escape(value)


class UntrustedArguments(logging.Filter):
    """Escapes and caps every argument of every record (see module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping):
            record.args = {key: _clean(value) for key, value in args.items()}
        elif args:
            record.args = tuple(_clean(value) for value in args)
        return True


class PlainFormatter(logging.Formatter):
    """Time, level, pid, logger and message; secrets masked, continuation
    lines indented."""

    def format(self, record: logging.LogRecord) -> str:
        return safe.scrub(super().format(record)).replace("\n", _CONTINUATION)


class JournalFormatter(PlainFormatter):
    """``<P>name[pid]: message``: journald stamps the time itself, but it
    attributes every line of the stream to the supervisor's pid, so the
    line names the consumer process that wrote it."""

    def format(self, record: logging.LogRecord) -> str:
        prio = _PRIORITY.get(record.levelno, 6)
        return f"<{prio}>{super().format(record)}"


#: The log formats: text for people (and the journal), json for collectors.
FORMATS = ("text", "json")
#: True once JSON lines are written: only then do the workers name the
#: message a line is about (MESSAGE_ID), so text logs pay nothing for it.
STRUCTURED = False
#: The id of the message whose handler (or outcome) this thread or task is
#: running, for the "message_id" of its JSON lines (handlers' own lines too).
MESSAGE_ID: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("smqsup_message_id", default=None)
#: What every JSON line of this process says about it: "role" (supervisor,
#: consumer, web or the command) and, in a consumer, "queue".
_PROCESS: dict[str, str] = {}


def set_context(**fields: str) -> None:
    """Name this process in its JSON lines (a forked child renames itself)."""
    _PROCESS.update(fields)


def _trace_id() -> str:
    """The trace id of the span current where the record is made (32 hex
    digits), or "": read only where OpenTelemetry's trace API was imported
    (tracing on, or the program's own), never imported for it."""
    otel = sys.modules.get("opentelemetry.trace")
    if otel is None:
        return ""
    context = otel.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else ""


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ms), level, role, pid, logger,
    queue, message_id and trace_id where known, the message, and the traceback as
    "exc"; each text scrubbed of the secrets before it is quoted (a quote
    would hide a secret from the scrub of the whole line)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, **_PROCESS, "pid": record.process, "logger": record.name,
        }
        message_id = getattr(record, "message_id", None) or MESSAGE_ID.get()
        if message_id:
            line["message_id"] = safe.escape(message_id)
        trace_id = _trace_id()
        if trace_id:
            line["trace_id"] = trace_id
        line["msg"] = safe.scrub(record.getMessage())
        if record.exc_info:
            line["exc"] = safe.scrub(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False)


class Lasting:
    """Conditions that last, each under a key (Redis refusing a step, a
    postponed reclaim, a fork failing): one line when one begins or its cause
    changes, again at most every ``repeat_s`` while it lasts (None: not
    again), and one INFO line when it ends. A loop that retries every tick
    logs a few lines, not one a tick."""

    def __init__(self, logger: logging.Logger, level: int = logging.WARNING,
                 repeat_s: Optional[float] = None) -> None:
        self._log = logger
        self._level = level
        self._repeat_s = repeat_s
        self._open: dict[Hashable, tuple[str, float]] = {}  # key -> (cause, when last said)

    def report(self, key: Hashable, cause: str, msg: str, *args: object, level: Optional[int] = None) -> None:
        """The condition ``key`` holds, for ``cause``: log ``msg % args`` (at
        ``level``, else the instance's) if that is news, or was said
        ``repeat_s`` ago."""
        now = time.monotonic()
        last = self._open.get(key)
        repeat = self._repeat_s is not None and last is not None and now - last[1] >= self._repeat_s
        if last is None or last[0] != cause or repeat:
            self._open[key] = (cause, now)
            self._log.log(self._level if level is None else level, msg, *args)

    def clear(self, key: Hashable, msg: str, *args: object) -> None:
        """The condition ``key`` is over: log ``msg % args`` if it held."""
        if self._open.pop(key, None) is not None:
            self._log.info(msg, *args)


def stderr_is_journal() -> bool:
    """True when stderr is connected to the journal (systemd sets JOURNAL_STREAM
    to the device:inode of that stream)."""
    stream = os.environ.get("JOURNAL_STREAM")
    if not stream:
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


def setup(level: str = "INFO", fmt: str = "text") -> None:
    """Send smqsup's logs to stderr: JSON lines (``fmt`` "json"), else
    formatted for the journal or for people."""
    global STRUCTURED
    STRUCTURED = fmt == "json"
    handler = logging.StreamHandler(sys.stderr)
    if STRUCTURED:
        handler.setFormatter(JsonFormatter())
    elif stderr_is_journal():
        handler.setFormatter(JournalFormatter("%(name)s[%(process)d]: %(message)s"))
    else:
        handler.setFormatter(PlainFormatter("%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"))
    handler.addFilter(UntrustedArguments())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


#: Keys of the warnings already given in this process (and, through fork, its children).
_warned: set[str] = set()


def warn_once(log: logging.Logger, key: str, text: str, *args: object) -> None:
    """Log ``text % args`` on ``log`` as a warning the first time ``key``
    comes up in this process, at debug level after that: for conditions that
    do not go away (a permission the Redis user lacks) and must not flood
    the log."""
    level = logging.DEBUG if key in _warned else logging.WARNING
    _warned.add(key)
    log.log(level, text, *args)
