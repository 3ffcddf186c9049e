"""The pytest fixtures of the testing kit (the ``smqsup`` pytest11 plugin):
nothing runs until a test asks for one of them.

    smqsup_redis_url (session) ─▶ a private redis-server for the whole run
    smqsup_namespace           ─▶ a namespace of the test's own (a clean slate)
    smqsup_config              ─▶ the queues.yaml to read (ini ``smqsup_config``)
    smqsup_producer, smqsup_worker ─▶ a Producer and a Worker on both
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from smqsup.client.producer import Producer
    from smqsup.testing.worker import Worker

#: The ini option naming the queues.yaml, and where it is looked for when unset.
CONFIG_OPTION = "smqsup_config"
DEFAULT_CONFIG = "queues.yaml"
_NAMESPACES = itertools.count(1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(CONFIG_OPTION, "the queues.yaml the smqsup fixtures read (relative to the rootdir)",
                  default=DEFAULT_CONFIG)


@pytest.fixture(scope="session")
def smqsup_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The url of a private redis-server (a unix socket in a temp dir, no
    persistence), started once for the test session and stopped at its end;
    killed by the kernel if pytest dies first (a CI time limit's SIGTERM or
    SIGKILL), on Linux, so that no server outlives its run."""
    from smqsup.launch.process import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("smqsup-redis"), appendfsync="no", dies_with_parent=True)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def smqsup_namespace() -> str:
    """A namespace no other test uses: each test starts with empty queues."""
    return f"test-{os.getpid()}-{next(_NAMESPACES)}"


@pytest.fixture
def smqsup_config(request: pytest.FixtureRequest) -> Path:
    """The queues.yaml of the project: the ini option ``smqsup_config``
    (default queues.yaml) against the rootdir. Override the fixture to
    point elsewhere."""
    return Path(request.config.rootpath) / str(request.config.getini(CONFIG_OPTION))


@pytest.fixture
def smqsup_producer(smqsup_redis_url: str, smqsup_namespace: str) -> Iterator["Producer"]:
    """A Producer on the session's redis-server, in the test's namespace."""
    from smqsup.client.producer import Producer

    with Producer(smqsup_redis_url, smqsup_namespace) as producer:
        yield producer


@pytest.fixture
def smqsup_worker(smqsup_config: Path, smqsup_redis_url: str, smqsup_namespace: str) -> Iterator["Worker"]:
    """A Worker running the handlers of ``smqsup_config`` in this process,
    on the session's redis-server, in the test's namespace."""
    from smqsup.testing.worker import Worker

    if not Path(smqsup_config).is_file():
        pytest.fail(f"smqsup_worker: no config at {smqsup_config} (set {CONFIG_OPTION} in your pytest "
                    f"configuration, or override the smqsup_config fixture)", pytrace=False)
    worker = Worker(smqsup_config, smqsup_redis_url, smqsup_namespace)
    try:
        yield worker
    finally:
        worker.close()
