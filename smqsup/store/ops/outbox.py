"""The outboxes in queues' deps sets (scripts/includes/deps.lua): entries a
script left, in the same step as a message's end, for a step on another
slot (a child to tell, a batch to count a member's end in). Read by kind,
grouped by the target they are for, one script call a target, removed
once that call ran: a crash between runs the call again, which the
scripts make harmless. The entries of a target whose call Redis refused
are set aside (parked.py), so that they hold none of the others; the
collector tries them again from there (``parked`` entries: the same
calls, forgotten from the parked set once they ran)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Optional

from smqsup.store import scripts
from smqsup.store.core.failures import wrapped
from smqsup.store.ops import parked as parked_mod
from smqsup.store.sync.session import Session

log = logging.getLogger(__name__)

#: Outbox entries one drain reads at once.
DRAIN_BATCH = 500

#: A target (its queue partition, an id) -> the fields of each of its entries, and the entries' bytes.
Groups = dict[tuple[str, str], tuple[list[list[str]], list[bytes]]]


def split_entry(entry: bytes, fields: int) -> Optional[list[str]]:
    """The fields of a deps entry, or None for bytes that are not one."""
    try:
        parts = entry.decode("utf-8").split("\t", fields - 1)
    except UnicodeDecodeError:
        return None
    return parts if len(parts) == fields else None


def reason_of(meta: "str | bytes") -> str:
    """The reason in a dead letter's metadata (JSON text), or "dead"."""
    try:
        reason = json.loads(meta).get("reason")
    except (ValueError, AttributeError, RecursionError):
        return "dead"
    return reason if isinstance(reason, str) else "dead"


def read(session: Session, name: str, kind: str) -> list[bytes]:
    """Up to DRAIN_BATCH outbox entries of ``kind`` ("o", "B", "S") in partition ``name``'s deps set."""
    with wrapped(f"read the outbox of {name!r}"):
        return list(session.client.zrangebylex(session.keys(name).deps, f"[{kind}\t", f"({kind}\n", start=0,
                                            num=DRAIN_BATCH))


#: The kinds of outbox entries a drain reads (scripts/includes/deps.lua).
KINDS = ("o", "B", "S")


def waiting(session: Session, names: Sequence[str]) -> set[str]:
    """Which of partitions ``names`` hold an outbox entry of any kind, or
    entries set aside (parked.py): a look at each in one round trip (on a
    cluster, one per master), so that the collector's idle looks cost one
    round trip for all its queues."""
    batch = scripts.Batch(session.client)
    for name in names:
        for kind in KINDS:
            batch.command("ZRANGEBYLEX", session.keys(name).deps, f"[{kind}\t", f"({kind}\n", "LIMIT", 0, 1)
        batch.command("EXISTS", session.keys(name).outbox_parked)  # (entries set aside: parked.py)
    if not len(batch):
        return set()
    with wrapped("look at the outboxes"):
        replies = session.send(batch)
    found = set()
    per = len(KINDS) + 1
    for n, name in enumerate(names):
        # An error reply (a deps key of another type) counts as waiting: the drain says what it is.
        if any(isinstance(r, Exception) or r for r in replies[n * per:(n + 1) * per]):
            found.add(name)
    return found


def more(name: str, entries: Sequence[bytes]) -> list[str]:
    """[``name``] when ``entries`` filled a whole read (more may wait), else []."""
    return [name] if len(entries) >= DRAIN_BATCH else []


def group(name: str, entries: Sequence[bytes]) -> tuple[Groups, list[bytes]]:
    """The "o" or "B" ``entries`` (six fields: kind, target queue, target
    id, message id, "done" | "dead", data) by target, and those that are
    not one (logged: to be removed)."""
    groups: Groups = {}
    junk: list[bytes] = []
    for entry in entries:
        parts = split_entry(entry, 6)
        if parts is None or parts[4] not in ("done", "dead"):
            log.warning("queue %s: an outbox entry that is not one, dropped: %r", name, entry[:200])
            junk.append(entry)
            continue
        fields, raw = groups.setdefault((parts[1], parts[2]), ([], []))
        fields.append(parts)
        raw.append(entry)
    return groups, junk


def of_kind(entries: Sequence[bytes], kind: str) -> list[bytes]:
    """The ``entries`` (parked ones: any kind) of ``kind``."""
    head = kind.encode() + b"\t"
    return [e for e in entries if e.startswith(head)]


def run(session: Session, name: str, kind: str, groups: Groups,
        call_of: Callable[[str, str, list[list[str]]], scripts.Call[Any]],
        what: str) -> tuple[list[tuple[str, list[bytes]]], list[tuple[tuple[str, str], Any]], list[parked_mod.Failed]]:
    """One call a target of ``groups`` (``call_of(queue, id, fields)``), in
    one round trip; the (target field, entries) of the targets whose call
    ran (parked.py's field, to remove), (target, reply) of each, and the entries of each
    target whose call failed, to set aside (clear)."""
    batch = scripts.Batch(session.client)
    for (queue, target), (fields, _) in groups.items():
        batch.add(call_of(queue, target, fields))
    with wrapped(f"{what} of {name!r}"):
        replies = session.send(batch) if groups else []
    done: list[tuple[str, list[bytes]]] = []
    failed: list[parked_mod.Failed] = []
    ran = []
    for (key, (_, raw)), reply in zip(groups.items(), replies):
        field = parked_mod.field_of(kind, key[0])
        if isinstance(reply, Exception):
            failed.append(parked_mod.Failed(field, str(reply), key[1], raw))
            continue
        done.append((field, raw))
        ran.append((key, reply))
    return done, ran, failed


def clear(session: Session, name: str, junk: Sequence[bytes], done: Sequence[tuple[str, Sequence[bytes]]],
          failed: Sequence[parked_mod.Failed], *, parked: bool) -> None:
    """Remove the ``junk`` entries and those ``done`` from partition
    ``name``'s deps set (its parked set when they were ``parked`` ones), then
    set the ``failed`` ones aside: an entry is never in both places for long,
    and a crash between runs a call again, which changes nothing."""
    if parked:
        parked_mod.unpark(session, name, [("", list(junk)), *done])
    else:
        entries = [*junk, *(e for _, raw in done for e in raw)]
        if entries:
            with wrapped(f"clear the outbox of {name!r}"):
                session.client.zrem(session.keys(name).deps, *entries)
    parked_mod.park(session, name, failed)
