"""Which of a queue's keys hold another type than the scripts need (a key
anyone with access overwrote): one TYPE each, the answer one line a key
("KEY holds a string, not a list") for the collector's log and status."""

from __future__ import annotations

from collections.abc import Sequence

from smqsup.keys import QueueKeys
from smqsup.store.core.replies import text

#: The type each group key must hold, in QueueKeys.groups' order (ready, count, state, rate, wait, running).
GROUP_KEY_TYPES = ("zset", "zset", "hash", "zset", "zset", "hash")


def group_keys(k: QueueKeys) -> list[tuple[str, str]]:
    """(key, type) of a partition's group keys."""
    return list(zip(k.groups, GROUP_KEY_TYPES))


def queue_keys(k: QueueKeys) -> list[tuple[str, str]]:
    """(key, type) of the keys a partition's messages wait in (and its
    outboxes), then its group keys: what status checks."""
    return [(k.pending, "list"), (k.priority, "zset"), (k.scheduled, "zset"), (k.delayed, "zset"), (k.dead, "list"),
            (k.deps, "zset"), (k.blocked, "hash"), (k.outbox_parked, "zset"), (k.outbox_failures, "hash"),
            *group_keys(k)]


def wrong(expected: Sequence[tuple[str, str]], types: Sequence[object]) -> list[str]:
    """A line for each key of ``expected`` whose TYPE reply in ``types`` (same
    order) is another type than wanted (a key that does not exist is fine)."""
    out = []
    for (key, wanted), held in zip(expected, types):
        found = text(held) if isinstance(held, (bytes, str)) else "?"
        if found not in ("none", wanted):
            out.append(f"{key} holds a {found}, not a {wanted}")
    return out
