"""What the sync and the asyncio store decide about one message, written
once without I/O (h11's sans-I/O design): where it is, its tracked record,
how a cancel is answered, when a wait for its end stops. Each plan is a
generator that yields the commands of its next round trip and is sent
their replies (error replies in place); a wait's plan also yields the
steps of its subscription: Subscribe (the reply: the watch), Pause,
UNSUBSCRIBE.
The drivers only send and receive: Session.run (redis-py) and
aio/tracking.py's run (redis.asyncio), each stepping a plan through a
Stepper, so the two cannot drift apart. The same protocol carries a
publish (publish_plan.py).

    plan ──yield [Command | scripts.Call, ...]──▶ driver: one Batch, one round trip
         ◀──────────── send(replies) ─────────┘   (a Pause: wait on the subscription)
         ... until the plan returns its answer
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, Literal, NamedTuple, Optional, Protocol, TypeVar, Union

from smqsup import defaults, framing
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.core.failures import translated
from smqsup.store.core.records import Record, found_in
from smqsup.store.core.replies import UNREACHABLE, ms_of, text

T = TypeVar("T")

#: Entries read per round trip while looking through a queue's waiting messages.
PAGE = 1000
#: Longest a wait blocks on its subscription at once, s (then it reads the record again).
WAIT_SLICE_S = 5.0


class Command(NamedTuple):
    """A plain command; ``route``: the key a cluster sends a keyless one (TIME) by."""

    args: tuple[Any, ...]
    route: Any = None


class Blocking(list):  # type: ignore[type-arg]
    """The requests of a round trip that may wait on the server (XREAD
    BLOCK): a driver that bounds the round trips in flight (the
    AsyncBroker's turns) does not count it, as it would hold a turn for
    its wait."""


class Pause(NamedTuple):
    """A wait's plan asks to wait for a change published on its channel, at most ``seconds``."""

    seconds: float


class Subscribe(NamedTuple):
    """A wait asks to watch ``channel`` (the shared subscription) and to wait
    at most ``seconds`` for Redis to confirm it; the reply is the watch."""

    channel: str
    seconds: float


class Unsubscribe(NamedTuple):
    """A wait is done with its watch (the driver also drops it if the plan fails)."""


UNSUBSCRIBE = Unsubscribe()


class Watching(Protocol):
    """A wait's view of its subscription (waiters.Watch, aio_waiters.AsyncWatch)."""

    lost: bool
    refused: Optional[Exception]


Request = Union[Command, "scripts.Call[Any]"]
Plan = Generator[list[Request], list[Any], T]
WaitPlan = Generator[Union[list[Request], Pause, Subscribe, Unsubscribe], Any, T]


class Stepper(Generic[T]):
    """A plan as a driver steps it, what both drivers keep written once:
    the plan's next step for the reply to its last, its answer once it
    returned, and the watch its subscription steps hold (a driver drops it,
    whatever happens, when the plan is over)."""

    __slots__ = ("_plan", "answer", "watch", "_what", "_unwatch")

    def __init__(self, plan: "WaitPlan[T]") -> None:
        self._plan = plan
        self.watch: Any = None
        self._what = ""
        self._unwatch: Optional[Callable[[Any], None]] = None

    def next(self, reply: Any) -> Any:
        """The plan's next step, sent ``reply``; None once it returned (its answer then in ``answer``)."""
        try:
            return self._plan.send(reply)
        except StopIteration as done:
            self.answer: T = done.value
            return None

    def waits_on(self, step: Any) -> tuple[Any, float]:
        """What a driver waits for on a Subscribe (once it made the watch:
        Redis's confirmation) or a Pause (a change), and for how long at most."""
        return (self.watch.subscribed if isinstance(step, Subscribe) else self.watch.changed), step.seconds

    def waited(self, step: Any) -> Any:
        """The reply to a Subscribe (the watch) or a Pause (None: the change it waited for is cleared)."""
        if isinstance(step, Subscribe):
            return self.watch
        self.watch.changed.clear()
        return None

    def driving(self, what: str, unwatch: Optional[Callable[[Any], None]]) -> "Stepper[T]":
        """``with stepper.driving(what, unwatch):`` around a driver's loop
        over the steps: redis-py's errors raised as smqsup's, saying
        ``what`` (as failures.wrapped does); the watch the plan holds
        dropped by ``unwatch`` whatever happens. (The Stepper is its own
        context manager: no generator made per operation.)"""
        self._what, self._unwatch = what, unwatch
        return self

    def __enter__(self) -> "Stepper[T]":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Any) -> Literal[False]:
        try:
            error = None if exc is None else translated(self._what, exc)
            if error is not None:
                raise error from exc
            return False
        finally:
            if self.watch is not None and self._unwatch is not None:
                self._unwatch(self.watch)

    def dropped(self) -> Any:
        """The watch an Unsubscribe ends, no longer held."""
        watch, self.watch = self.watch, None
        return watch


S = TypeVar("S")


def performer(step: object, subscriber: Optional[S]) -> Optional[S]:
    """Who performs ``step`` if it is for the subscription (Subscribe,
    Pause, Unsubscribe): the driver's ``subscriber`` (a plan that
    subscribes needs one); None for a round trip, which the driver sends."""
    if not isinstance(step, (Subscribe, Pause, Unsubscribe)):
        return None
    if subscriber is None:
        raise ValueError("a plan that subscribes needs a subscriber")
    return subscriber


def fill(batch: scripts.Batch, requests: Sequence[Request]) -> scripts.Batch:
    """``batch`` with ``requests`` added, in order (what a driver sends);
    blocking when they are a Blocking round trip."""
    batch.blocking = isinstance(requests, Blocking)
    for r in requests:
        if isinstance(r, Command):
            batch.command(*r.args, route=r.route)
        else:
            batch.add(r)
    return batch


def _ok(reply: Any) -> Any:
    """``reply``, or raised when it is an error."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def find(keys: Callable[[str], QueueKeys], names: Sequence[str],
         message_id: str) -> Plan[Optional[tuple[str, Record]]]:
    """The partition (among ``names``, a queue's) holding the record of
    ``message_id``, and the record; None when none does. One round trip:
    TIME, then per partition HMGET (record, result, progress) and ZSCORE
    (its expiry). A key of the wrong type holds nothing readable; Redis
    unreachable is raised."""
    requests: list[Request] = [Command(("TIME",), route=keys(names[0]).tracked)]
    for name in names:
        k = keys(name)
        requests.append(Command(("HMGET", k.tracked, message_id, f"{message_id}:r", f"{message_id}:p")))
        requests.append(Command(("ZSCORE", k.tracked_expiry, message_id)))
    now, *replies = yield requests
    for reply in (now, *replies):
        if isinstance(reply, UNREACHABLE):
            raise reply
    return found_in(names, replies, ms_of(_ok(now)))


def _is(where: str, frame: bytes, message_id: str) -> bool:
    """Whether ``frame``, read in place ``where``, is message ``message_id``'s."""
    if where == "group":
        return framing.peek_id(framing.member_frame(frame)) == message_id
    return not (where == "pending" and framing.is_ticket(frame)) and framing.peek_id(frame) == message_id


def locate(k: QueueKeys, message_id: str) -> Plan[tuple[str, bytes, str]]:
    """(where, frame, holder) of ``message_id`` in the partition of keys
    ``k``: among the waiting messages (the priority set, scheduled, delayed,
    the groups' ready set: where "group", the frame its member there; then
    pending, its groups' tickets left out), PAGE entries a round trip, then
    in the registered consumers' lists ("processing", and the consumer whose
    list holds it), all of them in one round trip; ("", b"", "") when nowhere."""
    places = (("priority", "ZRANGE", k.priority), ("scheduled", "ZRANGE", k.scheduled),
              ("delayed", "ZRANGE", k.delayed), ("group", "ZRANGE", k.groups[0]), ("pending", "LRANGE", k.pending))
    for where, command, key in places:
        start = 0
        while True:
            [page] = yield [Command((command, key, start, start + PAGE - 1))]
            found = next((f for f in _ok(page) if _is(where, f, message_id)), None)
            if found is not None:
                return where, found, ""
            if len(page) < PAGE:
                break
            start += PAGE
    [holders] = yield [Command(("HKEYS", k.consumers))]
    cids = [text(cid) for cid in sorted(_ok(holders))]
    frames = (yield [Command(("LRANGE", k.processing(cid), 0, -1)) for cid in cids]) if cids else []
    for cid, held in zip(cids, frames):
        found = next((f for f in _ok(held) if framing.peek_id(f) == message_id), None)
        if found is not None:
            return "processing", found, cid
    return "", b"", ""


def cancel(keys: Callable[[str], QueueKeys], names: Sequence[str], message_id: str) -> Plan[str]:
    """Cancel ``message_id`` in the first of the partitions ``names`` that
    knows it, each looked through as locate() says: "cancelled",
    "stopping", the state it ended in, or "unknown" (cancel.lua). A message
    that moved between the look and the script ("moved") is looked for
    again, up to CANCEL_LOOKS times, the last as seen nowhere."""
    for name in names:
        k, answer = keys(name), "moved"
        for look in range(defaults.CANCEL_LOOKS):
            last = look == defaults.CANCEL_LOOKS - 1
            seen, frame, holder = ("", b"", "") if last else (yield from locate(k, message_id))
            [answer] = yield [scripts.cancel(k, message_id, seen, frame, holder)]
            if _ok(answer) != "moved":
                break
        if answer != "unknown":
            return str(answer)
    return "unknown"


def end(keys: Callable[[str], QueueKeys], name: str, message_id: str,
        timeout_s: float) -> WaitPlan[Optional[Record]]:
    """The record of ``message_id`` in partition ``name`` once it is final
    (Record.final), or as it is when ``timeout_s`` passed first; None once
    it is gone. Race-free: the record is read only once Redis confirmed the
    subscription to its channel, so an end published after that read is
    heard and one before it is read. A lost subscription is watched again
    while the wait goes on; a refused one (an ACL: NOPERM) is a BrokerError
    at once (watching again would be refused again)."""
    deadline = time.monotonic() + timeout_s
    channel = keys(name).tracked_channel(message_id)
    while True:
        w = yield Subscribe(channel, max(0.0, deadline - time.monotonic()))
        record = yield from _watched(keys, name, message_id, deadline, w)
        yield UNSUBSCRIBE
        if w.refused is not None:
            what = f"wait for message {message_id!r} of {name!r} (SUBSCRIBE {channel})"
            raise translated(what, w.refused) or w.refused
        if not (w.lost and record is not None and not record.final and time.monotonic() < deadline):
            return record


def _watched(keys: Callable[[str], QueueKeys], name: str, message_id: str, deadline: float,
             watching: Watching) -> WaitPlan[Optional[Record]]:
    """end() while subscribed: read the record, and while it may still change
    and ``deadline`` (monotonic) is ahead, Pause until a change is published
    (at most WAIT_SLICE_S) and read again; the record as read once
    ``watching`` is lost."""
    while True:
        found = yield from find(keys, [name], message_id)
        record = None if found is None else found[1]
        if record is None or record.final:
            return record
        left = deadline - time.monotonic()
        if left <= 0 or watching.lost:
            return record
        yield Pause(min(left, WAIT_SLICE_S))


def record(keys: Callable[[str], QueueKeys], names: Plan[list[str]], message_id: str,
           wait_s: float = 0.0) -> WaitPlan[Optional[Record]]:
    """A tracked message's record: looked for in the partitions ``names``
    gives (its plan run first), then, with ``wait_s`` > 0 and a record not
    final yet, waited for until it is (end()); None when none is kept
    (never tracked, or its result_ttl passed). What a producer's result(),
    state() and progress() read."""
    found = yield from find(keys, (yield from names), message_id)
    if found is None:
        return None
    where, kept = found
    if kept.final or wait_s <= 0:
        return kept
    return (yield from end(keys, where, message_id, wait_s))


def cancel_in(keys: Callable[[str], QueueKeys], names: Plan[list[str]], message_id: str) -> Plan[str]:
    """cancel() in the partitions ``names`` gives (its plan run first)."""
    return (yield from cancel(keys, (yield from names), message_id))
