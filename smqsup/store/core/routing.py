"""Redis Cluster's rules, for both drivers (sync/cluster.py, aio/cluster.py):
which key a command is routed by, how long a redirection is followed, and a
batch sent per master put back together: replies in the batch's order, the
commands a redirection refused (they did not run: sent again alone), and
WAIT's reply, which confirms nothing once a command was sent apart.
No I/O: the drivers send, this decides."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from smqsup.store.core.failures import REDIRECTIONS, NotSent

#: How long a command refused by a redirection is sent again before the
#: refusal is raised, in seconds: longer than a failover takes with the
#: default cluster-node-timeout (15 s) would make every caller wait that long.
REDIRECT_PATIENCE_S = 10.0


#: Pause before sending again a command refused by ASK or TRYAGAIN (a slot
#: being migrated), in seconds.
MIGRATING_PAUSE_S = 0.02


#: Pause before reading the slot map again after CLUSTERDOWN, in seconds.
DOWN_PAUSE_S = 0.2


#: Least time between two readings of the slot map caused by connection
#: errors, in seconds (every thread of every consumer may hit one at once).
REFRESH_MIN_INTERVAL_S = 0.2


def key_of(args: Sequence[Any]) -> Any:
    """The key a command smqsup sends is routed by: the first key of a script
    call, else the first argument after the command's name."""
    name = args[0].upper() if isinstance(args[0], str) else args[0]
    if name in ("EVALSHA", "EVAL", b"EVALSHA", b"EVAL"):
        return args[3]
    return args[1]


def grouped(indexes: Iterable[int], node_of: Callable[[int], Any],
            ident: Callable[[Any], Hashable]) -> list[tuple[Any, list[int]]]:
    """(node, positions of its commands) for the commands at ``indexes``, in
    the order their nodes first appear; ``node_of(i)`` is command i's master,
    ``ident(node)`` what tells two masters apart."""
    groups: dict[Hashable, tuple[Any, list[int]]] = {}
    for i in indexes:
        node = node_of(i)
        groups.setdefault(ident(node), (node, []))[1].append(i)
    return list(groups.values())


def placed(size: int, groups: Sequence[tuple[Any, list[int]]], sent: Sequence[Sequence[Any]]) -> list[Any]:
    """The replies of a batch of ``size`` commands in its order, from each
    group's replies ``sent`` (as grouped() gave the groups). Raises NotSent
    when no command of a non-empty batch could be sent at all."""
    replies: list[Any] = [None] * size
    for (_, where), got in zip(groups, sent):
        for i, reply in zip(where, got):
            replies[i] = reply
    if replies and all(isinstance(r, NotSent) for r in replies):
        raise replies[-1]
    return replies


def refused(replies: Sequence[Any]) -> list[int]:
    """The positions of the commands a redirection refused: they did not run."""
    return [i for i, reply in enumerate(replies) if isinstance(reply, REDIRECTIONS)]


def settled(batch: Any, replies: list[Any], resent: Sequence[int]) -> list[Any]:
    """``replies`` once the ``resent`` commands' replies are in: a WAIT in the
    batch counted the replicas of its own connection's writes, not of what
    was sent again apart, so after a resend it confirms nothing (0)."""
    if resent:
        for i in range(len(batch)):
            if batch.is_wait(i) and not isinstance(replies[i], Exception):
                replies[i] = 0
    return replies
