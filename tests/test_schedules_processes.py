"""Schedules fired by the elected collector, with real supervisors, real
signals and a real redis-server (test-sized timings: heartbeat_timeout 2 s,
so a collector failover takes about 2 s): each slot fires exactly one message
through failovers, SIGKILLs, Redis crashes, reloads and pauses."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Optional

import pytest
import redis

from smqsup.keys import QueueKeys
from smqsup.launch.process import RedisServer
from tests.support import procs
from tests.support.helpers import holds, redis_ms, wait_for

Supervise = Callable[..., procs.Supervisor]
K = QueueKeys("smq", "q")
HB = {"heartbeat_interval": "200ms", "heartbeat_timeout": "2s"}
ROUND_S = 3  # the leader is killed at the end of each of five rounds (each outlasts a failover, 2 s)
WINDOW_MS = 6 * ROUND_S * 1000
QUEUES = {"q": {"handler": "tests.support.handlers:record_fire"}}


def _schedules(**settings: Any) -> dict[str, dict[str, Any]]:
    return {"tick": {"queue": "q", "every": "1s", **settings}}


def _ms(text: str) -> int:
    return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _fires(*sups: procs.Supervisor) -> list[dict[str, Any]]:
    """One event per message fired (a message handled twice after a reclaim
    counts once: same id), oldest slot first."""
    by_id = {e["id"]: e for s in sups for e in s.events("fire")}
    return sorted(by_id.values(), key=lambda e: _ms(e["fire_time"]))


def _slots(*sups: procs.Supervisor) -> list[int]:
    return [_ms(e["fire_time"]) for e in _fires(*sups)]


def _published(client: "redis.Redis") -> int:
    return int(client.hget(K.counters, "published") or 0)


def _leader(client: "redis.Redis") -> Optional[int]:
    token = client.get(K.gc_lock)
    return int(token.decode().split(":")[1]) if token else None


def _after(seconds: float) -> None:
    """Let ``seconds`` of the scenario pass (the span itself is what is under test)."""
    holds(lambda: True, seconds)


def _contiguous(slots: list[int], period_ms: int = 1000) -> bool:
    return slots == list(range(slots[0], slots[-1] + 1, period_ms))


@pytest.mark.parametrize("catch_up", [True, False])
def test_catch_up_after_a_5s_redis_outage(supervise: Supervise, redis_server: RedisServer,
                                          redis_client: "redis.Redis", catch_up: bool) -> None:
    """Redis killed (AOF, appendfsync always) for 5 s: with catch_up one message stands for the slots missed
    beyond grace (header smqsup-catch-up), without it they are skipped; no slot fires twice."""
    s = supervise(QUEUES, schedules=_schedules(catch_up=catch_up, grace="1s"), **HB)
    wait_for(lambda: len(_slots(s)) >= 3, timeout_s=15)
    redis_server.kill()
    down = time.monotonic()
    before = _slots(s)[-1]  # handled before the crash: fired, and so in the AOF
    _after(down + 5 - time.monotonic())
    redis_server.start()
    wait_for(lambda: _slots(s)[-1] >= before + 9000, timeout_s=20, message="firing did not resume")
    fires = _fires(s)
    slots = [_ms(e["fire_time"]) for e in fires]
    assert len(slots) == len(set(slots)), "a slot fired twice"
    caught_up = [e for e in fires if e["catch_up"]]
    after = [t for t in slots if t > before]
    if catch_up:
        assert len(caught_up) == 1, caught_up
        missed = _ms(caught_up[0]["fire_time"])
        assert after[0] == missed and missed >= before + 3000, (before, after)
        assert _contiguous(after[1:]), after
    else:
        assert not caught_up
        assert after[0] >= before + 4000, (before, after)  # the slots of the outage, but the last second, skipped
        assert _contiguous(after), after


def test_each_slot_fires_once_across_a_supervisor_sigkill_and_a_redis_restart(
        supervise: Supervise, redis_server: RedisServer, redis_client: "redis.Redis") -> None:
    """The only supervisor SIGKILLed and replaced, then Redis killed and restarted at once: every slot
    fires exactly once, the ones that came due meanwhile late (within grace)."""
    top = {"schedules": _schedules(), **HB}
    a = supervise(QUEUES, name="a", **top)
    wait_for(lambda: len(_slots(a)) >= 3, timeout_s=15)
    a.kill_group()
    b = supervise(QUEUES, name="b", **top)
    wait_for(lambda: len(_slots(b)) >= 3, timeout_s=20, message="the replacement does not fire")
    redis_server.kill()
    redis_server.start()
    restarted = _slots(a, b)[-1]
    wait_for(lambda: _slots(a, b)[-1] >= restarted + 4000, timeout_s=20, message="firing did not resume")
    # Firing goes on: a slot just fired may not be handled yet, so the count of fires is
    # compared with the handled slots at a moment they meet.
    wait_for(lambda: _published(redis_client) == len(_slots(a, b)), timeout_s=5,
             message="more (or fewer) fires counted than slots handled")
    slots = _slots(a, b)
    assert len(slots) == len(set(slots)), "a slot fired twice"
    assert _contiguous(slots), slots


def test_a_schedule_dropped_from_one_config_fires_on_and_from_every_config_stops(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """SIGHUP of one supervisor whose config dropped the schedule: it fires on (the other declares it);
    SIGHUP of the other too: it stops, and is gone from Redis."""
    top = {"schedules": _schedules(), **HB}
    a, b = supervise(QUEUES, name="a", **top), supervise(QUEUES, name="b", **top)
    wait_for(lambda: len(_slots(a, b)) >= 2, timeout_s=15)
    procs.write_config(a.cfg, redis_url, QUEUES, **HB)
    a.signal(1)  # SIGHUP
    wait_for(lambda: "fires on while another supervisor declares it" in a.log(), message=a.log()[-2000:])
    count = _published(redis_client)
    wait_for(lambda: _published(redis_client) >= count + 3, timeout_s=10, message="it stopped with one declarer left")
    procs.write_config(b.cfg, redis_url, QUEUES, **HB)
    b.signal(1)
    wait_for(lambda: "no supervisor declares it any more" in b.log(), message=b.log()[-2000:])
    count = _published(redis_client)
    holds(lambda: _published(redis_client) == count, 3, message="it fired after every config dropped it")
    assert not redis_client.hexists(K.schedules, "tick") and not redis_client.exists(K.schedule("tick"))
    slots = _slots(a, b)
    assert len(slots) == len(set(slots)) and _contiguous(slots)


def test_pause_and_resume_from_the_cli(supervise: Supervise, redis_client: "redis.Redis") -> None:
    """smqsup schedules pause NAME: nothing fires, on any host, until resume; the paused slots are not
    caught up (catch_up or not); the listing shows the flag, the last and the next fire."""
    s = supervise(QUEUES, schedules=_schedules(catch_up=True), **HB)
    wait_for(lambda: len(_slots(s)) >= 2, timeout_s=15)
    r = procs.run("schedules", "pause", "tick", "-c", str(s.cfg))
    assert r.returncode == 0 and "paused schedule tick (queue q)" in r.stdout, r.stderr
    paused_at = redis_ms(redis_client)  # after the pause: no slot past it may fire
    count = _published(redis_client)
    holds(lambda: _published(redis_client) == count, 3, message="a paused schedule fired")
    [row] = [json.loads(line) for line in procs.run("schedules", "-c", str(s.cfg), "--json").stdout.splitlines()]
    assert row["paused"] is True and row["name"] == "tick" and row["every_s"] == 1 and row["declarers"] == 1
    assert row["last_fire"] * 1000 <= paused_at and row["fires"] == count
    r = procs.run("schedules", "pause", "tick", "-c", str(s.cfg))
    assert r.returncode == 0 and "already paused" in r.stdout and "by cli@" in r.stdout
    resuming_at = redis_ms(redis_client)  # before the resume: no slot up to it may fire
    r = procs.run("schedules", "resume", "tick", "-c", str(s.cfg))
    assert r.returncode == 0 and "resumed schedule tick" in r.stdout, r.stderr
    wait_for(lambda: _published(redis_client) >= count + 2, timeout_s=10, message="it did not fire again")
    fires = _fires(s)
    assert not [e for e in fires if e["catch_up"]]
    assert not [t for t in _slots(s) if paused_at < t <= resuming_at], "a paused slot fired"
    table = procs.run("schedules", "-c", str(s.cfg)).stdout
    assert table.splitlines()[0].split()[:4] == ["schedule", "queue", "when", "zone"] and "every 1s" in table


def test_a_fired_message_is_tracked_and_has_events_as_its_queue_says(supervise: Supervise, redis_url: str) -> None:
    """A queue with result_ttl and events: each message its schedule fires carries both (the collector writes
    its head), so its events read published, started, done and its result is kept."""
    from smqsup.client.producer import Producer
    supervise({"q": {"handler": "tests.support.handlers:record_fire", "result_ttl": "1m", "events": True}},
              schedules=_schedules(), **HB)
    with Producer(redis_url) as p:
        [first] = wait_for(lambda: [e for e in p.events("q") if e.event == "done"][:1], timeout_s=15)
        assert [e.event for e in p.events("q") if e.message_id == first.message_id] == ["published", "started",
                                                                                      "done"]
        assert p.state("q", first.message_id) == "done" and p.result("q", first.message_id, timeout=0) is None
