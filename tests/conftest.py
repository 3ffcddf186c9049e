"""Pytest fixtures: a private, real redis-server per test (never the machine's shared one),
real Redis Cluster and Sentinel topologies, and the real ``smqsup -c FILE`` supervisor
run against them."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional, TypeVar, cast

import pytest
import redis

from smqsup.client.producer import Producer
from smqsup.config.model import QueueConfig
from smqsup.errors import RedisServerError
from smqsup.launch.discovery import find_redis_server
from smqsup.launch.process import RedisServer
from tests.support import inproc, procs, script_coverage
from tests.support.helpers import client_for, servers_of
from tests.support.topology import ClusterTopology, SentinelTopology

#: The both_clients fixtures (client, new_producer) live beside the adapter they hand out.
pytest_plugins = ("tests.support.clients",)


def _redis_binary() -> str:
    """The redis-server to run; fails the test (never skips it) with a one-line message if none."""
    try:
        return find_redis_server()
    except RedisServerError as error:
        message = str(error)
    # Failed outside the except block, or pytest prints the message twice (chained).
    pytest.fail(message, pytrace=False)


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A started redis-server on a unix socket in a fresh directory, appendfsync always.

    Fails (never skips) with a one-line message when no redis-server is installed.
    """
    binary = _redis_binary()
    server = RedisServer(
        tmp_path_factory.mktemp("redis"), appendfsync="always", binary=binary, dies_with_parent=True
    )
    server.start()
    try:
        yield server
    finally:
        # SIGKILL: the test is over and nothing reads its data. (A SIGTERM'd
        # redis-server shuts down at its next serverCron tick: 0.1 s a test.)
        server.kill()


def _started_cluster(tmp_path_factory: pytest.TempPathFactory, *, failover: bool) -> ClusterTopology:
    cluster = ClusterTopology(tmp_path_factory.mktemp("cluster"), binary=_redis_binary(), failover=failover)
    cluster.start()
    return cluster


_Shared = TypeVar("_Shared", ClusterTopology, SentinelTopology)


def _kept() -> Iterator[list[Any]]:
    """A session's shared topology, in a one-item list (empty until first used), discarded at its end."""
    shared: list[Any] = []
    try:
        yield shared
    finally:
        for topology in shared:
            topology.discard()


def _reused(shared: list[_Shared], start: Callable[[], _Shared]) -> _Shared:
    """The shared topology, started afresh when there is none or an earlier test left it changed (a
    node killed or stopped, roles or slots moved); flushed for the test."""
    if shared and not shared[0].intact():
        shared.pop().discard()
    if not shared:
        shared.append(start())
    shared[0].flushall()
    return shared[0]


@pytest.fixture(scope="session")
def _shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ClusterTopology]]:
    """The cluster the tests of this process share (one per xdist worker: starting one
    costs seconds, 27 modules use it), in a one-item list so ``redis_cluster`` can
    replace it."""
    yield from _kept()


@pytest.fixture
def redis_cluster(_shared_cluster: list[ClusterTopology],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    """A Redis Cluster of 3 masters and 3 replicas (tests/support/topology.py), shared by the
    tests of a worker process and flushed for each; started afresh when an earlier test left it
    changed (a node killed, roles or slots moved). Its replicas never fail over: a test
    that kills nodes takes ``fresh_cluster``."""
    cluster = _reused(_shared_cluster, lambda: _started_cluster(tmp_path_factory, failover=False))
    yield cluster
    script_coverage.record(cluster)


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterTopology]:
    """A Redis Cluster of its own for this test (for tests that kill nodes); stopped after it."""
    cluster = _started_cluster(tmp_path_factory, failover=True)
    try:
        yield cluster
    finally:
        try:
            script_coverage.record(cluster)
        finally:
            cluster.discard()


def _started_sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> SentinelTopology:
    group = SentinelTopology(tmp_path_factory.mktemp("sentinel"), binary=_redis_binary())
    group.start()
    return group


@pytest.fixture(scope="session")
def _shared_sentinel_group() -> Iterator[list[SentinelTopology]]:
    """The Sentinel group the tests of this process share (starting one costs 2 s: the
    sentinels find each other by their hello messages), in a one-item list so that
    ``sentinel_group`` can replace it."""
    yield from _kept()


@pytest.fixture
def sentinel_group(_shared_sentinel_group: list[SentinelTopology],
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelTopology]:
    """A master, its replica and 3 Sentinels watching them as 'mymaster' (tests/support/topology.py),
    shared by the tests of a worker process and flushed for each; started afresh when an
    earlier test left it changed (a server killed or stopped, a failover). A test that
    kills or stops its servers takes ``fresh_sentinel_group``."""
    yield _reused(_shared_sentinel_group, lambda: _started_sentinel_group(tmp_path_factory))


@pytest.fixture
def fresh_sentinel_group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelTopology]:
    """A Sentinel group of its own for this test (for tests that kill or stop its servers)."""
    group = _started_sentinel_group(tmp_path_factory)
    try:
        yield group
    finally:
        group.discard()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Iterator[None]:
    """A test marked ``exclusive`` (it times handler starts against a rate)
    runs while nothing of the other xdist worker runs; every other test runs
    alongside any but those. The lock spans the whole protocol of a test,
    so a module's fixtures, set up before its first test and torn down after
    its last (a cluster of six servers shutting down), are inside it too.
    Two file locks shared by the workers of one run: ``gate`` is held by the
    others (shared) and by an exclusive test (alone); ``turn`` keeps a
    waiting exclusive test from being passed for ever by the other worker's
    next tests. Without xdist (``-n 0``) nothing runs alongside, and nothing
    is locked."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    alone = item.get_closest_marker("exclusive") is not None
    base = Path(tempfile.gettempdir()) / f"smqsup-tests-{run}"
    with open(f"{base}.turn", "a+") as turn, open(f"{base}.gate", "a+") as gate:
        fcntl.flock(turn, fcntl.LOCK_EX)
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)


def pytest_configure(config: pytest.Config) -> None:
    """Where Python may not write bytecode ($PYTHONDONTWRITEBYTECODE, as on
    some CI machines and sandboxes), every process the tests start (each
    supervisor, ``smqsup`` command and ``smqsup web``: hundreds a run) would
    compile smqsup from source again, about 0.2 s of CPU each. Let them
    write it instead, into a private directory of this run
    ($PYTHONPYCACHEPREFIX; the xdist workers inherit it too), so that one
    compiles and the others read: nothing is written into the checkout, and
    a source changed since is compiled again (a cached file records the
    mtime and size of its source). A test that rewrites its own modules at
    once sets $PYTHONDONTWRITEBYTECODE for its processes itself."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    import atexit
    import shutil

    prefix = tempfile.mkdtemp(prefix="smqsup-pycache-")
    atexit.register(shutil.rmtree, prefix, ignore_errors=True)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    del os.environ["PYTHONDONTWRITEBYTECODE"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test of a ``topologies`` module that talks to Redis through
    ``redis_url`` twice: on one redis-server and on a 3+3 Redis Cluster. A
    test that drives the server itself (``redis_server``: kill, restart) or
    is marked ``single_node`` runs on one server only. And run each test of
    a ``both_clients`` module that takes ``producer`` or ``new_producer``
    once per client (tests/support/clients.py), unless marked ``sync_client_only``:
    the AsyncProducer on one server only (its cluster path is the same
    plans and frames), unless marked ``both_clients("cluster")``."""
    d = metafunc.definition
    topologies = (d.get_closest_marker("topologies") is not None and d.get_closest_marker("single_node") is None
                  and "redis_url" in metafunc.fixturenames and "redis_server" not in metafunc.fixturenames)
    both = d.get_closest_marker("both_clients")
    clients_too = (both is not None and d.get_closest_marker("sync_client_only") is None
                   and bool({"producer", "new_producer"} & set(metafunc.fixturenames)))
    if topologies and clients_too:
        pairs = [("single", "sync"), ("cluster", "sync"), ("single", "async")]
        if both is not None and "cluster" in both.args:
            pairs.append(("cluster", "async"))
        metafunc.parametrize(("topology", "client"), pairs, indirect=True, ids=["-".join(p) for p in pairs])
    elif topologies:
        metafunc.parametrize("topology", ["single", "cluster"], indirect=True)
    elif clients_too:
        metafunc.parametrize("client", ["sync", "async"], indirect=True)


@pytest.fixture
def topology(request: pytest.FixtureRequest) -> str:
    """Where the test's Redis is: "single" (one redis-server) or "cluster"."""
    return cast(str, getattr(request, "param", "single"))


@pytest.fixture
def redis_url(topology: str, request: pytest.FixtureRequest) -> str:
    """URL of the test's private redis-server, or (the cluster run of a
    ``topologies`` test) of the module's Redis Cluster, emptied for it."""
    if topology == "cluster":
        return cast(str, request.getfixturevalue("redis_cluster").url)
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A redis-py client connected to the test's private redis-server (a
    RedisCluster client for a cluster: the commands tests use route by key)."""
    client = client_for(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def notify() -> Iterator[procs.NotifySocket]:
    """A bound datagram socket to pass as the supervisor's NOTIFY_SOCKET."""
    n = procs.NotifySocket()
    yield n
    n.close()


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """The $SMQ_TEST_OUT directory where test handlers record what they saw."""
    d = tmp_path / "out"
    d.mkdir()
    return d


@pytest.fixture
def supervise(tmp_path: Path, out_dir: Path, redis_url: str) -> Iterator[Callable[..., procs.Supervisor]]:
    """Start ``smqsup -c FILE`` (FILE written from the arguments); every one started is stopped at teardown.

    ``supervise(queues, notify_socket=None, *, url=None, embedded=False, name=None, extra_env=None,
    journal=False, **top)``: the config points at the test's private redis-server, or at ``url``,
    or (``embedded``) at no url at all. Without ``name`` the file is queues.yaml and the out dir
    the ``out_dir`` fixture's; with one (several supervisors on one Redis), ``NAME.yaml`` and a
    directory NAME of their own.
    """
    started: list[procs.Supervisor] = []

    def _start(queues: dict[str, dict[str, Any]], notify_socket: Optional[procs.NotifySocket] = None, *,
               url: Optional[str] = None, embedded: bool = False, name: Optional[str] = None,
               extra_env: Optional[dict[str, str]] = None, journal: bool = False, **top: Any) -> procs.Supervisor:
        cfg, out = tmp_path / "queues.yaml", out_dir
        if name is not None:
            cfg, out = tmp_path / f"{name}.yaml", tmp_path / name
            out.mkdir()
        procs.write_config(cfg, None if embedded else url or redis_url, queues, **top)
        s = procs.Supervisor(cfg, out, notify_socket.path if notify_socket else None, extra_env=extra_env,
                             journal=journal, name=name or "supervisor")
        started.append(s)
        return s

    yield _start
    for s in started:
        s.discard()


@pytest.fixture
def start(redis_url: str) -> Iterator[Callable[..., inproc.Running]]:
    """Start a consumer (handler, QueueConfig fields; ``fetch_block_s``, 0.2 s unless given) and a
    collector in threads of the test process."""
    running: list[inproc.Running] = []

    def _start(handler: Callable[[Any], Any], fetch_block_s: float = 0.2, **options: Any) -> inproc.Running:
        options.setdefault("name", "q")
        options.setdefault("handler", "tests.support.handlers:record")
        r = inproc.Running(redis_url, QueueConfig(**options), handler, fetch_block_s)
        running.append(r)
        return r

    yield _start
    for r in running:
        r.request_stop()
    if running:
        _end_blocking_fetches(redis_url)
    for r in running:
        r.join()


def _end_blocking_fetches(url: str) -> None:
    """CLIENT UNBLOCK every client blocked in a BLMOVE on the test's Redis:
    its fetch returns as at its timeout, nothing taken, and its consumer,
    asked to stop, stops now instead of at the end of its fetch_block_s (a
    teardown: the test is over; its Redis serves only its own clients). A
    server the test left down or unreachable is skipped: the consumers then
    stop as they do without this."""
    client = client_for(url, socket_timeout=5)
    try:
        for server in servers_of(client):
            for c in server.client_list():
                if "b" in c.get("flags", "") and c.get("cmd") == "blmove":
                    server.client_unblock(int(c["id"]))
    except redis.RedisError:
        pass
    finally:
        client.close()


@pytest.fixture
def producer(redis_url: str, new_producer: Callable[..., Producer]) -> Producer:
    """A Producer on the test's Redis (or, for the "async" client, an AsyncProducer driven as one)."""
    return new_producer(redis_url)


#: Test files that run for minutes on end, whatever their test count: given
#: to a worker first, so that the rest of the suite runs beside them (xdist
#: otherwise hands out the files with the most tests first, and a one-test
#: file of 2 minutes last, with the other worker idle).
LONG_FILES = ("tests/test_autoscaling_steady.py",)
#: Files of a few tests that run for half a minute to a minute, longest
#: first: handed out last (by their test count) they ended the run on one
#: worker while the other had nothing left. See pytest_xdist_make_scheduler.
#: (test_model.py: one test of 35 s, the last file handed out by its count.)
LONG_FEW = (
    "tests/test_model.py",
    "tests/test_schedules_clocks.py",
    "tests/test_failover.py",
    "tests/test_autoscaling_processes.py",
    "tests/test_schedules_processes.py",
    "tests/test_chaos.py",
    "tests/test_delays_processes.py",
    "tests/test_queue_control_processes.py",
    "tests/test_concurrency_processes.py",
)


def _exclusive_files(config: pytest.Config) -> tuple[str, ...]:
    """The test files holding an ``exclusive`` test, read from their text
    (the xdist controller collects no tests), as the scheduler names them."""
    tests = Path(__file__).resolve().parent
    try:
        where = tests.relative_to(config.rootpath.resolve()).as_posix()
    except ValueError:  # (tests/ outside the rootdir: no scope is named so)
        return ()
    return tuple(sorted(f"{where}/{p.name}" for p in tests.glob("test_*.py")
                        if "pytest.mark.exclusive" in p.read_text()))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadfile, the files handed out in phases, each once the one
    before is done (every test of it ended; until then its files wait at the
    end of the queue), the rest meanwhile by test count:

    1. LONG_FILES, first;
    2. the files with an ``exclusive`` test: not beside LONG_FILES (one would
       wait for the 2-minute test to end), and while the other worker runs
       short tests (an exclusive test waits for the other's test under way);
    3. LONG_FEW: not beside the steady-load test of LONG_FILES (they load the
       machine, and it measures steadiness), nor beside an exclusive test;
       then the files of many short tests, which end the run on both workers.
    """
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    exclusive = _exclusive_files(config)
    phases = (LONG_FILES, exclusive, tuple(f for f in LONG_FEW if f not in exclusive))

    class LongFirst(LoadFileScheduling):  # type: ignore[misc]
        def _assign_work_unit(self, node: Any) -> None:
            first: list[str] = []
            later = [scope for phase in phases for scope in phase]
            for phase in phases:
                first += phase
                later = later[len(phase):]
                if self._left(phase):
                    break
            for scope in later:  # (not before their phase: after everything else)
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope)
            for scope in reversed(first):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def _left(self, scopes: tuple[str, ...]) -> bool:
            """Whether a test of ``scopes`` is still to run (handed out or not)."""
            if any(scope in self.workqueue for scope in scopes):
                return True
            return any(scope in scopes and not all(done.values())
                       for units in self.assigned_work.values() for scope, done in units.items())

    return LongFirst(config, log)
