"""Wrappers of the scripts of dependencies and batches (store/ops/workflows.py
and store/ops/batches.py have the protocols): hold a child, register it with
its parents, unblock it; settle a batch; set aside the outbox entries
whose target Redis refused, and forget them once their call ran."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from smqsup.keys import QueueKeys
from smqsup.store.scripts.calls import Call, scripts

_HOLD, _DEPEND, _UNBLOCK, _BATCH_SETTLE, _OUTBOX_PARK, _OUTBOX_UNPARK = SCRIPTS = scripts(
    "hold", "depend", "unblock", "batch_settle", "outbox_park", "outbox_unpark")

#: hold()'s answers: held; deduplicated (its dedup key names another message); the id is in use.
HELD, DEDUPLICATED, IN_USE = 1, 0, -1


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def hold(keys: QueueKeys, message_id: str, kept: bytes, parents: Sequence[str], *, count: bool,
         dedup_key: Optional[str] = None, dedup_ttl_ms: int = 0, at_ms: int = -1) -> Call[tuple[int, str, str]]:
    """Hold ``kept`` ("D:T:F|frame") as ``message_id`` waiting for
    ``parents`` ("PQ\\tPID" each); (HELD, id, its "h" mark), (DEDUPLICATED,
    the holder's id, "") or (IN_USE, id, "") (hold.lua)."""
    key_list = [keys.blocked, keys.deps, keys.counters, keys.tracked, keys.tracked_expiry, keys.events]
    if dedup_key is not None:
        key_list.append(keys.dedup(dedup_key))
    return Call(_HOLD, key_list, (message_id, kept, int(count), dedup_ttl_ms, at_ms, *parents),
                lambda reply: (int(reply[0]), _text(reply[1]),
                               f"h\t{message_id}\t{_text(reply[2])}" if int(reply[0]) == HELD else ""))


def depend(keys: QueueKeys, child: str, parent_ids: Sequence[str]) -> Call[list[tuple[str, str, bytes]]]:
    """Register ``child`` ("CQ\\tCID") with ``parent_ids`` of this queue
    partition; per parent (id, "wait" | "done" | "dead" | "unknown", data)
    (depend.lua)."""
    def read(reply: Sequence[Any]) -> list[tuple[str, str, bytes]]:
        return [(_text(reply[i]), _text(reply[i + 1]), bytes(reply[i + 2])) for i in range(0, len(reply), 3)]
    return Call(_DEPEND, (keys.tracked, keys.tracked_expiry, keys.deps), (child, *parent_ids), read)


def unblock(keys: QueueKeys, message_id: str, outcomes: Sequence[tuple[str, str, str, bytes]],
            mark: str = "") -> Call[tuple[str, int]]:
    """Tell held ``message_id`` the (parent partition, parent id, "done" |
    "dead", data) ``outcomes``, removing its hold ``mark`` if given;
    (status, children told) (unblock.lua)."""
    args: list[Any] = [message_id, mark]
    for outcome in outcomes:
        args.extend(outcome)
    return Call(_UNBLOCK, (keys.blocked, keys.deps, keys.pending, keys.priority, keys.priority_seq, keys.scheduled,
                           keys.dead, keys.counters, keys.tracked, keys.tracked_expiry, keys.events, *keys.groups,
                           keys.cancel, keys.ready_at), args,
                lambda reply: (_text(reply[0]), int(reply[1])))


def batch_settle(home: QueueKeys, batch_id: str, ended: Sequence[tuple[str, str, str]], *, close: bool,
                 keep_s: int) -> Call[tuple[bool, bool]]:
    """Record the (member id, "done" | "dead", failure JSON or "") ``ended``
    of batch ``batch_id`` whose home is ``home``, and its close; (fired now,
    an on_success callback for another queue left in the home's deps)
    (batch_settle.lua)."""
    args: list[Any] = [batch_id, int(close), keep_s]
    for item in ended:
        args.extend(item)
    return Call(_BATCH_SETTLE, (home.batch(batch_id), home.batch_members(batch_id), home.batch_ended(batch_id),
                                home.batch_failures(batch_id), home.batches, home.pending, home.priority,
                                home.priority_seq, home.deps, home.tracked, home.tracked_expiry, home.events),
                args, lambda reply: (bool(reply[0]), bool(reply[1])))


def outbox_park(keys: QueueKeys, failed: Sequence[tuple[str, str, str, Sequence[bytes]]], *, base_ms: int,
                most_ms: int, park_after: int) -> Call[int]:
    """Set the (field "KIND\\tQUEUE", reason, target id, entries) ``failed``
    aside in partition ``keys``' parked set, each due again after its
    field's backoff; how many entries were not parked already
    (outbox_park.lua)."""
    args: list[Any] = [base_ms, most_ms, park_after]
    for field, reason, target, entries in failed:
        args += [field, reason, target, len(entries), *entries]
    return Call(_OUTBOX_PARK, (keys.deps, keys.outbox_parked, keys.outbox_failures), args, int)


def outbox_unpark(keys: QueueKeys, done: Sequence[tuple[str, Sequence[bytes]]]) -> Call[int]:
    """Remove the (field or "", entries) ``done`` from partition
    ``keys``' parked set and their targets' records (outbox_unpark.lua)."""
    args: list[Any] = []
    for field, entries in done:
        args += [field, len(entries), *entries]
    return Call(_OUTBOX_UNPARK, (keys.outbox_parked, keys.outbox_failures), args, int)
