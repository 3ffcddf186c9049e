"""``smqsup dlq``: list, requeue or purge a queue's dead letters (the view is
views/deadletters.py).

    smqsup dlq (-c FILE | --url URL) list|requeue|purge QUEUE [--id ID]... [--limit N] [--json]

Every value listed comes from Redis, which anybody may have written: it is
escaped to one bounded line (or strict ASCII JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from smqsup import safe
from smqsup.cli.common import (
    BY_FILE_OR_URL,
    EXIT_OK,
    JSON_LINES,
    Commands,
    Parser,
    add_command,
    arg,
    connect,
    listing_limit,
    target,
)
from smqsup.config.names import validate_queue_name


def add_dlq(sub: Commands[Parser]) -> None:
    """The parser of ``smqsup dlq``."""
    add_command(sub, "dlq", "list, requeue or purge dead letters", *BY_FILE_OR_URL,
                arg("action", choices=["list", "requeue", "purge"]), arg("queue"), listing_limit("entries"),
                arg("--id", action="append", default=[], dest="ids", metavar="MESSAGE_ID",
                    help="only these messages (repeatable); default: all"),
                JSON_LINES)


def cmd_dlq(args: argparse.Namespace) -> int:
    """``smqsup dlq``: list the dead letters chosen, or requeue or purge them and say how many."""
    url, namespace, _ = target(args)
    validate_queue_name(args.queue)
    # Here, after the config's errors: the view imports the store, and so
    # redis-py (see cli.common.connect).
    from smqsup.views import deadletters

    broker = connect(url, namespace)
    ids = args.ids or None
    try:
        if args.action == "list":
            entries = (deadletters.select(broker, args.queue, set(ids))[:args.limit] if ids
                       else deadletters.newest(broker, args.queue, args.limit))
            _print_dead([deadletters.row(e) for e in entries], args.json)
        elif args.action == "requeue":
            print(f"requeued {deadletters.requeue(broker, args.queue, ids)} dead letter(s) of {args.queue}")
        else:
            print(f"purged {deadletters.purge(broker, args.queue, ids)} dead letter(s) of {args.queue}")
    finally:
        broker.close()
    return EXIT_OK


def _print_dead(rows: list[dict[str, Any]], as_json: bool) -> None:
    """Dead letters as JSON lines (ASCII, strict) or as one escaped line each."""
    for row in rows:
        if as_json:
            print(json.dumps(row, ensure_ascii=True))
            continue
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["dead_at"])) if row["dead_at"] else "?"
        body = row["body"] if row["malformed"] or row.get("cut") else json.dumps(row["body"], ensure_ascii=False)
        print(f"{safe.escape(row['id'])}  {when}  attempts={row['attempts']}  "
              f"reason={safe.escape(row['reason'], 500)}  body={safe.escape(body, 200)}")
    if not as_json:
        print(f"{len(rows)} dead letter(s)", file=sys.stderr)
