"""Which Redis a config means: its url, or the embedded server of its data dir.

Only the process that owns the embedded server (the supervisor, or a
standalone ``smqsup consume``) starts it; every other command connects to the
running one through its unix socket and says so in one line when none runs.
"""

from __future__ import annotations

from pathlib import Path

from smqsup.config import Config
from smqsup.errors import SmqsupError
from smqsup.redis_server import RedisServer, default_data_dir, running_url


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


def ensure_server(config: Config) -> tuple[str, RedisServer | None]:
    """The url of ``config``'s Redis, starting the embedded server when none
    runs. Returns the server too when this call started it: the caller owns
    it and stops it last."""
    if config.redis.url is not None:
        return config.redis.url, None
    url = running_url(data_dir(config))
    if url is not None:
        return url, None
    server = RedisServer(data_dir(config), appendfsync=config.redis.appendfsync)
    server.start()
    return server.url, server
