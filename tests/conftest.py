"""Pytest fixtures: a private, real redis-server per test (never the shared one on 6379)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from smqsup.errors import RedisServerError
from smqsup.redis_server import RedisServer, find_redis_server


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A started redis-server on a unix socket in a fresh directory, appendfsync always.

    Fails (never skips) with a one-line message when no redis-server is installed.
    """
    try:
        binary = find_redis_server()
    except RedisServerError as error:
        pytest.fail(str(error), pytrace=False)
    server = RedisServer(
        tmp_path_factory.mktemp("redis"), appendfsync="always", binary=binary
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the test's private redis-server."""
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A redis-py client connected to the test's private redis-server."""
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()
