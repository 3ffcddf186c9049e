"""One dead-letter entry as the scripts write it (includes/dead_letter.lua):
``meta JSON + "\\n" + frame``, read through one schema."""

from __future__ import annotations

import hashlib
from typing import Any, Optional, cast

from smqsup.errors import MalformedMessage
from smqsup.framing import peek_id
from smqsup.message import Message, decode, strict_loads

#: DeadLetter's message before it is first asked for.
_UNREAD = object()


class DeadLetter:
    """One dead-letter entry: the metadata the scripts wrote (reason, at_ms,
    error type, traceback...) and the frame as it was when it died."""

    __slots__ = ("raw", "meta", "frame", "_message")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._message: "Message | None | object" = _UNREAD
        head, sep, rest = raw.partition(b"\n")
        meta: Any = None
        if sep:
            try:
                meta = strict_loads(head)
            except MalformedMessage:
                meta = None
        if isinstance(meta, dict):
            self.meta: dict[str, Any] = meta
            self.frame = rest
        else:
            self.meta = {"reason": "unknown"}
            self.frame = raw

    @property
    def reason(self) -> str:
        reason = self.meta.get("reason", "unknown")
        return reason if isinstance(reason, str) else "unknown"

    @property
    def at(self) -> Optional[float]:
        """When it was dead-lettered, unix seconds by the Redis clock (None
        when the entry holds no plausible time)."""
        at_ms = self.meta.get("at_ms")
        if isinstance(at_ms, bool) or not isinstance(at_ms, (int, float)) or not 0 <= at_ms < 1e15:
            return None
        return at_ms / 1000.0

    def message(self) -> Optional[Message]:
        """The message, or None when its bytes were malformed (decoded once:
        a listing asks for it and for ``ref``)."""
        if self._message is _UNREAD:
            try:
                self._message = decode(self.frame)
            except MalformedMessage:
                self._message = None
        return cast(Optional[Message], self._message)

    @property
    def ref(self) -> str:
        """How to name this entry in a requeue or purge: its message id, or,
        when none can be read, ``raw-`` and a hash of its bytes."""
        msg = self.message()
        if msg is not None:
            return msg.id
        return peek_id(self.frame) or "raw-" + hashlib.sha1(self.raw).hexdigest()[:16]
