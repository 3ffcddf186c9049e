"""rate_limit under real supervisors: one limit across every consumer of
every supervisor, and lifted by SIGHUP."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.helpers import wait_for
from tests.test_rate_limit import assert_starts_follow_bookings, booked_starts, rate_bookings

K = QueueKeys("smq", "q")
#: The span the limit is held and measured over, s: 750 starts at 50/s, the
#: 95 % bound leaving 0.75 s of starts to a loaded machine (the checks of
#: the bookings are exact, whatever the span).
HELD_S = 15
#: Published at once: the span's starts and the 2,000 left for the lifted limit.
PUBLISHED = 50 * HELD_S + 2000


@pytest.mark.timeout(150)
@pytest.mark.exclusive
def test_fifty_a_second_across_four_consumers_on_two_supervisors_then_lifted_by_sighup(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """rate_limit 50/s, 2 supervisors x 2 consumers (one of them 4 at once), a no-op handler, 15 s: Redis
    books the starts at least 20 ms apart (at most 50 in any second) across all of them, no handler starts
    before its booking, and the achieved rate is >= 95 % of the limit; SIGHUP to both with the limit
    removed: the 2,000 left drain at full speed."""
    queue = {"handler": "tests.support.handlers:record", "consumers": 2, "rate_limit": "50/s"}
    a = supervise({"q": queue}, name="a")
    b = supervise({"q": {**queue, "concurrency": 4}}, name="b")
    wait_for(lambda: redis_client.hlen(K.consumers) == 4, timeout_s=20)
    bookings = rate_bookings(redis_url, K.rate)
    with Producer(redis_url) as p:
        p.publish_many("q", list(range(PUBLISHED)))
    began = time.monotonic()
    # (a second past the span: the starts of the window's last second are recorded by then)
    wait_for(lambda: time.monotonic() - began >= HELD_S + 1, timeout_s=HELD_S + 10, interval_s=0.5)
    stopped = time.monotonic()
    booked = booked_starts(bookings, 20_000)  # (every start before ``stopped`` was booked by then)
    starts = [e["t"] for e in a.events("done") + b.events("done")]
    first = min(starts)
    window = [t for t in starts if t < first + HELD_S]
    assert_starts_follow_bookings([t for t in starts if t < stopped], booked, 0.02)
    assert len(window) >= 0.95 * 50 * HELD_S, len(window)
    assert {e["pid"] for e in a.events("done")} and {e["pid"] for e in b.events("done")}

    for sup, extra in ((a, {}), (b, {"concurrency": 4})):
        procs.write_config(sup.cfg, redis_url, {"q": {"handler": "tests.support.handlers:record", "consumers": 2, **extra}})
        sup.signal(signal.SIGHUP)
    lifted = time.monotonic()
    wait_for(lambda: len(a.events("done")) + len(b.events("done")) >= PUBLISHED, timeout_s=30,
             message="the backlog did not drain once the limit was lifted")
    took = time.monotonic() - lifted
    left = PUBLISHED - len(starts)
    assert left >= 1500 and left / took > 4 * 50, f"{left} in {took:.1f} s"


def test_a_raised_limit_is_followed_at_once_after_sighup(supervise: Callable[..., procs.Supervisor],
                                                         redis_url: str, redis_client: redis.Redis) -> None:
    """rate_limit 1/h: one of 5 messages starts, the rest wait; raised to 100/s by SIGHUP (the consumers
    roll), the other 4 start within seconds: the hour the old limit booked is not kept."""
    queue = {"handler": "tests.support.handlers:record", "consumers": 2, "rate_limit": "1/h"}
    s = supervise({"q": queue})
    procs.wait_registered(s, 2, redis_client)
    with Producer(redis_url) as p:
        p.publish_many("q", list(range(5)))
    wait_for(lambda: len(s.events("done")) == 1, timeout_s=10)
    procs.write_config(s.cfg, redis_url, {"q": {**queue, "rate_limit": "100/s"}})
    s.signal(signal.SIGHUP)
    wait_for(lambda: len(s.events("done")) == 5, timeout_s=15, message="the raised limit was not followed")
