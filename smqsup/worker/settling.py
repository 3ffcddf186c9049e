"""The outcomes a consumer has not yet recorded in Redis, and the one round
trip that records them (ack.lua, nack.lua) and takes what there is room for."""

from __future__ import annotations

import collections
import logging
import operator
import time
from collections.abc import Sequence
from typing import Any, Optional

from smqsup import defaults, framing
from smqsup.errors import BrokerError
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.worker.consumer_state import OK, Attempt, ConsumerStats, Identity, Outcome
from smqsup.worker.fetching import Fetcher, Taken

log = logging.getLogger(__name__)

_OUTCOME = operator.attrgetter("outcome")
_FRAME = operator.attrgetter("frame")


class Settler:
    """Records outcomes. ``finished`` holds the attempts whose outcome is
    drawn and not yet recorded, in the order they ended; an attempt leaves
    it only once Redis took its script (after a failed round trip the
    recovery finds out which ran).

    Each settle folds the take of a successor while there is room (the
    scripts' fetch_next), so a busy queue costs one round trip per batch of
    finished messages: per message, at concurrency 1."""

    def __init__(self, broker: Broker, identity: Identity, stats: ConsumerStats, fetcher: Fetcher) -> None:
        self.broker = broker
        self.identity = identity
        self.stats = stats
        self.fetcher = fetcher
        self.finished: list[Attempt] = []
        self._counted = broker.stats  # whether ack.lua counts in the queue counters (fixed per broker)
        self._ends_due = False  # batch members' ends wait in the outbox (flush_ends)
        self._next_ends = 0.0  # (monotonic) not before then, but when the consumer is about to wait

    def exchange(self, room: int, poll: bool = False, give_back: Sequence[bytes] = ()) -> list[Taken]:
        """Record every finished outcome, give back ``give_back`` (frames
        never started, free), take up to ``room`` frames, in one round trip;
        the frames taken. ``poll``: a look is due (the paused queue's, or
        one while frames wait to start): a script says the paused flag even
        with nothing to settle or take."""
        finished = self.finished
        if acks := self._batched(room):
            return self._batch(room, poll, give_back, acks)
        f = self.fetcher
        # The first ``fetching`` settles each take a successor (fetch_next).
        fetching = 0 if f.paused or room <= 0 else min(room, len(finished))
        keys, cid = f.keys, self.identity.consumer_id
        calls = _opening(keys, cid, give_back)
        given = len(calls)
        calls += [self._settle(keys, cid, att, i < fetching) for i, att in enumerate(finished)]
        # Fill the rest while the queue had work (the last fetch came back
        # full), or when no script has looked since the last blocking fetch;
        # while paused, only as the paused poll asks.
        room -= fetching
        take = self._take_count(room, poll)
        took = bool(take) or (poll and not calls)  # asked to look: a take of none says the paused flag
        if took:
            calls.append(scripts.take(keys, cid, take, f.rate))
        if not calls:
            return []
        results = self.broker.messages.exchange(f.name, calls)[given:]
        # The last script that looked for work (checked the registration, the
        # priority set, the paused flag: includes/ready.lua) says whether a
        # BLMOVE is safe next: only if it found none (Fetcher.found_empty); one
        # that found work says the queue may have more: the next round takes.
        frames = self._read(finished, results, fetching)
        finished.clear()  # (only now: Redis took them all)
        if took:
            frames.extend(self._took(results[-1], take > 0))
        elif fetching:
            last = results[fetching - 1]  # the last script that looked for work
            f.found_empty = last.next_frame is None and not last.wait_us and not self.identity.lost and not f.paused
        return frames

    def _settle(self, keys: QueueKeys, cid: str, att: Attempt, fetch: bool) -> scripts.Call[Any]:
        """The ack or nack of one finished attempt (``fetch``: taking a successor)."""
        outcome = att.outcome
        assert outcome is not None
        if outcome.ok:
            return scripts.ack(keys, cid, att.frame, fetch, self._counted, self.fetcher.rate, outcome.result)
        return self._nack(keys, cid, att.frame, outcome, fetch)

    def _batched(self, room: int) -> int:
        """The acks to settle, when one take.lua is to ack them all and take
        for the room (more than one ack, or one and room for more than one
        frame); else 0. Never at concurrency 1 and prefetch 1."""
        finished = self.finished
        if not finished or (room <= 1 and len(finished) == 1):
            return 0
        acks = list(map(_OUTCOME, finished)).count(OK)
        return acks if acks > 1 or (acks and room > 1) else 0

    def _take_count(self, room: int, poll: bool) -> int:
        """Frames a take may ask for now: ``room``, while the queue had work
        (the last fetch came back full) or no script has looked since the
        last blocking fetch; while paused, only as the paused poll asks."""
        f = self.fetcher
        return room if room > 0 and not f.found_empty and (poll or not f.paused) and not f.rate_retry_at else 0

    def _batch(self, room: int, poll: bool, give_back: Sequence[bytes], ok: int) -> list[Taken]:
        """exchange() with more than one ack, or one and room for more than
        one frame: the nacks, then one take.lua that acks the others and
        takes what there is room for."""
        f = self.fetcher
        keys, cid = f.keys, self.identity.consumer_id
        finished = self.finished
        if ok == len(finished):  # (the busy queue's case: every handler returned)
            acks, nacks = list(map(_FRAME, finished)), []
        else:
            acks = [att.frame for att in finished if att.outcome is OK]
            nacks = [att for att in finished if att.outcome is not OK]
        calls = _opening(keys, cid, give_back)
        given = len(calls)
        calls += [self._settle(keys, cid, att, False) for att in nacks]
        # As each ack would take a successor (fetch_next), the batch's take
        # looks whenever there is room, the queue not known paused.
        take = room if room > 0 and (poll or not f.paused) else 0
        calls.append(scripts.take(keys, cid, take, f.rate, acks, self._counted))
        results = self.broker.messages.exchange(f.name, calls)[given:]
        if nacks:
            self._read(nacks, results, 0)
        took: scripts.TakeResult = results[-1]
        for i in took.late:
            self.late(acks[i])
        self.stats.acked += len(acks) - len(took.late)
        self.finished.clear()  # (only now: Redis took them all)
        return self._took(took, take > 0)

    def _nack(self, keys: QueueKeys, cid: str, frame: bytes, outcome: Outcome, fetch: bool) -> scripts.Call[Any]:
        return scripts.nack(keys, cid, frame, retry_threshold=outcome.threshold, delay_ms=outcome.delay_ms,
                            meta=outcome.meta, fetch_next=fetch, dead_event=outcome.dead_event,
                            rate=self.fetcher.rate)

    def _read(self, settled: list[Attempt], results: list[Any], fetching: int) -> list[Taken]:
        """Count and note what the settles said; the frames they took."""
        f = self.fetcher
        frames: list[Taken] = []
        limited = 0  # µs before the rate limit allows a start, when it allowed none
        told = ended = 0  # children of the messages settled, and batch members' ends, waiting in the outbox
        for i, att in enumerate(settled):
            result = results[i]
            if result.__class__ is scripts.AckResult and result.acked:
                self.stats.acked += 1
            else:
                self._count(att, result)
            if not result.registered:
                self.identity.lost = True
            told, ended = told or result.told, ended or result.ended
            if result.paused != f.paused:
                f.note_paused(result.paused)
            if result.next_frame is not None:
                frames.append((result.next_frame, result.wait_us))
            elif i < fetching and result.wait_us:
                limited = result.wait_us
        if limited:
            f.no_start(limited)  # the queue has work: no BLMOVE; the other partitions once all landed
        self._outbox(told, ended)
        return frames

    def _outbox(self, told: int, ended: int) -> None:
        """After settles that left ``told`` children and ``ended`` batch
        members' ends in the outbox: the children now, the ends in bulk."""
        if told:
            self._tell()
        elif ended:
            self._ends_due = True
            self.flush_ends(time.monotonic())

    def flush_ends(self, now: Optional[float] = None) -> None:
        """Count the ends of batch members settled so far on their batches
        (their outbox: store/ops/batches.py), in bulk: at most every
        BATCH_ENDS_S, or at once (``now`` None: the consumer is about to wait)."""
        if self._ends_due and (now is None or now >= self._next_ends):
            self._ends_due = False
            self._next_ends = (time.monotonic() if now is None else now) + defaults.BATCH_ENDS_S
            self._tell()

    def _tell(self) -> None:
        """Tell the children of a message just settled that it ended (its
        outbox: store/ops/workflows.py), now rather than at the collector's next
        look; a failure is the collector's to repair."""
        try:
            self.broker.workflows.drain_all(self.fetcher.name)
        except BrokerError as exc:
            log.warning("queue %s: the children of a message that ended are not told yet (%s); the queue's "
                        "collector tells them", self.fetcher.name, exc)

    def _took(self, take: scripts.TakeResult, looked: bool) -> list[Taken]:
        """Note what take.lua said (``looked``: it was asked for frames); the
        frames it took."""
        if not take.registered:
            self.identity.lost = True
        self._outbox(take.told, take.ended)
        self.fetcher.note_paused(take.paused)
        if take.retry_us:
            self.fetcher.no_start(take.retry_us)
        f = self.fetcher
        # Asked for none, it looked at no list: whether the queue is empty stays unknown.
        f.found_empty = looked and not take.frames and not take.retry_us and not self.identity.lost and not f.paused
        return list(zip(take.frames, take.waits_us))

    def _count(self, att: Attempt, result: "scripts.AckResult | scripts.NackResult") -> None:
        if isinstance(result, scripts.AckResult):
            if result.acked:
                self.stats.acked += 1
            else:
                self.late(att.frame)
        elif result.outcome == scripts.LATE:
            self.late(att.frame)
        elif result.outcome == scripts.DEAD:
            self.stats.dead_lettered += 1
        else:
            self.stats.retried += 1

    def recovered(self, held: "collections.Counter[bytes]") -> None:
        """After a failed round trip, with ``held`` what our list holds that
        nobody runs: keep for the next round each outcome whose frame is
        still there (its script did not run), taking it off ``held``. One
        no longer there was settled before the connection broke, or (the
        consumer declared dead meanwhile) reclaimed: that is counted late."""
        kept: list[Attempt] = []
        registered: "bool | None" = None
        for att in self.finished:  # (left whole if Redis fails us again here)
            if held[att.frame] > 0:
                held[att.frame] -= 1
                kept.append(att)
                continue
            if registered is None:
                registered = self.broker.registry.is_registered(self.fetcher.name, self.identity.consumer_id)
            if not registered:
                # Reclaimed by the collector while Redis was away from us:
                # someone else handles it again.
                self.broker.registry.count_late_ack(self.fetcher.name)
                self.late(att.frame)
                self.identity.lost = True
        self.finished[:] = kept  # (the same list: the consumer holds it)

    def late(self, frame: bytes) -> None:
        """Count a settle that found its message reclaimed (a no-op in Redis)."""
        self.stats.late_acks += 1
        log.warning("queue %s: late ack of message %s by consumer %s: it had been reclaimed; no-op",
                    self.fetcher.name, framing.peek_id(frame), self.identity.consumer_id)


def _opening(keys: QueueKeys, cid: str, give_back: Sequence[bytes]) -> list[scripts.Call[Any]]:
    """A round trip's first call: the frames given back (never started, free), if any."""
    return [scripts.give_back(keys, cid, give_back)] if give_back else []
