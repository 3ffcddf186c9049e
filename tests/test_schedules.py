"""Schedules without processes: the slots of every and cron (DST in Europe/Berlin), what is due after
an outage, the definition read back from Redis, and the fire script's exactly-once step against a
real redis-server."""

from __future__ import annotations

import hashlib
import textwrap
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from smqsup.config import model as config
from smqsup.config import schedule
from smqsup.config.schedule import Fire, ScheduleConfig, due, latest_at_or_before, next_after
from smqsup.errors import ConfigError, NotLeader
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.ops import schedules as schedule_store
from smqsup.store.scripts import schedule_calls as calls

pytestmark = pytest.mark.topologies

BERLIN = ZoneInfo("Europe/Berlin")
K = QueueKeys("smq", "q")


def _ms(*args: int, tz: Any = timezone.utc) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp()) * 1000  # type: ignore[misc]


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _cron(expr: str, zone: str = "Europe/Berlin", **kw: Any) -> ScheduleConfig:
    return ScheduleConfig("s", "q", cron=expr, timezone=zone, **kw)


def _every(ms: int, **kw: Any) -> ScheduleConfig:
    return ScheduleConfig("s", "q", every_ms=ms, **kw)


def _series(s: ScheduleConfig, start_ms: int, n: int) -> list[str]:
    out, t = [], start_ms
    for _ in range(n):
        t = next_after(s, t)
        out.append(_utc(t))
    return out


# --- every -------------------------------------------------------------------------------


@pytest.mark.parametrize("every_ms", [1000, 1500, 30_000, 86_400_000, 7_000])
def test_every_is_aligned_to_multiples_of_its_period_since_the_epoch(every_ms: int) -> None:
    """every P: slots at k * P ms since the epoch, the first strictly after the time asked."""
    s = _every(every_ms)
    for t in (0, 1, every_ms - 1, every_ms, 1_796_137_823_162):
        slot = next_after(s, t)
        assert slot % every_ms == 0 and t < slot <= t + every_ms
        assert latest_at_or_before(s, t) == t // every_ms * every_ms


# --- cron in Europe/Berlin across DST ------------------------------------------------------


def test_a_daily_job_in_the_skipped_hour_runs_once_at_the_end_of_the_gap() -> None:
    """30 2 * * * on 2026-03-29 (02:00 -> 03:00 CEST): at 03:00 CEST (01:00 UTC), then 02:30 CEST."""
    s = _cron("30 2 * * *")
    assert _series(s, _ms(2026, 3, 28, 12, 0), 3) == ["2026-03-29 01:00:00", "2026-03-30 00:30:00",
                                                     "2026-03-31 00:30:00"]


def test_a_daily_job_in_the_repeated_hour_runs_once() -> None:
    """30 2 * * * on 2026-10-25 (03:00 CEST -> 02:00 CET): once, at the first 02:30 (00:30 UTC)."""
    s = _cron("30 2 * * *")
    assert _series(s, _ms(2026, 10, 24, 12, 0), 3) == ["2026-10-25 00:30:00", "2026-10-26 01:30:00",
                                                      "2026-10-27 01:30:00"]


def test_a_half_hourly_job_runs_at_every_real_instant_that_matches() -> None:
    """*/30 * * * * through both changes: the skipped hour has no slot, the repeated hour has two of each."""
    s = _cron("*/30 * * * *")
    assert _series(s, _ms(2026, 3, 29, 0, 0), 3) == ["2026-03-29 00:30:00", "2026-03-29 01:00:00",
                                                    "2026-03-29 01:30:00"]
    assert _series(s, _ms(2026, 10, 24, 23, 45), 5) == ["2026-10-25 00:00:00", "2026-10-25 00:30:00",
                                                       "2026-10-25 01:00:00", "2026-10-25 01:30:00",
                                                       "2026-10-25 02:00:00"]


def test_latest_at_or_before_walks_back_across_the_repeated_hour() -> None:
    """The slot at or before a time, also at a slot exactly and inside the repeated hour (second 02:15)."""
    s = _cron("*/30 * * * *")
    assert _utc(latest_at_or_before(s, _ms(2026, 10, 25, 1, 15)) or 0) == "2026-10-25 01:00:00"
    assert latest_at_or_before(s, _ms(2026, 10, 25, 1, 0)) == _ms(2026, 10, 25, 1, 0)
    assert _utc(latest_at_or_before(_cron("30 2 * * *"), _ms(2026, 3, 29, 12, 0)) or 0) == "2026-03-29 01:00:00"


def test_a_zone_shifts_the_slot_and_utc_needs_no_tz_database() -> None:
    """0 3 * * * is 03:00 of the zone's wall clock; the UTC default is datetime's own."""
    assert _utc(next_after(_cron("0 3 * * *"), _ms(2026, 7, 1, 12, 0))) == "2026-07-02 01:00:00"
    assert _utc(next_after(_cron("0 3 * * *", "UTC"), _ms(2026, 7, 1, 12, 0))) == "2026-07-02 03:00:00"
    assert schedule.load_zone("UTC") is timezone.utc


def test_seconds_and_macros() -> None:
    """A sixth field (first) is seconds; @hourly is 0 * * * *."""
    assert next_after(_cron("*/15 * * * * *", "UTC"), _ms(2026, 1, 1, 0, 0)) == _ms(2026, 1, 1, 0, 0) + 15_000
    assert schedule.cron_expression("@Hourly", "k", "p") == "0 * * * *"


# --- due: late slots, missed slots, catch_up ---------------------------------------------


def test_on_time_and_late_slots_fire_each() -> None:
    """Slots after the base and up to now, all within grace: one Fire each, in order; then the next slot."""
    s = _every(1000, grace_ms=60_000)
    fires, nxt = due(s, 10_000, 13_500)
    assert fires == [Fire(11_000), Fire(12_000), Fire(13_000)] and nxt == 14_000
    assert due(s, 13_000, 13_500) == ([], 14_000)


@pytest.mark.parametrize("catch_up", [True, False])
def test_missed_slots_fire_once_with_catch_up_or_are_skipped(catch_up: bool) -> None:
    """Slots older than grace: one Fire (catch_up, the latest missed one) or none; the late ones each."""
    s = _every(1000, grace_ms=2000, catch_up=catch_up)
    fires, nxt = due(s, 10_000, 20_500)
    late = [Fire(19_000), Fire(20_000)]
    assert fires == ([Fire(18_000, catch_up=True)] if catch_up else []) + late and nxt == 21_000


def test_a_daily_cron_missed_for_days_catches_up_once_not_per_day() -> None:
    """A week without a collector: one catch-up message for 0 3 * * *, whatever the days missed."""
    s = _cron("0 3 * * *", catch_up=True)
    fires, nxt = due(s, _ms(2026, 7, 1, 12, 0), _ms(2026, 7, 8, 12, 0))
    assert fires == [Fire(_ms(2026, 7, 8, 1, 0), catch_up=True)] and _utc(nxt or 0) == "2026-07-09 01:00:00"


def test_due_returns_at_most_most_and_says_more_is_due() -> None:
    """A cut list ends before now; the slot returned is due, so the caller looks again at once."""
    fires, nxt = due(_every(1000), 0, 50_000, most=10)
    assert len(fires) == 10 and nxt is not None and nxt <= 50_000


# --- the file and Redis -------------------------------------------------------------------


def _config(schedules: str) -> config.Config:
    text = "queues:\n  orders: {handler: m:f}\nschedules:\n" + textwrap.indent(textwrap.dedent(schedules), "  ")
    return config.loads(text, "queues.yaml")


def test_a_schedule_section_loads_typed_with_its_defaults() -> None:
    """cron with a zone and headers, every with a body; catch_up false and grace 60 s by default."""
    cfg = _config("""\
        nightly: {queue: orders, cron: "0 3 * * *", timezone: Europe/Berlin, headers: {source: cron},
                  catch_up: true, grace: 5m}
        tick: {queue: orders, every: 30s, body: {kind: tick, n: [1, 2.5, null]}}
    """)
    nightly, tick = cfg.schedules["nightly"], cfg.schedules["tick"]
    assert (nightly.cron, nightly.timezone, nightly.catch_up, nightly.grace_ms) == ("0 3 * * *", "Europe/Berlin",
                                                                                    True, 300_000)
    assert nightly.headers == {"source": "cron"} and nightly.body is None
    assert (tick.every_ms, tick.timezone, tick.catch_up, tick.grace_ms) == (30_000, "UTC", False, 60_000)
    assert tick.body == {"kind": "tick", "n": [1, 2.5, None]} and tick.when == "every 30s"
    assert schedule_store.from_json("tick", tick.to_json(), "orders") == tick


@pytest.mark.parametrize("raw", [
    b"not json", b"\xff\xfe", b"[" * 100_000, b"[]", b'{"v": 2}', b'{"v": 1}',
    b'{"v": 1, "queue": "orders", "every_ms": true}', b'{"v": 1, "queue": "orders", "every_ms": -5}',
    b'{"v": 1, "queue": "orders", "every_ms": 1e999}', b'{"v": 1, "queue": "orders", "every_ms": 10}',
    b'{"v": 1, "queue": "orders", "cron": "99 * * * *"}', b'{"v": 1, "queue": "other", "every_ms": 1000}',
    b'{"v": 1, "queue": "orders", "cron": "* * * * *", "timezone": "../../etc/passwd"}',
    b'{"v": 1, "queue": "orders", "every_ms": 1000, "body": NaN}',
    b'{"v": 1, "queue": "orders", "every_ms": 1000, "headers": {"smqsup-schedule": 1}}',
    b'{"v": 1, "queue": "orders", "every_ms": 1000, "grace_ms": ' + b"9" * 400 + b"}",
])
def test_a_definition_in_redis_that_does_not_validate_is_one_line(raw: bytes) -> None:
    """Whatever bytes a definition holds: ConfigError in one printable line naming the schedule."""
    with pytest.raises(ConfigError) as caught:
        schedule_store.from_json("tick", raw, "orders")
    text = str(caught.value)
    assert "schedule 'tick'" in text and "\n" not in text and text.isprintable()


# --- the fire script, on a real redis-server ------------------------------------------------


def _setup(client: "redis.Redis", broker: Broker, s: ScheduleConfig) -> tuple[str, str]:
    """Store ``s``, declared by "sup", and a collector lock held by token "t"."""
    assert broker.schedules.upsert(s, "sup", 10_000) == calls.NEW
    client.set(K.gc_lock, "t", px=10_000)
    return K.gc_lock, "t"


def _fire(broker: Broker, s: ScheduleConfig, slot: int, lock: tuple[str, str], digest: str = "") -> int:
    return broker.schedules.fire("q", s.name, digest or s.digest, slot, b"0|%d" % slot, "id", lock)[0]


def test_a_slot_fires_once_however_often_it_is_asked(redis_url: str, redis_client: "redis.Redis") -> None:
    """The same slot fired twice, an earlier one after it, one in the future: one message, by the Redis clock."""
    broker = Broker(redis_url)
    s = ScheduleConfig("tick", "q", every_ms=1000)
    lock = _setup(redis_client, broker, s)
    now = int(redis_client.hget(K.schedule("tick"), "since_ms") or 0)  # the declaration's time, in the past
    assert _fire(broker, s, now, lock) == calls.SETTLED  # not after since_ms
    slot = now + 1000
    assert _fire(broker, s, slot + 10_000, lock) == calls.NOT_DUE
    redis_client.hset(K.schedule("tick"), "since_ms", now - 5000)
    assert [_fire(broker, s, now - 1000, lock) for _ in range(3)] == [calls.FIRED, calls.SETTLED, calls.SETTLED]
    assert _fire(broker, s, now - 2000, lock) == calls.SETTLED
    assert redis_client.lrange(K.pending, 0, -1) == [b"0|%d" % (now - 1000)]
    state = redis_client.hgetall(K.schedule("tick"))
    assert state[b"last_fire_ms"] == str(now - 1000).encode() and state[b"fires"] == b"1"
    assert redis_client.hget(K.counters, "published") == b"1"


def test_the_fire_script_refuses_a_deposed_leader_a_pause_no_declarer_and_a_changed_definition(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """NOTLEADER for another token; paused, undeclared, changed: nothing published, each said."""
    broker = Broker(redis_url)
    s = ScheduleConfig("tick", "q", every_ms=1000)
    lock = _setup(redis_client, broker, s)
    now = int(redis_client.time()[0]) * 1000
    redis_client.hset(K.schedule("tick"), "since_ms", now - 5000)
    with pytest.raises(NotLeader):
        _fire(broker, s, now - 1000, (K.gc_lock, "someone else"))
    assert _fire(broker, s, now - 1000, lock, digest=hashlib.sha1(b"old").hexdigest()) == calls.CHANGED
    assert broker.schedules.pause("q", "tick", "test") and _fire(broker, s, now - 1000, lock) == calls.PAUSED
    assert broker.schedules.resume("q", "tick") and not broker.schedules.resume("q", "tick")
    assert int(redis_client.hget(K.schedule("tick"), "since_ms") or 0) >= now  # the paused slots are skipped
    redis_client.hset(K.schedule("tick"), "since_ms", now - 5000)
    assert not broker.schedules.undeclare(s, "sup", forget=False)
    assert _fire(broker, s, now - 1000, lock) == calls.UNDECLARED
    redis_client.zadd(K.schedule_declarers("tick"), {"forged": float("inf"), "far": now + 10**10})
    assert _fire(broker, s, now - 1000, lock) == calls.UNDECLARED  # scores no declaration can reach
    assert not redis_client.exists(K.pending)


def test_a_pending_key_of_the_wrong_type_refuses_before_any_write(redis_url: str,
                                                                   redis_client: "redis.Redis") -> None:
    """WRONGTYPE: the slot stays unfired (last_fire_ms untouched), so it fires once the key is repaired."""
    from smqsup.errors import BrokerError

    broker = Broker(redis_url)
    s = ScheduleConfig("tick", "q", every_ms=1000)
    lock = _setup(redis_client, broker, s)
    now = int(redis_client.time()[0]) * 1000
    redis_client.hset(K.schedule("tick"), "since_ms", now - 5000)
    redis_client.set(K.pending, "a string")
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        _fire(broker, s, now - 1000, lock)
    assert not redis_client.hexists(K.schedule("tick"), "last_fire_ms")
    redis_client.delete(K.pending)
    assert _fire(broker, s, now - 1000, lock) == calls.FIRED


def test_declarations_say_which_definitions_differ_and_forget_only_the_last(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """declare: same, missing or differing per schedule; undeclare with forget deletes only when nobody
    else declares it."""
    broker = Broker(redis_url)
    a, b = ScheduleConfig("a", "q", every_ms=1000), ScheduleConfig("b", "q", every_ms=2000)
    broker.schedules.upsert(a, "sup1", 10_000)
    other = ScheduleConfig("a", "q", every_ms=3000)
    assert broker.schedules.declare("q", [a, b], "sup2", 10_000) == [calls.SAME, calls.MISSING]
    assert broker.schedules.declare("q", [other], "sup2", 10_000) == [calls.DIFFERS]
    assert broker.schedules.upsert(other, "sup2", 10_000) == calls.REPLACED
    assert not broker.schedules.undeclare(a, "sup1", forget=True)  # sup2 still declares it
    assert broker.schedules.undeclare(a, "sup2", forget=True)
    assert not redis_client.hexists(K.schedules, "a") and not redis_client.exists(K.schedule_declarers("a"))


def test_the_scripts_are_sent_with_their_includes_inlined_once() -> None:
    """No include line reaches Redis, and each shared helper is defined once per script."""
    for script in calls.ALL:
        assert "@include" not in script.text, script.name
        for fragment in ("now_ms", "not_leader", "wrong_type", "ms_field", "declare"):
            assert script.text.count(f"local function {fragment}(") <= 1, (script.name, fragment)


def test_a_machine_without_a_tz_database_is_told_what_to_install() -> None:
    """No tz database (TZPATH empty, no tzdata package): a named zone is refused saying what to install;
    UTC still works (it needs none)."""
    import importlib.util
    import zoneinfo

    if importlib.util.find_spec("tzdata") is not None:
        pytest.skip("the tzdata package is installed: zoneinfo falls back to it")
    zoneinfo.reset_tzpath(to=[])
    zoneinfo.ZoneInfo.clear_cache()
    try:
        with pytest.raises(ConfigError) as caught:
            _config("nightly: {queue: orders, cron: '0 3 * * *', timezone: America/Lima}")
        assert "no time zone database (install the tzdata system package, or pip install tzdata)" in str(caught.value)
        assert _config("nightly: {queue: orders, cron: '0 3 * * *'}").schedules["nightly"].timezone == "UTC"
    finally:
        zoneinfo.reset_tzpath()
        zoneinfo.ZoneInfo.clear_cache()
