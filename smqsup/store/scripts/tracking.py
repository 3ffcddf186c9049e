"""Wrappers of the scripts about tracked messages that move none: progress."""

from __future__ import annotations

from smqsup.keys import QueueKeys
from smqsup.store.scripts.calls import Call, Script

_PROGRESS = Script("progress")

SCRIPTS = (_PROGRESS,)


def progress(keys: QueueKeys, message_id: str, value: str) -> Call[bool]:
    """Record ``value`` (JSON text) as the progress of tracked message
    ``message_id``; whether it was (tracked, not ended)."""
    return Call(_PROGRESS, (keys.tracked,), (message_id, value), bool)
