"""A pipelined batch on a Redis Cluster whose master cannot be reached: nothing of it
was sent there, and the caller is told so (cluster.send)."""

from __future__ import annotations

import pytest

from smqsup.client.producer import Producer
from smqsup.errors import PublishNotSent
from smqsup.keys import QueueKeys, queues_set
from tests.support.topology import ClusterTopology


def _queue_apart(cluster: ClusterTopology) -> str:
    """A queue whose keys live on another master than the queue registry."""
    registry = cluster.master_for_key(queues_set("smq"))
    return next(name for name in (f"q{i}" for i in range(100))
                if cluster.master_for_key(QueueKeys("smq", name).pending) != registry)


@pytest.mark.timeout(60)
def test_publish_batches_to_a_killed_master_raise_publish_not_sent(fresh_cluster: ClusterTopology) -> None:
    """Just after the queue's master is SIGKILLed (no failover yet), a batch sent only there
    and a first publish (its registry entry on a live master) both raise PublishNotSent."""
    queue = _queue_apart(fresh_cluster)
    with Producer(fresh_cluster.url, stats=False) as registered, Producer(fresh_cluster.url) as first:
        registered.publish(queue, "before")
        # (Read now: the count, cached, is then not what the dead master fails to answer below.)
        assert first._broker.queues.partitions(queue) == 1
        fresh_cluster.kill(fresh_cluster.master_for_key(QueueKeys("smq", queue).pending))
        # Over one script call's worth of messages: a pipelined batch, every command for the dead master.
        with pytest.raises(PublishNotSent):
            registered.publish_many(queue, list(range(1001)))
        # The first publish of this producer adds the queue to the registry, on a live master.
        with pytest.raises(PublishNotSent):
            first.publish_many(queue, [1, 2])
