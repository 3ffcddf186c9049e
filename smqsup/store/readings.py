"""What the statistics read of a queue in Redis, in as few round trips as
possible: its sizes by state, counters, registry, heartbeats, leader and
history (stats.py makes sense of it, trusting none of it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from smqsup.keys import PARTITION_SEP, QueueKeys, logical_name
from smqsup.store.connection import wrapped

if TYPE_CHECKING:
    from smqsup.store.broker import Broker


def ms_of(time_reply: Sequence[Any]) -> int:
    """TIME's (seconds, microseconds) as whole ms."""
    secs, usecs = time_reply
    return int(secs) * 1000 + int(usecs) // 1000


@dataclass(frozen=True)
class QueueReading:
    """One queue as the statistics read it: sizes counted, the rest as stored
    (anyone with access may write anything there: stats.py trusts none of it)."""

    sizes: dict[str, int]  # pending, processing, scheduled, delayed, dead
    paused: bool
    held: list[int]  # the processing list length of each registered consumer, in the order of ``consumers``
    counters: dict[bytes, bytes]
    consumers: dict[bytes, bytes]  # consumer id -> what its last heartbeat said (JSON)
    heartbeats: list[tuple[bytes, float]]  # consumer id, ms (Redis clock)
    leader: Optional[bytes]  # the collector lock's token
    gc: dict[bytes, bytes]  # collector facts
    slots: dict[bytes, bytes]  # consumer slot -> restarts and last exit (JSON)
    recent: list[bytes]  # the latest history points (JSON), newest first
    partitions: int = 1  # how many partitions were read and summed


#: Replies of ask_sizes.
_SIZE_READS = 5
#: Replies of _ask_reading beyond the sizes (without the history points).
_OTHER_READS = 7


def ask_sizes(pipe: Any, k: QueueKeys) -> None:
    """Queue the size reads for sizes_of (pending: the list and the priority
    set; scheduled; delayed: retries waiting; dead): every size reader goes
    here."""
    pipe.llen(k.pending)
    pipe.zcard(k.priority)
    pipe.zcard(k.scheduled)
    pipe.zcard(k.delayed)
    pipe.llen(k.dead)


def sizes_of(replies: Sequence[Any]) -> dict[str, int]:
    """Sizes by state."""
    pending, ready, scheduled, delayed, dead = replies
    return {"pending": int(pending) + int(ready), "scheduled": int(scheduled), "delayed": int(delayed),
            "dead": int(dead)}


def _ask_reading(pipe: Any, k: QueueKeys, recent: int) -> None:
    """Queue the reads of a QueueReading but its consumers' list lengths
    (_SIZE_READS + _OTHER_READS replies, one more with ``recent`` points,
    read by _reading)."""
    ask_sizes(pipe, k)
    pipe.exists(k.paused)
    for key in (k.counters, k.consumers):
        pipe.hgetall(key)
    pipe.zrange(k.heartbeats, 0, -1, withscores=True)
    pipe.get(k.gc_lock)
    for key in (k.gc, k.slots):
        pipe.hgetall(key)
    if recent > 0:
        pipe.lrange(k.series, 0, recent - 1)


def _reading(replies: Sequence[Any], held: Iterator[Any]) -> QueueReading:
    """A QueueReading from _ask_reading's replies, its consumers' list
    lengths taken from ``held`` in the order of its consumers."""
    paused, counters, consumers, beats, leader, gc, slots, *recent = replies[_SIZE_READS:]
    lengths = [int(next(held)) for _ in consumers]
    return QueueReading({**sizes_of(replies[:_SIZE_READS]), "processing": sum(lengths)}, bool(paused), lengths,
                        counters, consumers, beats, leader, gc, slots, recent[0] if recent else [])


def with_clock(broker: "Broker", ask: Callable[[Any], object], *, raise_on_error: bool = True
               ) -> tuple[Any, list[Any]]:
    """The Redis clock (TIME's reply) and the replies to the reads ``ask``
    queues on a pipeline, in one round trip; on a cluster, whose pipelines
    take no keyless command, TIME is sent first, apart, to any master."""
    pipe = broker.client.pipeline(transaction=False)
    if broker.clustered:
        now = broker.client.time()
        ask(pipe)
        return now, pipe.execute(raise_on_error=raise_on_error)
    pipe.time()
    ask(pipe)
    now, *replies = pipe.execute(raise_on_error=raise_on_error)
    return now, replies


def read_queues(broker: "Broker", queues: Sequence[str], *, recent: int = 0) -> tuple[int, dict[str, QueueReading]]:
    """The Redis clock (ms) and, for each queue, what the statistics read
    of it, with its ``recent`` latest history points: all queues in two
    round trips (the second reads the registered consumers' lists; on a
    cluster, each round trip goes to every master at once, and the clock is
    read first, apart: a cluster pipeline takes no keyless command)."""
    asked = _SIZE_READS + _OTHER_READS + (recent > 0)
    # A queue with partitions is read as all of them and summed (_merged);
    # its history is partition 0's, where its collector writes the sums.
    parts = {queue: broker.partition_names(queue) if PARTITION_SEP not in queue else [queue] for queue in queues}
    names = [p for queue in queues for p in parts[queue]]
    with wrapped("read queue statistics"):
        def ask(pipe: Any) -> None:
            for name in names:
                _ask_reading(pipe, broker.keys(name), recent if name == logical_name(name) else 0)
        now, replies = with_clock(broker, ask)
        per_name: dict[str, list[Any]] = {}
        at = 0
        for name in names:
            size = asked if name == logical_name(name) else _SIZE_READS + _OTHER_READS
            per_name[name], at = replies[at:at + size], at + size
        pipe = broker.client.pipeline(transaction=False)
        for name in names:
            for cid in per_name[name][_SIZE_READS + 2]:
                pipe.llen(broker.keys(name).processing(cid.decode("utf-8", "replace")))
        held = iter(pipe.execute())
        read = {name: _reading(per_name[name], held) for name in names}
    return ms_of(now), {queue: _merged([read[p] for p in parts[queue]]) for queue in queues}


def _merged(readings: list[QueueReading]) -> QueueReading:
    """The partitions of one queue as one reading: sizes, counters and
    collector facts summed, a consumer's lists summed over partitions,
    paused if any partition is; the collector leader, slots and history
    are partition 0's (the first)."""
    if len(readings) == 1:
        return readings[0]
    first = readings[0]
    held: dict[bytes, int] = {}
    consumers: dict[bytes, bytes] = {}
    beats: dict[bytes, float] = {}
    for r in readings:
        for (cid, info), n in zip(r.consumers.items(), r.held):
            consumers.setdefault(cid, info)
            held[cid] = held.get(cid, 0) + n
        for cid, ms in r.heartbeats:
            beats[cid] = max(ms, beats.get(cid, ms))
    sizes = {name: sum(r.sizes[name] for r in readings) for name in first.sizes}
    return QueueReading(sizes, any(r.paused for r in readings), [held[cid] for cid in consumers],
                        _summed([r.counters for r in readings]), consumers, sorted(beats.items()), first.leader,
                        _summed([r.gc for r in readings]), first.slots, first.recent, partitions=len(readings))


def _summed(hashes: list[dict[bytes, bytes]]) -> dict[bytes, bytes]:
    """Hashes of counters as one: the fields that hold integers added up
    (another field is kept as the first hash holding it has it)."""
    out: dict[bytes, bytes] = {}
    for h in hashes:
        for field, value in h.items():
            mine, theirs = redis_int(out.get(field)), redis_int(value)
            if field not in out:
                out[field] = value
            elif mine is not None and theirs is not None:
                out[field] = str(mine + theirs).encode()
    return out


def redis_int(value: "bytes | str | None") -> Optional[int]:
    """A Redis integer (HINCRBY's text), or None for anything else: anyone
    with access may have written anything in a counters hash."""
    text = (value.decode("utf-8", "replace") if isinstance(value, bytes) else value or "").strip()
    digits = text[1:] if text[:1] == "-" else text
    return int(text) if digits.isascii() and digits.isdigit() and len(digits) <= 19 else None

