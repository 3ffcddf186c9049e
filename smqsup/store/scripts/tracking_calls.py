"""Wrappers of the scripts about what becomes of a message after its
publish: progress (a tracked message's), cancel."""

from __future__ import annotations

from smqsup.keys import QueueKeys
from smqsup.store.scripts.calls import Call, scripts

_PROGRESS, _CANCEL = SCRIPTS = scripts("progress", "cancel")


def progress(keys: QueueKeys, message_id: str, value: str, *, tracked: bool = True, events_max: int = 0,
             attempts: int = 0) -> Call[bool]:
    """Record ``value`` (JSON text) as the progress of message
    ``message_id``, ``tracked`` or not, whose head says ``events_max`` and
    ``attempts``; whether it was (progress.lua)."""
    return Call(_PROGRESS, (keys.tracked, keys.events), (message_id, value, int(tracked), events_max, attempts), bool)


def cancel(keys: QueueKeys, message_id: str, seen: str = "", frame: bytes = b"", holder: str = "") -> Call[str]:
    """Cancel ``message_id``, seen at ``seen`` ("pending", "priority",
    "scheduled", "delayed", "group" (``frame``: its member of the groups'
    ready set), "processing" (in the list of consumer ``holder``) or "":
    nowhere) as ``frame``: "cancelled", "stopping", the state it ended in,
    "moved" (no longer in ``holder``'s list: look again) or "unknown"
    (cancel.lua)."""
    return Call(_CANCEL, (keys.pending, keys.priority, keys.scheduled, keys.delayed, keys.dead, keys.counters,
                          keys.tracked, keys.tracked_expiry, keys.cancel, keys.events, keys.deps, keys.groups[0],
                          keys.groups[1], keys.processing(holder) if seen == "processing" else keys.pending),
                (message_id, seen, frame),
                lambda reply: bytes(reply).decode("ascii", "replace") if isinstance(reply, bytes) else str(reply))
