"""A concurrent consumer in one process, against a real redis-server: tasks
and threads, and everything a handler or producer may ask for (Reject,
Retry, priorities, delays, pause, max_messages) with many messages in flight."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import Reject, Retry, deadletter
from smqsup.client.producer import Producer
from smqsup.config.model import QueueConfig
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.worker.consumer import Consumer
from smqsup.worker.runners import InlineRunner, LoopRunner, is_async_handler
from tests.support.helpers import holds, node_of, wait_for
from tests.support.inproc import NS, Running

pytestmark = pytest.mark.topologies

K = QueueKeys(NS, "q")


class Gauge:
    """How many handlers run at once, and the most seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.done: list[Any] = []

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def leave(self, body: Any) -> None:
        with self.lock:
            self.now -= 1
            self.done.append(body)


def test_an_async_handler_runs_concurrency_tasks_at_once(start: Callable[..., Running], producer: Producer,
                                                         redis_client: redis.Redis) -> None:
    """concurrency 20, tasks awaiting 0.2 s: exactly 20 at once, each of 200 messages once, all acked."""
    g = Gauge()

    async def handle(msg: Any) -> None:
        g.enter()
        await asyncio.sleep(0.2)
        g.leave(msg.body)
    start(handle, concurrency=20)
    producer.publish_many("q", list(range(200)))
    wait_for(lambda: len(g.done) == 200, timeout_s=10)
    assert sorted(g.done) == list(range(200)) and g.most == 20
    wait_for(lambda: redis_client.hget(K.counters, "acked") == b"200")


def test_a_plain_handler_runs_on_concurrency_threads(start: Callable[..., Running], producer: Producer,
                                                      redis_client: redis.Redis) -> None:
    """A def handler with concurrency 4: 4 threads at once, every message once."""
    g = Gauge()

    def handle(msg: Any) -> None:
        g.enter()
        time.sleep(0.1)  # the handler's work: long enough for 4 to overlap
        g.leave(msg.body)
    start(handle, concurrency=4)
    producer.publish_many("q", list(range(40)))
    wait_for(lambda: len(g.done) == 40, timeout_s=10)
    assert sorted(g.done) == list(range(40)) and g.most == 4
    wait_for(lambda: redis_client.hget(K.counters, "acked") == b"40")


def test_reject_and_retry_with_many_in_flight(start: Callable[..., Running], producer: Producer,
                                              redis_client: redis.Redis) -> None:
    """Reject dead-letters at once, Retry(delay) comes back once after its delay; the rest ack."""
    seen: list[tuple[Any, int]] = []

    async def handle(msg: Any) -> None:
        seen.append((msg.body, msg.attempts))
        await asyncio.sleep(0.01)
        if msg.body == "reject":
            raise Reject("no")
        if msg.body == "retry" and msg.attempts == 0:
            raise Retry(delay=0.2)
    start(handle, concurrency=10, retry_threshold=3)
    producer.publish_many("q", ["reject", "retry"] + [f"ok{i}" for i in range(30)])
    wait_for(lambda: ("retry", 1) in seen, timeout_s=10)
    wait_for(lambda: redis_client.hget(K.counters, "acked") == b"31")
    assert deadletter.DeadLetter(redis_client.lindex(K.dead, 0) or b"").reason == "rejected: no"
    assert sorted(b for b, a in seen if a == 0) == sorted(["reject", "retry"] + [f"ok{i}" for i in range(30)])


def test_the_highest_priority_ready_message_is_taken_first(start: Callable[..., Running], producer: Producer,
                                                           redis_client: redis.Redis) -> None:
    """A backlog taken 2 at a time comes out priority first, FIFO within one priority."""
    order: list[str] = []
    gate = threading.Event()

    async def handle(msg: Any) -> None:
        order.append(msg.body)
        while not gate.is_set():
            await asyncio.sleep(0.01)
    producer.publish("q", "first")
    start(handle, concurrency=2)
    wait_for(lambda: order == ["first"])
    # The free slot's fetch must be waiting in BLMOVE before the backlog lands, or it takes by priority.
    wait_for(lambda: node_of(redis_client, K.pending).info("clients")["blocked_clients"] >= 1)
    producer.publish_many("q", ["low-a", "low-b"])
    producer.publish_many("q", ["high-a", "high-b"], priority=9)
    producer.publish("q", "mid", priority=5)
    gate.set()
    wait_for(lambda: len(order) == 6)
    # low-a went to the free slot at once (a blocked BLMOVE is served at the push); the rest waited.
    assert order[1:] == ["low-a", "high-a", "high-b", "mid", "low-b"], order


def test_pause_stops_the_taking_and_resume_starts_it_again(start: Callable[..., Running], producer: Producer,
                                                           redis_client: redis.Redis) -> None:
    """Paused, a concurrent consumer takes nothing; resumed, it handles the backlog."""
    done: list[Any] = []

    async def handle(msg: Any) -> None:
        done.append(msg.body)
    broker = Broker(producer._broker.url)
    broker.queues.pause("q", "test")
    start(handle, concurrency=8)
    producer.publish_many("q", list(range(20)))
    holds(lambda: not done and redis_client.llen(K.pending) == 20, 0.6)
    broker.queues.resume("q")
    wait_for(lambda: sorted(done) == list(range(20)), timeout_s=5)


def test_a_delayed_message_waits_for_its_time(start: Callable[..., Running], producer: Producer) -> None:
    """delay with a concurrent consumer: not before it is due, handled after."""
    done: list[float] = []

    async def handle(msg: Any) -> None:
        done.append(time.monotonic())
    start(handle, concurrency=4)
    began = time.monotonic()
    producer.publish("q", "later", delay=0.5)
    wait_for(lambda: done, timeout_s=5)
    assert done[0] - began >= 0.45


def test_max_messages_counts_messages_and_takes_no_more(producer: Producer, redis_url: str,
                                                        redis_client: redis.Redis) -> None:
    """max_messages 25 with concurrency 10: exactly 25 run, then run() returns; the rest stay pending."""
    done: list[Any] = []

    async def handle(msg: Any) -> None:
        await asyncio.sleep(0.02)
        done.append(msg.body)
    producer.publish_many("q", list(range(60)))
    c = Consumer(Broker(redis_url, NS), QueueConfig("q", "x:y", concurrency=10, max_messages=25), handle,
                           fetch_block_s=0.2)
    assert c.run() == "max_messages"
    assert len(done) == 25 and redis_client.llen(K.pending) == 35
    assert not redis_client.exists(K.processing(c.consumer_id))


def test_a_stop_lets_every_message_in_flight_finish(producer: Producer, redis_url: str,
                                                    redis_client: redis.Redis) -> None:
    """request_stop() with 10 in flight: all 10 ack, nothing more is taken, nothing is left held."""
    g = Gauge()
    holder: list[Consumer] = []

    async def handle(msg: Any) -> None:
        g.enter()
        if g.most == 10:
            holder[0].request_stop()
        await asyncio.sleep(0.3)
        g.leave(msg.body)
    producer.publish_many("q", list(range(30)))
    c = Consumer(Broker(redis_url, NS), QueueConfig("q", "x:y", concurrency=10), handle,
                           fetch_block_s=0.2)
    holder.append(c)
    assert c.run() == "stopped"
    assert len(g.done) == 10 and redis_client.llen(K.pending) == 20
    assert redis_client.hget(K.counters, "acked") == b"10"
    assert not redis_client.exists(K.processing(c.consumer_id))


def test_malformed_frames_among_good_ones_are_dead_lettered_and_the_rest_run(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Garbage bytes in the pending list never reach a handler; the good messages around them do."""
    done: list[Any] = []

    async def handle(msg: Any) -> None:
        done.append(msg.body)
    producer.publish_many("q", [1, 2])
    redis_client.lpush(K.pending, b"\xff\xfe not a frame", b"0|{not json", b"")
    producer.publish_many("q", [3, 4])
    start(handle, concurrency=5)
    wait_for(lambda: sorted(done) == [1, 2, 3, 4] and redis_client.llen(K.dead) == 3, timeout_s=5)


def test_the_kind_of_handler_decides_tasks_or_threads() -> None:
    """async def functions and objects with an async __call__ run as tasks; anything else on threads;
    concurrency 1 runs the handler inline, above 1 beside an event loop."""
    async def f(msg: Any) -> None: ...

    class A:
        async def __call__(self, msg: Any) -> None: ...

    class S:
        def __call__(self, msg: Any) -> None: ...
    assert is_async_handler(f) and is_async_handler(A())
    assert not is_async_handler(S()) and not is_async_handler(lambda m: None)
    q1, q4 = QueueConfig("q", "x:y"), QueueConfig("q", "x:y", concurrency=4)
    broker = Broker("redis://127.0.0.1:1", NS)
    assert isinstance(Consumer(broker, q1, f).runner, InlineRunner)
    assert isinstance(Consumer(broker, q4, f).runner, LoopRunner)


@pytest.mark.parametrize("kind", ["async", "thread"])
def test_redis_restarted_under_many_in_flight_loses_nothing(kind: str, redis_server: Any, redis_url: str,
                                                              redis_client: redis.Redis) -> None:
    """redis-server killed and restarted (AOF) while 8 are in flight: every message is handled, none lost."""
    done: set[Any] = set()
    lock = threading.Lock()

    def note(body: Any) -> None:
        with lock:
            done.add(body)

    async def handle_async(msg: Any) -> None:
        await asyncio.sleep(0.01)
        note(msg.body)

    def handle_thread(msg: Any) -> None:
        time.sleep(0.01)  # the handler's work, as the async one awaits
        note(msg.body)
    with Producer(redis_url) as p:
        p.publish_many("q", list(range(300)))
    r = Running(redis_url, QueueConfig("q", "x:y", concurrency=8), handle_async if kind == "async" else handle_thread)
    try:
        wait_for(lambda: len(done) >= 50, timeout_s=10)
        redis_server.kill()
        redis_server.start()
        with Producer(redis_url) as p:
            p.publish_many("q", list(range(300, 400)))
        wait_for(lambda: done >= set(range(400)), timeout_s=30, message="messages lost after the restart")
    finally:
        r.stop()


def test_declared_dead_with_messages_in_flight_their_acks_are_late_and_the_copies_run_again(
        producer: Producer, redis_url: str, redis_client: redis.Redis) -> None:
    """The collector reclaims a concurrent consumer's list while 3 run: their acks are counted late and
    delete nothing; the consumer goes on under a new id and runs the requeued copies (attempts 1)."""
    release = threading.Event()
    seen: list[tuple[Any, int]] = []

    async def handle(msg: Any) -> None:
        seen.append((msg.body, msg.attempts))
        while msg.attempts == 0 and not release.is_set():
            await asyncio.sleep(0.01)
    producer.publish_many("q", ["a", "b", "c"])
    r = Running(redis_url, QueueConfig("q", "x:y", concurrency=3), handle)
    try:
        c = r.consumer
        wait_for(lambda: len(seen) == 3)
        old = c.consumer_id
        got = Broker(redis_url, NS).registry.reclaim_dead("q", old, retry_threshold=3, reason="test: declared dead")
        assert got.requeued == 3
        release.set()  # the three acks are late, and their script says "not registered"
        wait_for(lambda: sorted(seen) == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0), ("c", 1)],
                 timeout_s=10)
        assert c.consumer_id != old
        wait_for(lambda: redis_client.hget(K.counters, "late_acks") == b"3")
        wait_for(lambda: redis_client.hget(K.counters, "acked") == b"3")
        assert c.stats.late_acks == 3 and redis_client.llen(K.pending) == 0
    finally:
        r.stop()


def test_a_stop_with_redis_away_leaves_the_unrecorded_outcomes_in_the_list_for_reclaim(
        redis_server: Any, redis_url: str, redis_client: redis.Redis) -> None:
    """Stopping while Redis is down: run() returns instead of retrying for ever, and the 4 messages whose
    acks could not be sent are still in the consumer's list once Redis is back (the reclaim's to return)."""
    release = threading.Event()

    async def handle(msg: Any) -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)
    with Producer(redis_url) as p:
        p.publish_many("q", [1, 2, 3, 4])
    c = Consumer(Broker(redis_url, NS), QueueConfig("q", "x:y", concurrency=4), handle,
                           fetch_block_s=0.2)
    result: list[str] = []
    runner = threading.Thread(target=lambda: result.append(c.run()), daemon=True)
    runner.start()
    wait_for(lambda: c.flight()[0] == 4)
    c.request_stop()
    redis_server.kill()
    release.set()
    runner.join(15)
    assert result == ["stopped"]
    redis_server.start()
    assert redis_client.llen(K.processing(c.consumer_id)) == 4 and redis_client.llen(K.pending) == 0


def test_a_handler_raising_cancelled_error_or_another_base_exception_costs_an_attempt_and_frees_its_slot(
        producer: Producer, redis_url: str, redis_client: redis.Redis) -> None:
    """CancelledError or GeneratorExit out of an async handler (not our timeout) is a failed attempt: the
    message is dead-lettered at retry_threshold 0, its slot is free again, the others go on, stop ends."""
    done: list[Any] = []

    async def handle(msg: Any) -> None:
        if msg.body == "cancelled":
            raise asyncio.CancelledError()
        if msg.body == "exit-gen":
            raise GeneratorExit()
        done.append(msg.body)
    producer.publish_many("q", ["cancelled", "exit-gen"] + list(range(20)))
    holder: list[Consumer] = []
    c = Consumer(Broker(redis_url, NS), QueueConfig("q", "x:y", concurrency=2, retry_threshold=0),
                           handle, fetch_block_s=0.2)
    holder.append(c)
    runner = threading.Thread(target=c.run, daemon=True)
    runner.start()
    wait_for(lambda: len(done) == 20 and redis_client.llen(K.dead) == 2, timeout_s=10)
    reasons = sorted(deadletter.DeadLetter(e).reason for e in redis_client.lrange(K.dead, 0, -1))
    assert reasons == ["RuntimeError: the handler raised CancelledError: ",
                       "RuntimeError: the handler raised GeneratorExit: "]
    assert c.flight() == (0, 0)
    c.request_stop()
    runner.join(10)
    assert not runner.is_alive()


def test_while_redis_is_down_finished_messages_leave_the_in_flight_report(
        redis_server: Any, redis_url: str) -> None:
    """The busy hook (the supervisor's stuck-loop clock) hears each message end even when its ack cannot
    be sent: a Redis outage never leaves a stale "busy since" behind."""
    release = threading.Event()
    reports: list[tuple[int, int]] = []

    async def handle(msg: Any) -> None:
        while not release.is_set():
            await asyncio.sleep(0.01)
    with Producer(redis_url) as p:
        p.publish_many("q", [1, 2])
    holder: list[Consumer] = []
    c = Consumer(Broker(redis_url, NS), QueueConfig("q", "x:y", concurrency=2), handle,
                           fetch_block_s=0.2, on_busy=lambda _msg: reports.append(holder[0].flight()))
    holder.append(c)
    runner = threading.Thread(target=c.run, daemon=True)
    runner.start()
    try:
        wait_for(lambda: c.flight()[0] == 2)
        redis_server.kill()
        release.set()
        wait_for(lambda: reports and reports[-1] == (0, 0), timeout_s=5)
    finally:
        c.request_stop()
        redis_server.start()
        runner.join(15)


def test_threads_stuck_past_message_timeout_that_come_back_leave_the_consumer_taking(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """concurrency 3: two handlers outlast message_timeout (an attempt each) and return; a third later does
    too. Three timeouts in all, never three threads stuck at once: the consumer goes on taking."""
    done: list[Any] = []
    returned: list[int] = []

    def handle(msg: Any) -> None:
        if msg.body == "slow" and msg.attempts == 0:
            time.sleep(0.6)  # the handler outlasting message_timeout (0.3 s): the behaviour under test
            returned.append(1)
            return
        done.append((msg.body, msg.attempts))
    r = start(handle, concurrency=3, message_timeout_s=0.3, retry_delay_s=0)
    producer.publish_many("q", ["slow", "slow"])
    wait_for(lambda: done == [("slow", 1), ("slow", 1)] and len(returned) == 2, timeout_s=5)
    producer.publish("q", "slow")
    wait_for(lambda: len(done) == 3, timeout_s=5)
    producer.publish_many("q", list(range(10)))
    wait_for(lambda: len(done) == 13, timeout_s=5)
    assert r.threads[0].is_alive()


def test_a_persistent_error_reply_backs_off_instead_of_retrying_many_times_a_second(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis,
        caplog: pytest.LogCaptureFixture) -> None:
    """The delayed set overwritten with a string: every nack is refused (WRONGTYPE). The consumer backs off
    (a handful of retries in 3 s, not dozens) and the message stays in its list."""
    async def handle(msg: Any) -> None:
        raise ValueError("fail")
    redis_client.set(K.delayed, "garbage")
    caplog.set_level("WARNING", logger="smqsup.worker.consumer")
    r = start(handle, concurrency=2, retry_delay_s=5)
    producer.publish("q", "x")
    wait_for(lambda: "WRONGTYPE" in caplog.text, timeout_s=5)
    holds(lambda: caplog.text.count("retrying in") <= 8, 3.0)
    assert redis_client.llen(K.processing(r.consumer.consumer_id)) == 1
    redis_client.delete(K.delayed)
    wait_for(lambda: redis_client.zcard(K.delayed) == 1, timeout_s=10)
