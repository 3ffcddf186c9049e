"""The validators of where smqsup connects and listens: Redis urls (plain,
TLS, unix socket, sentinel, cluster seeds), ``host:port``, the web UI's
listen address and the loopback rule it obeys without a token, and the two
values that go with them: ``redis.data_dir`` and ``web.token``.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

from smqsup import safe
from smqsup.config.problems import error

_URL_SCHEMES = ("redis", "rediss", "unix", "sentinel", "redis+cluster", "rediss+cluster")


def _string(value: object, key: str, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise error("expected a non-empty string", value, path=path, key=key)
    return value


def redis_url(value: object, key: str, path: str) -> str:
    """A redis://, rediss://, unix://, sentinel://, redis+cluster:// or
    rediss+cluster:// url (its password never shown)."""
    url = _string(value, key, path)
    shown = re.sub(r"//[^/?#]*@", "//***@", url)  # the userinfo ends at the last '@'
    shown = safe.mask_url(shown)  # password= in the query
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed '[' of an IPv6 host
        raise error(f"invalid url ({exc})", shown, path=path, key=key) from None
    if parts.scheme not in _URL_SCHEMES:
        problem = f"unsupported url scheme {parts.scheme!r} (expected {', '.join(_URL_SCHEMES)})"
        raise error(problem, shown, path=path, key=key)
    if parts.scheme == "unix" and not parts.path:
        raise error("a unix:// url needs a socket path", shown, path=path, key=key)
    if parts.scheme in ("redis", "rediss"):
        try:
            port_ok = parts.port != 0
        except ValueError:  # not a number, or out of 0..65535
            port_ok = False
        if not port_ok:
            raise error("invalid port in url", shown, path=path, key=key)
        if not parts.hostname:
            raise error("the url has no host", shown, path=path, key=key)
        try:  # as connecting does first: else a UnicodeError there, not a connection error
            parts.hostname.encode("idna")
        except UnicodeError:
            raise error("invalid host name in url", shown, path=path, key=key) from None
    if parts.scheme == "sentinel" and not parts.netloc:
        raise error("a sentinel:// url needs the sentinels' host:port", shown, path=path, key=key)
    if parts.scheme.endswith("+cluster"):
        _cluster_seeds(parts, shown, key, path)
    return url


def _cluster_seeds(parts: SplitResult, shown: str, key: str, path: str) -> None:
    """The seed nodes of a cluster url: host:port[,host:port...], database 0."""
    hosts = parts.netloc.rpartition("@")[2]
    if not hosts:
        raise error("a cluster url needs its seed nodes' host:port", shown, path=path, key=key)
    for item in hosts.split(","):
        try:
            host_port(item)
        except ValueError as exc:
            raise error(f"bad seed node ({exc})", shown, path=path, key=key) from None
    if parts.path.strip("/") not in ("", "0"):
        raise error("a cluster has only database 0", shown, path=path, key=key)


def host_port(item: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (port default 6379)."""
    if item.startswith("["):
        host, _, rest = item[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"bad port in {item!r}")
    if not host or any(c in host for c in " /?#@[]"):
        raise ValueError(f"no host in {item!r}")
    host.encode("idna")  # UnicodeError (a ValueError) for a name no resolver takes
    return host, int(port) if port else 6379


def data_dir(value: object, key: str, path: str) -> Path:
    """A directory; relative to the config file's directory when relative."""
    directory = Path(_string(value, key, path)).expanduser()
    return Path(os.path.abspath(Path(path).parent / directory))


#: ``HOST:PORT`` or ``[IPV6]:PORT`` (the port's range is checked apart).
_LISTEN = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s\[\]:/]+):([0-9]{1,5})")


def parse_listen(value: object, key: str = "web.listen", path: str = "", *,
                 any_port: bool = False) -> tuple[str, int]:
    """``(host, port)`` of a listen address, the host without brackets; ConfigError otherwise.

    The one rule for a listen address, wherever it is given: ``HOST:PORT``
    with HOST a name or an IPv4 address, or ``[IPV6]:PORT``; the port from 1
    to 65535. ``any_port`` also takes port 0, any free port, as ``smqsup web
    --listen`` does (it prints the port it bound; the tests start it so).
    queues.yaml's ``web.listen`` does not: the supervisor restarts its web
    child, and the UI it runs keeps one address across restarts.
    """
    match = _LISTEN.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise error("expected host:port (IPv6 in brackets: [::1]:8087)", value, path=path, key=key)
    host, port, lowest = match[1], int(match[2]), 0 if any_port else 1
    if host.startswith("["):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise error("invalid IPv6 address", value, path=path, key=key) from None
    else:
        # What binding does first: a name IDNA cannot encode (a label over 63
        # characters, an empty one, a lone surrogate from undecodable argv
        # bytes) would fail there with a UnicodeError, not an OSError.
        try:
            host.encode("idna")
        except UnicodeError:
            raise error("invalid host name", value, path=path, key=key) from None
    if not lowest <= port <= 65535:
        raise error(f"expected a port from {lowest} to 65535", value, path=path, key=key)
    return host, port


def listen(value: object, key: str, path: str) -> str:
    """queues.yaml's ``web.listen``: an address parse_listen takes, port 0 excepted."""
    parse_listen(value, key, path)
    return str(value)


def is_loopback(host: str) -> bool:
    """True for ``localhost``, the names under it (RFC 6761) and the loopback
    addresses (127.0.0.0/8, ::1), in any case, brackets or not.

    The one rule for where the web UI may listen without a token (config and
    ``smqsup web`` alike) and which Host headers it answers without one.
    """
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def token(value: object, key: str, path: str) -> str | None:
    """A secret: an error about it never shows it. Empty means no token."""
    if not isinstance(value, str):
        raise error(f"expected a string, got a value of type {type(value).__name__}",
                    path=path, key=key)
    return value or None

