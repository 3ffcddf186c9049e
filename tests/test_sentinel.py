"""sentinel:// urls: smqsup finds the master through a real Redis Sentinel."""

from __future__ import annotations

import pytest

from smqsup.client.producer import Producer
from smqsup.store.broker import Broker
from tests.support.topology import SentinelTopology


def test_publish_and_consume_through_sentinel(sentinel_group: SentinelTopology) -> None:
    """A sentinel:// url naming 3 sentinels reaches the master for publishing, fetching and acking."""
    with Producer(sentinel_group.url) as p:
        mid = p.publish("q", {"via": "sentinel"})
    assert sentinel_group.client(sentinel_group.master).dbsize() > 0  # on the master they name
    broker = Broker(sentinel_group.url)
    frame, _ = broker.messages.fetch("q", "c1", 1)
    assert frame is not None and mid.encode() in frame
    assert broker.messages.ack("q", "c1", frame, False).acked
    assert broker.statistics.sizes("q") == {"pending": 0, "scheduled": 0, "delayed": 0, "dead": 0}
    assert broker.statistics.counters("q")["published"] == 1


def test_bad_sentinel_url_names_the_key() -> None:
    """A sentinel url without a service name is a one-line config error."""
    from smqsup.errors import ConfigError

    with pytest.raises(ConfigError, match="redis.url: sentinel url needs a service name"):
        Broker("sentinel://127.0.0.1:26379")
