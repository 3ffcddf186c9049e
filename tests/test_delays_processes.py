"""Scheduled and expiring messages, and Reject and Retry, as users run them:
real ``smqsup`` supervisors on a private redis-server, real signals, the
handlers of tests/support/handlers.py recording every delivery.

Due times and expiries are on the Redis clock, which on one host is the wall
clock the ``timed`` handler records (``time.time()``), so the two compare
directly. Test-sized heartbeat timings: a SIGKILLed supervisor's collector
lock lapses within heartbeat_timeout (2 s).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from smqsup import framing
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from smqsup.views import deadletters
from tests.support import procs
from tests.support.helpers import redis_ms, wait_for

Supervise = Callable[..., procs.Supervisor]

pytestmark = pytest.mark.topologies

Q = QueueKeys("smq", "q")
HB = {"heartbeat_interval": "200ms", "heartbeat_timeout": "2s"}
TIMED = {"q": {"handler": "tests.support.handlers:timed"}}
#: How late after its due time a scheduled message may reach its handler, in s:
#: the collector looks every 0.1 s; the rest is a fetch and a handler call.
ON_TIME_S = 1.0
#: How far the handlers' clock (CLOCK_MONOTONIC, in the consumer) and the
#: Redis server's (CLOCK_REALTIME, which due times use) may drift apart over
#: a second, NTP slewing one of them: a gap measured by the first is checked
#: against a delay kept by the second within this.
CLOCKS_APART_S = 0.005


def due_ms(client: "redis.Redis", mid: str) -> int:
    """The due time (ms, Redis clock) of scheduled message ``mid``: its score."""
    for frame, score in client.zrange(Q.scheduled, 0, -1, withscores=True):
        if framing.peek_id(frame) == mid:
            return int(score)
    raise AssertionError(f"message {mid} is not in the scheduled set")


def publish_delayed(url: str, client: "redis.Redis", delay_s: int) -> tuple[str, int]:
    """Publish one message with ``delay_s``; its id and due time, checked to
    be the Redis clock at the publish plus the delay."""
    before = redis_ms(client)
    with Producer(url) as p:
        mid = p.publish("q", "later", delay=delay_s)
    after = redis_ms(client)
    due = due_ms(client, mid)
    # before and after are read rounded down to the ms, the due time rounded up.
    assert before + delay_s * 1000 <= due <= after + 1 + delay_s * 1000, (before, due, after)
    return mid, due


def drained(client: "redis.Redis", queue: str = "q") -> bool:
    """Nothing of ``queue`` waits or is held anywhere: no delivery can follow."""
    k = QueueKeys("smq", queue)
    held = sum(client.llen(k.processing(cid.decode())) for cid in client.hkeys(k.consumers))
    waiting = client.llen(k.pending) + client.zcard(k.priority) + client.zcard(k.scheduled) + client.zcard(k.delayed)
    return held + waiting == 0


def handled_once_on_time(s: procs.Supervisor, client: "redis.Redis", mid: str, due: int) -> dict[str, Any]:
    """Wait until ``s`` handled ``mid`` and the queue is drained; check it was
    handled exactly once, not before ``due`` (ms) and at most ON_TIME_S after."""
    wait_for(lambda: s.events("done"), timeout_s=10, message=f"{mid} not handled")
    wait_for(lambda: drained(client), message="the queue still holds messages")
    [done] = s.events("done")
    assert done["id"] == mid
    # One host: Redis TIME and time.time() read the same clock (1 ms: its resolution in the score).
    late_s = done["wall"] - due / 1000
    assert -0.001 <= late_s <= ON_TIME_S, f"handled {late_s:+.3f} s from its due time"
    return done


def test_a_delayed_message_survives_a_supervisor_sigkill(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """delay=6 s, its supervisor and consumers SIGKILLed, another started: handled once, on time."""
    a = supervise(TIMED, name="a", **HB)
    procs.wait_registered(a, 1, redis_client)
    consumers = [k.pid for k in a.children()]
    # The delay spans b's cold start (a Python process, its import and fork) on a busy machine.
    mid, due = publish_delayed(redis_url, redis_client, 6)
    a.kill_group()
    wait_for(lambda: all(procs.gone(pid) for pid in [a.pid, *consumers]), message="a's processes live on")
    assert due_ms(redis_client, mid) == due  # still scheduled, untouched
    b = supervise(TIMED, name="b", **HB)
    handled_once_on_time(b, redis_client, mid, due)
    assert a.events() == []
    assert Broker(redis_url).statistics.counters("q")["acked"] == 1


@pytest.mark.parametrize("down", ["until before its due time", "past its due time"])
def test_a_delayed_message_survives_a_redis_restart_with_aof(
        supervise: Supervise, redis_server: RedisServer, redis_url: str, redis_client: "redis.Redis",
        down: str) -> None:
    """redis-server SIGKILLed (appendfsync always) and restarted: the message comes back, handled once after due."""
    a = supervise(TIMED, **HB)
    procs.wait_registered(a, 1, redis_client)
    # Down until before: the restart and a consumer's reconnection (its backoff doubles to 2 s)
    # come well before the due time; past it: the outage spans it.
    mid, due = publish_delayed(redis_url, redis_client, 5 if down == "until before its due time" else 2)
    redis_server.kill()
    wait_for(lambda: "Redis unavailable" in a.log(), message="the supervisor never noticed Redis went away")
    if down == "past its due time":
        wait_for(lambda: time.time() * 1000 > due + 500, timeout_s=5)  # the outage spans the due time
    redis_server.start()
    restarted = time.time()
    if down == "until before its due time":
        assert due_ms(redis_client, mid) == due  # replayed from the AOF, still scheduled
        handled_once_on_time(a, redis_client, mid, due)
    else:
        wait_for(lambda: a.events("done"), timeout_s=10, message=f"{mid} not handled after the restart")
        wait_for(lambda: drained(redis_client))
        [done] = a.events("done")
        # Consumers reconnect with a backoff of at most 2 s; the collector retries after 1 s.
        assert done["id"] == mid and done["wall"] >= due / 1000 - 0.001
        assert done["wall"] - restarted <= 3.0, f"handled {done['wall'] - restarted:.2f} s after the restart"
    assert Broker(redis_url).statistics.counters("q")["acked"] == 1


def test_a_due_time_in_the_past_is_handled_at_once(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """at = a minute ago, at = 0 (the epoch), at = an aware datetime of 2000: each handled within 0.5 s."""
    a = supervise(TIMED, **HB)
    procs.wait_registered(a, 1, redis_client)
    past = {"a minute ago": time.time() - 60, "the epoch": 0,
            "2000": dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)}
    with Producer(redis_url) as p:
        for n, (what, at) in enumerate(past.items(), 1):
            sent = time.time()
            mid = p.publish("q", what, at=at)
            wait_for(lambda n=n: len(a.events("done")) == n, timeout_s=5, message=f"at={what}: not handled")
            done = next(e for e in a.events("done") if e["id"] == mid)
            assert done["wall"] - sent < 0.5, f"at={what}: handled {done['wall'] - sent:.3f} s after publish"
    assert redis_client.zcard(Q.scheduled) == 0


def test_a_ttl_that_passes_while_the_queue_is_paused_dead_letters_it_unhandled(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """Paused, ttl=1 s, the Redis clock past its expiry, resumed: dead-lettered "expired", counted, never handled."""
    a = supervise(TIMED, **HB)
    procs.wait_registered(a, 1, redis_client)
    broker = Broker(redis_url)
    assert broker.queues.pause("q", "test")
    with Producer(redis_url) as p:
        mid = p.publish("q", "short-lived", ttl=1)
        # A consumer blocked in BLMOVE may take it, see the pause and give it back.
        [frame] = wait_for(lambda: redis_client.lrange(Q.pending, 0, -1), message="not given back to pending")
        expires = framing.frame_head(frame).expires_ms
        assert expires is not None
        wait_for(lambda: redis_ms(redis_client) > expires, timeout_s=3)
        assert redis_client.lrange(Q.pending, 0, -1) == [frame]  # paused: nobody took it
        assert broker.queues.resume("q")
        wait_for(lambda: redis_client.llen(Q.dead) == 1, timeout_s=5, message="the expired message not dead-lettered")
        # A message after it is handled: the consumer works, and would have shown the first.
        control = p.publish("q", "control")
        wait_for(lambda: a.events("done"), timeout_s=5)
    [raw] = redis_client.lrange(Q.dead, 0, -1)
    row = deadletters.row(raw)
    assert (row["id"], row["reason"]) == (mid, "expired")
    assert [e["id"] for e in a.events()] == [control]
    counters = broker.statistics.counters("q")
    assert counters["expired"] == 1 and counters["dead_lettered"] == 1


def _deliveries(s: procs.Supervisor, queue_body: str) -> list[dict[str, Any]]:
    return sorted((e for e in s.events("attempt") if e["body"] == queue_body), key=lambda e: e["t"])


def _dead_reason(client: "redis.Redis", queue: str) -> str:
    [raw] = client.lrange(QueueKeys("smq", queue).dead, 0, -1)
    return str(deadletters.row(raw)["reason"])


def test_reject_and_retry_give_exact_delivery_counts(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """Reject: 1 delivery, "rejected: bad"; Retry(0.5) with threshold 2: 3, 0.5 s apart, dead; Retry once: 2, acked."""
    a = supervise({"rej": {"handler": "tests.support.handlers:reject"},
                   "again": {"handler": "tests.support.handlers:retry_always", "retry_threshold": 2},
                   "once": {"handler": "tests.support.handlers:retry_once", "retry_threshold": 2}}, **HB)
    for q in ("rej", "again", "once"):
        procs.wait_registered(a, 1, redis_client, q)
    with Producer(redis_url) as p:
        ids = {q: p.publish(q, q) for q in ("rej", "again", "once")}
    wait_for(lambda: redis_client.llen(QueueKeys("smq", "rej").dead) == 1, timeout_s=5)
    wait_for(lambda: redis_client.llen(QueueKeys("smq", "again").dead) == 1, timeout_s=10)
    wait_for(lambda: a.events("done"), timeout_s=5)
    for q in ("rej", "again", "once"):
        wait_for(lambda q=q: drained(redis_client, q), message=f"queue {q} still holds messages")
    broker = Broker(redis_url)

    rej = _deliveries(a, "rej")
    assert [(e["id"], e["attempts"]) for e in rej] == [(ids["rej"], 0)]
    assert _dead_reason(redis_client, "rej") == "rejected: bad"
    assert broker.statistics.counters("rej").get("retried", 0) == 0

    again = _deliveries(a, "again")
    assert [(e["id"], e["attempts"]) for e in again] == [(ids["again"], n) for n in range(3)]
    gaps = [b["t"] - a_["t"] for a_, b in zip(again, again[1:])]
    assert all(0.5 - CLOCKS_APART_S <= g <= 0.5 + ON_TIME_S for g in gaps), gaps
    assert _dead_reason(redis_client, "again") == "Retry: retry in 0.5 s"
    assert broker.statistics.counters("again")["retried"] == 2

    once = _deliveries(a, "once")
    assert [(e["id"], e["attempts"]) for e in once] == [(ids["once"], 0), (ids["once"], 1)]
    assert 0.2 - CLOCKS_APART_S <= once[1]["t"] - once[0]["t"] <= 0.2 + ON_TIME_S
    assert [e["id"] for e in a.events("done")] == [ids["once"]]
    counters = broker.statistics.counters("once")
    assert counters["acked"] == 1 and counters["retried"] == 1 and redis_client.llen(QueueKeys("smq", "once").dead) == 0


def test_a_rejected_message_is_counted_as_rejected(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """A handler's Reject adds one to the queue's "rejected" counter."""
    a = supervise({"rej": {"handler": "tests.support.handlers:reject"}}, **HB)
    procs.wait_registered(a, 1, redis_client, "rej")
    with Producer(redis_url) as p:
        p.publish("rej", "rej")
    wait_for(lambda: redis_client.llen(QueueKeys("smq", "rej").dead) == 1, timeout_s=5)
    counters = Broker(redis_url).statistics.counters("rej")
    assert counters["dead_lettered"] == 1
    assert counters.get("rejected") == 1
