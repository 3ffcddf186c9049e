"""Typed wrappers of the schedule scripts (schedule_*.lua beside this file),
in the style of the package's own: each returns a ``Call``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smqsup.keys import QueueKeys
from smqsup.store.scripts.calls import Call, Lock, scripts

_UPSERT, _DECLARE, _UNDECLARE, _FIRE, _RESUME, _RESET = ALL = scripts(
    "schedule_upsert", "schedule_declare", "schedule_undeclare", "schedule_fire", "schedule_resume", "schedule_reset")

#: upsert outcomes.
SAME, NEW, REPLACED = 0, 1, 2
#: declare statuses (SAME, and:)
MISSING, DIFFERS, REFUSED = 1, 2, 3
#: fire outcomes.
FIRED, SETTLED, NOT_DUE, PAUSED, UNDECLARED, CHANGED = 1, 0, -1, 2, 3, 4


def upsert(keys: QueueKeys, name: str, definition: str, declarer: str, hold_ms: int) -> Call[int]:
    """Store ``definition`` of schedule ``name`` and declare ``declarer``
    for ``hold_ms``: SAME, NEW or REPLACED."""
    return Call(_UPSERT, (keys.schedules, keys.schedule(name), keys.schedule_declarers(name)),
                (name, definition, declarer, hold_ms), int)


def declare(keys: QueueKeys, items: Sequence[tuple[str, str]], declarer: str, hold_ms: int) -> Call[list[int]]:
    """Renew ``declarer``'s declarations of (name, definition digest) items
    for ``hold_ms``: per item SAME, MISSING, DIFFERS or REFUSED."""
    key_list: list[str] = [keys.schedules]
    args: list[Any] = [declarer, hold_ms]
    for name, digest in items:
        key_list += [keys.schedule(name), keys.schedule_declarers(name)]
        args += [name, digest]
    return Call(_DECLARE, key_list, args, lambda reply: [int(x) for x in reply])


def undeclare(keys: QueueKeys, name: str, declarer: str, *, forget: bool) -> Call[bool]:
    """Withdraw ``declarer``'s declaration; with ``forget``, delete the
    schedule if no other declaration holds (True when deleted)."""
    return Call(_UNDECLARE, (keys.schedules, keys.schedule(name), keys.schedule_declarers(name),
                             keys.schedule_paused(name)), (name, declarer, int(forget)), bool)


def fire(keys: QueueKeys, name: str, digest: str, slot_ms: int, frame: bytes, message_id: str, lock: Lock,
         count: bool) -> Call[tuple[int, int]]:
    """Publish ``frame`` for slot ``slot_ms`` unless it is settled, paused,
    undeclared or the definition changed: (outcome, Redis now in ms)."""
    return Call(_FIRE, (keys.schedules, keys.schedule(name), keys.schedule_declarers(name),
                        keys.schedule_paused(name), keys.pending, keys.counters, lock[0], keys.tracked,
                        keys.tracked_expiry, keys.events),
                (lock[1], name, digest, slot_ms, frame, message_id, int(count)),
                lambda reply: (int(reply[0]), int(reply[1])))


def resume(keys: QueueKeys, name: str) -> Call[bool]:
    """Drop the paused flag and restart the slots from now; True if it was paused."""
    return Call(_RESUME, (keys.schedule_paused(name), keys.schedule(name)), (), bool)


def reset(keys: QueueKeys, name: str) -> Call[tuple[bool, int, int]]:
    """Settle schedule ``name`` up to now: (whether a definition of it is
    stored, Redis now in ms, how far its state was ahead of now in ms)."""
    return Call(_RESET, (keys.schedules, keys.schedule(name)), (name,),
                lambda reply: (bool(reply[0]), int(reply[1]), int(reply[2])))
