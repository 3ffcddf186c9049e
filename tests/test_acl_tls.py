"""smqsup under a least-privilege Redis ACL user and over TLS, against real
private redis-server processes and the real ``smqsup`` command."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from smqsup import broker as broker_mod
from smqsup import keys
from smqsup.errors import RedisServerError
from smqsup.keys import QueueKeys
from smqsup.producer import Producer
from smqsup.redis_server import RedisServer, find_redis_server, free_port

#: The password of every test user: distinctive, so a leak is easy to grep.
PASSWORD = "Acl-Pa55word-7f3e"


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server on a loopback TCP port (and its unix socket for the default user)."""
    try:
        binary = find_redis_server()
    except RedisServerError as error:
        pytest.fail(str(error), pytrace=False)
    s = RedisServer(tmp_path_factory.mktemp("redis"), port=free_port(), appendfsync="always", binary=binary)
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """The default (all-powerful) user on the server's unix socket: sets users up, looks at keys."""
    client = redis.Redis.from_url(f"unix://{server.socket_path}")
    try:
        yield client
    finally:
        client.close()


def user_url(admin: redis.Redis, server: RedisServer, name: str, rules: str) -> str:
    """Create ACL user ``name`` with PASSWORD and ``rules``; return its redis:// url."""
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{PASSWORD}", *rules.split())
    return f"redis://{name}:{PASSWORD}@127.0.0.1:{server.port}/0"


# --- 1. every key under the namespace prefix ------------------------------------------


def test_every_key_starts_with_the_namespace_and_scripts_stay_single_slot() -> None:
    """Every key smqsup forms starts with 'ns:'; the producer keys share one hash tag."""
    k = QueueKeys("ns", "q")
    names = [getattr(k, p) for p in dir(QueueKeys) if isinstance(getattr(QueueKeys, p), property)]
    names += [k.processing("c1"), keys.queues_set("ns"), keys.producers_hash("ns"), keys.producers_seen("ns")]
    assert names and all(n.startswith("ns:") for n in names), names
    assert "{ns}" in keys.producers_hash("ns") and "{ns}" in keys.producers_seen("ns")


def test_producer_limited_to_the_namespace_pattern_publishes_and_closes_cleanly(
        server: RedisServer, admin: redis.Redis) -> None:
    """A user allowed only ~smq:* publishes, and close() flushes its statistics under smq:."""
    url = user_url(admin, server, "keysonly", "~smq:* resetchannels +@all")
    with Producer(url) as p:
        mid = p.publish("q", {"n": 1})
    assert admin.llen(QueueKeys("smq", "q").pending) == 1
    [stats] = admin.hvals("smq:{smq}:producers")
    assert b'"published":1' in stats, (mid, stats)


# --- 2. a statistic never turns a queued message into an error --------------------------


def test_statistics_refused_by_the_acl_never_fail_a_publish_and_are_warned_once(
        server: RedisServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A user who may write queue q but not the producer keys: publishes succeed, close() is quiet, one warning."""
    monkeypatch.setattr(broker_mod, "_warned", set(), raising=False)
    url = user_url(admin, server, "queueonly", "~smq:{q}:* ~smq:queues resetchannels +@all")
    caplog.set_level(logging.DEBUG, logger="smqsup")
    with Producer(url) as p:
        ids = [p.publish("q", {"n": 1}), *p.publish_many("q", [2, 3])]
    assert admin.llen(QueueKeys("smq", "q").pending) == 3, ids
    assert not admin.exists("smq:{smq}:producers")
    refused = [r for r in caplog.records if "refused the producer statistics" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.WARNING] + [logging.DEBUG] * (len(refused) - 1), refused
    assert len(refused) >= 2  # the flush in the first publish's round trip, and the one at close
