"""The Redis operations on queues as wholes: which queues exist, pausing and
resuming them (every partition), and their partition counts (declared by
supervisors, read by everyone, a ticket drawn by each consumer).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from typing import Optional, cast

import redis.exceptions as rexc

from smqsup import defaults
from smqsup.errors import BrokerError
from smqsup.keys import partition_names, queues_set
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.core.declared import NOTHING_DECLARED, Declared, PartitionCache, partitions
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import LOGGER, ms_of
from smqsup.store.sync.session import Session

log = logging.getLogger(LOGGER)


class Queues:
    """Queues, their paused flags and partitions (see the module's docstring)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        #: Each queue's partition count and declared options, as read last (Tracking reads it too).
        self.cache = PartitionCache()

    def known_queues(self) -> list[str]:
        with wrapped("list queues"):
            names = cast(set[bytes], self._session.client.smembers(queues_set(self._session.namespace)))
        # Anyone can SADD there: a name that is not UTF-8 comes back with U+FFFD.
        return sorted(q.decode("utf-8", "replace") for q in names)

    # --- pausing --------------------------------------------------------------

    def pause(self, queue: str, by: str) -> bool:
        """Pause the queue, each of its partitions (its consumers on every
        host take nothing until resume()); True if one was not paused. The
        flag lives in Redis, so it outlasts every supervisor's restart.

        Pause is the queue's, not its partitions': after flagging them the
        count is read again and any partition added meanwhile is flagged
        too (declare_partitions copies the flag to the partitions it adds,
        then looks at partition 0 again: one of the two sees the other)."""
        session = self._session
        with wrapped(f"pause {queue!r}"):
            now_ms = ms_of(session.client.time())
            info = json.dumps({"at_ms": now_ms, "by": by}, separators=(",", ":"))
            return self._every_partition(queue, lambda p: bool(session.client.set(session.keys(p).paused, info, nx=True)))

    def resume(self, queue: str) -> bool:
        """Let the queue's consumers take messages again (every partition,
        those added meanwhile included, as pause() says); True if one was
        paused."""
        session = self._session
        with wrapped(f"resume {queue!r}"):
            return self._every_partition(queue, lambda p: bool(session.client.delete(session.keys(p).paused)))

    def paused_flag(self, queue: str) -> Optional[bytes]:
        """The queue's paused flag as stored (pause() writes JSON: at_ms, by;
        anybody may have written anything), None when it is not paused."""
        with wrapped(f"read the paused flag of {queue!r}"):
            return cast(Optional[bytes], self._session.client.get(self._session.keys(queue).paused))

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
        session = self._session
        k = session.keys(queue)
        with wrapped(f"declare the partitions of {queue!r}"):
            before = self.partitions(queue, fresh=True)
            flag = cast(Optional[bytes], session.client.get(k.paused)) if count > before else None
            if count > before:
                self._prepare_partitions(queue, before, count, flag)
            stored = scripts.partitions(k, count).run(session.client)
            if count > before:
                self._follow_pause(queue, before, count, flag)
        n = self.cache.counts[queue] = (min(max(stored, 1), defaults.PARTITIONS_MAX), time.monotonic())
        return n[0]

    def _prepare_partitions(self, queue: str, before: int, count: int, flag: Optional[bytes]) -> None:
        """Step (1) of a raise from ``before`` to ``count`` partitions."""
        session = self._session
        names = partition_names(queue, count)
        for p in names[1:]:
            scripts.partitions(session.keys(p), count).run(session.client)  # the larger count stays
        if flag is not None:
            for p in names[before:]:
                session.client.set(session.keys(p).paused, flag, nx=True)

    def _follow_pause(self, queue: str, before: int, count: int, copied: Optional[bytes]) -> None:
        """Step (3) of a raise: the new partitions take partition 0's flag as
        it is now; a flag this raise copied there is withdrawn (compare and
        delete: a pause's own flag is left) if partition 0 was resumed."""
        session = self._session
        flag = cast(Optional[bytes], session.client.get(session.keys(queue).paused))
        for p in partition_names(queue, count)[before:]:
            if flag is not None:
                session.client.set(session.keys(p).paused, flag, nx=True)
            elif copied is not None:
                scripts.compare_and_delete(session.keys(p).paused, copied).run(session.client)

    def partitions(self, queue: str, *, fresh: bool = False) -> int:
        """How many partitions ``queue`` has, as its supervisors declared it
        (1 if none did), read again at most every PARTITIONS_READ_S (at once
        when ``fresh``). Junk in the key reads as 1, a count above
        defaults.PARTITIONS_MAX as that."""
        known = self.cache.fresh(queue, fresh)
        if known is not None:
            return known
        return self._session.run(partitions(self.cache, self._session.keys(queue), queue),
                                 f"read the partitions of {queue!r}")

    def result_ttl(self, queue: str) -> int:
        """The result_ttl (s) ``queue``'s consumers declared (0: none), read
        with its partition count (cached as partitions() says)."""
        count, said = self.declared(queue)
        if isinstance(count, BrokerError) and queue not in self.cache.declared:
            raise count
        return said.result_ttl_s

    def declared(self, queue: str) -> "tuple[int | BrokerError, Declared]":
        """What ``queue``'s consumers declared, in one cached read: its
        partition count, or the BrokerError reading it raised, and the
        options producers apply (each 0 when unreadable). Options read with
        a count that could not be read still count."""
        try:
            count: "int | BrokerError" = self.partitions(queue)
        except BrokerError as exc:
            count = exc
        return count, self.cache.declared.get(queue, NOTHING_DECLARED)

    def declare_options(self, queue: str, said: Declared) -> None:
        """Store what producers of ``queue`` (every partition) are to apply
        by default (Declared). The last consumer to start wins: supervisors
        whose configs disagree take turns."""
        session = self._session
        with wrapped(f"declare the options of {queue!r}"):
            for name in partition_names(queue, self.partitions(queue)):
                session.client.hset(session.keys(name).options, mapping=said.fields())
        self.cache.declared[queue] = said

    def partition_names(self, queue: str, at_least: int = 1) -> list[str]:
        """The partitions of ``queue`` (its own name first): as many as
        partitions() says, or ``at_least`` (the config's count) if more.
        Never raises: with Redis unreachable, the count read last."""
        try:
            n: Optional[int] = self.partitions(queue)
        except BrokerError:
            n = None
        return self.cache.names(queue, n, at_least)

    def partition_ticket(self, queue: str) -> int:
        """A number drawn by a consumer of ``queue`` (INCR): which partition it
        prefers is this modulo the count, so consumers spread evenly. A
        counter Redis cannot increment (junk, the wrong type, at its limit)
        gives a random number, said once: a consumer never waits on it."""
        key = self._session.keys(queue).partition_seq
        with wrapped(f"draw a partition of {queue!r}"):
            try:
                return int(self._session.client.incr(key))
            except rexc.ResponseError as exc:
                warn_once(log, f"ticket:{queue}", "queue %s: %s cannot be counted (%s); consumers draw their "
                          "partition at random (said once)", queue, key, exc)
                return random.randrange(1 << 30)


