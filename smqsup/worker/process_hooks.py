"""Process hooks: the ``hooks:`` of a queue imported in its consumer, and
its handler wrapped so that they run around each attempt as a stack.

    before_process(message) of hook 1, 2, ... ─▶ handler(message)
        ─▶ after_process(message, result, error) of ..., 2, 1 ─▶ the attempt's end

The rules (the README states them to users):

- A before_process that raises is the attempt's error, judged as the
  handler's would be (Reject and Retry included); the handler does not
  run, and the after_process of each hook whose before_process had run
  (or that has none) still runs, with that error.
- An after_process that raises (any BaseException) is logged, and changes
  nothing: the next one runs, and the attempt ends as the handler made it
  end, settled once. SystemExit and KeyboardInterrupt are user code asking
  the process to exit: the attempt is settled as without them, the
  consumer then stops as on SIGTERM (what runs finishes, what was taken
  goes back), and ``Consumer.run`` raises it at its end (ExitAfterSettling
  carries it to the consumer). A CancelledError while the attempt's task
  is being cancelled (its timeout) is that cancellation, not the hook's.
- Hooks run inside the attempt, so message_timeout bounds them as it
  bounds the handler (a hook that hangs is a handler that hangs).
- With an ``async def`` handler, a hook's methods may be ``async def``
  too (awaited); with a plain handler they must be plain.

A queue without hooks gets its handler back as it is: nothing is paid per
message.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Sequence
from typing import Any, Optional

from smqsup import message
from smqsup.client.publish_hooks import PROCESS_METHODS
from smqsup.config.model import QueueConfig
from smqsup.worker.consumer_state import ExitAfterSettling, Handler
from smqsup.worker.handlers import import_hooks
from smqsup.worker.outcomes import text_of
from smqsup.worker.runners import is_async_handler

log = logging.getLogger(__name__)


def with_hooks(handler: Handler, queue: QueueConfig, *, path: str = "") -> Handler:
    """``handler`` wrapped in the hooks ``queue.hooks`` names (imported
    now: HandlerImportError), or ``handler`` itself when it names none."""
    if not queue.hooks:
        return handler
    is_async = is_async_handler(handler)
    hooks = import_hooks(queue.hooks, path=path, key=f"queues.{queue.name}.hooks", is_async=is_async)
    if not any(callable(getattr(h, name, None)) for h in hooks for name in PROCESS_METHODS):
        return handler  # (publish hooks only: nothing to run here)
    return Stack(handler, hooks, queue.name).wrapped(is_async)


class Stack:
    """The hooks of one queue around its handler (the module's docstring)."""

    def __init__(self, handler: Handler, hooks: Sequence[object], queue: str) -> None:
        self.handler = handler
        self.queue = queue
        self.befores = [getattr(h, "before_process", None) for h in hooks]
        self.afters = [getattr(h, "after_process", None) for h in hooks]
        self.names = [type(h).__qualname__ for h in hooks]

    def wrapped(self, is_async: bool) -> Handler:
        """The handler with the hooks around it: run_async for an async
        handler (so the runners see an async def), else run."""
        return self.run_async if is_async else self.run

    def run(self, msg: message.Message) -> Any:
        """A plain handler's attempt, hooks around it. A handler that
        returns an awaitable (a plain def returning a coroutine) gets its
        after_process once that is awaited (the runners await it)."""
        entered, result, failed = 0, None, None
        try:
            for before in self.befores:
                if before is not None:
                    before(msg)
                entered += 1
            result = self.handler(msg)
            if inspect.isawaitable(result):
                return self._after_awaited(msg, result)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the after_process hooks
            failed = exc
        return _ended(result, failed, self._after(msg, entered, result, failed))

    async def run_async(self, msg: message.Message) -> Any:
        """An async handler's attempt: async hook methods awaited (a
        cancellation, the timeout's, is the error the after hooks see)."""
        entered, result, failed = 0, None, None
        try:
            for before in self.befores:
                if before is not None:
                    said = before(msg)
                    if inspect.isawaitable(said):
                        await said
                entered += 1
            result = await self.handler(msg)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, after the after_process hooks
            failed = exc
        return _ended(result, failed, await self._after_async(msg, entered, result, failed))

    async def _after_awaited(self, msg: message.Message, result: Awaitable[Any]) -> Any:
        got, failed = None, None
        try:
            got = await result
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            failed = exc
        return _ended(got, failed, self._after(msg, len(self.befores), got, failed))

    def _after(self, msg: message.Message, entered: int, result: Any,
               failed: Optional[BaseException]) -> Optional[BaseException]:
        """Run the after_process hooks entered, last first; the first
        SystemExit or KeyboardInterrupt one raised (the others: logged)."""
        exit_asked = None
        for i in range(entered - 1, -1, -1):
            after = self.afters[i]
            if after is not None:
                try:
                    after(msg, result, failed)
                except BaseException as exc:  # noqa: BLE001 - an after hook changes nothing: logged
                    exit_asked = self._raised(msg, i, exc, exit_asked)
        return exit_asked

    async def _after_async(self, msg: message.Message, entered: int, result: Any,
                           failed: Optional[BaseException]) -> Optional[BaseException]:
        exit_asked = None
        for i in range(entered - 1, -1, -1):
            after = self.afters[i]
            if after is not None:
                try:
                    said = after(msg, result, failed)
                    if inspect.isawaitable(said):
                        await said
                except asyncio.CancelledError as exc:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise  # the attempt itself is cancelled (its timeout, a stop): that end wins
                    exit_asked = self._raised(msg, i, exc, exit_asked)
                except BaseException as exc:  # noqa: BLE001 - an after hook changes nothing: logged
                    exit_asked = self._raised(msg, i, exc, exit_asked)
        return exit_asked

    def _raised(self, msg: message.Message, i: int, exc: BaseException,
                exit_asked: Optional[BaseException]) -> Optional[BaseException]:
        """Log what after_process ``i`` raised; the exit asked so far, else
        ``exc`` if it asks the process to exit."""
        exits = isinstance(exc, (SystemExit, KeyboardInterrupt))
        then = "; the consumer stops once its messages are settled" if exits else ""
        log.error("queue %s: message %s: after_process of hook %s raised (%s: %s); the attempt's end "
                  "is unchanged%s", self.queue, msg.id, self.names[i], type(exc).__name__, text_of(exc), then,
                  exc_info=exc, extra={"message_id": msg.id})
        return exit_asked if exit_asked is not None or not exits else exc


def _ended(result: Any, failed: Optional[BaseException], exit_asked: Optional[BaseException]) -> Any:
    """The attempt's end once the after hooks ran: ``result``, or ``failed``
    raised; wrapped in ExitAfterSettling when a hook asked the process to
    exit (unless the handler's own end already does)."""
    if exit_asked is not None and not isinstance(failed, (SystemExit, KeyboardInterrupt)):
        raise ExitAfterSettling(result, failed, exit_asked)
    if failed is not None:
        raise failed
    return result
