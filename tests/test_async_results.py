"""Tracked messages from asyncio, what only asyncio has: waits that never poll and share one subscribed
connection, an event loop that stays responsive under 1,000 of them, a subscription killed mid-wait, the
Producer's errors word for word, Sentinel; on one redis-server and on a Redis Cluster. The Producer's
own results, states, progress and cancels run against the AsyncProducer too (test_results.py,
test_cancel.py: both_clients)."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis

from smqsup import AsyncProducer, Producer
from smqsup.config.model import QueueConfig
from smqsup.errors import MessageError, SmqsupError
from tests.support.helpers import servers_of, ticking, until, wait_for, worst_gap
from tests.support.inproc import Running
from tests.support.topology import SentinelTopology

pytestmark = pytest.mark.topologies

T = TypeVar("T")


def run(url: str, work: Callable[[AsyncProducer], Awaitable[T]]) -> T:
    """``await work(producer)`` with an AsyncProducer on ``url``, in an event loop of its own; closed after."""
    async def main() -> T:
        async with AsyncProducer(url) as producer:
            return await work(producer)
    return asyncio.run(main())


def _subscribed(client: redis.Redis) -> int:
    """Clients subscribed to some channel now, on every master (CLIENT LIST's sub field)."""
    return sum(1 for server in servers_of(client) for c in server.client_list() if int(c.get("sub", 0)) > 0)


#: Longest gap between two 1 ms ticks of the loop while 1,000 tracked publishes and their results are
#: awaited, s: generous, for the consumer threads of the test process contend for the GIL with the loop.
RESULTS_STALL_BOUND_S = 0.200


def _channels(client: redis.Redis) -> int:
    """Channels subscribed now, summed over the clients of every master (CLIENT LIST's sub field)."""
    return sum(int(c.get("sub", 0)) for server in servers_of(client) for c in server.client_list())


def _calls(client: redis.Redis, command: str) -> int:
    """How many times ``command`` ran on all the masters since their statistics were reset."""
    return sum(server.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0)
               for server in servers_of(client))


@pytest.mark.exclusive
def test_a_thousand_results_awaited_together_keep_the_event_loop_responsive(
        start: Callable[..., Running], redis_url: str, redis_client: redis.Redis, topology: str) -> None:
    """1,000 tracked publishes, each awaiting its result, gathered at once inside a running loop (the
    handlers held until all 1,000 waits are subscribed): every result right, without polling (at most
    four reads of a record per result), and the loop's longest gap between 1 ms ticks under
    RESULTS_STALL_BOUND_S."""
    gate = threading.Event()
    start(lambda m: gate.wait(30) and m.body * 2, concurrency=8)
    for server in servers_of(redis_client):
        server.config_resetstat()

    async def one(p: AsyncProducer, i: int) -> Any:
        return await p.result("q", await p.publish("q", i, result_ttl=60), timeout=60)

    async def all_subscribed() -> bool:
        return await asyncio.to_thread(_channels, redis_client) >= 1000  # (CLIENT LIST off the loop)

    async def opener() -> None:
        await until(all_subscribed, timeout_s=30)
        gate.set()

    async def work(p: AsyncProducer) -> tuple[Any, list[tuple[float, float]], float]:
        began = time.monotonic()
        got, gaps = await ticking(lambda: asyncio.gather(*(one(p, i) for i in range(1000)), opener()))
        return got[:-1], gaps, time.monotonic() - began
    gc.collect()
    gc.freeze()  # the test process's heap out of the collector's sight (test_async_producer.py says why)
    try:
        got, gaps, took = run(redis_url, work)
    finally:
        gc.unfreeze()
    assert got == [2 * i for i in range(1000)]
    reads, subscribes = _calls(redis_client, "hmget"), _calls(redis_client, "subscribe")
    print(f"\nresults stall ({topology}): {worst_gap(gaps)}; 1,000 results in {took:.2f} s, {reads} reads, "
          f"{subscribes} SUBSCRIBEs", file=sys.stderr)
    assert subscribes == 1000 and reads <= 4000
    assert max(wall for wall, _ in gaps) < RESULTS_STALL_BOUND_S, worst_gap(gaps)


def test_a_message_nobody_handles_times_out(redis_url: str) -> None:
    """No consumer: result(timeout=0.3) raises TimeoutError after about 0.3 s, timeout=0 at once; still waiting."""
    async def work(p: AsyncProducer) -> tuple[float, float, str]:
        mid = await p.publish("q", 1, result_ttl=60)
        began = time.monotonic()
        with pytest.raises(TimeoutError, match="has not ended within 0.3 s"):
            await p.result("q", mid, timeout=0.3)
        waited = time.monotonic() - began
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            await p.result("q", mid, timeout=0)
        return waited, time.monotonic() - began, await p.state("q", mid)
    waited, at_once, state = run(redis_url, work)
    assert 0.3 <= waited < 2 and at_once < 0.5 and state == "waiting"


#: Bad calls: (method, queue, message id, timeout).
HOSTILE = [
    *[("result", "q", odd, 1) for odd in ("a b", "../x", "x" * 200, "", "\n", "é\u2028", None, 5, b"id")],
    *[("state", "q", odd, None) for odd in ("a b", "", None)],
    *[("progress", "q", odd, None) for odd in ("a b", "x" * 200)],
    *[("result", "q", "id-1", t) for t in (-1, float("nan"), float("inf"), -0.001, True, "3", 10**12, [])],
    *[(method, odd, "id-1", None) for method in ("result", "state", "progress")
      for odd in ("", "a" * 300, None, 7, "a\x00b", "q\n")],
]


def _bound(p: Any, method: str, queue: Any, mid: Any, timeout: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    fn = getattr(p, method)
    return fn, (queue, mid, timeout) if method == "result" else (queue, mid)


def test_hostile_ids_queues_and_timeouts_raise_what_the_producer_raises(redis_url: str) -> None:
    """Malformed ids, queue names, NaN and negative timeouts: the Producer's MessageError, word for word."""
    with Producer(redis_url) as sync:
        expected = []
        for call in HOSTILE:
            fn, args = _bound(sync, *call)
            with pytest.raises(SmqsupError) as raised:
                fn(*args)
            expected.append((type(raised.value).__name__, str(raised.value)))

    async def work(p: AsyncProducer) -> list[tuple[str, str]]:
        got = []
        for call in HOSTILE:
            fn, args = _bound(p, *call)
            with pytest.raises(SmqsupError) as raised:
                await fn(*args)
            got.append((type(raised.value).__name__, str(raised.value)))
        return got
    got = run(redis_url, work)
    assert {kind for kind, _ in got} == {MessageError.__name__}
    assert got == expected


def test_five_hundred_waits_that_time_out_share_one_subscribed_connection(redis_url: str,
                                                                          redis_client: redis.Redis) -> None:
    """500 waits at once (on 50 messages nobody handles): each a TimeoutError, never more than one
    subscribed connection on all the masters, none left subscribed after, and no task left after close()."""
    samples: list[int] = []

    async def work(p: AsyncProducer) -> list[Any]:
        ids = await p.publish_many("q", list(range(50)), result_ttl=60)
        done = asyncio.Event()

        async def sample() -> None:
            while not done.is_set():
                samples.append(await asyncio.to_thread(_subscribed, redis_client))
        sampler = asyncio.create_task(sample())
        try:
            return await asyncio.gather(*(p.result("q", ids[i % 50], timeout=1.5) for i in range(500)),
                                        return_exceptions=True)
        finally:
            done.set()
            await sampler

    async def main() -> tuple[list[Any], int]:
        async with AsyncProducer(redis_url) as p:
            got = await work(p)
        return got, len(asyncio.all_tasks())
    got, tasks = asyncio.run(main())
    assert all(isinstance(r, TimeoutError) for r in got), {type(r) for r in got}
    assert max(samples) == 1, samples
    assert tasks == 1  # only main(): the reading and sending tasks ended with close()
    wait_for(lambda: _subscribed(redis_client) == 0)


def test_a_killed_subscription_mid_wait_still_gets_the_result(start: Callable[..., Running], redis_url: str,
                                                              redis_client: redis.Redis) -> None:
    """CLIENT KILL TYPE pubsub on every master while 20 results are awaited: the waits subscribe again,
    on a new connection, and each gets its result."""
    async def work(p: AsyncProducer) -> list[Any]:
        ids = [await p.publish("q", i, result_ttl=60) for i in range(20)]
        waits = asyncio.gather(*(p.result("q", mid, timeout=20) for mid in ids))
        await until(lambda: _subscribed(redis_client) == 1)
        for server in servers_of(redis_client):
            server.client_kill_filter(_type="pubsub")
        await until(lambda: _subscribed(redis_client) == 1)  # subscribed again, on a new connection
        start(lambda m: m.body * 2)
        return await waits
    assert run(redis_url, work) == [2 * i for i in range(20)]


def test_a_hundred_waiters_on_one_message_all_get_its_result(start: Callable[..., Running], redis_url: str,
                                                             redis_client: redis.Redis) -> None:
    """100 results of one message awaited (subscribed) before any consumer runs: each gets the answer."""
    async def work(p: AsyncProducer) -> list[Any]:
        mid = await p.publish("q", "go", result_ttl=60)
        waits = asyncio.gather(*(p.result("q", mid, timeout=20) for _ in range(100)))
        await until(lambda: _subscribed(redis_client) == 1)
        start(lambda m: "answer")
        return await waits
    assert run(redis_url, work) == ["answer"] * 100


def test_results_through_sentinel(sentinel_group: SentinelTopology) -> None:
    """Through Sentinel: the waits subscribe on the master Sentinel names, and get the results."""
    consumer = Running(sentinel_group.url, QueueConfig(name="q", handler="tests.support.handlers:record"), lambda m: -m.body)
    try:
        async def work(p: AsyncProducer) -> list[Any]:
            ids = await p.publish_many("q", [1, 2, 3], result_ttl=60)
            return await asyncio.gather(*(p.result("q", mid, timeout=20) for mid in ids))
        assert run(sentinel_group.url, work) == [-1, -2, -3]
    finally:
        consumer.stop()
