"""The Redis operations on what a queue holds, for operators: list pages and
bounded peeks (peek_range.lua) the listings read, the waiting messages page
by page and their removal by id, and the dead letters (read, requeue, purge).
views/browse.py and views/deadletters.py make sense of what these return.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any, Optional, cast

from smqsup import defaults, framing, safe
from smqsup.errors import BrokerError
from smqsup.logs import warn_once
from smqsup.store import scripts
from smqsup.store.core import plans
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import LOGGER, text
from smqsup.store.sync.session import Session

log = logging.getLogger(LOGGER)
#: Most frames one dead-letter purge script call deletes.
PURGE_CHUNK = 1000
#: Entries read per page while going through the waiting messages, and
#: messages removed per remove script call.
PAGE = plans.PAGE


class Contents:
    """What a queue holds, read and edited for operators (see the module's docstring)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    # --- listings ----------------------------------------------------------------

    def list_page(self, key: str, start: int, count: int) -> list[bytes]:
        """``count`` entries of a list from ``start`` (LRANGE)."""
        with wrapped(f"read {key}"):
            return cast(list[bytes], self._session.client.lrange(key, start, start + count - 1))

    def delete(self, key: str) -> None:
        with wrapped(f"delete {key}"):
            self._session.client.delete(key)

    def peek_range(self, key: str, kind: str, count: int, budget: scripts.ReadBudget, *, first: int = 0,
                   step: int = 1, split: bytes = b"") -> list[scripts.Peeked]:
        """scripts.peek_range over ``count`` elements, LISTING_CHUNK a call,
        spending ``budget``; a key of another type gives none (said once)."""
        found: list[scripts.Peeked] = []
        with wrapped(f"read {key}"):
            while len(found) < count:
                want = min(defaults.LISTING_CHUNK, count - len(found))
                call = scripts.peek_range(key, kind, first + step * len(found), step, want, budget, split)
                held, budget.whole, got = call.run(self._session.client)
                if held not in (kind, "none"):
                    warn_once(log, f"listing:{key}", "%s holds a %s, not a %s: listings show nothing of it "
                              "(said once)", safe.escape(key, 300), held, kind)
                found += got
                if len(got) < want:
                    break
        return found

    def holders(self, queue: str) -> list[str]:
        """The ids of ``queue``'s registered consumers, whose processing lists
        a listing reads: in the order of their bytes, bytes that are not
        UTF-8 kept as escapes."""
        with wrapped(f"list messages of {queue!r}"):
            client: Any = self._session.client  # replies are bytes (decode_responses is off)
            ids = sorted(client.hkeys(self._session.keys(queue).consumers))
        return [cid.decode("utf-8", "backslashreplace") for cid in ids]

    def waiting(self, queue: str) -> Iterator[tuple[str, bytes]]:
        """(where, frame) of every waiting message of ``queue``: the priority
        set, scheduled, delayed (retries waiting), the groups' ready set
        (where "group": the frame is its member there, framing.member_frame),
        then pending (its groups' tickets left out), PAGE entries a read,
        read as the caller goes on."""
        k = self._session.keys(queue)
        with wrapped(f"list messages of {queue!r}"):
            client: Any = self._session.client  # replies are bytes (decode_responses is off)
            for where, key in (("priority", k.priority), ("scheduled", k.scheduled), ("delayed", k.delayed),
                               ("group", k.groups[0])):
                start = 0
                while page := client.zrange(key, start, start + PAGE - 1):
                    yield from ((where, frame) for frame in page)
                    start += PAGE
            start = 0
            while page := client.lrange(k.pending, start, start + PAGE - 1):
                yield from (("pending", frame) for frame in page if not framing.is_ticket(frame))
                start += PAGE

    def group_waiting(self, queue: str, group: str, count: int) -> list[bytes]:
        """The first ``count`` members of message group ``group``'s range of
        the groups' ready set (in the order they go; framing.member_frame)."""
        prefix = b"%d:%b\t" % (len(group.encode("utf-8")), group.encode("utf-8"))
        with wrapped(f"list group {group!r} of {queue!r}"):
            client: Any = self._session.client
            return cast(list[bytes], client.zrangebylex(self._session.keys(queue).groups[0], b"[" + prefix,
                                                        b"(" + prefix[:-1] + b"\n", 0, max(0, count)))

    def remove(self, queue: str, chosen: Sequence[tuple[str, bytes, str, Optional[str]]]) -> list[bool]:
        """Remove (where, frame, id, dedup key or None) waiting messages of
        ``queue`` (remove.lua, PAGE a call); per message whether it was
        still there (a message taken meanwhile is left to its consumer)."""
        k = self._session.keys(queue)
        done: list[bool] = []
        with wrapped(f"remove messages of {queue!r}"):
            for start in range(0, len(chosen), PAGE):
                done += scripts.remove(k, chosen[start:start + PAGE]).run(self._session.client)
        return done

    def cancel(self, names: Sequence[str], message_id: str) -> str:
        """Cancel ``message_id`` in the partitions ``names`` of a queue, looked
        for among the waiting messages, then in the lists of the registered
        consumers, partition by partition until one knows it: "cancelled",
        "stopping", the state it ended in, or "unknown" (plans.cancel())."""
        return self._session.run(plans.cancel(self._session.keys, names, message_id),
                                 f"cancel message {message_id!r} of {names[0]!r}")

    # --- dead letters --------------------------------------------------------

    def dead_letters(self, queue: str, start: int = 0, count: int = 100) -> list[bytes]:
        """Dead-letter entries, newest first."""
        with wrapped(f"read dead letters of {queue!r}"):
            return cast(list[bytes], self._session.client.lrange(self._session.keys(queue).dead, start, start + count - 1))

    def dlq_requeue(self, queue: str, entries: Sequence[bytes]) -> int:
        if not entries:
            return 0
        with wrapped(f"requeue dead letters of {queue!r}"):
            return scripts.dlq_requeue(self._session.keys(queue), entries).run(self._session.client)

    def dlq_delete(self, queue: str, entries: Sequence[tuple[bytes, str, Optional[str]]],
                   dead_key: Optional[str] = None) -> int:
        """Delete (entry, message id, dedup key or None) dead letters from the
        queue's dead-letter list (or ``dead_key``, a list set aside by
        dlq_set_aside), freeing the dedup keys that still name their
        messages; returns how many entries were there."""
        k = self._session.keys(queue)
        with wrapped(f"purge dead letters of {queue!r}"):
            return sum(scripts.dlq_purge(k, dead_key or k.dead, entries[i:i + PURGE_CHUNK]).run(self._session.client)
                       for i in range(0, len(entries), PURGE_CHUNK))

    def dlq_set_aside(self, queue: str) -> tuple[str, int]:
        """Move the whole dead-letter list, atomically, to a new key of its
        own (expiring in an hour, in case the caller dies before deleting it)
        and return that key and how many entries it holds: a whole purge
        reads it at leisure while new dead letters start a new list, and no
        entry it holds can be requeued meanwhile."""
        k = self._session.keys(queue)
        aside = k.dead_aside(os.urandom(6).hex())
        with wrapped(f"purge dead letters of {queue!r}"):
            found = self._session.client.type(k.dead)
            if found not in (b"list", b"none"):
                raise BrokerError(f"purge dead letters of {queue!r}: WRONGTYPE {k.dead} holds a "
                                  f"{text(found)}, not a list: nothing done")
            def move(client: Any) -> list[Any]:
                pipe = client.pipeline(transaction=True)
                pipe.llen(k.dead)
                pipe.renamenx(k.dead, aside)
                pipe.pexpire(aside, 3_600_000)
                return cast(list[Any], pipe.execute(raise_on_error=False))
            n, _, _ = self._session.on_node(queue, move)
        return aside, int(n) if isinstance(n, int) else 0
