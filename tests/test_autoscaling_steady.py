"""Autoscaling under a steady load, with a real supervisor: at half of what
4 consumers handle, the count moves by one step at most over four
scale_down_after windows (a file of its own: it is one of the suite's
longest tests, and runs beside the others)."""

from __future__ import annotations

import collections
import time

import pytest

from smqsup.client.producer import Producer
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket
from tests.test_autoscaling_processes import Supervise, _count, _each_once, _queue

#: The queue's scale_down_after, s: the longest timing of the scaling rules
#: (a step up follows a look, every 0.5 s, and the 1 s cooldown), the span a
#: step down waits for, so the one a flap repeats at.
DOWN_AFTER_S = 5
#: From 1 consumer to what the load needs: a step up a cooldown (1 s) at
#: most, and a step past it back within DOWN_AFTER_S.
WARM_UP_S = 10
#: Four scale_down_after windows held at the load (the test once held 120 s
#: at the default 60 s, two windows: only a window's length paced a flap).
HOLD_S = 4 * DOWN_AFTER_S


@pytest.mark.timeout(120)
def test_a_steady_load_at_half_of_4_consumers_holds_within_one_step_for_four_scale_down_windows(
        supervise: Supervise, notify: NotifySocket, redis_url: str) -> None:
    """100 messages/s of 20 ms (half of what 4 consumers handle), scale_down_after 5s: after warming up,
    the count moves at most one step for 20 s (four windows of scale_down_after).

    Why a span this short shows it: a steady load flaps when one rule's step
    undoes the other's, and the slow one is the step down, which waits
    scale_down_after on end; the steps up follow within a look (0.5 s) and the
    cooldown (1 s), and once a queue has been idle a window, its next steps
    down follow a cooldown apart. Four of its windows give a flap twice the
    chances to show that the 2 minutes at the default 60 s gave it."""
    sup = supervise(_queue(1, 8, scale_down_after=f"{DOWN_AFTER_S}s"), notify)
    notify.wait("READY=1")
    counts: list[int] = []
    published: list[str] = []
    with Producer(redis_url) as p:
        start = time.monotonic()
        while time.monotonic() - start < WARM_UP_S + HOLD_S:
            tick = time.monotonic()
            published += p.publish_many("q", [{"sleep": 0.02} for _ in range(10)])
            if tick - start >= WARM_UP_S:
                counts.append(_count(sup))
            time.sleep(max(0.0, 0.1 - (time.monotonic() - tick)))  # the load's pace, not a synchronisation
    assert max(counts) - min(counts) <= 1, collections.Counter(counts)
    assert min(counts) >= 2
    wait_for(lambda: len(sup.events("done")) >= len(published), timeout_s=30)
    _each_once([sup], published)
