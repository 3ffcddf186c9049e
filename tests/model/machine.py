"""StoreMachine: hypothesis's RuleBasedStateMachine driving the real store
(driver.Driver) and the reference model (model.Model) side by side, the
invariants (checks.py) after every step. A failure shrinks to a short
sequence of these rules with their arguments, the model's view noted."""

from __future__ import annotations

import json
from typing import Any, Optional

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, precondition, rule

from smqsup.keys import partition_name
from tests.model.checks import adopt_callbacks, check, expire, sync, view
from tests.model.driver import PARTITIONED, SHORT_TTL_MS, Driver, Taken
from tests.model.model import WAITING, Batch, Model, Msg, Violation, partition_of

QUEUES = ("a", "b")
#: Consumer slots and the partition each works: queue PARTITIONED's first
#: partition has two (its group limit is shared), its second one; a slot's
#: consumer gets a new id each time it dies or stops ("a1-2" after "a1-1").
SLOT_PARTITIONS = {"a1": PARTITIONED, "a2": PARTITIONED, "a3": partition_name(PARTITIONED, 1), "b1": "b"}
SLOTS = tuple(SLOT_PARTITIONS)
GROUPS = ("g", "h")

queues = st.sampled_from(QUEUES)
slots = st.sampled_from(SLOTS)
groups = st.sampled_from((None, *GROUPS))
priorities = st.sampled_from((0, 5))
partition_keys = st.sampled_from((None, "p", "t"))  # (CRC-32 % 2: "p" 1, "t" 0)


class StoreMachine(RuleBasedStateMachine):
    """One example: an empty Redis, the model, and the consumers' hands."""

    #: Set by runner.machine_for: the one driver (and redis-server) all examples share.
    driver: Driver
    messages = Bundle("messages")

    def __init__(self) -> None:
        super().__init__()
        self.driver.reset()
        self.model = Model()
        self.hands: dict[str, list[Taken]] = {}
        self.cids: dict[str, str] = {}
        self.generation: dict[str, int] = {}
        self.published = 0
        self.drained = False
        #: A take that gave nothing though some may run: (queue, those, the ripe it may have met).
        self.met: Optional[tuple[str, list[str], list[str]]] = None
        for slot in SLOTS:
            self._register(slot)

    def _register(self, slot: str) -> None:
        self.generation[slot] = self.generation.get(slot, 0) + 1
        cid = self.cids[slot] = f"{slot}-{self.generation[slot]}"
        self.hands[cid] = []
        self.model.consumers[cid] = SLOT_PARTITIONS[slot]
        self.driver.register(SLOT_PARTITIONS[slot], cid)

    # --- producers -----------------------------------------------------------------

    @initialize(target=messages, first=st.lists(st.tuples(queues, groups, priorities, st.booleans(),
                                                          st.sampled_from((None, 0, 1))), min_size=1, max_size=4))
    def seed(self, first: list[tuple[str, Optional[str], int, bool, Optional[int]]]) -> Any:
        """The example opens with a few messages (queue, group, priority,
        delay, and the index of an earlier one it waits for, or None) that
        later ones may wait for."""
        ids: list[str] = []
        for q, g, p, d, parent in first:
            parents = [ids[parent]] if parent is not None and parent < len(ids) else []
            ids.append(self.publish(q, g, p, d and not parents, parents, None, None, None, False))
        return multiple(*ids)

    @rule(target=messages, queue=queues, group=groups, priority=priorities,
          delay=st.booleans(), parents=st.lists(messages, max_size=2, unique=True),
          dedup=st.sampled_from((None, "k")), ttl=st.sampled_from((None, "long", "short")),
          partition_key=partition_keys, run_anyway=st.booleans())
    def publish(self, queue: str, group: Optional[str], priority: int, delay: bool, parents: list[str],
                dedup: Optional[str], ttl: Optional[str], partition_key: Optional[str], run_anyway: bool) -> Any:
        """A tracked message with these options (``run_anyway``: on_parent_failure="run")."""
        if group is not None:
            partition_key = None  # (refused with a group: a group lives in the partition its name picks)
        if queue in self.model.broken:
            parents = []  # (a hold there cannot be written: the break rule's loss is not this one's)
        if parents:
            dedup = None  # (refused with depends_on: a held message's key holds for its dedup_ttl)
        self.published += 1
        mid = f"m{self.published}"
        holder = self.model.dedup_holder(partition_of(queue, group or partition_key or dedup), dedup)
        got = self.driver.publish(queue, mid, group=group, priority=priority, delay=delay,
                                  parents=[(self.model.msgs[p].queue, p) for p in parents], dedup_key=dedup,
                                  ttl=ttl, partition_key=partition_key, run_anyway=run_anyway and bool(parents))
        if holder is not None:
            if got != holder:
                raise Violation(f"dedup key {dedup!r} is held by {holder}, but the publish queued {got}")
            return multiple()
        if got != mid:
            raise Violation(f"the publish of {mid} answered {got}")
        m = Msg(mid, queue, group, priority, delay, tuple(parents), dedup, ttl, partition_key=partition_key,
                run_anyway=run_anyway and bool(parents))
        self.model.publish(m)
        if ttl == "short" and m.place == "held" and self.model.due(m) is None:
            # (its ttl passes now, as it waits for a parent: it must count from its release)
            m.after_ms = self.driver.wait_past(self.driver.now_ms() + SHORT_TTL_MS)
        return mid

    @rule(target=messages, members=st.lists(st.tuples(queues, groups), min_size=1, max_size=2), complete=queues,
          success=queues)
    def batch(self, members: list[tuple[str, Optional[str]]], complete: str, success: str) -> Any:
        """A batch of messages (queue, group), closed; its callbacks go to ``complete`` and ``success``."""
        tag = f"B{len(self.model.batches) + 1}"
        ids = self.driver.batch(tag, complete, success, members)
        for mid, (queue, group) in zip(ids, members):
            self.model.publish(Msg(mid, queue, group))
        self.model.batches[tag] = Batch(tag, tuple(ids), complete, success)
        return multiple(*ids)

    # --- consumers -----------------------------------------------------------------

    @rule(slot=slots)
    def take(self, slot: str) -> None:
        self._take(slot)

    @rule(slot=slots)
    def handle(self, slot: str) -> None:
        """The consumer takes a message and its handler returns (the common
        path, in one step: what lets chains of children run within an example)."""
        taken = self._take(slot)
        if taken is not None:
            self.hands[self.cids[slot]].remove(taken)
            self._settle(slot, taken, "ack")

    def _take(self, slot: str) -> Optional[Taken]:
        cid, part = self.cids[slot], SLOT_PARTITIONS[slot]
        taken, _ = self.driver.take(part, cid)
        if taken is None:
            ready = [m.id for m in self.model.takeable(part)]
            ripe = [m.id for m in self.model.msgs.values() if m.partition == part and m.ripe and m.place in WAITING]
            if ready and not ripe:
                raise Violation(f"a take on {part} gave nothing, though {ready} may run")
            if ready:  # (a take that meets an expired message may give nothing: it must have ended one)
                self.met = (part, ready, ripe)
            return None
        self.model.taken(cid, taken.msg.id, taken.msg.group, taken.msg.attempts)
        self.hands[cid].append(taken)
        return taken

    @rule(slot=slots, outcome=st.sampled_from(("ack", "fail", "retry_later", "reject")))
    def settle(self, slot: str, outcome: str) -> None:
        """The handler of the consumer's oldest message returned (ack), raised
        (fail: retried at once), raised Retry (later) or Reject."""
        cid = self.cids[slot]
        if not self.hands[cid]:
            return
        self._settle(slot, self.hands[cid].pop(0), outcome)

    def _settle(self, slot: str, taken: Taken, outcome: str) -> None:
        cid = self.cids[slot]
        part = SLOT_PARTITIONS[slot]
        if outcome == "ack":
            self.driver.ack(part, cid, taken.frame, json.dumps({"id": taken.msg.id}))
        else:
            self.driver.nack(part, cid, taken.frame, outcome, taken.msg.id)
        self.model.settled(self.model.msgs[taken.msg.id], outcome)

    @rule(slot=slots, how=st.sampled_from(("die", "lost", "stop")))
    def leave(self, slot: str, how: str) -> None:
        """The consumer's process died with what it holds (reclaimed by its
        supervisor, an attempt each), its host went silent (reclaimed by the
        collector once its heartbeat is stale, an attempt each), or it
        stopped as asked (given back free); it comes back under a new id."""
        cid = self.cids[slot]
        leaving = {"die": self.driver.die, "lost": self.driver.lose, "stop": self.driver.stop}[how]
        leaving(SLOT_PARTITIONS[slot], cid)
        for taken in self.hands.pop(cid):
            self.model.settled(self.model.msgs[taken.msg.id], "stop" if how == "stop" else "die")
        self._register(slot)

    # --- operators, the collector, the clock ------------------------------------------

    @rule(mid=messages)
    def cancel(self, mid: str) -> None:
        m = self.model.msgs[mid]
        if m.lost:
            return
        answer = self.driver.cancel(m.queue, mid)
        expected = self.model.cancel(m)
        if answer not in expected:
            raise Violation(f"cancel of {mid} answered {answer!r}; the model says {' or '.join(expected)}")

    @rule(slot=slots)
    def cancel_in_hand(self, slot: str) -> None:
        """An operator cancels the message a consumer took first (drawn
        from the bundle, a message is seldom in hand: this seam is where a
        cancel races its handler's end)."""
        hand = self.hands[self.cids[slot]]
        if hand:
            self.cancel(hand[0].msg.id)

    @rule(mid=messages)
    def remove(self, mid: str) -> None:
        m = self.model.msgs[mid]
        if m.lost:
            return
        removed = self.driver.remove(m.queue, mid)
        if removed != self.model.remove(m):
            raise Violation(f"remove of {mid} (model: {m.place}) answered {removed}")

    @rule(queue=queues, group=st.sampled_from((None, *GROUPS)), paused=st.booleans())
    def pause(self, queue: str, group: Optional[str], paused: bool) -> None:
        """An operator pauses or resumes the queue, or one group of it."""
        if group is None:
            self.driver.pause(queue, paused)
            (self.model.paused.add if paused else self.model.paused.discard)(queue)
        else:
            self.driver.pause_group(queue, group, paused)
            (self.model.paused_groups.add if paused else self.model.paused_groups.discard)((queue, group))

    @rule()
    def collect(self) -> None:
        """The collector's round: promote, then drain every outbox."""
        self.driver.collect()
        self.drained = True

    @rule()
    def advance(self) -> None:
        """The clock moved past every delay (the testing kit's move_time=True)."""
        self.driver.advance()
        self.model.advance()

    @precondition(lambda self: not self.model.broken)
    @rule(queue=queues)
    def break_blocked(self, queue: str) -> None:
        """A queue's blocked key turned into a string (its held messages are lost)."""
        self.driver.break_blocked(queue)
        self.model.break_blocked(queue)

    # --- after every step -----------------------------------------------------------

    @invariant()
    def agrees_with_redis(self) -> None:
        model = self.model
        tracked = [(m.queue, m.id) for m in model.msgs.values() if m.ended or m.ripe or m.place == "held"]
        seen = self.driver.seen(model.consumers, tracked)
        try:
            # (expiries first: a parent a take met expired has ended before its children are judged)
            expire(model, seen)
            sync(model, seen, self.drained)
            self._met_one()
            adopt_callbacks(model, seen, self.drained)
            check(model, seen)
        except Violation:
            note(view(model))
            raise
        finally:
            self.drained = False
        self._ripen()

    def _met_one(self) -> None:
        met, self.met = self.met, None
        if met and not any(self.model.msgs[mid].ended for mid in met[2]):
            raise Violation(f"a take on {met[0]} gave nothing, though {met[1]} may run and it expired none of {met[2]}")

    def _ripen(self) -> None:
        """Wait out the short ttl of every message that began to wait in this step: ripe by the next."""
        young = [m for m in self.model.msgs.values()
                 if m.ttl == "short" and not m.ripe and not m.lost and m.place in WAITING]
        if young:
            self.driver.wait_past(self.driver.now_ms() + SHORT_TTL_MS)
            for m in young:
                m.ripe = True
