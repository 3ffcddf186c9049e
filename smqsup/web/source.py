"""What the web UI reads and changes in Redis, kept off the event loop.

redis-py blocks, so every call here runs in a small thread pool (``Source.call``);
the redis-py client is thread-safe (a connection per concurrent call). The
``Hub`` takes one statistics snapshot a second while any WebSocket client is
connected and sends the same text to all of them, so N open pages cost Redis
what one does.

    Broker ─(thread pool)─▶ Source ─▶ Hub ─▶ every WebSocket client
                                  └──▶ JSON API, /metrics (one read per request)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, TypeVar

from aiohttp import web

from smqsup import safe
from smqsup.collector import stats
from smqsup.config.names import validate_queue_name
from smqsup.errors import ConfigError, SmqsupError
from smqsup.logs import Lasting
from smqsup.store.broker import Broker
from smqsup.store.ops.batches import parse_id
from smqsup.store.scripts import Peeked
from smqsup.views import browse, deadletters
from smqsup.web.jsonout import dumps

log = logging.getLogger(__name__)

T = TypeVar("T")

def dead_row(entry: Peeked) -> dict[str, Any]:
    """One dead-letter entry as the API lists it: ``deadletters.row``, whose
    ``id`` names it in a requeue or purge even when its bytes are malformed.
    Should reading it fail all the same (its bytes are anyone's), it is shown
    as text, as far as it was read, with reason "unreadable"."""
    try:
        return deadletters.row(entry)
    except Exception:  # noqa: BLE001 - hostile bytes must not fail the listing
        text = entry.data.decode("utf-8", "replace")
        return {"id": None, "attempts": None, "reason": "unreadable", "dead_at": None, "created_at": None,
                "error_type": None, "body": text[:deadletters.BODY_SHOWN_CHARS],
                "truncated": entry.cut or len(text) > deadletters.BODY_SHOWN_CHARS, "malformed": True,
                "cut": entry.cut}


class Source:
    """The web server's one Broker, called from a thread pool."""

    def __init__(self, broker: Broker, configured: Sequence[str], workers: int = 4) -> None:
        self.broker = broker
        self.configured = sorted(configured)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="smqsup-web-redis")

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the thread pool."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        """Stop the pool (calls in flight finish in their threads) and the client."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.broker.close()

    def queues(self) -> list[str]:
        """The configured queues and every queue Redis knows of whose name is
        a valid queue name (the set is anyone's to write)."""
        return sorted(set(self.configured) | {q for q in self.broker.queues.known_queues() if _valid_name(q)})

    def snapshot(self) -> dict[str, Any]:
        """``stats.snapshot`` of every queue."""
        return stats.snapshot(self.broker, self.queues())

    def histories(self, seconds: int) -> dict[str, list[dict[str, Any]]]:
        """Each queue's history points of the last ``seconds``, oldest first."""
        return {name: stats.history(self.broker, name, seconds) for name in self.queues()}

    def dead(self, queue: str, limit: int) -> dict[str, Any]:
        """The newest ``limit`` dead letters of ``queue`` (read within one
        listing's bounds: deadletters.newest) and how many there are."""
        entries = deadletters.newest(self.broker, queue, limit)
        total = self.broker.statistics.total_sizes(queue)["dead"]
        return {"queue": queue, "total": total, "entries": [dead_row(e) for e in entries]}

    def messages(self, queue: str, state: str, limit: int) -> dict[str, Any]:
        """Up to ``limit`` rows of ``browse.listing`` and how many messages
        are in ``state`` (``total``; None for processing when ``limit`` rows
        came back: the processing lists are not counted in one read)."""
        rows = browse.listing(self.broker, queue, state, limit)
        sizes = self.broker.statistics.total_sizes(queue)
        totals = {"pending": sizes["pending"], "scheduled": sizes["scheduled"] + sizes["delayed"],
                  "dead": sizes["dead"], "processing": len(rows) if len(rows) < limit else None}
        return {"queue": queue, "state": state, "total": totals[state], "messages": rows}

    def batches(self, limit: int) -> dict[str, Any]:
        """The open batches of every queue (at most ``limit`` a queue), with
        their counts: what GET /api/batches answers."""
        rows = []
        for queue in self.queues():
            for public in self.broker.batches.open_ids(queue, limit):
                where = parse_id(public)
                status = self.broker.batches.status(*where) if where is not None else None
                if status is not None:
                    rows.append({**status.to_json(), "home": queue})
        return {"batches": rows}

    def cancel(self, queue: str, ids: Sequence[str]) -> dict[str, str]:
        """Each id's answer to a cancel (Producer.cancel says what they mean)."""
        names = self.broker.queues.partition_names(queue)
        return {mid: self.broker.contents.cancel(names, mid) for mid in ids}

    def requeue(self, queue: str, ids: Optional[Sequence[str]]) -> int:
        """See deadletters.requeue."""
        return deadletters.requeue(self.broker, queue, ids)

    def purge(self, queue: str, ids: Optional[Sequence[str]]) -> int:
        """See deadletters.purge."""
        return deadletters.purge(self.broker, queue, ids)


def _valid_name(name: str) -> bool:
    try:
        validate_queue_name(name)
    except ConfigError:
        return False
    return True


class Hub:
    """One snapshot a second for every connected WebSocket client."""

    #: Seconds between snapshots.
    period_s = 1.0
    #: A client that takes longer than this to accept a message is dropped, in s.
    send_timeout_s = 5.0

    def __init__(self, source: Source) -> None:
        self.source = source
        self.clients: set[web.WebSocketResponse] = set()
        #: The last message sent (a snapshot or an error), for clients joining.
        self.latest: Optional[str] = None
        self._wake = asyncio.Event()
        self._trouble = Lasting(log)

    def add(self, ws: web.WebSocketResponse) -> None:
        self.clients.add(ws)
        self._wake.set()

    def discard(self, ws: web.WebSocketResponse) -> None:
        self.clients.discard(ws)

    async def run(self) -> None:
        """Snapshot and broadcast every ``period_s`` while anyone listens."""
        loop = asyncio.get_running_loop()
        while True:
            if not self.clients:
                self._wake.clear()
                await self._wake.wait()
            started = loop.time()
            self.latest = await self._message()
            await asyncio.gather(*(self._send(ws, self.latest) for ws in list(self.clients)))
            await asyncio.sleep(max(0.05, self.period_s - (loop.time() - started)))

    async def _message(self) -> str:
        """The next message: a snapshot, or an error that clients show (never
        an exception, which would end the feed for every client)."""
        try:
            snap = await self.source.call(self.source.snapshot)
        except SmqsupError as exc:
            return self._failed(safe.shown(exc, safe.LOG_VALUE_CHARS))
        except Exception as exc:  # noqa: BLE001 - a bug must not stop the feed
            return self._failed(f"internal error ({type(exc).__name__})")
        self._trouble.clear("statistics", "web: statistics available again")
        return dumps({"type": "snapshot", "snapshot": snap}, compact=True)

    def _failed(self, text: str) -> str:
        """The error message for clients; logged once per failing stretch."""
        self._trouble.report("statistics", "", "web: statistics unavailable: %s", text)
        return dumps({"type": "error", "error": text})

    async def _send(self, ws: web.WebSocketResponse, text: str) -> None:
        try:
            await asyncio.wait_for(ws.send_str(text), self.send_timeout_s)
        except (ConnectionError, RuntimeError, asyncio.TimeoutError):
            # Gone or too slow: drop it; its handler returns when the socket closes.
            self.discard(ws)
            await ws.close()

    async def close_all(self) -> None:
        """Tell every client the server is going away."""
        clients, self.clients = list(self.clients), set()
        for ws in clients:
            await ws.close(code=1001, message=b"server shutdown")
