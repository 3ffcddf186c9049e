"""Hostile schedules against the real supervisor, collector and command: thousands of definitions in a
schedules hash never hold the supervisor's loop (its heartbeats stay fresh, declared schedules fire), a
state written by a clock years ahead is said and reset, and a body too large for max_message_size is
refused at load and shown where it is stored. Then the same without processes: what a parse of a rare
cron costs, a state before the year 1, the size measured, the reset script and a collector round (on one
server and on a Redis Cluster)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
import redis

from smqsup import message
from smqsup.collector.collector import Collector
from smqsup.collector.firing import Firing
from smqsup.config import model as config
from smqsup.config import schedule
from smqsup.config.model import Config, QueueConfig
from smqsup.config.schedule import Fire, ScheduleConfig, due
from smqsup.errors import BrokerError, ConfigError
from smqsup.ids import new_id
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.ops import schedules as schedule_store
from tests.support import procs
from tests.support.helpers import holds, redis_ms, wait_for
from tests.test_schedules import _cron, _ms, _setup

Supervise = Callable[..., procs.Supervisor]
Q, OTHER = QueueKeys("smq", "q"), QueueKeys("smq", "other")
#: A valid cron whose first slot lies years ahead (a Monday 29 February): costly for cronsim to find.
RARE = "0 0 * 2 1#5"
YEAR_MS = 365 * 86_400_000


def seed_hostile_definitions(client: "redis.Redis", count: int, declared: int = 0) -> None:
    """``count`` valid definitions of RARE on queue q nobody declares, the first ``declared`` of them with a
    forged live declaration and a start of their own (so each one's next slot is a search of its own)."""
    now = redis_ms(client)
    definition = ScheduleConfig("x", "q", cron=RARE).to_json()
    for start in range(0, count, 2000):
        pipe = client.pipeline(transaction=False)
        names = [f"hostile-{i}" for i in range(start, min(count, start + 2000))]
        pipe.hset(Q.schedules, mapping={n: definition for n in names})
        for i, n in enumerate(names, start):
            if i < declared:
                pipe.zadd(Q.schedule_declarers(n), {"forged": now + 20 * 3_600_000})
                pipe.hset(Q.schedule(n), "since_ms", now - i * 86_400_000)
        pipe.execute()


def _staleness_ms(client: "redis.Redis", *keys: QueueKeys) -> int:
    """How old the oldest consumer heartbeat of ``keys``' queues is, by the Redis clock."""
    now = redis_ms(client)
    scores = [score for k in keys for _, score in client.zrange(k.heartbeats, 0, -1, withscores=True)]
    return now - int(min(scores))


def test_ten_thousand_hostile_definitions_never_stale_the_heartbeats_and_declared_schedules_fire(
        supervise: Supervise, redis_client: "redis.Redis") -> None:
    """10,000 definitions of a rare cron in q's schedules hash (1,000 with forged declarations): the
    supervisor's heartbeats of both queues stay younger than 2 heartbeat intervals over 6 s, and the
    schedules its config declares on q and on another queue fire every second."""
    seed_hostile_definitions(redis_client, 10_000, declared=1000)
    handler = {"handler": "tests.support.handlers:record_fire"}
    sup = supervise({"q": handler, "other": handler}, heartbeat_interval="500ms", heartbeat_timeout="5s",
                    schedules={"tick": {"queue": "q", "every": "1s"}, "tock": {"queue": "other", "every": "1s"}})
    procs.wait_registered(sup, 1, redis_client, "q")
    procs.wait_registered(sup, 1, redis_client, "other")
    seen: list[int] = []

    def sample() -> bool:
        seen.append(_staleness_ms(redis_client, Q, OTHER))
        return True

    holds(sample, 6, interval_s=0.05)  # the 6 s are the span under test; the bound is checked below
    assert max(seen) < 1000, f"a heartbeat went {max(seen)} ms stale (samples: {seen[::10]})"
    wait_for(lambda: {e["schedule"] for e in sup.events("fire")} >= {"tick", "tock"}, timeout_s=10,
             message="a declared schedule never fired")
    fired = len(sup.events("fire"))
    wait_for(lambda: len(sup.events("fire")) >= fired + 4, timeout_s=10, message="firing stopped")
    assert "lost" not in sup.log() and "Traceback" not in sup.log()
    print(f"longest heartbeat staleness: {max(seen)} ms over {len(seen)} samples")


def _collector(redis_url: str) -> Collector:
    cfg = Config(Path("<test>"), queues={"q": QueueConfig("q", "m:f")}, heartbeat_interval_s=0.2,
                 heartbeat_timeout_s=2.0)
    return Collector(Broker(redis_url), cfg, owner="t")


def test_a_collector_tick_over_ten_thousand_hostile_definitions_is_bounded(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """With 10,000 hostile definitions (1,000 with forged declarations) beside a declared one, no collector
    tick holds its caller for long, and the declared schedule fires within a few seconds."""
    seed_hostile_definitions(redis_client, 10_000, declared=1000)
    Broker(redis_url).schedules.upsert(ScheduleConfig("tick", "q", every_ms=1000), "sup", 60_000)
    collector = _collector(redis_url)
    ticks: list[float] = []

    def fired() -> bool:
        started = time.monotonic()
        collector.tick()
        ticks.append(time.monotonic() - started)
        return redis_client.llen(Q.pending) > 0

    wait_for(fired, timeout_s=60, interval_s=0.01, message="the declared schedule never fired")
    # Unbounded, every tick over these definitions took seconds (6 s and more). Bounded, a tick costs its
    # budget and a batch: nine in ten stay within 0.25 s, and none reaches a second even when a loaded
    # machine deschedules the test for a moment (once seen: 0.45 s, one tick among hundreds).
    assert sorted(ticks)[len(ticks) * 9 // 10] < 0.25 and max(ticks) < 1.0, sorted(ticks)[-5:]
    print(f"{len(ticks)} ticks until it fired, longest {max(ticks) * 1000:.1f} ms")


def test_the_looks_of_many_queues_share_one_budget_per_tick(redis_url: str, redis_client: "redis.Redis") -> None:
    """30 queues, each holding 150 hostile definitions (20 with forged declarations): their looks share
    one budget per collector tick (SCHEDULE_TICK_BUDGET_S, 50 ms), so a tick never holds its caller for 30
    looks' budgets (600 ms), and every queue's round still reaches the end (a schedule on the last fires)."""
    names = [f"q{i}" for i in range(30)]
    now = redis_ms(redis_client)
    definition = ScheduleConfig("x", "q", cron=RARE).to_json()
    for name in names:
        k = QueueKeys("smq", name)
        pipe = redis_client.pipeline(transaction=False)
        pipe.hset(k.schedules, mapping={f"hostile-{i}": definition.replace('"q"', f'"{name}"') for i in range(150)})
        for i in range(20):
            pipe.zadd(k.schedule_declarers(f"hostile-{i}"), {"forged": now + 3_600_000})
            pipe.hset(k.schedule(f"hostile-{i}"), "since_ms", now - i * 86_400_000)
        pipe.execute()
    broker = Broker(redis_url)
    broker.schedules.upsert(ScheduleConfig("tick", names[-1], every_ms=1000), "sup", 60_000)
    cfg = Config(Path("<test>"), queues={n: QueueConfig(n, "m:f") for n in names}, heartbeat_interval_s=0.2,
                 heartbeat_timeout_s=2.0)
    collector = Collector(broker, cfg, owner="t")
    ticks: list[float] = []

    def fired() -> bool:
        started = time.monotonic()
        collector.tick()
        ticks.append(time.monotonic() - started)
        return redis_client.llen(QueueKeys("smq", names[-1]).pending) > 0

    wait_for(fired, timeout_s=90, interval_s=0.01, message="the declared schedule never fired")
    # The budget and one batch past it; a loaded 2-core machine stretches the batch (and may deschedule one
    # tick), never to 20 budgets (1 s).
    later = sorted(ticks[1:])
    assert later[int(len(later) * 0.9)] < 0.35 and later[-1] < 1.0, f"ticks: {later[-5:]}"


def test_a_state_years_ahead_is_said_once_listed_and_reset_from_the_command_line(
        supervise: Supervise, redis_client: "redis.Redis") -> None:
    """last_fire_ms written 3 years ahead: nothing fires, the collector warns once naming `smqsup schedules
    reset`, the listing says why; `smqsup schedules reset tick` settles it up to now and firing resumes."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record_fire"}}, heartbeat_interval="200ms",
                    heartbeat_timeout="2s", schedules={"tick": {"queue": "q", "every": "1s"}})
    wait_for(lambda: sup.events("fire"), timeout_s=15, message="it never fired")
    ahead = redis_ms(redis_client) + 3 * YEAR_MS
    redis_client.hset(Q.schedule("tick"), "last_fire_ms", ahead)
    wait_for(lambda: "smqsup schedules reset tick" in sup.log(), timeout_s=10, message=sup.log()[-2000:])
    fired = len(sup.events("fire"))
    holds(lambda: len(sup.events("fire")) <= fired + 1, 2.5, message="it fired with its state ahead")
    lines = [line for line in sup.log().splitlines() if "smqsup schedules reset tick" in line]
    assert len(lines) == 1 and "WARNING" in lines[0] and "ahead of the Redis clock" in lines[0], lines
    [row] = [json.loads(line) for line in procs.run("schedules", "-c", str(sup.cfg), "--json").stdout.splitlines()]
    assert "ahead of the Redis clock" in row["error"] and "smqsup schedules reset tick" in row["error"], row
    table = procs.run("schedules", "-c", str(sup.cfg)).stdout
    assert "smqsup schedules reset tick" in table, table
    resetting = redis_ms(redis_client)
    r = procs.run("schedules", "reset", "tick", "-c", str(sup.cfg))
    assert r.returncode == 0 and "reset schedule tick (queue q)" in r.stdout and "ahead" in r.stdout, r
    state = redis_client.hgetall(Q.schedule("tick"))
    now = redis_ms(redis_client)
    assert resetting <= int(state[b"since_ms"]) <= now, state
    # Settled: no fire recorded ahead of now. (The next slot may already have fired since the reset, on a
    # loaded machine the command takes a second: then its time stands between the reset and now.)
    assert b"last_fire_ms" not in state or int(state[b"since_ms"]) <= int(state[b"last_fire_ms"]) <= now, state
    wait_for(lambda: len(sup.events("fire")) >= fired + 3, timeout_s=10, message="it did not fire again")
    wait_for(lambda: "no longer ahead" in sup.log(), timeout_s=5, message=sup.log()[-2000:])


def test_a_body_over_max_message_size_is_refused_by_check_in_one_line(tmp_path: Path) -> None:
    """A schedule whose message (body, headers and envelope) outgrows max_message_size: `smqsup check`
    exits 2 with one line naming the file, the key and the size; one that fits passes."""
    queues = {"q": {"handler": "tests.support.handlers:record_fire"}}
    body = "x" * 900
    cfg = procs.write_config(tmp_path / "q.yaml", "redis://127.0.0.1:1/0", queues, max_message_size="1KB",
                             schedules={"tick": {"queue": "q", "every": "1s", "body": body,
                                                 "headers": {"source": "y" * 100}}})
    r = procs.run("check", "-c", str(cfg))
    assert r.returncode == 2 and r.stdout == "", r
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"Error: {cfg}: schedules.tick.body: ") and "max_message_size (1024 bytes)" in line
    assert re.search(r"would be over max_message_size \(1024 bytes\), got '1\d{3} bytes'$", line), line
    procs.write_config(cfg, "redis://127.0.0.1:1/0", queues, max_message_size="2KB",
                       schedules={"tick": {"queue": "q", "every": "1s", "body": body}})
    r = procs.run("check", "-c", str(cfg))
    assert r.returncode == 0, r.stderr


def test_a_stored_definition_too_large_for_the_files_max_message_size_says_so_in_the_listing(
        tmp_path: Path, redis_url: str) -> None:
    """A definition stored by a supervisor with a larger max_message_size: `smqsup schedules -c FILE`
    shows why it never fires under this file's limit."""
    broker = Broker(redis_url)
    broker.client.sadd("smq:queues", "q")
    broker.schedules.upsert(ScheduleConfig("big", "q", every_ms=1000, body="x" * 5000), "sup", 60_000)
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "m:f"}}, max_message_size="4KB")
    r = procs.run("schedules", "-c", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    [row] = [json.loads(line) for line in r.stdout.splitlines()]
    assert "max_message_size (4096 bytes)" in row["error"] and row["every_s"] == 1, row
    table = procs.run("schedules", "-c", str(cfg)).stdout
    assert "big: " in table and "max_message_size" in table, table


# --- without processes: the cost of a parse, far-off states, the size of a message, reset -----


def test_parsing_a_rare_cron_searches_its_first_slot_once_and_never_from_the_epoch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 definitions of '0 0 * 2 1#5' (a Monday 29 February: years of days to walk) parsed: cronsim
    searched once, from 2000, not once per definition from 1970."""
    searches: list[datetime] = []
    real = schedule._cronsim

    class Counted:
        def __init__(self, expr: str, start: datetime, reverse: bool = False) -> None:
            self.inner, self.start = real(expr, start, reverse), start

        def __iter__(self) -> "Counted":
            return self

        def __next__(self) -> datetime:
            searches.append(self.start)
            return next(self.inner)  # type: ignore[no-any-return]

    monkeypatch.setattr(schedule, "_cronsim", Counted)
    definition = ScheduleConfig("x", "q", cron="0 0 * 2 1#5").to_json().encode()
    for i in range(3000):
        schedule_store.parsed(f"s{i}", definition, "q")
    assert len(searches) <= 1 and all(t.year >= 2000 for t in searches), (len(searches), searches[:2])


def test_a_cron_settled_before_the_year_one_still_catches_up() -> None:
    """A base no datetime holds (since_ms -10^14: anyone may write it) is settled 60 years back: the missed
    slots fire once with catch_up, none without, and the next slot follows, instead of nothing ever again."""
    now = _ms(2026, 7, 8, 12, 0)
    fires, nxt = due(_cron("0 3 * * *", "UTC", catch_up=True), -10**14, now)
    assert fires == [Fire(_ms(2026, 7, 8, 3, 0), catch_up=True)] and nxt == _ms(2026, 7, 9, 3, 0)
    assert due(_cron("0 3 * * *", "UTC"), -10**14, now) == ([], _ms(2026, 7, 9, 3, 0))


def test_max_message_size_is_checked_on_the_largest_message_a_schedule_fires() -> None:
    """The load-time check measures what the collector publishes: at exactly that size the file loads and
    every message fired fits (catch-up or not); a byte less is refused in one line with the key and size."""
    text = ("max_message_size: {}\nqueues:\n  orders: {{handler: m:f}}\nschedules:\n"
            "  tick: {{queue: orders, every: 1s, catch_up: true, body: {{text: '{}'}}, headers: {{h: v}}}}")
    s = config.loads(text.format("1MB", "é" * 3000), "q.yaml").schedules["tick"]
    size = schedule.largest_message_bytes(s)
    assert config.loads(text.format(size, "é" * 3000), "q.yaml").schedules["tick"] == s
    for catch_up in (False, True):
        writer = message.EnvelopeWriter("orders", schedule.fire_headers(s, _ms(2026, 1, 1), catch_up), size)
        assert len(writer.payload(new_id(), s.body)) <= size
    with pytest.raises(ConfigError) as caught:
        config.loads(text.format(size - 1, "é" * 3000), "q.yaml")
    assert str(caught.value) == (f"q.yaml: schedules.tick.body: its message (body, headers and envelope) would be "
                                 f"over max_message_size ({size - 1} bytes), got '{size} bytes'")


@pytest.mark.topologies
def test_reset_settles_a_state_ahead_up_to_now_and_writes_nothing_else(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """schedule_reset.lua: since_ms now, last_fire_ms and fired_at_ms dropped when ahead (kept when not),
    how far ahead said; a schedule not stored and a state of the wrong type are left as they are."""
    broker = Broker(redis_url)
    _setup(redis_client, broker, ScheduleConfig("tick", "q", every_ms=1000))
    ahead = int(redis_client.time()[0]) * 1000 + 3 * 365 * 86_400_000
    redis_client.hset(Q.schedule("tick"), mapping={"last_fire_ms": ahead, "fired_at_ms": ahead, "fires": 7})
    stored, now, ahead_ms = broker.schedules.reset("q", "tick")
    assert stored and ahead_ms == ahead - now
    assert redis_client.hgetall(Q.schedule("tick")) == {b"since_ms": str(now).encode(), b"fires": b"7"}
    redis_client.hset(Q.schedule("tick"), "last_fire_ms", now - 1000)
    stored, later, ahead_ms = broker.schedules.reset("q", "tick")
    assert stored and ahead_ms == 0 and later >= now
    assert redis_client.hget(Q.schedule("tick"), "last_fire_ms") == str(now - 1000).encode()
    assert broker.schedules.reset("q", "nope")[0] is False and not redis_client.exists(Q.schedule("nope"))
    redis_client.hset(Q.schedules, "bad", b"{}")
    redis_client.set(Q.schedule("bad"), "a string")
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.schedules.reset("q", "bad")
    assert redis_client.get(Q.schedule("bad")) == b"a string"


def test_reset_settles_a_state_of_junk_times_up_to_now(redis_url: str, redis_client: "redis.Redis") -> None:
    """since_ms NaN, last_fire_ms undecodable, fired_at_ms 1e300 (no script wrote them): reset stores
    since_ms as now, says nothing was ahead, leaves the junk it cannot read (no fire reads it either)."""
    broker = Broker(redis_url)
    _setup(redis_client, broker, ScheduleConfig("tick", "q", every_ms=1000))
    redis_client.hset(Q.schedule("tick"), mapping={"since_ms": "nan", "last_fire_ms": b"\xff\xfe",
                                                   "fired_at_ms": "1e300"})
    stored, now, ahead_ms = broker.schedules.reset("q", "tick")
    assert stored and ahead_ms == 0
    assert redis_client.hget(Q.schedule("tick"), "since_ms") == str(now).encode()


@pytest.mark.topologies
def test_a_round_over_more_than_a_batch_fires_each_due_slot_once_and_nothing_undeclared(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """Firing's round (HSCAN in batches, states read bounded) over 250 undeclared definitions, a paused one
    and a declared one 5 s behind: the declared one's slots fire once each, a second round fires none again,
    the others never."""
    broker = Broker(redis_url)
    lock = _setup(redis_client, broker, ScheduleConfig("tick", "q", every_ms=1000))
    broker.schedules.upsert(ScheduleConfig("held", "q", every_ms=1000), "sup", 10_000)
    broker.schedules.pause("q", "held", "test")
    redis_client.hset(Q.schedules, mapping={f"idle{i}": ScheduleConfig("x", "q", every_ms=1000).to_json()
                                            for i in range(250)})
    since = int(redis_client.time()[0]) * 1000 - 5000
    for name in ("tick", "held"):
        redis_client.hset(Q.schedule(name), "since_ms", since)
    firing = Firing(broker, Config(Path("<test>"), queues={"q": QueueConfig("q", "m:f")}))
    for _ in range(2):
        wait_for(lambda: firing.look("q", lock) > 0, timeout_s=10, message="the round never ended")
    frames: list[bytes] = redis_client.lrange(Q.pending, 0, -1)  # type: ignore[assignment]
    headers = [json.loads(f.split(b"|", 1)[1])["headers"] for f in frames]
    assert {h["smqsup-schedule"] for h in headers} == {"tick"} and len(headers) >= 4
    times = [h["smqsup-fire-time"] for h in headers]
    assert len(times) == len(set(times)), times


def test_the_parse_cache_keeps_digests_not_definitions() -> None:
    """Parsed definitions are remembered by the digest of their bytes, at most PARSED_KEPT of them: a
    hash of large hostile definitions cannot make the supervisor hold their bytes."""
    for i in range(schedule_store.PARSED_KEPT + 50):
        body = {"pad": "x" * 2000, "i": i}
        schedule_store.parsed(f"big-{i}", ScheduleConfig("x", "q", every_ms=1000, body=body).to_json().encode(), "q")
    kept = schedule_store._parsed
    assert len(kept) <= schedule_store.PARSED_KEPT
    assert all(isinstance(part, str) and len(part) <= 64 for key in kept for part in key)
