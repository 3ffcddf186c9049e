"""The lagging-replica run of tests/test_failover.py: on loopback a replica never lags,
so this run makes it lag. The replica of a sentinel group is SIGSTOPped and messages are
published until the master's replication stream backs up into the master itself:

    producer ──publish_many + WAIT──▶ master ──socket buffers──▶ replica (SIGSTOPped)
                                        │      (the kernel's: a few MB on loopback)
                                        └─ its output buffer for the replica
                                           (CLIENT LIST omem): lost with the master

Once that output buffer holds 4 batches, the master is SIGKILLed and the replica
SIGCONTed: it reads what the kernel still hands it, sees the link close, and the
sentinels promote it. Its pending list is then read and the acknowledged ids missing
from it counted. The replication stream is in order, so the last batches are missing:
with wait_replicas 0 they were acknowledged (lost), with 1 not one publish made while
the replica was stopped was acknowledged (each raised PublishNotReplicated).

The kernel hands the replica only part of what the dead master's socket held: the
replica's first REPLCONF ACK (once a second, and for each WAIT's GETACK it reads) seems
to reset that socket, so a run with wait_replicas 1 loses the whole socket's worth too.
stream_lost_bytes says how much of the stream was lost; omem is read just before the
kill, and the kernel may still take a little more (up to half a MB seen), so the two
differ both ways.

The sentinels, not the test, promote the replica. They refuse a replica they see down
(no reply to their PINGs for down-after-milliseconds, 1 s), as they see this one once it
has been stopped a second or two; but it answers within milliseconds of its SIGCONT, and
they see the master down only a second after the kill. Were they to try first, they would
abort and try again after 2 x failover-timeout (6 s), well within FAILOVER_TIMEOUT_S:
slower, not wrong. No consumer runs: what a publish's acknowledgement guarantees is under
test, not handling.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import redis

from smqsup.client.producer import Producer
from smqsup.errors import PublishNotReplicated
from smqsup.framing import peek_id
from tests.support.failover_run import KEYS, QUEUE
from tests.support.helpers import wait_for
from tests.support.topology import FAILOVER_TIMEOUT_S, SentinelTopology

#: redis.wait_timeout of the run (s): what each publish costs while the replica is stopped.
WAIT_TIMEOUT_S = 0.2
#: Each message's body is a string this long, published BATCH at a time (1 MiB a round trip).
BODY_BYTES = 64 * 1024
BATCH = 16
#: Batches published while the replica runs (with wait_replicas 1, acknowledged: what must survive).
BATCHES_BEFORE = 4
#: What the master must hold for the stopped replica at the kill: 4 batches' worth.
UNDELIVERED_BYTES = 4 * BATCH * BODY_BYTES
#: Bodies published to the stopped replica after which the run gives up (the kernel would
#: then be taking it all: on loopback it takes a few MB).
MAX_STOPPED_BYTES = 64 * 1024 * 1024
#: Frames read at once from the promoted master's pending list.
_PAGE = 256


@dataclass
class LagResult:
    topology: str
    wait_replicas: int
    published: int  # messages a publish returned for or raised PublishNotReplicated for
    acknowledged: int  # messages a publish returned for
    acknowledged_before_stop: int
    not_replicated: int  # messages a publish raised PublishNotReplicated for (queued, not acknowledged)
    not_replicated_kept: int  # of those, how many the promoted master has all the same
    lost: int  # acknowledged messages the promoted master does not have
    stopped_bytes: int  # bytes of bodies published while the replica was stopped
    undelivered_bytes_at_kill: int  # the master's output buffer for the replica at the kill
    stream_lost_bytes: int  # the master's replication offset at the kill - the promoted replica's
    kill_to_promoted_s: float  # until the replica said ROLE master (polled every 10 ms)
    seconds: float

    def line(self) -> str:
        return json.dumps(asdict(self))


class _Publisher:
    """Publishes batches of BATCH bodies (``n:`` padded to BODY_BYTES), numbered on;
    records the ids each publish returned, or raised PublishNotReplicated for."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.acked: set[str] = set()
        self.not_replicated: set[str] = set()
        self._next = 0

    def batch(self) -> None:
        bodies = [f"{n}:".ljust(BODY_BYTES, "x") for n in range(self._next, self._next + BATCH)]
        self._next += BATCH
        try:
            self.acked.update(self.producer.publish_many(QUEUE, bodies))
        except PublishNotReplicated as exc:  # queued on the master, not acknowledged
            self.not_replicated.update(exc.message_ids)


def _undelivered_bytes(master: redis.Redis) -> int:
    """What the master holds for its replica, not yet taken by the kernel (the replica connection's omem)."""
    replicas = cast(list[dict[str, Any]], master.client_list(_type="replica"))
    assert len(replicas) == 1, f"the master lists {len(replicas)} replica connections"
    return int(replicas[0]["omem"])


def _fill(publisher: _Publisher, master: redis.Redis) -> int:
    """Publish batches (one at least) until the master holds UNDELIVERED_BYTES for the
    stopped replica; return the bytes of bodies published."""
    published = 0
    while True:
        publisher.batch()
        published += BATCH * BODY_BYTES
        held = _undelivered_bytes(master)
        if held >= UNDELIVERED_BYTES:
            return published
        assert published < MAX_STOPPED_BYTES, (
            f"{published} bytes published to a stopped replica, and the master holds only {held} for it")


def _queued_ids(client: redis.Redis) -> set[str]:
    """The ids of the messages in the queue's pending list (read a page at a time)."""
    ids: set[str] = set()
    for first in range(0, int(client.llen(KEYS.pending)), _PAGE):
        for frame in cast(list[bytes], client.lrange(KEYS.pending, first, first + _PAGE - 1)):
            mid = peek_id(frame)
            assert mid is not None, f"a frame without an id: {frame[:60]!r}"
            ids.add(mid)
    return ids


def run_lagging(group: SentinelTopology, wait_replicas: int) -> LagResult:
    """Publish BATCHES_BEFORE batches, SIGSTOP the replica, publish until the master holds
    UNDELIVERED_BYTES for it, SIGKILL the master, SIGCONT the replica, wait for the
    sentinels to fail over to it, and count what the promoted master lacks."""
    started = time.monotonic()
    master = group.client(group.master)
    replica_pid = group.replica.pid
    assert replica_pid is not None, "the replica is not running"
    with Producer(group.url, wait_replicas=wait_replicas, wait_timeout=WAIT_TIMEOUT_S) as producer:
        publisher = _Publisher(producer)
        for _ in range(BATCHES_BEFORE):
            publisher.batch()
        acked_before = len(publisher.acked)
        os.kill(replica_pid, signal.SIGSTOP)
        try:
            stopped_bytes = _fill(publisher, master)
            undelivered = _undelivered_bytes(master)
            offset_at_kill = int(master.info("replication")["master_repl_offset"])
            group.kill_master()
            killed_at = time.monotonic()
        finally:  # also on failure: a stopped replica would hold up the fixture's SIGTERM for 10 s
            os.kill(replica_pid, signal.SIGCONT)
    promoted_at = wait_for(lambda: group.role(group.replica) == "master" and time.monotonic(), FAILOVER_TIMEOUT_S,
                           message="the sentinels did not promote the replica")
    group.wait_failover()
    promoted = group.client(group.replica)
    kept = _queued_ids(promoted)
    # Promotion keeps the old stream's offset + 1 as second_repl_offset: how far the replica had read it.
    stream_lost = offset_at_kill - (int(promoted.info("replication")["second_repl_offset"]) - 1)
    return LagResult(
        topology="sentinel", wait_replicas=wait_replicas,
        published=len(publisher.acked) + len(publisher.not_replicated), acknowledged=len(publisher.acked),
        acknowledged_before_stop=acked_before, not_replicated=len(publisher.not_replicated),
        not_replicated_kept=len(publisher.not_replicated & kept), lost=len(publisher.acked - kept),
        stopped_bytes=stopped_bytes, undelivered_bytes_at_kill=undelivered, stream_lost_bytes=stream_lost,
        kill_to_promoted_s=round(promoted_at - killed_at, 3), seconds=round(time.monotonic() - started, 1))


def report(result: LagResult, path: Path) -> None:
    """Print the run's figures and append them to ``path`` as one JSON line."""
    print(f"\nlagging replica ({path}): {result.line()}")
    with path.open("a") as f:
        f.write(result.line() + "\n")
