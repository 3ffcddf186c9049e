"""Liveness and the elected garbage collector, with several real supervisors
sharing one private redis-server (test-sized timings; asserts relative to them)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import pytest
import redis

from smqsup import message
from smqsup.client.producer import Producer
from smqsup.collector.collector import Collector
from smqsup.config.model import Config, QueueConfig
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from tests.support import procs
from tests.support.helpers import client_for, holds, missing_tool, redis_ms, wait_for

pytestmark = pytest.mark.topologies

Q = QueueKeys("smq", "q")
HB = {"heartbeat_interval": "200ms", "heartbeat_timeout": "2s"}
TIMEOUT_S = 2.0


Supervise = Callable[..., procs.Supervisor]


def _events(*supervisors: procs.Supervisor, event: Optional[str] = None) -> list[dict[str, Any]]:
    return [e for s in supervisors for e in s.events(event)]


def _ready(s: procs.Supervisor, n: int, client: "redis.Redis", queue: str = "q") -> None:
    """Wait until ``s`` has ``n`` consumers of ``queue`` registered."""
    def mine() -> int:
        pids = {k.pid for k in s.children()}
        return sum(1 for cid in client.hkeys(QueueKeys("smq", queue).consumers)
                   if int(cid.decode().split(":")[1]) in pids)
    wait_for(lambda: mine() == n, timeout_s=15, message=f"{s.name}: {mine()} of {n} consumers registered")


def _busy(supervise: Supervise, redis_url: str, client: "redis.Redis", n: int) -> tuple[procs.Supervisor, list[str]]:
    """Supervisor "a" with ``n`` slow consumers, each in the middle of a 30 s message; the messages' ids."""
    a = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": n}}, name="a", **HB)
    _ready(a, n, client)
    with Producer(redis_url) as p:
        ids = p.publish_many("q", [{"sleep": 30}] * n)
    wait_for(lambda: len(_events(a, event="start")) == n)
    return a, ids


def _leader(client: "redis.Redis", queue: str = "q") -> Optional[int]:
    """Pid of the supervisor holding the queue's collector lock."""
    token = client.get(QueueKeys("smq", queue).gc_lock)
    return int(token.decode().split(":")[1]) if token else None


def _in_queue(client: "redis.Redis", mid: str, attempts: int) -> bool:
    """The message is back: in pending, or in some live consumer's list, with ``attempts``."""
    frames = list(client.lrange(Q.pending, 0, -1))
    for cid in client.hkeys(Q.consumers):
        frames += client.lrange(Q.processing(cid.decode()), 0, -1)
    return any(f.startswith(b"%d|" % attempts) and message.decode(f).id == mid for f in frames)


def test_a_whole_supervisor_killed_its_messages_are_reclaimed_by_another(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """SIGKILL of supervisor A's process group mid-message: B reclaims within heartbeat_timeout + 2 s, none lost."""
    a, ids = _busy(supervise, redis_url, redis_client, 2)
    b = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 2}}, name="b", shutdown_timeout="1s", **HB)
    _ready(b, 2, redis_client)
    assert _leader(redis_client) == a.pid  # A leads: B must take over first
    a.kill_group()
    killed = time.monotonic()
    wait_for(lambda: all(_in_queue(redis_client, mid, 1) for mid in ids), timeout_s=TIMEOUT_S + 4,
             interval_s=0.02, message="messages of the dead supervisor not reclaimed")
    took = time.monotonic() - killed
    assert took <= TIMEOUT_S + 2, f"reclaimed after {took:.2f}s"
    assert _leader(redis_client) == b.pid
    started = wait_for(lambda: {e["id"] for e in _events(b, event="start")} >= set(ids) or None)
    assert started
    # (the collector counts a lost consumer in the round trip after its reclaim, which B may have
    # taken and started from by then)
    broker = Broker(redis_url)
    try:
        wait_for(lambda: broker.statistics.gc_facts("q")["consumers_lost"] == 2, timeout_s=5,
                 message=f"collector facts: {broker.statistics.gc_facts('q')}")
    finally:
        broker.close()


def test_leader_killed_another_leads_within_one_ttl_and_never_two(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """The collector's supervisor killed: another takes over within one lock TTL; at no sample two claim it."""
    queues = {"q": {"handler": "tests.support.handlers:record"}}
    group = [supervise(queues, name=n, **HB) for n in ("a", "b", "c")]
    for s in group:
        _ready(s, 1, redis_client)
    samples: list[tuple[float, Optional[int]]] = []
    done = threading.Event()

    def sample() -> None:
        client = client_for(redis_url)
        while not done.wait(0.01):  # a sample every 10 ms until the test is done
            samples.append((time.monotonic(), _leader(client)))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        first = wait_for(lambda: _leader(redis_client))
        victim = next(s for s in group if s.pid == first)
        victim.kill_group()
        killed = time.monotonic()
        new = wait_for(lambda: (lambda p: p if p not in (None, first) else None)(_leader(redis_client)),
                       timeout_s=TIMEOUT_S + 3, interval_s=0.01)
        took = time.monotonic() - killed
        # Keep sampling well into the new leader's tenure.
        wait_for(lambda: sum(1 for t, _ in samples if t > killed + took) >= 30, message="sampler stalled")
    finally:
        done.set()
        sampler.join()
    # One ttl, plus room for the contenders' next tries (every 0.2 s) on a busy machine;
    # a takeover that waited for a second ttl would take twice as long.
    assert took <= TIMEOUT_S + 1.0, f"failover took {took:.2f}s for a {TIMEOUT_S}s lock"
    alive = {s.pid for s in group if s is not victim}
    assert new in alive
    # Every sample names one holder; after the failover only the new one; and
    # the logs show each supervisor's tenure starting after the previous ended.
    after = [holder for t, holder in samples if t > killed + took]
    assert after and set(after) == {new}
    assert sum("is now the garbage collector" in s.log() for s in group) == 2


def test_a_paused_leader_cannot_act_and_each_orphan_is_requeued_once(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """Leader SIGSTOPped for 3x the TTL while its consumer dies; B requeues the orphan once; A steps down."""
    a, [mid] = _busy(supervise, redis_url, redis_client, 1)
    [start] = _events(a, event="start")
    b = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, name="b", **HB)
    _ready(b, 1, redis_client)
    assert _leader(redis_client) == a.pid
    os.kill(a.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    os.kill(start["pid"], signal.SIGKILL)  # its consumer dies while the leader is frozen
    wait_for(lambda: [e for e in _events(b, event="done") if e["id"] == mid], timeout_s=3 * TIMEOUT_S + 2)
    wait_for(lambda: _leader(redis_client) == b.pid)
    # Frozen for 3x the TTL in all, B leading throughout.
    holds(lambda: _leader(redis_client) == b.pid, frozen + 3 * TIMEOUT_S - time.monotonic(),
          message="B lost the collector lock while A was frozen")
    os.kill(a.pid, signal.SIGCONT)
    # (A leader whose first look after SIGCONT was the arbiter's wake_in() used to step down without a
    # word: test_a_leader_paused_past_its_window_says_it_stepped_down.)
    wait_for(lambda: "lost the lock" in a.log() or "stepping down" in a.log(), timeout_s=15)
    _ready(a, 1, redis_client)  # A replaced its dead child and consumes again
    with Producer(redis_url) as p:
        p.publish_many("q", [{"sleep": 0}] * 4)
    wait_for(lambda: redis_client.llen(Q.pending) == 0)
    facts = Broker(redis_url).statistics.gc_facts("q")
    assert facts["reclaimed"] == 1
    done = [e for e in _events(a, b, event="done") if e["id"] == mid]
    assert [(e["pid"], e["attempts"]) for e in done] == [(done[0]["pid"], 1)]
    assert _leader(redis_client) == b.pid


def _leader_and_contender(redis_url: str) -> tuple[Collector, Collector]:
    """Two in-process collectors of queue q, both connected to Redis for longer than heartbeat_timeout;
    A has ticked once and leads."""
    cfg = Config(Path("<test>"), queues={"q": QueueConfig("q", "m:f")}, heartbeat_interval_s=0.2,
                 heartbeat_timeout_s=2.0)
    a = Collector(Broker(redis_url), cfg, owner="a")
    b = Collector(Broker(redis_url), cfg, owner="b")
    a._connected_since = b._connected_since = time.monotonic() - 60
    a.tick()
    assert a.leading() == ["q"]
    return a, b


@pytest.mark.parametrize("first_look", ["tick", "wake_in_then_tick"])
def test_a_leader_paused_past_its_window_says_it_stepped_down(first_look: str, redis_url: str,
                                                              redis_client: "redis.Redis",
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A leader frozen past its lock's window steps down and says so, whether its first look after waking
    is a tick or the arbiter's wake_in() (which once dropped the lock silently: the paused-leader test's
    wait for the log line then failed under load)."""
    a, b = _leader_and_contender(redis_url)
    # A is frozen 6 s (3x the TTL): its window and the lock expire; B takes over.
    a._queues["q"].lock._valid_until = time.monotonic() - 4
    redis_client.delete(Q.gc_lock)
    b.tick()
    assert b.leading() == ["q"]
    a._queues["q"].due["lock_step"] = 0.0  # its renew is due, as it is after 6 s
    caplog.clear()
    with caplog.at_level(logging.INFO):
        if first_look == "wake_in_then_tick":
            a.wake_in(0.1)
        a.tick()
        a.tick()
    assert a.leading() == []
    assert "lost the lock" in caplog.text or "stepping down" in caplog.text, caplog.text


def test_a_deposed_leaders_scripts_are_refused_by_the_token_check(redis_url: str,
                                                                   redis_client: "redis.Redis") -> None:
    """A collector that still believes it leads (paused past its TTL) is refused in Redis and steps down."""
    a, b = _leader_and_contender(redis_url)
    # A freezes; its lock expires; B takes over; A wakes still believing it leads.
    redis_client.delete(Q.gc_lock)
    b.tick()
    assert b.leading() == ["q"]
    # Meanwhile a consumer died with a message in its list, and a retry fell due.
    redis_client.lpush(Q.processing("dead"), b"0|x")
    redis_client.hset(Q.consumers, "dead", "{}")
    redis_client.zadd(Q.delayed, {b"0|y": 0})
    state = a._queues["q"]
    state.lock._valid_until = time.monotonic() + 60
    state.due["scan"] = state.due["promote"] = 0.0
    state.due["lock_step"] = time.monotonic() + 60
    a.tick()
    assert a.leading() == []
    # Nothing was moved by A.
    assert redis_client.llen(Q.processing("dead")) == 1 and redis_client.zcard(Q.delayed) == 1
    b._queues["q"].due["scan"] = b._queues["q"].due["promote"] = 0.0
    b.tick()
    assert redis_client.llen(Q.pending) == 2


@pytest.mark.single_node("the handler's CPU, not Redis")
def test_a_handler_spinning_the_cpu_is_not_declared_dead(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """Pure-Python CPU spin for 3x heartbeat_timeout: the message is not reclaimed and is handled once."""
    a = supervise({"q": {"handler": "tests.support.handlers:spin"}}, name="a", **HB)
    _ready(a, 1, redis_client)
    with Producer(redis_url) as p:
        mid = p.publish("q", {"seconds": 3 * TIMEOUT_S})
    done = wait_for(lambda: _events(a, event="done"), timeout_s=3 * TIMEOUT_S + 10)
    assert [(e["id"], e["attempts"]) for e in done] == [(mid, 0)]
    assert Broker(redis_url).statistics.gc_facts("q").get("consumers_lost", 0) == 0
    assert "declared dead" not in a.log()


def test_a_stopped_consumer_is_reclaimed_and_its_late_ack_is_a_counted_no_op(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """Consumer SIGSTOPped past heartbeat_timeout: message handled elsewhere; after SIGCONT its ack is a no-op."""
    a = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 2}}, name="a", **HB)
    _ready(a, 2, redis_client)
    with Producer(redis_url) as p:
        mid = p.publish("q", {"sleep": 1})
    [start] = wait_for(lambda: _events(a, event="start"))
    os.kill(start["pid"], signal.SIGSTOP)
    # Reclaimed and handled by the other consumer, as a second attempt.
    wait_for(lambda: [e for e in _events(a, event="done") if e["attempts"] == 1], timeout_s=TIMEOUT_S + 5)
    os.kill(start["pid"], signal.SIGCONT)
    wait_for(lambda: len(_events(a, event="done")) == 2, timeout_s=10)
    wait_for(lambda: Broker(redis_url).statistics.counters("q").get("late_acks") == 1)
    # The paused consumer does not go on under its old identity: it is replaced.
    wait_for(lambda: procs.gone(start["pid"]), timeout_s=10)
    _ready(a, 2, redis_client)
    assert redis_client.llen(Q.pending) == 0 and redis_client.llen(Q.dead) == 0
    assert sorted(e["attempts"] for e in _events(a, event="done") if e["id"] == mid) == [0, 1]


def test_delayed_retries_come_back_on_time_by_the_collector(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """A retry_delay of 1 s is honoured by the collector's promotion (consumers never promote)."""
    a = supervise({"q": {"handler": "tests.support.handlers:fail", "retry_threshold": 2, "retry_delay": "1s"}},
                  name="a", **HB)
    _ready(a, 1, redis_client)
    with Producer(redis_url) as p:
        p.publish("q", "x")
    wait_for(lambda: redis_client.llen(Q.dead) == 1, timeout_s=10)
    attempts = sorted(_events(a, event="attempt"), key=lambda e: e["attempts"])
    times = [e["t"] for e in attempts]
    gaps = [b - a_ for a_, b in zip(times, times[1:])]
    assert len(gaps) == 2 and all(1.0 <= g <= 1.6 for g in gaps), gaps


@pytest.mark.parametrize("skew", ["+30s", "-30s"])
@pytest.mark.single_node("the supervisor's clock, not Redis's")
def test_a_supervisor_with_a_skewed_wall_clock_causes_no_false_death(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis", skew: str) -> None:
    """One supervisor's wall clock off by 30 s (libfaketime): no consumer is declared dead, by either side."""
    lib = _libfaketime()
    a = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2}}, name="a", **HB)
    _ready(a, 2, redis_client)
    b = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2}}, name="b", **HB,
                  extra_env={"LD_PRELOAD": lib, "FAKETIME": skew, "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    _ready(b, 2, redis_client)
    # B's clock really is skewed (its children inherit it).
    with Producer(redis_url) as p:
        p.publish_many("q", range(20))
    wait_for(lambda: len(_events(a, b, event="done")) == 20)
    # Watch for three heartbeat timeouts (the span is the behaviour under test):
    # a false death would show up as a lost consumer at any point.
    broker = Broker(redis_url)
    holds(lambda: broker.statistics.gc_facts("q").get("consumers_lost", 0) == 0, 3 * TIMEOUT_S,
          message="a consumer was declared lost")
    assert "declared dead" not in a.log() + b.log()
    assert redis_client.hlen(Q.consumers) == 4


def _libfaketime() -> str:
    for path in ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"):
        if os.path.exists(path):
            return path
    missing_tool("libfaketime is not installed: apt-get install faketime (.ci/run does)")


def _leading_collector(redis_url: str, connected_for_s: float) -> Collector:
    cfg = Config(Path("<test>"), queues={"q": QueueConfig("q", "m:f")}, heartbeat_interval_s=0.2,
                 heartbeat_timeout_s=2.0)
    c = Collector(Broker(redis_url), cfg, owner="t")
    c._connected_since = time.monotonic() - connected_for_s
    return c


def test_after_a_redis_outage_the_collector_waits_a_heartbeat_timeout_before_reclaiming(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """Stale-looking heartbeats right after an outage are not trusted until heartbeats had time to resume."""
    Broker(redis_url).registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.zadd(Q.heartbeats, {"c1": 0})  # looks long dead
    redis_client.lpush(Q.processing("c1"), b"0|x")
    c = _leading_collector(redis_url, connected_for_s=0.0)
    c.redis_trouble()
    c.tick()
    c.tick()
    assert c.leading() == ["q"] and redis_client.llen(Q.processing("c1")) == 1
    c._connected_since = time.monotonic() - 60
    c._queues["q"].due["scan"] = 0.0
    c.tick()
    assert redis_client.llen(Q.processing("c1")) == 0
    assert redis_client.lrange(Q.pending, 0, -1) == [b"1|x"]


def test_a_message_moved_into_a_retired_consumers_list_is_returned(redis_url: str,
                                                                    redis_client: "redis.Redis") -> None:
    """A consumer unregistered by a reclaim that still moves a message into its list: the collector returns it, free."""
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="consumer lost")
    assert redis_client.zscore(Q.retired, "c1") is not None
    redis_client.lpush(Q.processing("c1"), b"2|late")  # its BLMOVE landed after the reclaim
    c = _leading_collector(redis_url, connected_for_s=60)
    c.tick()
    assert redis_client.llen(Q.processing("c1")) == 0
    assert redis_client.lrange(Q.pending, 0, -1) == [b"2|late"]


@pytest.mark.parametrize("silent_s, reclaimed", [(TIMEOUT_S + 0.6, True), (TIMEOUT_S - 1.0, False)])
def test_a_consumer_is_reclaimed_once_its_heartbeat_timeout_passed_and_not_before(
        silent_s: float, reclaimed: bool, redis_url: str, redis_client: "redis.Redis") -> None:
    """A consumer silent a little longer than heartbeat_timeout (by the Redis clock) is lost at the next tick;
    one silent a second less is not: the timeout is the one configured, not a multiple of it."""
    Broker(redis_url).registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.zadd(Q.heartbeats, {"c1": redis_ms(redis_client) - int(silent_s * 1000)})
    redis_client.lpush(Q.processing("c1"), b"0|x")
    c = _leading_collector(redis_url, connected_for_s=60)
    c.tick()
    assert redis_client.llen(Q.processing("c1")) == (0 if reclaimed else 1)
    assert redis_client.lrange(Q.pending, 0, -1) == ([b"1|x"] if reclaimed else [])
    assert redis_client.hexists(Q.consumers, "c1") is not reclaimed


@pytest.mark.parametrize("beat", ["+inf", "a day ahead"])
def test_a_heartbeat_no_clock_wrote_does_not_make_a_consumer_immortal(
        beat: str, redis_url: str, redis_client: "redis.Redis") -> None:
    """A heartbeat dated +inf or a day and more ahead of the Redis clock (heartbeat.lua writes the clock's
    now) is read as stale: the consumer's messages are reclaimed like any lost one's."""
    Broker(redis_url).registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    seconds, _ = redis_client.time()
    # Ahead by a day and 10 s: still more than a day when the collector reads its clock (TIME gave whole
    # seconds, and the tick comes later: a margin of 1 s failed about one run in twenty on a cluster).
    redis_client.zadd(Q.heartbeats, {"c1": float("inf") if beat == "+inf" else (seconds + 86_410) * 1000})
    redis_client.lpush(Q.processing("c1"), b"0|x")
    c = _leading_collector(redis_url, connected_for_s=60)
    c.tick()
    assert redis_client.llen(Q.processing("c1")) == 0 and redis_client.lrange(Q.pending, 0, -1) == [b"1|x"]
    assert not redis_client.hexists(Q.consumers, "c1")


def test_a_delayed_score_of_infinity_is_waited_for_a_day_at_most(redis_url: str, redis_client: "redis.Redis") -> None:
    """promote.lua's wait until the next due message is at most a day, +inf and 1e300 scores included
    (a Lua infinity would overflow the integer reply)."""
    broker = Broker(redis_url)
    for score in (float("inf"), 1e300):
        redis_client.delete(Q.delayed)
        redis_client.zadd(Q.delayed, {b"0|x": score})
        r = broker.messages.promote("q")
        assert r.moved == 0 and r.wait_ms == 86_400_000, r


def test_producer_statistics_dated_ahead_are_forgotten(redis_url: str, redis_client: "redis.Redis") -> None:
    """A producer entry dated +inf (no flush wrote it) is forgotten at the next flush, like a silent one."""
    seen, producers = "smq:{smq}:producers:seen", "smq:{smq}:producers"
    redis_client.hset(producers, "junk", "{}")
    redis_client.zadd(seen, {"junk": float("inf")})
    Broker(redis_url).messages.producer_stats("p1", '{"published":1}')
    assert not redis_client.hexists(producers, "junk") and redis_client.hexists(producers, "p1")
