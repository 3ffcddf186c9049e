"""Small helpers shared by the tests: waiting on a condition with a deadline, timing an event loop's gaps."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import pytest
import redis

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T],
    timeout_s: float = 10.0,
    interval_s: float = 0.01,
    message: str = "condition not met before the deadline",
) -> T:
    """Call ``predicate`` every ``interval_s`` until it returns a truthy value; return it.

    Raises AssertionError(message) once ``timeout_s`` has passed without one.
    The predicate is always called at least once, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(message)
        time.sleep(min(interval_s, remaining))


def holds(predicate: Callable[[], object], duration_s: float, interval_s: float = 0.1,
          message: str = "condition broke before the end of its span") -> None:
    """Check ``predicate`` every ``interval_s`` for ``duration_s``: for a
    property that must stay true over a span of time (the span is the
    behaviour under test). Raises AssertionError(message) the first time it
    is false."""
    deadline = time.monotonic() + duration_s
    while True:
        if not predicate():
            raise AssertionError(message)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(interval_s, remaining))


def redis_ms(client: "redis.Redis[Any]") -> int:
    """The Redis server's clock now, in ms since the epoch (TIME): the clock due times,
    slots and expiries are kept by."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


#: Set by .ci/run: a missing system tool fails its test instead of skipping it.
STRICT_ENV = "SMQSUP_TEST_REQUIRE_TOOLS"


def missing_tool(message: str) -> NoReturn:
    """Skip the test, saying what is missing and how to get it; fail instead
    under CI (``$SMQSUP_TEST_REQUIRE_TOOLS=1``, which .ci/run sets), so CI
    always runs every test while a fresh machine's ``pytest`` still passes."""
    if os.environ.get(STRICT_ENV) == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def client_for(url: str, **options: Any) -> Any:
    """A redis-py client for a test's url: a RedisCluster for a cluster url
    (the commands tests send route by key), else redis.Redis."""
    if url.startswith("redis+cluster://"):
        from redis.cluster import ClusterNode, RedisCluster
        seeds = [item.rpartition(":") for item in url.split("://", 1)[1].strip("/").split(",")]
        return RedisCluster(startup_nodes=[ClusterNode(h, int(p)) for h, _, p in seeds], **options)
    return redis.Redis.from_url(url, **options)


def node_of(client: Any, key: str) -> Any:
    """The client of the server holding ``key``: ``client`` itself, or for a
    RedisCluster the master serving the key's slot (per-server readings:
    INFO's blocked clients, command counts)."""
    if hasattr(client, "get_node_from_key"):
        return client.get_node_from_key(key).redis_connection
    return client


def servers_of(client: Any) -> list[Any]:
    """A client of each server: ``client`` itself, or for a RedisCluster each
    master (per-server readings and kills: CLIENT LIST, CLIENT KILL)."""
    if hasattr(client, "get_primaries"):
        return [node.redis_connection for node in client.get_primaries()]
    return [client]


class Monitored:
    """What one redis-server runs, as MONITOR shows it (each command a
    script runs too, client_type "lua"), read on a thread from creation to
    ``stop()``: ``seen`` holds (client_type, [words]) in the server's order."""

    _END = "smqsup-monitor-end"

    def __init__(self, url: str, keep: Callable[[str, list[str]], bool] = lambda kind, words: True) -> None:
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor().__enter__()
        self._keep = keep
        self.seen: list[tuple[str, list[str]]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            seen = self._monitor.next_command()
            words = seen["command"].split()
            if words[:2] == ["ECHO", self._END]:
                return
            if self._keep(seen["client_type"], words):
                self.seen.append((seen["client_type"], words))

    def stop(self) -> list[tuple[str, list[str]]]:
        """Everything the server ran before this call; from now on none is read."""
        self._client.echo(self._END)
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "MONITOR did not show the end marker within 10 s"
        self._client.close()
        return self.seen


class Starts:
    """When handlers started (monotonic), noted from any thread: ``note``
    as the handler, or inside it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.times: list[float] = []

    def note(self, *_message: object) -> None:
        with self.lock:
            self.times.append(time.monotonic())


async def ticking(work: Callable[[], Any]) -> tuple[Any, list[tuple[float, float]]]:
    """``await work()`` while a ticker task sleeps 1 ms at a time; (its result, (wall, thread CPU) time of
    each gap between ticks)."""
    gaps: list[tuple[float, float]] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last, last_cpu = time.perf_counter(), time.thread_time()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now, cpu = time.perf_counter(), time.thread_time()
            gaps.append((now - last, cpu - last_cpu))
            last, last_cpu = now, cpu
    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.005)
    try:
        result = await work()
    finally:
        done.set()
        await tick
    return result, gaps


def worst_gap(gaps: list[tuple[float, float]]) -> str:
    """The worst gaps of ticking(), as a line for a test's report."""
    wall, cpu = max(gaps), max(gaps, key=lambda g: g[1])
    return (f"worst gap {wall[0] * 1000:.1f} ms wall ({wall[1] * 1000:.1f} ms CPU in it), most CPU in a gap "
            f"{cpu[1] * 1000:.1f} ms, over {len(gaps)} ticks")


async def until(predicate: Callable[[], object], timeout_s: float = 10.0, interval_s: float = 0.01,
                message: str = "condition not met before the deadline") -> Any:
    """wait_for() inside a running event loop: ``predicate`` (a plain call, or
    one returning an awaitable, awaited) every ``interval_s`` until it is
    truthy; its value. AssertionError(message) once ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(message)
        await asyncio.sleep(min(interval_s, remaining))
