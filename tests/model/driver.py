"""The real store, driven as the model test's actors would drive it: a
producer (the Producer), consumers simulated in this process (take.lua,
ack.lua, nack.lua with consumer ids, as worker/settling.py sends them), a
consumer's death (reclaim.lua, as its supervisor reclaims it, or
reclaim_stale.lua, as the elected collector does once its heartbeat is
stale), a graceful stop (its list given back free), the collector's promote
and outbox drain under its lock, an operator's cancel, remove and pauses,
and the testing kit's clock moved forward (advance.lua). Queue
PARTITIONED has two partitions, each consumer works one of them; the
producer routes, the operators' calls find the partition, as they do for
users. ``seen()`` reads where Redis holds each message, and in which
partition."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from smqsup import deadletter, framing, message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys, logical_name, partition_names
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.store.core import event_entries as events
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.store.core.declared import Declared
from smqsup.store.ops.tracking import Record, parse
from smqsup.views import browse

NAMESPACE = "model"
#: Failed attempts a message may have before the next failure dead-letters it.
RETRY_THRESHOLD = 1
#: Every queue's group_concurrency (the limit the model checks).
GROUP_LIMIT = 1
#: A queue with group_concurrency GROUP_LIMIT and no rate limit, as the fetch scripts take it.
RATE: scripts.Rate = (0, 1, 1, GROUP_LIMIT, 0, 1)
#: How long every message's record is kept (all are tracked: any may be a parent).
RESULT_TTL_S = 3600
#: A retry's delay when the handler asks for one later (the clock is moved past it).
LATER_MS = 60_000
#: A publish's ttl by name: "long" never passes within an example (the kit's
#: advance moves due times, not the clock); "short" has passed by the next step.
TTL_S = {"long": 3600.0, "short": 0.001}
SHORT_TTL_MS = 1
#: The queue whose consumers declare lifecycle events (the other stays plain), and its stream's cap.
EVENTS_QUEUE = "b"
EVENTS_MAX = 100_000
#: The queue split into PARTITIONS partitions (the other has one).
PARTITIONED = "a"
PARTITIONS = 2
#: The collector's lock token (every queue's lock is taken by the one collector of the model).
LOCK_TOKEN = "model-collector"


@dataclass(frozen=True)
class Taken:
    """A frame a consumer took, and the message it decodes to."""

    frame: bytes
    msg: message.Message


@dataclass
class Seen:
    """Where Redis holds each message: id -> the places it is in ("ready",
    "delayed", "held", "processing:CID", "dead"), the reason of each dead
    letter, the records of the messages asked for."""

    places: dict[str, list[str]] = field(default_factory=dict)
    #: The partitions each message was seen in (one, unless it moved: a finding).
    partitions: dict[str, set[str]] = field(default_factory=dict)
    dead_reasons: dict[str, list[str]] = field(default_factory=dict)
    records: dict[str, Optional[Record]] = field(default_factory=dict)
    #: The frame of each message seen waiting (a batch's callback is known by its body).
    frames: dict[str, bytes] = field(default_factory=dict)
    #: The events of EVENTS_QUEUE's stream: id -> their names, in the stream's order.
    events: dict[str, list[str]] = field(default_factory=dict)

    def add(self, mid: Optional[str], place: str, partition: str, frame: bytes = b"") -> None:
        self.places.setdefault(mid or "<unreadable>", []).append(place)
        self.partitions.setdefault(mid or "<unreadable>", set()).add(partition)
        if frame and mid:
            self.frames[mid] = frame


def _failure_meta(kind: str, mid: str, cid: str) -> tuple[str, int, int, str]:
    """nack.lua's (meta, threshold, delay_ms, dead_event) for an attempt that
    ended ``kind``, as worker/outcomes.py's OutcomeDecider draws them."""
    if kind == "reject":
        return (scripts.meta_json("rejected: no", error_type="Reject", message_id=mid, consumer=cid), -1, 0,
                "rejected")
    delay = LATER_MS if kind == "retry_later" else 0
    return scripts.meta_json("failed", error_type="ValueError", message_id=mid, consumer=cid), RETRY_THRESHOLD, delay, ""


class Driver:
    """The actors of one example, on the redis-server at ``url``."""

    def __init__(self, url: str, queues: Iterable[str]) -> None:
        self.queues = tuple(queues)
        #: Every partition of every queue, the queues' own names first.
        self.partitions = tuple(p for q in self.queues
                                for p in partition_names(q, PARTITIONS if q == PARTITIONED else 1))
        self.broker = Broker(url, NAMESPACE, client_name="smqsup-model")
        self.producer = Producer(url, NAMESPACE)

    def close(self) -> None:
        self.producer.close()
        self.broker.close()

    def reset(self) -> None:
        """An empty Redis for the next example (the server is the model test's own)."""
        self.broker.client.flushall()
        self.broker.queues.declare_options(EVENTS_QUEUE, Declared(events_max=EVENTS_MAX))
        self.broker.queues.declare_partitions(PARTITIONED, PARTITIONS)

    def keys(self, queue: str) -> QueueKeys:
        return self.broker.keys(queue)

    # --- producer and operator -------------------------------------------------

    def publish(self, queue: str, mid: str, *, group: Optional[str], priority: int, delay: bool,
                parents: Iterable[tuple[str, str]], dedup_key: Optional[str], ttl: Optional[str] = None,
                partition_key: Optional[str] = None, run_anyway: bool = False) -> str:
        """Publish one tracked message (``delay``: an hour ahead; ``ttl``: a
        name of TTL_S; ``run_anyway``: on_parent_failure="run"); the id
        queued, or the id that holds ``dedup_key`` (held until done)."""
        depends = list(parents) or None
        return self.producer.publish(queue, {"n": mid}, message_id=mid, group=group, priority=priority,
                                     delay=3600 if delay else None, result_ttl=RESULT_TTL_S, depends_on=depends,
                                     dedup_key=dedup_key, dedup_until="done" if dedup_key else None,
                                     ttl=TTL_S[ttl] if ttl else None, partition_key=partition_key,
                                     on_parent_failure="run" if run_anyway else "fail")

    def batch(self, tag: str, complete: str, success: str, members: Iterable[tuple[str, Optional[str]]]) -> list[str]:
        """A closed batch of tracked ``members`` (queue, group) whose
        callbacks go to ``complete`` and ``success`` with body {"tag": tag,
        "cb": "complete" or "success"}; the members' ids."""
        with self.producer.batch(on_complete=(complete, {"tag": tag, "cb": "complete"}),
                                 on_success=(success, {"tag": tag, "cb": "success"})) as batch:
            return [batch.publish(queue, {"n": tag}, group=group, result_ttl=RESULT_TTL_S) for queue, group in members]

    def cancel(self, queue: str, mid: str) -> str:
        return self.producer.cancel(queue, mid)

    def remove(self, queue: str, mid: str) -> bool:
        """Remove waiting message ``mid`` as `smqsup remove` does (each
        partition in turn); whether it was removed."""
        return browse.remove(self.broker, queue, [mid])[mid]

    def pause(self, queue: str, paused: bool) -> None:
        (self.broker.queues.pause(queue, "model") if paused else self.broker.queues.resume(queue))

    def pause_group(self, queue: str, group: str, paused: bool) -> None:
        groups = self.broker.groups
        (groups.pause(queue, group, "model") if paused else groups.resume(queue, group))

    def break_blocked(self, queue: str) -> None:
        """Turn the blocked hash of each partition of the queue into a string (its held messages are lost)."""
        for part in self.partitions_of(queue):
            self.broker.client.set(self.keys(part).blocked, "garbage")

    def partitions_of(self, queue: str) -> list[str]:
        return [p for p in self.partitions if logical_name(p) == queue]

    # --- consumers ---------------------------------------------------------------

    def register(self, queue: str, cid: str) -> None:
        self.broker.registry.register_consumer(queue, cid, ConsumerInfo(queue=queue))

    def take(self, queue: str, cid: str) -> tuple[Optional[Taken], bool]:
        """One frame taken for ``cid`` (or None), and whether the queue said it is paused."""
        took = self.broker.messages.take(queue, cid, 1, RATE)
        if not took.frames:
            return None, took.paused
        frame = took.frames[0]
        return Taken(frame, message.decode(frame)), took.paused

    def ack(self, queue: str, cid: str, frame: bytes, result: str) -> scripts.AckResult:
        """ack.lua with the handler's result, then the children told at
        once when it left any in the outbox (worker/settling.py)."""
        call = scripts.ack(self.keys(queue), cid, frame, False, True, RATE, result)
        out = self.broker.messages.exchange(queue, [call])[0]
        self._tell(queue, out.told, out.ended)
        return out  # type: ignore[no-any-return]

    def nack(self, queue: str, cid: str, frame: bytes, kind: str, mid: str) -> scripts.NackResult:
        """nack.lua for an attempt that ended ``kind`` ("fail": retry at
        once, "retry_later": Retry with a delay, "reject": Reject)."""
        meta, threshold, delay_ms, event = _failure_meta(kind, mid, cid)
        out = self.broker.messages.nack(queue, cid, frame, retry_threshold=threshold, delay_ms=delay_ms, meta=meta,
                                        fetch_next=False, dead_event=event, rate=RATE)
        self._tell(queue, out.told, out.ended)
        return out

    def _tell(self, queue: str, told: int, ended: int) -> None:
        if told or ended:
            self.broker.workflows.drain_all(queue)

    def die(self, queue: str, cid: str) -> scripts.ReclaimResult:
        """The consumer's process died: its supervisor reclaims its list, each message costing an attempt."""
        return self.broker.registry.reclaim_dead(queue, cid, retry_threshold=RETRY_THRESHOLD, reason="consumer lost")

    def lose(self, queue: str, cid: str) -> scripts.ReclaimResult:
        """The consumer's host went silent: once its heartbeat is stale, the
        elected collector reclaims its list under its lock, each message
        costing an attempt (reclaim_stale.lua)."""
        self.wait_past(self.now_ms() + 1)
        out = self.broker.registry.reclaim_stale(queue, cid, retry_threshold=RETRY_THRESHOLD, reason="consumer lost",
                                                 stale_after_ms=0, lock=self._lock(queue))
        if out.remaining != 0:
            raise AssertionError(f"the collector's reclaim of {cid} left {out.remaining}")
        return out

    def _lock(self, queue: str) -> scripts.Lock:
        """The collector's lock of queue (partition) ``queue``, held by LOCK_TOKEN."""
        key = self.keys(queue).gc_lock
        registry = self.broker.registry
        if not registry.lock_acquire(key, LOCK_TOKEN, 60_000) and not registry.lock_renew(key, LOCK_TOKEN, 60_000):
            raise AssertionError(f"the model's collector could not hold {key}")
        return (key, LOCK_TOKEN)

    def stop(self, queue: str, cid: str) -> scripts.ReclaimResult:
        """The consumer stopped as asked: its list given back free, its registration gone."""
        return self.broker.messages.return_stopped(queue, cid, reason="consumer stopped")

    # --- the collector and the clock ---------------------------------------------

    def collect(self) -> None:
        """The collector's round on every partition: promote what is due (under its lock), drain the outboxes."""
        for part in self.partitions:
            self.broker.messages.promote(part, lock=self._lock(part))
            self.broker.workflows.drain_all(part)

    def advance(self) -> None:
        """The testing kit's move_time=True: every retry and scheduled message due now, promoted."""
        for part in self.partitions:
            if self.broker.messages.advance(part, None):
                while self.broker.messages.promote(part).moved > 0:
                    pass

    def now_ms(self) -> int:
        """The Redis clock (the one a ttl is judged by), in ms."""
        s, us = self.broker.client.time()
        return int(s) * 1000 + int(us) // 1000

    def wait_past(self, ms: int, timeout_s: float = 5.0) -> int:
        """Wait until the Redis clock is past ``ms``; the clock then."""
        deadline = time.monotonic() + timeout_s
        while (now := self.now_ms()) <= ms:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Redis clock did not pass {ms} within {timeout_s} s")
        return now

    # --- what Redis holds ------------------------------------------------------------

    def seen(self, consumers: Iterable[str], tracked: Iterable[tuple[str, str]]) -> Seen:
        """Where every message is, in which partition (in the lists of
        ``consumers``, every id a consumer had), and the records of
        ``tracked`` (queue, id; looked for in each of its partitions): one round trip."""
        pipe: Any = self.broker.client.pipeline(transaction=False)
        asked: list[tuple[str, str, str]] = []
        for part in self.partitions:
            k = self.keys(part)
            for place, key in (("ready", k.priority), ("delayed", k.scheduled), ("delayed", k.delayed),
                               ("group", k.groups[0])):
                pipe.zrange(key, 0, -1)
                asked.append((part, place, ""))
            asked += [(part, "pending", ""), (part, "held", ""), (part, "dead", "")]
            pipe.lrange(k.pending, 0, -1)
            pipe.hgetall(k.blocked)
            pipe.lrange(k.dead, 0, -1)
            for cid in consumers:
                pipe.lrange(k.processing(cid), 0, -1)
                asked.append((part, "processing", cid))
        records = [(part, mid) for queue, mid in tracked for part in self.partitions_of(queue)]
        for part, mid in records:
            pipe.hmget(self.keys(part).tracked, [mid, f"{mid}:r", f"{mid}:p"])
        pipe.xrange(self.keys(EVENTS_QUEUE).events)
        replies = pipe.execute(raise_on_error=False)
        out = Seen()
        for entry_id, fields in replies.pop():
            event = events.parse(EVENTS_QUEUE, entry_id, fields)
            out.events.setdefault(event.message_id, []).append(event.event)
        for (part, place, cid), reply in zip(asked, replies):
            _read(out, part, place, cid, reply)
        for (_, mid), reply in zip(records, replies[len(asked):]):
            record = None if isinstance(reply, Exception) else parse(*reply, None, 0)
            if record is not None or mid not in out.records:
                out.records[mid] = record
        return out


def _read(out: Seen, part: str, place: str, cid: str, reply: Any) -> None:
    """Note where the members of one key's ``reply`` are, in partition
    ``part`` (a key of another type: nothing)."""
    if isinstance(reply, Exception):
        return
    for item in reply:
        if place == "dead":
            letter = deadletter.DeadLetter(item)
            out.add(letter.ref, "dead", part)
            out.dead_reasons.setdefault(letter.ref, []).append(letter.reason)
        elif place == "held":  # (an id -> "D:T:F|frame")
            out.add(item.decode(), "held", part, reply[item].partition(b"|")[2])
        elif place == "group":
            frame = framing.member_frame(item)
            out.add(framing.peek_id(frame), "ready", part, frame)
        elif place != "pending" or not framing.is_ticket(item):
            out.add(framing.peek_id(item), {"processing": f"processing:{cid}", "pending": "ready"}.get(place, place),
                    part, item)
