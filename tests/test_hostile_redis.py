"""Hostile Redis state against running code: keys of the wrong type, garbage
members and scores, junk locks. Nothing may lose a message, stop another
queue or take the supervisor down; each failure is a bounded log line."""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from smqsup import framing, message
from smqsup.collector.collector import Collector
from smqsup.config.model import Config, QueueConfig
from smqsup.errors import BrokerError
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import holds, wait_for

Q = QueueKeys("smq", "q")
BAD = QueueKeys("smq", "bad")
HB = {"heartbeat_interval": "200ms", "heartbeat_timeout": "2s"}


def _frame(message_id: str) -> bytes:
    return framing.frame(message.encode_payload("q", None, message_id=message_id, max_size_bytes=1 << 20)[1])


def _wrong_type(client: "redis.Redis", key: str) -> None:
    """Replace ``key`` by a string (no smqsup key but the collector lock is one)."""
    client.set(key, "junk")


# --- scripts: refuse before any write, lose nothing -----------------------------


@pytest.mark.parametrize("victim", ["pending", "delayed", "dead"])
def test_a_nack_into_a_key_of_the_wrong_type_changes_nothing(redis_url: str, redis_client: "redis.Redis",
                                                             victim: str) -> None:
    """nack.lua refuses before it removes the frame when any list it may write to is not a list (or zset)."""
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.lpush(Q.processing("c1"), b"5|x")
    _wrong_type(redis_client, getattr(Q, victim))
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.messages.nack("q", "c1", b"5|x", retry_threshold=3, delay_ms=1000, meta='{"reason":"r"}', fetch_next=False)
    assert redis_client.lrange(Q.processing("c1"), 0, -1) == [b"5|x"]


@pytest.mark.parametrize("victim", ["pending", "dead", "consumers", "heartbeats", "retired"])
def test_a_reclaim_into_a_key_of_the_wrong_type_changes_nothing(redis_url: str, redis_client: "redis.Redis",
                                                                victim: str) -> None:
    """reclaim.lua pops nothing when a key it writes to holds another type."""
    broker = Broker(redis_url)
    redis_client.lpush(Q.processing("c1"), b"0|x", b"9|y")
    _wrong_type(redis_client, getattr(Q, victim))
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="r")
    assert redis_client.lrange(Q.processing("c1"), 0, -1) == [b"9|y", b"0|x"]



_LOCK = ("lock", "mine")
_RECLAIMS: dict[str, Callable[[Broker], object]] = {
    "reclaim_dead": lambda b: b.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="r"),
    "return_stopped": lambda b: b.messages.return_stopped("q", "c1", reason="r"),
    "return_held": lambda b: b.messages.return_held("q", "c1", reason="r"),
    "reclaim_stale": lambda b: b.registry.reclaim_stale("q", "c1", retry_threshold=3, reason="r", stale_after_ms=1000,
                                                        lock=_LOCK),
    "sweep_retired": lambda b: b.registry.sweep_retired("q", "c1", lock=_LOCK),
}


@pytest.mark.parametrize("victim", ["pending", "dead"])
@pytest.mark.parametrize("intent", sorted(_RECLAIMS))
def test_every_reclaim_into_a_list_of_the_wrong_type_changes_nothing(
        redis_url: str, redis_client: "redis.Redis", intent: str, victim: str) -> None:
    """Each reclaim by intent refuses before it pops when pending or the dead letters are not lists."""
    redis_client.set(*_LOCK)
    redis_client.lpush(Q.processing("c1"), b"0|x", b"9|y")
    _wrong_type(redis_client, getattr(Q, victim))
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        _RECLAIMS[intent](Broker(redis_url))
    assert redis_client.lrange(Q.processing("c1"), 0, -1) == [b"9|y", b"0|x"]


@pytest.mark.parametrize("intent", sorted(_RECLAIMS))
def test_every_reclaim_dead_letters_junk_frames_and_returns_the_rest(
        redis_url: str, redis_client: "redis.Redis", intent: str) -> None:
    """Frames another program left (no prefix, a 10-digit or signed prefix, empty, not UTF-8) become dead
    letters whatever the reclaim; good frames go back to pending; nothing is lost."""
    junk = [b"", b"no separator", b"|x", b"-1|x", b"1234567890|x", b"1e3|x", b"\xff\xfe|\x00"]
    good = [b"0|good"]
    redis_client.set(*_LOCK)
    redis_client.rpush(Q.processing("c1"), *junk, *good)
    _RECLAIMS[intent](Broker(redis_url))
    pending = redis_client.lrange(Q.pending, 0, -1)
    dead = redis_client.lrange(Q.dead, 0, -1)
    assert len(pending) == 1 and pending[0].endswith(b"|good")
    assert sorted(entry.split(b"\n", 1)[1] for entry in dead) == sorted(junk)
    assert redis_client.llen(Q.processing("c1")) == 0

def test_promote_and_dlq_requeue_into_a_pending_of_the_wrong_type_change_nothing(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """A pending key that is not a list: due delayed frames and requeued dead letters stay where they are."""
    broker = Broker(redis_url)
    redis_client.zadd(Q.delayed, {b"0|x": 0})
    redis_client.lpush(Q.dead, b'{"reason":"r"}\n3|y')
    _wrong_type(redis_client, Q.pending)
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.messages.promote("q")
    with pytest.raises(BrokerError, match="WRONGTYPE"):
        broker.contents.dlq_requeue("q", [b'{"reason":"r"}\n3|y'])
    assert redis_client.zrange(Q.delayed, 0, -1) == [b"0|x"]
    assert redis_client.lrange(Q.dead, 0, -1) == [b'{"reason":"r"}\n3|y']


def test_an_ack_with_a_pending_of_the_wrong_type_acks_and_fetches_nothing(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """ack.lua with a pending key that is no list: the ack lands, nothing is fetched, no error."""
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    redis_client.lpush(Q.processing("c1"), b"0|x")
    _wrong_type(redis_client, Q.pending)
    result = broker.messages.ack("q", "c1", b"0|x", True)
    assert result.acked and result.next_frame is None and result.registered
    assert redis_client.llen(Q.processing("c1")) == 0
    assert redis_client.type(Q.pending) != b"list"


@pytest.mark.parametrize("victim", ["processing", "pending", "consumers", "priority"])
@pytest.mark.parametrize("acks", [0, 1, 3])
@pytest.mark.parametrize("paused", [False, True])
def test_a_take_with_a_key_of_the_wrong_type_is_refused_before_it_writes(
        redis_url: str, redis_client: "redis.Redis", victim: str, acks: int, paused: bool) -> None:
    """take.lua, its hot path (no flag) and its general one (paused): a list, registry or priority set
    of the wrong type is a WRONGTYPE error, and neither an ack nor a move has happened."""
    from smqsup.store import scripts

    Broker(redis_url).registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    if paused:
        redis_client.set(Q.paused, 1)
    held = [f"0|h{i}".encode() for i in range(acks)]
    if held:
        redis_client.lpush(Q.processing("c1"), *held)
    redis_client.lpush(Q.pending, b"0|a", b"0|b")
    key = Q.processing("c1") if victim == "processing" else getattr(Q, victim)
    _wrong_type(redis_client, key)
    before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        scripts.take(Q, "c1", 32, acks=tuple(reversed(held))).run(redis_client)
    assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == before


def test_a_single_publish_into_a_pending_of_the_wrong_type_is_refused_and_a_garbage_counters_hash_costs_only_its_count(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """A publish alone (LPUSH and its count in one write): a pending key that is no list refuses it with
    WRONGTYPE and keeps its value; a counters key that is no hash still lets the message in, uncounted."""
    broker = Broker(redis_url, "smq")
    try:
        redis_client.set(Q.pending, "junk")
        with pytest.raises(BrokerError, match="WRONGTYPE"):
            broker.messages.push("q", [b"0|a"], register=False)
        assert redis_client.get(Q.pending) == b"junk"
        redis_client.delete(Q.pending)
        redis_client.set(Q.counters, "junk")
        broker.messages.push("q", [b"0|b"], register=False)
    finally:
        broker.close()
    assert redis_client.lrange(Q.pending, 0, -1) == [b"0|b"] and redis_client.get(Q.counters) == b"junk"


# --- the collector: one queue's garbage never stops another's -------------------


@pytest.mark.parametrize("when", ["before the start", "while running"])
def test_garbage_keys_of_one_queue_never_stop_the_collector_of_another(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, out_dir: Path,
        redis_url: str, redis_client: "redis.Redis", when: str) -> None:
    """Queue "bad" with strings for its counters, delayed, heartbeats...: "q" still promotes and reclaims; bounded log."""
    def spoil() -> None:
        for key in (BAD.counters, BAD.delayed, BAD.heartbeats, BAD.gc, BAD.series):
            redis_client.set(key, "junk")

    if when == "before the start":
        spoil()
    sup = supervise({"bad": {"handler": "tests.support.handlers:record"}, "q": {"handler": "tests.support.handlers:record"}},
                    notify, shutdown_timeout="1s", **HB)
    if when == "while running":
        notify.wait("READY=1")
        spoil()
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "ghost", ConsumerInfo(pid=1))
    redis_client.zadd(Q.heartbeats, {"ghost": 0})  # long dead
    held, due = _frame("held"), _frame("due")
    redis_client.lpush(Q.processing("ghost"), held)
    redis_client.zadd(Q.delayed, {due: 0})
    wait_for(lambda: {e["id"] for e in read_events(str(out_dir))} >= {"held", "due"}, 20,
             message="q's delayed message or its lost consumer's message never handled")
    # Let every failing step of "bad" come round several times.
    wait_for(lambda: redis_client.llen(Q.series) >= 6, 20, message="q's collector stopped sampling")
    assert sup.proc.poll() is None
    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(30) == 0
    log = sup.log()
    assert "Traceback" not in log
    troubles = [line.split(": ", 1)[1] for line in log.splitlines()
                if "queue bad:" in line and "WARNING" in line and "collector" in line]
    assert troubles and len(troubles) == len(set(troubles)), troubles  # each cause said once



@pytest.mark.parametrize("junk", ["string", "hash"])
def test_a_collector_lock_that_never_expires_is_given_a_ttl_and_the_queue_gets_a_collector(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, out_dir: Path,
        redis_client: "redis.Redis", junk: str) -> None:
    """A gc lock holding garbage with no TTL: expired after one TTL, then a collector leads and promotes."""
    if junk == "string":
        redis_client.set(Q.gc_lock, "\xffgarbage\n")
    else:
        redis_client.hset(Q.gc_lock, "junk", "1")
    redis_client.zadd(Q.delayed, {_frame("due"): 0})
    sup = supervise({"q": {"handler": "tests.support.handlers:record"}}, notify, **HB)
    wait_for(lambda: any(e["id"] == "due" for e in read_events(str(out_dir))), 20,
             message="the delayed message was never promoted: no collector")
    assert redis_client.pttl(Q.gc_lock) > 0
    lines = [line for line in sup.log().splitlines() if "never expires" in line]
    assert len(lines) == 1, lines



def test_a_retired_set_full_of_junk_costs_one_sweep_and_a_late_message_still_comes_back(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """200,000 retired ids dated +inf (never aged out, each LLEN'ed every sweep) are dropped; the real one is served."""
    broker = Broker(redis_url)
    broker.registry.register_consumer("q", "c1", ConsumerInfo(pid=1))
    broker.registry.reclaim_dead("q", "c1", retry_threshold=3, reason="consumer lost")
    for start in range(0, 200_000, 50_000):
        redis_client.zadd(Q.retired, {f"junk\n{i}": float("inf") for i in range(start, start + 50_000)})
    redis_client.lpush(Q.processing("c1"), b"2|late")
    c = _leading_collector(redis_url)
    c.tick()
    assert redis_client.lrange(Q.pending, 0, -1) == [b"2|late"]
    assert redis_client.zrange(Q.retired, 0, -1) == [b"c1"]


def _leading_collector(redis_url: str) -> Collector:
    """A collector that has seen Redis answer for a minute (so it may reclaim) and leads at its first tick."""
    cfg = Config(Path("<test>"), queues={"q": QueueConfig("q", "m:f")}, heartbeat_interval_s=0.2,
                 heartbeat_timeout_s=2.0)
    c = Collector(Broker(redis_url), cfg, owner="t")
    c._connected_since = time.monotonic() - 60
    return c


# --- Redis refusing writes for a while (OOM under noeviction) -------------------


def test_a_standalone_consumer_under_oom_is_not_declared_dead_by_its_own_collector(
        tmp_path: Path, out_dir: Path, redis_url: str, redis_client: "redis.Redis") -> None:
    """Heartbeats refused for OOM longer than heartbeat_timeout: the message in hand is not reclaimed or redelivered."""
    cfg = procs.write_config(tmp_path / "q.yaml", redis_url, {"q": {"handler": "tests.support.handlers:slow"}}, **HB)
    p = procs.smqsup("consume", "-c", str(cfg), "q", out_dir=out_dir, stdout=subprocess.DEVNULL)
    try:
        wait_for(lambda: redis_client.hlen(Q.consumers) == 1, 15, message="consumer never registered")
        # Its collector leads and has seen Redis answer for longer than heartbeat_timeout.
        wait_for(lambda: redis_client.llen(Q.series) >= 3, 15, message="the collector never sampled")
        redis_client.lpush(Q.pending, framing.frame(message.encode_payload(
            "q", {"sleep": 5}, message_id="long", max_size_bytes=1 << 20)[1]))
        wait_for(lambda: read_events(str(out_dir)), 15, message="handler never started")
        redis_client.config_set("maxmemory-policy", "noeviction")
        redis_client.config_set("maxmemory", 1)  # every write that allocates is refused: OOM
        try:
            wait_for(lambda: [e for e in read_events(str(out_dir)) if e["event"] == "done"], 15,
                     message="handler never finished")
        finally:
            redis_client.config_set("maxmemory", 0)
        wait_for(lambda: redis_client.llen(Q.processing(_only_consumer(redis_client))) == 0, 10,
                 message="the ack never landed")
        assert [e["event"] for e in read_events(str(out_dir))] == ["start", "done"]
        assert redis_client.hget(Q.counters, "reclaimed") is None and redis_client.llen(Q.pending) == 0
        assert p.poll() is None
    finally:
        procs.stop(p)
    assert "Traceback" not in p.stderr.read()


def _only_consumer(client: "redis.Redis") -> str:
    ids = client.hkeys(Q.consumers)
    return ids[0].decode() if len(ids) == 1 else "none"


def test_a_flood_of_due_messages_is_promoted_a_few_batches_a_tick(redis_url: str,
                                                                   redis_client: "redis.Redis") -> None:
    """100,000 due delayed messages: one collector tick moves at most PROMOTE_BATCHES_PER_TICK batches
    (the supervisor's loop is never held for long); the following ticks move the rest."""
    from smqsup import defaults

    for start in range(0, 100_000, 10_000):
        redis_client.zadd(Q.delayed, {f"0|{n}".encode(): 0 for n in range(start, start + 10_000)})
    cfg = Config(Path("<test>"), queues={"q": QueueConfig("q", "m:f")}, heartbeat_interval_s=0.2,
                 heartbeat_timeout_s=2.0)
    collector = Collector(Broker(redis_url), cfg, owner="t")
    collector.tick()
    assert redis_client.llen(Q.pending) == defaults.PROMOTE_BATCH * defaults.PROMOTE_BATCHES_PER_TICK

    def drained() -> bool:
        collector.tick()
        return redis_client.zcard(Q.delayed) == 0

    wait_for(drained, 30, interval_s=0.1, message="the due messages were not all promoted")
    assert redis_client.llen(Q.pending) == 100_000


# --- schedules: garbage and huge values in every schedule key ---------------------


def _seed_hostile_schedule_values(client: "redis.Redis", broker: Broker) -> None:
    """Declared schedules whose keys hold garbage or huge values: a 200,000-member declarers set and a
    200,000-field state hash ("crowd"), a 20 MB paused flag ("flag") and definition ("huge"), times that are
    NaN, infinite, undecodable ("nan"), a cron started before the year 1 ("ancient"), names and definitions
    that do not decode."""
    from smqsup.config.schedule import ScheduleConfig

    for s in (ScheduleConfig("ok", "q", every_ms=1000), ScheduleConfig("crowd", "q", every_ms=1000),
              ScheduleConfig("flag", "q", every_ms=1000), ScheduleConfig("nan", "q", every_ms=1000),
              ScheduleConfig("ancient", "q", cron="* * * * * *")):
        broker.schedules.upsert(s, "sup", 60_000)
    now = int(client.time()[0]) * 1000
    for start in range(0, 200_000, 50_000):
        client.zadd(Q.schedule_declarers("crowd"), {f"d{i}": now + 3_600_000 for i in range(start, start + 50_000)})
        client.hset(Q.schedule("crowd"), mapping={f"junk{i}": "\xff" * 8 for i in range(start, start + 50_000)})
    client.set(Q.schedule_paused("flag"), b"\xff" * 20_000_000)
    client.hset(Q.schedules, mapping={"huge": b'{"v":1,"queue":"q","every_ms":1000,"body":"' + b"x" * 20_000_000
                                      + b'"}', b"\xff\xfe": b"\xff", "bad": b"\xff\xfe"})
    for name in ("huge", "bad"):
        client.zadd(Q.schedule_declarers(name), {"forged": now + 3_600_000})
        client.hset(Q.schedule(name), "since_ms", now)
    client.hset(Q.schedule("nan"), mapping={"since_ms": "nan", "last_fire_ms": "-inf", "fires": b"\xff"})
    client.hset(Q.schedule("ancient"), "since_ms", -10**14)


def test_garbage_and_huge_schedule_values_cost_the_collector_bounded_ticks_and_the_rest_fires(
        redis_url: str, redis_client: "redis.Redis", caplog: pytest.LogCaptureFixture) -> None:
    """Huge declarers, state hashes, paused flags and definitions, NaN and undecodable times and names: no
    collector tick takes long, the good schedules (and the one started before the year 1) fire, the bad
    ones are one line each, nothing unexpected."""
    caplog.set_level(logging.WARNING)  # whatever level an earlier test in this process left the root at
    broker = Broker(redis_url)
    _seed_hostile_schedule_values(redis_client, broker)
    collector = _leading_collector(redis_url)
    ticks: list[float] = []

    def fired() -> set[str]:
        started = time.monotonic()
        collector.tick()
        ticks.append(time.monotonic() - started)
        return {n for n in ("ok", "crowd", "ancient") if redis_client.hexists(Q.schedule(n), "last_fire_ms")}

    def said(name: str) -> int:
        return caplog.text.count(f"schedule {name} not fired")

    # Until the good ones fired and the round (a budget of work per tick, in HSCAN's order) reached the bad.
    wait_for(lambda: fired() == {"ok", "crowd", "ancient"} and said("huge") and said("bad"), 30, interval_s=0.01,
             message="a good schedule never fired beside the garbage, or a bad one was never said")
    holds(lambda: fired() is not None, 1.0, interval_s=0.01)  # more rounds: each bad one is still said once
    # Bounded, not fast: the round reads the 20 MB definition once (HSCAN returns values), which a loaded
    # 2-core machine takes a few hundred ms over; unbounded, one tick took 2 s here.
    assert max(ticks) < 0.6, f"a tick took {max(ticks):.3f} s"
    assert not redis_client.hexists(Q.schedule("flag"), "last_fire_ms")
    assert "unexpected" not in caplog.text and "Traceback" not in caplog.text
    assert said("huge") == 1 and said("bad") == 1


def test_a_lost_consumer_whose_list_is_of_the_wrong_type_holds_no_other_reclaim(
        redis_url: str, redis_client: "redis.Redis", caplog: pytest.LogCaptureFixture) -> None:
    """Two lost consumers: the first (oldest heartbeat) has a string for its list, so its reclaim is refused;
    the second's message is still reclaimed to pending, and the refusal is said naming the key."""
    broker = Broker(redis_url)
    cfg = Config(Path("<test>"), queues={"q": QueueConfig(name="q", handler="tests.support.handlers:record")},
                 heartbeat_interval_s=0.1, heartbeat_timeout_s=0.5)
    collector = Collector(Broker(redis_url), cfg)
    for cid, beat in (("ghost-a", 1), ("ghost-b", 2)):
        broker.registry.register_consumer("q", cid, ConsumerInfo(pid=1))
        redis_client.zadd(Q.heartbeats, {cid: beat})
    _wrong_type(redis_client, Q.processing("ghost-a"))
    redis_client.lpush(Q.processing("ghost-b"), _frame("held"))

    def reclaimed() -> bool:
        collector.tick()
        return redis_client.llen(Q.pending) == 1
    wait_for(reclaimed, timeout_s=15, interval_s=0.05, message="ghost-b's message never reclaimed")
    collector.release_all()
    assert redis_client.get(Q.processing("ghost-a")) == b"junk"
    assert any(Q.processing("ghost-a") in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
