"""What runs a consumer's handlers and its waits: inline on the consumer's own
thread (concurrency 1), or beside an event loop as tasks or threads
(concurrency N)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Optional, Protocol, TypeAlias

from smqsup import logs
from smqsup.worker.consumer_state import Attempt, Handler
from smqsup.worker.outcomes import refuse_generator

#: One turn of the consumer's loop: how long the runner may then wait (s,
#: less when woken), or None once the consumer is done.
Turn = Callable[[], Optional[float]]
#: Told (on the consumer's thread, in the loop) that an attempt's handler ended.
Land = Callable[[Attempt], None]
#: What the blocking fetch (BLMOVE) returns: a frame or None, and the paused flag.
FetchResult: TypeAlias = "tuple[Optional[bytes], bool]"


class Fetched(Protocol):
    """The blocking fetch under way: a concurrent.futures.Future, or Ready."""

    def done(self) -> bool: ...

    def result(self) -> FetchResult: ...


#: What _enter made current around one handler run, for _leave to undo.
Entered: TypeAlias = "tuple[Any, Any]"


def _enter(att: Attempt) -> Entered:
    """The attempt's context around its handler, on this thread or task: its
    message id for its JSON log lines (JSON logs on) and its span, the parent
    of the handler's own (tracing on). Called only when one of them is on."""
    assert att.msg is not None
    named = logs.MESSAGE_ID.set(att.msg.id) if logs.STRUCTURED else None
    if att.trace is None:
        return named, None
    from smqsup import tracing  # (imported only where tracing is on)

    return named, tracing.attach(att.trace)


def _leave(entered: Entered) -> None:
    named, traced = entered
    if named is not None:
        logs.MESSAGE_ID.reset(named)
    if traced is not None:
        from smqsup import tracing

        tracing.detach(traced)


def is_async_handler(handler: Handler) -> bool:
    """Whether ``handler`` is an ``async def`` function, or an object whose
    ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        inspect.getattr_static(type(handler), "__call__", None))


def sleep_unless(seconds: float, stopping: Callable[[], bool]) -> None:
    """Sleep up to ``seconds``, waking early once ``stopping()``: polled
    every 50 ms, so that a signal handler only has to set a flag."""
    deadline = time.monotonic() + seconds
    while not stopping():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


class Ready:
    """A blocking fetch that ran to its end on the consumer's own thread
    (InlineRunner): done at once, without a Future's lock and condition."""

    __slots__ = ("_value", "_error")

    def __init__(self, call: Callable[[], FetchResult]) -> None:
        self._value: Optional[FetchResult] = None
        self._error: Optional[Exception] = None
        try:
            self._value = call()
        except Exception as exc:  # noqa: BLE001 - raised again to whoever reads the result
            self._error = exc

    def done(self) -> bool:
        return True

    def result(self) -> FetchResult:
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


class InlineRunner:
    """Concurrency 1: each handler runs on the consumer's own thread, to its
    end, between two round trips; so does the blocking fetch. Nothing runs
    beside it, so no thread, task or timer is paid per message, and nothing
    can give up a handler that overruns (``can_abandon`` False): its
    message_timeout is the supervisor's (it kills the process)."""

    inline = True
    can_abandon = False
    exhausted = False
    size = 1

    def __init__(self, handler: Handler, land: Land, stopping: Callable[[], bool]) -> None:
        self.handler = handler
        self.land = land
        self.stopping = stopping
        self._loop: Optional[asyncio.AbstractEventLoop] = None  # for async handlers, made at the first

    def drive(self, turn: Turn) -> None:
        while (wait_s := turn()) is not None:
            if wait_s > 0:
                sleep_unless(wait_s, self.stopping)

    def start(self, att: Attempt) -> None:
        """Run the handler now; ``land`` hears its end before this returns."""
        assert att.msg is not None
        entered = _enter(att) if logs.STRUCTURED or att.trace is not None else None
        try:
            result = self.handler(att.msg)
            if result is not None:
                if inspect.isawaitable(result):
                    if self._loop is None:
                        self._loop = asyncio.new_event_loop()
                    result = self._loop.run_until_complete(result)
                else:
                    refuse_generator(result)
                att.result = result
        except BaseException as exc:  # noqa: BLE001 - judged by land (SystemExit, KeyboardInterrupt re-raised)
            att.error = exc
        if entered is not None:
            _leave(entered)
        self.land(att)

    def run_blocking(self, call: Callable[[], FetchResult]) -> Fetched:
        """Run the blocking fetch now (nothing else could run meanwhile)."""
        return Ready(call)

    def wake(self) -> None:
        """(A stop is seen within 50 ms of any wait: sleep_unless.)"""

    def abandon(self, att: Attempt) -> None:
        raise AssertionError("an inline handler cannot be given up")

    def came_back(self, att: Attempt) -> None:
        """(Nothing is ever given up here.)"""

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


class LoopRunner:
    """Concurrency N: an event loop on the consumer's thread drives the
    turns and waits between them for a handler's end, the blocking fetch
    (on a thread of its own), a timer or a wake. An ``async def`` handler
    runs as a task on the loop; any other on ``size`` daemon threads, whose
    ends reach the loop in batches (one wake-up for all that ended
    meanwhile). A handler past message_timeout is given up
    (``abandon``): a task is cancelled; a thread cannot be, so it is left
    to finish alone and a fresh one takes its place, until ``size`` are
    stuck at once (``exhausted``)."""

    inline = False
    can_abandon = True

    def __init__(self, size: int, handler: Handler, land: Land, name: str) -> None:
        self.size = size
        self.handler = handler
        self.land = land
        self.name = name
        self.stuck = 0  # threads given up past message_timeout, still in their handler
        self.loop: Optional[asyncio.AbstractEventLoop] = None  # this run's; closed, never None'd, at its end
        self._async = is_async_handler(handler)
        self._threads: Optional[HandlerThreads] = None
        self._fetch_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._waiter: Optional[asyncio.Future[None]] = None  # what _sleep awaits; ended by _wake
        self._ended: collections.deque[Attempt] = collections.deque()  # ended in handler threads
        self._poked = False  # a drain of _ended is scheduled in the loop

    @property
    def exhausted(self) -> bool:
        return self.stuck >= self.size

    def drive(self, turn: Turn) -> None:
        loop = self.loop = asyncio.new_event_loop()
        if not self._async:
            self._threads = HandlerThreads(self.size, f"smqsup-{self.name}", self._run_thread)
        loop.run_until_complete(self._drive(turn))

    async def _drive(self, turn: Turn) -> None:
        while (wait_s := turn()) is not None:
            await self._sleep(wait_s)

    async def _sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds`` (handlers run meanwhile), less on a wake.
        0 returns at once, without a step of the tasks: the turn that follows
        starts the blocking fetch (say) before a handler runs further."""
        loop = self.loop
        assert loop is not None
        if seconds <= 0:
            return
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(seconds, self._wake)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def wake(self) -> None:
        """End the current wait: from a signal handler or any thread."""
        loop = self.loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:  # the loop is closed: nothing to wake
                pass

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def start(self, att: Attempt) -> None:
        """Start the handler beside the loop; ``land`` hears its end later, in the loop."""
        if self._threads is None:
            assert self.loop is not None
            att.task = self.loop.create_task(self._run_task(att))
        else:
            self._threads.run(att)

    async def _run_task(self, att: Attempt) -> None:
        """An async handler's task: runs it, then lands its end (in the task
        itself: no callback, no extra turn of the loop per message)."""
        assert att.msg is not None
        if logs.STRUCTURED or att.trace is not None:  # (the task's own context: nothing to undo)
            _enter(att)
        try:
            result = self.handler(att.msg)
            if result is not None:
                if inspect.isawaitable(result):
                    result = await result
                else:
                    refuse_generator(result)
                att.result = result
        except BaseException as exc:  # noqa: BLE001 - judged by land (a CancelledError included)
            att.error = exc
        self._landed(att)

    def _run_thread(self, att: Attempt) -> None:
        """A plain handler, in a handler thread."""
        loop = self.loop  # this run's loop: closed (never None'd) if we outlive it
        assert att.msg is not None and loop is not None
        entered = _enter(att) if logs.STRUCTURED or att.trace is not None else None
        try:
            result = self.handler(att.msg)
            if result is None:
                pass
            elif inspect.isawaitable(result):  # a plain def returning a coroutine: it runs on the loop
                att.result = asyncio.run_coroutine_threadsafe(_awaited(result), loop).result()
            else:
                refuse_generator(result)
                att.result = result
        except BaseException as exc:  # noqa: BLE001 - judged by land, in the loop
            att.error = exc
        if entered is not None:
            _leave(entered)
        self._ended.append(att)
        if not self._poked:
            # A race here costs one wake-up too many, never one too few: the
            # drain clears the flag before it empties the deque.
            self._poked = True
            try:
                loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: a thread given up past message_timeout ended late
                pass

    def _drain(self) -> None:
        self._poked = False
        while self._ended:
            self._landed(self._ended.popleft())

    def _landed(self, att: Attempt) -> None:
        self.land(att)
        self._wake()

    def run_blocking(self, call: Callable[[], FetchResult]) -> Fetched:
        """Start the blocking fetch on the fetch thread; its end wakes the loop."""
        if self._fetch_pool is None:
            self._fetch_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"smqsup-fetch-{self.name}")
        fut = self._fetch_pool.submit(call)
        fut.add_done_callback(lambda _f: self.wake())
        return fut

    def abandon(self, att: Attempt) -> None:
        """Give up a handler past message_timeout (its outcome is drawn)."""
        if att.task is not None:
            att.task.cancel()
            return
        self.stuck += 1
        if self.stuck < self.size:
            assert self._threads is not None
            self._threads.replace_one()

    def came_back(self, att: Attempt) -> None:
        """A given-up handler ended after all: a stuck thread is free again."""
        if att.task is None:
            self.stuck -= 1

    def close(self) -> None:
        if self._threads is not None:
            self._threads.close()
        if self._fetch_pool is not None:
            self._fetch_pool.shutdown(wait=False)
        if self.loop is not None:
            self.loop.close()


class HandlerThreads:
    """Daemon threads running plain handlers: ``run(att)`` runs one message
    on the first free thread, which calls ``work(att)``. A thread stuck in a
    handler past message_timeout is given up and replaced (``replace_one``):
    a daemon thread never holds the process up at exit."""

    def __init__(self, size: int, name: str, work: Callable[[Attempt], None]) -> None:
        self._jobs: queue.SimpleQueue[Optional[Attempt]] = queue.SimpleQueue()
        self._name = name
        self._work_one = work
        self._size = size
        self._started = 0
        self._alive = 0  # threads started and not ended: size, plus those stuck in a job
        self._lock = threading.Lock()
        for _ in range(size):
            self.replace_one()

    def run(self, att: Attempt) -> None:
        self._jobs.put(att)

    def replace_one(self) -> None:
        """Start a thread (one more, or in place of a stuck one)."""
        with self._lock:
            self._started += 1
            self._alive += 1
        threading.Thread(target=self._work, name=f"{self._name}-{self._started}", daemon=True).start()

    def close(self) -> None:
        """Ask every idle thread to end (a stuck one ends with the process)."""
        for _ in range(self._started):
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            att = self._jobs.get()
            if att is None:
                return
            self._work_one(att)
            with self._lock:
                if self._alive > self._size:  # a stuck thread came back: its replacement stays
                    self._alive -= 1
                    return


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
