"""The Redis operations of the statistics: a queue's sizes by state, its
counters, collector facts and history, the producers' statistics, and
read_queues, which reads all of that (and what the queues' supervisors say)
for many queues in two round trips (collector/stats.py makes sense of it,
trusting none of it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, cast

from smqsup.keys import PARTITION_SEP, QueueKeys, logical_name, producers_hash
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import ms_of, text
from smqsup.store.ops import keytypes
from smqsup.store.ops.queues import Queues
from smqsup.store.sync.session import Session


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
    supervisors: dict[bytes, bytes]  # supervisor HOST:PID -> what it says of its consumers (JSON)
    partitions: int = 1  # how many partitions were read and summed
    #: The message groups with the most ready messages: (group, ready, running: its messages in consumers'
    #: lists), most ready first (at most BUSIEST_GROUPS); and how many groups have ready messages.
    busiest: tuple[tuple[str, int, int], ...] = ()
    groups: int = 0


#: Groups a reading names (the largest backlogs).
BUSIEST_GROUPS = 5
#: Groups read as candidates for them: the largest counts, which the takes do not lower (an upper
#: bound of each group's ready messages; scripts/includes/groups.lua), each then counted exactly. The
#: collector's repair sets as many of the largest right (group_repair.lua's GROUP_RECOUNT_TOP).
BUSIEST_READ = 20
#: Replies of _ask_sizes.
_SIZE_READS = 8
#: Replies of _ask_reading beyond the sizes (without the history points).
_OTHER_READS = 8


def _ask_sizes(pipe: Any, k: QueueKeys) -> None:
    """Queue the size reads for _sizes_of (pending: the list and the priority
    set and the groups' ready frames; scheduled; delayed: retries waiting;
    dead; the groups with ready frames, and the busiest): every size reader
    goes here."""
    pipe.llen(k.pending)
    pipe.zcard(k.priority)
    pipe.zcard(k.groups[0])
    pipe.zcard(k.scheduled)
    pipe.zcard(k.delayed)
    pipe.llen(k.dead)
    pipe.zcard(k.groups[1])
    pipe.zrevrange(k.groups[1], 0, BUSIEST_READ - 1, withscores=True)


def _sizes_of(replies: Sequence[Any]) -> dict[str, int]:
    """Sizes by state. ``pending`` counts the ready messages: the pending
    list less its groups' turns (one per group with ready messages, but for
    a group blocked at its limit, waiting for its rate or paused: those are
    counted as holding one), the priority set and the groups' ready frames."""
    pending, ready, grouped, scheduled, delayed, dead, groups, _ = replies
    listed = int(pending) - min(int(pending), int(groups)) if int(grouped) else int(pending)
    return {"pending": listed + int(ready) + int(grouped), "scheduled": int(scheduled),
            "delayed": int(delayed), "dead": int(dead)}


def _busiest(reply: Any, running: Sequence[Any], ready: Sequence[Any]) -> tuple[tuple[str, int, int], ...]:
    """(group, ready, running) of the BUSIEST_GROUPS with the most ready
    messages among the candidates of a ZREVRANGE WITHSCORES of the groups'
    counts (``reply``), by the HMGET of their running counts and a ZLEXCOUNT
    of each one's ready messages (``ready``); a running count that is no
    integer (anyone may write anything there) counts as 0."""
    out = []
    for (name, _), held, n in zip(reply or (), running, ready):
        out.append((text(name), n if isinstance(n, int) and n > 0 else 0, max(0, redis_int(held) or 0)))
    return tuple(sorted((g for g in out if g[1] > 0), key=lambda g: -g[1])[:BUSIEST_GROUPS])


def _ask_running(pipe: Any, k: QueueKeys, busiest: Any) -> None:
    """Queue the reads of the candidates in ``busiest`` (the ZREVRANGE reply
    _ask_sizes asked for), if any: their running counts, then each one's
    ready messages (a ZLEXCOUNT of its range in the groups' ready set)."""
    if busiest:
        pipe.hmget(k.groups[5], [name for name, _ in busiest])
        for name, _ in busiest:
            prefix = b"%d:%s\t" % (len(name), name)
            pipe.zlexcount(k.groups[0], b"[" + prefix, b"(" + prefix[:-1] + b"\n")


def _ask_reading(pipe: Any, k: QueueKeys, recent: int) -> None:
    """Queue the reads of a QueueReading but its consumers' list lengths
    (_SIZE_READS + _OTHER_READS replies, one more with ``recent`` points,
    read by _reading)."""
    _ask_sizes(pipe, k)
    pipe.exists(k.paused)
    for key in (k.counters, k.consumers):
        pipe.hgetall(key)
    pipe.zrange(k.heartbeats, 0, -1, withscores=True)
    pipe.get(k.gc_lock)
    for key in (k.gc, k.slots, k.supervisors):
        pipe.hgetall(key)
    if recent > 0:
        pipe.lrange(k.series, 0, recent - 1)


#: What each of _ask_reading's replies reads as when Redis refused it (a key of the wrong type): empty.
_EMPTY: tuple[Any, ...] = (0, 0, 0, 0, 0, 0, 0, [], 0, {}, {}, [], None, {}, {}, {}, [])


def _screened(replies: Sequence[Any]) -> list[Any]:
    """_ask_reading's ``replies`` with each error (a key of the wrong type:
    anyone may write anything there) read as empty, so that one key costs
    its own count, not the queue's or every queue's status."""
    return [_EMPTY[i] if isinstance(r, Exception) else r for i, r in enumerate(replies)]


def _count(reply: Any) -> int:
    """A count read in the second round trip; an error (a list of the wrong type) counts 0."""
    return reply if isinstance(reply, int) else 0


def _reading(replies: Sequence[Any], held: Iterator[Any]) -> QueueReading:
    """A QueueReading from _ask_reading's replies, its consumers' list
    lengths taken from ``held`` in the order of its consumers."""
    paused, counters, consumers, beats, leader, gc, slots, supervisors, *recent = replies[_SIZE_READS:]
    lengths = [_count(next(held)) for _ in consumers]
    candidates = replies[_SIZE_READS - 1]
    running = next(held) if candidates else []
    running = running if isinstance(running, list) else [None] * len(candidates)
    ready = [next(held) for _ in candidates or ()]
    return QueueReading({**_sizes_of(replies[:_SIZE_READS]), "processing": sum(lengths)}, bool(paused), lengths,
                        counters, consumers, beats, leader, gc, slots, recent[0] if recent else [], supervisors,
                        busiest=_busiest(candidates, running, ready), groups=int(replies[_SIZE_READS - 2]))


def _merged(readings: list[QueueReading]) -> QueueReading:
    """The partitions of one queue as one reading: sizes, counters and
    collector facts summed, a consumer's lists summed over partitions,
    paused if any partition is; the collector leader, slots, history and
    supervisors are partition 0's (the first)."""
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
                        _summed([r.gc for r in readings]), first.slots, first.recent, first.supervisors,
                        partitions=len(readings), groups=sum(r.groups for r in readings),
                        busiest=tuple(sorted((g for r in readings for g in r.busiest), key=lambda g: -g[1])
                                      [:BUSIEST_GROUPS]))


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
    written = (value.decode("utf-8", "replace") if isinstance(value, bytes) else value or "").strip()
    digits = written[1:] if written[:1] == "-" else written
    return int(written) if digits.isascii() and digits.isdigit() and len(digits) <= 19 else None


def _int_fields(raw: Mapping[Any, Any]) -> dict[str, int]:
    """A hash of counters as ints; a field that holds no integer is left out."""
    return {text(field): n for field, value in raw.items() if (n := redis_int(value)) is not None}


class Statistics:
    """Sizes, counters, facts, history and producers of queues (see the
    module's docstring); ``queues`` gives their partitions."""

    def __init__(self, session: Session, queues: Queues) -> None:
        self._session = session
        self._queues = queues

    def wrong_types(self, names: Sequence[str]) -> dict[str, list[str]]:
        """For each of queue partitions ``names``: its keys that hold another
        type than the scripts need (keytypes.queue_keys: where messages wait,
        the outboxes, the group keys), each as one line ("KEY holds a
        string, not a hash"). One round trip (TYPE of each)."""
        expected = {name: keytypes.queue_keys(self._session.keys(name)) for name in names}
        pipe = self._session.client.pipeline(transaction=False)
        for name in names:
            for key, _ in expected[name]:
                pipe.type(key)
        with wrapped("read the types of the queue keys"):
            found = iter(pipe.execute())
        return {name: keytypes.wrong(expected[name], [next(found) for _ in expected[name]]) for name in names}

    def sizes(self, queue: str) -> dict[str, int]:
        """Pending (ready, of any priority), scheduled, delayed (retries
        waiting) and dead-letter counts of the queue, one round trip."""
        with wrapped(f"sizes of {queue!r}"):
            pipe = self._session.client.pipeline(transaction=False)
            _ask_sizes(pipe, self._session.keys(queue))
            return _sizes_of(pipe.execute())

    def total_sizes(self, queue: str) -> dict[str, int]:
        """sizes() of every partition of ``queue``, summed (paused: 1 if one is)."""
        found = [self.sizes(p) for p in self._queues.partition_names(queue)]
        return {name: (max if name == "paused" else sum)(f[name] for f in found) for name in found[0]}

    def counters(self, queue: str) -> dict[str, int]:
        with wrapped(f"counters of {queue!r}"):
            return _int_fields(self._session.client.hgetall(self._session.keys(queue).counters))

    def gc_fact(self, queue: str, **increments: int) -> None:
        """Add to the queue's collector facts (reclaims, orphans, ...)."""
        k = self._session.keys(queue)
        with wrapped(f"collector facts of {queue!r}"):
            pipe = self._session.client.pipeline(transaction=False)
            for name, n in increments.items():
                pipe.hincrby(k.gc, name, n)
            pipe.execute()

    def gc_facts(self, queue: str) -> dict[str, int]:
        with wrapped(f"collector facts of {queue!r}"):
            return _int_fields(self._session.client.hgetall(self._session.keys(queue).gc))

    def append_point(self, queue: str, point: str, keep: int) -> None:
        """Add one point (JSON) to the queue's history, keeping the ``keep`` latest."""
        k = self._session.keys(queue)
        with wrapped(f"history of {queue!r}"):
            pipe = self._session.client.pipeline(transaction=False)
            pipe.lpush(k.series, point)
            pipe.ltrim(k.series, 0, keep - 1)
            pipe.execute()

    def series(self, queue: str, points: int) -> list[bytes]:
        """The queue's ``points`` latest history points (JSON), newest first."""
        with wrapped(f"history of {queue!r}"):
            return cast(list[bytes], self._session.client.lrange(self._session.keys(queue).series, 0, max(0, points - 1)))

    def producers(self) -> dict[bytes, bytes]:
        """Every producer's statistics as stored: id -> JSON."""
        with wrapped("producers"):
            return cast(dict[bytes, bytes], self._session.client.hgetall(producers_hash(self._session.namespace)))

    def read_queues(self, queues: Sequence[str], *, recent: int = 0) -> tuple[int, dict[str, QueueReading]]:
        """The Redis clock (ms) and, for each queue, what the statistics read
        of it, with its ``recent`` latest history points: all queues in two
        round trips (the second reads the registered consumers' lists; on a
        cluster, each round trip goes to every master at once, and the clock is
        read first, apart: a cluster pipeline takes no keyless command)."""
        # A queue with partitions is read as all of them and summed (_merged);
        # its history is partition 0's, where its collector writes the sums.
        parts = {queue: self._queues.partition_names(queue) if PARTITION_SEP not in queue else [queue]
                 for queue in queues}
        names = [p for queue in queues for p in parts[queue]]
        with wrapped("read queue statistics"):
            now, per_name = self._read_names(names, recent)
            pipe = self._session.client.pipeline(transaction=False)
            for name in names:
                for cid in per_name[name][_SIZE_READS + 2]:
                    pipe.llen(self._session.keys(name).processing(cid.decode("utf-8", "replace")))
                _ask_running(pipe, self._session.keys(name), per_name[name][_SIZE_READS - 1])
            held = iter(pipe.execute(raise_on_error=False))
            read = {name: _reading(per_name[name], held) for name in names}
        return ms_of(now), {queue: _merged([read[p] for p in parts[queue]]) for queue in queues}

    def _read_names(self, names: Sequence[str], recent: int) -> tuple[Any, dict[str, list[Any]]]:
        """The first round trip of read_queues: the clock (TIME's reply) and
        _ask_reading's replies for each of ``names`` (a queue or partition)."""
        asked = _SIZE_READS + _OTHER_READS + (recent > 0)

        def ask(pipe: Any) -> None:
            for name in names:
                _ask_reading(pipe, self._session.keys(name), recent if name == logical_name(name) else 0)
        now, replies = self._session.with_clock(ask, raise_on_error=False)
        if isinstance(now, Exception):
            raise now
        per_name: dict[str, list[Any]] = {}
        at = 0
        for name in names:
            size = asked if name == logical_name(name) else _SIZE_READS + _OTHER_READS
            per_name[name], at = _screened(replies[at:at + size]), at + size
        return now, per_name
