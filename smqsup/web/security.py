"""Who may talk to the web UI: where it may listen, the token, the session
cookie, and the same-origin checks that keep other sites' pages out.

Rules (each request, in this order):

1. Without a token the server listens on loopback only, and answers only
   requests whose Host is a loopback name (``localhost``, 127.0.0.0/8,
   ``[::1]``): a page on another site that re-points its own DNS name at
   127.0.0.1 (DNS rebinding) gets 403 instead of the statistics.
2. With a token every request must carry it: ``Authorization: Bearer TOKEN``,
   or the session cookie, or (``GET /`` and the WebSocket only) ``?token=TOKEN``.
   A ``GET /?token=TOKEN`` visit sets the cookie (HttpOnly, SameSite=Strict;
   its value is an HMAC of the token, never the token) and redirects to ``/``
   so the token leaves the address bar. Missing or wrong: 401.
3. State-changing requests (every method but GET/HEAD) and the WebSocket
   handshake must be same-origin: an ``Origin`` header, when present, must
   name the Host the request was sent to; with a token it must be present.
   Otherwise 403.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from typing import Optional
from urllib.parse import urlsplit

from aiohttp import web

from smqsup.config.addresses import is_loopback, parse_listen
from smqsup.errors import ConfigError
from smqsup.safe import escape
from smqsup.web.jsonout import error as _error

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Paths where ``?token=`` is accepted (a browser cannot set a header there).
_QUERY_TOKEN_PATHS = ("/", "/ws")
_SAFE_METHODS = ("GET", "HEAD")


def check_exposure(listen: str, token: Optional[str]) -> tuple[str, int]:
    """``(host, port)`` of ``listen`` as ``smqsup web --listen`` takes it (port
    0 too: see addresses.parse_listen), refusing (ConfigError) a non-loopback
    address without a token: the UI can requeue and purge messages."""
    host, port = parse_listen(listen, any_port=True)
    if not token and not is_loopback(host):
        raise ConfigError(f"web.listen: {listen} is not a loopback address: set a token "
                          f"(web.token in the config, or --token) to listen there", key="web.token")
    return host, port


def _host_name(host_header: str) -> str:
    """The host part of a Host header (``[::1]:8087`` -> ``::1``)."""
    if host_header.startswith("["):
        return host_header[1:].partition("]")[0]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _authority(netloc: str, scheme: str) -> str:
    """``netloc`` lowercased, without the scheme's default port."""
    netloc = netloc.lower()
    default = ":443" if scheme == "https" else ":80"
    return netloc[: -len(default)] if netloc.endswith(default) else netloc


def same_origin(origin: str, host_header: str) -> bool:
    """True when the ``Origin`` header names the host (and port) in ``Host``."""
    try:
        parts = urlsplit(origin)
    except ValueError:  # e.g. an unclosed "[" (invalid IPv6 address)
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc or not host_header:
        return False
    return _authority(parts.netloc, parts.scheme) == _authority(host_header, parts.scheme)


def _bytes(text: str) -> bytes:
    """``text`` as bytes, whatever it holds: aiohttp decodes undecodable header
    bytes to lone surrogates, which a plain ``encode()`` refuses."""
    return text.encode("utf-8", "surrogatepass")


def _equal(given: str, expected: str) -> bool:
    return hmac.compare_digest(_bytes(given), _bytes(expected))


class Guard:
    """The checks above as aiohttp middleware, for one server's token."""

    def __init__(self, token: Optional[str]) -> None:
        self.token = token or None
        #: Set once the port is known: two UIs on one host keep their own cookie.
        self.cookie_name = "smqsup_session"
        self._session = (hmac.new(_bytes(self.token), b"smqsup web session", hashlib.sha256).hexdigest()
                         if self.token else "")

    def query_token_ok(self, request: web.Request) -> bool:
        """True when the request carries the right ``?token=``."""
        given = request.query.get("token")
        return bool(self.token and given is not None and _equal(given, self.token))

    def set_session(self, response: web.StreamResponse) -> None:
        """Give the browser the session cookie (after a ``?token=`` visit)."""
        response.set_cookie(self.cookie_name, self._session, httponly=True, samesite="Strict", path="/")

    def authenticated(self, request: web.Request) -> bool:
        """True when no token is set, or the request carries it (see module doc)."""
        if self.token is None:
            return True
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return _equal(value.strip(), self.token)
        cookie = request.cookies.get(self.cookie_name)
        if cookie is not None and _equal(cookie, self._session):
            return True
        return request.path in _QUERY_TOKEN_PATHS and self.query_token_ok(request)

    def refusal(self, request: web.Request) -> Optional[web.Response]:
        """The error response for a request that may not go on, else None."""
        if self.token is None and not is_loopback(_host_name(request.host)):
            return _error(403, "Host not allowed: without a token the web UI answers only to loopback "
                               "host names (localhost, 127.0.0.1, [::1])")
        if not self.authenticated(request):
            response = _error(401, "token required: send 'Authorization: Bearer TOKEN', or open /?token=TOKEN")
            response.headers["WWW-Authenticate"] = 'Bearer realm="smqsup"'
            return response
        websocket = request.headers.get("Upgrade", "").lower() == "websocket"
        if request.method not in _SAFE_METHODS or websocket:
            origin = request.headers.get("Origin")
            if origin is None and self.token is not None:
                return _error(403, "Origin header required on state-changing requests")
            if origin is not None and not same_origin(origin, request.host):
                return _error(403, f"cross-origin request refused (Origin {escape(origin, 100)!r}, "
                                   f"Host {escape(request.host, 100)!r})")
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Refuse, or pass on and add the security headers to the response."""
        refused = self.refusal(request)
        if refused is not None:
            return refused
        response = await handler(request)
        if not response.prepared:  # a WebSocket's headers are already sent
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            response.headers.setdefault("Referrer-Policy", "no-referrer")
            response.headers.setdefault("X-Frame-Options", "DENY")
            response.headers.setdefault("Cache-Control", "no-store")
        return response
