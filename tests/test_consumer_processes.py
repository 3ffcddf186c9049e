"""Consumers as real processes (``smqsup consume``), killed and disturbed for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup import message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import client_for, wait_for

pytestmark = pytest.mark.topologies

K = QueueKeys("smq", "q")


@pytest.fixture
def consumers(tmp_path: Path, out_dir: Path) -> Iterator[list["subprocess.Popen[str]"]]:
    """Processes started by a test; SIGKILLed (by pid) at teardown, all at once: the test is over, and
    a graceful stop would wait out each one's blocking fetch."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
    for p in started:
        p.wait()


def _consume(consumers: list[Any], cfg: Path, out_dir: Path, queue: str = "q") -> "subprocess.Popen[str]":
    p = procs.smqsup("consume", "-c", str(cfg), queue, out_dir=out_dir, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    consumers.append(p)
    return p


def _consumer_of(client: "redis.Redis", pid: int) -> str:
    """The registered consumer id of process ``pid``."""
    def find() -> str:
        for cid, info in client.hgetall(K.consumers).items():
            if json.loads(info)["pid"] == pid:
                return str(cid.decode())
        return ""
    return wait_for(find, message=f"process {pid} never registered")


def test_ten_thousand_messages_over_four_processes_each_handled_once(
        tmp_path: Path, out_dir: Path, redis_url: str, redis_client: "redis.Redis",
        consumers: list[Any]) -> None:
    """10,000 messages, 4 consumer processes: every id handled exactly once, nothing left."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:record"}})
    for _ in range(4):
        _consume(consumers, cfg, out_dir)
    wait_for(lambda: redis_client.hlen(K.consumers) == 4, message="4 consumers did not register")
    with Producer(redis_url) as p:
        ids = p.publish_many("q", range(10_000))
    wait_for(lambda: sum(1 for e in read_events(str(out_dir))) >= 10_000, timeout_s=60,
             message="not all messages handled")
    events = read_events(str(out_dir))
    counts = Counter(e["id"] for e in events)
    assert set(counts) == set(ids)
    assert max(counts.values()) == 1
    assert len({e["pid"] for e in events}) == 4, "all four processes took part"
    assert redis_client.llen(K.pending) == 0
    for cid in redis_client.hkeys(K.consumers):
        assert redis_client.llen(K.processing(cid.decode())) == 0


def test_sigkill_mid_message_leaves_it_in_the_processing_list_and_reclaim_returns_it(
        tmp_path: Path, out_dir: Path, redis_url: str, redis_client: "redis.Redis",
        consumers: list[Any]) -> None:
    """A consumer SIGKILLed in its handler holds the message in its own list; reclaim returns it, costing one attempt."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:slow"}})
    victim = _consume(consumers, cfg, out_dir)
    cid = _consumer_of(redis_client, victim.pid)
    with Producer(redis_url) as p:
        mid = p.publish("q", {"sleep": 30})
    wait_for(lambda: any(e["event"] == "start" for e in read_events(str(out_dir))))
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    [held] = redis_client.lrange(K.processing(cid), 0, -1)
    assert message.decode(held).id == mid and redis_client.llen(K.pending) == 0

    r = Broker(redis_url).registry.reclaim_dead("q", cid, retry_threshold=3, reason="killed by signal 9")
    assert (r.requeued, r.dead_lettered) == (1, 0)
    assert redis_client.llen(K.processing(cid)) == 0
    # A new consumer finishes it, as its second attempt.
    procs.write_config(cfg, redis_url, {"q": {"handler": "tests.support.handlers:record"}})
    _consume(consumers, cfg, out_dir)
    done = wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "done"])
    assert [(e["id"], e["attempts"]) for e in done] == [(mid, 1)]


def test_redis_killed_and_restarted_under_a_running_consumer(
        tmp_path: Path, out_dir: Path, redis_server: RedisServer, redis_url: str, consumers: list[Any]) -> None:
    """redis-server SIGKILLed and restarted from its AOF: the consumer reconnects and nothing is lost."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:slow"}})
    _consume(consumers, cfg, out_dir)
    client = client_for(redis_url)
    wait_for(lambda: client.hlen(K.consumers) == 1)
    with Producer(redis_url) as p:
        first = p.publish_many("q", [{"sleep": 0.002}] * 300)
    wait_for(lambda: len(read_events(str(out_dir))) >= 100)
    redis_server.kill()
    redis_server.start()
    with Producer(redis_url) as p:
        second = p.publish_many("q", [{"sleep": 0}] * 300)
    done = lambda: {e["id"] for e in read_events(str(out_dir)) if e["event"] == "done"}  # noqa: E731
    wait_for(lambda: done() >= set(first) | set(second), timeout_s=30, message="messages lost after restart")
    client = client_for(redis_url)
    wait_for(lambda: client.llen(K.pending) == 0)
    assert sum(client.llen(K.processing(c.decode())) for c in client.hkeys(K.consumers)) == 0
    assert client.llen(K.dead) == 0


def test_sigterm_lets_the_message_in_hand_finish(
        tmp_path: Path, out_dir: Path, redis_url: str, redis_client: "redis.Redis",
        consumers: list[Any]) -> None:
    """SIGTERM during a handler: it finishes and acks, the rest stays pending, exit 0."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:slow"}})
    proc = _consume(consumers, cfg, out_dir)
    with Producer(redis_url) as p:
        ids = p.publish_many("q", [{"sleep": 1}, {"sleep": 0}])
    wait_for(lambda: read_events(str(out_dir)))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert [(e["event"], e["id"]) for e in read_events(str(out_dir))] == [("start", ids[0]), ("done", ids[0])]
    [left] = redis_client.lrange(K.pending, 0, -1)
    assert message.decode(left).id == ids[1]
    assert redis_client.hlen(K.consumers) == 0
