"""Handlers for the web UI tests (run in real consumer processes)."""

from __future__ import annotations

from typing import Any

from tests.support.handlers import _record

_seen: set[str] = set()


def fail_first(msg: Any) -> None:
    """Raise on a message's first delivery to this process, ack it after a requeue."""
    if msg.id not in _seen:
        _seen.add(msg.id)
        _record("attempt", msg)
        raise ValueError(f"first delivery of {msg.body!r} fails")
    _record("done", msg)
