"""Which Redis a config means: its url, or the embedded server of its data dir.

Only the process that owns the embedded server (the supervisor, or a
standalone ``smqsup consume``) starts it; every other command connects to the
running one through its unix socket and says so in one line when none runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import psutil

from smqsup import safe
from smqsup.config.model import Config
from smqsup.errors import SmqsupError
from smqsup.launch.discovery import default_data_dir, read_small, running_url
from smqsup.launch.process import RedisServer

log = logging.getLogger(__name__)


class NoEmbeddedServer(SmqsupError):
    """The config names no redis.url and its embedded server is not running."""

    exit_code = 2


def data_dir(config: Config) -> Path:
    """The embedded server's data directory for ``config``."""
    return config.redis.data_dir or default_data_dir(config.path)


def redis_url(config: Config) -> str:
    """The url to reach ``config``'s Redis, without starting anything."""
    if config.redis.url is not None:
        return config.redis.url
    url = running_url(data_dir(config))
    if url is None:
        raise NoEmbeddedServer(
            f"{config.path}: no embedded redis-server is running for this config "
            f"(data dir {data_dir(config)}): start `smqsup -c {config.path}` first, or set redis.url")
    return url


class EmbeddedServerInUse(SmqsupError):
    """A supervisor found the embedded server of its data dir run by another live process."""

    exit_code = 2


def ensure_server(config: Config, *, shared: bool = True) -> tuple[str, RedisServer | None]:
    """The url of ``config``'s Redis, starting the embedded server when none
    runs. Returns the server too when this call started it: the caller owns
    it and stops it last.

    ``shared`` False (the supervisor) refuses a server that another live
    process owns: that owner stops it when it stops, which would leave this
    caller's queues without Redis for good."""
    if config.redis.url is not None:
        return config.redis.url, None
    url = running_url(data_dir(config))
    if url is not None:
        orphan = _orphan_pid(data_dir(config))
        if orphan is None:
            if not shared:
                raise EmbeddedServerInUse(
                    f"{config.path}: the embedded redis-server of data dir {data_dir(config)} is already "
                    f"run by {_owner(data_dir(config))}, which stops it when it stops: run one supervisor "
                    "per data dir (give this one its own redis.data_dir), or share a Redis through redis.url")
            return url, None  # another live smqsup owns it
        log.warning("adopting the embedded redis-server (pid %d) left by a supervisor that died; "
                    "it is stopped when this one stops", orphan)
        return url, AdoptedServer(data_dir(config), url, orphan)
    server = RedisServer(data_dir(config), appendfsync=config.redis.appendfsync)
    server.start()
    return server.url, server


def _server_and_parent(directory: Path) -> tuple[int, Optional[psutil.Process]]:
    """The pid of the server serving ``directory`` (its pid file) and its
    parent process; OSError, ValueError or psutil.Error when unreadable."""
    pid = int(read_small(directory / "redis.pid").strip())
    return pid, psutil.Process(pid).parent()


def _orphan_pid(directory: Path) -> Optional[int]:
    """The pid of the server serving ``directory`` if no live smqsup process is
    its parent any more (its owner was SIGKILLed), else None."""
    try:
        pid, parent = _server_and_parent(directory)
        if parent is not None and parent.pid != 1 and "smqsup" in " ".join(parent.cmdline()):
            return None
    except (OSError, ValueError, psutil.Error):
        return None
    return pid


def _owner(directory: Path) -> str:
    """Who runs the server of ``directory``, for an error: its parent's pid
    and name when they can be read (never its command line, which may hold
    a secret)."""
    try:
        _, parent = _server_and_parent(directory)
        if parent is not None:
            return f"process {parent.pid} ({safe.escape(parent.name(), 100)})"
    except (OSError, ValueError, psutil.Error):
        pass
    return "another process"


class AdoptedServer(RedisServer):
    """A running embedded server whose owner died: this process now stops it
    last, with SHUTDOWN (which flushes the AOF), like one it started."""

    def __init__(self, directory: Path, url: str, pid: int) -> None:
        super().__init__(directory)
        self._adopted_url = url
        self._adopted_pid = pid

    @property
    def url(self) -> str:
        return self._adopted_url

    def stop(self, timeout_s: float = 10.0) -> None:
        from smqsup.store.broker import Broker

        broker = Broker(self._adopted_url, client_name="smqsup-shutdown")
        try:
            broker.shutdown_server()
        except Exception as exc:  # noqa: BLE001 - the connection drops as the server exits
            log.debug("SHUTDOWN of the adopted redis-server: %s", exc)
        try:
            psutil.Process(self._adopted_pid).wait(timeout_s)
        except psutil.Error:
            pass
