"""The web UI's HTTP and WebSocket server (aiohttp): one page, a JSON API and
/metrics, run by ``smqsup web`` or by the supervisor in a child of its own.

    GET  /                                  the page (static/index.html)
    GET  /ws                                WebSocket: history once, then a snapshot a second
    GET  /api/status                        stats.snapshot of every queue
    GET  /api/queues/{queue}/history        ?seconds=N (default 600)
    GET  /api/queues/{queue}/dead           ?limit=N (default 100, at most 1000)
    POST /api/queues/{queue}/dead/requeue   {"ids": [...]} or {"all": true}
    POST /api/queues/{queue}/dead/purge     {"ids": [...]} or {"all": true}
    GET  /api/queues/{queue}/messages       ?state=pending|scheduled|processing|dead&limit=N (browse.listing)
    POST /api/queues/{queue}/remove         {"ids": [...]}: waiting messages (browse.remove)
    POST /api/queues/{queue}/cancel         {"ids": [...]}: waiting or held messages (contents.cancel)
    GET  /api/queues/{queue}/events         ?after=I=MS-SEQ,...&limit=N (default 100, at most 500)
    GET  /api/batches                       ?limit=N a queue (default 100, at most 1000): open batches
    POST /api/queues/{queue}/pause          {} (Broker.queues.pause)
    POST /api/queues/{queue}/resume         {} (Broker.queues.resume)
    GET  /metrics                           Prometheus text format 0.0.4

Every POST carries a JSON body (``Content-Type: application/json``: a page on
another site cannot send one without the browser asking first); the queue in
the path of messages, remove, cancel, events, pause and resume must be
configured or known to Redis (404).

The JSON API's and /metrics' handlers are in ``api``; access rules in
``security``; what a request asks is read and checked in ``args``; Redis is
read in a thread pool (``source``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import logging
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Optional

from aiohttp import WSCloseCode, web
from aiohttp.http_exceptions import HttpProcessingError

from smqsup import safe
from smqsup.config.model import Config, WebConfig
from smqsup.errors import BrokerError, ConfigError
from smqsup.store.broker import Broker
from smqsup.web import api, args
from smqsup.web.jsonout import dumps, error
from smqsup.web.security import Guard, Handler, check_exposure
from smqsup.web.source import Hub, Source

log = logging.getLogger(__name__)

#: Largest request body, in bytes (aiohttp answers 413 past it).
_MAX_BODY = 1024 * 1024
#: Socket timeout of the web server's Redis client, in seconds.
REDIS_TIMEOUT_S = 5.0

#: The page's files, served from memory: name -> content type.
_STATIC = {"ui.js": "text/javascript", "messages.js": "text/javascript", "events.js": "text/javascript",
           "batches.js": "text/javascript",
           "app.js": "text/javascript",
           "app.css": "text/css", "favicon.svg": "image/svg+xml"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self' {ws}; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

#: The path prefix of a queue's endpoints; any segment matches, so that a bad
#: name (braces included) gets the validator's one-line answer, not a bare 404.
_QUEUE = "/api/queues/{queue:[^/]+}"

_HUB = web.AppKey("hub", Hub)
_GUARD = web.AppKey("guard", Guard)
_FILES = web.AppKey("files", dict)


def serve(cfg: Config, url: str, *, ready: Optional[Callable[[str], None]] = None) -> None:
    """Serve the web UI of ``cfg``'s namespace on ``cfg.web.listen`` (default
    127.0.0.1:8087; port 0 picks a free port) until SIGTERM or SIGINT.

    Installs its own SIGTERM/SIGINT handlers (the caller has reset signals).
    Calls ``ready(address)`` once listening, with the bound ``host:port``.
    Raises ConfigError for a non-loopback address without a token, or when
    the address cannot be bound.
    """
    web_cfg = cfg.web or WebConfig()
    safe.register_url(url)  # no error text or log line shows the password...
    safe.register_secret(web_cfg.token)  # ...or the token
    host, port = check_exposure(web_cfg.listen, web_cfg.token)
    broker = Broker(url, cfg.namespace, client_name="smqsup-web", socket_timeout_s=REDIS_TIMEOUT_S)
    source = Source(broker, list(cfg.queues))
    try:
        asyncio.run(_run(build_app(source, web_cfg.token), host, port, web_cfg, ready))
    finally:
        source.close()


async def _run(app: web.Application, host: str, port: int, web_cfg: WebConfig,
               ready: Optional[Callable[[str], None]]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)  # record only; the loop below acts
    runner = web.AppRunner(app, access_log=None, handle_signals=False, logger=_HTTP_LOG)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise ConfigError(f"web.listen: cannot listen on {web_cfg.listen}: {exc.strerror or exc}",
                              key="web.listen") from None
        address = _address(runner.addresses[0])
        app[_GUARD].cookie_name = f"smqsup_session_{address.rsplit(':', 1)[1]}"
        log.info("web UI listening on http://%s/ (token %s)", address, "required" if web_cfg.token else "not set")
        if ready is not None:
            ready(address)
        await stop.wait()
        log.info("web UI stopping")
    finally:
        await runner.cleanup()


class _OneLine(logging.Filter):
    """aiohttp's own error records (a malformed request, a failure past our
    middleware) as one scrubbed, escaped line: no traceback, and no token a
    quoted request line carried. A malformed request is the client's fault:
    INFO, so that nobody can fill the log with errors at will."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        text = record.getMessage() if exc is None else f"{record.getMessage()}: {type(exc).__name__}: {exc}"
        record.msg, record.args = "%s", (safe.shown(text),)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


#: The logger aiohttp's protocol handler writes to (see _OneLine).
_HTTP_LOG = logging.getLogger("smqsup.web.http")
_HTTP_LOG.addFilter(_OneLine())


def _address(sockname: Any) -> str:
    host, port = sockname[0], sockname[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def build_app(source: Source, token: Optional[str]) -> web.Application:
    """The aiohttp application over ``source`` (its routes are listed above)."""
    guard = Guard(token)
    app = web.Application(middlewares=[_last_resort, guard.middleware, _errors], client_max_size=_MAX_BODY)
    app[api.SOURCE] = source
    app[_HUB] = Hub(source)
    app[_GUARD] = guard
    files = importlib.resources.files("smqsup.web") / "static"
    app[_FILES] = {name: (files / name).read_bytes() for name in ("index.html", *_STATIC)}
    app.add_routes([
        web.get("/", index),
        web.get("/static/{name}", static),
        web.get("/ws", websocket),
        web.get("/api/status", api.api_status),
        web.get(f"{_QUEUE}/history", api.api_history),
        web.get(f"{_QUEUE}/dead", api.api_dead),
        web.post(f"{_QUEUE}/dead/requeue", api.api_requeue),
        web.post(f"{_QUEUE}/dead/purge", api.api_purge),
        web.get(f"{_QUEUE}/messages", api.api_messages),
        web.post(f"{_QUEUE}/remove", api.api_remove),
        web.post(f"{_QUEUE}/cancel", api.api_cancel),
        web.get(f"{_QUEUE}/events", api.api_events),
        web.get("/api/batches", api.api_batches),
        web.post(f"{_QUEUE}/pause", api.api_pause),
        web.post(f"{_QUEUE}/resume", api.api_resume),
        web.get("/metrics", api.get_metrics),
    ])
    app.cleanup_ctx.append(_hub_task)
    app.on_shutdown.append(_close_clients)
    return app


async def _hub_task(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[_HUB].run())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _close_clients(app: web.Application) -> None:
    await app[_HUB].close_all()


@web.middleware
async def _last_resort(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost: any exception nothing else handled becomes a 500
    ``{"error": "internal error"}`` and one log line, never a traceback."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as exc:  # noqa: BLE001 - the one place that catches everything
        _log_internal(request, exc)
        return error(500, "internal error")


def _log_internal(request: web.Request, exc: BaseException) -> None:
    """One line for an unexpected exception: request, type, innermost frame, text."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}" if tb is not None else "?"
    log.error("web: %s %s: internal error, %s at %s: %s", safe.shown(request.method, 20),
              safe.shown(request.path, 200), type(exc).__name__, where, safe.shown(exc))


_TOO_LARGE = f"body: larger than the {_MAX_BODY // 1024} KiB a request may carry"


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors as JSON: a bad argument 400, Redis failing 503, aiohttp's own
    refusals (404, 405, 413...) with their status."""
    try:
        return await handler(request)
    except args.NotFound as exc:
        return error(404, safe.shown(exc))
    except ConfigError as exc:
        return error(400, safe.shown(exc))
    except BrokerError as exc:
        log.warning("web: %s %s failed: %s", request.method, safe.shown(request.path, 200), safe.shown(exc))
        return error(503, safe.shown(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        allow = exc.headers.get("Allow")
        refusal = error(exc.status, _refusal_text(request, exc.status, exc.reason, allow))
        if allow is not None:
            refusal.headers["Allow"] = allow
        return refusal


def _refusal_text(request: web.Request, status: int, reason: str, allow: Optional[str]) -> str:
    """The one line for aiohttp's own refusals, naming what was wrong where it can."""
    if status == 413:
        return _TOO_LARGE
    if status == 405 and allow is not None:
        return f"method: {safe.shown(request.method, 20)} is not allowed here (allowed: {safe.shown(allow, 60)})"
    return reason


# --- page ----------------------------------------------------------------------------


async def index(request: web.Request) -> web.StreamResponse:
    """The page; a valid ``?token=`` visit sets the session cookie and
    redirects to the same page without the token in its address."""
    guard = request.app[_GUARD]
    if guard.query_token_ok(request):
        rest = {k: v for k, v in request.query.items() if k != "token"}
        response = web.Response(status=303, headers={"Location": str(request.rel_url.with_query(rest))})
        guard.set_session(response)
        return response
    host = request.host if _plain_host(request.host) else ""
    ws = f"ws://{host} wss://{host}" if host else ""
    return web.Response(body=request.app[_FILES]["index.html"], content_type="text/html", charset="utf-8",
                        headers={"Content-Security-Policy": _CSP.format(ws=ws)})


def _plain_host(host: str) -> bool:
    """True for a Host header safe to write into a header value."""
    return bool(host) and all(ch.isalnum() or ch in ".-:[]" for ch in host)


async def static(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in _STATIC:
        raise web.HTTPNotFound()
    return web.Response(body=request.app[_FILES][name], content_type=_STATIC[name], charset="utf-8")


async def websocket(request: web.Request) -> web.WebSocketResponse:
    """History first (every queue, api.HISTORY_S), then the Hub's snapshots."""
    ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=64 * 1024)
    await ws.prepare(request)
    try:
        await _feed(request.app, ws)
    except Exception as exc:  # noqa: BLE001 - past prepare() no error response can be sent
        _log_internal(request, exc)
        await ws.close(code=WSCloseCode.INTERNAL_ERROR)
    return ws


async def _feed(app: web.Application, ws: web.WebSocketResponse) -> None:
    """Send ``ws`` the history, then keep it in the Hub until it leaves."""
    source, hub = app[api.SOURCE], app[_HUB]
    try:
        try:
            history = await source.call(source.histories, api.HISTORY_S)
            await ws.send_str(dumps({"type": "history", "window_s": api.HISTORY_S, "queues": history}))
        except BrokerError as exc:
            await ws.send_str(dumps({"type": "error", "error": safe.shown(exc)}))
        if hub.latest is not None:
            await ws.send_str(hub.latest)
    except ConnectionError:  # the client left before its first messages
        return
    hub.add(ws)
    try:
        async for _ in ws:  # the page sends nothing we act on
            pass
    finally:
        hub.discard(ws)
