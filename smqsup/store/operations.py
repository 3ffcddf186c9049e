"""The Broker's operations beyond moving messages: the leader lock, the
registry and statistics the collector and views read, pausing, partition
counts and dead letters. A mixin of broker.Broker, which holds the client,
the keys and the slot map these use."""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, TypeVar, cast

import redis.exceptions as rexc

from smqsup import defaults, safe
from smqsup.errors import BrokerError
from smqsup.keys import QueueKeys, partition_names, producers_hash, queues_set
from smqsup.logs import warn_once
from smqsup.store import cluster, scripts
from smqsup.store.connection import wrapped
from smqsup.store.consumer_info import ConsumerInfo
from smqsup.store.readings import ask_sizes, ms_of, redis_int, sizes_of

log = logging.getLogger("smqsup.store.broker")
T = TypeVar("T")
#: Most frames one dead-letter purge script call deletes.
PURGE_CHUNK = 1000


def _text(value: "bytes | str") -> str:
    """Redis bytes as text; bytes that are not UTF-8 are kept as escapes."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def _int_fields(raw: Mapping[Any, Any]) -> dict[str, int]:
    """A hash of counters as ints; a field that holds no integer is left out."""
    return {_text(field): n for field, value in raw.items() if (n := redis_int(value)) is not None}


class Operations:
    """The operations of broker.Broker that operators, views and the
    collector use (see the module's docstring)."""

    client: Any
    namespace: str
    _hot: "Any"  # the held connection (connection.HotLine or cluster.ClusterHotLine)
    _router: Optional[cluster.Router]
    #: queue -> (partitions, monotonic time read).
    _partitions: dict[str, tuple[int, float]]

    def keys(self, queue: str) -> QueueKeys:
        raise NotImplementedError  # Broker's

    # --- leader lock ---------------------------------------------------------

    def lock_acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        """SET NX PX; a key found there with no time to live (nobody's lock:
        garbage) is given ``ttl_ms`` to live, and said once."""
        with wrapped(f"acquire {key}"):
            got = scripts.lock_acquire(key, token, ttl_ms).run(self.client)
        if got < 0:
            log.warning("%s held a value that never expires (not a lock of ours); it now expires in %d ms and "
                        "the election resumes then", key, ttl_ms)
        return got > 0

    def lock_renew(self, key: str, token: str, ttl_ms: int) -> bool:
        with wrapped(f"renew {key}"):
            return scripts.lock_renew(key, token, ttl_ms).run(self.client)

    def lock_release(self, key: str, token: str) -> bool:
        with wrapped(f"release {key}"):
            return scripts.lock_release(key, token).run(self.client)

    def lock_holder(self, key: str) -> Optional[str]:
        with wrapped(f"read {key}"):
            value = self.client.get(key)
        return None if value is None else _text(cast(bytes, value))

    def record_slot(self, queue: str, slot: str, info: Mapping[str, Any]) -> None:
        """Restarts and last exit of a consumer slot (its supervisor writes)."""
        with wrapped(f"slot statistics of {queue!r}"):
            self.client.hset(self.keys(queue).slots, slot, json.dumps(dict(info), separators=(",", ":")))

    def gc_fact(self, queue: str, **increments: int) -> None:
        """Add to the queue's collector facts (reclaims, orphans, ...)."""
        k = self.keys(queue)
        with wrapped(f"collector facts of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            for name, n in increments.items():
                pipe.hincrby(k.gc, name, n)
            pipe.execute()

    def gc_facts(self, queue: str) -> dict[str, int]:
        with wrapped(f"collector facts of {queue!r}"):
            return _int_fields(self.client.hgetall(self.keys(queue).gc))

    def is_registered(self, queue: str, consumer_id: str) -> bool:
        """Whether the consumer is still in the registry (not declared dead)."""
        with wrapped(f"registry of {queue!r}"):
            return bool(self._hot.execute("HEXISTS", self.keys(queue).consumers, consumer_id))

    def count_late_ack(self, queue: str) -> None:
        """Count a late ack found after a reconnect (the ack script counts the others)."""
        with wrapped(f"counters of {queue!r}"):
            self.client.hincrby(self.keys(queue).counters, "late_acks", 1)

    def retired_with_messages(self, queue: str, watch_ms: int,
                              most: int = defaults.RETIRED_SWEEP_MAX) -> list[str]:
        """Consumers unregistered less than ``watch_ms`` ago whose processing
        list is not empty, among the ``most`` latest; older retirees are
        forgotten, and so are entries dated more than ``watch_ms`` ahead (no
        clock wrote those: junk, which would otherwise stay for ever)."""
        k = self.keys(queue)
        with wrapped(f"retired consumers of {queue!r}"):
            # The clock of the server that dated the entries (a cluster's
            # masters each have their own): skew must not shorten the watch.
            now_ms = ms_of(self._on_node(queue, lambda client: client.time()))
            pipe = self.client.pipeline(transaction=False)
            pipe.zremrangebyscore(k.retired, "-inf", f"({now_ms - watch_ms}")
            pipe.zremrangebyscore(k.retired, f"({now_ms + watch_ms}", "+inf")
            # The latest first: a late message reaches a list within seconds of its retirement.
            pipe.zrevrangebyscore(k.retired, now_ms + watch_ms, now_ms - watch_ms, start=0, num=most)
            ids = [_text(cid) for cid in pipe.execute()[-1]]
            pipe = self.client.pipeline(transaction=False)
            for cid in ids:
                pipe.llen(k.processing(cid))
            lengths = pipe.execute() if ids else []
        return [cid for cid, n in zip(ids, lengths) if n]

    def consumers(self, queue: str) -> dict[str, ConsumerInfo]:
        """The queue's registry: consumer id -> what its last heartbeat said
        (fields that cannot be read keep their defaults)."""
        with wrapped(f"read consumers of {queue!r}"):
            raw = self.client.hgetall(self.keys(queue).consumers)
        return {_text(k): ConsumerInfo.from_json(v) for k, v in raw.items()}

    # --- pausing --------------------------------------------------------------

    def pause(self, queue: str, by: str) -> bool:
        """Pause the queue, each of its partitions (its consumers on every
        host take nothing until resume()); True if one was not paused. The
        flag lives in Redis, so it outlasts every supervisor's restart.

        Pause is the queue's, not its partitions': after flagging them the
        count is read again and any partition added meanwhile is flagged
        too (declare_partitions copies the flag to the partitions it adds,
        then looks at partition 0 again: one of the two sees the other)."""
        with wrapped(f"pause {queue!r}"):
            now_ms = ms_of(self.client.time())
            info = json.dumps({"at_ms": now_ms, "by": by}, separators=(",", ":"))
            return self._every_partition(queue, lambda p: bool(self.client.set(self.keys(p).paused, info, nx=True)))

    def resume(self, queue: str) -> bool:
        """Let the queue's consumers take messages again (every partition,
        those added meanwhile included, as pause() says); True if one was
        paused."""
        with wrapped(f"resume {queue!r}"):
            return self._every_partition(queue, lambda p: bool(self.client.delete(self.keys(p).paused)))

    def _every_partition(self, queue: str, act: Callable[[str], bool]) -> bool:
        """``act`` on each partition of ``queue``, reading the count again
        after each pass until no partition was added; True if any act was."""
        done: set[str] = set()
        changed = False
        while True:
            todo = [p for p in partition_names(queue, self.partitions(queue, fresh=True)) if p not in done]
            if not todo:
                return changed
            changed = any([act(p) for p in todo]) or changed
            done.update(todo)

    # --- inspecting ----------------------------------------------------------

    def sizes(self, queue: str) -> dict[str, int]:
        """Pending (ready, of any priority), scheduled, delayed (retries
        waiting) and dead-letter counts of the queue, and ``paused`` (1 or
        0), one round trip."""
        with wrapped(f"sizes of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            ask_sizes(pipe, self.keys(queue))
            return sizes_of(pipe.execute())

    def total_sizes(self, queue: str) -> dict[str, int]:
        """sizes() of every partition of ``queue``, summed (paused: 1 if one is)."""
        found = [self.sizes(p) for p in self.partition_names(queue)]
        return {name: (max if name == "paused" else sum)(f[name] for f in found) for name in found[0]}

    def append_point(self, queue: str, point: str, keep: int) -> None:
        """Add one point (JSON) to the queue's history, keeping the ``keep`` latest."""
        k = self.keys(queue)
        with wrapped(f"history of {queue!r}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.lpush(k.series, point)
            pipe.ltrim(k.series, 0, keep - 1)
            pipe.execute()

    def series(self, queue: str, points: int) -> list[bytes]:
        """The queue's ``points`` latest history points (JSON), newest first."""
        with wrapped(f"history of {queue!r}"):
            return cast(list[bytes], self.client.lrange(self.keys(queue).series, 0, max(0, points - 1)))

    def producers(self) -> dict[bytes, bytes]:
        """Every producer's statistics as stored: id -> JSON."""
        with wrapped("producers"):
            return cast(dict[bytes, bytes], self.client.hgetall(producers_hash(self.namespace)))

    def counters(self, queue: str) -> dict[str, int]:
        with wrapped(f"counters of {queue!r}"):
            return _int_fields(self.client.hgetall(self.keys(queue).counters))

    # --- partitions ------------------------------------------------------------

    def declare_partitions(self, queue: str, count: int) -> int:
        """Store that ``queue`` has (at least) ``count`` partitions; the count
        every process is to use from now on (the largest ever declared, at
        most defaults.PARTITIONS_MAX).

        A raise is three steps, each idempotent, ordered so that no consumer
        works a new partition unlike the queue: (1) the new partitions get
        partition 0's paused flag, and every partition its copy of the new
        count (the share its rate scripts divide by: includes/rate.lua);
        (2) the count of record is raised; (3) partition 0's flag is read
        again and the new partitions follow it (a pause or resume that ran
        meanwhile read the old count: pause() says why one of the two sees
        the other). A crash between them leaves at worst a new partition
        paused that an operator's resume clears, never a rate above the limit."""
        k = self.keys(queue)
        with wrapped(f"declare the partitions of {queue!r}"):
            before = self.partitions(queue, fresh=True)
            flag = cast(Optional[bytes], self.client.get(k.paused)) if count > before else None
            if count > before:
                self._prepare_partitions(queue, before, count, flag)
            stored = scripts.partitions(k, count).run(self.client)
            if count > before:
                self._follow_pause(queue, before, count, flag)
        n = self._partitions[queue] = (min(max(stored, 1), defaults.PARTITIONS_MAX), time.monotonic())
        return n[0]

    def _prepare_partitions(self, queue: str, before: int, count: int, flag: Optional[bytes]) -> None:
        """Step (1) of a raise from ``before`` to ``count`` partitions."""
        names = partition_names(queue, count)
        for p in names[1:]:
            scripts.partitions(self.keys(p), count).run(self.client)  # the larger count stays
        if flag is not None:
            for p in names[before:]:
                self.client.set(self.keys(p).paused, flag, nx=True)

    def _follow_pause(self, queue: str, before: int, count: int, copied: Optional[bytes]) -> None:
        """Step (3) of a raise: the new partitions take partition 0's flag as
        it is now; a flag this raise copied there is withdrawn (compare and
        delete: a pause's own flag is left) if partition 0 was resumed."""
        flag = cast(Optional[bytes], self.client.get(self.keys(queue).paused))
        for p in partition_names(queue, count)[before:]:
            if flag is not None:
                self.client.set(self.keys(p).paused, flag, nx=True)
            elif copied is not None:
                scripts.compare_and_delete(self.keys(p).paused, copied).run(self.client)

    def partitions(self, queue: str, *, fresh: bool = False) -> int:
        """How many partitions ``queue`` has, as its supervisors declared it
        (1 if none did), read again at most every PARTITIONS_READ_S (at once
        when ``fresh``). Junk in the key reads as 1, a count above
        defaults.PARTITIONS_MAX as that."""
        known = self._partitions.get(queue)
        if not fresh and known is not None and time.monotonic() - known[1] < defaults.PARTITIONS_READ_S:
            return known[0]
        with wrapped(f"read the partitions of {queue!r}"):
            raw = self.client.get(self.keys(queue).partitions)
        # As partitions.lua reads it: a whole number from 1 (at most the most), else 1.
        text = raw.decode("ascii", "replace").strip() if isinstance(raw, bytes) else ""
        digits = text.lstrip("0")
        if not (text.isascii() and text.isdigit()) or not digits:
            n = 1
        else:  # (never int() of thousands of digits: Python refuses those)
            n = defaults.PARTITIONS_MAX if len(digits) > 4 else min(int(digits), defaults.PARTITIONS_MAX)
        self._partitions[queue] = (n, time.monotonic())
        return self._partitions[queue][0]

    def partition_names(self, queue: str, at_least: int = 1) -> list[str]:
        """The partitions of ``queue`` (its own name first): as many as
        partitions() says, or ``at_least`` (the config's count) if more.
        Never raises: with Redis unreachable, the count read last."""
        try:
            n = self.partitions(queue)
        except BrokerError:
            n = self._partitions.get(queue, (1, 0.0))[0]
        return partition_names(queue, max(n, at_least))

    def partition_ticket(self, queue: str) -> int:
        """A number drawn by a consumer of ``queue`` (INCR): which partition it
        prefers is this modulo the count, so consumers spread evenly. A
        counter Redis cannot increment (junk, the wrong type, at its limit)
        gives a random number, said once: a consumer never waits on it."""
        key = self.keys(queue).partition_seq
        with wrapped(f"draw a partition of {queue!r}"):
            try:
                return int(self.client.incr(key))
            except rexc.ResponseError as exc:
                warn_once(log, f"ticket:{queue}", "queue %s: %s cannot be counted (%s); consumers draw their "
                          "partition at random (said once)", queue, key, exc)
                return random.randrange(1 << 30)

    def known_queues(self) -> list[str]:
        with wrapped("list queues"):
            names = cast(set[bytes], self.client.smembers(queues_set(self.namespace)))
        # Anyone can SADD there: a name that is not UTF-8 comes back with U+FFFD.
        return sorted(q.decode("utf-8", "replace") for q in names)

    # --- dead letters --------------------------------------------------------

    def dead_letters(self, queue: str, start: int = 0, count: int = 100) -> list[bytes]:
        """Dead-letter entries, newest first."""
        with wrapped(f"read dead letters of {queue!r}"):
            return cast(list[bytes], self.client.lrange(self.keys(queue).dead, start, start + count - 1))

    def dlq_requeue(self, queue: str, entries: Sequence[bytes]) -> int:
        if not entries:
            return 0
        with wrapped(f"requeue dead letters of {queue!r}"):
            return scripts.dlq_requeue(self.keys(queue), entries).run(self.client)

    def dlq_delete(self, queue: str, entries: Sequence[tuple[bytes, str, Optional[str]]],
                   dead_key: Optional[str] = None) -> int:
        """Delete (entry, message id, dedup key or None) dead letters from the
        queue's dead-letter list (or ``dead_key``, a list set aside by
        dlq_set_aside), freeing the dedup keys that still name their
        messages; returns how many entries were there."""
        k = self.keys(queue)
        with wrapped(f"purge dead letters of {queue!r}"):
            return sum(scripts.dlq_purge(k, dead_key or k.dead, entries[i:i + PURGE_CHUNK]).run(self.client)
                       for i in range(0, len(entries), PURGE_CHUNK))

    def dlq_set_aside(self, queue: str) -> tuple[str, int]:
        """Move the whole dead-letter list, atomically, to a new key of its
        own (expiring in an hour, in case the caller dies before deleting it)
        and return that key and how many entries it holds: a whole purge
        reads it at leisure while new dead letters start a new list, and no
        entry it holds can be requeued meanwhile."""
        k = self.keys(queue)
        aside = k.dead_aside(os.urandom(6).hex())
        with wrapped(f"purge dead letters of {queue!r}"):
            found = self.client.type(k.dead)
            if found not in (b"list", b"none"):
                raise BrokerError(f"purge dead letters of {queue!r}: WRONGTYPE {k.dead} holds a "
                                  f"{_text(found)}, not a list: nothing done")
            def move(client: Any) -> list[Any]:
                pipe = client.pipeline(transaction=True)
                pipe.llen(k.dead)
                pipe.renamenx(k.dead, aside)
                pipe.pexpire(aside, 3_600_000)
                return cast(list[Any], pipe.execute(raise_on_error=False))
            n, _, _ = self._on_node(queue, move)
        return aside, int(n) if isinstance(n, int) else 0

    def _on_node(self, queue: str, use: Callable[[Any], T]) -> T:
        """``use(client)`` on a client of the server holding ``queue``'s keys:
        a cluster's pipelines refuse MULTI and RENAMENX, one master's do not
        (a redirection is followed, as cluster.Router.routed says)."""
        router = self._router
        if router is None:
            return use(self.client)
        return router.routed(lambda: use(router.node_client(self.keys(queue).pending)))

    def list_page(self, key: str, start: int, count: int) -> list[bytes]:
        """``count`` entries of a list from ``start`` (LRANGE)."""
        with wrapped(f"read {key}"):
            return cast(list[bytes], self.client.lrange(key, start, start + count - 1))

    def delete(self, key: str) -> None:
        with wrapped(f"delete {key}"):
            self.client.delete(key)

    def peek_range(self, key: str, kind: str, count: int, budget: scripts.ReadBudget, *, first: int = 0,
                   step: int = 1, split: bytes = b"") -> list[scripts.Peeked]:
        """scripts.peek_range over ``count`` elements, LISTING_CHUNK a call,
        spending ``budget``; a key of another type gives none (said once)."""
        found: list[scripts.Peeked] = []
        with wrapped(f"read {key}"):
            while len(found) < count:
                want = min(defaults.LISTING_CHUNK, count - len(found))
                call = scripts.peek_range(key, kind, first + step * len(found), step, want, budget, split)
                held, budget.whole, got = call.run(self.client)
                if held not in (kind, "none"):
                    warn_once(log, f"listing:{key}", "%s holds a %s, not a %s: listings show nothing of it "
                              "(said once)", safe.escape(key, 300), held, kind)
                found += got
                if len(got) < want:
                    break
        return found
