"""The Redis operations on a queue's message groups for operators and the
collector: the partition a group lives in, pausing and resuming one group,
and the collector's repair of the groups' counts and turns
(scripts/includes/groups.lua has the design).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from smqsup.keys import partition_name
from smqsup.store import scripts
from smqsup.store.connection import wrapped
from smqsup.store.link import Link, ms_of, text
from smqsup.store.queues import Queues

#: The type each group key must hold, in QueueKeys.groups' order (ready, count, state, rate, wait, running).
GROUP_KEY_TYPES = ("zset", "zset", "hash", "zset", "zset", "hash")

#: Groups with ready messages one repair looks at (a slice of the groups' counts, by cursor).
REPAIR_SLICE = 200


class Groups:
    """A queue's message groups (see the module's docstring)."""

    def __init__(self, link: Link, queues: Queues) -> None:
        self._link = link
        self._queues = queues

    def partition(self, queue: str, group: str) -> str:
        """The partition message group ``group`` lives in (its name's CRC-32,
        as the producers pick it)."""
        count = self._queues.partitions(queue)
        return queue if count == 1 else partition_name(queue, zlib.crc32(group.encode("utf-8")) % count)

    def pause(self, queue: str, group: str, by: str) -> bool:
        """Pause message group ``group`` of the queue: its messages wait, the
        other groups go on; True if it was not paused."""
        link = self._link
        with wrapped(f"pause group {group!r} of {queue!r}"):
            info = json.dumps({"at_ms": ms_of(link.client.time()), "by": by}, separators=(",", ":"))
            return scripts.group_pause(link.keys(self.partition(queue, group)), group.encode("utf-8"),
                                       info).run(link.client)

    def resume(self, queue: str, group: str) -> bool:
        """Let paused group ``group`` take its turns again; True if it was paused."""
        link = self._link
        with wrapped(f"resume group {group!r} of {queue!r}"):
            return scripts.group_pause(link.keys(self.partition(queue, group)), group.encode("utf-8"),
                                       "").run(link.client)

    def wrong_types(self, names: Sequence[str]) -> dict[str, list[str]]:
        """For each of queue partitions ``names``: its group keys that hold
        another type than the scripts need, each as one line ("KEY holds a
        string, not a hash"); grouped messages there wait (or are refused at
        publish) until the key is repaired. One round trip (TYPE of each)."""
        pipe = self._link.client.pipeline(transaction=False)
        for name in names:
            for key in self._link.keys(name).groups:
                pipe.type(key)
        with wrapped("read the types of the group keys"):
            found = iter(pipe.execute())
        return {name: self._wrong(name, [next(found) for _ in GROUP_KEY_TYPES]) for name in names}

    def _wrong(self, name: str, types: Sequence[object]) -> list[str]:
        """wrong_types' lines for partition ``name`` whose group keys' TYPE replies are ``types``."""
        out = []
        for key, wanted, held in zip(self._link.keys(name).groups, GROUP_KEY_TYPES, types):
            found = text(held) if isinstance(held, (bytes, str)) else "?"
            if found not in ("none", wanted):
                out.append(f"{key} holds a {found}, not a {wanted}")
        return out

    def repair(self, queue: str, lock: scripts.Lock, limit: int, cursor: bytes = b"0") -> Repair:
        """One repair of queue (partition) ``queue``'s groups by its elected
        collector (group_repair.lua), from ``cursor``; and its group keys of
        the wrong type (as wrong_types). A queue with no group state costs
        one round trip."""
        link = self._link
        k = link.keys(queue)
        with wrapped(f"repair the groups of {queue!r}"):
            client = link.client
            pipe = client.pipeline(transaction=False)
            pipe.exists(k.groups[1], k.groups[5])
            pipe.hkeys(k.consumers)
            for key in k.groups:
                pipe.type(key)
            present, registered, *types = pipe.execute()
            wrong = self._wrong(queue, types)
            if not present:
                return Repair(b"0", 0, 0, wrong)
            consumers: Sequence[str] = sorted(c.decode("utf-8", "surrogateescape") for c in registered)
            return Repair(*scripts.group_repair(k, consumers, lock, limit, cursor, REPAIR_SLICE).run(client), wrong)


class Repair(NamedTuple):
    """What one repair of a partition's groups did: the cursor of the next,
    counts set right, turns given; and its group keys of the wrong type."""

    cursor: bytes
    fixed: int
    turns: int
    wrong: list[str]
