"""More of the supervisor as users run it: scaling and reload signals, systemd's
watchdog and journal, the embedded Redis, preload, and a Redis that is late."""

from __future__ import annotations

import collections
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from smqsup.keys import QueueKeys
from smqsup.producer import Producer
from smqsup.redis_server import RedisServer, free_port, running_url
from tests import procs
from tests.handlers import read_events
from tests.helpers import wait_for
from tests.procs import NotifySocket

_TITLE = re.compile(r"smqsup: consumer (\S+) #\d+")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \[\d+\] ")

Supervise = Callable[..., procs.Supervisor]


def _events(out_dir: Path, event: str | None = None) -> list[dict[str, Any]]:
    return [e for e in read_events(str(out_dir)) if event is None or e["event"] == event]


def _by_queue(sup: procs.Supervisor) -> dict[str, set[int]]:
    """Queue -> pids of its live consumer processes, read from their titles."""
    found: dict[str, set[int]] = {}
    for k in sup.children():
        try:
            m = _TITLE.search(" ".join(k.cmdline()))
        except psutil.NoSuchProcess:
            continue
        if m:
            found.setdefault(m.group(1), set()).add(k.pid)
    return found


def _counts(by_queue: dict[str, set[int]]) -> dict[str, int]:
    return {q: len(pids) for q, pids in by_queue.items()}


def _processes(sup: procs.Supervisor) -> set[int]:
    """Pids of every live (not zombie) child of the supervisor, titled yet or not."""
    try:
        kids = psutil.Process(sup.pid).children()
    except psutil.NoSuchProcess:
        return set()
    alive = set()
    for k in kids:
        try:
            if k.status() != psutil.STATUS_ZOMBIE:
                alive.add(k.pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_queues(sup: procs.Supervisor, counts: dict[str, int]) -> dict[str, set[int]]:
    """Wait until the live consumers per queue are exactly ``counts``; return their pids."""
    def match() -> dict[str, set[int]] | None:
        now = _by_queue(sup)
        return now if _counts(now) == counts else None

    return wait_for(match, timeout_s=10, interval_s=0.02, message=f"never {counts}: {_by_queue(sup)}")


def test_sigttin_adds_a_consumer_per_queue_and_sigttou_removes_one_never_below_1(
        supervise: Supervise, notify: NotifySocket) -> None:
    """SIGTTIN: one more consumer in every queue; SIGTTOU: one fewer, not below 1; the first consumers survive."""
    sup = supervise({"a": {"handler": "tests.handlers:record", "consumers": 2},
                     "b": {"handler": "tests.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    first = _wait_queues(sup, {"a": 2, "b": 1})

    sup.signal(signal.SIGTTIN)
    notify.wait("STATUS=consumers ready: a 3/3, b 2/2")
    grown = _wait_queues(sup, {"a": 3, "b": 2})
    assert first["a"] < grown["a"] and first["b"] < grown["b"]

    sup.signal(signal.SIGTTOU)
    notify.wait("STATUS=consumers ready: a 2/2, b 1/1")
    # The newest go first: exactly the first consumers are left.
    assert _wait_queues(sup, {"a": 2, "b": 1}) == first

    sup.signal(signal.SIGTTOU)
    notify.wait("STATUS=consumers ready: a 1/1, b 1/1")
    last = _wait_queues(sup, {"a": 1, "b": 1})
    assert last["a"] < first["a"] and last["b"] == first["b"]

    wait_for(lambda: sup.log().count("stopped (scale-down)") == 3)
    log = sup.log()
    assert log.count("SIGTTOU: queue a scaled to") == 2
    assert log.count("SIGTTOU: queue b scaled to") == 1  # the second SIGTTOU left b at 1
    assert "died" not in log and "killed" not in log


def test_sighup_with_a_new_handler_rolls_one_child_at_a_time_and_loses_nothing(
        supervise: Supervise, notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: redis.Redis) -> None:
    """A changed handler rolls 3 busy consumers one by one under a trickle: <= 4 processes, each message once."""
    n = 3
    queues: dict[str, dict[str, Any]] = {"q": {"handler": "tests.handlers:slow", "consumers": n}}
    sup = supervise(queues, notify)
    notify.wait("READY=1")
    old = _processes(sup)
    assert len(old) == n
    # The old handler sleeps 0.2 s per message, so an old consumer told to stop is mostly mid-message
    # and lingers; the new one acks at once.
    queues["q"]["handler"] = "tests.handlers:record"
    procs.write_config(sup.cfg, redis_url, queues)

    published: list[str] = []
    samples: list[set[int]] = []
    with Producer(redis_url) as p:
        def tick() -> set[int]:
            published.append(p.publish("q", {"sleep": 0.2}))
            samples.append(_processes(sup))
            return samples[-1]

        wait_for(lambda: len(tick()) and len(_events(out_dir, "start")) >= n, interval_s=0.02)
        mark = len(notify.poll())
        sup.signal(signal.SIGHUP)
        reloading = notify.wait("RELOADING=1", mark)

        def rolled() -> bool:
            pids = tick()
            ready = any("READY=1" in d.split("\n") for d in notify.poll()[reloading:])
            return ready and len(pids) == n and not pids & old

        wait_for(rolled, timeout_s=20, interval_s=0.02, message=f"roll not done: {samples[-3:]}")
        for _ in range(10):
            tick()

    wait_for(lambda: len(_events(out_dir, "done")) >= len(published), timeout_s=10)
    done = _events(out_dir, "done")
    assert collections.Counter(e["id"] for e in done) == collections.Counter(published)  # each exactly once
    assert all(e["attempts"] == 0 for e in done)
    assert max(len(s) for s in samples) <= n + 1, [sorted(s) for s in samples]
    # Old consumers ran the old handler (a "start" event first), new ones the new handler.
    new = set().union(*samples) - old
    started = {e["id"] for e in _events(out_dir, "start")}
    assert {e["pid"] for e in done if e["pid"] in old} and {e["pid"] for e in done if e["pid"] in new}
    assert all((e["id"] in started) == (e["pid"] in old) for e in done)
    q = QueueKeys("smq", "q")
    assert redis_client.llen(q.pending) == 0 and redis_client.llen(q.dead) == 0
    assert sup.log().count("stopped (config changed)") == n


def test_sighup_starts_an_added_queue_and_drains_a_removed_one(
        supervise: Supervise, notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: redis.Redis) -> None:
    """SIGHUP: a new queue starts; a removed one finishes its in-flight message (acked, attempts 0) and exits."""
    queues: dict[str, dict[str, Any]] = {"gone": {"handler": "tests.handlers:slow"},
                                         "keep": {"handler": "tests.handlers:record", "consumers": 2}}
    sup = supervise(queues, notify)
    notify.wait("READY=1")
    before = _wait_queues(sup, {"gone": 1, "keep": 2})
    with Producer(redis_url) as p:
        mid = p.publish("gone", {"sleep": 1.5})
    wait_for(lambda: _events(out_dir, "start"))

    procs.write_config(sup.cfg, redis_url, {"keep": queues["keep"], "new": {"handler": "tests.handlers:record"}})
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    notify.wait("READY=1", notify.wait("RELOADING=1", mark))  # READY only once "gone" has no process left

    assert [(e["id"], e["attempts"]) for e in _events(out_dir, "done")] == [(mid, 0)]
    [gone_pid] = before["gone"]
    assert _gone(gone_pid)
    after = _wait_queues(sup, {"keep": 2, "new": 1})
    assert after["keep"] == before["keep"]
    gone = QueueKeys("smq", "gone")
    assert redis_client.llen(gone.pending) == 0 and redis_client.llen(gone.dead) == 0
    assert redis_client.hlen(gone.consumers) == 0
    assert not redis_client.keys(gone.processing("*"))
    assert "stopped (queue removed)" in sup.log()

    with Producer(redis_url) as p:
        new_mid = p.publish("new", "hello")
    [handled] = wait_for(lambda: [e for e in _events(out_dir, "done") if e["id"] == new_mid])
    assert {handled["pid"]} == after["new"]


def test_watchdog_datagrams_keep_arriving_when_systemd_asks_for_them(
        supervise: Supervise, notify: NotifySocket) -> None:
    """WATCHDOG_USEC=300000 (no WATCHDOG_PID) and a NOTIFY_SOCKET: at least 3 WATCHDOG=1 within 2 s."""
    supervise({"q": {"handler": "tests.handlers:record"}}, notify, extra_env={"WATCHDOG_USEC": "300000"})
    first = notify.wait("WATCHDOG=1")

    def pings() -> int:
        return sum("WATCHDOG=1" in d.split("\n") for d in notify.poll()[first + 1:])

    wait_for(lambda: pings() >= 3, timeout_s=2.0, message=f"WATCHDOG=1 stopped: {notify.received[first:]}")


def test_journal_stream_gives_priority_prefixes_and_no_timestamps(
        supervise: Supervise, notify: NotifySocket, out_dir: Path, redis_url: str) -> None:
    """stderr is the journal: every log line starts <N> (<6> info, <4> warning, <3> error) with no timestamp."""
    sup = supervise({"q": {"handler": "tests.handlers:talk"}}, notify, journal=True)
    notify.wait("READY=1")
    [child] = sup.children()
    child.kill()
    wait_for(lambda: "killed by signal 9" in sup.log())
    with Producer(redis_url) as p:
        mid = p.publish("q", "hi")
    [done] = wait_for(lambda: _events(out_dir, "done"))

    lines = [ln for ln in sup.log().splitlines() if not ln.startswith("stdout of the handler")]
    assert all(re.match(r"<[0-7]>\S", ln) for ln in lines), lines
    assert not any(_TIMESTAMP.search(ln) or re.search(r"\d\d:\d\d:\d\d", ln) for ln in lines), lines
    assert any(ln.startswith("<6>") and f"supervisor {sup.pid} started" in ln for ln in lines)
    assert any(ln.startswith("<3>") and f"(pid {child.pid}) killed by signal 9" in ln for ln in lines)
    # A consumer logs through the same stream: the journal knows only the supervisor's pid, the line names its own.
    assert any(ln.startswith("<4>") and f"[{done['pid']}]" in ln and f"handling {mid}" in ln for ln in lines)


@pytest.mark.parametrize("stream", ["unset", "another file"])
def test_without_the_journal_lines_start_with_a_timestamp_and_carry_the_pid(
        supervise: Supervise, notify: NotifySocket, out_dir: Path, redis_url: str, tmp_path: Path,
        stream: str) -> None:
    """No JOURNAL_STREAM, or one naming another file: timestamped lines; a child's own lines carry its pid."""
    extra = {}
    if stream == "another file":
        st = os.stat(tmp_path)
        extra["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    sup = supervise({"q": {"handler": "tests.handlers:talk"}}, notify, extra_env=extra)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", "hi")
    [done] = wait_for(lambda: _events(out_dir, "done"))
    wait_for(lambda: f"stdout of the handler for {mid}" in sup.log())

    lines = [ln for ln in sup.log().splitlines() if not ln.startswith("stdout of the handler")]
    assert lines and all(_TIMESTAMP.match(ln) for ln in lines), lines
    assert any(f" INFO [{sup.pid}] " in ln and f"supervisor {sup.pid} started" in ln for ln in lines)
    assert any(f" WARNING [{done['pid']}] tests.handlers: handling {mid}" in ln for ln in lines)


def test_embedded_redis_is_started_reached_by_publish_and_stopped_last(
        supervise: Supervise, notify: NotifySocket, out_dir: Path, tmp_path: Path) -> None:
    """No redis.url: the supervisor runs its own redis-server, `publish -c` reaches it, SIGTERM stops it (exit 0)."""
    data_dir = tmp_path / "data"
    sup = supervise({"q": {"handler": "tests.handlers:record"}}, notify, embedded=True,
                    redis={"data_dir": str(data_dir)})
    notify.wait("READY=1")
    assert running_url(data_dir) is not None
    server_pid = int((data_dir / "redis.pid").read_text())
    assert server_pid in _processes(sup)  # the supervisor's own child

    r = procs.run("publish", "-c", str(sup.cfg), "q", '{"n": 1}', env=procs.env(out_dir))
    assert r.returncode == 0, r.stderr
    mid = r.stdout.strip()
    wait_for(lambda: [e for e in _events(out_dir, "done") if e["id"] == mid])

    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(15) == 0
    assert running_url(data_dir) is None and _gone(server_pid)
    r = procs.run("publish", "-c", str(sup.cfg), "q", '{"n": 2}')
    assert r.returncode == 2 and "no embedded redis-server is running" in r.stderr


@pytest.mark.parametrize("preload", [True, False])
def test_preload_imports_handlers_in_the_supervisor_before_forking(
        supervise: Supervise, notify: NotifySocket, out_dir: Path, redis_url: str, preload: bool) -> None:
    """preload: true imports the handler once, in the supervisor; otherwise each consumer imports it."""
    sup = supervise({"q": {"handler": "tests.import_probe:handle", "consumers": 2}}, notify, preload=preload)
    notify.wait("READY=1")
    importers = [int(line) for line in (out_dir / "imported-by.txt").read_text().split()]
    consumers = _processes(sup)
    if preload:
        assert importers == [sup.pid]
    else:
        assert sorted(importers) == sorted(consumers) and sup.pid not in importers
    with Producer(redis_url) as p:
        mid = p.publish("q", "x")
    [done] = wait_for(lambda: _events(out_dir, "done"))
    assert done["id"] == mid and done["pid"] in consumers


def test_unreachable_redis_at_start_backs_off_until_it_appears(
        supervise: Supervise, notify: NotifySocket, out_dir: Path, tmp_path: Path) -> None:
    """Redis down at start: the supervisor keeps running, consumers exit 4 and back off; once it is up, READY=1."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    sup = supervise({"q": {"handler": "tests.handlers:record", "consumers": 2}}, notify, url=url)
    wait_for(lambda: "Redis not usable at start" in sup.log())
    # A consumer waits CHILD_BOOT_REDIS_TIMEOUT_S (10 s) for Redis, then exits 4 and is restarted after a backoff.
    wait_for(lambda: "exited with status 4 (Redis unreachable at boot)" in sup.log(), timeout_s=15)
    wait_for(lambda: "next start in" in sup.log())
    assert sup.proc.poll() is None
    assert not any("READY=1" in d.split("\n") for d in notify.poll())

    server = RedisServer(tmp_path / "late-redis", port=port)
    server.start()
    try:
        notify.wait("READY=1", timeout_s=10)
        with Producer(url) as p:
            mid = p.publish("q", "late")
        wait_for(lambda: [e for e in _events(out_dir, "done") if e["id"] == mid])
        assert "FATAL" not in sup.log()
        sup.stop()  # before its Redis goes away
        assert sup.proc.returncode == 0
    finally:
        sup.stop()
        server.stop()
