"""``smqsup events``: a queue's lifecycle events (queue option ``events:
true``), oldest first, as text or JSON lines; with --follow, the ones that
come next too, until SIGINT or SIGTERM (losing Redis meanwhile: a note, and
it follows on from where it was once Redis is back).

    smqsup events (-c FILE | --url URL) QUEUE [--since X] [--follow] [--json] [--limit N]

Anybody who may write to Redis may write into an event stream: every id and
datum shown is escaped to one bounded line (safe.escape), every JSON line is
ASCII, so nothing printed is a terminal sequence.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

from smqsup import safe
from smqsup.cli.common import (
    BY_FILE_OR_URL,
    EXIT_OK,
    JSON_LINES,
    QUEUE,
    Commands,
    Parser,
    add_command,
    arg,
    limit,
    queue_broker,
)
from smqsup.client import since as since_rule

if TYPE_CHECKING:
    from smqsup.store.broker import Broker
    from smqsup.store.core.event_entries import Event

#: Longest id, and longest datum, a text line shows, in characters.
_ID_CHARS, _DATA_CHARS = 200, 2000
#: Widest event name ("published", "cancelled"...): the column after it lines up.
_EVENT_WIDTH = 9


def add_events(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup events``."""
    add_command(sub, "events", "the lifecycle events of QUEUE (its option events: true), oldest first",
                *BY_FILE_OR_URL, QUEUE,
                arg("--since", type=since, default=None, metavar="WHEN",
                    help="now (only what comes next), a cursor MS-SEQ (--json shows each event's: the ones after "
                         "it), unix seconds or an ISO-8601 time (UTC unless it says otherwise): the events from "
                         "then on (default: from the oldest the stream keeps)"),
                arg("--follow", action="store_true", help="keep waiting for new events until SIGINT or SIGTERM"),
                JSON_LINES, arg("--limit", type=limit, default=None, help="stop after N events (1 to 100000)"),
                description="Print the events of QUEUE's messages (published, released, started, progress, retried, "
                            "done, dead, expired, cancelled, removed, reclaimed, returned, requeued), "
                            "oldest first, one a line: time (UTC), event, message id, attempts, data. "
                            "Only a queue whose consumers run with events: true has any.")


def since(text: str) -> Any:
    """--since: what client/since.py reads (the rule Producer.events
    follows too): "now" or a cursor (kept as text), a time as unix seconds."""
    try:
        return since_rule.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_events(args: argparse.Namespace) -> int:
    """``smqsup events``: print the queue's events; with --follow, until SIGINT or SIGTERM."""
    # Here, not at the top: Reading imports the store, and so redis-py (see cli.common.connect).
    from smqsup.client.event_cursor import Reading, read_on

    reading = Reading(args.since)
    shown = 0
    with queue_broker(args) as (broker, queue), _stopping(args.follow) as stop:
        _note_events_off(broker, queue)
        for event in read_on(broker, queue, reading, args.follow, lambda: bool(stop), _lost):
            print(_json_line(event) if args.json else _line(event, queue), flush=args.follow)
            shown += 1
            if shown == args.limit:
                break
    return EXIT_OK


def _lost(error: Optional[Exception]) -> None:
    """--follow lost Redis (``error``), or has it back (None): a note on stderr, then it tries again."""
    if error is None:
        print("smqsup events: note: Redis is back; following on", file=sys.stderr, flush=True)
    else:
        print(f"smqsup events: note: Redis lost ({safe.shown(error)}); trying again until it is back",
              file=sys.stderr, flush=True)


@contextmanager
def _stopping(follow: bool) -> Iterator[list[int]]:
    """A list a SIGINT or SIGTERM is recorded in while following (the
    handlers only record it: the loop stops, and the command exits 0);
    without ``follow`` the signals keep their default meaning."""
    stop: list[int] = []
    if not follow:
        yield stop
        return
    before = {sig: signal.signal(sig, lambda signum, _frame: stop.append(signum))
              for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _note_events_off(broker: Broker, queue: str) -> None:
    """A note on stderr when the queue's consumers have not declared events
    (nothing new is written to its stream; what it keeps is still shown)."""
    if broker.queues.declared(queue)[1].events_max == 0:
        print(f"smqsup events: note: the consumers of {queue} have not declared events: true "
              f"(set it on the queue in queues.yaml to record its messages' events)", file=sys.stderr)


def _line(event: Event, queue: str) -> str:
    """One event on one escaped line: time, event, id, attempts, [partition], [data]."""
    parts = [_utc(event.at_ms), event.event.ljust(_EVENT_WIDTH), safe.escape(event.message_id or "-", _ID_CHARS),
             f"attempts={event.attempts}"]
    if event.queue != queue:
        parts.append(f"partition={safe.escape(event.queue, _ID_CHARS)}")
    if event.data is not None:
        parts.append(safe.escape(_compact(event.data), _DATA_CHARS))
    return "  ".join(parts)


def _utc(at_ms: int) -> str:
    """``at_ms`` as an ISO-8601 UTC time with ms ("?" past year 9999: an id someone chose)."""
    try:
        when = datetime.fromtimestamp(at_ms // 1000, tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return "?"
    return f"{when:%Y-%m-%dT%H:%M:%S}.{at_ms % 1000:03d}Z"


def _compact(data: Any) -> str:
    """``data`` as compact JSON (escaped by the caller)."""
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError):
        return "(data not printable as JSON)"


def _json_line(event: Event) -> str:
    """The event as one line of strict, ASCII JSON (data that cannot be,
    NaN or nested too deep, as its escaped text)."""
    row = event.to_json()
    try:
        return json.dumps(row, ensure_ascii=True, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        row["data"] = safe.escape(_compact(event.data), _DATA_CHARS)
        return json.dumps(row, ensure_ascii=True)
