"""What ``GET /api/queues/{queue}/events`` reads: a queue's newest events, or
those after the cursors the client's last answer gave it, with the cursors
for its next poll (the page polls; nothing here waits for an event).

    no ?after=   the newest ``limit`` events of the queue's partitions
    ?after=A     up to ``limit`` events after A, oldest first; "more" when
                 others wait past them (the page then asks for the newest,
                 rather than fall further behind a busy queue)

The answer's ``after`` is A for the next poll: "I=MS-SEQ,...", the cursor
of each partition (by its index: 0 is the queue itself) after its last event
given, short enough for a request line whatever the names (args.events_after
reads it); ``cursors`` says the same by partition name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from smqsup.errors import ConfigError
from smqsup.store.broker import Broker
from smqsup.store.core.event_entries import Event, sort_key
from smqsup.store.ops.events import Events


def page(broker: Broker, queue: str, after: "dict[int, str] | None", limit: int) -> dict[str, Any]:
    """The API's answer for ``queue``: its events (oldest first), each
    partition's cursor, ``after`` for the next poll, ``more`` and the
    ``events_max`` its consumers declared (0: they record no events).
    ConfigError when ``after`` names a partition ``queue`` does not have."""
    names = broker.queues.partition_names(queue)
    stray = sorted(i for i in after or () if i >= len(names))
    if stray:
        raise ConfigError(f"after: queue {queue!r} has no partition {stray[0]} (it has {len(names)}: "
                          f"ask again without after)")
    if after is None:
        (events, cursors), more = broker.events.newest(names, limit), False
    else:
        events, cursors, more = following(broker.events, names, {names[i]: c for i, c in after.items()}, limit)
    return {"queue": queue, "events": [e.to_json() for e in events], "cursors": cursors,
            "after": ",".join(f"{i}={cursors[name]}" for i, name in enumerate(names)), "more": more,
            "events_max": broker.queues.declared(queue)[1].events_max}


def following(events: Events, names: Sequence[str], after: dict[str, str],
              limit: int) -> tuple[list[Event], dict[str, str], bool]:
    """The oldest ``limit`` events after ``after`` (a partition it does not
    name: from its start), the cursors past them, and whether more wait."""
    start = {name: after.get(name, "0-0") for name in names}
    got = events.read(names, dict(start), count=limit + 1)  # one more a partition: "more" is exact
    shown = got[:limit]
    return shown, moved_past(start, shown), len(got) > limit


def moved_past(cursors: dict[str, str], events: Sequence[Event]) -> dict[str, str]:
    """``cursors`` with each partition's moved past its events in ``events``
    (never back: a cursor already past them stays)."""
    moved = dict(cursors)
    for e in events:
        if sort_key(e.cursor) > sort_key(moved.get(e.queue, "0-0")):
            moved[e.queue] = e.cursor
    return moved
