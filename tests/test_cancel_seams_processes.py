"""A cancel under a real supervisor, where it meets a handler that ends by
itself first (raising, or returning on a thread) and a stop that hands the
message back: each ends "cancelled", never runs again, and the log says
what happened."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from smqsup import MessageFailed, deadletter
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.helpers import wait_for

K = QueueKeys("smq", "q")


def _ends_cancelled(sup: procs.Supervisor, p: Producer, out_dir: Path, then: str, rounds: int) -> None:
    """``rounds`` times: a message starts, cancel() answers "stopping", then its handler is let end
    (``then``: "raise" or "return") at once; each ends "cancelled" with one start only."""
    for _ in range(rounds):
        mid = p.publish("q", {"then": then}, result_ttl=60)
        wait_for(lambda mid=mid: [e for e in sup.events("start") if e["id"] == mid])
        assert p.cancel("q", mid) == "stopping"
        (out_dir / f"go-{mid}").touch()
        with pytest.raises(MessageFailed) as failed:
            p.result("q", mid, timeout=15)
        assert failed.value.reason == "cancelled"
    last = p.publish("q", {"then": "return"}, result_ttl=60)
    (out_dir / f"go-{last}").touch()
    assert p.result("q", last, timeout=15) is None
    starts = [e["id"] for e in sup.events("start")]
    assert len(starts) == len(set(starts)) == rounds + 1


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_handler_raising_just_after_its_cancel_is_not_retried(
        supervise: Callable[..., procs.Supervisor], out_dir: Path, redis_url: str, concurrency: int) -> None:
    """cancel() answers "stopping", then the handler raises within milliseconds (before the supervisor's
    look): five times out of five the message is dead-lettered "cancelled" and never runs again."""
    sup = supervise({"q": {"handler": "tests.support.handlers:when_told", "consumers": 1, "concurrency": concurrency,
                           "retry_delay": "0s"}})
    with Producer(redis_url) as p:
        _ends_cancelled(sup, p, out_dir, "raise", 5)


def test_a_thread_returning_just_after_its_cancel_is_not_acked_done(
        supervise: Callable[..., procs.Supervisor], out_dir: Path, redis_url: str) -> None:
    """A sync handler on a thread returns a few milliseconds after cancel() answered "stopping": dead-lettered
    "cancelled", as the README says, never "done"."""
    sup = supervise({"q": {"handler": "tests.support.handlers:when_told", "consumers": 1, "concurrency": 2}})
    with Producer(redis_url) as p:
        _ends_cancelled(sup, p, out_dir, "return", 5)


def test_a_cancelled_message_handed_back_at_a_stop_never_runs(
        supervise: Callable[..., procs.Supervisor], out_dir: Path, redis_url: str,
        redis_client: redis.Redis) -> None:
    """Prefetch 2: one message runs past shutdown_timeout, the one prefetched behind it is cancelled
    ("stopping"); SIGTERM: the consumer is killed at the deadline and its list goes back free; the cancelled
    one is dead-lettered "cancelled" (attempts 0), the running one is back in pending, free."""
    sup = supervise({"q": {"handler": "tests.support.handlers:when_told", "consumers": 1, "prefetch": 2}},
                    shutdown_timeout="1s")
    with Producer(redis_url) as p:
        running, behind = p.publish_many("q", [{"then": "return"}] * 2, result_ttl=60)
        wait_for(lambda: sup.events("start") and p.state("q", behind) == "active")
        assert p.cancel("q", behind) == "stopping"
        sup.signal(signal.SIGTERM)
        assert sup.proc.wait(20) == 0
        assert p.state("q", behind) == "cancelled" and p.state("q", running) == "waiting"
    [letter] = [deadletter.DeadLetter(raw) for raw in redis_client.lrange(K.dead, 0, -1)]
    msg = letter.message()
    assert msg is not None and msg.id == behind and letter.reason == "cancelled" and msg.attempts == 0
    assert redis_client.llen(K.pending) == 1 and redis_client.zcard(K.cancel) == 0
    assert [e["id"] for e in sup.events("start")] == [running]


def test_the_log_of_a_cancel_kill_says_it_was_a_cancel(
        supervise: Callable[..., procs.Supervisor], out_dir: Path, redis_url: str) -> None:
    """Concurrency 1: the child running a cancelled message is replaced; the log says the message was
    cancelled and dead-lettered, never "out of memory" or "back in pending"."""
    sup = supervise({"q": {"handler": "tests.support.handlers:when_told", "consumers": 1}})
    with Producer(redis_url) as p:
        mid = p.publish("q", {"then": "return"}, result_ttl=60)
        wait_for(lambda: sup.events("start") and p.state("q", mid) == "active")
        assert p.cancel("q", mid) == "stopping"
        with pytest.raises(MessageFailed) as failed:
            p.result("q", mid, timeout=15)
        assert failed.value.reason == "cancelled"
        wait_for(lambda: "replaced to stop a cancelled message" in sup.log())
    log = sup.log()
    assert "out of memory" not in log and "back in pending" not in log
    assert 'the message is dead-lettered "cancelled"' in log
