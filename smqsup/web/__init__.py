"""The web UI: one live page, a small JSON API and Prometheus /metrics
(``smqsup web``, or the supervisor's web child). See ``server``."""

from smqsup.web.server import serve

__all__ = ["serve"]
