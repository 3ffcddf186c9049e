"""Nothing is lost while consumers, the supervisor and Redis are killed at random."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from smqsup.launch.process import RedisServer
from tests.support.chaos import POISON, POISON_THRESHOLD, report, run_chaos


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


@pytest.mark.timeout(300)
def test_chaos_with_poison_dead_letters_every_poison_and_handles_every_good_message(
        redis_server: RedisServer, tmp_path: Path) -> None:
    """The same chaos with 1 % raising, 0.5 % process-ending and 0.5 % hanging messages:
    poison is dead-lettered after retry_threshold + 1 deliveries, good messages all handled, in bounded time."""
    r = run_chaos(redis_server, tmp_path, messages=3000, rate=250, batch=50, supervisor_every_s=5.0,
                  redis_every_s=6.0, deadline_s=240, rng=random.Random(11), poison=POISON)
    summary = report(r)
    assert r.poison["raise"] and r.poison["exit"] and r.poison["hang"], summary
    assert r.redis_kills >= 1 and r.supervisor_kills >= 1 and r.consumer_kills >= 10, summary
    assert not r.lost, (summary, r.lost[:5], r.events[-5:])
    assert r.poison_dead == sum(r.poison.values()), summary
    # Every delivery of a poison message cost an attempt: none was delivered
    # more than retry_threshold + 1 times (a delivery killed before the
    # handler recorded it shows as one fewer).
    assert max(r.poison_deliveries) <= POISON_THRESHOLD + 1, summary
    assert r.duplicates <= r.kills, summary
    assert r.seconds <= r.time_bound_s, summary
