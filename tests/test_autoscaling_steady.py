"""Autoscaling under a steady load, with a real supervisor: two minutes at
half of what 4 consumers handle move the count by one step at most (a file
of its own: it is the suite's longest test, and runs beside the others)."""

from __future__ import annotations

import collections
import time

import pytest

from smqsup.client.producer import Producer
from tests.helpers import wait_for
from tests.procs import NotifySocket
from tests.test_autoscaling_processes import Supervise, _count, _each_once, _queue


@pytest.mark.timeout(200)
def test_a_steady_load_at_half_of_4_consumers_holds_within_one_step_for_2_minutes(
        supervise: Supervise, notify: NotifySocket, redis_url: str) -> None:
    """100 messages/s of 20 ms (half of what 4 consumers handle): after warming up, the count moves at most one step."""
    sup = supervise(_queue(1, 8), notify)
    notify.wait("READY=1")
    counts: list[int] = []
    published: list[str] = []
    with Producer(redis_url) as p:
        start = time.monotonic()
        while time.monotonic() - start < 135:
            tick = time.monotonic()
            published += p.publish_many("q", [{"sleep": 0.02} for _ in range(10)])
            if tick - start >= 15:  # warmed up: from 1 consumer to what the load needs
                counts.append(_count(sup))
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))  # the load's pace, not a synchronisation
    assert max(counts) - min(counts) <= 1, collections.Counter(counts)
    assert min(counts) >= 2
    wait_for(lambda: len(sup.events("done")) >= len(published), timeout_s=30)
    _each_once([sup], published)
