"""Worker: a queue's configured handler run in the test's own process,
through the real scripts, until nothing is ready (``drain``), and what
became of each message (``Handled``).

    worker.drain("orders") ─▶ a Consumer (concurrency 1: the handler on the test's thread)
        ─▶ runs until it would wait for the queue ─▶ [move_time: due retries and
        scheduled messages brought forward (advance.lua), promoted (promote.lua), again]
        ─▶ [Handled(...), ...]: acked with results, retried, dead-lettered with reasons
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from smqsup import deadletter, defaults, message, safe
from smqsup.config.model import Config, QueueConfig, load
from smqsup.errors import MessageError, UsageError
from smqsup.store.broker import Broker
from smqsup.worker.consumer import Consumer
from smqsup.worker.consumer_state import Handler
from smqsup.worker.handlers import import_handler
from smqsup.worker.process_hooks import Stack, with_hooks
from smqsup.worker.runners import is_async_handler

#: Longest a drain's consumer waits for the queue once nothing is in hand, s.
_IDLE_FETCH_S = 0.05
#: Rounds of "handle what is ready, then move time" a drain makes at most.
ROUNDS_MAX = 1000
#: The most seconds a drain's move_time may name (ten years; True: however far).
ADVANCE_MAX_S = 10 * 365 * 86400.0


@dataclass(frozen=True)
class Handled:
    """What became of one message in a drain: ``state`` "acked" (its
    handler returned ``result``), "retried" (it failed and waits for its
    retry: ``error``), or "dead" (dead-lettered: ``reason``, and ``error``
    when its handler raised). ``attempts``: its handler's runs in all (this
    drain's and earlier ones'; 0: dead-lettered without running, expired)."""

    id: str
    queue: str
    body: Any
    state: str
    attempts: int
    result: Any = None
    error: Optional[BaseException] = None
    reason: str = ""


class _Seen:
    """A hook (worker/process_hooks.py Stack runs it after each attempt, last of
    all): each attempt's message and how it ended, by message id, in order.
    A tracked message's result that the consumer cannot keep (not JSON,
    too large) counts as the failure it is there (outcomes.py OutcomeDecider.drawn)."""

    def __init__(self) -> None:
        self.runs: dict[str, list[tuple[message.Message, Any, Optional[BaseException]]]] = {}

    def after_process(self, msg: message.Message, result: Any, error: Optional[BaseException]) -> None:
        if error is None and msg.result_ttl_s:
            try:
                message.bounded_json(result, "the handler's result", defaults.RESULT_MAX_BYTES)
            except MessageError as exc:
                result, error = None, exc
        self.runs.setdefault(msg.id, []).append((msg, result, error))


def _check_move_time(move_time: object) -> None:
    """UsageError unless ``move_time`` is True, False or seconds (finite, >= 0)."""
    if isinstance(move_time, bool):
        return
    if not isinstance(move_time, (int, float)) or not 0 <= move_time <= ADVANCE_MAX_S:  # (NaN fails it)
        raise UsageError(f"move_time: expected True, False or seconds from 0 to {ADVANCE_MAX_S:g}, "
                         f"got {safe.escape(repr(move_time), 80)}")


class Worker:
    """Runs the handlers of the queues of ``config`` (a queues.yaml path)
    on the Redis at ``url``, in ``namespace`` (the fixtures give the test's
    own). The handler (and the queue's hooks) are imported as a supervisor's
    consumer imports them, from the config file's directory."""

    def __init__(self, config: Union[str, "os.PathLike[str]", Config], url: str, namespace: str) -> None:
        self.config = config if isinstance(config, Config) else load(config)
        self.url = url
        self.namespace = namespace
        self.broker = Broker(url, namespace, client_name="smqsup-testing")
        self._handlers: dict[str, Handler] = {}

    def close(self) -> None:
        self.broker.close()

    def queue(self, name: str) -> QueueConfig:
        """The configured queue ``name`` (UsageError naming the known ones)."""
        try:
            return self.config.queues[name]
        except KeyError:
            known = ", ".join(sorted(self.config.queues))
            raise UsageError(f"{self.config.path}: no queue {name!r} (queues: {known})") from None

    def handler(self, name: str) -> Handler:
        """The queue's handler, with its hooks, imported once (from the
        config file's directory, as a supervisor imports it)."""
        if name not in self._handlers:
            q = self.queue(name)
            key, path = f"queues.{name}.handler", str(self.config.path)
            with self._importing():
                self._handlers[name] = with_hooks(import_handler(q.handler, path=path, key=key), q, path=path)
        return self._handlers[name]

    @contextlib.contextmanager
    def _importing(self) -> Iterator[None]:
        """The config file's directory first in sys.path while a handler is
        imported or runs (it may import more as it runs), and out of it
        again after: the rest of a test run imports what it did before."""
        root = str(Path(self.config.path).resolve().parent)
        if root in sys.path:
            yield
            return
        sys.path.insert(0, root)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):  # (the code under test took it out itself)
                sys.path.remove(root)

    def drain(self, queue: str, *, move_time: Union[bool, float] = False, fail_fast: bool = False) -> list[Handled]:
        """Handle every message of ``queue`` that is ready, one at a time on
        this thread, through the real scripts, until none is; what became of
        each message handled or dead-lettered meanwhile, in the order they
        first ran. ``move_time``: True, and then retries and messages
        published for later are brought forward and handled too, round after
        round, until none waits (at most ROUNDS_MAX rounds); a number of
        seconds, and those due within it are, once. ``fail_fast``: once the
        drain is over, raise the first error of a handler whose message was
        not acked (its own exception and traceback: the test fails with it)."""
        _check_move_time(move_time)
        handler, seen = self.handler(queue), _Seen()
        recorded = Stack(handler, [seen], queue).wrapped(is_async_handler(handler))
        q = self.queue(queue)
        dead_before = self._dead_count(queue)
        for round_ in range(ROUNDS_MAX):
            with self._importing():
                self._run_while_released(q, recorded)
            if move_time is False or (move_time is not True and round_ > 0) or not self._forward(queue, move_time):
                break
        handled = self._outcomes(queue, seen, dead_before)
        failed = next((h.error for h in handled if fail_fast and h.error is not None and h.state != "acked"), None)
        if failed is not None:
            raise failed
        return handled

    def _run_while_released(self, q: QueueConfig, handler: Handler) -> None:
        """Consumers, one after another, while the last one handled messages
        and more are ready now: an ack releases the messages that depended
        on it (the next step of a chain) after the consumer's last look at
        the queue, which then finds it empty and stops."""
        for _ in range(ROUNDS_MAX):
            if not self._run(q, handler) or not self._ready(q.name):
                return

    def _ready(self, queue: str) -> bool:
        """Whether a partition of ``queue`` holds a ready message."""
        return any(self.broker.statistics.sizes(name)["pending"] for name in self.broker.queues.partition_names(queue))

    def _run(self, q: QueueConfig, handler: Handler) -> int:
        """One consumer, run until it would wait for the queue; the messages it took."""
        # (the handler on this thread, one message at a time, however the file sets it)
        one = dataclasses.replace(q, concurrency=1, prefetch=1, max_messages=0)
        box: list[Consumer] = []
        # Nothing in hand and the queue empty: it stops (after one short look).
        box.append(Consumer(self.broker, one, handler, fetch_block_s=_IDLE_FETCH_S,
                            on_idle=lambda: box[0].request_stop()))
        box[0].run()
        return box[0].stats.received

    def _forward(self, queue: str, move_time: Union[bool, float]) -> bool:
        """Bring the waiting retries and scheduled messages forward and make
        them ready; whether any became ready."""
        ahead = None if move_time is True else float(move_time)
        made = 0
        for name in self.broker.queues.partition_names(queue):
            if self.broker.messages.advance(name, ahead):
                while (moved := self.broker.messages.promote(name).moved) > 0:
                    made += moved
        return made > 0

    def _dead_count(self, queue: str) -> dict[str, int]:
        return {name: self.broker.statistics.sizes(name)["dead"] for name in self.broker.queues.partition_names(queue)}

    def _outcomes(self, queue: str, seen: _Seen, dead_before: dict[str, int]) -> list[Handled]:
        dead = self._new_dead(queue, dead_before)
        out: list[Handled] = []
        for mid, runs in seen.runs.items():
            msg, result, error = runs[-1]
            attempts = msg.attempts + 1  # (its handler's runs, in this drain and before)
            if mid in dead:
                out.append(Handled(mid, queue, msg.body, "dead", attempts, None, error, dead.pop(mid)[1]))
            elif error is None:
                out.append(Handled(mid, queue, msg.body, "acked", attempts, result))
            else:
                out.append(Handled(mid, queue, msg.body, "retried", attempts, None, error))
        out.extend(Handled(mid, queue, body, "dead", 0, reason=reason) for mid, (body, reason) in dead.items())
        return out

    def _new_dead(self, queue: str, before: dict[str, int]) -> dict[str, tuple[Any, str]]:
        """The messages dead-lettered since ``before``: id -> (body, reason)."""
        found: dict[str, tuple[Any, str]] = {}
        for name in self.broker.queues.partition_names(queue):
            new = self.broker.statistics.sizes(name)["dead"] - before.get(name, 0)
            for entry in self.broker.contents.dead_letters(name, 0, max(0, new)) if new > 0 else []:
                letter = deadletter.DeadLetter(entry)
                msg = letter.message()
                if msg is not None:
                    found[msg.id] = (msg.body, letter.reason)
        return found
