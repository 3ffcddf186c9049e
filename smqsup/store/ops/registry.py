"""The Redis operations on who consumes: the consumer registry and its
heartbeats, the reclaim of what dead, stale and retired consumers held, the
slots' statistics their supervisors write, and the collector's leader lock.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional, cast

from smqsup import defaults
from smqsup.keys import logical_name, queues_set
from smqsup.store import scripts
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.store.core.failures import wrapped
from smqsup.store.core.replies import LOGGER, UNREACHABLE, ms_of, text
from smqsup.store.sync.session import Session

log = logging.getLogger(LOGGER)


class Registry:
    """Consumers' registration, liveness and reclaim; the leader lock (see
    the module's docstring)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    # --- registration and liveness ----------------------------------------------

    def register_consumer(self, queue: str, consumer_id: str, info: ConsumerInfo) -> None:
        """Enter the consumer in the registry with a first heartbeat."""
        session = self._session
        with wrapped(f"register consumer on {queue!r}"):
            session.client.sadd(queues_set(session.namespace), logical_name(queue))
            scripts.heartbeat(session.keys(queue), [(consumer_id, info.to_json())], register=True).run(session.client)

    def heartbeat(self, beats: Mapping[str, Sequence[tuple[str, ConsumerInfo]]]
                  ) -> tuple[list[tuple[str, str]], dict[str, str], list[tuple[str, scripts.Cancel]]]:
        """Renew the heartbeats of registered consumers, queue -> [(id, info)],
        all queues in one pipelined round trip. Returns (queue, id) of those no
        longer registered (declared dead, they must not go on), queue ->
        error text for the queues whose renewal Redis refused (OOM, a key of
        the wrong type): one queue's refusal is not the others', and (queue,
        cancel) for each message in a consumer's list whose cancel was asked.
        Raises BrokerConnectionError if Redis could not be reached."""
        items = [(q, b) for q, b in beats.items() if b]
        if not items:
            return [], {}, []
        session = self._session
        batch = scripts.Batch(session.client)
        for queue, queue_beats in items:
            batch.add(scripts.heartbeat(session.keys(queue), [(cid, info.to_json()) for cid, info in queue_beats],
                                        register=False))
        with wrapped("heartbeat"):
            replies = session.send(batch)
            unreachable = next((r for r in replies if isinstance(r, UNREACHABLE)), None)
            if unreachable is not None:  # a master of a cluster (renewals are idempotent)
                raise unreachable
        refused = {q: f"heartbeat: Redis error: {r}" for (q, _), r in zip(items, replies) if isinstance(r, Exception)}
        answered = [(q, reply) for (q, _), reply in zip(items, replies) if q not in refused]
        lost = [(q, cid) for q, (unknown, _) in answered for cid in unknown]
        return lost, refused, [(q, cancel) for q, (_, cancels) in answered for cancel in cancels]

    def newest_cancels(self, queues: Sequence[str]) -> dict[str, float]:
        """When the newest cancel of each of ``queues`` was asked (its cancel
        set's highest score, ms, Redis clock; 0: none, or unreadable), all in
        one pipelined round trip. Raises BrokerConnectionError if Redis
        could not be reached."""
        session = self._session
        batch = scripts.Batch(session.client)
        for queue in queues:
            batch.command("ZREVRANGE", session.keys(queue).cancel, 0, 0, "WITHSCORES")
        with wrapped("look for cancels"):
            replies = session.send(batch)
            unreachable = next((r for r in replies if isinstance(r, UNREACHABLE)), None)
            if unreachable is not None:
                raise unreachable
        return {q: _newest(r) for q, r in zip(queues, replies)}

    def stale_consumers(self, queue: str, timeout_ms: int, limit: int = 100) -> tuple[list[str], list[str]]:
        """(stale, orphan) consumer ids of the queue, judged by the Redis clock."""
        with wrapped(f"find stale consumers of {queue!r}"):
            return scripts.stale(self._session.keys(queue), timeout_ms=timeout_ms, limit=limit).run(self._session.client)

    def is_registered(self, queue: str, consumer_id: str) -> bool:
        """Whether the consumer is still in the registry (not declared dead)."""
        with wrapped(f"registry of {queue!r}"):
            return bool(self._session.held.execute("HEXISTS", self._session.keys(queue).consumers, consumer_id))

    def consumers(self, queue: str) -> dict[str, ConsumerInfo]:
        """The queue's registry: consumer id -> what its last heartbeat said
        (fields that cannot be read keep their defaults)."""
        with wrapped(f"read consumers of {queue!r}"):
            raw = self._session.client.hgetall(self._session.keys(queue).consumers)
        return {text(k): ConsumerInfo.from_json(v) for k, v in raw.items()}

    def record_slot(self, queue: str, slot: str, info: Mapping[str, Any]) -> None:
        """Restarts and last exit of a consumer slot (its supervisor writes)."""
        with wrapped(f"slot statistics of {queue!r}"):
            self._session.client.hset(self._session.keys(queue).slots, slot, json.dumps(dict(info), separators=(",", ":")))

    def count_late_ack(self, queue: str) -> None:
        """Count a late ack found after a reconnect (the ack script counts the others)."""
        with wrapped(f"counters of {queue!r}"):
            self._session.client.hincrby(self._session.keys(queue).counters, "late_acks", 1)

    # --- reclaim -------------------------------------------------------------------

    def reclaim_dead(self, queue: str, consumer_id: str, *, retry_threshold: int, reason: str,
                     started: Optional[int] = None, returned: int = 0) -> scripts.ReclaimResult:
        """Return a dead consumer's list to the queue, each message costing an
        attempt (dead-lettered past ``retry_threshold``): all of them, or with
        ``started`` (what its slot said) only the oldest ``started``, the
        rest never having reached a handler, and of those not the oldest
        ``returned``, whose handlers ran to the end; unregister the consumer
        (registry, heartbeat, dated in retired) once its list is empty."""
        session = self._session
        return session.drain(queue, scripts.reclaim(session.keys(queue), consumer_id, costs_attempt=True,
                                                 retry_threshold=retry_threshold, reason=reason,
                                                 batch=session.reclaim_batch, started=started, returned=returned))

    def reclaim_stale(self, queue: str, consumer_id: str, *, retry_threshold: int, reason: str,
                      stale_after_ms: int, lock: Optional[scripts.Lock] = None) -> scripts.ReclaimResult:
        """Reclaim as reclaim_dead does, for a consumer whose heartbeat is
        stale: only if its heartbeat is still missing or older than
        ``stale_after_ms`` (else nothing is done and ``remaining`` is -1).
        With ``lock``, raise NotLeader unless the lock holds its token."""
        session = self._session
        return session.drain(queue, scripts.reclaim_stale(session.keys(queue), consumer_id, retry_threshold=retry_threshold,
                                                       reason=reason, batch=session.reclaim_batch,
                                                       stale_after_ms=stale_after_ms, lock=lock))

    def sweep_retired(self, queue: str, consumer_id: str, *, lock: scripts.Lock) -> scripts.ReclaimResult:
        """Return, free of cost, the messages found in a retired consumer's
        list; the registry is not touched. Raise NotLeader unless the lock
        holds its token."""
        session = self._session
        return session.drain(queue, scripts.return_free(session.keys(queue), consumer_id,
                                                     reason="found in a retired consumer's list",
                                                     batch=session.reclaim_batch, lock=lock))

    def retired_with_messages(self, queue: str, watch_ms: int,
                              most: int = defaults.RETIRED_SWEEP_MAX) -> list[str]:
        """Consumers unregistered less than ``watch_ms`` ago whose processing
        list is not empty, among the ``most`` latest; older retirees are
        forgotten, and so are entries dated more than ``watch_ms`` ahead (no
        clock wrote those: junk, which would otherwise stay for ever)."""
        session = self._session
        k = session.keys(queue)
        with wrapped(f"retired consumers of {queue!r}"):
            # The clock of the server that dated the entries (a cluster's
            # masters each have their own): skew must not shorten the watch.
            now_ms = ms_of(session.on_node(queue, lambda client: client.time()))
            pipe = session.client.pipeline(transaction=False)
            pipe.zremrangebyscore(k.retired, "-inf", f"({now_ms - watch_ms}")
            pipe.zremrangebyscore(k.retired, f"({now_ms + watch_ms}", "+inf")
            # The latest first: a late message reaches a list within seconds of its retirement.
            pipe.zrevrangebyscore(k.retired, now_ms + watch_ms, now_ms - watch_ms, start=0, num=most)
            ids = [text(cid) for cid in pipe.execute()[-1]]
            pipe = session.client.pipeline(transaction=False)
            for cid in ids:
                pipe.llen(k.processing(cid))
            lengths = pipe.execute() if ids else []
        return [cid for cid, n in zip(ids, lengths) if n]

    # --- the collector's leader lock ------------------------------------------------

    def lock_acquire(self, key: str, token: str, ttl_ms: int) -> bool:
        """SET NX PX; a key found there with no time to live (nobody's lock:
        garbage) is given ``ttl_ms`` to live, and said once."""
        with wrapped(f"acquire {key}"):
            got = scripts.lock_acquire(key, token, ttl_ms).run(self._session.client)
        if got < 0:
            log.warning("%s held a value that never expires (not a lock of ours); it now expires in %d ms and "
                        "the election resumes then", key, ttl_ms)
        return got > 0

    def lock_renew(self, key: str, token: str, ttl_ms: int) -> bool:
        with wrapped(f"renew {key}"):
            return scripts.lock_renew(key, token, ttl_ms).run(self._session.client)

    def lock_release(self, key: str, token: str) -> bool:
        with wrapped(f"release {key}"):
            return scripts.lock_release(key, token).run(self._session.client)

    def lock_holder(self, key: str) -> Optional[str]:
        with wrapped(f"read {key}"):
            value = self._session.client.get(key)
        return None if value is None else text(cast(bytes, value))


def _newest(reply: Any) -> float:
    """ZREVRANGE 0 0 WITHSCORES's score, or 0 (none, an error, junk): a
    flat [member, score] (RESP2, the score as bytes) or [[member, score]]
    (RESP3, a float), as the connection's protocol gives it."""
    if not isinstance(reply, list) or not reply:
        return 0.0
    pair = reply[0] if isinstance(reply[0], (list, tuple)) else reply
    if len(pair) != 2:
        return 0.0
    try:
        score = float(pair[1])
    except (TypeError, ValueError):
        return 0.0
    return score if score == score else 0.0
