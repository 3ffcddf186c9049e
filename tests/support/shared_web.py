"""One redis-server and one plain ``smqsup web`` on it, shared by the tests of a
module that neither kill nor reconfigure them (a web server's start is most of
such a test): the Redis emptied for each test, the web server stopped at the
module's end with its exit status checked. A test module takes them by
importing ``shared_web_fixture`` and ``shared_web_servers`` (the fixtures
``shared_web`` and ``_shared_web``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis

from smqsup.errors import RedisServerError
from smqsup.launch.discovery import find_redis_server
from smqsup.launch.process import RedisServer
from tests.support.webserver import WebServer


@dataclass
class SharedWeb:
    """The module's redis-server, a client of it, and ``smqsup web --url URL --listen 127.0.0.1:0`` on it."""

    redis: RedisServer
    client: "redis.Redis[bytes]"
    server: WebServer


def _binary() -> str:
    """The redis-server to run; fails (never skips) with a one-line message if none, as conftest's fixtures do."""
    try:
        return find_redis_server()
    except RedisServerError as error:
        message = str(error)
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="module", name="_shared_web")
def shared_web_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SharedWeb]]:
    """The module's SharedWeb, in a one-item list (empty until a test asks for it)."""
    shared: list[SharedWeb] = []
    try:
        yield shared
    finally:
        for s in shared:
            try:
                s.client.close()
                assert s.server.stop() == 0, s.server.log()
            finally:
                s.redis.kill()


@pytest.fixture(name="shared_web")
def shared_web_fixture(_shared_web: list[SharedWeb], tmp_path_factory: pytest.TempPathFactory) -> SharedWeb:
    """The module's SharedWeb (started by the first test asking for it), its Redis emptied, appendonly
    and appendfsync always as the ``redis_server`` fixture starts them: what a test left is gone."""
    if not _shared_web:
        server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="always", binary=_binary())
        server.start()
        try:
            web = WebServer("--url", server.url, "--listen", "127.0.0.1:0", log_dir=tmp_path_factory.mktemp("web"))
        except BaseException:
            server.kill()
            raise
        _shared_web.append(SharedWeb(server, redis.Redis.from_url(server.url), web))
    shared = _shared_web[0]
    shared.client.flushall(asynchronous=True)  # (a gigabyte a test left is freed off the event loop)
    if shared.client.config_get("appendonly").get("appendonly") != "yes":  # (a test turned it off)
        shared.client.config_set("appendonly", "yes")
    return shared
