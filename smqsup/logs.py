"""Log setup for the command line: journald priority prefixes under systemd,
plain timestamps otherwise, or one JSON object a line (``--log-format
json``, ``log_format: json``); every line one record, with secrets masked.

Untrusted text reaches the logs as arguments (exception texts of handlers,
message ids, request values), as a message itself (a handler's
``log.warning(body)``) and in tracebacks (an exception's text, its notes, its
causes): each is escaped and capped (``safe.escape``), so a value holding
newlines, terminal sequences or line separators cannot forge a line and a
1 MiB exception text costs one bounded line; the whole line, traceback
included, is at most ``safe.LOG_LINE_BYTES`` (cut with a note), in both
formats. A dict logged whole (``log.info("x: %s", body)``) shows as Python
prints it. The formatted line is scrubbed of every registered secret
(``safe.scrub``), and the lines of a traceback are indented under their record.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Hashable, Mapping
from typing import Any, Optional

from smqsup import safe

# syslog priorities journald reads from a "<N>" line prefix.
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}
#: Prefix of the continuation lines of a record (a traceback): never a "<N>"
#: priority, never mistaken for a record of its own.
_CONTINUATION = "\n    "
#: Longest message of a record (its template with its arguments), in characters.
MESSAGE_CHARS = 8000
#: Longest line of a traceback or stack (and each exception's text), in characters.
TRACEBACK_LINE_CHARS = safe.LOG_VALUE_CHARS
#: Longest logger name shown, in characters.
NAME_CHARS = 200


def _clean(value: object) -> object:
    """A log argument made safe: numbers as they are (for %d, %.1f), anything
    else as one escaped, bounded line."""
    if isinstance(value, (int, float)):
        return value
    return safe.escape(value)


class _LoggedWhole:
    """A mapping logged as the one argument of a template with no ``%(key)``
    (``log.info("x: %s", body)``): logging passes it as the arguments
    themselves; shown as ``%s`` or ``%r`` shows it, escaped and bounded."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return safe.escape(self.value)

    def __repr__(self) -> str:
        try:
            return safe.escape(repr(self.value))
        except Exception:  # noqa: BLE001 - a value whose __repr__ fails
            return f"<{type(self.value).__name__}: repr() failed>"


class UntrustedArguments(logging.Filter):
    """Escapes and caps every argument of every record (see module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, Mapping):
            if isinstance(record.msg, str) and "%(" in record.msg:
                record.args = {key: _clean(value) for key, value in args.items()}
            else:
                record.args = (_LoggedWhole(args),)
        elif args:
            record.args = tuple(_clean(value) for value in args)
        return True


def _message(record: logging.LogRecord) -> str:
    """The record's message as one escaped, bounded line: its template may
    come from user code too (a handler's ``log.warning(body)``)."""
    try:
        text = record.getMessage()
    except Exception as exc:  # noqa: BLE001 - arguments that do not fit the template: still one line
        text = f"{_text(record.msg)} (arguments that do not fit it: {type(exc).__name__})"
    return safe.escape(text, MESSAGE_CHARS)


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - an object whose __str__ fails
        return f"<{type(value).__name__}: str() failed>"


def _traceback(exc_info: tuple[Any, Any, Any]) -> str:
    """A traceback as lines of escaped, bounded text: each exception's own
    text (its causes, contexts, group members and notes too) escaped and
    capped as any untrusted value first, so that its newlines cannot make
    lines of their own; then every line (a path, a source line) escaped."""
    try:
        te = traceback.TracebackException(*exc_info)
        _escape_texts(te)
        lines = "".join(te.format()).rstrip("\n").split("\n")
    except Exception as exc:  # noqa: BLE001 - a traceback that cannot be formatted: said so in its place
        return f"(the traceback could not be formatted: {type(exc).__name__})"
    return "\n".join(safe.escape(line, TRACEBACK_LINE_CHARS) for line in lines)


def _escape_texts(te: traceback.TracebackException) -> None:
    """Escape the texts of ``te`` and of every exception chained to it
    (TracebackException keeps each exception's text as ``_str``, notes as
    ``__notes__``, a SyntaxError's as ``msg``: where they are missing, the
    lines are still escaped one by one)."""
    seen: set[int] = set()
    todo: list[Any] = [te]
    while todo:
        t = todo.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        for name in ("_str", "msg"):
            if isinstance(getattr(t, name, None), str):
                setattr(t, name, safe.escape(getattr(t, name)))
        notes = getattr(t, "__notes__", None)
        if isinstance(notes, list):
            t.__notes__ = [safe.escape(note) for note in notes]
        todo += [t.__cause__, t.__context__, *(getattr(t, "exceptions", None) or ())]


def _fit(line: str, limit: int = safe.LOG_LINE_BYTES) -> str:
    """``line`` if its UTF-8 takes at most ``limit`` bytes; else its head, cut
    on a character boundary, and a note of how many bytes were cut."""
    if len(line) * 4 <= limit:  # (no character takes more than 4 bytes)
        return line
    data = line.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return line
    keep = limit - 64
    return data[:keep].decode("utf-8", "ignore") + f"...(line cut: +{len(data) - keep} bytes)"


class PlainFormatter(logging.Formatter):
    """Time, level, pid, logger and message; secrets masked, continuation
    lines (a traceback's, a stack's) indented, every text escaped, the line
    at most LOG_LINE_BYTES."""

    def format(self, record: logging.LogRecord) -> str:
        return _fit(self.text(record))

    def text(self, record: logging.LogRecord) -> str:
        """The record as text, before the cap."""
        record.message = _message(record)
        record.name = safe.escape(record.name, NAME_CHARS)
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info:
            text += "\n" + _traceback(record.exc_info)
        if record.stack_info:
            text += "\n" + "\n".join(safe.escape(line, TRACEBACK_LINE_CHARS) for line in record.stack_info.split("\n"))
        return safe.scrub(text).replace("\n", _CONTINUATION)


class JournalFormatter(PlainFormatter):
    """``<P>name[pid]: message``: journald stamps the time itself, but it
    attributes every line of the stream to the supervisor's pid, so the
    line names the consumer process that wrote it."""

    def format(self, record: logging.LogRecord) -> str:
        prio = _PRIORITY.get(record.levelno, 6)
        return _fit(f"<{prio}>{self.text(record)}")


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
    "exc" (a stack as "stack"); each text escaped as the text format's, and scrubbed of the
    secrets before it is quoted (a quote would hide a secret from the scrub of the whole line);
    the line at most LOG_LINE_BYTES (the longest of "exc", "stack" and "msg" cut first)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, **_PROCESS, "pid": record.process,
            "logger": safe.escape(record.name, NAME_CHARS),
        }
        message_id = getattr(record, "message_id", None) or MESSAGE_ID.get()
        if message_id:
            line["message_id"] = safe.escape(message_id)
        trace_id = _trace_id()
        if trace_id:
            line["trace_id"] = trace_id
        line["msg"] = safe.scrub(_message(record))
        if record.exc_info:
            line["exc"] = safe.scrub(_traceback(record.exc_info))
        if record.stack_info:
            line["stack"] = safe.scrub("\n".join(safe.escape(s, TRACEBACK_LINE_CHARS)
                                                 for s in record.stack_info.split("\n")))
        return _json_line(line)


def _json_line(line: dict[str, object], limit: int = safe.LOG_LINE_BYTES) -> str:
    """``line`` as one JSON line of at most ``limit`` bytes: while it is
    longer, its longest text field is cut (head kept, the cut noted)."""
    for _ in range(4):
        text = _printable_json(json.dumps(line, ensure_ascii=False))
        over = len(text.encode("utf-8", "surrogatepass")) - limit
        if over <= 0:
            return text
        key = max(("exc", "stack", "msg"), key=lambda k: len(str(line.get(k, ""))))
        value = str(line.get(key, ""))
        # (JSON may double a character, a backslash or a quote: cut twice the excess)
        line[key] = _fit(value, max(len(value.encode("utf-8", "surrogatepass")) - 2 * over, 0) + 64)
    return json.dumps({k: line[k] for k in ("time", "level", "pid")} | {"msg": "(a log line too long to cut)"})


def _printable_json(text: str) -> str:
    """JSON text with every character that is not printable (U+2028, a C1
    control, DEL, a lone surrogate: json.dumps leaves them raw with
    ensure_ascii off) written as its \\u escape: the same JSON value, one
    safe line."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _json_escape(ord(ch)) for ch in text)


def _json_escape(code: int) -> str:
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


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
