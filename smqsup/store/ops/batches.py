"""Batches: messages published together, or added by their own handlers,
whose ends are counted on the batch's home slot (the queue of its
callback), and whose callbacks are published exactly once, when every one
of them has ended. Each step is one script on one slot and repeats without
effect, as a dependency's do (workflows.py):

    Producer.batch(on_complete, on_success)
        ─▶ open()            the batch's hash, in its home's open batches (MULTI)
    batch.publish(...)       publish_options.lua with a session: each member gets
                             a "b" entry on its own slot (includes/deps.lua)
        ─▶ add()             its id in the members set, on the home slot
    a member ends (ack.lua, any dead-lettering)
        ─▶ in the same step a "B" outbox entry on its queue's slot
    drain(member partition)  the consumer at once, the collector every
        ─▶ batch_settle.lua  OUTBOX_LOOK_S: the end counted once, on the home
        ─▶ ZREM "B"          slot; a crash between: counted again, no effect
    batch.close()  ─▶ batch_settle.lua: closed; it fires once every member ended
    firing         ─▶ the callbacks queued in the same step as the "fired" flag
                      (an on_success for another queue: an "S" entry on the
                      home's deps, published by drain() with a dedup key)

A member counts itself at its end too, so a member its handler added and
whose add() was lost (the process died between) is still waited for once it
ended, and the batch never waits for a member that was never published.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from smqsup import defaults, framing
from smqsup.config import names
from smqsup.errors import BrokerConnectionError, BrokerError, MalformedMessage
from smqsup.keys import logical_name, queues_set
from smqsup.store import scripts
from smqsup.store.core.failures import wrapped
from smqsup.store.ops import outbox
from smqsup.store.ops import parked as parked_mod
from smqsup.store.ops.outbox import split_entry
from smqsup.store.sync.session import Session

log = logging.getLogger(__name__)

#: Between a batch's own id and its home queue in the id users see ("ID@orders").
_AT = "@"


def public_id(home: str, batch_id: str) -> str:
    """The id users see of batch ``batch_id`` whose home is ``home``."""
    return f"{batch_id}{_AT}{home}"


def parse_id(text: str) -> Optional[tuple[str, str]]:
    """(home, batch id) of an id public_id() made, or None."""
    batch_id, at, home = text.rpartition(_AT)
    return (home, batch_id) if at and batch_id and home else None


@dataclass(frozen=True)
class BatchStatus:
    """What Redis holds on a batch: its members, how many ended done or
    failed, whether its producer closed it and whether its callbacks fired,
    and the first failures ({"id", "queue", "reason"} each)."""

    id: str
    total: int
    done: int
    failed: int
    closed: bool
    fired: bool
    created_ms: int
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pending(self) -> int:
        return max(0, self.total - self.done - self.failed)

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.id, "total": self.total, "done": self.done, "failed": self.failed,
                "pending": self.pending, "closed": self.closed, "fired": self.fired,
                "created_ms": self.created_ms, "failures": self.failures}


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _failure(entry: Any) -> dict[str, Any]:
    try:
        value = json.loads(entry)
    except (ValueError, TypeError, RecursionError):
        return {"reason": "unreadable"}
    return value if isinstance(value, dict) else {"reason": "unreadable"}


def _failure_of(name: str, fields: list[str]) -> str:
    """The JSON object a dead member of partition ``name`` is listed as in
    its batch's failures ("" for one done), from its "B" entry's fields."""
    if fields[4] == "done":
        return ""
    return json.dumps({"id": fields[3], "queue": logical_name(name), "reason": outbox.reason_of(fields[5])},
                      separators=(",", ":"))


class Batches:
    """Open, grow, close, drain and read batches (module docstring)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def open(self, home: str, batch_id: str, fields: dict[str, Any]) -> None:
        """Record batch ``batch_id`` with home ``home`` and its ``fields``
        (its callbacks' frames: scripts/batch_settle.lua), open."""
        k = self._session.keys(home)
        pipe = self._session.client.pipeline(transaction=True)
        pipe.hset(k.batch(batch_id), mapping={**fields, "closed": 0, "fired": 0, "done": 0, "failed": 0})
        pipe.zadd(k.batches, {batch_id: fields["created_ms"]})
        with wrapped(f"open a batch on {home!r}"):
            pipe.execute()
            # (a slot of its own on a cluster: apart from the MULTI) so that the web UI finds its batches
            self._session.client.sadd(queues_set(self._session.namespace), home)

    def add(self, home: str, batch_id: str, ids: Sequence[str]) -> None:
        """Count ``ids`` as members of the batch (before they can end unseen)."""
        if ids:
            with wrapped(f"add messages to batch {public_id(home, batch_id)!r}"):
                self._session.client.sadd(self._session.keys(home).batch_members(batch_id), *ids)

    def close(self, home: str, batch_id: str) -> bool:
        """Close the batch: no more members from its producer; whether its callbacks fired now."""
        call = scripts.batch_settle(self._session.keys(home), batch_id, [], close=True, keep_s=defaults.BATCH_KEEP_S)
        with wrapped(f"close batch {public_id(home, batch_id)!r}"):
            fired, told = call.run(self._session.client)
        if told:
            self.drain(home)
        return fired

    def drain(self, name: str, parked: Optional[Sequence[bytes]] = None) -> list[str]:
        """Count the ends of partition ``name``'s batch members ("B"
        entries) on their homes, and publish the on_success callbacks for
        other queues it holds as a home ("S"); or those of ``parked``
        (entries set aside and due again). The homes that got "S" entries
        meanwhile, and ``name`` when more wait than one read takes."""
        session = self._session
        entries = outbox.read(session, name, "B") if parked is None else outbox.of_kind(parked, "B")
        groups, junk = outbox.group(name, entries)

        def settle(home: str, bid: str, fields: list[list[str]]) -> scripts.Call[Any]:
            ended = [(f[3], f[4], _failure_of(name, f)) for f in fields]
            return scripts.batch_settle(session.keys(home), bid, ended, close=False, keep_s=defaults.BATCH_KEEP_S)
        done, ran, failed = outbox.run(session, name, "B", groups, settle, "count batch members' ends")
        calls = outbox.read(session, name, "S") if parked is None else outbox.of_kind(parked, "S")
        called, junk_calls, failed_calls = self._callbacks(name, calls)
        outbox.clear(session, name, junk + junk_calls, done + called, failed + failed_calls, parked=parked is not None)
        more = outbox.more(name, entries) + outbox.more(name, calls) if parked is None else []
        return [home for (home, _), (_, told) in ran if told] + more[:1]

    def _callbacks(self, home: str, entries: Sequence[bytes]) -> tuple[
            list[tuple[str, list[bytes]]], list[bytes], list[parked_mod.Failed]]:
        """Publish the on_success callbacks ("S" ``entries``) a batch of
        ``home`` left for other queues, each with a dedup key (a drain that
        died before removing the entry publishes nothing twice): the
        (parked.py's field, [entry]) of those published, the entries that are
        not one, and those Redis refused (to set aside)."""
        done: list[tuple[str, list[bytes]]] = []
        junk: list[bytes] = []
        failed: list[parked_mod.Failed] = []
        for entry in entries:
            parts = split_entry(entry, 3)
            frame = parts[2].encode() if parts is not None else b""
            mid = framing.peek_id(frame)
            try:
                head = framing.frame_head(frame)
            except MalformedMessage:
                mid = None
            if parts is None or mid is None or not names.is_queue_name(parts[1]):
                log.warning("queue %s: a batch callback entry that is not one, dropped: %r", home, entry[:200])
                junk.append(entry)
                continue
            target = parts[1]
            options = scripts.Options(dedup_ttl_ms=defaults.BATCH_KEEP_S * 1000, result_ttl_s=head.result_ttl_s,
                                      events_max=head.events_max)
            call = scripts.publish_options(self._session.keys(target), [(mid, head.payload, f"smqsup:batch:{mid}")],
                                           options, self._session.stats)
            field = parked_mod.field_of("S", target)
            try:
                with wrapped(f"publish a batch callback on {target!r}"):
                    call.run(self._session.client)
            except BrokerConnectionError:
                raise
            except BrokerError as exc:  # (one callback Redis refuses holds none of the others)
                failed.append(parked_mod.Failed(field, str(exc), mid, [entry]))
                continue
            done.append((field, [entry]))
        return done, junk, failed

    def status(self, home: str, batch_id: str) -> Optional[BatchStatus]:
        """The batch's status, or None when Redis holds none (never opened,
        or BATCH_KEEP_S after it fired)."""
        k = self._session.keys(home)
        pipe = self._session.client.pipeline(transaction=False)
        pipe.hmget(k.batch(batch_id), ["closed", "fired", "done", "failed", "created_ms"])
        pipe.scard(k.batch_members(batch_id))
        pipe.lrange(k.batch_failures(batch_id), 0, 99)
        with wrapped(f"read batch {public_id(home, batch_id)!r}"):
            (closed, fired, done, failed, created), total, failures = pipe.execute()
        if created is None:
            return None
        return BatchStatus(public_id(home, batch_id), _int(total), _int(done), _int(failed), closed == b"1",
                           fired == b"1", _int(created), [_failure(f) for f in failures])

    def member_of(self, name: str, message_id: str) -> Optional[tuple[str, str]]:
        """(home, batch id) of the batch message ``message_id`` of partition
        ``name`` is a member of, or None."""
        with wrapped(f"read the batch of message {message_id!r} of {name!r}"):
            entries = self._session.client.zrangebylex(self._session.keys(name).deps, f"[b\t{message_id}\t",
                                                    f"(b\t{message_id}\n", start=0, num=1)
        parts = split_entry(entries[0], 4) if entries else None
        return (parts[2], parts[3]) if parts is not None else None

    def open_ids(self, home: str, limit: int = 100) -> list[str]:
        """The ids (public) of the open batches whose home is ``home``, oldest first."""
        with wrapped(f"list the open batches of {home!r}"):
            ids = self._session.client.zrange(self._session.keys(home).batches, 0, limit - 1)
        return [public_id(home, bytes(i).decode("utf-8", "replace")) for i in ids]
