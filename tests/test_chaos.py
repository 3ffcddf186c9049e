"""Nothing is lost while consumers, the supervisor and Redis are killed at random."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from smqsup.redis_server import RedisServer
from tests.chaos import report, run_chaos


@pytest.mark.timeout(240)
def test_chaos_loses_nothing_and_counts_every_duplicate(redis_server: RedisServer, tmp_path: Path) -> None:
    """5,000 messages; consumers SIGKILLed every 200 ms, the supervisor and redis-server killed and restarted."""
    r = run_chaos(redis_server, tmp_path, messages=5000, rate=250, batch=50, supervisor_every_s=4.0,
                  redis_every_s=5.0, deadline_s=180, rng=random.Random(7))
    summary = report(r)
    assert r.redis_kills >= 1 and r.supervisor_kills >= 1 and r.consumer_kills >= 10, summary
    assert not r.lost, (summary, r.lost[:5], r.events[-5:])
    assert r.handled_ids + r.dead >= r.published, summary
    # Each kill can duplicate at most the message(s) in flight at that moment.
    assert r.duplicates <= r.kills, summary
