"""sentinel:// urls: smqsup finds the master through a real Redis Sentinel."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from smqsup.broker import Broker
from smqsup.producer import Producer
from smqsup.redis_server import RedisServer, find_redis_server, free_port
from tests.helpers import wait_for


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[str]:
    """A master on a free port and one Sentinel monitoring it as 'mymaster'; yields the sentinel:// url."""
    master = RedisServer(tmp_path / "master", port=free_port())
    master.start()
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {master.port} 1\n")
    with open(tmp_path / "sentinel.log", "w") as log:
        proc = subprocess.Popen([find_redis_server(), str(conf), "--sentinel"], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL)
    try:
        probe = redis.Redis(port=port, socket_timeout=1)

        def knows_master() -> bool:
            try:
                return probe.sentinel_get_master_addr_by_name("mymaster") is not None
            except redis.RedisError:
                return False

        wait_for(knows_master, message="sentinel did not start")
        yield f"sentinel://127.0.0.1:{port}/mymaster"
    finally:
        proc.terminate()
        proc.wait(10)
        master.stop()


def test_publish_and_consume_through_sentinel(sentinel: str) -> None:
    """A sentinel:// url reaches the master for publishing, fetching and acking."""
    with Producer(sentinel) as p:
        mid = p.publish("q", {"via": "sentinel"})
    broker = Broker(sentinel)
    frame, _ = broker.fetch("q", "c1", 1)
    assert frame is not None and mid.encode() in frame
    assert broker.ack("q", "c1", frame, False).acked
    assert broker.sizes("q") == {"pending": 0, "scheduled": 0, "delayed": 0, "dead": 0}
    assert broker.counters("q")["published"] == 1


def test_bad_sentinel_url_names_the_key() -> None:
    """A sentinel url without a service name is a one-line config error."""
    from smqsup.errors import ConfigError

    with pytest.raises(ConfigError, match="redis.url: sentinel url needs a service name"):
        Broker("sentinel://127.0.0.1:26379")
