"""The master serving a queue is SIGKILLed mid-run and its replica promoted: producers and
consumers follow the new master on their own; with redis.wait_replicas 1 nothing
acknowledged is lost, and with 0 the loss is measured (tests/support/failover_run.py). The same
with a replica made to lag (SIGSTOPped): with 0 acknowledged messages are lost, with 1
none is acknowledged while it lags (tests/support/lagging_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import lagging_run
from tests.support.failover_run import (
    CONCURRENCY,
    CONSUMERS,
    ClusterSide,
    FailoverResult,
    SentinelSide,
    report,
    run_failover,
)
from tests.support.topology import SentinelTopology


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
    # hand, taken by a blocking fetch not yet replicated. A consumer whose WAIT fell short
    # (the replica over wait_timeout behind, on a starved machine) said so and stopped
    # waiting for 10 s, by design: then its acks of those seconds may be repeated too.
    if r.settle_shortfalls_before_kill == 0:
        assert r.duplicates <= CONSUMERS * CONCURRENCY, summary


@pytest.mark.timeout(120)
@pytest.mark.parametrize("wait_replicas", [1, 0])
@pytest.mark.parametrize("where", ["cluster", "sentinel"])
def test_a_master_killed_mid_run_is_followed_and_with_wait_replicas_nothing_acknowledged_is_lost(
        where: str, wait_replicas: int, request: pytest.FixtureRequest, tmp_path: Path, results: Path) -> None:
    """The queue's master SIGKILLed and its replica promoted (a cluster's, or by 3 Sentinels): producer and
    consumers recover by themselves; with wait_replicas 1 every acknowledged message is handled and
    duplicates are at most the 4 in flight; with 0 the acknowledged messages lost are counted."""
    if where == "cluster":
        side: ClusterSide | SentinelSide = ClusterSide(request.getfixturevalue("fresh_cluster"))
    else:
        side = SentinelSide(request.getfixturevalue("fresh_sentinel_group"))
    r = run_failover(side, tmp_path, wait_replicas=wait_replicas)
    report(r, results)
    _recovered(r)
    if wait_replicas:
        _nothing_lost(r)


@pytest.mark.timeout(60)
def test_lagging_replica_with_wait_replicas_loses_nothing_acknowledged(
        fresh_sentinel_group: SentinelTopology, results: Path) -> None:
    """Sentinel, replica lagging (SIGSTOPped) when the master dies, wait_replicas 1: nothing acknowledged is lost."""
    r = lagging_run.run_lagging(fresh_sentinel_group, wait_replicas=1)
    lagging_run.report(r, results)
    # Every publish to the stopped replica raised PublishNotReplicated, and the failover
    # lost some of those; the publishes before, to the running replica, were acknowledged
    # and are all there.
    assert r.not_replicated > 0 and r.acknowledged == r.acknowledged_before_stop > 0, r.line()
    assert r.not_replicated_kept < r.not_replicated, r.line()
    assert r.lost == 0, r.line()


@pytest.mark.timeout(60)
def test_lagging_replica_without_wait_replicas_loses_acknowledged_messages(
        fresh_sentinel_group: SentinelTopology, results: Path) -> None:
    """Sentinel, replica lagging (SIGSTOPped) when the master dies, wait_replicas 0: acknowledged messages are lost, counted."""
    r = lagging_run.run_lagging(fresh_sentinel_group, wait_replicas=0)
    lagging_run.report(r, results)
    assert r.acknowledged == r.published and r.lost > 0, r.line()
