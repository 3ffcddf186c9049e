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
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import ms_of
from smqsup.store.ops import keytypes
from smqsup.store.ops.queues import Queues
from smqsup.store.sync.session import Session

#: Groups with ready messages one repair looks at (a slice of the groups' counts, by cursor).
REPAIR_SLICE = 200


class Groups:
    """A queue's message groups (see the module's docstring)."""

    def __init__(self, session: Session, queues: Queues) -> None:
        self._session = session
        self._queues = queues

    def partition(self, queue: str, group: str) -> str:
        """The partition message group ``group`` lives in (its name's CRC-32,
        as the producers pick it)."""
        count = self._queues.partitions(queue)
        return queue if count == 1 else partition_name(queue, zlib.crc32(group.encode("utf-8")) % count)

    def pause(self, queue: str, group: str, by: str) -> bool:
        """Pause message group ``group`` of the queue: its messages wait, the
        other groups go on; True if it was not paused."""
        session = self._session
        with wrapped(f"pause group {group!r} of {queue!r}"):
            info = json.dumps({"at_ms": ms_of(session.client.time()), "by": by}, separators=(",", ":"))
            return scripts.group_pause(session.keys(self.partition(queue, group)), group.encode("utf-8"),
                                       info).run(session.client)

    def resume(self, queue: str, group: str) -> bool:
        """Let paused group ``group`` take its turns again; True if it was paused."""
        session = self._session
        with wrapped(f"resume group {group!r} of {queue!r}"):
            return scripts.group_pause(session.keys(self.partition(queue, group)), group.encode("utf-8"),
                                       "").run(session.client)

    def repair(self, queue: str, lock: scripts.Lock, limit: int, cursor: bytes = b"0") -> Repair:
        """One repair of queue (partition) ``queue``'s groups by its elected
        collector (group_repair.lua), from ``cursor``; and its group keys of
        the wrong type (keytypes.wrong's lines). A queue with no group state
        costs one round trip."""
        session = self._session
        k = session.keys(queue)
        with wrapped(f"repair the groups of {queue!r}"):
            client = session.client
            pipe = client.pipeline(transaction=False)
            pipe.exists(k.groups[0], k.groups[1], k.groups[5])
            pipe.hkeys(k.consumers)
            for key in k.groups:
                pipe.type(key)
            present, registered, *types = pipe.execute()
            wrong = keytypes.wrong(keytypes.group_keys(k), types)
            if not present:
                return Repair(b"0", 0, 0, 0, wrong)
            consumers: Sequence[str] = sorted(c.decode("utf-8", "surrogateescape") for c in registered)
            return Repair(*scripts.group_repair(k, consumers, lock, limit, cursor, REPAIR_SLICE).run(client), wrong)


class Repair(NamedTuple):
    """What one repair of a partition's groups did: the cursor of the next,
    counts set right, turns given, members of the ready set that were no
    group's (dead-lettered); and its group keys of the wrong type."""

    cursor: bytes
    fixed: int
    turns: int
    dead: int
    wrong: list[str]
