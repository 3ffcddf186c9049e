"""Requests to a running supervisor that a signal cannot carry: ``smqsup
roll`` leaves the queues to roll in Redis, then sends SIGUSR1."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, cast

from smqsup.keys import roll_request
from smqsup.store.connection import wrapped
from smqsup.store.link import Link

#: A request nobody took is gone after this long, in seconds.
_KEEP_S = 60
#: Queue names a request may hold (a config holds fewer).
_MOST = 10_000


@dataclass(frozen=True)
class RollRequest:
    """The queues to roll; None: every queue."""

    queues: Optional[tuple[str, ...]]


class Control:
    """The requests of ``smqsup roll`` (see the module's docstring)."""

    def __init__(self, link: Link) -> None:
        self._link = link

    def ask_roll(self, host: str, pid: int, queues: Optional[list[str]]) -> None:
        """Leave a roll request for supervisor ``pid`` of ``host``, replacing any earlier one."""
        key = roll_request(self._link.namespace, host, pid)
        with wrapped("ask for a roll"):
            self._link.client.set(key, json.dumps(queues), ex=_KEEP_S)

    def roll_taken(self, host: str, pid: int) -> bool:
        """Whether the supervisor took its request (or it expired)."""
        with wrapped("look at a roll request"):
            return not self._link.client.exists(roll_request(self._link.namespace, host, pid))

    def take_roll(self, host: str, pid: int) -> Optional[RollRequest]:
        """The request left for this supervisor, read and deleted at once;
        None when there is none. Anything but a list of names (anyone with
        access may write there) is taken as every queue."""
        key = roll_request(self._link.namespace, host, pid)
        with wrapped("take a roll request"):
            # GET then DEL, not GETDEL (Redis 6.2): one supervisor reads its
            # own key, and a request replaced in between is one the CLI waits on.
            raw = cast(Optional[bytes], self._link.client.get(key))
            if raw is not None:
                self._link.client.delete(key)
        if raw is None:
            return None
        return RollRequest(_names(raw))


def _names(raw: bytes) -> Optional[tuple[str, ...]]:
    try:
        names = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(names, list) or len(names) > _MOST or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)
