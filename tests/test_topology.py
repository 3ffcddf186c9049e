"""The Redis Cluster and Sentinel fixtures are the topologies they claim to be, and fail over."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from tests.support.topology import MASTERS, SLOTS, ClusterTopology, SentinelTopology


@contextmanager
def cluster_client(url: str) -> Iterator[RedisCluster]:
    """redis-py's own cluster client, seeded with the nodes a redis+cluster:// url names."""
    hosts = url.removeprefix("redis+cluster://").rstrip("/").split(",")
    seeds = [ClusterNode(host, int(port)) for host, port in (h.rsplit(":", 1) for h in hosts)]
    client = RedisCluster(startup_nodes=seeds, socket_timeout=2, socket_connect_timeout=2)
    try:
        yield client
    finally:
        client.close()


def replica_reads(cluster: ClusterTopology, key: str) -> bytes | None:
    """GET ``key`` on the replica of the master serving it (READONLY, so the replica answers)."""
    replica = cluster.client(cluster.replica_of(cluster.master_for_key(key)))
    replica.execute_command("READONLY")
    try:
        return replica.get(key)
    finally:
        replica.execute_command("READWRITE")


@pytest.mark.timeout(60)
def test_cluster_has_three_masters_each_with_a_replica(redis_cluster: ClusterTopology) -> None:
    """3 masters share all 16384 slots, each has a linked replica, and the url seeds the masters."""
    masters = redis_cluster.masters()
    assert len(masters) == MASTERS
    assert {f"127.0.0.1:{m.port}" for m in masters} == set(
        redis_cluster.url.removeprefix("redis+cluster://").rstrip("/").split(","))
    slots = redis_cluster.client(masters[0]).execute_command("CLUSTER", "INFO")
    assert f"cluster_slots_ok:{SLOTS}".encode() in slots and b"cluster_state:ok" in slots
    for master in masters:
        replica = redis_cluster.replica_of(master)
        assert replica not in masters
        assert redis_cluster.client(master).info("replication")["connected_slaves"] == 1
        assert redis_cluster.client(replica).info("replication")["master_link_status"] == "up"


@pytest.mark.timeout(60)
def test_key_written_through_the_cluster_is_on_its_masters_replica(redis_cluster: ClusterTopology) -> None:
    """A key set through RedisCluster lands on the master master_for_key names, and WAIT 1
    then finds it on that master's replica."""
    with cluster_client(redis_cluster.url) as rc:
        for key in ("alpha", "beta", "gamma", "{tag}delta"):
            rc.set(key, key.upper())
            master = redis_cluster.master_for_key(key)
            assert rc.get_node_from_key(key).port == master.port
            # Single-threaded, the node's pool hands WAIT the connection the SET used.
            assert rc.execute_command("WAIT", 1, 5000, target_nodes=rc.get_node_from_key(key)) == 1
            assert redis_cluster.client(master).get(key) == key.upper().encode()
            assert replica_reads(redis_cluster, key) == key.upper().encode()


@pytest.mark.timeout(60)
def test_redis_cluster_fixture_is_flushed_between_tests(redis_cluster: ClusterTopology) -> None:
    """Each test starts on an empty cluster, replicas included (the previous test wrote keys)."""
    for master in redis_cluster.masters():
        assert redis_cluster.client(master).dbsize() == 0
        assert redis_cluster.client(redis_cluster.replica_of(master)).dbsize() == 0


@pytest.mark.timeout(60)
def test_a_test_may_kill_a_node_of_the_shared_cluster(redis_cluster: ClusterTopology) -> None:
    """Killing a node of the shared cluster marks it broken (the next test checks it gets a whole one)."""
    redis_cluster.kill(redis_cluster.replica_of(redis_cluster.masters()[0]))
    assert not redis_cluster.intact()


@pytest.mark.timeout(60)
def test_the_next_test_gets_a_whole_cluster(redis_cluster: ClusterTopology) -> None:
    """After a test killed a node of the module's cluster, the next test gets a new, whole one."""
    assert redis_cluster.intact() and all(node.running() for node in redis_cluster.nodes)
    assert all(redis_cluster.replica_of(master).running() for master in redis_cluster.masters())


@pytest.mark.timeout(60)
def test_killed_master_is_replaced_by_its_replica_and_keeps_its_keys(fresh_cluster: ClusterTopology) -> None:
    """After SIGKILL of a master its replica serves its slots, and every key written before
    (each master WAITed for its replica) is still readable through RedisCluster; started
    again, the old master rejoins as the new one's replica."""
    keys = {f"key:{i}": str(i).encode() for i in range(300)}
    with cluster_client(fresh_cluster.url) as rc:
        for key, value in keys.items():
            rc.set(key, value)
        for node in rc.get_primaries():
            assert rc.execute_command("WAIT", 1, 5000, target_nodes=node) == 1
    victim = fresh_cluster.masters()[0]  # the url's first seed
    assert fresh_cluster.url.startswith(f"redis+cluster://127.0.0.1:{victim.port},")
    held = [k for k in keys if fresh_cluster.master_for_key(k) == victim]
    heir = fresh_cluster.replica_of(victim)
    assert held and heir.running()

    fresh_cluster.kill(victim)
    assert fresh_cluster.wait_failover(victim) == heir

    assert heir in fresh_cluster.masters() and victim not in fresh_cluster.masters()
    assert all(fresh_cluster.master_for_key(k) == heir for k in held)
    # A new client: the url's first seed is the dead master, the others answer for it.
    with cluster_client(fresh_cluster.url) as rc:
        assert rc.mget_nonatomic(list(keys)) == list(keys.values())
        rc.set(held[0], b"after")
        assert fresh_cluster.client(heir).get(held[0]) == b"after"

    fresh_cluster.restart(victim)
    assert fresh_cluster.replica_of(heir) == victim and fresh_cluster.role(victim) == "slave"
    assert replica_reads(fresh_cluster, held[0]) == b"after"


@pytest.mark.timeout(60)
def test_sentinel_group_fails_over_and_clients_follow(fresh_sentinel_group: SentinelTopology) -> None:
    """After SIGKILL of the master all 3 sentinels name the replica, and a redis-py
    Sentinel client's master_for('mymaster') writes to it; started again, the old master
    replicates the new one."""
    hosts = [("127.0.0.1", s.port) for s in fresh_sentinel_group.sentinels]
    before = Sentinel(hosts, socket_timeout=2).master_for("mymaster", socket_timeout=2)
    before.set("k", b"before")
    assert before.execute_command("WAIT", 1, 5000) == 1
    before.close()

    fresh_sentinel_group.kill_master()
    fresh_sentinel_group.wait_failover()

    master = Sentinel(hosts, socket_timeout=2).master_for("mymaster", socket_timeout=2)
    assert master.get("k") == b"before"
    master.set("k", b"after")
    assert fresh_sentinel_group.client(fresh_sentinel_group.replica).get("k") == b"after"
    assert fresh_sentinel_group.client(fresh_sentinel_group.replica).execute_command("ROLE")[0] == b"master"
    master.close()

    fresh_sentinel_group.restart_master()
    assert fresh_sentinel_group.role(fresh_sentinel_group.master) == "slave"
    assert fresh_sentinel_group.client(fresh_sentinel_group.master).get("k") == b"after"
