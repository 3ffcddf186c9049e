"""Tracked messages and lifecycle events under a real supervisor: a consumer
SIGKILLed mid-message and the result (and events) the redelivery gives; the
queue options from queues.yaml."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from smqsup import MessageFailed
from smqsup.client.producer import Producer
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

pytestmark = pytest.mark.topologies


def test_after_a_sigkill_mid_message_the_result_is_the_redeliverys(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """The child running a tracked message is SIGKILLed: result() waits through the reclaim and returns
    what the second attempt (another process) returned; the state said active, then done."""
    supervise({"q": {"handler": "tests.support.handlers:answer", "consumers": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"hang": True}, result_ttl=60)
        [start] = wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "start"])
        wait_for(lambda: p.state("q", mid) == "active")
        os.kill(start["pid"], signal.SIGKILL)
        got = p.result("q", mid, timeout=20)
        assert got["attempts"] == 1 and got["pid"] != start["pid"]
        assert p.state("q", mid) == "done"


def test_result_ttl_in_queues_yaml_tracks_every_publish(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str) -> None:
    """``result_ttl: 1m`` on a queue: a plain publish from any producer is tracked; a Reject raises MessageFailed."""
    supervise({"q": {"handler": "tests.support.handlers:answer", "result_ttl": "1m"},
               "r": {"handler": "tests.support.handlers:reject", "result_ttl": "1m"}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        wait_for(lambda: p._broker.queues.result_ttl("q") == 60 and p._broker.queues.result_ttl("r") == 60)
        mid = p.publish("q", "hello")
        assert p.result("q", mid, timeout=20)["body"] == "hello"
        rid = p.publish("r", "x")
        with pytest.raises(MessageFailed) as failed:
            p.result("r", rid, timeout=20)
        assert failed.value.reason.startswith("rejected")


def test_cancel_of_a_running_message_at_concurrency_1_replaces_the_child(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """One consumer runs a 30 s message: cancel stops it within seconds (the child replaced), it is dead-lettered
    "cancelled", and the message queued behind it is handled by the new child."""
    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        long_id = p.publish("q", {"sleep": 30}, result_ttl=60)
        [start] = wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "start"])
        next_id = p.publish("q", {"sleep": 0}, result_ttl=60)
        assert p.cancel("q", long_id) == "stopping"
        with pytest.raises(MessageFailed) as failed:
            p.result("q", long_id, timeout=15)
        assert failed.value.reason == "cancelled"
        assert p.result("q", next_id, timeout=15) is None
    done = [e for e in read_events(str(out_dir)) if e["event"] == "done"]
    assert [e["id"] for e in done] == [next_id] and done[0]["pid"] != start["pid"]
    assert f"message {long_id} was cancelled while consumer #" in sup.log()


def test_cancel_at_concurrency_10_stops_only_that_task(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """Ten tasks of one async consumer: the supervisor's SIGUSR2 makes it cancel one task; the process and the
    other nine go on and end done."""
    supervise({"q": {"handler": "tests.support.handlers:pause_async", "consumers": 1, "concurrency": 10}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        ids = [p.publish("q", {"sleep": 3}, result_ttl=60) for _ in range(10)]
        wait_for(lambda: len([e for e in read_events(str(out_dir)) if e["event"] == "start"]) == 10)
        assert p.cancel("q", ids[0]) == "stopping"
        with pytest.raises(MessageFailed) as failed:
            p.result("q", ids[0], timeout=10)
        assert failed.value.reason == "cancelled"
        assert [p.state("q", mid) for mid in ids[1:]] != ["done"] * 9  # (cancelled before the others ended)
        for mid in ids[1:]:
            assert p.result("q", mid, timeout=15) is None
    events = read_events(str(out_dir))
    assert len({e["pid"] for e in events}) == 1 and {e["id"] for e in events if e["event"] == "done"} == set(ids[1:])


def test_events_in_queues_yaml_show_a_sigkilled_message_reclaimed_and_redone(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """``events: true``: a plain publish's child is SIGKILLed mid-message; its events read published, started,
    reclaimed (an attempt charged), started, done, written by the publish, take, reclaim and ack scripts."""
    supervise({"q": {"handler": "tests.support.handlers:answer", "consumers": 1, "events": True}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        queues = p._broker.queues
        wait_for(lambda: queues.partitions("q", fresh=True) and queues.declared("q")[1].events_max == 10_000)
        mid = p.publish("q", {"hang": True})
        [start] = wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "start"])
        os.kill(start["pid"], signal.SIGKILL)
        wait_for(lambda: [e.event for e in p.events("q")][-1:] == ["done"], timeout_s=20)
        events = list(p.events("q"))
    assert [(e.event, e.attempts) for e in events] == [
        ("published", 0), ("started", 0), ("reclaimed", 1), ("started", 1), ("done", 1)]
    assert {e.message_id for e in events} == {mid}


def test_a_cancel_is_found_between_heartbeats(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """heartbeat_interval 8s: a cancel of a running message still stops it long before the next heartbeat, as
    the supervisor looks for new cancels every 0.2 s and beats at once on one (else this times out)."""
    supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 1}}, notify,
              heartbeat_interval="8s", heartbeat_timeout="60s")
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"sleep": 30}, result_ttl=60)
        wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "start"])
        wait_for(lambda: p.state("q", mid) == "active")
        assert p.cancel("q", mid) == "stopping"
        with pytest.raises(MessageFailed) as failed:
            p.result("q", mid, timeout=4)
        assert failed.value.reason == "cancelled"
