"""The reference model: where each message is and how it must end, in plain
Python with no I/O. The intended semantics (DESIGN.md sections 1 and 11):

- a message waits ("ready", or "delayed": scheduled or a retry later),
  is "held" while it has parents that have not all ended, is in one
  consumer's hands ("processing"), or has ended: "done", "dead" (with its
  reason: in the dead-letter list) or "removed" (an operator's removal);
- a held message keeps every option it was published with (its group);
- each failure costs an attempt, past RETRY_THRESHOLD it is dead-lettered;
  a Reject dead-letters at once; a death reclaims at the cost of an attempt,
  a stop gives back free;
- a cancel dead-letters a waiting message "cancelled" at once, and is
  remembered for one in hand (or held) until its end: whatever settles it,
  it ends dead-lettered "cancelled" and never runs again;
- a child whose parents all ended done is released once the outbox is
  drained; one whose parent failed is dead-lettered "dependency failed";
- at most GROUP_LIMIT messages of one group are in hand at once;
- a message lives in one partition of its queue from its publish to its end
  (held, waiting, in hand, dead-lettered), and only a consumer of that
  partition takes it; a message with a group, a partition key or a dedup key
  is in the partition that key picks (CRC-32 of the key, modulo the count:
  a group lives in one partition); the others are spread, their partition
  learned where Redis first shows them; a dedup key holds within the
  partition its message goes to;
- a child published with on_parent_failure="run" is released once its
  parents all ended, whether they succeeded or not;
- a message whose ttl passed while it waited ("ripe") is never handed out:
  a take or promote that meets it dead-letters it "expired" (or "cancelled"
  when its cancel is remembered: a cancel beats expiry); a held child's ttl
  counts from its release.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Optional

from smqsup.keys import logical_name, partition_name
from tests.model.driver import GROUP_LIMIT, PARTITIONED, PARTITIONS, RETRY_THRESHOLD

WAITING = ("ready", "delayed")
ENDED = ("done", "dead", "removed")


@dataclass
class Msg:
    """One message as the model knows it."""

    id: str
    queue: str
    group: Optional[str] = None
    priority: int = 0
    delay: bool = False
    parents: tuple[str, ...] = ()
    dedup_key: Optional[str] = None
    #: Its ttl's name (driver.TTL_S), or None.
    ttl: Optional[str] = None
    #: A "short" ttl that has passed (by the Redis clock) while it waited.
    ripe: bool = False
    #: A held "short" child: a Redis time past its publish + ttl (its expiry must come after).
    after_ms: int = 0
    place: str = "ready"
    holder: Optional[str] = None
    reason: str = ""
    attempts: int = 0
    cancel_asked: bool = False
    #: Times it was taken after its cancel was asked (1 at most: the look that stops it).
    runs_after_cancel: int = 0
    #: Destroyed by a corrupted key (the model test's break rule): no longer checked.
    lost: bool = False
    #: Whether it has a record (a batch's callback has none).
    tracked: bool = True
    partition_key: Optional[str] = None
    #: on_parent_failure="run": released when its parents ended, whatever their outcome.
    run_anyway: bool = False
    #: The partition it lives in: the one its key picks, else learned from Redis (None until seen).
    partition: Optional[str] = None

    def __post_init__(self) -> None:
        key = self.group or self.partition_key or self.dedup_key
        if self.partition is None and (key is not None or self.queue != PARTITIONED):
            self.partition = partition_of(self.queue, key)

    @property
    def ended(self) -> bool:
        return self.place in ENDED


def partition_of(queue: str, key: Optional[str]) -> str:
    """The partition a message of ``queue`` with (group, partition or
    dedup) ``key`` goes to, as a producer in any language computes it."""
    if queue != PARTITIONED or key is None:
        return queue
    return partition_name(queue, zlib.crc32(key.encode("utf-8")) % PARTITIONS)


class Violation(AssertionError):
    """The store did something the model says it must not."""


def _check(ok: bool, text: str) -> None:
    if not ok:
        raise Violation(text)


@dataclass
class Batch:
    """A closed batch: its members, where its callbacks go, how often each fired."""

    tag: str
    members: tuple[str, ...]
    complete: str
    success: str
    fired: dict[str, int] = field(default_factory=lambda: {"complete": 0, "success": 0})


@dataclass
class Model:
    """Every message of an example, the consumers and what they hold, the pauses."""

    msgs: dict[str, Msg] = field(default_factory=dict)
    consumers: dict[str, str] = field(default_factory=dict)  # cid -> the partition it works
    paused: set[str] = field(default_factory=set)
    paused_groups: set[tuple[str, str]] = field(default_factory=set)
    broken: set[str] = field(default_factory=set)
    batches: dict[str, Batch] = field(default_factory=dict)  # tag -> batch

    # --- publish ---------------------------------------------------------------

    def dedup_holder(self, partition: str, key: Optional[str]) -> Optional[str]:
        """The live message of ``partition`` holding dedup key ``key`` (held
        until done), if any: a key holds within the partition its message
        goes to (one script, one partition)."""
        if key is None:
            return None
        return next((m.id for m in self.msgs.values()
                     if m.partition == partition and m.dedup_key == key and not m.ended and not m.lost), None)

    def publish(self, m: Msg) -> None:
        """A message queued: held while a parent has not ended, else released."""
        self.msgs[m.id] = m
        m.place = "held" if m.parents else self._released_place(m)

    def _released_place(self, m: Msg) -> str:
        return "delayed" if m.delay else "ready"

    # --- consumers ---------------------------------------------------------------

    def in_flight(self, cid: str) -> list[Msg]:
        return [m for m in self.msgs.values() if m.place == "processing" and m.holder == cid]

    def running(self, queue: str, group: str) -> int:
        return sum(1 for m in self.msgs.values()
                   if m.place == "processing" and m.queue == queue and m.group == group)

    def takeable(self, partition: str) -> list[Msg]:
        """What a take on ``partition`` may hand out now."""
        queue = logical_name(partition)
        if queue in self.paused:
            return []
        return [m for m in self.msgs.values() if m.partition == partition and m.place == "ready" and not m.lost
                and not m.ripe
                and (m.group is None or ((queue, m.group) not in self.paused_groups
                                         and self.running(queue, m.group) < GROUP_LIMIT))]

    def taken(self, cid: str, mid: str, group: Optional[str], attempts: int) -> None:
        """``cid`` took ``mid`` (decoded with ``group`` and ``attempts``): it must have been takeable."""
        m = self.msgs.get(mid)
        _check(m is not None, f"take handed out {mid!r}, which the model never published")
        assert m is not None
        _check(not m.ripe, f"{mid} was handed out though its ttl had passed")
        _check(group == m.group, f"{mid} was published in group {m.group!r} but runs in group {group!r}")
        _check(m in self.takeable(self.consumers[cid]), f"{mid} was handed out from place {m.place!r} "
               f"(group {m.group!r} running {self.running(m.queue, m.group) if m.group else 0}, "
               f"paused {m.queue in self.paused})")
        _check(attempts == m.attempts, f"{mid} runs with attempts {attempts}, the model says {m.attempts}")
        if m.cancel_asked:
            m.runs_after_cancel += 1
            _check(m.runs_after_cancel <= 1, f"{mid} runs again after its cancel")
        m.place, m.holder = "processing", cid

    def settled(self, m: Msg, kind: str) -> None:
        """``m`` in hand ended ``kind``: "ack", "fail", "retry_later", "reject",
        "die" (costs an attempt) or "stop" (given back free)."""
        m.holder = None
        if m.cancel_asked:
            self.end(m, "dead", "cancelled")
        elif kind == "ack":
            self.end(m, "done")
        elif kind == "reject":
            self.end(m, "dead", "rejected: no")
        elif kind == "stop":
            m.place = "ready"
        else:
            m.attempts += 1
            reason = "consumer lost" if kind == "die" else "failed"
            if m.attempts > RETRY_THRESHOLD:
                self.end(m, "dead", reason)
            else:
                m.place = "delayed" if kind == "retry_later" else "ready"

    def end(self, m: Msg, place: str, reason: str = "") -> None:
        m.place, m.reason, m.holder = place, reason, None

    # --- operator ----------------------------------------------------------------

    def cancel(self, m: Msg) -> tuple[str, ...]:
        """The answers cancel() may give (an ended message's record state),
        and the model's new state."""
        if m.ended:
            return {"done": ("done",), "removed": ("dead",)}.get(
                m.place, ("cancelled", "dead") if m.reason == "cancelled" else ("dead",))
        if m.place in WAITING:
            self.end(m, "dead", "cancelled")
            return ("cancelled",)
        m.cancel_asked = True
        return ("stopping",)

    def remove(self, m: Msg) -> bool:
        if m.place in WAITING:
            self.end(m, "removed", "removed")
            return True
        return False

    def advance(self) -> None:
        """Every delayed message due and promoted: one whose ttl passed expires."""
        for m in self.msgs.values():
            if m.place == "delayed" and m.ripe:
                self.expire(m)
            elif m.place == "delayed":
                m.place = "ready"

    def expire(self, m: Msg) -> None:
        """A ripe waiting message met by a take or promote (its remembered cancel beats expiry)."""
        self.end(m, "dead", "cancelled" if m.cancel_asked else "expired")

    def break_blocked(self, queue: str) -> None:
        self.broken.add(queue)
        for m in self.msgs.values():
            if m.queue == queue and m.place == "held":
                m.lost = True

    # --- dependencies ------------------------------------------------------------

    def due(self, m: Msg) -> Optional[tuple[str, str]]:
        """For a held message whose parents all ended: the place and reason
        it must go to once told (None while a parent has not ended)."""
        parents = [self.msgs[p] for p in m.parents]
        failed = not m.run_anyway and any(p.ended and p.place != "done" for p in parents)
        if not failed and any(not p.ended for p in parents):
            return None
        if m.cancel_asked:
            return ("dead", "cancelled")  # (its own cancel, remembered, ends it: before any parent's failure)
        return ("dead", "dependency failed") if failed else (self._released_place(m), "")

    # --- batches -------------------------------------------------------------------

    def callbacks_due(self, b: Batch) -> dict[str, int]:
        """How many times each callback of ``b`` must have fired by now, once told."""
        members = [self.msgs[mid] for mid in b.members]
        if not all(m.ended for m in members):
            return {"complete": 0, "success": 0}
        return {"complete": 1, "success": int(all(m.place == "done" for m in members))}

    def fired(self, mid: str, queue: str, body: object) -> None:
        """A message ``mid`` the model never published appeared in ``queue``:
        it must be a callback of a batch due to fire it, firing once."""
        said = body.get("body") if isinstance(body, dict) else None
        tag, kind = (said.get("tag"), said.get("cb")) if isinstance(said, dict) else (None, None)
        b = self.batches.get(tag) if isinstance(tag, str) else None
        _check(b is not None and kind in ("complete", "success"),
               f"Redis holds {mid} in {queue}, which the model never published")
        assert b is not None and isinstance(kind, str)
        _check(logical_name(queue) == getattr(b, kind), f"batch {tag}'s {kind} callback went to {queue}")
        due = self.callbacks_due(b)[kind]
        _check(b.fired[kind] < due, f"batch {tag}'s {kind} callback fired {b.fired[kind] + 1} time(s), "
               f"the model says {due} (members: {[(m, self.msgs[m].place) for m in b.members]})")
        b.fired[kind] += 1
        self.msgs[mid] = Msg(mid, logical_name(queue), tracked=False)
