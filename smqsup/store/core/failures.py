"""redis-py's errors as smqsup's, for both drivers, no I/O: ``with
wrapped(what):`` (and translated()) turn a refusal, a lost connection or a
cluster's redirection past its patience into BrokerError and its kinds;
NotSent, the error that says nothing left this process."""

from __future__ import annotations

from typing import Any, Literal, Optional

import redis.exceptions as rexc

from smqsup.errors import BrokerConnectionError, BrokerError, BrokerNotSent, NotLeader

#: A cluster's refusals that mean the command did not run (cluster.py sends
#: such a command again).
REDIRECTIONS = (rexc.MovedError, rexc.AskError, rexc.TryAgainError, rexc.ClusterDownError,
                rexc.SlotNotCoveredError)


class wrapped:
    """``with wrapped(what):`` turns redis-py errors raised inside the block
    into smqsup errors whose message starts with ``what``. A class, as
    contextlib.suppress is, not a generator: it is entered once per message."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Any) -> Literal[False]:
        if exc is None:
            return False
        error = translated(self.what, exc)
        if error is None:
            return False  # not Redis's: raised on as it is
        raise error from exc


def translated(what: str, exc: BaseException) -> Optional[BrokerError]:
    """The smqsup error for a redis-py (or socket) error ``exc``; None for any other."""
    if isinstance(exc, NotSent):
        return BrokerNotSent(f"{what}: Redis unreachable, nothing sent: {exc}")
    if isinstance(exc, (*REDIRECTIONS, rexc.RedisClusterException)):
        # Still refused after cluster.REDIRECT_PATIENCE_S (a failover not over).
        return BrokerNotSent(f"{what}: Redis Cluster refused it, nothing ran: {exc}")
    if isinstance(exc, (TimeoutError, rexc.ConnectionError, rexc.TimeoutError, OSError)):
        return BrokerConnectionError(f"{what}: Redis connection failed: {exc}")
    if isinstance(exc, rexc.ResponseError):
        if str(exc).startswith("NOTLEADER"):
            return NotLeader(f"{what}: refused, this process no longer holds the collector lock")
        return BrokerError(f"{what}: Redis error: {exc}")
    if isinstance(exc, rexc.RedisError):
        return BrokerError(f"{what}: Redis error: {exc}")
    return None


class NotSent(rexc.ConnectionError):
    """The command never left this process (Redis could not be reached, or
    the TLS handshake failed, before anything was sent)."""
