"""Dependencies between messages: a child held until its parents are done,
its parents on any queues, partitions and Redis Cluster nodes. Each step is
one script on one slot, and each can run again without effect, so whoever
finds a step undone finishes it: the producer, the consumer that acked a
parent, or the elected collector after a crash.

    publish(child, depends_on=parents)
        ─▶ locate()      the partition holding each parent's record
        ─▶ hold.lua      child's slot: the child aside ("blocked"), one "w"
                         entry per parent, an "h" mark (not all told yet)
        ─▶ depend.lua    each parent partition's slot: a "c" entry per
                         parent still running, or the outcome of one ended
        ─▶ unblock.lua   child's slot: the outcomes known now, "h" removed;
                         with no "w" left the child enters its queue
    a parent ends (ack.lua, any dead-lettering: includes/deps.lua)
        ─▶ in the same step its "c" entries become "o" outbox entries
    drain(parent partition)  the consumer at once, the collector every
        ─▶ unblock.lua       OUTBOX_LOOK_S: each child told, then its "o"
        ─▶ ZREM "o"          entries go (a crash between: told again, no effect)
    repair_holds(partition)  the collector: "h" marks older than
                             HOLD_REPAIR_S (a producer died) run depend and
                             unblock again

A parent must be tracked (result_ttl): its record says whether it ended and
keeps the result its children read (message.parents).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from smqsup import defaults
from smqsup.errors import BrokerConnectionError, BrokerError
from smqsup.keys import logical_name
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import ms_of
from smqsup.store.ops import outbox
from smqsup.store.ops.batches import Batches
from smqsup.store.ops.outbox import split_entry
from smqsup.store.ops.parked import drop_unknown
from smqsup.store.ops.parked import due as due_parked
from smqsup.store.ops.parked import rows as parked_rows
from smqsup.store.ops.queues import Queues
from smqsup.store.scripts.workflow_calls import DEDUPLICATED, HELD, IN_USE
from smqsup.store.sync.session import Session

log = logging.getLogger(__name__)

__all__ = ["DEDUPLICATED", "HELD", "IN_USE", "Parents", "Workflows", "failed_meta"]

#: Hold marks one repair_holds reads (the next goes on from the last).
_HOLDS_READ = 100
#: Parent ids one depend.lua call registers.
_DEPEND_CHUNK = 1000


def failed_meta(queue: str, parent_id: str, why: str) -> bytes:
    """The dead-letter metadata of a child whose parent ``queue``/``parent_id``
    failed for reason ``why``."""
    return scripts.meta_json(f"dependency failed: {queue}/{parent_id} ({why})",
                             parent=f"{queue}/{parent_id}").encode()


def _outcome(partition: str, parent_id: str, outcome: str, data: bytes) -> tuple[str, str, str, bytes]:
    """The outcome of a parent as unblock.lua takes it: a failure turned into
    the child's dead-letter metadata."""
    if outcome == "done":
        return partition, parent_id, "done", data
    why = outbox.reason_of(data) if outcome == "dead" else "unknown: never tracked, or past its result_ttl"
    return partition, parent_id, "dead", failed_meta(logical_name(partition), parent_id, why)


@dataclass(frozen=True)
class Parents:
    """What a child's parents became: ``done`` maps (queue, id) to the
    parent's result (decoded JSON), ``failed`` (queue, id) to the reason the
    child would have died for (on_parent_failure="run")."""

    done: dict[tuple[str, str], Any]
    failed: dict[tuple[str, str], str]


class Workflows:
    """Hold, register, release and read dependencies (module docstring)."""

    def __init__(self, session: Session, queues: Queues, batches: Batches) -> None:
        self._session = session
        self._queues = queues
        self._batches = batches
        self._holds_from: dict[str, bytes] = {}  # repair_holds' place in each partition's hold marks

    def locate(self, parents: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Optional[str]]:
        """The partition holding the record of each (queue, id) of
        ``parents``, or None where none does (one pipelined round trip)."""
        session = self._session
        names = {q: self._queues.partition_names(q) for q in {q for q, _ in parents}}
        batch = scripts.Batch(session.client)
        asked: list[tuple[str, list[str]]] = []
        for q, partitions in names.items():
            ids = [mid for pq, mid in parents if pq == q]
            for name in partitions:
                for i in range(0, len(ids), _DEPEND_CHUNK):
                    chunk = ids[i:i + _DEPEND_CHUNK]
                    batch.command("HMGET", session.keys(name).tracked, *chunk)
                    asked.append((name, chunk))
        with wrapped("find the parents' records"):
            replies = session.send(batch)
        found: dict[tuple[str, str], Optional[str]] = {p: None for p in parents}
        for (name, chunk), reply in zip(asked, replies):
            if isinstance(reply, Exception):
                continue
            for mid, value in zip(chunk, reply):
                key = (logical_name(name), mid)
                if value is not None and found.get(key) is None:
                    found[key] = name
        return found

    def hold(self, name: str, message_id: str, kept: bytes, waits: Sequence[tuple[str, str]],
             dedup_key: Optional[str], dedup_ttl_ms: int) -> tuple[int, str, str]:
        """Hold ``kept`` ("D:T:F|frame") in partition ``name`` waiting for
        ``waits`` (parent partition, id); (HELD, id, its hold mark for
        register()), (DEDUPLICATED, the holder's id, "") or (IN_USE, id, "")."""
        session = self._session
        call = scripts.hold(session.keys(name), message_id, kept, [f"{p}\t{mid}" for p, mid in waits],
                            count=session.stats, dedup_key=dedup_key, dedup_ttl_ms=dedup_ttl_ms)
        with wrapped(f"hold message {message_id!r} of {name!r}"):
            return call.run(session.client)

    def register(self, name: str, message_id: str, waits: Sequence[tuple[str, str]], mark: str = "") -> str:
        """Register held ``message_id`` of partition ``name`` with each of
        ``waits`` (parent partition, id), tell it the outcomes of those that
        ended, and remove its hold ``mark``; what unblock.lua said
        ("released", "dead", "waiting", "gone")."""
        session = self._session
        child = f"{name}\t{message_id}"
        by_partition: dict[str, list[str]] = {}
        for partition, mid in waits:
            by_partition.setdefault(partition, []).append(mid)
        batch = scripts.Batch(session.client)
        asked: list[str] = []
        for partition, ids in by_partition.items():
            for i in range(0, len(ids), _DEPEND_CHUNK):
                batch.add(scripts.depend(session.keys(partition), child, ids[i:i + _DEPEND_CHUNK]))
                asked.append(partition)
        with wrapped(f"register message {message_id!r} of {name!r} with its parents"):
            replies = session.send(batch) if asked else []
        outcomes = []
        for partition, reply in zip(asked, replies):
            if isinstance(reply, Exception):
                # The hold keeps its mark: the collector registers it again.
                with wrapped(f"register message {message_id!r} of {name!r} with its parents in {partition!r}"):
                    raise reply
            outcomes += [_outcome(partition, pid, out, data) for pid, out, data in reply if out != "wait"]
        with wrapped(f"tell message {message_id!r} of {name!r} its parents' outcomes"):
            status, _ = scripts.unblock(session.keys(name), message_id, outcomes, mark).run(session.client)
        return status

    def drain(self, name: str, parked: Optional[Sequence[bytes]] = None) -> list[str]:
        """Tell the children of partition ``name``'s ended messages (its
        outbox: "o" entries; or those of ``parked``, entries set aside and
        due again); the partitions whose own outbox got entries meanwhile
        (children dead-lettered with children of their own), and ``name``
        when more wait than one read takes."""
        session = self._session
        entries = outbox.read(session, name, "o") if parked is None else outbox.of_kind(parked, "o")
        groups, junk = outbox.group(name, entries)

        def unblock(cq: str, cid: str, fields: list[list[str]]) -> scripts.Call[Any]:
            return scripts.unblock(session.keys(cq), cid, [_outcome(name, f[3], f[4], f[5].encode()) for f in fields])
        done, ran, failed = outbox.run(session, name, "o", groups, unblock, "tell the children")
        outbox.clear(session, name, junk, done, failed, parked=parked is not None)
        return [cq for (cq, _), (_, told) in ran if told] + (outbox.more(name, entries) if parked is None else [])

    def parked(self, queues: Sequence[str]) -> dict[str, tuple[int, list[dict[str, Any]]]]:
        """For each of ``queues`` (all its partitions): how many records (a
        kind and target queue each) of outbox entries set aside it holds, and
        some of them as status rows (store/ops/parked.py)."""
        parts = {q: self._queues.partition_names(q) for q in queues}
        found = parked_rows(self._session, [p for names in parts.values() for p in names])
        return {q: (sum(found[p][0] for p in names), [r for p in names for r in found[p][1]])
                for q, names in parts.items()}

    def outboxes_waiting(self, names: Sequence[str]) -> set[str]:
        """The partitions of ``names`` whose outbox holds anything (one round trip)."""
        return outbox.waiting(self._session, names)

    def drain_all(self, name: str) -> None:
        """drain() ``name`` and every partition its children's ends put
        entries in, until none is left or DRAIN_ROUNDS passed."""
        todo = [name]
        for _ in range(defaults.DRAIN_ROUNDS):
            if not todo:
                return
            todo = [more for n in dict.fromkeys(todo) for more in (*self.drain(n), *self._batches.drain(n))]

    def retry_parked(self, name: str) -> int:
        """Try again the outbox entries of partition ``name`` set aside and
        due now (store/ops/parked.py), up to DUE_BATCH; how many were due. The
        partitions their calls gave entries are drained (drain_all)."""
        due = drop_unknown(self._session, name, due_parked(self._session, name))
        if due:
            for more in dict.fromkeys((*self.drain(name, due), *self._batches.drain(name, due))):
                self.drain_all(more)
        return len(due)

    def repair_holds(self, name: str, older_than_ms: int) -> int:
        """Finish the holds of partition ``name`` whose producer stopped
        before telling all their parents (an "h" mark older than
        ``older_than_ms``); how many were."""
        session = self._session
        deps = session.keys(name).deps
        start = self._holds_from.get(name, b"[h\t")
        with wrapped(f"read the holds of {name!r}"):
            now, [marks] = session.with_clock(lambda pipe: pipe.zrangebylex(deps, start, "(h\n", start=0,
                                                                         num=_HOLDS_READ))
        # The next read goes on past these: a hold that cannot be registered
        # (or is too young) holds none behind it; a short read starts again.
        self._holds_from[name] = b"(" + marks[-1] if len(marks) >= _HOLDS_READ else b"[h\t"
        now_ms = ms_of(now)
        repaired = 0
        for mark in marks:
            parts = split_entry(mark, 3)
            if parts is None or not (parts[2].isascii() and parts[2].isdigit()):
                with wrapped(f"drop a hold mark of {name!r} that is not one"):
                    session.client.zrem(deps, mark)
                continue
            if now_ms - int(parts[2]) < older_than_ms:
                continue
            try:
                self.register(name, parts[1], self.waits(name, parts[1]), mark.decode())
            except BrokerConnectionError:
                raise
            except BrokerError as exc:  # (one hold Redis refuses costs that hold, not the others' repair)
                warn_once(log, f"hold:{name}:{parts[1]}", "queue %s: held message %s cannot be registered with "
                          "its parents yet (said once; the collector tries again): %s", name, parts[1], exc)
                continue
            repaired += 1
        return repaired

    def waits(self, name: str, message_id: str) -> list[tuple[str, str]]:
        """(parent partition, id) of each parent held ``message_id`` still waits for."""
        with wrapped(f"read the waits of message {message_id!r} of {name!r}"):
            entries = self._session.client.zrangebylex(self._session.keys(name).deps, f"[w\t{message_id}\t",
                                                    f"(w\t{message_id}\n")
        return [(parts[2], parts[3]) for parts in (split_entry(e, 4) for e in entries) if parts is not None]

    def parents(self, name: str, message_id: str) -> Parents:
        """What the parents of ``message_id`` of partition ``name`` became."""
        with wrapped(f"read the parents of message {message_id!r} of {name!r}"):
            entries = self._session.client.zrangebylex(self._session.keys(name).deps, f"[p\t{message_id}\t",
                                                    f"(p\t{message_id}\n")
        done: dict[tuple[str, str], Any] = {}
        failed: dict[tuple[str, str], str] = {}
        for entry in entries:
            parts = split_entry(entry, 6)
            if parts is None:
                continue
            key = (logical_name(parts[2]), parts[3])
            if parts[4] == "done":
                try:
                    done[key] = json.loads(parts[5])
                except (ValueError, RecursionError):
                    done[key] = parts[5]
            else:
                failed[key] = outbox.reason_of(parts[5].encode())
        return Parents(done, failed)
