"""Priorities, dedup keys and pausing as users run them: real ``smqsup``
supervisors (two on one Redis where it matters), OS processes publishing at
once, and the handlers of tests/support/handlers.py recording every start and end."""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup import message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.store.broker import Broker
from tests.support import procs
from tests.support.helpers import holds, wait_for

Supervise = Callable[..., procs.Supervisor]

pytestmark = pytest.mark.topologies

Q = QueueKeys("smq", "q")
HB = {"heartbeat_interval": "200ms", "heartbeat_timeout": "2s"}
#: How long after a pause or a resume every consumer has followed it, in s (they look every 0.25 s).
FOLLOWS_S = 1.0


def test_priority_9_overtakes_a_backlog_of_priority_0_and_each_level_stays_fifo(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """One consumer; paused, 1,000 priority-0 then 100 priority-9 published; resumed: all 100 first, each level FIFO."""
    a = supervise({"q": {"handler": "tests.support.handlers:record"}}, **HB)
    procs.wait_registered(a, 1, redis_client)
    broker = Broker(redis_url)
    assert broker.queues.pause("q", "test")
    with Producer(redis_url) as p:
        p.publish_many("q", [{"p": 0, "seq": i} for i in range(1000)])
        p.publish_many("q", [{"p": 9, "seq": i} for i in range(100)], priority=9)
    # Paused before the first publish, so no message is in flight: a frame the
    # consumer's blocking fetch took in the meantime is given back to the
    # consuming end of pending, unhandled. The order allows no exception.
    wait_for(lambda: broker.statistics.sizes("q")["pending"] == 1100, message="a frame taken while paused not given back")
    assert a.events() == []
    assert broker.queues.resume("q")
    wait_for(lambda: len(a.events("done")) == 1100, timeout_s=60, interval_s=0.2)
    done = sorted(a.events("done"), key=lambda e: e["t"])
    order = [(e["body"]["p"], e["body"]["seq"]) for e in done]
    assert order == [(9, i) for i in range(100)] + [(0, i) for i in range(1000)]
    assert all(e["attempts"] == 0 for e in done)


RACERS = 8
KEYS = 50
#: Publishes of each key, spread over every racer (some publish a key 3 times, some twice).
REPEATS = 20
#: The dedup keys' ttl in the race, in s: the race (about 1.3 s on 2 CPUs, several times that
#: beside another test's processes) must end within it.
RACE_DEDUP_TTL_S = 30.0


def _race_plan(racer: int) -> list[str]:
    """The keys racer ``racer`` publishes, in its own shuffled order: every
    racer publishes every key, REPEATS times per key in all."""
    times = REPEATS // RACERS + (1 if racer < REPEATS % RACERS else 0)
    plan = [f"key-{k}" for k in range(KEYS) for _ in range(times)]
    random.Random(racer).shuffle(plan)
    return plan


def _racer(url: str, racer: int, barrier: Any, out: str) -> None:
    """One racing process: connect, wait for the others, publish its plan one
    call at a time, and write [key, returned id] pairs and its start and end
    (wall clock) to ``out``."""
    with Producer(url) as p:
        p.publish("warm-up", "connect before the start")
        barrier.wait()
        start = time.time()
        got = [(key, p.publish("q", {"key": key}, dedup_key=key, dedup_ttl=RACE_DEDUP_TTL_S))
               for key in _race_plan(racer)]
        end = time.time()
    Path(out).write_text(json.dumps({"start": start, "end": end, "got": got}))


def _race(redis_url: str, tmp_path: Path) -> list[dict[str, Any]]:
    """Run the RACERS publishing processes (spawned) released at once; what each wrote."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(RACERS)
    outs = [tmp_path / f"racer-{n}.json" for n in range(RACERS)]
    racers = [ctx.Process(target=_racer, args=(redis_url, n, barrier, str(outs[n]))) for n in range(RACERS)]
    for r in racers:
        r.start()
    try:
        for r in racers:
            r.join(60)
    finally:
        for r in racers:
            if r.is_alive():
                r.kill()
                r.join()
    assert [r.exitcode for r in racers] == [0] * RACERS
    return [json.loads(o.read_text()) for o in outs]


def _pending_ids(client: "redis.Redis") -> list[str]:
    return [message.decode(f).id for f in client.lrange(Q.pending, 0, -1)]


def test_eight_processes_racing_on_50_dedup_keys_queue_exactly_one_message_per_key(
        redis_url: str, redis_client: "redis.Redis", tmp_path: Path) -> None:
    """8 processes publish 50 keys 20 times each at once: 50 queued, 950 deduplicated, one id per key; reusable after ttl."""
    results = _race(redis_url, tmp_path)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    assert span < RACE_DEDUP_TTL_S, f"the race took {span:.2f} s, past the dedup ttl: it proves nothing"
    assert max(r["start"] for r in results) < min(r["end"] for r in results), "the racers did not overlap"
    ids: dict[str, set[str]] = {}
    for r in results:
        for key, mid in r["got"]:
            ids.setdefault(key, set()).add(mid)
    assert sum(len(r["got"]) for r in results) == KEYS * REPEATS
    assert {key: len(got) for key, got in ids.items()} == {f"key-{k}": 1 for k in range(KEYS)}
    queued = {message.decode(f).id: message.decode(f).body["key"] for f in redis_client.lrange(Q.pending, 0, -1)}
    assert queued == {next(iter(got)): key for key, got in ids.items()}
    broker = Broker(redis_url)
    assert broker.statistics.sizes("q")["pending"] == KEYS
    counters = broker.statistics.counters("q")
    assert (counters["published"], counters["deduplicated"]) == (KEYS, KEYS * REPEATS - KEYS)

    # Once the ttl has passed (the keys are gone from Redis) each key queues a new message. Each
    # key holds the ttl asked for; its passing is brought forward (PEXPIRE 1 ms) rather than waited.
    dedup_keys = [Q.dedup(f"key-{k}") for k in range(KEYS)]
    assert all(0 < redis_client.pttl(key) <= RACE_DEDUP_TTL_S * 1000 for key in dedup_keys)
    for key in dedup_keys:
        redis_client.pexpire(key, 1)
    wait_for(lambda: redis_client.exists(*dedup_keys) == 0, timeout_s=5)
    with Producer(redis_url) as p:
        again = {f"key-{k}": p.publish("q", {"key": f"key-{k}"}, dedup_key=f"key-{k}", dedup_ttl=60)
                 for k in range(KEYS)}
        assert p.publish("q", "dup", dedup_key="key-0", dedup_ttl=60) == again["key-0"]
    assert all(mid not in ids[key] for key, mid in again.items())
    assert len(set(again.values())) == KEYS
    assert set(_pending_ids(redis_client)) == set(again.values()) | {next(iter(g)) for g in ids.values()}
    counters = broker.statistics.counters("q")
    assert (counters["published"], counters["deduplicated"]) == (2 * KEYS, KEYS * REPEATS - KEYS + 1)


class SteadyProducer:
    """A thread publishing one message (``body``) every ``every_s`` until
    stopped; ``ids`` holds every id published."""

    def __init__(self, url: str, body: Any, every_s: float) -> None:
        self.ids: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, body, every_s), daemon=True)
        self.error: BaseException | None = None

    def _run(self, url: str, body: Any, every_s: float) -> None:
        try:
            with Producer(url) as p:
                while not self._stop.wait(every_s):  # the pace of publishing, not a synchronisation
                    self.ids.append(p.publish("q", body))
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive() and self.error is None, self.error


@contextmanager
def steady(url: str, body: Any, every_s: float) -> Iterator[SteadyProducer]:
    producer = SteadyProducer(url, body, every_s)
    producer.start()
    try:
        yield producer
    finally:
        producer.stop()


def _starts(*supervisors: procs.Supervisor) -> list[dict[str, Any]]:
    return [e for s in supervisors for e in s.events("start")]


def _pause_holds(supervisors: list[procs.Supervisor], broker: Broker) -> None:
    """Pause the queue while the supervisors' consumers are busy; check over
    3 s that no handler starts later than FOLLOWS_S after it and that, from
    then on, pending only grows as publishing goes on; and that what was in
    flight at the pause ends."""
    assert broker.queues.pause("q", "test")
    paused_at = time.monotonic()
    pending: list[int] = []

    def nothing_starts() -> bool:
        if time.monotonic() > paused_at + FOLLOWS_S:
            pending.append(broker.statistics.sizes("q")["pending"])
        return not [e for e in _starts(*supervisors) if e["t"] > paused_at + FOLLOWS_S]

    holds(nothing_starts, FOLLOWS_S + 2.0, message="a handler started more than 1 s after the pause")
    assert pending == sorted(pending) and pending[-1] >= pending[0] + 20, pending  # about 100 published
    started = {e["id"] for e in _starts(*supervisors)}
    wait_for(lambda: {e["id"] for s in supervisors for e in s.events("done")} >= started,
             message="a message in flight at the pause did not finish")


def test_pause_stops_two_supervisors_consumers_and_outlasts_their_restart(
        supervise: Supervise, redis_url: str, redis_client: "redis.Redis") -> None:
    """Paused while 2 supervisors x 2 consumers are busy: none starts a handler, across restarts, until resume; none lost."""
    queues = {"q": {"handler": "tests.support.handlers:slow", "consumers": 2}}
    first = [supervise(queues, name=n, **HB) for n in ("a", "b")]
    for s in first:
        procs.wait_registered(s, 2, redis_client)
    broker = Broker(redis_url)
    with steady(redis_url, {"sleep": 0.05}, every_s=0.02) as producer:
        wait_for(lambda: all(len(s.events("start")) >= 3 for s in first), timeout_s=10)
        _pause_holds(first, broker)
        procs.stop_all(first)  # SIGTERM, to both at once
        second = [supervise(queues, name=n, **HB) for n in ("a2", "b2")]
        for s in second:
            procs.wait_registered(s, 2, redis_client)
        holds(lambda: not _starts(*second), 1.0, message="a restarted supervisor handled a message while paused")
        assert broker.statistics.sizes("q")["pending"] > 0
        assert broker.queues.resume("q")
        resumed_at = time.monotonic()
        # Every one of the 4 consumers starts handling again.
        wait_for(lambda: len({e["pid"] for e in _starts(*second)}) == 4, timeout_s=5)
        first_start: dict[int, float] = {}
        for e in sorted(_starts(*second), key=lambda e: -e["t"]):
            first_start[e["pid"]] = e["t"]
        late = {pid: round(t - resumed_at, 2) for pid, t in first_start.items() if t - resumed_at > FOLLOWS_S}
        assert not late, f"consumers starting more than {FOLLOWS_S} s after the resume: {late}"
    everyone = first + second
    published = set(producer.ids)
    wait_for(lambda: {e["id"] for s in everyone for e in s.events("done")} >= published, timeout_s=60,
             interval_s=0.2, message="published messages never handled")
    wait_for(lambda: broker.statistics.sizes("q")["pending"] == 0)
    done = [e for s in everyone for e in s.events("done")]
    counters = broker.statistics.counters("q")
    assert counters["published"] == len(producer.ids)
    assert counters["acked"] == len(done) == len(published)  # each once: SIGTERM let handlers finish
    assert counters.get("dead_lettered", 0) == 0
