"""Tracked messages from asyncio: the AsyncProducer's result(), state() and progress() against real
consumers, on one redis-server and on a Redis Cluster: the Producer's answers and errors, waits that
never poll and share one subscribed connection, an event loop that stays responsive under 1,000 of
them, and a subscription killed mid-wait."""

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

from smqsup import AsyncProducer, MessageFailed, Producer, Reject, ResultUnknown
from smqsup.config.model import QueueConfig
from smqsup.errors import BrokerError, MessageError, SmqsupError
from smqsup.store.broker import Broker
from tests.helpers import servers_of, ticking, until, wait_for, worst_gap
from tests.inproc import NS, Running
from tests.topology import SentinelTopology

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


def test_a_sync_handlers_return_value_is_the_result(start: Callable[..., Running], redis_url: str) -> None:
    """result() returns what the handler returned (a number, None, a list; publish_many's too); state says done."""
    start(lambda m: m.body["x"] * 2 if m.body.get("x") is not None else m.body.get("v"))

    async def work(p: AsyncProducer) -> tuple[list[Any], str]:
        ids = [await p.publish("q", {"x": 21}, result_ttl=60), await p.publish("q", {"v": None}, result_ttl=60),
               await p.publish("q", {"v": [1, {"a": "é"}]}, result_ttl=60)]
        ids += await p.publish_many("q", [{"x": 1}, {"x": 2}], result_ttl=60)
        return [await p.result("q", mid, timeout=10) for mid in ids], await p.state("q", ids[0])
    assert run(redis_url, work) == ([42, None, [1, {"a": "é"}], 2, 4], "done")


def test_the_queues_declared_result_ttl_tracks_plain_publishes(start: Callable[..., Running], redis_url: str) -> None:
    """A queue whose consumers declare result_ttl tracks publish() and publish_many() without it; 0 opts out."""
    start(lambda m: m.body + 1, result_ttl_s=30)
    wait_for(lambda: Broker(redis_url, NS).queues.result_ttl("q") == 30)

    async def work(p: AsyncProducer) -> tuple[list[Any], str]:
        ids = [await p.publish("q", 1), *await p.publish_many("q", [10, 20])]
        untracked = await p.publish("q", 5, result_ttl=0)
        return [await p.result("q", mid, timeout=10) for mid in ids], await p.state("q", untracked)
    assert run(redis_url, work) == ([2, 11, 21], "unknown")


def test_results_on_a_partitioned_queue(start: Callable[..., Running], redis_url: str) -> None:
    """Three partitions: each message's result is found in its own partition."""
    start(lambda m: m.body * 3, partitions=3)

    async def work(p: AsyncProducer) -> list[Any]:
        await until(lambda: Broker(redis_url, NS).queues.partitions("q", fresh=True) == 3)
        ids = [await p.publish("q", i, result_ttl=60) for i in range(12)]
        return await asyncio.gather(*(p.result("q", mid, timeout=10) for mid in ids))
    assert run(redis_url, work) == [3 * i for i in range(12)]


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


def test_a_reject_raises_message_failed_with_its_reason(start: Callable[..., Running], redis_url: str) -> None:
    """A Reject: MessageFailed with reason "rejected: ..." and state dead; a failing handler: its error."""
    def handle(m: Any) -> None:
        if m.body == "reject":
            raise Reject("bad order")
        raise ValueError("boom")
    start(handle, retry_threshold=0)

    async def work(p: AsyncProducer) -> list[Any]:
        seen: list[Any] = []
        for body in ("reject", "fail"):
            mid = await p.publish("q", body, result_ttl=60)
            with pytest.raises(MessageFailed) as failed:
                await p.result("q", mid, timeout=10)
            seen += [failed.value.reason, failed.value.attempts, await p.state("q", mid)]
        return seen
    rejected, _, state, boom, attempts, _ = run(redis_url, work)
    assert (rejected, state) == ("rejected: bad order", "dead")
    assert "boom" in boom and attempts == 1


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


def test_untracked_and_unknown_ids_raise_result_unknown(start: Callable[..., Running], redis_url: str) -> None:
    """An untracked message and an id never published: ResultUnknown from result() and progress(); unknown."""
    start(lambda m: "x")

    async def work(p: AsyncProducer) -> list[str]:
        mid = await p.publish("q", 1)
        states = []
        for asked in (mid, "no-such-id"):
            with pytest.raises(ResultUnknown):
                await p.result("q", asked, timeout=0.2)
            with pytest.raises(ResultUnknown):
                await p.progress("q", asked)
            states.append(await p.state("q", asked))
        return states
    assert run(redis_url, work) == ["unknown", "unknown"]


def test_state_and_progress_follow_the_handler(start: Callable[..., Running], redis_url: str) -> None:
    """A delayed message is scheduled, then active with its handler's progress readable, then done."""
    gate = threading.Event()

    def handle(m: Any) -> str:
        m.progress({"rows": 1200, "of": 5000})
        gate.wait(10)
        return "ok"
    start(handle)

    async def work(p: AsyncProducer) -> list[Any]:
        mid = await p.publish("q", "x", result_ttl=60, delay=0.5)
        seen = [await p.state("q", mid), await p.progress("q", mid)]
        await until(lambda: p.progress("q", mid))
        seen += [await p.state("q", mid), await p.progress("q", mid)]
        with pytest.raises(TimeoutError):
            await p.result("q", mid, timeout=0.1)
        gate.set()
        return [*seen, await p.result("q", mid, timeout=10), await p.state("q", mid)]
    assert run(redis_url, work) == ["scheduled", None, "active", {"rows": 1200, "of": 5000}, "ok", "done"]


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
    consumer = Running(sentinel_group.url, QueueConfig(name="q", handler="tests.handlers:record"), lambda m: -m.body)
    try:
        async def work(p: AsyncProducer) -> list[Any]:
            ids = await p.publish_many("q", [1, 2, 3], result_ttl=60)
            return await asyncio.gather(*(p.result("q", mid, timeout=20) for mid in ids))
        assert run(sentinel_group.url, work) == [-1, -2, -3]
    finally:
        consumer.stop()


@pytest.mark.single_node("the ACL is set on the one server")
def test_a_refused_subscribe_is_a_broker_error_at_once(redis_url: str, redis_client: redis.Redis) -> None:
    """An ACL without channels (NOPERM on SUBSCRIBE): result() raises BrokerError naming it, well before
    its timeout, instead of subscribing again and again."""
    redis_client.execute_command("ACL", "SETUSER", "default", "resetchannels")

    async def work(p: AsyncProducer) -> float:
        mid = await p.publish("q", 1, result_ttl=60)
        began = time.monotonic()
        with pytest.raises(BrokerError, match=r"\(SUBSCRIBE .*\): Redis error: .*no permissions"):
            await p.result("q", mid, timeout=10)
        return time.monotonic() - began
    assert run(redis_url, work) < 5


def test_cancel_from_asyncio_answers_as_the_producer_does(start: Callable[..., Running], redis_url: str) -> None:
    """AsyncProducer.cancel: a scheduled message "cancelled", a held one "stopping" then dead-lettered
    "cancelled" (the consumer told), a finished one "done", an unknown id "unknown", a bad id MessageError."""
    gate = threading.Event()
    # (the held message's thread returns once told: a thread cannot be stopped, only told)
    run_ = start(lambda m: (m.cancelled.wait(10) if m.body == "held" else gate.wait(10)) and "ok", concurrency=2)

    async def work(p: AsyncProducer) -> list[Any]:
        later = await p.publish("q", "later", delay=3600)
        held = await p.publish("q", "held", result_ttl=60)
        async def active() -> bool:
            return await p.state("q", held) == "active"
        await until(active)
        answers = [await p.cancel("q", later), await p.cancel("q", held)]
        run_.consumer.request_cancels()
        with pytest.raises(MessageFailed) as failed:
            await p.result("q", held, timeout=10)
        gate.set()
        done = await p.publish("q", "done", result_ttl=60)
        await p.result("q", done, timeout=10)
        answers += [failed.value.reason, await p.cancel("q", done), await p.cancel("q", "nothing-here")]
        with pytest.raises(MessageError):
            await p.cancel("q", "a b")
        return answers
    try:
        assert run(redis_url, work) == ["cancelled", "stopping", "cancelled", "done", "unknown"]
    finally:
        gate.set()
