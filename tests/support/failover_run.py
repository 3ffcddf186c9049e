"""The failover run of tests/test_failover.py: messages flow from a producer thread of
the test to 4 consumers on 2 real supervisors while the master serving the queue is
SIGKILLed and its replica promoted; then what was acknowledged, handled, lost and
handled twice is counted.

    Publisher thread ──publish_many + WAIT──▶ master ──▶ replica (promoted at the kill)
                                                │
    supervisor a: 2 consumers ◀──BLMOVE, ack + WAIT──┤    handlers append each id to out/a/*.log
    supervisor b: 2 consumers ◀──────────────────────┘    (out/b/*.log)

Nothing of ours is restarted: the producer and the consumers must find the new master
themselves. The killed master is started again once the failover is over, as a replica
of the new master, as a crashed server comes back: without a replica no WAIT for one can
succeed again, and every publish after the failover would stay unconfirmed.

Messages go out in batches of 100 (publish_many): one round trip and one WAIT per 100
keeps the test thread's cost low, and a failover meets batches as a bulk producer's.
publish_many takes no message_id, but every message has a dedup key (its number), so a
publish whose outcome is unknown is published again under the same keys until it returns:
one script writes a message and its key, so a failover keeps both or neither; a message
that did reach Redis is not queued twice (its first id comes back), one that did not (or
was lost with the old master) is queued now. With wait_replicas, the retry's WAIT covers
the first write too: a key found is counted ("deduplicated", a write), and the replication
stream is in order. The messages are numbered by their body; the duplicates counted are
extra handlings of a number, whatever its id.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, cast

import redis

from smqsup.client.producer import Producer
from smqsup.errors import PublishNotSent, PublishRefused, PublishUncertain
from smqsup.keys import QueueKeys
from smqsup.launch.process import RedisServer
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.topology import FAILOVER_TIMEOUT_S, ClusterTopology, SentinelTopology

QUEUE = "q"
KEYS = QueueKeys("smq", QUEUE)
SUPERVISORS = ("a", "b")
CONSUMERS_EACH = 2
#: Messages one consumer handles at once (the queue's concurrency, the default).
CONCURRENCY = 1
CONSUMERS = len(SUPERVISORS) * CONSUMERS_EACH
#: redis.wait_timeout of the run, in seconds.
WAIT_TIMEOUT_S = 1.0
#: What a consumer logs (once) when the replica did not confirm one of its acks or nacks in time.
SETTLE_SHORTFALL = "was settled on the master, but"


class Side(Protocol):
    """A topology seen from the run: where the queue lives, and its failover."""

    name: str
    url: str

    def queue_master(self) -> redis.Redis: ...
    def kill(self) -> None: ...
    def promoted(self) -> bool: ...
    def wait_failover(self) -> None: ...
    def restart(self) -> None: ...


class ClusterSide:
    """A 3+3 Redis Cluster; the master killed is the one serving the queue's slot."""

    name = "cluster"

    def __init__(self, topo: ClusterTopology) -> None:
        self.topo = topo
        self.url = topo.url
        self._victim: Optional[RedisServer] = None
        self._heir: Optional[RedisServer] = None

    def queue_master(self) -> redis.Redis:
        return self.topo.client(self.topo.master_for_key(KEYS.pending))

    def kill(self) -> None:
        self._victim = self.topo.master_for_key(KEYS.pending)
        self._heir = self.topo.replica_of(self._victim)
        self.topo.kill(self._victim)

    def promoted(self) -> bool:
        assert self._heir is not None
        return self.topo.role(self._heir) == "master"

    def wait_failover(self) -> None:
        assert self._victim is not None
        self.topo.wait_failover(self._victim)

    def restart(self) -> None:
        assert self._victim is not None
        self.topo.restart(self._victim)


class SentinelSide:
    """A master, its replica and 3 Sentinels; the url names the sentinels."""

    name = "sentinel"

    def __init__(self, topo: SentinelTopology) -> None:
        self.topo = topo
        self.url = topo.url
        self._killed = False

    def queue_master(self) -> redis.Redis:
        return self.topo.client(self.topo.replica if self._killed else self.topo.master)

    def kill(self) -> None:
        self._killed = True
        self.topo.kill_master()

    def promoted(self) -> bool:
        return self.topo.role(self.topo.replica) == "master"

    def wait_failover(self) -> None:
        self.topo.wait_failover()

    def restart(self) -> None:
        self.topo.restart_master()


class Publisher(threading.Thread):
    """Publishes bodies 0..messages-1 in batches (publish_many), paced at ``rate_per_s``,
    each with its number as dedup key; a batch that raised is published again (same keys)
    until it returns or the deadline passes. One Producer for the whole run.

    It publishes no further than half the messages before ``killed`` is set, so that
    it publishes across the failover however fast the consumers reach the kill."""

    def __init__(self, url: str, wait_replicas: int, messages: int, batch: int, rate_per_s: float,
                 deadline: float) -> None:
        super().__init__(name="publisher", daemon=True)
        self.url, self.wait_replicas = url, wait_replicas
        self.messages, self.batch, self.rate_per_s, self.deadline = messages, batch, rate_per_s, deadline
        #: id -> body of every message a publish returned (acknowledged).
        self.acked: dict[str, int] = {}
        #: Monotonic times at which publishes returned.
        self.acked_at: list[float] = []
        #: Bodies whose publish raised PublishUncertain (or its PublishNotReplicated) or
        #: PublishRefused at least once, with the ids of those attempts (PublishRefused
        #: names no id per body); and the bodies whose publish raised PublishNotSent.
        self.uncertain: dict[int, set[str]] = {}
        self.not_sent: set[int] = set()
        self.error: Optional[BaseException] = None
        self.killed = threading.Event()
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.killed.set()

    def run(self) -> None:
        try:
            with Producer(self.url, wait_replicas=self.wait_replicas, wait_timeout=WAIT_TIMEOUT_S) as producer:
                started = time.monotonic()
                for first in range(0, self.messages, self.batch):
                    if first >= self.messages // 2:
                        self.killed.wait(max(0.0, self.deadline - time.monotonic()))
                    # Pacing, not waiting for a condition: the batch's due time at the rate.
                    if self._halt.wait(max(0.0, started + first / self.rate_per_s - time.monotonic())):
                        return
                    self._publish(producer, list(range(first, min(first + self.batch, self.messages))))
        except BaseException as exc:  # noqa: BLE001 - handed to the test, which raises it
            self.error = exc

    def _publish(self, producer: Producer, bodies: list[int]) -> None:
        keys = [f"m{n}" for n in bodies]
        backoff_s = 0.01
        while True:
            try:
                ids = producer.publish_many(QUEUE, bodies, dedup_key=keys)
            except PublishNotSent:  # nothing queued
                self.not_sent.update(bodies)
            except PublishUncertain as exc:  # maybe queued: the dedup keys decide
                for n, mid in zip(bodies, exc.message_ids):
                    self.uncertain.setdefault(n, set()).add(mid)
            except PublishRefused:  # partly queued (READONLY...): the dedup keys decide
                for n in bodies:
                    self.uncertain.setdefault(n, set())
            else:
                self.acked.update(zip(ids, bodies))
                self.acked_at.append(time.monotonic())
                return
            if time.monotonic() > self.deadline:
                raise AssertionError(f"messages {bodies[0]}..{bodies[-1]} still not published at the deadline")
            if self._halt.wait(backoff_s):
                return
            backoff_s = min(backoff_s * 2, 0.5)


@dataclass
class FailoverResult:
    topology: str
    wait_replicas: int
    messages: int
    acknowledged: int  # messages a publish returned for (after retries under their dedup keys)
    uncertain: int  # messages a publish raised PublishUncertain/NotReplicated/Refused for, at least once
    uncertain_queued: int  # of those, how many such a publish had queued (its id came back on the retry)
    not_sent: int  # messages a publish raised PublishNotSent for, at least once
    handled: int  # distinct messages (bodies) handled
    lost: int  # acknowledged ids never handled
    duplicates: int  # extra handlings of a message (by body)
    duplicate_ids: int  # extra handlings of an id
    handled_at_kill: int  # the queue's acked counter when the kill was decided
    acknowledged_at_kill: int
    kill_to_promoted_s: float  # until the replica said ROLE master (polled every 10 ms)
    kill_to_first_handled_s: float  # until a handler recorded a message after the promotion
    kill_to_first_published_s: float  # until a publish returned after the promotion
    kill_to_replica_back_s: float  # until the old master served as the new one's replica again
    consumers_replaced: int  # consumer processes that handled messages and were not there at the start
    #: consumers that had logged an ack or nack not confirmed by the replica within wait_timeout
    #: before the kill (their settles then stop waiting for 10 s: a failover may repeat those too)
    settle_shortfalls_before_kill: int
    seconds: float
    lost_sample: tuple[str, ...] = ()

    def line(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if k != "lost_sample"})


def _acked(side: Side) -> int:
    return int(side.queue_master().hget(KEYS.counters, "acked") or 0)


def _drained(side: Side) -> bool:
    """Nothing left in the queue: no pending, scheduled or delayed message, every
    registered consumer's processing list empty (a handler records before its ack)."""
    try:
        client = side.queue_master()
        pipe = client.pipeline(transaction=False)
        pipe.llen(KEYS.pending)
        pipe.zcard(KEYS.priority)
        pipe.zcard(KEYS.scheduled)
        pipe.zcard(KEYS.delayed)
        for cid in cast(list[bytes], client.hkeys(KEYS.consumers)):
            pipe.llen(KEYS.processing(cid.decode()))
        return bool(sum(pipe.execute()) == 0)
    except redis.RedisError:
        return False


def _start(side: Side, root: Path, wait_replicas: int) -> list[procs.Supervisor]:
    queues: dict[str, dict[str, Any]] = {QUEUE: {"handler": "tests.support.handlers:record", "consumers": CONSUMERS_EACH}}
    sups: list[procs.Supervisor] = []
    try:
        for name in SUPERVISORS:
            out = root / name
            out.mkdir()
            cfg = procs.write_config(root / f"{name}.yaml", side.url, queues, shutdown_timeout="2s",
                                     redis={"wait_replicas": wait_replicas, "wait_timeout": f"{WAIT_TIMEOUT_S}s"})
            sups.append(procs.Supervisor(cfg, out, name=name))
    except BaseException:
        for s in sups:  # one that started is not left running when the next cannot start
            s.stop()
        raise
    return sups


def run_failover(side: Side, root: Path, wait_replicas: int, *, messages: int = 20_000, batch: int = 100,
                 rate_per_s: float = 4000.0, kill_after: int = 4000, deadline_s: float = 60.0) -> FailoverResult:
    """Publish ``messages`` at ``rate_per_s`` while 4 consumers handle them; once
    ``kill_after`` are handled, SIGKILL the queue's master; wait for the failover, start
    the old master again as a replica, wait until every message is published and the
    queue is drained (all within ``deadline_s``); count what happened."""
    started = time.monotonic()
    deadline = started + deadline_s
    sups = _start(side, root, wait_replicas)
    publisher = Publisher(side.url, wait_replicas, messages, batch, rate_per_s, deadline)
    try:
        for s in sups:
            procs.wait_registered(s, CONSUMERS_EACH, side.queue_master(), QUEUE)
        first_pids = {k.pid for s in sups for k in s.children()}
        publisher.start()
        wait_for(lambda: _acked(side) >= kill_after or publisher.error, deadline - time.monotonic(),
                 message=f"{kill_after} messages not handled before the kill")
        handled_at_kill, acknowledged_at_kill = _acked(side), len(publisher.acked)
        shortfalls = sum(s.log().count(SETTLE_SHORTFALL) for s in sups)
        killed_at = time.monotonic()
        side.kill()
        publisher.killed.set()
        promoted_at = wait_for(lambda: side.promoted() and time.monotonic(), FAILOVER_TIMEOUT_S,
                               message="the replica was not promoted")
        side.wait_failover()
        side.restart()
        back_at = time.monotonic()
        wait_for(lambda: not publisher.is_alive(), deadline - time.monotonic(),
                 message=f"the publisher did not finish: {len(publisher.acked)} of {messages} acknowledged")
        if publisher.error is not None:
            raise publisher.error
        wait_for(lambda: _drained(side), deadline - time.monotonic(), message="the queue was not drained")
        for s in sups:
            assert s.proc.poll() is None, f"supervisor {s.name} exited: {s.log()[-2000:]}"
    finally:
        publisher.stop()
        publisher.join(10)
        procs.stop_all(sups)
    events = [e for s in sups for e in s.events("done")]
    by_id = Counter(e["id"] for e in events)
    by_body = Counter(e["body"] for e in events)
    lost = [mid for mid in publisher.acked if mid not in by_id]
    after = [e["t"] for e in events if e["t"] >= promoted_at]
    published_after = [t for t in publisher.acked_at if t >= promoted_at]
    return FailoverResult(
        topology=side.name, wait_replicas=wait_replicas, messages=messages, acknowledged=len(publisher.acked),
        uncertain=len(publisher.uncertain),
        uncertain_queued=sum(1 for mid, n in publisher.acked.items() if mid in publisher.uncertain.get(n, ())),
        not_sent=len(publisher.not_sent), handled=len(by_body), lost=len(lost),
        duplicates=sum(n - 1 for n in by_body.values()), duplicate_ids=sum(n - 1 for n in by_id.values()),
        handled_at_kill=handled_at_kill, acknowledged_at_kill=acknowledged_at_kill, kill_to_promoted_s=round(promoted_at - killed_at, 3),
        kill_to_first_handled_s=round(min(after) - killed_at, 3) if after else -1.0,
        kill_to_first_published_s=round(min(published_after) - killed_at, 3) if published_after else -1.0,
        kill_to_replica_back_s=round(back_at - killed_at, 3),
        consumers_replaced=len({e["pid"] for e in events} - first_pids), settle_shortfalls_before_kill=shortfalls,
        seconds=round(time.monotonic() - started, 1), lost_sample=tuple(lost[:5]))


def report(result: FailoverResult, path: Path) -> None:
    """Print the run's figures and append them to ``path`` as one JSON line."""
    print(f"\nfailover ({path}): {result.line()}")
    with path.open("a") as f:
        f.write(result.line() + "\n")
