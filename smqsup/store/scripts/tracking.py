"""Wrappers of the scripts about what becomes of a message after its
publish: progress (a tracked message's), cancel."""

from __future__ import annotations

from smqsup.keys import QueueKeys
from smqsup.store.scripts.calls import Call, Script

_PROGRESS = Script("progress")
_CANCEL = Script("cancel")

SCRIPTS = (_PROGRESS, _CANCEL)


def progress(keys: QueueKeys, message_id: str, value: str) -> Call[bool]:
    """Record ``value`` (JSON text) as the progress of tracked message
    ``message_id``; whether it was (tracked, not ended)."""
    return Call(_PROGRESS, (keys.tracked,), (message_id, value), bool)


def cancel(keys: QueueKeys, message_id: str, seen: str = "", frame: bytes = b"") -> Call[str]:
    """Cancel ``message_id``, seen at ``seen`` ("pending", "priority",
    "scheduled", "delayed", "processing" or "": nowhere) as ``frame``:
    "cancelled", "stopping", the state it ended in, or "unknown" (cancel.lua)."""
    return Call(_CANCEL, (keys.pending, keys.priority, keys.scheduled, keys.delayed, keys.dead, keys.counters,
                          keys.tracked, keys.tracked_expiry, keys.cancel), (message_id, seen, frame),
                lambda reply: bytes(reply).decode("ascii", "replace") if isinstance(reply, bytes) else str(reply))
