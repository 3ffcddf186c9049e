"""Requests to a running supervisor that a signal cannot carry: ``smqsup
roll`` leaves the queues to roll in Redis, then sends SIGUSR1; a SIGUSR1
that finds no request rolls nothing."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional, cast

from smqsup.keys import roll_request
from smqsup.store.connection import wrapped
from smqsup.store.link import Link

#: A request nobody took is gone after this long, in seconds.
_KEEP_S = 60
#: Queue names a request may hold (a config holds fewer).
_MOST = 10_000
#: Requests one SIGUSR1 takes at most.
_TAKE = 100


@dataclass(frozen=True)
class RollRequest:
    """The queues to roll; None: every queue."""

    queues: Optional[tuple[str, ...]]


class Control:
    """The requests of ``smqsup roll`` (see the module's docstring): a list
    per supervisor, so that two commands at once never lose one."""

    def __init__(self, link: Link) -> None:
        self._link = link

    def ask_roll(self, host: str, pid: int, queues: Optional[list[str]]) -> bytes:
        """Leave a roll request for supervisor ``pid`` of ``host`` (None: every
        queue); the request as stored, for roll_taken."""
        key = roll_request(self._link.namespace, host, pid)
        raw = json.dumps({"token": os.urandom(8).hex(), "queues": queues}).encode()
        with wrapped("ask for a roll"):
            pipe = self._link.client.pipeline(transaction=False)
            pipe.rpush(key, raw)
            pipe.expire(key, _KEEP_S)
            pipe.execute()
        return raw

    def roll_taken(self, host: str, pid: int, raw: bytes) -> bool:
        """Whether the supervisor took request ``raw`` (or it expired)."""
        with wrapped("look at a roll request"):
            return self._link.client.lpos(roll_request(self._link.namespace, host, pid), raw) is None

    def take_rolls(self, host: str, pid: int) -> list[RollRequest]:
        """The requests left for this supervisor, taken at once (LPOP with a
        count: atomic), at most _TAKE of them; anything but a request of
        queue names (anyone with access may write there) is left out."""
        key = roll_request(self._link.namespace, host, pid)
        with wrapped("take the roll requests"):
            raws = cast(Optional[list[bytes]], self._link.client.lpop(key, _TAKE)) or []
        return [request for raw in raws if (request := _request(raw)) is not None]


def _request(raw: bytes) -> Optional[RollRequest]:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    queues = doc.get("queues")
    if queues is None:
        return RollRequest(None)
    names = _names(queues)
    return None if names is None else RollRequest(names)


def _names(names: object) -> Optional[tuple[str, ...]]:
    if not isinstance(names, list) or len(names) > _MOST or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)
