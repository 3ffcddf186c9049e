"""The Producer's API on either client, for the conformance suite (one suite,
two clients, as BullMQ's adapter-conformance tests): a module marked
``both_clients`` runs each test that takes the ``producer`` fixture twice,
with a Producer and with an AsyncProducer behind Driven, which runs its
coroutines on an event loop of its own thread and hands back what they
return, so a test written against the Producer drives either. A test that
fails only for "async" is drift between the two clients. The fixtures
``client`` and ``new_producer`` (a pytest plugin of conftest.py) hand them
out; conftest.pytest_generate_tests says which tests run with which."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Optional, cast

import pytest

from smqsup import AsyncProducer, Producer

#: Longest one call of a driven coroutine may take, s (a hung wait fails the test, never the run).
CALL_TIMEOUT_S = 60.0


class Loop:
    """An event loop running in a daemon thread of its own until stop()."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="conformance-loop")
        self._thread.start()

    def run(self, coro: Any) -> Any:
        """``await coro`` on the loop; its value or its exception (a
        SystemExit or KeyboardInterrupt too, raised here: on the loop it
        would stop it, and the call would wait for ever)."""
        return asyncio.run_coroutine_threadsafe(_guarded(coro), self.loop).result(CALL_TIMEOUT_S).get()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class _Outcome:
    """What a coroutine gave: its value, or the BaseException it raised."""

    def __init__(self, value: Any = None, exc: Optional[BaseException] = None) -> None:
        self.value, self.exc = value, exc

    def get(self) -> Any:
        if self.exc is not None:
            raise self.exc
        return self.value


async def _guarded(coro: Any) -> _Outcome:
    try:
        return _Outcome(await coro)
    except (SystemExit, KeyboardInterrupt) as exc:
        return _Outcome(exc=exc)


def _synced(loop: Loop, value: Any) -> Any:
    """What a call of the async client gave, as the sync client gives it: a
    coroutine awaited, an async iterator iterated, an async context manager
    (AsyncBatch) entered and left through a sync one."""
    if asyncio.iscoroutine(value):
        return loop.run(value)
    if isinstance(value, AsyncIterator):
        return _iterated(loop, value)
    if hasattr(value, "__aenter__"):
        return _Entered(loop, value)
    return value


def _iterated(loop: Loop, items: AsyncIterator[Any]) -> Iterator[Any]:
    while True:
        try:
            yield loop.run(items.__anext__())
        except StopAsyncIteration:
            return


class _Proxy:
    """An async object's attributes, its coroutine methods called to the end."""

    def __init__(self, loop: Loop, target: Any) -> None:
        self._loop, self._target = loop, target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value
        return lambda *args, **kwargs: _synced(self._loop, value(*args, **kwargs))


class _Entered(_Proxy):
    """An async context manager (AsyncBatch) used as a sync one."""

    def __enter__(self) -> "_Entered":
        entered = self._loop.run(self._target.__aenter__())
        return _Entered(self._loop, entered)

    def __exit__(self, *exc: Any) -> Optional[bool]:
        return self._loop.run(self._target.__aexit__(*exc))  # type: ignore[no-any-return]


class _OpenBatch(_Proxy):
    """An opened AsyncBatch as the Producer's Batch: ``with`` closes it at
    the end of a block that did not raise."""

    def __enter__(self) -> "_OpenBatch":
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self._loop.run(self._target.close())


class Driven(_Proxy):
    """An AsyncProducer behind the Producer's sync API (see the module's docstring)."""

    def __init__(self, url: str, *args: Any, **kwargs: Any) -> None:
        loop = Loop()
        # Made on the loop: the producer belongs to the loop that runs its coroutines.
        super().__init__(loop, loop.run(_made(url, *args, **kwargs)))

    def batch(self, *args: Any, **kwargs: Any) -> _OpenBatch:
        """Producer.batch() opens the batch at once; AsyncProducer's at ``async with`` (or open())."""
        opened = self._target.batch(*args, **kwargs)
        self._loop.run(opened.open())
        return _OpenBatch(self._loop, opened)

    def close(self) -> None:
        """Close the producer and stop its loop; again: nothing."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._target.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> "Driven":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


async def _made(*args: Any, **kwargs: Any) -> AsyncProducer:
    return AsyncProducer(*args, **kwargs)


def declared_now(producer: Any, queue: str) -> tuple[int, Any]:
    """(partition count, Declared) of ``queue`` read afresh by ``producer``,
    either client: what its next publish applies."""
    if isinstance(producer, Driven):
        broker = producer._target._broker
        count = producer._loop.run(broker.partitions(queue, fresh=True))
        return count, producer._loop.run(broker.declared(queue))[1]
    return producer._broker.queues.partitions(queue, fresh=True), producer._broker.queues.declared(queue)[1]


@pytest.fixture
def client(request: pytest.FixtureRequest) -> str:
    """Which client the ``producer`` is: "sync" (a Producer) or, in a run of
    a ``both_clients`` module (tests/support/clients.py), "async" (an AsyncProducer
    driven through the Producer's API)."""
    return cast(str, getattr(request, "param", "sync"))


@pytest.fixture
def new_producer(client: str) -> Iterator[Callable[..., Producer]]:
    """Make a producer (the Producer's arguments) of the test's client; each is closed at teardown."""
    made: list[Any] = []

    def _new(*args: Any, **kwargs: Any) -> Producer:
        p = Producer(*args, **kwargs) if client == "sync" else Driven(*args, **kwargs)
        made.append(p)
        return cast(Producer, p)

    yield _new
    for p in made:
        p.close()
