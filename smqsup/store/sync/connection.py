"""Connections to Redis: the configured redis-py client, the check of the
server it reaches, a batch's round trip on a connection of the pool, and
the boundary where redis-py errors become smqsup errors (the connection
held per thread for the hot path is held.py's).

Client configuration (DESIGN section 8): redis-py retries commands after a
connection error by default. A silent re-send of BLMOVE, an ack script or a
publish can strand or duplicate a message, so every client made here has
retries switched off; callers find out what happened from Redis state instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional, cast

import redis
import redis.exceptions as rexc
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from smqsup import defaults, safe
from smqsup.errors import BrokerError
from smqsup.store import scripts
from smqsup.store.core import urls
from smqsup.store.core.failures import NotSent, wrapped
from smqsup.store.core.urls import check_numbers, cluster_seeds, is_cluster_url, library, sentinel_address, url_error

log = logging.getLogger(__name__)

#: Lowest Redis version with BLMOVE/LMOVE.
MIN_REDIS_VERSION = (6, 2, 0)


def connect(
    url: str,
    *,
    socket_timeout_s: float = defaults.SOCKET_TIMEOUT_S,
    connect_timeout_s: float = defaults.CONNECT_TIMEOUT_S,
    client_name: Optional[str] = None,
) -> "redis.Redis":
    """A redis-py client for ``url`` (redis://, rediss://, unix://, sentinel://,
    redis+cluster://, rediss+cluster://) with automatic retries disabled.
    Connects lazily, but for a cluster, whose slot map is read at once
    (BrokerConnectionError if no seed node can be read from).

    ``client_name`` is set with CLIENT SETNAME on each new connection where
    Redis allows it; a refusal (an ACL user without CLIENT) is warned about
    once and the connection is used unnamed.

    The url's password is registered with ``safe``, so that it is scrubbed
    from any later text; a bad url (a malformed value, an option redis-py
    does not know) is a ConfigError that shows the url masked."""
    safe.register_url(url)
    clustered = is_cluster_url(url)
    options = _options(socket_timeout_s, connect_timeout_s, client_name, clustered=clustered)
    try:
        if clustered:
            first, seeds = cluster_seeds(url)
            _connect_url(first, options).close()  # its options checked as a one-server url's are
            with wrapped("read the slot map of the Redis Cluster"):
                return _connect_cluster(first, seeds, options)  # type: ignore[return-value]
        if url.startswith("sentinel://"):
            return _connect_sentinel(url, options)
        return _connect_url(url, options)
    except (TypeError, ValueError, rexc.RedisError) as exc:
        # Both cut short: a huge url (or an option value redis-py echoes) stays one readable line.
        raise url_error(url, exc) from None


def _options(socket_timeout_s: float, connect_timeout_s: float, client_name: Optional[str], *,
             clustered: bool) -> dict[str, Any]:
    """redis-py's options for a client made here: no retries, the timeouts,
    no health check, and CLIENT SETNAME on each new connection when named."""
    options: dict[str, Any] = {
        "retry": Retry(NoBackoff(), 0),
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": connect_timeout_s,
        "health_check_interval": 0,
    }
    if client_name:
        options["redis_connect_func"] = _handshake(client_name, handshake=not clustered)
    return {**options, **library()}


def _connect_cluster(first: str, seeds: list[tuple[str, int]], options: dict[str, Any]) -> RedisCluster:
    """A RedisCluster client that reads the slot map from the first of the
    ``seeds`` that answers (``first``: its url) and finds the other nodes.
    ``options`` are redis-py's (retries off). Connects now: a
    ConnectionError if no seed serves the map."""
    try:
        nodes = [ClusterNode(h, p) for h, p in seeds]  # type: ignore[no-untyped-call]
        return RedisCluster.from_url(first, startup_nodes=nodes, **options)
    except rexc.RedisClusterException as exc:  # no seed served the map (redis-py reads it at once)
        # (Unreachable, or reached but refused: a TLS certificate, a password.)
        raise rexc.ConnectionError(f"no seed node of the cluster could be read from: {exc}") from None


def _connect_url(url: str, options: dict[str, Any]) -> "redis.Redis":
    """A client for a redis://, rediss:// or unix:// url, its options checked
    now. Raises TypeError or ValueError for a bad option."""
    if not url.startswith("unix://"):
        options = {**options, "socket_keepalive": True}  # TCP only: notice a dead peer
    client = redis.Redis.from_url(url, **options)
    # redis-py takes any query argument as a connection option and would
    # only fail at the first command; make one connection object (no I/O)
    # so a misspelt option is reported here, as a config error.
    pool = client.connection_pool
    pool.connection_class(**pool.connection_kwargs)
    check_numbers(pool.connection_kwargs)
    return client


def _handshake(client_name: str, *, handshake: bool = True) -> Callable[[Any], None]:
    """A redis-py ``redis_connect_func``: the usual handshake (AUTH, SELECT;
    not ``handshake`` for RedisCluster, which makes it itself before calling
    this), then CLIENT SETNAME, which only labels the connection in CLIENT
    LIST and so is skipped when Redis refuses it."""
    def on_connect(conn: Any) -> None:
        if handshake:
            conn.on_connect()
        try:
            conn.send_command("CLIENT", "SETNAME", client_name)
            conn.read_response()
        except rexc.ResponseError as exc:  # NOPERM, or CLIENT renamed away
            urls.setname_refused(log, exc)
    return on_connect


def _connect_sentinel(url: str, options: dict[str, Any]) -> "redis.Redis":
    """``sentinel://[:password@]host:port[,host:port...]/service[/db]``."""
    from redis.sentinel import Sentinel

    hosts, service, db, password = sentinel_address(url)
    # Typed as Any: redis-py before 8 leaves Sentinel untyped, 8 types it.
    make: Any = Sentinel
    sentinel = make(hosts, sentinel_kwargs={"socket_timeout": options["socket_connect_timeout"], **library()},
                    **options)
    master = sentinel.master_for(service, db=db, password=password)
    return cast("redis.Redis", master)


def check_server(client: "redis.Redis") -> list[str]:
    """Raise BrokerError if Redis is too old; return warnings for people:
    a maxmemory-policy that may evict messages, or a check that could not
    be made because Redis refused INFO or CONFIG GET (an ACL user without
    them, a managed Redis): smqsup works without either."""
    warnings: list[str] = []
    with wrapped("check the Redis server"):
        try:
            version_text: Optional[str] = str(client.info("server")["redis_version"])
        except rexc.ResponseError as exc:
            version_text = None
            warnings.append(f"Redis refused INFO ({exc}): cannot check the Redis version; smqsup needs "
                            f"Redis >= 6.2 (BLMOVE), and consumers say so if BLMOVE is missing")
        try:
            policy: Optional[str] = client.config_get("maxmemory-policy").get("maxmemory-policy")
        except rexc.ResponseError as exc:
            policy = None
            warnings.append(f"Redis refused CONFIG GET ({exc}): cannot check maxmemory-policy; it must be "
                            f"'noeviction' or Redis may evict queued messages")
    if version_text is not None and _version(version_text) < MIN_REDIS_VERSION:
        raise BrokerError(f"Redis {version_text} is too old: smqsup needs Redis >= 6.2 (BLMOVE)")
    if policy not in (None, "noeviction"):
        warnings.append(f"Redis maxmemory-policy is {policy!r}: Redis may evict queued messages; "
                        f"set it to 'noeviction'")
    return warnings


def _version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` as ``(7, 0, 15)``; parts that are not numbers count as 0."""
    return tuple(int(x) if x.isdigit() else 0 for x in text.split(".")[:3])


def send(client: "redis.Redis", batch: "scripts.Batch") -> list[Any]:
    """Send ``batch`` in one round trip on a connection of ``client``'s pool;
    its replies, error replies left in place. Raises NotSent if Redis could
    not be reached (or the TLS handshake failed) before anything was sent.
    (On a cluster, cluster.send() sends one per master.)"""
    return batch.execute(checkout(client))  # (the batch's pipeline returns the connection to the pool)


def checkout(client: "redis.Redis") -> Any:
    """A connection of ``client``'s pool, connected; NotSent if Redis cannot
    be reached. The pool connects (and replaces a connection the server
    closed) before handing it out: a failure here certainly sent nothing."""
    try:
        return client.connection_pool.get_connection()
    except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
        raise NotSent(str(exc)) from exc


