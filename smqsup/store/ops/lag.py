"""The lag of queues: how long the message next in line has been waiting, by the Redis clock.

    Lags.read({queue: partitions}) ─▶ lag.lua per partition, one round trip ─▶ QueueLag per queue

A partition's next message is the oldest of the pending list's rightmost frame
(consumers take from the right), the priority set's first member and the
first published of its message groups' next frames (a paused group's
messages are not ready: they count nowhere); its age (from when it was
made ready, for a message made ready after its publish: its ready_at,
includes/ready_at.lua)
is the Redis clock minus the time in its id (ids.py: 12 hex digits of ms
since the epoch). A queue's lag is the largest of its partitions'. The frames
are anyone's bytes: one whose head is not a frame, or whose id holds no
plausible time, gives no lag (never an exception); a time ahead of the clock
(the producer's clock runs ahead of Redis's) gives 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from smqsup import defaults
from smqsup.framing import peek_id
from smqsup.keys import PARTITION_SEP, QueueKeys
from smqsup.store import scripts
from smqsup.store.core.failures import wrapped
from smqsup.store.ops.queues import Queues
from smqsup.store.sync.session import Session

#: The creation time at the start of an id ids.py made: 12 hex digits of ms.
#: An id ids.py made (a custom message_id has no time in it).
_ID_TIME = re.compile(r"[0-9a-f]{26}")
_MAX_AGE_MS = defaults.LAG_MAX_AGE_S * 1000


@dataclass(frozen=True)
class QueueLag:
    """A queue's ready messages (pending, of any priority, over its
    partitions), the age of the oldest next in line in seconds (0.0 when
    none is ready; None, unknown, when messages are ready but no frame next
    in line holds a readable id), the Redis clock it was read at (ms), and
    whether it is paused (any partition)."""

    ready: int
    lag_s: Optional[float]
    at_ms: int
    paused: bool = False


class Part(NamedTuple):
    """One partition's reading."""

    ready: int
    lag_ms: Optional[int]
    at_ms: int
    paused: bool = False


def created_ms(head: Any) -> Optional[int]:
    """When the message whose frame starts with ``head`` was created, in ms
    since the epoch (its id's first 12 hex digits), or None when ``head`` is
    no frame or its id was not made by ids.py."""
    if not isinstance(head, bytes):
        return None
    message_id = peek_id(head)
    if message_id is None or _ID_TIME.fullmatch(message_id) is None:
        return None
    return int(message_id[:12], 16)


def frame_lag_ms(head: Any, now_ms: int, ready_at_ms: Optional[int] = None) -> Optional[int]:
    """How long the message of frame ``head`` has waited at ``now_ms``,
    counted from its creation or, when it was made ready later
    (``ready_at_ms``: a due delay, a retry, a reclaim, a release), from then: 0 when
    dated ahead, None when its id has no time or one older than
    LAG_MAX_AGE_S (not a time: nothing has waited ten years)."""
    created = created_ms(head)
    if created is None or now_ms - created > _MAX_AGE_MS:
        return None
    return max(0, now_ms - max(created, ready_at_ms or 0))


def _ms(value: Any) -> Optional[int]:
    """A ready time lag.lua read (text, or false: none) in whole ms."""
    try:
        return int(float(value)) if isinstance(value, (bytes, str)) else None
    except (ValueError, OverflowError):
        return None


def lag_call(keys: QueueKeys) -> scripts.Call[Part]:
    """lag.lua on one partition; its reply read as a Part."""
    return scripts.Call(scripts.LAG, (keys.pending, keys.priority, keys.paused, *keys.groups[:3], keys.ready_at),
                        (defaults.LAG_HEAD_BYTES, defaults.LAG_GROUPS_READ),
                        _partition)


def _partition(reply: Sequence[Any]) -> Part:
    """lag.lua's reply as a Part: the lag is the oldest of the frames next
    in line (the pending list's, the priority set's, the groups'), 0 when
    none is ready."""
    pending, prioritised, tail, best, now_ms, paused, grouped, *ready_at = reply
    ready, now_ms = int(pending) + int(prioritised), int(now_ms)
    found = [lag for head, at in zip((tail, best, grouped), ready_at)
             if (lag := frame_lag_ms(head, now_ms, _ms(at))) is not None]
    return Part(ready, (max(found) if found else None if ready else 0), now_ms, bool(paused))


def queue_lag(partitions: Sequence[Part]) -> QueueLag:
    """The partitions of one queue as one QueueLag: ready summed, the largest
    lag known (unknown only when no partition with ready messages gives
    one), paused if any is."""
    known = [p.lag_ms for p in partitions if p.lag_ms is not None]
    ready = sum(p.ready for p in partitions)
    at_ms = max((p.at_ms for p in partitions), default=0)
    paused = any(p.paused for p in partitions)
    if not known:
        return QueueLag(ready, None if ready else 0.0, at_ms, paused)
    return QueueLag(ready, max(known) / 1000.0, at_ms, paused)


class Lags:
    """The lag of queues (see the module's docstring); ``queues`` gives their partitions."""

    def __init__(self, session: Session, queues: Queues) -> None:
        self._session = session
        self._queues = queues

    def read(self, queues: Mapping[str, int]) -> dict[str, QueueLag]:
        """The lag of each queue (name -> its partition count; more, if Redis
        says more), all in one pipelined round trip: on a cluster, one per
        master at once. A partition's own name reads that partition alone."""
        parts = {queue: [queue] if PARTITION_SEP in queue else self._queues.partition_names(queue, count)
                 for queue, count in queues.items()}
        batch = scripts.Batch(self._session.client)
        for names in parts.values():
            for name in names:
                batch.add(lag_call(self._session.keys(name)))
        if not len(batch):
            return {}
        with wrapped("read the lag of queues"):
            replies = self._session.send(batch)
            error = next((r for r in replies if isinstance(r, Exception)), None)
            if error is not None:
                raise error
        read = iter(replies)
        return {queue: queue_lag([next(read) for _ in names]) for queue, names in parts.items()}
