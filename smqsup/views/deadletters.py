"""Choosing, showing, requeueing and purging dead letters: one implementation
for the ``smqsup dlq`` command and the web UI.

Whatever bytes sit in a dead-letter list, each entry can be shown (``row``)
and named in a requeue or purge: by its message id, or, when none can be
read, by the ``raw-...`` reference ``row`` gives it. A listing (``newest``)
reads a bounded number of bytes however large the entries: one beyond the
bound is shown from its heads.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any, Optional

from smqsup.deadletter import DeadLetter
from smqsup.errors import MalformedMessage
from smqsup.framing import frame_head, peek_id
from smqsup.message import too_deep
from smqsup.safe import scrub
from smqsup.store.broker import Broker
from smqsup.store.scripts import Peeked, ReadBudget

#: Dead-letter entries read per LRANGE page.
PAGE = 1000
#: A dead letter's body longer than this (as JSON text) is cut in listings, in characters.
BODY_SHOWN_CHARS = 64 * 1024


def row(entry: "bytes | Peeked") -> dict[str, Any]:
    """One dead-letter entry as every listing shows it: ``id`` (the message
    id, or a ``raw-...`` reference when the bytes hold none), ``attempts``,
    ``reason``, ``dead_at`` and ``created_at`` (unix s), ``error_type``,
    ``body`` (cut past BODY_SHOWN_CHARS, with ``truncated``),
    ``malformed`` and ``cut``. A malformed entry shows its bytes as text,
    undecodable bytes as backslash escapes. An entry ``newest`` could not
    read whole (``cut``) shows what its heads hold: the metadata's fields,
    its frame's id and attempts, the body's text as far as it goes
    (``truncated``), no ``created_at``. The row always encodes as strict
    JSON."""
    if isinstance(entry, Peeked):
        if entry.cut:
            return _cut_row(entry)
        entry = entry.data
    d = DeadLetter(entry)
    msg = d.message()
    body: Any = msg.body if msg is not None else d.frame.decode("utf-8", "backslashreplace")
    try:
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    except (RecursionError, ValueError):  # decodable yet too deep to encode again
        text = body = d.frame.partition(b"|")[2].decode("utf-8", "backslashreplace")
    if not isinstance(body, str) and too_deep(text):
        body = text  # shown as its text: a listing never nests deeper than a publish may
    truncated = len(text) > BODY_SHOWN_CHARS
    error_type = d.meta.get("error_type")
    created = msg.created_at if msg is not None and math.isfinite(msg.created_at) else None
    # Scrubbed (the url's password, the web token, as this process knows
    # them): consumers mask before they store, but an entry written by an
    # older consumer, or by hand, may hold one.
    return {"id": d.ref, "attempts": msg.attempts if msg else None, "reason": scrub(d.reason), "dead_at": d.at,
            "created_at": created, "error_type": error_type if isinstance(error_type, str) else None,
            "body": text[:BODY_SHOWN_CHARS] if truncated else body, "truncated": truncated,
            "malformed": msg is None, "cut": False}


def _cut_row(entry: Peeked) -> dict[str, Any]:
    """row() of an entry read cut (see row)."""
    meta = _meta_of(entry.data)
    # Its frame is what follows the metadata when that opens as JSON does;
    # DeadLetter asks that it parse, which cut metadata cannot: the two
    # differ only for hostile metadata. peek_range.lua chose the same head
    # to name the entry by.
    frame = entry.after if entry.after is not None and entry.data[:1] == b"{" else entry.data
    try:
        head = frame_head(frame)
        attempts, text, malformed = head.attempts, body_head(head.payload), False
    except MalformedMessage:
        attempts, text, malformed = None, _text(frame), True
    error_type = meta.meta.get("error_type")
    return {"id": cut_ref(frame, entry), "attempts": attempts, "reason": scrub(meta.reason), "dead_at": meta.at,
            "created_at": None, "error_type": error_type if isinstance(error_type, str) else None,
            "body": text[:BODY_SHOWN_CHARS], "truncated": True, "malformed": malformed, "cut": True}


def cut_ref(head: bytes, entry: Peeked) -> str:
    """The reference of an element read cut, named by ``head``: the message
    id there, else ``raw-`` and the digest of the whole element, as
    framing.peek_id and browse.ref give them for the whole bytes."""
    digest = entry.digest or hashlib.sha1(entry.data).hexdigest()  # (the script sends one when no id is there)
    return peek_id(head) or "raw-" + digest[:16]


#: Where a producer's envelope puts the body: after its id, dedup key and queue (message.EnvelopeWriter).
_ENVELOPE_HEAD = re.compile(rb'\{"id":"[A-Za-z0-9_.:-]{1,128}"(?:,"dedup_key":"(?:[^"\\]|\\.)*")?'
                            rb',"queue":"(?:[^"\\]|\\.)*","body":')
#: The characters of a JSON string up to its closing quote or where the text stops.
_STRING_HEAD = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
#: Metadata fields a cut head may hold whole (dead_letter.lua writes at_ms first, meta_json reason next).
_AT_MS = re.compile(r'^\{"at_ms":([0-9]{1,15})[,}]')
_ERROR_TYPE = re.compile(r',"error_type":"([A-Za-z0-9_.]{1,200})"')


def body_head(payload: bytes) -> str:
    """The body's text as far as the head of a payload holds it: a string
    body's text, another body's JSON text (as the producer wrote it); the
    head as text when it does not open as a producer's envelope."""
    found = _ENVELOPE_HEAD.match(payload)
    if found is None:
        return _text(payload)
    rest = _text(payload[found.end():])
    return string_head(rest[1:]) if rest.startswith('"') else rest


def string_head(text: str) -> str:
    """The value of the JSON string that ``text`` continues (its opening
    quote already read), up to its closing quote or the end of ``text``."""
    found = _STRING_HEAD.match(text)  # (it matches every text, if only an empty head)
    return str(json.loads('"' + (found[0] if found else "") + '"', strict=False))


def _text(data: bytes) -> str:
    """Bytes cut anywhere as text: undecodable bytes as backslash escapes,
    a character the cut split left out."""
    return codecs.getincrementaldecoder("utf-8")("backslashreplace").decode(data, final=False)


def _meta_of(head: bytes) -> DeadLetter:
    """The metadata at the head of an entry read cut, as a DeadLetter of no
    frame: parsed when its line is whole, else the fields the head holds
    (at_ms whole, the reason as far as it goes, error_type whole)."""
    line, sep, _ = head.partition(b"\n")
    if not sep:
        text = _text(line)
        at_ms, error_type = _AT_MS.match(text), _ERROR_TYPE.search(text)
        reason = text.partition('"reason":"')[2]
        fields = {"at_ms": int(at_ms[1]) if at_ms else None, "reason": string_head(reason) if reason else "unknown",
                  "error_type": error_type[1] if error_type else None}
        line = json.dumps(fields).encode()
    return DeadLetter(line + b"\n")


def newest(broker: Broker, queue: str, limit: int) -> list[Peeked]:
    """Up to ``limit`` dead-letter entries of ``queue``, newest first within
    each of its partitions, partition after partition, read within one
    listing's bounds (scripts.ReadBudget): an entry beyond them is its heads
    (``cut``: the first bytes of its metadata and of its frame)."""
    budget = ReadBudget.for_rows(limit, parts=2)
    entries: list[Peeked] = []
    for part in broker.queues.partition_names(queue):
        if len(entries) >= limit:
            break
        entries += broker.contents.peek_range(broker.keys(part).dead, "list", limit - len(entries), budget, split=b"\n")
    return entries


def select(broker: Broker, queue: str, ids: set[str]) -> list[bytes]:
    """The dead-letter entries of ``queue`` (all its partitions) whose message
    id (or ``raw-...`` reference) is in ``ids``."""
    return [raw for part in broker.queues.partition_names(queue) for raw in _select(broker, part, ids)]


def _select(broker: Broker, queue: str, ids: set[str]) -> list[bytes]:
    """select() in one partition, newest first, read page by page until all
    are found. An entry is also found by ``raw-`` and the hash of its bytes
    (the reference a listing that read it cut gives it, whose id it could
    not read: cut_ref)."""
    chosen: list[bytes] = []
    by_hash = any(i.startswith("raw-") for i in ids)
    start = 0
    while True:
        batch = broker.contents.dead_letters(queue, start, PAGE)
        for raw in batch:
            if DeadLetter(raw).ref in ids or (by_hash and "raw-" + hashlib.sha1(raw).hexdigest()[:16] in ids):
                chosen.append(raw)
        if len(batch) < PAGE or len(chosen) >= len(ids):
            return chosen
        start += PAGE


def requeue(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    """Move the dead letters with these message ids (None: all) back to
    pending, attempts reset, each in its partition; returns how many moved.
    An entry that another operator moved meanwhile is skipped (the script
    removes by value)."""
    return sum(_requeue(broker, part, ids) for part in broker.queues.partition_names(queue))


def _requeue(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    if ids is not None:
        return broker.contents.dlq_requeue(queue, _select(broker, queue, set(ids)))
    # All: oldest first, in pages, and no more than were there at the start:
    # a requeued message that dies again meanwhile re-enters at the head and
    # stays there.
    budget = broker.statistics.sizes(queue)["dead"]
    moved = 0
    while moved < budget:
        page = min(PAGE, budget - moved)
        n = broker.contents.dlq_requeue(queue, broker.contents.dead_letters(queue, -page, page))  # the oldest
        if n == 0:
            break
        moved += n
    return moved


def _with_keys(entries: Sequence[bytes]) -> list[tuple[bytes, str, Optional[str]]]:
    """(entry, message id, dedup key or None) of each entry, for dlq_delete."""
    out = []
    for raw in entries:
        d = DeadLetter(raw)
        msg = d.message()
        out.append((raw, d.ref, msg.dedup_key if msg is not None else None))
    return out


def purge(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    """Delete the dead letters with these message ids (None: all); returns
    how many. The dedup key of a purged message is freed (when it still
    names that message), so the key can be used again at once.

    A whole purge sets the list aside in one step (broker.contents.dlq_set_aside),
    then frees the dedup keys of what it held, page by page, and deletes it:
    an entry requeued meanwhile by another operator was requeued before the
    purge took the list, and keeps its key. Each partition in turn."""
    return sum(_purge(broker, part, ids) for part in broker.queues.partition_names(queue))


def _purge(broker: Broker, queue: str, ids: Optional[Sequence[str]]) -> int:
    if ids is not None:
        return broker.contents.dlq_delete(queue, _with_keys(_select(broker, queue, set(ids))))
    aside, count = broker.contents.dlq_set_aside(queue)
    start = 0
    while start < count:
        page = broker.contents.list_page(aside, start, PAGE)
        if not page:
            break
        held = [entry for entry in _with_keys(page) if entry[2] is not None]
        if held:
            # Deleting these shifts the rest of the list back.
            start -= broker.contents.dlq_delete(queue, held, dead_key=aside)
        start += len(page)
    broker.contents.delete(aside)
    return count
