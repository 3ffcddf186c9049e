"""Wrappers of the scripts that move messages: publish and publish_options
(producers), take, screen, ack and nack (consumers: ack and nack take the
next frame in the same call), promote (the collector), and producer_stats.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from smqsup.keys import QueueKeys, producers_hash, producers_seen
from smqsup.store.scripts.calls import Call, Lock, bytes_or_none, dedup_index, escaped_texts, scripts, with_lock

(_ACK, _NACK, _PROMOTE, _ADVANCE, _PUBLISH, _PUBLISH_OPTIONS, _TAKE, _GIVE_BACK, _SCREEN,
 _PRODUCER_STATS) = SCRIPTS = scripts("ack", "nack", "promote", "advance", "publish", "publish_options", "take",
                                      "give_back", "screen", "producer_stats")

#: nack outcomes, as the script returns them.
LATE, RETRIED, DELAYED, DEAD = 0, 1, 2, 3
#: screen outcomes, as the script returns them (NO_TURN: a group's ticket
#: whose group had no frame to give).
HANDLE, GIVEN_BACK, EXPIRED, RATE_LIMITED, NO_TURN, GONE = 0, 1, 2, 3, 4, -1

#: A queue's limits as the fetch scripts take them: its rate limit (µs
#: between handler starts across the whole queue, its burst, the partitions
#: the consumer works: each partition keeps its share, includes/rate.lua),
#: then its group limits (group_concurrency, 0: none; µs between one
#: group's starts, 0: none; its burst: includes/groups.lua); NO_RATE for a
#: queue without any.
Rate = tuple[int, int, int, int, int, int]
NO_RATE: Rate = (0, 1, 1, 0, 0, 1)


@dataclass(frozen=True)
class AckResult:
    acked: bool  # False: a late ack, the message had been reclaimed
    next_frame: Optional[bytes]
    registered: bool = True  # False: declared dead; stop using this identity
    paused: bool = False  # the queue is paused: nothing was taken
    #: Rate limit: µs to wait before starting next_frame (booked), or with
    #: none taken, before looking again; 0 otherwise.
    wait_us: int = 0
    #: Children of the acked message waiting in its queue's outbox (store/ops/workflows.py).
    told: int = 0
    #: Its end waiting in that outbox for its batch (store/ops/batches.py).
    ended: int = 0


@dataclass(frozen=True)
class NackResult:
    outcome: int  # LATE, RETRIED, DELAYED or DEAD
    next_frame: Optional[bytes]
    registered: bool = True
    paused: bool = False
    wait_us: int = 0  # as AckResult's
    told: int = 0  # as AckResult's (a message dead-lettered)
    ended: int = 0  # as AckResult's


@dataclass(frozen=True)
class TakeResult:
    registered: bool
    frames: tuple[bytes, ...]  # taken, in the order they must be handled
    paused: bool
    #: Rate limit: µs before each frame may start (booked), in its order.
    waits_us: tuple[int, ...] = ()
    #: Rate limit: nothing taken, none could start now: µs before looking again.
    retry_us: int = 0
    #: Positions (0-based) among the acks sent along of those that were late.
    late: tuple[int, ...] = ()
    #: As AckResult's: children told, batch members' ends, now in the queue's outbox.
    told: int = 0
    ended: int = 0

    @property
    def next_frame(self) -> Optional[bytes]:
        return self.frames[0] if self.frames else None


@dataclass(frozen=True)
class PromoteResult:
    moved: int
    wait_ms: int  # until the next delayed or scheduled message is due; -1: none
    expired: int = 0  # due, but past their ttl: dead-lettered


def _wait_of(reply: Any) -> int:
    """A wait the scripts computed, in µs: a Lua number arrives as an int
    (floats are truncated by Redis); anything else counts as 0."""
    return max(0, reply) if isinstance(reply, int) else 0


def _ack_result(reply: Sequence[Any]) -> AckResult:
    if len(reply) == 5:  # (the hot path's early return)
        acked, nxt, registered, paused, wait = reply
        return AckResult(bool(acked), bytes_or_none(nxt), bool(registered), bool(paused), _wait_of(wait))
    acked, nxt, registered, paused, wait, told, ended = reply
    return AckResult(bool(acked), bytes_or_none(nxt), bool(registered), bool(paused), _wait_of(wait), int(told),
                     int(ended))


@functools.lru_cache(maxsize=256)
def _fetch_keys(keys: QueueKeys, consumer_id: str) -> tuple[str, ...]:
    """KEYS[1..20] of ack.lua and take.lua: what includes/fetch_next.lua needs,
    and the cancel set (formed once per consumer: they are sent with every
    message)."""
    return (keys.processing(consumer_id), keys.pending, keys.counters, keys.consumers, keys.priority, keys.paused,
            keys.dead, keys.rate, keys.partitions, keys.tracked, keys.tracked_expiry, keys.events, keys.deps,
            *keys.groups, keys.cancel)


def ack(keys: QueueKeys, consumer_id: str, frame: bytes, fetch_next: bool, count: bool = True,
        rate: Rate = NO_RATE, result: Optional[str] = None) -> Call[AckResult]:
    """Remove ``frame`` from the consumer's list; take the next one if asked
    (booking its start under the queue's ``rate`` limit). ``result``: a
    tracked message's result (JSON text), recorded with its "done"."""
    args: tuple[Any, ...] = (frame, int(fetch_next), consumer_id, int(count), *rate)
    return Call(_ACK, _fetch_keys(keys, consumer_id), args if result is None else (*args, result), _ack_result)


def _take_result(reply: Sequence[Any]) -> TakeResult:
    registered, paused, retry, late, told, ended, *taken = reply
    frames, waits = taken[0::2], taken[1::2]
    return TakeResult(bool(registered), tuple(map(bytes, frames)), bool(paused),
                      tuple(_wait_of(w) for w in waits) if any(waits) else (0,) * len(waits), _wait_of(retry),
                      tuple(i - 1 for i in late) if late else (), int(told), int(ended))


#: Most frames one take call moves (take.lua caps ARGV[2] there too).
TAKE_MAX = 1000


def take(keys: QueueKeys, consumer_id: str, count: int = 1, rate: Rate = NO_RATE,
         acks: Sequence[bytes] = (), count_acks: bool = True) -> Call[TakeResult]:
    """Ack ``acks`` (frames the consumer finished; ``count_acks``: in the
    queue's counters), then take up to ``count`` ready frames (0 to
    TAKE_MAX; 0: only look at the registration and the paused flag) into
    the consumer's list without blocking, in the order they must be
    handled (each start booked under the queue's ``rate`` limit); never
    more than its share of the ready frames, rounded up, among the
    consumers registered on the queue."""
    return Call(_TAKE, _fetch_keys(keys, consumer_id),
                (consumer_id, max(0, min(count, TAKE_MAX)), *rate, int(count_acks), *acks), _take_result)


def give_back(keys: QueueKeys, consumer_id: str, frames: Sequence[bytes]) -> Call[int]:
    """Return ``frames`` (taken in this order, never started) from the
    consumer's list to the consuming end of pending, free of cost; how many
    were still there to go back."""
    return Call(_GIVE_BACK, (keys.processing(consumer_id), keys.pending, keys.tracked, keys.tracked_expiry,
                             keys.events, *keys.groups, keys.cancel, keys.dead, keys.counters, keys.deps),
                tuple(frames), int)


def _screen_result(reply: Sequence[Any]) -> tuple[int, int, Optional[bytes]]:
    verdict, wait, *redeemed = reply
    return int(verdict), _wait_of(wait), bytes(redeemed[0]) if redeemed else None


def screen(keys: QueueKeys, consumer_id: str, frame: bytes,
           rate: Rate = NO_RATE) -> Call[tuple[int, int, Optional[bytes]]]:
    """(HANDLE, GIVEN_BACK (queue paused), EXPIRED, RATE_LIMITED (given
    back), NO_TURN or GONE; µs to wait before the start or the next look;
    the frame a group's ticket was redeemed for, which took its place, or
    None) for a frame a blocking fetch just moved into the consumer's list."""
    return Call(_SCREEN, (keys.processing(consumer_id), keys.pending, keys.dead, keys.counters, keys.paused,
                          keys.rate, keys.partitions, keys.tracked, keys.tracked_expiry, keys.events, keys.deps,
                          *keys.groups, keys.cancel),
                (frame, *rate),
                _screen_result)


def _nack_result(reply: Sequence[Any]) -> NackResult:
    outcome, nxt, registered, paused, wait, told, ended = reply
    return NackResult(int(outcome), bytes_or_none(nxt), bool(registered), bool(paused), _wait_of(wait), int(told),
                      int(ended))


def nack(keys: QueueKeys, consumer_id: str, frame: bytes, *, retry_threshold: int, delay_ms: int, meta: str,
         fetch_next: bool, dead_event: str = "", rate: Rate = NO_RATE) -> Call[NackResult]:
    """Count a failed attempt of ``frame``: retry, delay or dead-letter it
    (counting ``dead_event`` too, e.g. "rejected", when dead-lettered)."""
    return Call(_NACK, (keys.processing(consumer_id), keys.pending, keys.delayed, keys.dead, keys.counters,
                        keys.consumers, keys.priority, keys.priority_seq, keys.paused, keys.rate, keys.partitions,
                        keys.tracked, keys.tracked_expiry, keys.events, keys.deps, *keys.groups, keys.cancel,
                        keys.ready_at),
                (frame, retry_threshold, max(0, int(delay_ms)), meta, int(fetch_next), consumer_id, dead_event,
                 *rate), _nack_result)


def _promote_result(reply: Sequence[Any]) -> PromoteResult:
    moved, wait_ms, expired = reply
    return PromoteResult(int(moved), int(wait_ms), int(expired))


def promote(keys: QueueKeys, *, batch: int, lock: Optional[Lock] = None) -> Call[PromoteResult]:
    """Make due retries and scheduled messages ready, at most ``batch`` of them."""
    key_list, args = with_lock([keys.delayed, keys.scheduled, keys.pending, keys.priority, keys.priority_seq,
                                keys.dead, keys.counters, keys.tracked, keys.tracked_expiry, keys.events, keys.deps,
                                *keys.groups, keys.ready_at, keys.cancel],
                               [batch],
                               lock)
    return Call(_PROMOTE, key_list, args, _promote_result)


def advance(keys: QueueKeys, ahead_ms: Optional[int]) -> Call[int]:
    """Bring the retries and scheduled messages due within ``ahead_ms``
    (None: all of them) that much earlier (the testing kit's time moved
    forward); how many came earlier."""
    return Call(_ADVANCE, [keys.delayed, keys.scheduled], ["all" if ahead_ms is None else max(0, ahead_ms)], int)


@dataclass(frozen=True)
class Options:
    """What publish_options.lua applies to every message of one call, in ms."""

    priority: int = 0
    delay_ms: int = -1  # -1: none
    at_ms: int = -1  # -1: none
    ttl_ms: int = 0  # 0: none
    dedup_ttl_ms: int = 86_400_000
    result_ttl_s: int = 0  # 0: not tracked
    events_max: int = 0  # 0: no events; else the event stream's cap
    dedup_until: str = ""  # "": a dedup key holds for dedup_ttl_ms; "done" / "start": until its message ends / starts
    link: str = ""  # "": none; "HOME\tBID": each message is a member of batch BID (store/ops/batches.py)
    group: bytes = b""  # b"": none; else every message's group (UTF-8, 1 to GROUP_NAME_MAX_BYTES)


def _id_pairs(reply: Sequence[Any]) -> list[tuple[str, bool]]:
    return [(escaped_texts([reply[i]])[0], bool(reply[i + 1])) for i in range(0, len(reply), 2)]


def publish_options(keys: QueueKeys, items: Sequence[tuple[str, bytes, Optional[str]]], options: Options,
                    count: bool = True) -> Call[list[tuple[str, bool]]]:
    """Publish (id, payload, dedup key or None) items with ``options``;
    per item (the id queued, True) or (the id holding its dedup key, False)."""
    key_list = [keys.pending, keys.counters, keys.priority, keys.priority_seq, keys.scheduled, keys.tracked,
                keys.tracked_expiry, keys.events, keys.deps, *keys.groups]
    args: list[Any] = [int(count), options.priority, options.delay_ms, options.at_ms, options.ttl_ms,
                       options.dedup_ttl_ms, options.result_ttl_s, options.events_max, options.dedup_until,
                       options.link, options.group]
    for mid, payload, dedup_key in items:
        args += [mid, dedup_index(key_list, keys, dedup_key), payload]
    return Call(_PUBLISH_OPTIONS, key_list, args, _id_pairs)


def publish(keys: QueueKeys, frames: Sequence[bytes], count: bool = True) -> Call[int]:
    """LPUSH ``frames`` (oldest first) and count them; the pending length after."""
    return Call(_PUBLISH, (keys.pending, keys.counters), (int(count), *frames), int)


def producer_stats(namespace: str, producer_id: str, info: str, forget_after_ms: int) -> Call[int]:
    """Record one producer's statistics (JSON); forget producers silent for
    ``forget_after_ms``; how many were forgotten."""
    return Call(_PRODUCER_STATS, (producers_hash(namespace), producers_seen(namespace)),
                (producer_id, info, forget_after_ms), int)
