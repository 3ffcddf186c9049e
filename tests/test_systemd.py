"""systemd: sd_notify datagrams, checked on real AF_UNIX sockets (a path and
the abstract namespace), and a real supervisor's watchdog pings and journal
log lines."""

from __future__ import annotations

import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from smqsup.client.producer import Producer
from smqsup.supervisor.systemd import Notifier, monotonic_usec, unset_environment
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

Listener = tuple[socket.socket, str]
Supervise = Callable[..., procs.Supervisor]

_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \[\d+\] ")


def _bind(address: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5.0)
    return sock


@pytest.fixture(params=["path", "abstract"])
def listener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Listener]:
    """A bound datagram socket and the NOTIFY_SOCKET value that names it."""
    if request.param == "path":
        name = str(tmp_path / "notify")
        sock = _bind(name)
    else:
        name = f"@smqsup-test-{uuid.uuid4().hex}"
        sock = _bind("\0" + name[1:])
    try:
        yield sock, name
    finally:
        sock.close()


def receive(sock: socket.socket) -> bytes:
    return sock.recv(4096)


def nothing_pending(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        sock.recv(4096)
    except BlockingIOError:
        return True
    finally:
        sock.settimeout(5.0)
    return False


def test_ready_with_status(listener: Listener) -> None:
    """ready(status) sends READY=1 then STATUS= in one datagram."""
    sock, name = listener
    notifier = Notifier({"NOTIFY_SOCKET": name})
    assert notifier.enabled
    notifier.ready("3 consumers up")
    assert receive(sock) == b"READY=1\nSTATUS=3 consumers up"
    notifier.ready()
    assert receive(sock) == b"READY=1"
    notifier.close()


def test_reloading_carries_monotonic_usec(listener: Listener) -> None:
    """reloading() sends RELOADING=1 with a MONOTONIC_USEC of now."""
    sock, name = listener
    notifier = Notifier({"NOTIFY_SOCKET": name})
    before = monotonic_usec()
    notifier.reloading()
    after = monotonic_usec()
    reloading, stamp = receive(sock).split(b"\n")
    assert reloading == b"RELOADING=1"
    key, _, value = stamp.partition(b"=")
    assert key == b"MONOTONIC_USEC"
    assert before <= int(value) <= after
    notifier.close()


def test_stopping_watchdog_and_notify(listener: Listener) -> None:
    """stopping(), watchdog() and notify(**fields) send exactly their fields, in order."""
    sock, name = listener
    notifier = Notifier({"NOTIFY_SOCKET": name})
    notifier.stopping()
    assert receive(sock) == b"STOPPING=1"
    notifier.watchdog()
    assert receive(sock) == b"WATCHDOG=1"
    notifier.notify(STATUS="draining", MAINPID=42, ERRNO=0)
    assert receive(sock) == b"STATUS=draining\nMAINPID=42\nERRNO=0"
    notifier.notify(STATUS="two\nlines")
    assert receive(sock) == b"STATUS=two lines"
    notifier.close()


def test_status_is_deduplicated(listener: Listener) -> None:
    """status() skips a text equal to the status last sent, by any method."""
    sock, name = listener
    notifier = Notifier({"NOTIFY_SOCKET": name})
    notifier.status("idle")
    notifier.status("idle")
    notifier.status("busy")
    notifier.ready("busy")
    notifier.status("busy")
    assert [receive(sock) for _ in range(3)] == [b"STATUS=idle", b"STATUS=busy", b"READY=1\nSTATUS=busy"]
    assert nothing_pending(sock)
    notifier.close()


def test_watchdog_interval_rules() -> None:
    """watchdog_interval_s is half of WATCHDOG_USEC, only for this pid and when enabled."""
    socket_env = {"NOTIFY_SOCKET": "/run/nonexistent/notify"}
    assert Notifier({**socket_env, "WATCHDOG_USEC": "30000000"}).watchdog_interval_s == 15.0
    mine = {**socket_env, "WATCHDOG_USEC": "5000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier(mine).watchdog_interval_s == 2.5
    other = {**socket_env, "WATCHDOG_USEC": "5000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier(other).watchdog_interval_s is None
    assert Notifier(socket_env).watchdog_interval_s is None
    assert Notifier({**socket_env, "WATCHDOG_USEC": "soon"}).watchdog_interval_s is None
    assert Notifier({**socket_env, "WATCHDOG_USEC": "0"}).watchdog_interval_s is None
    assert Notifier({"WATCHDOG_USEC": "30000000"}).watchdog_interval_s is None


def test_disabled_without_notify_socket() -> None:
    """Without NOTIFY_SOCKET every method is a silent no-op."""
    for environ in ({}, {"NOTIFY_SOCKET": ""}):
        notifier = Notifier(environ)
        assert not notifier.enabled
        notifier.ready("x")
        notifier.reloading()
        notifier.status("x")
        notifier.stopping()
        notifier.watchdog()
        notifier.close()


def test_unsupported_address_disables_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A NOTIFY_SOCKET that is neither a path nor @name disables notification, with a warning."""
    with caplog.at_level(logging.WARNING, logger="smqsup.supervisor.systemd"):
        notifier = Notifier({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not notifier.enabled
    assert "vsock:2:1234" in caplog.text
    notifier.ready()


def test_default_environment_is_os_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without a mapping the Notifier reads os.environ."""
    sock = _bind(str(tmp_path / "notify"))
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
        notifier = Notifier()
        notifier.watchdog()
        assert receive(sock) == b"WATCHDOG=1"
        notifier.close()
    finally:
        sock.close()


def test_vanished_socket_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Sends to a vanished socket warn once, keep being attempted, and succeed when it returns."""
    path = tmp_path / "notify"
    sock = _bind(str(path))
    notifier = Notifier({"NOTIFY_SOCKET": str(path)})
    notifier.ready()
    assert receive(sock) == b"READY=1"
    sock.close()
    path.unlink()
    with caplog.at_level(logging.WARNING, logger="smqsup.supervisor.systemd"):
        notifier.status("lost")
        notifier.watchdog()
        notifier.stopping()
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1
    sock = _bind(str(path))
    try:
        notifier.status("lost")  # never delivered, so not deduplicated
        assert receive(sock) == b"STATUS=lost"
    finally:
        sock.close()
        notifier.close()


def test_never_bound_socket_never_raises(tmp_path: Path) -> None:
    """A NOTIFY_SOCKET path that never existed is not an exception."""
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "absent")})
    assert notifier.enabled
    notifier.ready("x")
    notifier.reloading()
    notifier.close()


def test_unset_environment_removes_notify_variables() -> None:
    """unset_environment removes the three systemd variables and nothing else."""
    environ = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "2", "HOME": "/root"}
    unset_environment(environ)
    assert environ == {"HOME": "/root"}
    unset_environment(environ)
    assert environ == {"HOME": "/root"}


def test_monotonic_usec_is_clock_monotonic() -> None:
    """monotonic_usec agrees with time.monotonic (both CLOCK_MONOTONIC on Linux) to a millisecond."""
    assert abs(monotonic_usec() - time.monotonic() * 1_000_000) < 1_000


# --- a real supervisor ---------------------------------------------------------


def test_watchdog_datagrams_keep_arriving_when_systemd_asks_for_them(
        supervise: Supervise, notify: NotifySocket) -> None:
    """WATCHDOG_USEC=300000 (no WATCHDOG_PID) and a NOTIFY_SOCKET: at least 3 WATCHDOG=1 within 2 s."""
    supervise({"q": {"handler": "tests.support.handlers:record"}}, notify, extra_env={"WATCHDOG_USEC": "300000"})
    first = notify.wait("WATCHDOG=1")

    def pings() -> int:
        return sum("WATCHDOG=1" in d.split("\n") for d in notify.poll()[first + 1:])

    wait_for(lambda: pings() >= 3, timeout_s=2.0, message=f"WATCHDOG=1 stopped: {notify.received[first:]}")


def test_journal_stream_gives_priority_prefixes_and_no_timestamps(
        supervise: Supervise, notify: NotifySocket, redis_url: str) -> None:
    """stderr is the journal: every log line starts <N> (<6> info, <4> warning, <3> error) with no timestamp."""
    sup = supervise({"q": {"handler": "tests.support.handlers:talk"}}, notify, journal=True)
    notify.wait("READY=1")
    [child] = sup.children()
    child.kill()
    wait_for(lambda: "killed by signal 9" in sup.log())
    with Producer(redis_url) as p:
        mid = p.publish("q", "hi")
    [done] = wait_for(lambda: sup.events("done"))

    lines = [ln for ln in sup.log().splitlines() if not ln.startswith("stdout of the handler")]
    assert all(re.match(r"<[0-7]>\S", ln) for ln in lines), lines
    assert not any(_TIMESTAMP.search(ln) or re.search(r"\d\d:\d\d:\d\d", ln) for ln in lines), lines
    assert any(ln.startswith("<6>") and f"supervisor {sup.pid} started" in ln for ln in lines)
    assert any(ln.startswith("<3>") and f"(pid {child.pid}) killed by signal 9" in ln for ln in lines)
    # A consumer logs through the same stream: the journal knows only the supervisor's pid, the line names its own.
    assert any(ln.startswith("<4>") and f"[{done['pid']}]" in ln and f"handling {mid}" in ln for ln in lines)


@pytest.mark.parametrize("stream", ["unset", "another file"])
def test_without_the_journal_lines_start_with_a_timestamp_and_carry_the_pid(
        supervise: Supervise, notify: NotifySocket, redis_url: str, tmp_path: Path,
        stream: str) -> None:
    """No JOURNAL_STREAM, or one naming another file: timestamped lines; a child's own lines carry its pid."""
    extra = {}
    if stream == "another file":
        st = os.stat(tmp_path)
        extra["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    sup = supervise({"q": {"handler": "tests.support.handlers:talk"}}, notify, extra_env=extra)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", "hi")
    [done] = wait_for(lambda: sup.events("done"))
    wait_for(lambda: f"stdout of the handler for {mid}" in sup.log())

    lines = [ln for ln in sup.log().splitlines() if not ln.startswith("stdout of the handler")]
    assert lines and all(_TIMESTAMP.match(ln) for ln in lines), lines
    assert any(f" INFO [{sup.pid}] " in ln and f"supervisor {sup.pid} started" in ln for ln in lines)
    assert any(f" WARNING [{done['pid']}] tests.support.handlers: handling {mid}" in ln for ln in lines)
