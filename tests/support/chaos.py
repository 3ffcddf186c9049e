"""The chaos run shared by tests/test_chaos.py (small) and tests/bench/chaos.py
(DESIGN section 7's 100,000 messages): consumers SIGKILLed at random every
200 ms, the supervisor SIGKILLed and restarted, redis-server (AOF,
appendfsync always) SIGKILLed and restarted, all while messages flow.
Afterwards every published message must have been handled (or dead-lettered,
which counts as accounted for) and duplicates must not exceed
``duplicate_bound``: per chaos kill, the frames one consumer can have
started and not yet settled (concurrency + prefetch - 1; 1 with the
defaults), and per death of a poison message (it ends its process, or is
killed hanging) those frames but itself.

With ``poison`` a share of the messages is poison (a handler that raises,
one that ends its process mid-message, one that hangs past
message_timeout): each must end in the dead-letter list after
retry_threshold + 1 deliveries while every good message is handled, within
a time bound computed from the work (``time_bound_s``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import psutil
import redis

from smqsup.client.producer import Producer
from smqsup.errors import BrokerConnectionError, PublishUncertain
from smqsup.keys import QueueKeys, partition_names
from smqsup.launch.process import RedisServer
from tests.support import procs

Q = QueueKeys("smq", "q")


@dataclass
class ChaosResult:
    published: int
    handled_ids: int
    duplicates: int
    dead: int
    lost: list[str]
    consumer_kills: int = 0
    supervisor_kills: int = 0
    redis_kills: int = 0
    seconds: float = 0.0
    uncertain: int = 0  # publishes whose reply was lost (not counted as published)
    uncertain_handled: int = 0  # of those, how many turned out to be queued
    events: list[str] = field(default_factory=list)
    poison: Counter[str] = field(default_factory=Counter)  # kind -> messages published
    poison_dead: int = 0  # poison messages found in the dead-letter list
    poison_deliveries: Counter[int] = field(default_factory=Counter)  # deliveries -> poison messages
    good_dead: int = 0  # good messages dead-lettered (only kills can do that)
    time_bound_s: float = 0.0
    #: Frames one consumer can have started and not yet settled when it is
    #: killed: its running ones plus the rest of its last take
    #: (concurrency + prefetch - 1); each may be delivered again.
    in_flight: int = 1
    #: Deliveries of each poison message that ends its process ("exit") or
    #: hangs past message_timeout ("hang"): a death each.
    deaths: dict[str, int] = field(default_factory=dict)

    @property
    def kills(self) -> int:
        return self.consumer_kills + self.supervisor_kills * 4 + self.redis_kills

    @property
    def poison_deaths(self) -> int:
        """Deliveries of the poison messages that end their process or hang
        until it is killed: a consumer's death each."""
        return sum(self.deaths.values())

    @property
    def duplicate_bound(self) -> int:
        """Most duplicates the run may show: ``in_flight`` per kill, and per
        poison death the others its consumer held (``in_flight - 1``: the
        poison itself is no duplicate; 0 with the defaults)."""
        return self.kills * self.in_flight + self.poison_deaths * (self.in_flight - 1)


def _start_supervisor(cfg: Path, out: Path, n: int) -> subprocess.Popen[bytes]:
    log = open(out / f"supervisor-{n}.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "smqsup", "-c", str(cfg)], env=procs.env(out), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def _consumers(pid: int) -> list[psutil.Process]:
    try:
        return [k for k in procs.children_of(pid)
                if k.status() != psutil.STATUS_ZOMBIE and "consumer" in " ".join(k.cmdline())]
    except psutil.Error:
        return []


def _handled(out: Path) -> Counter[str]:
    """Deliveries per message id, as the handlers recorded them."""
    seen: Counter[str] = Counter()
    for name in os.listdir(out):
        if name.endswith(".log"):
            with open(out / name) as f:
                for line in f:
                    if line.endswith("\n"):  # a line cut by SIGKILL is not a completed write
                        seen[json.loads(line)["id"]] += 1
    return seen


#: Poison shares of DESIGN section 7's extended chaos run.
POISON = {"raise": 0.01, "exit": 0.005, "hang": 0.005}
#: retry_threshold and message_timeout (s) of a run with poison.
POISON_THRESHOLD, POISON_TIMEOUT_S = 2, 1.0


def run_chaos(server: RedisServer, root: Path, *, messages: int, rate: float, batch: int = 100, consumers: int = 4,
              kill_every_s: float = 0.2, supervisor_every_s: float = 4.0, redis_every_s: float = 6.0,
              deadline_s: float = 600.0, rng: Optional[random.Random] = None,
              poison: Optional[dict[str, float]] = None, options: Optional[dict[str, Any]] = None) -> ChaosResult:
    """Publish ``messages`` at ``rate`` a second (in batches) while killing
    things; wait until the queue is drained; return what happened.
    ``options``: more settings of the queue (rate_limit, concurrency,
    partitions, prefetch...), as queues.yaml spells them."""
    rng = rng or random.Random(1)
    out = root / "out"
    out.mkdir()
    queue: dict[str, Any] = {"handler": "tests.support.handlers:record", "consumers": consumers, "retry_threshold": 1000}
    if poison:
        queue.update(handler="tests.support.handlers:chaos", retry_threshold=POISON_THRESHOLD,
                     message_timeout=f"{POISON_TIMEOUT_S}s")
    queue.update(options or {})
    parts = [QueueKeys("smq", p) for p in partition_names("q", int(queue.get("partitions", 1)))]
    cfg = procs.write_config(root / "chaos.yaml", server.url, {"q": queue},
                             heartbeat_interval="200ms", heartbeat_timeout="2s", shutdown_timeout="2s")
    result = ChaosResult(messages, 0, 0, 0, [],
                         in_flight=int(queue.get("concurrency", 1)) + int(queue.get("prefetch", 1)) - 1)
    kinds: dict[str, str] = {}  # poison message id -> kind
    started = time.monotonic()
    sup_n = 0
    sup = _start_supervisor(cfg, out, sup_n)
    published: list[str] = []  # acknowledged by Redis: each must be handled
    uncertain: list[str] = []  # reply lost: may or may not have been queued
    next_kill = started + kill_every_s
    next_sup = started + supervisor_every_s
    next_redis = started + redis_every_s
    producer: Optional[Producer] = None
    try:
        while time.monotonic() - started < deadline_s:
            now = time.monotonic()
            sent = len(published) + len(uncertain)
            if sent < messages and sent < (now - started) * rate:
                bodies: list[Any] = [{"n": sent + i, "kind": _kind(rng, poison)} if poison else sent + i
                                     for i in range(min(batch, messages - sent))]
                try:
                    producer = producer or Producer(server.url)
                    ids = _publish(producer, bodies, rng, len(parts))
                    published += ids
                    kinds.update((mid, b["kind"]) for mid, b in zip(ids, bodies) if poison and b["kind"])
                except BrokerConnectionError as exc:  # Redis down: pause publishing
                    result.events.append(f"publish paused: {type(exc).__name__}")
                    if producer is not None:
                        producer.close()
                    producer = None
                    if isinstance(exc, PublishUncertain):
                        # Maybe queued: never published again (a duplicate), and
                        # not required to show up (Redis never acknowledged it).
                        uncertain += exc.message_ids
                        result.uncertain += len(exc.message_ids)
            elif sent >= messages and _drained(server, parts):
                break
            if now >= next_kill:
                next_kill = now + kill_every_s
                victims = _consumers(sup.pid)
                if victims:
                    try:
                        rng.choice(victims).kill()
                        result.consumer_kills += 1
                    except psutil.NoSuchProcess:  # it ended by itself meanwhile (a poison exit)
                        pass
            if now >= next_sup:
                next_sup = now + supervisor_every_s
                os.kill(sup.pid, signal.SIGKILL)
                sup.wait()
                result.supervisor_kills += 1
                sup_n += 1
                sup = _start_supervisor(cfg, out, sup_n)
            if now >= next_redis:
                next_redis = now + redis_every_s
                server.kill()
                result.redis_kills += 1
                time.sleep(rng.uniform(0.05, 0.3))  # Redis stays down a moment
                server.start()
            time.sleep(0.01)  # the chaos schedule's tick (kills are due by time), not a wait on the system
        else:
            result.events.append("deadline reached")
    finally:
        if producer is not None:
            producer.close()
        os.killpg(sup.pid, signal.SIGTERM)
        try:
            sup.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
    result.seconds = time.monotonic() - started
    seen = _handled(out)
    client = redis.Redis.from_url(server.url)
    dead_ids = set()
    for entry in [e for k in parts for e in client.lrange(k.dead, 0, -1)]:
        frame = entry.split(b"\n", 1)[1]
        dead_ids.add(json.loads(frame.split(b"|", 1)[1])["id"])
    good = [mid for mid in published if mid not in kinds]
    result.published = len(published)
    result.handled_ids = len(set(seen) & set(good))
    result.uncertain_handled = len(set(seen) & set(uncertain))
    result.duplicates = sum(seen[mid] - 1 for mid in good if seen[mid] > 1)
    result.dead = len(dead_ids)
    result.lost = [mid for mid in good if mid not in seen and mid not in dead_ids]
    result.good_dead = len(dead_ids & set(good))
    result.poison = Counter(kinds.values())
    result.poison_dead = len(dead_ids & set(kinds))
    result.poison_deliveries = Counter(seen[mid] for mid in kinds)
    result.deaths = {mid: seen[mid] for mid, kind in kinds.items() if kind in ("exit", "hang")}
    limit = _rate_per_s(queue.get("rate_limit"))
    result.time_bound_s = time_bound_s(result, messages, min(rate, limit) if limit else rate, consumers)
    return result


def _publish(producer: Producer, bodies: list[Any], rng: random.Random, partitions: int) -> list[str]:
    """One batch: to one partition (publish_many without a key), a random
    one of several (a random partition key)."""
    key = None if partitions == 1 else str(rng.randrange(1 << 30))
    return producer.publish_many("q", bodies, partition_key=key)


def _rate_per_s(text: Optional[str]) -> float:
    if not text:
        return 0.0
    n, _, per = text.partition("/")
    return float(n) / {"s": 1.0, "m": 60.0, "h": 3600.0}[per]


def _kind(rng: random.Random, poison: dict[str, float]) -> Optional[str]:
    roll = rng.random()
    for kind, share in poison.items():
        if roll < share:
            return kind
        roll -= share
    return None


def time_bound_s(r: ChaosResult, messages: int, rate: float, consumers: int) -> float:
    """How long the run may take, from its work: publishing at ``rate``, plus
    what the consumers must sit through — each hanging delivery holds one for
    message_timeout, each replacement of a consumer (an exit, a timeout kill, a
    chaos kill) costs one 50 ms (a fork and an import take about 25) — plus a
    second per supervisor or Redis restart, plus 5 s. A queue stalled in a
    crash-loop backoff (0.5 s doubling to 30 s) runs past it."""
    deliveries = POISON_THRESHOLD + 1
    hang_s = r.poison["hang"] * deliveries * POISON_TIMEOUT_S
    replacements = (r.poison["exit"] + r.poison["hang"]) * deliveries + r.consumer_kills
    return (messages / rate + (hang_s + replacements * 0.05) / consumers
            + (r.supervisor_kills + r.redis_kills) * 1.0 + 5.0)


def _drained(server: RedisServer, parts: list[QueueKeys]) -> bool:
    try:
        client = redis.Redis.from_url(server.url, socket_timeout=2)
        pipe = client.pipeline(transaction=False)
        for k in parts:
            pipe.llen(k.pending)
            pipe.zcard(k.delayed)
            for cid in client.hkeys(k.consumers):
                pipe.llen(k.processing(cid.decode()))
        left = sum(pipe.execute())
        client.close()
        return left == 0
    except redis.RedisError:
        return False


def report(r: ChaosResult) -> dict[str, Any]:
    out = {"published": r.published, "uncertain": r.uncertain, "handled": r.handled_ids, "dead_lettered": r.dead,
           "lost": len(r.lost), "duplicates": r.duplicates, "consumer_kills": r.consumer_kills,
           "supervisor_kills": r.supervisor_kills, "redis_kills": r.redis_kills, "seconds": round(r.seconds, 1),
           "duplicate_bound": r.duplicate_bound, "poison_deaths": r.poison_deaths}
    if r.poison:
        out.update(poison=dict(r.poison), poison_dead=r.poison_dead, good_dead=r.good_dead,
                   poison_deliveries=dict(sorted(r.poison_deliveries.items())),
                   time_bound_s=round(r.time_bound_s, 1))
    return out
