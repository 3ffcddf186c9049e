"""What runs the handlers of a concurrent consumer (flight.py): one record
per message in flight, and the daemon threads a plain ``def`` handler runs on.

Nothing here talks to Redis or decides an outcome: a record says how its
handler ended (``error``), and flight.py draws the verdict in its loop.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Optional

from smqsup import message
from smqsup.worker.consumer import Handler, Outcome


def monotonic_us() -> int:
    """CLOCK_MONOTONIC in µs: the clock the supervisor's slot reader uses."""
    return time.monotonic_ns() // 1000


def is_async_handler(handler: Handler) -> bool:
    """Whether ``handler`` is an ``async def`` function, or an object whose
    ``__call__`` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        inspect.getattr_static(type(handler), "__call__", None))


@dataclass(eq=False)
class Flight:
    """One message from its fetch to its settle."""

    frame: bytes
    msg: Optional[message.Message]  # None: the frame is malformed (never run)
    since_us: int  # monotonic µs at its start: the supervisor's stuck-loop clock
    started: float  # perf_counter at its start: busy_s
    outcome: Optional[Outcome] = None
    timed_out: bool = False
    error: Optional[BaseException] = None  # what its handler raised
    task: Optional["asyncio.Task[None]"] = None  # an async handler's task
    timer: Optional[asyncio.TimerHandle] = None


class HandlerThreads:
    """Daemon threads running plain handlers: ``run(fl)`` runs one message
    on the first free thread, which then calls ``work(fl)``'s end itself. A
    thread stuck in a handler past message_timeout is abandoned and replaced
    (``replace_one``): a daemon thread never holds the process up at exit."""

    def __init__(self, size: int, name: str, work: Callable[[Flight], None]) -> None:
        self._jobs: queue.SimpleQueue[Optional[Flight]] = queue.SimpleQueue()
        self._name = name
        self._work_one = work
        self._size = size
        self._started = 0
        self._alive = 0  # threads started and not ended: size, plus those stuck in a job
        self._lock = threading.Lock()
        for _ in range(size):
            self.replace_one()

    def run(self, fl: Flight) -> None:
        self._jobs.put(fl)

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
            fl = self._jobs.get()
            if fl is None:
                return
            self._work_one(fl)
            with self._lock:
                if self._alive > self._size:  # a stuck thread came back: its replacement stays
                    self._alive -= 1
                    return


async def awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable
