"""prefetch: N frames taken in one round trip and settled with the next take,
every guarantee kept for each of them: a SIGKILL charges only what had
started, a stop, a scale-down, a roll or a pause gives the rest back free
at once, and priorities, ttl and settles keep their promises."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import deadletter, framing, message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.broker import Broker
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.inproc import Running

K = QueueKeys("smq", "q")


def _attempts(client: redis.Redis, key: str) -> dict[str, int]:
    """Message id -> attempts of every frame in a list."""
    return {message.decode(f).id: message.decode(f).attempts for f in client.lrange(key, 0, -1)}


def _pause(redis_url: str) -> None:
    """Pause the queue before its consumers start: they then look every second (take.lua) instead of
    blocking in BLMOVE, which would take a burst's first frame alone."""
    broker = Broker(redis_url, "smq")
    try:
        broker.queues.pause("q", by="test")
    finally:
        broker.close()


def _burst(redis_url: str, bodies: list[Any]) -> list[str]:
    """Publish ``bodies`` to the paused queue, then resume it: its consumers' next look takes them as
    one batch, as a busy queue hands them out."""
    broker = Broker(redis_url, "smq")
    try:
        broker.queues.pause("q", by="test")
        with Producer(redis_url) as p:
            ids = p.publish_many("q", bodies)
        broker.queues.resume("q")
    finally:
        broker.close()
    return ids


def _held(client: redis.Redis) -> int:
    return sum(client.llen(K.processing(c.decode())) for c in client.hkeys(K.consumers))


# --- the reclaim script -----------------------------------------------------------


def test_a_costly_reclaim_with_started_charges_only_the_oldest_frames(redis_client: redis.Redis) -> None:
    """reclaim.lua with started=2 over a list of 5: the 2 oldest cost an attempt, the 3 newer go back
    free, and all 5 land at the consuming end of pending, oldest first, ahead of a newer message."""
    frames = [framing.frame(message.encode_payload("q", {"i": i}, message_id=f"m{i}", max_size_bytes=1024)[1])
              for i in range(5)]
    redis_client.lpush(K.processing("c1"), *frames)  # m0 oldest, at the right end
    redis_client.hset(K.consumers, "c1", "{}")
    redis_client.lpush(K.pending, b"0|" + b"newer")
    call = scripts.reclaim(K, "c1", costs_attempt=True, retry_threshold=5, reason="killed by signal 9", batch=2,
                           started=2)
    while call.run(redis_client).remaining > 0:
        pass
    taken = [redis_client.rpop(K.pending) for _ in range(6)]
    assert [message.decode(f).id for f in taken[:5]] == ["m0", "m1", "m2", "m3", "m4"]
    assert [message.decode(f).attempts for f in taken[:5]] == [1, 1, 0, 0, 0]
    assert taken[5] == b"0|newer"


# --- real consumer processes --------------------------------------------------------


@pytest.mark.topologies
def test_sigkill_with_eight_prefetched_charges_the_started_one_and_frees_seven_ahead_of_newer(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """prefetch 8: a SIGKILL while the first of 8 runs; it comes back at attempts 1, the 7 never started
    at attempts 0, all 8 handled before 5 messages published after them; each handled once."""
    _pause(redis_url)
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_thread", "prefetch": 8}})
    procs.wait_registered(sup, 1, redis_client)
    ids = _burst(redis_url, [{"sleep": 60, "then": 0}] + [{"sleep": 0}] * 7)
    wait_for(lambda: len(sup.events("start")) == 1 and _held(redis_client) == 8)
    with Producer(redis_url) as p:
        newer = p.publish_many("q", [{"sleep": 0}] * 5)
    assert len(sup.events("start")) == 1 and redis_client.llen(K.pending) == 5
    [victim] = sup.consumers_by_queue()["q"]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(sup.events("done")) == 13, timeout_s=15)
    done = sorted(sup.events("done"), key=lambda e: e["t"])
    assert [e["id"] for e in done[:8]] == ids and [e["id"] for e in done[8:]] == newer
    assert [e["attempts"] for e in done] == [1] + [0] * 12
    assert len(sup.events("start")) == 14  # the first twice, every other once
    assert redis_client.llen(K.dead) == 0 and redis_client.llen(K.pending) == 0


def test_sigkill_frees_a_finished_unsettled_message_which_alone_runs_twice(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """prefetch 4: the first message ends and waits for its settle while the second (started right after
    it) runs; a SIGKILL then charges the second alone (attempts 1); the first goes back free and runs
    again (the duplicate a finished, unsettled frame may cost), the two never started go back free."""
    _pause(redis_url)
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_thread", "prefetch": 4}})
    procs.wait_registered(sup, 1, redis_client)
    ids = _burst(redis_url, [{"sleep": 0}, {"sleep": 60, "then": 0}, {"sleep": 0}, {"sleep": 0}])
    wait_for(lambda: len(sup.events("start")) == 2 and len(sup.events("done")) == 1 and _held(redis_client) == 4)
    [victim] = sup.consumers_by_queue()["q"]
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(sup.events("done")) == 5, timeout_s=15)
    after = sorted(sup.events("done"), key=lambda e: e["t"])[1:]
    assert [(e["id"], e["attempts"]) for e in after] == [(ids[0], 0), (ids[1], 1), (ids[2], 0), (ids[3], 0)]
    assert redis_client.llen(K.dead) == 0 and redis_client.llen(K.pending) == 0


def test_a_poison_message_that_ends_its_process_never_costs_its_batch_neighbours_an_attempt(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """prefetch 8, retry_threshold 1: a message that ends its process whenever it runs, taken behind 5
    good ones that return first, is dead-lettered after its 2 deliveries; the 5 (handled again after
    each death) and the 2 never started are never charged: none of them is dead-lettered."""
    _pause(redis_url)
    sup = supervise({"q": {"handler": "tests.support.handlers:chaos", "prefetch": 8, "retry_threshold": 1}})
    procs.wait_registered(sup, 1, redis_client)
    ids = _burst(redis_url, [{"n": i} for i in range(5)] + [{"n": 5, "kind": "exit"}] + [{"n": 6}, {"n": 7}])
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=30)
    [dead] = [deadletter.DeadLetter(f) for f in redis_client.lrange(K.dead, 0, -1)]
    assert dead.message() is not None and dead.message().id == ids[5]  # type: ignore[union-attr]
    good = set(ids) - {ids[5]}
    wait_for(lambda: good <= {e["id"] for e in sup.events("done")}, timeout_s=15)
    assert all(e["attempts"] == 0 for e in sup.events("done"))
    # Its second delivery (attempts 1: it may kill again) waits for the 5 to be settled: they run twice, not 3 times.
    assert max(Counter(e["id"] for e in sup.events("done")).values()) <= 2


def test_a_failed_attempt_is_recorded_before_the_next_starts_so_a_later_death_never_charges_those_after_it(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """prefetch 8, retry_threshold 1: a message that raises, then two good ones, then one that ends its
    process: the raise's retry is settled before the next starts, so the death charges only the message
    that died; the good ones after the raise go back free and are never dead-lettered."""
    _pause(redis_url)
    sup = supervise({"q": {"handler": "tests.support.handlers:chaos", "prefetch": 8, "retry_threshold": 1}})
    procs.wait_registered(sup, 1, redis_client)
    ids = _burst(redis_url, [{"n": 0}, {"n": 1, "kind": "raise"}, {"n": 2}, {"n": 3}, {"n": 4, "kind": "exit"}])
    wait_for(lambda: redis_client.llen(K.dead) == 2, timeout_s=30)
    dead = {deadletter.DeadLetter(f).message().id for f in redis_client.lrange(K.dead, 0, -1)}  # type: ignore[union-attr]
    assert dead == {ids[1], ids[4]}
    wait_for(lambda: {ids[0], ids[2], ids[3]} <= {e["id"] for e in sup.events("done")}, timeout_s=15)
    assert all(e["attempts"] == 0 for e in sup.events("done"))
    assert sorted(e["attempts"] for e in sup.events("attempt") if e["id"] == ids[1]) == [0, 1]


@pytest.mark.parametrize(("consumers", "ready", "taken"),
                         [(1, 6, 6), (2, 6, 3), (3, 7, 3), (4, 2, 1), (2, 80, 32), (5000, 5, 1)])
def test_a_take_takes_at_most_its_share_of_what_is_ready(redis_client: redis.Redis, consumers: int, ready: int,
                                                         taken: int) -> None:
    """take.lua asked for 32 takes its share of the ready frames, rounded up, among the consumers
    registered: a short queue is spread over them (none idle while one holds the rest), a backlog
    goes in full batches; a registry swollen with junk entries still lets each take take one."""
    redis_client.hset(K.consumers, mapping={f"c{i}": "{}" for i in range(consumers)})
    redis_client.lpush(K.pending, *[framing.frame(message.encode_payload("q", i, message_id=f"m{i}",
                                                                          max_size_bytes=1024)[1])
                                    for i in range(ready)])
    took = scripts.take(K, "c0", 32).run(redis_client)
    assert [message.decode(f).id for f in took.frames] == [f"m{i}" for i in range(taken)]
    assert redis_client.llen(K.processing("c0")) == taken and redis_client.llen(K.pending) == ready - taken


@pytest.mark.parametrize("how", ["sigterm", "roll"])
def test_a_stop_gives_the_frames_never_started_back_free_at_once_while_the_running_finish(
        how: str, supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """concurrency 2, prefetch 8 (9 held: 2 running, 7 waiting): a graceful stop or a roll puts the 7
    back in pending within a second, free (a roll's new consumer takes them at once), while the 2
    running finish and ack."""
    queues: dict[str, dict[str, Any]] = {"q": {"handler": "tests.support.handlers:pause_thread", "concurrency": 2,
                                               "prefetch": 8}}
    _pause(redis_url)
    sup = supervise(queues, shutdown_timeout="20s")
    procs.wait_registered(sup, 1, redis_client)
    # A roll stops its first old consumer once the new one has been up 2 s
    # (decide._roll): the two running outlast that.
    running_s = 4 if how == "roll" else 2
    ids = _burst(redis_url, [{"sleep": running_s}] * 2 + [{"sleep": 0}] * 7)
    wait_for(lambda: len(sup.events("start")) == 2 and _held(redis_client) == 9)
    asked = time.monotonic()
    if how == "roll":  # the new consumer takes the 7 at once, long before the old one's two end
        [old] = sup.consumers_by_queue()["q"]
        queues["q"]["retry_threshold"] = 7
        procs.write_config(sup.cfg, redis_url, queues)
        sup.signal(signal.SIGHUP)
        wait_for(lambda: len(sup.events("done")) == 9, timeout_s=15)
        done = sorted(sup.events("done"), key=lambda e: e["t"])
        assert {e["pid"] for e in done[:7]} != {old} and {e["pid"] for e in done[7:]} == {old}
        assert sorted(e["id"] for e in done) == sorted(ids) and {e["attempts"] for e in done} == {0}
        assert len(sup.events("start")) == 9
        return
    sup.signal(signal.SIGTERM)
    wait_for(lambda: redis_client.llen(K.pending) == 7 or len(sup.events("start")) > 2, timeout_s=5)
    back = time.monotonic() - asked
    assert len(sup.events("start")) == 2 and sorted(_attempts(redis_client, K.pending).values()) == [0] * 7
    assert back < 1.5, f"the 7 waiting frames went back {back:.2f} s after the stop"
    assert len(sup.events("done")) == 0  # the two running still run
    assert sup.proc.wait(20) == 0
    assert sorted(e["id"] for e in sup.events("done")) == sorted(ids[:2])
    assert [e["attempts"] for e in sup.events("done")] == [0, 0]


def test_a_scale_down_gives_the_stopped_consumers_waiting_frames_back_at_once(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """2 consumers, concurrency 2, prefetch 4, each holding 5 (2 running, 3 waiting): SIGTTOU stops one;
    its 3 waiting are back in pending within a second, free; all 10 end handled once, none charged."""
    _pause(redis_url)
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_thread", "concurrency": 2, "prefetch": 4,
                           "consumers": 2}}, shutdown_timeout="20s")
    procs.wait_registered(sup, 2, redis_client)
    ids = _burst(redis_url, [{"sleep": 2}] * 10)
    wait_for(lambda: len(sup.events("start")) == 4 and _held(redis_client) == 10)
    asked = time.monotonic()
    sup.signal(signal.SIGTTOU)
    wait_for(lambda: redis_client.llen(K.pending) == 3 or len(sup.events("start")) > 4, timeout_s=5)
    assert len(sup.events("start")) == 4 and sorted(_attempts(redis_client, K.pending).values()) == [0] * 3
    assert time.monotonic() - asked < 1.5
    wait_for(lambda: len(sup.events("done")) == 10, timeout_s=20)
    assert sorted(e["id"] for e in sup.events("done")) == sorted(ids)
    assert {e["attempts"] for e in sup.events("done")} == {0}


@pytest.mark.topologies
def test_a_pause_sends_the_waiting_frames_back_within_a_second_and_a_resume_runs_them(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """concurrency 2, prefetch 8: paused while 2 run and 7 wait, the 7 are back in pending within a
    second, never started; resumed, all 9 are handled once, none charged."""
    _pause(redis_url)
    sup = supervise({"q": {"handler": "tests.support.handlers:pause_thread", "concurrency": 2, "prefetch": 8}})
    procs.wait_registered(sup, 1, redis_client)
    ids = _burst(redis_url, [{"sleep": 3}] * 2 + [{"sleep": 0}] * 7)
    wait_for(lambda: len(sup.events("start")) == 2 and _held(redis_client) == 9)
    broker = Broker(redis_url, "smq")
    try:
        broker.queues.pause("q", by="test")
        paused = time.monotonic()
        wait_for(lambda: redis_client.llen(K.pending) == 7, timeout_s=5)
        assert time.monotonic() - paused < 1.2 and len(sup.events("start")) == 2
        broker.queues.resume("q")
    finally:
        broker.close()
    wait_for(lambda: len(sup.events("done")) == 9, timeout_s=15)
    assert sorted(e["id"] for e in sup.events("done")) == sorted(ids)
    assert {e["attempts"] for e in sup.events("done")} == {0}


def test_max_messages_never_takes_past_its_limit_so_nothing_waits_for_a_consumer_that_ends(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """prefetch 8, max_messages 5: each consumer handles at most 5 (it never takes more), is replaced,
    and all 23 are handled once, none charged an attempt."""
    _pause(redis_url)
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "prefetch": 8, "max_messages": 5}})
    procs.wait_registered(sup, 1, redis_client)
    ids = _burst(redis_url, [{"i": i} for i in range(23)])
    wait_for(lambda: len(sup.events("done")) == 23, timeout_s=30)
    done = sup.events("done")
    assert sorted(e["id"] for e in done) == sorted(ids) and {e["attempts"] for e in done} == {0}
    per_pid: dict[int, int] = {}
    for e in done:
        per_pid[e["pid"]] = per_pid.get(e["pid"], 0) + 1
    assert max(per_pid.values()) <= 5 and len(per_pid) >= 5


# --- one consumer in this process ------------------------------------------------------


def test_a_priority_nine_message_waits_behind_at_most_the_prefetched_frames(
        start: Callable[..., Running], producer: Producer, redis_url: str, redis_client: redis.Redis) -> None:
    """prefetch 4: a priority-9 message published while the first of 4 taken runs starts after the 3
    prefetched ones, before the priority-0 messages still in pending."""
    order: list[str] = []
    published = threading.Event()

    def handler(msg: Any) -> None:
        order.append(msg.id)
        if msg.body.get("hold"):
            assert published.wait(10)  # runs until the priority-9 message is in

    ids = _burst(redis_url, [{"hold": True}] + [{}] * 5)
    start(handler, prefetch=4)
    wait_for(lambda: order)
    high = producer.publish("q", {}, priority=9)
    published.set()
    wait_for(lambda: len(order) == 7, timeout_s=10)
    assert order == ids[:4] + [high] + ids[4:]


def test_a_prefetched_message_whose_ttl_passed_while_it_waited_is_dead_lettered_as_expired(
        start: Callable[..., Running], producer: Producer, redis_url: str, redis_client: redis.Redis) -> None:
    """prefetch 4: three messages with a 300 ms ttl, taken while fresh behind one that runs 1 s, are
    screened when they would start: dead-lettered "expired", never handled."""
    broker = Broker(redis_url, "smq")
    broker.queues.pause("q", by="test")
    slow = producer.publish("q", {"sleep": 1.0})
    short = [producer.publish("q", {}, ttl=0.3) for _ in range(3)]
    handled: list[str] = []

    def handler(msg: Any) -> None:
        handled.append(msg.id)
        time.sleep(msg.body.get("sleep", 0))  # the handler's work, outlasting the others' ttl: the behaviour under test

    start(handler, prefetch=4)
    broker.queues.resume("q")
    broker.close()
    wait_for(lambda: redis_client.llen(K.dead) == 3, timeout_s=10)
    assert handled == [slow]
    dead = [deadletter.DeadLetter(f) for f in redis_client.lrange(K.dead, 0, -1)]
    assert {d.reason for d in dead} == {"expired"}
    assert sorted(d.message().id for d in dead if d.message()) == sorted(short)  # type: ignore[union-attr]
    assert redis_client.hget(K.counters, "expired") == b"3"


@pytest.mark.topologies
@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_finished_message_is_settled_within_milliseconds_when_nothing_else_is_ready(
        concurrency: int, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """prefetch 8: the last of a batch, and (concurrency 2) a quick one beside a handler still running
    2 s, leave the consumer's list within 250 ms of their handler's end (the bound is 5 ms)."""
    ends: dict[str, float] = {}

    def handler(msg: Any) -> None:
        time.sleep(msg.body.get("sleep", 0))  # the handler's work: one still running beside a quick one
        ends[msg.id] = time.monotonic()

    r = start(handler, prefetch=8, concurrency=concurrency)
    lst = K.processing(r.consumer.consumer_id)
    bodies = [{"sleep": 2}, {}] if concurrency == 2 else [{}, {}, {}]
    ids = producer.publish_many("q", bodies)
    quick = ids[1] if concurrency == 2 else ids[-1]
    wait_for(lambda: quick in ends, timeout_s=5)
    gone = wait_for(lambda: all(message.decode(f).id != quick for f in redis_client.lrange(lst, 0, -1))
                    and time.monotonic(), timeout_s=5, interval_s=0.001)
    assert gone - ends[quick] < 0.25
    if concurrency == 2:
        assert ids[0] not in ends  # the long one still runs
    wait_for(lambda: redis_client.hget(K.counters, "acked") == str(len(ids)).encode(), timeout_s=5)


def test_a_rate_limited_queue_takes_only_what_it_may_start(
        start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """prefetch 32 on a queue limited to 5/s: the consumer holds one frame at a time (a prefetched frame
    would hold a booked start other consumers could use), and the limit holds."""
    starts: list[float] = []
    held: list[int] = []
    r = start(lambda m: (starts.append(time.monotonic()),
                         held.append(redis_client.llen(K.processing(r.consumer.consumer_id)))),
              prefetch=32, rate_limit_per_s=5.0)
    producer.publish_many("q", [{}] * 6)
    wait_for(lambda: len(starts) == 6, timeout_s=10)
    assert max(held) == 1
    assert starts[-1] - starts[0] >= 0.9  # 5 intervals of 200 ms, minus the clock's slack
