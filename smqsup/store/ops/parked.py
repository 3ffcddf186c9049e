"""Outbox entries set aside (scripts/outbox_park.lua), so that no entry
holds the others: an entry whose target Redis refused (a key of the wrong
type, OOM, a permission) leaves the deps set and waits in its partition's
parked set, tried again by the elected collector after a backoff that
doubles at each failure on its target queue (OUTBOX_RETRY_BASE_S up to
OUTBOX_RETRY_MAX_S); after OUTBOX_PARK_AFTER failures it counts as parked.
Nothing is lost: once its key is repaired, the next try runs it, once (the
scripts it runs repeat without effect). A record per kind and target
queue (its entries, failures, since when, why, the key Redis named, the
target that failed last) is what ``smqsup status`` and the web UI show; it
goes with its last entry."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from smqsup import defaults, safe
from smqsup.keys import logical_name
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import ms_of, text
from smqsup.store.sync.session import Session

log = logging.getLogger(__name__)

#: What an outbox entry of each kind does, as status names it (includes/deps.lua).
KINDS = {"o": "child", "B": "batch end", "S": "batch callback"}
#: Records (a kind and target queue each) status shows per partition (their count is shown too).
SHOWN = 20
#: Entries set aside that one retry reads at most (as one drain reads of the deps set: store/ops/outbox.py).
DUE_BATCH = 500
#: Longest reason kept in a record, in characters.
_REASON_CHARS = 300
_WRONGTYPE = re.compile(r"WRONGTYPE (\S+) holds a")


def field_of(kind: str, queue: str) -> str:
    """The failures hash's field of the entries of ``kind`` for target queue ``queue``."""
    return f"{kind}\t{queue}"


@dataclass(frozen=True)
class Failed:
    """Entries of one target (``target`` of the queue in ``field``) whose call
    Redis refused, and its reply's text."""

    field: str
    reason: str
    target: str
    entries: Sequence[bytes]


def park(session: Session, name: str, failed: Sequence[Failed]) -> None:
    """Set ``failed`` aside in partition ``name`` (the module's docstring),
    said once per cause in this process."""
    merged: dict[str, Failed] = {}
    for f in failed:
        kind, queue = (f.field.split("\t", 1) + [""])[:2]
        warn_once(log, f"parked:{name}:{kind}:{f.reason}", "queue %s: outbox entries (%s %s of %s) cannot run: "
                  "%s; set aside and tried again with a backoff, shown by smqsup status (said once)", name,
                  KINDS.get(kind, kind), safe.escape(f.target, 100), safe.escape(queue, 100),
                  safe.escape(f.reason, _REASON_CHARS))
        had = merged.get(f.field)
        merged[f.field] = Failed(f.field, f.reason, f.target, [*(had.entries if had else ()), *f.entries])
    if not merged:
        return
    call = scripts.outbox_park(session.keys(name), [(f.field, f.reason[:_REASON_CHARS], f.target, f.entries)
                                                 for f in merged.values()],
                               base_ms=int(defaults.OUTBOX_RETRY_BASE_S * 1000),
                               most_ms=int(defaults.OUTBOX_RETRY_MAX_S * 1000), park_after=defaults.OUTBOX_PARK_AFTER)
    with wrapped(f"set aside outbox entries of {name!r}"):
        call.run(session.client)


def unpark(session: Session, name: str, done: Sequence[tuple[str, Sequence[bytes]]]) -> None:
    """Forget the (target field or "", entries) ``done`` of partition ``name``'s parked set."""
    if any(entries for _, entries in done):
        with wrapped(f"forget parked outbox entries of {name!r}"):
            scripts.outbox_unpark(session.keys(name), done).run(session.client)


def due(session: Session, name: str) -> list[bytes]:
    """Up to DUE_BATCH entries of partition ``name``'s parked set due to be
    tried again (Redis clock), earliest first: one round trip, the clock
    read with the earliest entries."""
    parked = session.keys(name).outbox_parked
    with wrapped(f"read the parked outbox entries of {name!r}"):
        now, [earliest] = session.with_clock(lambda pipe: pipe.zrange(parked, 0, DUE_BATCH - 1,
                                                                   withscores=True))
    now_ms = ms_of(now)
    return [bytes(entry) for entry, score in earliest if score <= now_ms]


def drop_unknown(session: Session, name: str, entries: Sequence[bytes]) -> list[bytes]:
    """``entries`` (parked.due's) of a kind a drain reads; those of no kind
    (anyone may write anything in the parked set) are dropped, said once,
    so that they never fill the reads of the entries behind them."""
    known = tuple(f"{kind}\t".encode() for kind in KINDS)
    junk = [e for e in entries if not e.startswith(known)]
    if junk:
        warn_once(log, f"parked-junk:{name}", "queue %s: %d member(s) of the parked outbox set that are no outbox "
                  "entry, dropped (said once): %r", name, len(junk), junk[0][:100])
        unpark(session, name, [("", junk)])
    return [e for e in entries if e.startswith(known)]


def rows(session: Session, names: Sequence[str]) -> dict[str, tuple[int, list[dict[str, Any]]]]:
    """For each partition of ``names``: how many target queues have entries
    set aside, and the records of up to SHOWN of them (status rows: kind,
    target_queue, target_id (the target that failed last), entries,
    failures, parked, reason, key, since_ms, retry_ms). One round trip; a failures hash of the wrong type
    reads as none, a record that is garbage as a row saying so."""
    pipe = session.client.pipeline(transaction=False)
    for name in names:
        pipe.hlen(session.keys(name).outbox_failures)
        pipe.hscan(session.keys(name).outbox_failures, 0, count=SHOWN)
    with wrapped("read the parked outbox entries"):
        replies = pipe.execute(raise_on_error=False)
    out: dict[str, tuple[int, list[dict[str, Any]]]] = {}
    for n, name in enumerate(names):
        count, scanned = replies[2 * n], replies[2 * n + 1]
        if isinstance(count, Exception) or isinstance(scanned, Exception) or not count:
            out[name] = (0, [])
            continue
        found = sorted(scanned[1].items())[:SHOWN]
        out[name] = (int(count), [_row(text(f), v) for f, v in found])
    return out


def _row(field: str, raw: Any) -> dict[str, Any]:
    """A status row of target ``field``'s record (anyone may have written anything there)."""
    kind, queue = (field.split("\t", 1) + [""])[:2]
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError):
        rec = None
    if not isinstance(rec, dict):
        rec = {"reason": "a record that is not one"}
    said = rec.get("reason")
    reason = said if isinstance(said, str) else ""
    found = _WRONGTYPE.search(reason)
    target = rec.get("target")
    return {"kind": KINDS.get(kind, kind), "target_queue": logical_name(queue),
            "target_id": target if isinstance(target, str) else "",
            "entries": _whole(rec.get("entries")), "failures": _whole(rec.get("failures")),
            "parked": rec.get("parked") is True, "reason": reason, "key": found[1] if found else None,
            "since_ms": _whole(rec.get("since_ms")), "retry_ms": _whole(rec.get("retry_ms"))}


def _whole(value: Any) -> int:
    """A JSON number as a whole number (0 for anything else)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return 0
    return int(min(max(value, -2**62), 2**62))
