"""The web UI's JSON API and ``/metrics``: one aiohttp handler per route
(server.build_app routes them, and lists them in its docstring).

Each handler reads its arguments through ``args`` (a bad one is a 400, an
unknown queue a 404) and calls Redis through the app's ``Source``, in its
thread pool; what a POST changes is logged in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Optional

from aiohttp import web

from smqsup import safe
from smqsup.collector import stats
from smqsup.errors import ConfigError
from smqsup.views import browse
from smqsup.web import args, event_api, metrics
from smqsup.web.jsonout import response
from smqsup.web.source import Source

#: The server's logger: these lines name smqsup.web.server, as they did before
#: the handlers had a module of their own.
log = logging.getLogger("smqsup.web.server")

#: The app's one Source (server.build_app sets it).
SOURCE = web.AppKey("source", Source)

#: History the WebSocket sends on connect, in seconds (the charts' window).
HISTORY_S = 600
#: Most dead letters one listing returns.
DEAD_LIMIT_MAX = 1000
#: Most message ids one requeue or purge names.
IDS_MAX = 10_000
#: Most messages one listing returns.
MESSAGES_LIMIT_MAX = 1000
#: Most message ids one remove names (a listing shows at most MESSAGES_LIMIT_MAX).
REMOVE_IDS_MAX = 1000
#: Open batches the batches endpoint lists per queue, by default and at most.
BATCHES_LIMIT, BATCHES_LIMIT_MAX = 100, 1000
#: Events one answer of the events endpoint holds, by default and at most.
EVENTS_LIMIT, EVENTS_LIMIT_MAX = 100, 500


# --- JSON API ------------------------------------------------------------------------


async def api_status(request: web.Request) -> web.Response:
    source = request.app[SOURCE]
    return response(await source.call(source.snapshot))


async def api_history(request: web.Request) -> web.Response:
    queue, seconds = args.queue(request), args.int_arg(request, "seconds", HISTORY_S, stats.SERIES_POINTS)
    source = request.app[SOURCE]
    points = await source.call(stats.history, source.broker, queue, seconds)
    return response({"queue": queue, "points": points})


async def api_dead(request: web.Request) -> web.Response:
    queue, limit = args.queue(request), args.int_arg(request, "limit", 100, DEAD_LIMIT_MAX)
    source = request.app[SOURCE]
    return response(await source.call(source.dead, queue, limit))


async def api_requeue(request: web.Request) -> web.Response:
    return await _dead_letter_action(request, "requeued", request.app[SOURCE].requeue)


async def api_purge(request: web.Request) -> web.Response:
    return await _dead_letter_action(request, "purged", request.app[SOURCE].purge)


async def _dead_letter_action(request: web.Request, done: str,
                              action: Callable[[str, Optional[list[str]]], int]) -> web.Response:
    """Requeue or purge the selected dead letters of the queue in the path."""
    queue = args.queue(request)
    ids = await args.selection(request, IDS_MAX)
    source = request.app[SOURCE]
    n = await source.call(action, queue, ids)
    chosen = "all" if ids is None else ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
    log.info("queue %s: web %s %d dead letter(s) (%s) for %s", queue, done, n, safe.shown(chosen, 300), request.remote)
    return response({"queue": queue, done: n})


# --- messages and pausing ---------------------------------------------------------------


async def _known_queue(request: web.Request) -> str:
    """The queue in the path, which must be configured or known to Redis (NotFound)."""
    queue = args.queue(request)
    source = request.app[SOURCE]
    if queue not in await source.call(source.queues):
        raise args.NotFound(f"queue: no queue named {queue!r} (neither configured nor known to Redis)")
    return queue


async def api_messages(request: web.Request) -> web.Response:
    """Up to ``limit`` messages of the queue in ``state`` (rows of browse.listing)."""
    state, limit = args.state_arg(request), args.int_arg(request, "limit", 100, MESSAGES_LIMIT_MAX)
    queue = await _known_queue(request)
    source = request.app[SOURCE]
    return response(await source.call(source.messages, queue, state, limit))


async def api_remove(request: web.Request) -> web.Response:
    """Delete waiting messages (pending, scheduled, retries waiting) by id."""
    queue = await _known_queue(request)
    ids = args.message_ids(await args.json_object(request), REMOVE_IDS_MAX)
    source = request.app[SOURCE]
    done = await source.call(browse.remove, source.broker, queue, ids)
    n = sum(done.values())
    log.info("queue %s: web removed %d of %d message(s) (%s) for %s", queue, n, len(ids),
             safe.shown(", ".join(ids[:5]) + (" ..." if len(ids) > 5 else ""), 300), safe.shown(request.remote))
    return response({"queue": queue, "removed": n, "ids": done})


async def api_cancel(request: web.Request) -> web.Response:
    """Cancel messages by id, waiting or held (Producer.cancel's answer for each)."""
    queue = await _known_queue(request)
    ids = args.message_ids(await args.json_object(request), REMOVE_IDS_MAX)
    source = request.app[SOURCE]
    done = await source.call(source.cancel, queue, ids)
    n = sum(answer in ("cancelled", "stopping") for answer in done.values())
    log.info("queue %s: web cancelled %d of %d message(s) (%s) for %s", queue, n, len(ids),
             safe.shown(", ".join(ids[:5]) + (" ..." if len(ids) > 5 else ""), 300), safe.shown(request.remote))
    return response({"queue": queue, "cancelled": n, "ids": done})


async def api_events(request: web.Request) -> web.Response:
    """The queue's newest events, or those after ``after`` (web.events.page);
    never waits for one: the page polls."""
    limit, after = args.int_arg(request, "limit", EVENTS_LIMIT, EVENTS_LIMIT_MAX), args.events_after(request)
    queue = await _known_queue(request)
    source = request.app[SOURCE]
    return response(await source.call(event_api.page, source.broker, queue, after, limit))


async def api_batches(request: web.Request) -> web.Response:
    """Every queue's open batches (Producer.batch), with their counts."""
    limit = args.int_arg(request, "limit", BATCHES_LIMIT, BATCHES_LIMIT_MAX)
    source = request.app[SOURCE]
    return response(await source.call(source.batches, limit))


async def api_pause(request: web.Request) -> web.Response:
    """Pause the queue: its consumers on every host take nothing until resumed."""
    return await _pause_action(request, pause=True)


async def api_resume(request: web.Request) -> web.Response:
    """Let the queue's consumers take messages again."""
    return await _pause_action(request, pause=False)


async def _pause_action(request: web.Request, *, pause: bool) -> web.Response:
    queue = await _known_queue(request)
    if await args.json_object(request, empty_ok=True):
        raise ConfigError("body: pause and resume take no parameters (send {} or nothing)")
    source = request.app[SOURCE]
    by = f"web@{request.remote or '?'}"
    if pause:
        changed = await source.call(source.broker.queues.pause, queue, by)
    else:
        changed = await source.call(source.broker.queues.resume, queue)
    if changed:
        log.info("queue %s: %s from the web UI by %s", queue, "paused" if pause else "resumed", safe.shown(by))
    return response({"queue": queue, "paused": pause, "changed": changed})


async def get_metrics(request: web.Request) -> web.Response:
    source = request.app[SOURCE]
    text = metrics.render(await source.call(source.snapshot))
    return web.Response(body=text.encode(), headers={"Content-Type": metrics.CONTENT_TYPE})
