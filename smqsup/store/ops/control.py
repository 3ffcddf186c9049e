"""Requests to a running supervisor that a signal cannot carry: ``smqsup
roll`` leaves the queues to roll in Redis, then sends SIGUSR1; a SIGUSR1
that finds no request rolls nothing. A request is dated by the Redis clock
and taken only while fresh (ROLL_REQUEST_FRESH_S): one left behind by a
command that gave up or died never widens a later roll."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional, cast

from smqsup import defaults
from smqsup.keys import roll_request
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import ms_of
from smqsup.store.sync.session import Session

#: A request nobody took is gone after this long, in seconds.
_KEEP_S = 60
#: Queue names a request may hold (a config holds fewer).
_MOST = 10_000
#: Requests one SIGUSR1 takes at most.
_TAKE = 100
#: A request dated this far ahead of the taker's Redis clock is refused (a cluster's masters' clocks differ), ms.
_AHEAD_MS = 1000


@dataclass(frozen=True)
class RollRequest:
    """The queues to roll; None: every queue."""

    queues: Optional[tuple[str, ...]]


class Control:
    """The requests of ``smqsup roll`` (see the module's docstring): a list
    per supervisor, so that two commands at once never lose one."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def ask_roll(self, host: str, pid: int, queues: Optional[list[str]]) -> bytes:
        """Leave a roll request for supervisor ``pid`` of ``host`` (None: every
        queue); the request as stored, for roll_taken."""
        key = roll_request(self._session.namespace, host, pid)
        with wrapped("ask for a roll"):
            at_ms = ms_of(self._session.client.time())
            raw = json.dumps({"token": os.urandom(8).hex(), "queues": queues, "at_ms": at_ms}).encode()
            pipe = self._session.client.pipeline(transaction=False)
            pipe.rpush(key, raw)
            pipe.expire(key, _KEEP_S)
            pipe.execute()
        return raw

    def withdraw_roll(self, host: str, pid: int, raw: bytes) -> None:
        """Take back request ``raw`` nobody took (the command gives up)."""
        with wrapped("withdraw a roll request"):
            self._session.client.lrem(roll_request(self._session.namespace, host, pid), 0, raw)

    def roll_taken(self, host: str, pid: int, raw: bytes) -> bool:
        """Whether the supervisor took request ``raw`` (or it expired)."""
        with wrapped("look at a roll request"):
            return self._session.client.lpos(roll_request(self._session.namespace, host, pid), raw) is None

    def take_rolls(self, host: str, pid: int) -> list[RollRequest]:
        """The fresh requests left for this supervisor, taken at once (LPOP
        with a count: atomic), at most _TAKE of them; a stale one (older than
        ROLL_REQUEST_FRESH_S, or undated) and anything but a request of queue
        names (anyone with access may write there) are taken and left out."""
        key = roll_request(self._session.namespace, host, pid)
        with wrapped("take the roll requests"):
            now, [raws] = self._session.with_clock(lambda pipe: pipe.lpop(key, _TAKE))
        now_ms = ms_of(now)
        return [request for raw in cast(Optional[list[bytes]], raws) or []
                if (request := _request(raw, now_ms)) is not None]


def _request(raw: bytes, now_ms: int) -> Optional[RollRequest]:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not _fresh(doc.get("at_ms"), now_ms):
        return None
    queues = doc.get("queues")
    if queues is None:
        return RollRequest(None)
    names = _names(queues)
    return None if names is None else RollRequest(names)


def _fresh(at_ms: object, now_ms: int) -> bool:
    if isinstance(at_ms, bool) or not isinstance(at_ms, int):
        return False
    return -_AHEAD_MS <= now_ms - at_ms <= defaults.ROLL_REQUEST_FRESH_S * 1000


def _names(names: object) -> Optional[tuple[str, ...]]:
    if not isinstance(names, list) or len(names) > _MOST or not all(isinstance(n, str) for n in names):
        return None
    return tuple(names)
