"""Batches, the producer's side: ``Producer.batch()`` gives a Batch whose
messages are counted together; once its producer closed it and every one
of them ended, one callback message goes to ``on_complete`` (and one to
``on_success`` when none failed), exactly once (store/ops/batches.py has the
protocol). A handler adds messages to its own batch with
``message.batch.publish(...)``.

    with producer.batch(on_complete=("albums", {"album": 7})) as batch:
        batch.publish_many("resize", images)
    # once every resize ended: a message on "albums" whose body is
    # {"batch": ID, "body": {"album": 7}, "done": 99, "failed": 1, "failures": [...]}
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Optional, Protocol

from smqsup import framing, message, safe
from smqsup.client.checks import valid_name
from smqsup.errors import MessageError
from smqsup.ids import new_id
from smqsup.store.ops.batches import public_id


class Publisher(Protocol):
    """What a Batch publishes through: the Producer."""

    def publish_members(self, batch: "Batch", queue: str, bodies: Iterable[Any],
                        headers: Optional[Mapping[str, Any]], options: dict[str, Any], *, many: bool) -> list[str]:
        ...

    def close_batch(self, batch: "Batch") -> bool:
        ...

#: The keywords a member's publish may give: publish()'s, but dedup keys (a
#: member deduplicated would be another batch's message) and depends_on.
MEMBER_OPTIONS = frozenset({"delay", "at", "priority", "ttl", "partition_key", "result_ttl", "group"})


def callback(value: object, what: str) -> Optional[tuple[str, Any]]:
    """``on_complete`` or ``on_success``: None, or a (queue, body) pair."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or len(value) != 2:
        raise MessageError(f"{what}: expected a (queue, body) pair, got {safe.escape(repr(value), 80)}")
    return valid_name(value[0], f"{what}: queue"), value[1]


def callbacks(on_complete: object, on_success: object, max_size: int) -> list[tuple[str, str, str]]:
    """(field "complete" or "success", queue, body as JSON) of each callback
    given, checked before anything is sent, by both producers: MessageError
    for none, not a pair, a queue that cannot exist, a body that is not JSON
    or over ``max_size``. The first one's queue is the batch's home."""
    complete, success = callback(on_complete, "on_complete"), callback(on_success, "on_success")
    if complete is None and success is None:
        raise MessageError("batch: give on_complete or on_success (a (queue, body) pair)")
    return [(name, cb[0], message.bounded_json(cb[1], f"callback on {cb[0]!r}: body", max_size))
            for name, cb in (("complete", complete), ("success", success)) if cb is not None]


def callback_frame(queue: str, body_json: str, batch: str, head: bytes) -> tuple[str, str]:
    """The frame of a callback (its body already JSON) up to its summary, and
    what follows it (scripts/batch_settle.lua writes the summary between)."""
    prefix = head + ('{"id":%s,"queue":%s,"body":{"batch":%s,"body":%s' % (
        json.dumps(new_id()), json.dumps(queue), json.dumps(batch), body_json)).encode()
    return prefix.decode(), ',"created_at":%r,"headers":{}}' % round(time.time(), 6)


def member_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` of a member's publish, checked (MessageError)."""
    wrong = sorted(str(k) for k in options if k not in MEMBER_OPTIONS)
    if wrong:
        raise MessageError(f"batch.publish: option {safe.escape(wrong[0], 40)} is not for a batch's message "
                           f"(one of {', '.join(sorted(MEMBER_OPTIONS))})")
    return dict(options)


class Batch:
    """Messages counted together; see the module docstring. Made by
    Producer.batch(); a handler's ``message.batch`` is the batch of its
    message. ``id`` names it (Producer.batch_status)."""

    def __init__(self, producer: Publisher, home: str, batch_id: str, *, owned: bool = True) -> None:
        self._producer = producer
        self.home = home
        self.batch_id = batch_id
        self._owned = owned
        self.closed = False

    @property
    def id(self) -> str:
        return public_id(self.home, self.batch_id)

    @property
    def link(self) -> str:
        """What a member's publish carries: the home and the batch's id."""
        return f"{self.home}\t{self.batch_id}"

    def publish(self, queue: str, body: Any, headers: Optional[Mapping[str, Any]] = None, **options: Any) -> str:
        """Publish one message of the batch (publish()'s options but dedup
        keys and depends_on); its id. MessageError once closed."""
        return self._producer.publish_members(self, queue, [body], headers, member_options(options), many=False)[0]

    def publish_many(self, queue: str, bodies: Iterable[Any], headers: Optional[Mapping[str, Any]] = None,
                     **options: Any) -> list[str]:
        """Publish many messages of the batch in one round trip; their ids."""
        return self._producer.publish_members(self, queue, bodies, headers, member_options(options), many=True)

    def check_open(self) -> None:
        if self.closed:
            raise MessageError(f"batch {self.id}: closed (its producer publishes no more; a handler of one of "
                               "its messages may still add to it with message.batch)")

    def close(self) -> bool:
        """Say its producer publishes no more messages in it (handlers of
        its messages still may); whether its callbacks were published now
        (every message had ended). Made by ``with`` at the block's end."""
        if not self._owned:
            raise MessageError(f"batch {self.id}: only its producer closes it")
        if self.closed:
            return False
        self.closed = True
        return self._producer.close_batch(self)

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        """Close, unless the block raised: then the batch stays open (its
        callbacks never fire; Producer.batch_status and the web UI show it
        open), since some of the messages it was meant to have are not in it."""
        if exc is None:
            self.close()

    def __repr__(self) -> str:
        return f"Batch({self.id!r})"


def frame_head_of(result_ttl_s: int, events_max: int) -> bytes:
    """The head of a new frame tracked for ``result_ttl_s`` with events capped at ``events_max``."""
    return framing.new_frame(b"", result_ttl_s, events_max)
