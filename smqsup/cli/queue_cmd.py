"""The operator's commands on one queue: ``smqsup pause`` and ``resume``
(the flag every consumer of the queue obeys), ``smqsup messages`` (what
waits, what is held, what died: browse.py) and ``smqsup remove`` (delete
waiting messages by id).

    smqsup pause (-c FILE | --url URL) QUEUE [--group NAME]
    smqsup resume (-c FILE | --url URL) QUEUE [--group NAME]
    smqsup messages (-c FILE | --url URL) QUEUE [--state STATE] [--limit N] [--group NAME] [--json]
    smqsup remove (-c FILE | --url URL) QUEUE ID...

Each command reaches Redis as ``smqsup dlq`` does (cli.common.queue_broker: -c FILE,
--url, $SMQSUP_REDIS_URL, --namespace). Every value shown comes from Redis,
which anybody may have written: it is escaped to one bounded line.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
from typing import TYPE_CHECKING, Any, Optional

from smqsup import safe
from smqsup.cli.common import (
    BY_FILE_OR_URL,
    EXIT_OK,
    JSON_LINES,
    QUEUE,
    Arg,
    Commands,
    Parser,
    add_command,
    arg,
    listing_limit,
    queue_broker,
)
from smqsup.cli.publish_cmd import parse_group
from smqsup.views.text import local_time, paused_since

if TYPE_CHECKING:
    from smqsup.store.broker import Broker

EXIT_NOT_ALL = 1
#: Why ``remove`` may not find an id: it cannot tell which, once the id is gone.
_NOT_WAITING = "(held by a consumer, dead, or unknown)"
#: What ``messages`` lists without --state (one of views.browse.STATES).
_DEFAULT_STATE = "pending"
#: A message id (message.check_message_id) or a listing's ``raw-`` reference.
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: What ``pause`` and ``resume`` say: by command, whether a group was named, whether the flag changed.
_SAID = {
    ("pause", False, True): "paused {queue}: its consumers on every host take nothing until `smqsup resume {queue}`",
    ("pause", False, False): "{queue} was already paused ({since}); nothing changed",
    ("pause", True, True): "paused group {group} of {queue}: its messages wait until `smqsup resume {queue} --group`",
    ("pause", True, False): "group {group} of {queue} was already paused; nothing changed",
    ("resume", False, True): "resumed {queue}: its consumers take messages again",
    ("resume", False, False): "{queue} was not paused; nothing changed",
    ("resume", True, True): "resumed group {group} of {queue}: it takes its turns again",
    ("resume", True, False): "group {group} of {queue} was not paused; nothing changed",
}


# --- arguments ---------------------------------------------------------------


def add_pause_resume(sub: Commands[Parser]) -> None:
    """The parsers of ``smqsup pause`` and ``smqsup resume``."""
    for name, help in (("pause", "stop every consumer of QUEUE taking messages, on every host, until resume"),
                       ("resume", "let the consumers of a paused QUEUE take messages again")):
        add_command(sub, name, help, *BY_FILE_OR_URL, QUEUE,
                    arg("--group", type=parse_group, metavar="NAME", help=f"{name} only this message group of QUEUE"))


def add_messages(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup messages``."""
    add_command(sub, "messages", "list the messages of QUEUE that are pending, scheduled, processing or dead",
                *BY_FILE_OR_URL, QUEUE,
                arg("--state", type=_state, default=_DEFAULT_STATE,
                    help="pending (ready to be taken; the default), scheduled (published for later, and retries "
                         "waiting, soonest first), processing (held by a consumer) or dead (newest first)"),
                listing_limit("messages"),
                arg("--group", type=parse_group, metavar="NAME", help="only the messages of this message group"),
                JSON_LINES)


def add_remove(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup remove``."""
    add_command(sub, "remove", "delete waiting messages of QUEUE by id (exit 1 if some were not removed)",
                *BY_FILE_OR_URL, QUEUE,
                _ids("a message id, or the raw-... reference `smqsup messages` shows for a malformed one"),
                description="Delete messages of QUEUE that wait (pending, scheduled, or a retry waiting), "
                            "by id, freeing their dedup keys. A message a consumer holds is never touched "
                            "(nor a dead letter: see smqsup dlq purge). Exit 0 when every id was removed; "
                            "1, with a summary on stderr, when some were not: held by a consumer, "
                            "dead-lettered, already removed, or unknown. Put -- before ids that start "
                            "with '-'.")


def add_cancel(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup cancel``."""
    add_command(sub, "cancel", "cancel messages of QUEUE by id (exit 1 if some were unknown or had ended)",
                *BY_FILE_OR_URL, QUEUE, _ids("a message id"),
                description="Cancel messages of QUEUE, tracked or not: a waiting, scheduled or retrying "
                            "one is dead-lettered \"cancelled\" at once; one a consumer holds is stopped "
                            "within a fraction of a second (a task cancelled, a thread told, a process replaced) "
                            "and dead-lettered \"cancelled\", never retried. Cancelling again is harmless. "
                            "Exit 0 when each was cancelled or is stopping; 1 when some had already ended "
                            "or are unknown.")


def _ids(help: str) -> Arg:
    """ID...: the messages a command acts on, one at least."""
    return arg("ids", nargs="+", type=_message_id, metavar="ID", help=help)


def _state(text: str) -> str:
    if text == _DEFAULT_STATE:  # argparse passes the default through here too: a bad config's error needs no store
        return text
    # Here, not at the top: browse imports the store, and so redis-py (see
    # cli.common.connect); only a --state given needs its list.
    from smqsup.views.browse import STATES

    if text not in STATES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(STATES)}, got {safe.escape(repr(text), 60)}")
    return text


def _message_id(text: str) -> str:
    """An id as ``smqsup messages`` shows it: 1 to 128 of A-Z a-z 0-9 _ . : -
    (a ``raw-`` reference is one of them)."""
    if not _ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a message id (1 to 128 of A-Z a-z 0-9 _ . : -), "
                                         f"got {safe.escape(repr(text), 60)}")
    return text


# --- commands ----------------------------------------------------------------


def cmd_pause(args: argparse.Namespace) -> int:
    """``smqsup pause``: set the paused flag of the queue, or of one group of it (or say who set it)."""
    return _set_paused(args, pause=True)


def cmd_resume(args: argparse.Namespace) -> int:
    """``smqsup resume``: clear the paused flag of the queue, or of one group of it."""
    return _set_paused(args, pause=False)


def _set_paused(args: argparse.Namespace, pause: bool) -> int:
    """Set (``pause``) or clear the paused flag of the queue, or of the group
    --group names; say what changed (_SAID)."""
    group = args.group
    with queue_broker(args) as (broker, queue):
        by = f"cli@{socket.gethostname()}"
        if group is None:
            changed = broker.queues.pause(queue, by=by) if pause else broker.queues.resume(queue)
        else:
            changed = broker.groups.pause(queue, group, by=by) if pause else broker.groups.resume(queue, group)
        since = _pause_info(broker, queue) if pause and not changed and group is None else ""
        said = _SAID["pause" if pause else "resume", group is not None, changed]
        print(said.format(queue=queue, group=safe.escape(group or "", 80), since=since))
    return EXIT_OK


def cmd_messages(args: argparse.Namespace) -> int:
    """``smqsup messages``: list a queue's messages in one state."""
    with queue_broker(args) as (broker, queue):
        # Here, after the config's errors: browse imports the store (see cli.common.connect).
        from smqsup.views import browse

        rows = browse.listing(broker, queue, args.state, args.limit, args.group)
        total = None
        if len(rows) == args.limit and not args.json and args.group is None:
            total = _total(broker, queue, args.state)
    for row in rows:
        print(json.dumps(row, ensure_ascii=True) if args.json else _line(row))
    if args.json:
        return EXIT_OK
    if total is not None and total > len(rows):
        print(f"{len(rows)} of {total} {args.state} message(s) of {queue} (--limit N shows more)", file=sys.stderr)
    else:
        print(f"{len(rows)} {args.state} message(s) of {queue}", file=sys.stderr)
    return EXIT_OK


def _total(broker: Broker, queue: str, state: str) -> Optional[int]:
    """How many messages of ``queue`` are in ``state`` (None for processing:
    no one count holds it)."""
    if state == "processing":
        return None
    sizes = broker.statistics.total_sizes(queue)
    return {"pending": sizes["pending"], "scheduled": sizes["scheduled"] + sizes["delayed"]}.get(state, sizes["dead"])


def cmd_remove(args: argparse.Namespace) -> int:
    """``smqsup remove``: delete waiting messages by id; EXIT_NOT_ALL when some were not."""
    ids = list(dict.fromkeys(args.ids))  # an id given twice is removed once, reported once
    with queue_broker(args) as (broker, queue):
        # Here, after the config's errors: browse imports the store (see cli.common.connect).
        from smqsup.views import browse

        done = browse.remove(broker, queue, ids)
    for mid in ids:
        print(f"removed {mid}" if done[mid] else f"not removed {mid}: not waiting {_NOT_WAITING}")
    missed = sum(not removed for removed in done.values())
    if not missed:
        return EXIT_OK
    print(f"smqsup remove: {missed} of {len(ids)} message(s) not removed from {queue}", file=sys.stderr)
    return EXIT_NOT_ALL


def cmd_cancel(args: argparse.Namespace) -> int:
    """``smqsup cancel``: cancel messages by id; EXIT_NOT_ALL when some had ended or are unknown."""
    ids = list(dict.fromkeys(args.ids))
    with queue_broker(args) as (broker, queue):
        answers = {mid: broker.contents.cancel(broker.queues.partition_names(queue), mid) for mid in ids}
    for mid, answer in answers.items():
        print({"cancelled": f"cancelled {mid}", "stopping": f"stopping {mid}: a consumer holds it",
               "unknown": f"unknown {mid}: not waiting or held (finished untracked, or never published)"}.get(
                   answer, f"not cancelled {mid}: it had already ended ({answer})"))
    missed = sum(answer not in ("cancelled", "stopping") for answer in answers.values())
    if not missed:
        return EXIT_OK
    print(f"smqsup cancel: {missed} of {len(ids)} message(s) not cancelled in {queue}", file=sys.stderr)
    return EXIT_NOT_ALL


# --- helpers -----------------------------------------------------------------


def _pause_info(broker: Broker, queue: str) -> str:
    """Who paused the queue and when, as its flag says (anybody may have
    written it: each part is checked, and shown escaped)."""
    raw = broker.queues.paused_flag(queue)
    try:
        info = json.loads(raw) if raw is not None else {}
    except (ValueError, RecursionError):  # not UTF-8, not JSON
        info = {}
    return paused_since(info if isinstance(info, dict) else {})


def _line(row: dict[str, Any]) -> str:
    """One listed message on one escaped line."""
    parts = [safe.escape(row["id"], 200), local_time(row["created_at"]), f"attempts={_known(row['attempts'])}"]
    if row["priority"] is not None:
        parts.append(f"priority={row['priority']}")
    if row["due_at"] is not None:
        parts.append(f"due={local_time(row['due_at'])}" + (" (retry)" if row["retry"] else ""))
    parts.append(f"size={row['size']}B")
    if row["consumer"] is not None:
        parts.append(f"consumer={safe.escape(row['consumer'], 200)}")
    if row.get("reason") is not None:
        parts.append(f"reason={safe.escape(row['reason'], 500)}")
    if row["malformed"]:
        parts.append("malformed")
    if row.get("cut"):
        parts.append("cut")  # too large to read whole: what its head holds
    parts.append(f"body={safe.escape(row['preview'], 300)}")
    return "  ".join(parts)


def _known(value: Optional[int]) -> str:
    return "?" if value is None else str(value)
