"""The master serving a queue is SIGKILLed mid-run and its replica promoted: producers and
consumers follow the new master on their own; with redis.wait_replicas 1 nothing
acknowledged is lost, and with 0 the loss is measured (tests/failover_run.py). The same
with a replica made to lag (SIGSTOPped): with 0 acknowledged messages are lost, with 1
none is acknowledged while it lags (tests/lagging_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import lagging_run
from tests.failover_run import CONCURRENCY, CONSUMERS, ClusterSide, FailoverResult, SentinelSide, report, run_failover
from tests.topology import ClusterTopology, SentinelTopology


@pytest.fixture
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The JSON-lines file every run of this module appends its figures to."""
    return tmp_path_factory.getbasetemp() / "failover-results.jsonl"


def _recovered(r: FailoverResult) -> None:
    """What every run must show: every message published in the end (the producer
    followed the new master), the queue drained by the consumers that were there from
    the start (they followed it too, none was replaced), work done on the new master."""
    summary = r.line()
    assert r.acknowledged == r.messages, summary
    assert r.consumers_replaced == 0, summary
    assert r.kill_to_first_handled_s > 0 and r.kill_to_first_published_s > 0, summary


def _nothing_lost(r: FailoverResult) -> None:
    summary = r.line()
    assert r.lost == 0, (summary, r.lost_sample)
    # Each ack is waited for, and the WAIT covers the take that ack.lua made with it, so
    # the only handling a failover can repeat is that of the message each consumer had in
    # hand, taken by a blocking fetch not yet replicated (a consumer whose WAIT falls
    # short goes on, so this holds while the replica keeps up within wait_timeout).
    assert r.duplicates <= CONSUMERS * CONCURRENCY, summary


@pytest.mark.timeout(120)
def test_cluster_failover_with_wait_replicas_loses_nothing_acknowledged(
        fresh_cluster: ClusterTopology, tmp_path: Path, results: Path) -> None:
    """Cluster, wait_replicas 1: every acknowledged message is handled; duplicates at most the 4 in flight."""
    r = run_failover(ClusterSide(fresh_cluster), tmp_path, wait_replicas=1)
    report(r, results)
    _recovered(r)
    _nothing_lost(r)


@pytest.mark.timeout(120)
def test_cluster_failover_without_wait_replicas_counts_the_loss(
        fresh_cluster: ClusterTopology, tmp_path: Path, results: Path) -> None:
    """Cluster, wait_replicas 0: producer and consumers recover; acknowledged messages lost are counted."""
    r = run_failover(ClusterSide(fresh_cluster), tmp_path, wait_replicas=0)
    report(r, results)
    _recovered(r)


@pytest.mark.timeout(120)
def test_sentinel_failover_with_wait_replicas_loses_nothing_acknowledged(
        sentinel_group: SentinelTopology, tmp_path: Path, results: Path) -> None:
    """Sentinel, wait_replicas 1: every acknowledged message is handled; duplicates at most the 4 in flight."""
    r = run_failover(SentinelSide(sentinel_group), tmp_path, wait_replicas=1)
    report(r, results)
    _recovered(r)
    _nothing_lost(r)


@pytest.mark.timeout(120)
def test_sentinel_failover_without_wait_replicas_counts_the_loss(
        sentinel_group: SentinelTopology, tmp_path: Path, results: Path) -> None:
    """Sentinel, wait_replicas 0: producer and consumers recover; acknowledged messages lost are counted."""
    r = run_failover(SentinelSide(sentinel_group), tmp_path, wait_replicas=0)
    report(r, results)
    _recovered(r)


@pytest.mark.timeout(60)
def test_lagging_replica_with_wait_replicas_loses_nothing_acknowledged(
        sentinel_group: SentinelTopology, results: Path) -> None:
    """Sentinel, replica lagging (SIGSTOPped) when the master dies, wait_replicas 1: nothing acknowledged is lost."""
    r = lagging_run.run_lagging(sentinel_group, wait_replicas=1)
    lagging_run.report(r, results)
    # Every publish to the stopped replica raised PublishNotReplicated, and the failover
    # lost some of those; the publishes before, to the running replica, were acknowledged
    # and are all there.
    assert r.not_replicated > 0 and r.acknowledged == r.acknowledged_before_stop > 0, r.line()
    assert r.not_replicated_kept < r.not_replicated, r.line()
    assert r.lost == 0, r.line()


@pytest.mark.timeout(60)
def test_lagging_replica_without_wait_replicas_loses_acknowledged_messages(
        sentinel_group: SentinelTopology, results: Path) -> None:
    """Sentinel, replica lagging (SIGSTOPped) when the master dies, wait_replicas 0: acknowledged messages are lost, counted."""
    r = lagging_run.run_lagging(sentinel_group, wait_replicas=0)
    lagging_run.report(r, results)
    assert r.acknowledged == r.published and r.lost > 0, r.line()
