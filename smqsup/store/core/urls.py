"""Redis urls read without I/O, for both drivers: which scheme is a cluster's
and its seed nodes, a Sentinel url's parts, the numeric options' bounds, the
one-line ConfigError for a url redis-py refused, and the client library's
name for CLIENT SETINFO."""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from typing import Any, Optional
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from smqsup import safe
from smqsup.config.addresses import host_port
from smqsup.errors import ConfigError
from smqsup.logs import warn_once

#: The url schemes of a Redis Cluster (seed nodes, the rest discovered) and
#: the plain scheme of each.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def url_error(url: str, exc: Exception) -> ConfigError:
    """The ConfigError for a url redis-py refused with ``exc``: cut short, so
    a huge url (or an option value redis-py echoes) stays one readable line."""
    return ConfigError(f"redis.url: {safe.shown(url_problem(exc), safe.URL_CHARS)}, "
                       f"got {safe.shown(url, safe.URL_CHARS)!r}")


@functools.cache
def library() -> dict[str, Any]:
    """redis-py's name and version for CLIENT SETINFO, read once per process
    (and so once in the supervisor, before its forks). Otherwise a redis-py
    with DriverInfo (8.1 here) reads its package metadata for every
    connection it makes: in a forked consumer that wrote about 1.4 MB of
    pages shared with the parent (USS, measured). An older redis-py has no
    DriverInfo and takes nothing here."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo()}


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def cluster_seeds(url: str) -> tuple[str, list[tuple[str, int]]]:
    """The seed nodes of ``redis+cluster://[user:password@]host:port
    [,host:port...][/][?option=value...]`` (``rediss+cluster://`` for TLS),
    and the url of the first as a one-server url, whose options the caller
    checks as a one-server url's are (no I/O): else a misspelt option or a
    NaN timeout would only fail once a node answers. A cluster has one
    database: a path naming another is a ValueError."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES[parts.scheme.lower()]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    seeds = [host_port(item) for item in hosts.split(",") if item]
    if not seeds:
        raise ValueError("a cluster url needs at least one host:port")
    if parts.path.strip("/") not in ("", "0"):
        raise ValueError(f"a cluster has only database 0, not {parts.path.strip('/')!r}")
    host, port = seeds[0]
    first = urlunsplit((scheme, (userinfo + "@" if userinfo else "") + _netloc(host, port), "", parts.query, ""))
    return first, seeds


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


#: Connection options a url may set that are numbers, and their bounds.
_URL_NUMBERS = {"socket_timeout": (0.0, 86400.0), "socket_connect_timeout": (0.0, 86400.0),
                 "health_check_interval": (0.0, 86400.0), "db": (0, 2**31 - 1), "max_connections": (1, 2**31 - 1)}


def check_numbers(kwargs: Mapping[str, Any]) -> None:
    """ValueError for a url option that is a number out of its bounds (NaN,
    1e999, a negative timeout): the socket layer would raise at the first
    command, far from the url."""
    for name, (low, high) in _URL_NUMBERS.items():
        value = kwargs.get(name)
        if value is not None and not (isinstance(value, (int, float)) and low <= value <= high):
            raise ValueError(f"{name} must be a number from {low} to {high}, not {value!r}")


def url_problem(exc: Exception) -> str:
    """What is wrong with a url, from what redis-py raised."""
    text = str(exc)
    unknown = re.search(r"unexpected keyword argument '(\w+)'", text)
    if isinstance(exc, TypeError) and unknown:
        return f"unknown option {unknown[1]!r}"
    return text


def sentinel_address(url: str) -> tuple[list[tuple[str, int]], str, int, Optional[str]]:
    """(sentinels, service, db, password) of ``sentinel://[:password@]host:port
    [,host:port...]/service[/db]``; ConfigError without a service, ValueError
    for a db that is not a number."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    password = unquote(parts.password) if parts.password else None
    hosts = []
    for item in netloc.split(","):
        host, _, port = item.rpartition(":")
        hosts.append((host or item, int(port) if port.isdigit() else 26379))
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ConfigError(f"redis.url: sentinel url needs a service name, got {safe.shown(url, safe.URL_CHARS)!r}")
    db = int(path[1]) if len(path) > 1 else int(parse_qs(parts.query).get("db", ["0"])[0])  # ValueError: caller
    return hosts, path[0], db, password


def setname_refused(log: logging.Logger, exc: Exception) -> None:
    """Say, once per process, that Redis refused CLIENT SETNAME (NOPERM, or
    the command renamed away): connections only go unnamed in CLIENT LIST."""
    warn_once(log, "refused:CLIENT SETNAME", "Redis refused CLIENT SETNAME (%s): connections stay unnamed "
              "(grant +client|setname to name them)", exc)
