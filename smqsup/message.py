"""The message envelope (ids: smqsup.ids; its frame on the wire: smqsup.framing).

Payload: compact JSON ``{"id", "queue", "body", "created_at", "headers"}``
(and ``"dedup_key"`` when one was given), written once by the producer and
never re-encoded afterwards; a handler receives it decoded as a Message.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from smqsup.defaults import PROGRESS_MAX_BYTES
from smqsup.errors import MalformedMessage, MessageError
from smqsup.framing import SEP, frame_head, group_only_head
from smqsup.ids import new_id

#: Guards the making of a message's ``cancelled`` Event (the handler's thread and the consumer's may race).
_CANCEL_LOCK = threading.Lock()
#: Deepest nesting of lists and objects a body or headers may have. The
#: consumer decodes with Python's recursive JSON parser, which gives up
#: somewhere near 1,000 levels depending on its own stack: a publish refuses
#: what the consumer side might not decode.
MAX_NESTING = 100
#: A message id a producer chooses: what the generated ones look like, and more.
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: A message's parents as it reads them: (results of those done, reasons of
#: those that failed), each by (queue, message id).
_Family = tuple[dict[tuple[str, str], Any], dict[tuple[str, str], str]]


@dataclass(eq=False, repr=False, slots=True)  # (compared as itself, shown by __repr__)
class Message:
    """What a handler receives: ``body``, ``id``, ``queue``, ``headers``,
    ``created_at`` (unix seconds), ``attempts`` (failed attempts before this
    one: 0 on the first delivery), ``priority`` (0-9) and ``dedup_key`` (the
    key it was published with, or None). ``result_ttl_s``: how long its
    outcome is kept once it ends (0: not tracked); ``events_max``: its
    lifecycle goes to its queue's event stream (0: not); ``progress(value)``
    reports how far its handler got. A message published with ``depends_on``
    reads its parents' results as ``parents``, and the reasons of those that
    failed (``on_parent_failure="run"``) as ``failed_parents``. ``group``:
    the message group it was published in (None: none)."""

    id: str
    queue: str
    body: Any
    headers: dict[str, Any]
    created_at: float
    attempts: int
    priority: int = 0
    dedup_key: Optional[str] = None
    result_ttl_s: int = 0
    events_max: int = 0
    #: What it has in its queue's deps set (framing.LINK_*: parents, a held dedup key, a batch; 0: nothing).
    linked: int = 0
    group: Optional[str] = None
    #: Where parents are read from (the consumer sets it for a linked message): -> (done, failed).
    parents_source: Optional[Callable[[], _Family]] = field(default=None, init=False)
    _parents: Optional[_Family] = field(default=None, init=False)
    #: Where its batch is read from (the consumer sets it for a linked message): -> a Batch, or None.
    batch_source: Optional[Callable[[], Any]] = field(default=None, init=False)
    _batch: Any = field(default=False, init=False)
    #: Where progress() writes (the consumer sets it for a tracked message, or one with events):
    #: JSON text -> recorded.
    progress_sink: Optional[Callable[[str], bool]] = field(default=None, init=False)
    _cancelled: Optional[threading.Event] = field(default=None, init=False)

    @property
    def cancelled(self) -> threading.Event:
        """Set once the message's cancel was asked (Producer.cancel): a
        handler on a thread may look and return early; one that goes on is
        left behind at message_timeout. (Made at the first look.)"""
        with _CANCEL_LOCK:
            if self._cancelled is None:
                self._cancelled = threading.Event()
            return self._cancelled

    def cancel(self) -> None:
        """Tell the handler (the consumer calls it; ``cancelled`` is set)."""
        self.cancelled.set()

    @property
    def parents(self) -> dict[tuple[str, str], Any]:
        """The results of the messages this one depended on (depends_on),
        by (queue, message id); empty for a message without any. Read from
        Redis at the first look (BrokerError if it cannot be)."""
        return self._family()[0]

    @property
    def failed_parents(self) -> dict[tuple[str, str], str]:
        """The parents that failed, by (queue, message id), with the reason
        this message would have been dead-lettered for (it runs anyway:
        ``on_parent_failure="run"``)."""
        return self._family()[1]

    @property
    def batch(self) -> Any:
        """The batch this message is a member of (client/batching.py Batch),
        or None: ``message.batch.publish(...)`` adds a message to it, and
        the batch waits for that one too. Read at the first look."""
        if self._batch is False:
            self._batch = None if self.batch_source is None else self.batch_source()
        return self._batch

    def _family(self) -> _Family:
        if self._parents is None:
            self._parents = ({}, {}) if self.parents_source is None else self.parents_source()
        return self._parents

    def progress(self, value: Any) -> bool:
        """Report how far the handler got: a small JSON value (0.42,
        ``{"rows": 1200, "of": 5000}``), readable at once with
        Producer.progress and shown in the web UI. Whether it was recorded
        (False: the message is neither tracked nor in a queue with events,
        or has ended). MessageError for
        a value that is not JSON or over PROGRESS_MAX_BYTES; a Redis error
        is BrokerError (the handler decides whether that matters)."""
        text = bounded_json(value, "progress", PROGRESS_MAX_BYTES)
        sink = self.progress_sink
        return False if sink is None else sink(text)

    def __repr__(self) -> str:
        return f"Message(id={self.id!r}, queue={self.queue!r}, attempts={self.attempts})"


# --- envelope ------------------------------------------------------------


#: One encoder for every body: json.dumps with arguments builds a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class EnvelopeWriter:
    """Writes the payloads of one queue's messages. The envelope's fixed parts
    (queue, headers, created_at) are encoded once per batch and only each body
    is encoded per message, so a batch costs one JSON encoding per body."""

    def __init__(self, queue: str, headers: Optional[Mapping[str, Any]], max_size_bytes: int,
                 created_at: Optional[float] = None) -> None:
        self.queue = queue
        self.max_size_bytes = max_size_bytes
        created = round(time.time() if created_at is None else created_at, 6)
        if headers is not None and not isinstance(headers, Mapping):
            raise MessageError(f"queue {queue!r}: headers must be a mapping, got {type(headers).__name__}")
        head_json = _encode(headers if headers is not None else {}, f"queue {queue!r}: headers")
        try:
            head_json.encode()
        except UnicodeEncodeError:
            raise MessageError(f"queue {queue!r}: headers hold a lone surrogate "
                               "(text that is not valid Unicode)") from None
        #: What a body's errors name: formed once per writer, not once per message.
        self._body_what = f"queue {queue!r}: message body"
        self._middle = ',"queue":%s,"body":' % _ENCODER.encode(queue)
        self._headers_json = head_json
        self._tail = ',"created_at":%r,"headers":%s}' % (created, head_json)

    def payload(self, message_id: str, body: Any, dedup_key: Optional[str] = None,
                created_at: Optional[float] = None) -> bytes:
        """The payload bytes of one message, created at the writer's time
        or at ``created_at`` (a writer kept for many single publishes);
        MessageError if the body is not JSON-serialisable or the payload
        exceeds the size limit."""
        body_json = _encode(body, self._body_what)
        head = '{"id":' + _ENCODER.encode(message_id)
        if dedup_key is not None:
            head += ',"dedup_key":' + _ENCODER.encode(dedup_key)
        tail = self._tail if created_at is None else \
            ',"created_at":%r,"headers":%s}' % (round(created_at, 6), self._headers_json)
        try:
            payload = (head + self._middle + body_json + tail).encode()
        except UnicodeEncodeError:
            raise MessageError(f"queue {self.queue!r}: message body holds a lone surrogate "
                               "(text that is not valid Unicode)") from None
        if len(payload) > self.max_size_bytes:
            raise MessageError(
                f"queue {self.queue!r}: message of {len(payload)} bytes exceeds the limit of "
                f"{self.max_size_bytes} bytes (max_message_size)"
            )
        return payload


def _encode(value: Any, what: str) -> str:
    """``value`` as compact JSON text; MessageError for anything the consumer
    side could not decode (not JSON, NaN or Infinity, nested too deep)."""
    try:
        # A dict is encoded as it is (a copy per body would tax every publish);
        # only another kind of mapping needs one for the encoder.
        plain = dict(value) if not isinstance(value, dict) and isinstance(value, Mapping) else value
        text = _ENCODER.encode(plain)
    except (TypeError, ValueError) as exc:
        raise MessageError(f"{what} is not JSON-serialisable ({exc})") from None
    except RecursionError:
        raise MessageError(f"{what} is nested deeper than {MAX_NESTING} levels") from None
    if too_deep(text):
        raise MessageError(f"{what} is nested deeper than {MAX_NESTING} levels")
    return text


def bounded_json(value: Any, what: str, limit_bytes: int) -> str:
    """``value`` as compact JSON text of at most ``limit_bytes`` in UTF-8,
    checked as a body is; MessageError naming ``what`` otherwise (not JSON,
    NaN or Infinity, nested too deep, a lone surrogate, too large)."""
    text = _encode(value, what)
    try:
        size = len(text.encode())
    except UnicodeEncodeError:
        raise MessageError(f"{what} holds a lone surrogate (text that is not valid Unicode)") from None
    if size > limit_bytes:
        raise MessageError(f"{what} of {size} bytes exceeds the limit of {limit_bytes} bytes")
    return text


def too_deep(text: str) -> bool:
    """Whether JSON ``text`` nests lists and objects deeper than MAX_NESTING."""
    # Only text with that many brackets can be that deep: the exact count runs rarely.
    return text.count("[") + text.count("{") > MAX_NESTING and _nesting(text) > MAX_NESTING


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _nesting(text: str) -> int:
    """The deepest nesting of lists and objects in JSON ``text``."""
    depth = deepest = 0
    for char in _STRING.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def check_message_id(message_id: object) -> str:
    """``message_id`` if it is 1 to 128 of ``A-Za-z0-9_.:-``; MessageError otherwise."""
    if not isinstance(message_id, str) or not _ID.fullmatch(message_id):
        shown = repr(message_id)[:80]
        raise MessageError(f"message_id: expected 1 to 128 of A-Z a-z 0-9 _ . : -, got {shown}")
    return message_id


def encode_payload(queue: str, body: Any, *, headers: Optional[Mapping[str, Any]] = None,
                   message_id: Optional[str] = None, created_at: Optional[float] = None,
                   max_size_bytes: int) -> tuple[str, bytes]:
    """Return ``(id, payload bytes)`` for one message.

    Raises MessageError when the body or headers are not JSON-serialisable or
    the payload exceeds ``max_size_bytes``.
    """
    mid = check_message_id(message_id) if message_id is not None else new_id()
    writer = EnvelopeWriter(queue, headers, max_size_bytes, created_at)
    return mid, writer.payload(mid, body)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: The one strict decoder (json.loads with an argument builds a decoder per call).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
#: Its scanner: what JSONDecoder.decode runs between two whitespace regexes.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def strict_loads(payload: bytes) -> Any:
    """Strict JSON (no NaN or Infinity); MalformedMessage for any failure,
    nesting too deep for the parser included."""
    try:
        # Decoded here, strictly: json.loads would guess UTF-16/32 from the bytes.
        text = payload.decode("utf-8")
        if text[:1] == "{":  # what every producer writes: the scanner alone, when it reads all of it
            try:
                value, end = _SCAN(text, 0)
            except StopIteration:
                value, end = None, -1
            if end == len(text):
                return value
        return _DECODER.decode(text)  # whitespace around it, trailing data: the decoder's own verdict
    except RecursionError:
        raise MalformedMessage("payload is nested too deep to decode") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise MalformedMessage(f"payload is not JSON ({str(exc)[:200]})") from None
    except Exception as exc:  # noqa: BLE001 - no bytes may take a consumer down
        raise MalformedMessage(f"payload cannot be decoded ({type(exc).__name__})") from None


def _object_at(data: bytes, start: int, tail_chars: int) -> Any:
    """The JSON object that ``data`` holds from byte ``start`` (after an
    ASCII head: its byte offsets are the text's) to ``tail_chars``
    characters before its end (a group's name), read by the scanner alone
    without copying the payload out of the frame; None where that is not
    exactly one whole object (strict_loads then reads it, and says why)."""
    try:
        text = data.decode("utf-8")
        if text[start:start + 1] != "{":
            return None
        value, end = _SCAN(text, start)
    except (RecursionError, UnicodeDecodeError, ValueError, StopIteration):
        return None
    return value if end == len(text) - tail_chars else None


def _optioned(data: bytes) -> tuple[int, int, int, int, int, Optional[str], Any]:
    """decode()'s reading of a frame whose head says more than its attempts:
    (attempts, priority, result ttl, events, links, group, envelope)."""
    fast = group_only_head(data)
    if fast is not None:  # every grouped message without other options
        attempts, priority, start, size = fast
        try:
            group: Optional[str] = data[-size:].decode("utf-8")
        except UnicodeDecodeError:  # (frame_head reads it with replacement characters)
            group = None
        env = None if group is None else _object_at(data, start, len(group))
        if env is not None:
            return attempts, priority, 0, 0, 0, group, env
    head = frame_head(data)
    return (head.attempts, head.priority, head.result_ttl_s, head.events_max, head.linked, head.group,
            strict_loads(head.payload))


def decode(data: bytes) -> Message:
    """The Message held by a frame; MalformedMessage (and nothing else) if
    the bytes are not one, whatever they hold."""
    bar = data.find(SEP, 0, 10)
    if bar > 0 and data[:bar].isdigit():  # "A|": every message without options
        attempts, priority, tracked_s, events_max, linked, group = int(data[:bar]), 0, 0, 0, 0, None
        env = _object_at(data, bar + 1, 0)
        if env is None:
            env = strict_loads(data[bar + 1:])
    else:
        attempts, priority, tracked_s, events_max, linked, group, env = _optioned(data)
    # JSON decodes to exact types: ``__class__ is`` checks what isinstance
    # would (bool, a subclass of int, is no created_at), without a call each.
    if env.__class__ is not dict:
        raise MalformedMessage("payload is not a JSON object")
    try:
        mid, queue, created_at = env["id"], env["queue"], env["created_at"]
    except KeyError as exc:
        raise MalformedMessage(f"envelope lacks {exc.args[0]!r}") from None
    headers = env.get("headers") or {}
    if mid.__class__ is not str or queue.__class__ is not str or headers.__class__ is not dict:
        raise MalformedMessage("envelope fields have the wrong types")
    if created_at.__class__ is not float and created_at.__class__ is not int:
        raise MalformedMessage("envelope created_at is not a number")
    dedup_key = env.get("dedup_key")
    return Message(mid, queue, env.get("body"), headers, float(created_at), attempts, priority,
                   dedup_key if dedup_key.__class__ is str else None, tracked_s, events_max, linked, group)
