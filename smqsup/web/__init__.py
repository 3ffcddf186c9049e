"""The web UI: one live page, a small JSON API and Prometheus /metrics
(``smqsup web``, or the supervisor's web child).

    browser ─▶ server (aiohttp; security checks each request) ─▶ api (args reads it) ─▶ source (off the loop) ─▶ store
                                                                 └▶ metrics, jsonout ─▶ the response

- server.py: the HTTP and WebSocket server: routing, the middlewares, the page and the WebSocket.
- api.py: the JSON API's and /metrics' handlers, with the limits they apply.
- security.py: who may talk to it: where it may listen, the token, the session cookie, the origin.
- args.py: what a request of the JSON API asks, read and checked.
- source.py: what the web UI reads and changes in Redis, kept off the event loop.
- event_api.py: what the events endpoint reads: a queue's newest events, or those after a client's cursors.
- metrics.py: ``GET /metrics``: a statistics snapshot in the Prometheus text format.
- jsonout.py: strict JSON for everything the server sends.
- static/: the page (index.html, app.js, messages.js, events.js, ui.js, app.css).
"""

from smqsup.web.server import serve

__all__ = ["serve"]
