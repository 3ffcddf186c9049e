"""The supervisor as users run it: the real ``smqsup -c FILE`` with real signals."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from smqsup import message
from smqsup.client.producer import Producer
from smqsup.keys import QueueKeys
from smqsup.launch.discovery import free_port
from smqsup.launch.process import RedisServer
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

pytestmark = pytest.mark.topologies

Q = QueueKeys("smq", "q")


def _events(out_dir: Path, event: str | None = None) -> list[dict[str, Any]]:
    return [e for e in read_events(str(out_dir)) if event is None or e["event"] == event]


def _rewrite(sup: procs.Supervisor, redis_url: str, queues: dict[str, dict[str, Any]], **top: Any) -> None:
    procs.write_config(sup.cfg, redis_url, queues, **top)


def test_starts_every_consumer_with_titles_and_notifies_ready_after_them(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_client: "redis.Redis") -> None:
    """2 queues x N consumers: right process count and titles; READY=1 only once all are registered."""
    sup = supervise({"a": {"handler": "tests.support.handlers:record", "consumers": 3},
                     "b": {"handler": "tests.support.handlers:record", "consumers": 2}}, notify)
    notify.wait("READY=1")
    # Every child had registered in Redis before the parent heard it was ready.
    assert redis_client.hlen(QueueKeys("smq", "a").consumers) == 3
    assert redis_client.hlen(QueueKeys("smq", "b").consumers) == 2
    titles = sup.titles()
    assert len(titles) == 5
    assert sum("smqsup: consumer a #" in t for t in titles) == 3
    assert {t.split(" [")[0] for t in titles} == {"smqsup: consumer a #1", "smqsup: consumer a #2",
                                                  "smqsup: consumer a #3", "smqsup: consumer b #1",
                                                  "smqsup: consumer b #2"}
    assert f"smqsup: supervisor -c {sup.cfg}" in " ".join(psutil.Process(sup.pid).cmdline())
    status = [d for d in notify.poll() if "STATUS=" in d]
    assert status and "a 3/3" in status[-1] and "b 2/2" in status[-1]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_consumer_title_says_idle_once_its_burst_is_handled(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, redis_url: str,
        concurrency: int) -> None:
    """A burst of 5 quick messages: once they are handled the title says idle with the count (the
    once-a-second pace of title updates must not leave the last change out)."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "concurrency": concurrency}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        for n in range(5):
            p.publish("q", n)
    wait_for(lambda: len(sup.events("done")) == 5, timeout_s=10)
    idle = "[idle 5 msgs]" if concurrency == 1 else "[idle 0/3 5 msgs]"
    wait_for(lambda: any(idle in t for t in sup.titles()), timeout_s=3)


def test_sigkill_of_a_child_mid_message_reclaims_at_once_and_replaces_it(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """A child SIGKILLed in its handler: message back within 1 s, a replacement consuming within 2 s."""
    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"sleep": 0.5})
    [start] = wait_for(lambda: _events(out_dir, "start"))
    killed_at = time.monotonic()
    os.kill(start["pid"], signal.SIGKILL)

    def back() -> bool:
        frames = redis_client.lrange(Q.pending, 0, -1)
        for cid in redis_client.hkeys(Q.consumers):
            if not cid.decode().split(":")[1] == str(start["pid"]):
                frames += redis_client.lrange(Q.processing(cid.decode()), 0, -1)
        return any(f.startswith(b"1|") and message.decode(f).id == mid for f in frames)

    wait_for(back, timeout_s=5, interval_s=0.005)
    back_s = time.monotonic() - killed_at
    again = wait_for(lambda: [e for e in _events(out_dir, "start") if e["pid"] != start["pid"]], timeout_s=5,
                     interval_s=0.005)
    replaced_s = time.monotonic() - killed_at
    assert back_s < 1.0 and replaced_s < 2.0, (back_s, replaced_s)
    assert again[0]["id"] == mid and again[0]["attempts"] == 1
    wait_for(lambda: _events(out_dir, "done"))
    assert "killed by signal 9 (SIGKILL)" in sup.log()


def test_sighup_scales_in_place_keeping_unchanged_consumers(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """2 -> 5 -> 1 consumers by SIGHUP: old pids survive, in-flight messages finish, RELOADING then READY."""
    queues = {"q": {"handler": "tests.support.handlers:slow", "consumers": 2}}
    sup = supervise(queues, notify, shutdown_timeout="10s")
    notify.wait("READY=1")
    first = {c.pid for c in sup.children()}
    with Producer(redis_url) as p:
        p.publish_many("q", [{"sleep": 1.0}] * 2)
    wait_for(lambda: len(_events(out_dir, "start")) == 2)

    queues["q"]["consumers"] = 5
    _rewrite(sup, redis_url, queues, shutdown_timeout="10s")
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    reloading = notify.wait("RELOADING=1", mark)
    assert any(line.startswith("MONOTONIC_USEC=") for line in notify.received[reloading].split("\n"))
    notify.wait("READY=1", reloading)
    pids = {c.pid for c in sup.children()}
    assert len(pids) == 5 and first <= pids

    with Producer(redis_url) as p:
        p.publish_many("q", [{"sleep": 1.0}] * 5)
    wait_for(lambda: len(_events(out_dir, "start")) == 7)
    queues["q"]["consumers"] = 1
    _rewrite(sup, redis_url, queues, shutdown_timeout="10s")
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    notify.wait("READY=1", notify.wait("RELOADING=1", mark))
    wait_for(lambda: len(sup.children()) == 1)
    [survivor] = sup.children()
    assert survivor.pid in first
    # Every message that started finished, on its first attempt; none was returned.
    wait_for(lambda: len(_events(out_dir, "done")) == 7, timeout_s=15)
    assert all(e["attempts"] == 0 for e in read_events(str(out_dir)))
    assert redis_client.llen(Q.pending) == 0


def test_invalid_config_on_sighup_keeps_the_old_one_running(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path,
        redis_url: str) -> None:
    """A broken file on SIGHUP: one error line, the old consumers keep consuming."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2}}, notify)
    notify.wait("READY=1")
    before = {c.pid for c in sup.children()}
    sup.cfg.write_text("queues:\n  q:\n    handler: tests.support.handlers:record\n    consumers: four\n")
    sup.signal(signal.SIGHUP)
    wait_for(lambda: "new config rejected" in sup.log())
    [line] = [ln for ln in sup.log().splitlines() if "new config rejected" in ln]
    assert "queues.q.consumers" in line and "'four'" in line
    with Producer(redis_url) as p:
        mid = p.publish("q", "still here")
    wait_for(lambda: [e for e in _events(out_dir, "done") if e["id"] == mid])
    assert {c.pid for c in sup.children()} == before


def _sigterm_mid_message(supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path,
                         redis_url: str, shutdown_timeout: str, sleep_s: float) -> str:
    """SIGTERM a supervisor while its one consumer handles a ``sleep_s`` message; it exits 0. The message's id."""
    sup = supervise({"q": {"handler": "tests.support.handlers:slow"}}, notify, shutdown_timeout=shutdown_timeout)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"sleep": sleep_s})
    wait_for(lambda: _events(out_dir, "start"))
    sup.signal(signal.SIGTERM)
    assert sup.proc.wait(15) == 0
    return mid


def test_sigterm_lets_a_running_handler_finish_then_exits_0(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """SIGTERM during a 3 s handler: it finishes and acks, the supervisor exits 0, nothing is lost."""
    mid = _sigterm_mid_message(supervise, notify, out_dir, redis_url, shutdown_timeout="10s", sleep_s=3)
    assert [e["id"] for e in _events(out_dir, "done")] == [mid]
    assert notify.wait("STOPPING=1") >= 0
    assert redis_client.llen(Q.pending) == 0 and redis_client.hlen(Q.consumers) == 0


def test_sigterm_past_shutdown_timeout_returns_the_message_without_costing_an_attempt(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """shutdown_timeout shorter than the handler: the child is killed, its message back with attempts 0."""
    mid = _sigterm_mid_message(supervise, notify, out_dir, redis_url, shutdown_timeout="1s", sleep_s=30)
    [frame] = redis_client.lrange(Q.pending, 0, -1)
    assert frame.startswith(b"0|") and message.decode(frame).id == mid
    assert not _events(out_dir, "done")


def test_second_sigint_stops_at_once_and_returns_messages(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """SIGINT twice: children are killed at once, their messages back in pending with attempts 0."""
    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 2}}, notify, shutdown_timeout="60s")
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        p.publish_many("q", [{"sleep": 30}] * 2)
    wait_for(lambda: len(_events(out_dir, "start")) == 2)
    sup.signal(signal.SIGINT)
    wait_for(lambda: "SIGINT again" in sup.log())
    sup.signal(signal.SIGINT)
    assert sup.proc.wait(10) == 0
    frames = redis_client.lrange(Q.pending, 0, -1)
    assert len(frames) == 2 and all(f.startswith(b"0|") for f in frames)


def test_unimportable_handler_puts_its_queue_in_fatal_while_others_run(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path,
        redis_url: str) -> None:
    """A handler that cannot be imported: that queue is FATAL (started once), the other keeps processing."""
    sup = supervise({"bad": {"handler": "no_such_module:handle", "consumers": 2},
                     "q": {"handler": "tests.support.handlers:record"}}, notify)
    notify.wait("READY=1")
    wait_for(lambda: "FATAL" in sup.log())
    with Producer(redis_url) as p:
        mid = p.publish("q", 1)
    wait_for(lambda: [e for e in _events(out_dir, "done") if e["id"] == mid])
    log = sup.log()
    assert "queue bad: FATAL: handler cannot be imported" in log
    assert "no_such_module" in log
    assert log.count("queue bad: consumer #") <= 2 * 2  # started at most once each; never restarted
    assert any("bad FATAL" in d for d in notify.poll())


def test_a_child_dying_at_start_is_restarted_with_exponential_backoff(
        supervise: Callable[..., procs.Supervisor], out_dir: Path) -> None:
    """A consumer that dies while starting is restarted after 0.5, 1, 2, 4 s: not in a tight loop."""
    supervise({"q": {"handler": "tests.support.crash_at_import:handle"}})
    imports = out_dir / "imports.log"
    wait_for(lambda: imports.exists() and len(imports.read_text().split()) >= 4, timeout_s=15)
    times = [float(t) for t in imports.read_text().split()]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert 0.4 <= gaps[0] <= 1.5, gaps
    assert all(later >= earlier * 1.6 for earlier, later in zip(gaps, gaps[1:])), gaps
    # Scaled to the default timings: at most 7 starts in the first 60 s.
    assert sum(1 for t in times if t - times[0] <= 6.0) <= 5


def test_supervisor_sigkill_takes_its_children_down_within_3_s(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path,
        redis_url: str) -> None:
    """SIGKILL of the supervisor: every child (idle or mid-message) is gone within 3 s."""
    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "consumers": 2},
                     "idle": {"handler": "tests.support.handlers:record", "consumers": 2}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        p.publish("q", {"sleep": 60})
    wait_for(lambda: _events(out_dir, "start"))
    kids = sup.children()
    assert len(kids) == 4
    sup.signal(signal.SIGKILL)
    sup.proc.wait(5)
    killed = time.monotonic()
    wait_for(lambda: all(_dead(k) for k in kids), timeout_s=3.0, interval_s=0.02,
             message=f"children alive: {[k.pid for k in kids if not _dead(k)]}")
    assert time.monotonic() - killed < 3.0


def _dead(proc: psutil.Process) -> bool:
    """Gone, or a zombie (exited, waiting for whoever adopted it to reap it)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_message_timeout_kills_a_stuck_child_and_costs_an_attempt(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """A handler past message_timeout: child killed, message dead-lettered with reason timeout, child replaced."""
    from smqsup.deadletter import DeadLetter

    sup = supervise({"q": {"handler": "tests.support.handlers:slow", "message_timeout": "1s", "retry_threshold": 0}},
                    notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        mid = p.publish("q", {"sleep": 30})
    [start] = wait_for(lambda: _events(out_dir, "start"))
    wait_for(lambda: redis_client.llen(Q.dead) == 1, timeout_s=5)
    dead = DeadLetter(redis_client.lindex(Q.dead, 0))
    assert dead.reason == "timeout after 1 s"
    dead_msg = dead.message()
    assert dead_msg is not None and dead_msg.id == mid
    assert not psutil.pid_exists(start["pid"]) or psutil.Process(start["pid"]).status() == psutil.STATUS_ZOMBIE
    wait_for(lambda: sup.only_child() not in (None, start["pid"]))


def test_max_memory_recycles_a_leaking_child_between_messages(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """A child whose RSS passes max_memory is replaced gracefully: its message acked, no attempt lost."""
    sup = supervise({"q": {"handler": "tests.support.handlers:leak", "max_memory": "150MB"}}, notify,
                    heartbeat_interval="200ms", heartbeat_timeout="2s")
    notify.wait("READY=1")
    [first] = sup.children()
    with Producer(redis_url) as p:
        mid = p.publish("q", {"mb": 200})
    wait_for(lambda: _events(out_dir, "done"))
    wait_for(lambda: "recycling it" in sup.log(), timeout_s=10)
    wait_for(lambda: sup.only_child() not in (None, first.pid))
    assert [(e["id"], e["attempts"]) for e in _events(out_dir, "done")] == [(mid, 0)]
    assert redis_client.llen(Q.pending) == 0 and redis_client.llen(Q.dead) == 0


def test_a_message_that_crashes_its_consumer_is_retried_then_dead_lettered(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """A poison message that kills the process costs an attempt each time and ends dead-lettered; the queue goes on."""
    from smqsup.deadletter import DeadLetter

    sup = supervise({"q": {"handler": "tests.support.handlers:crash", "retry_threshold": 2}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        p.publish("q", "poison")
    wait_for(lambda: redis_client.llen(Q.dead) == 1, timeout_s=15)
    assert sorted(e["attempts"] for e in _events(out_dir, "start")) == [0, 1, 2]
    assert DeadLetter(redis_client.lindex(Q.dead, 0)).reason == "exited with status 70"
    wait_for(lambda: len(sup.children()) == 1)
    assert "FATAL" not in sup.log()


BAD = sorted((Path(__file__).parent / "configs" / "bad").glob("*.yaml"))


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_config_exits_2_with_one_line_naming_the_key(path: Path) -> None:
    """`smqsup -c BAD` prints one line naming the file and key path, exits 2, starts nothing."""
    expect = path.read_text().splitlines()[0].removeprefix("# expect:").strip()
    r = procs.run("-c", str(path), timeout=30)
    assert r.returncode == 2, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"Error: {path}") and expect in line and "Traceback" not in r.stderr


def test_check_validates_and_imports_handlers(tmp_path: Path) -> None:
    """`smqsup check` is 0 for a good file and one line per unimportable handler for a bad one."""
    good = procs.write_config(tmp_path / "good.yaml", "redis://127.0.0.1:1/0",
                              {"q": {"handler": "tests.support.handlers:record", "consumers": 2}})
    r = procs.run("check", "-c", str(good))
    assert r.returncode == 0 and "ok (1 queue(s), 2 consumer(s))" in r.stdout, r.stderr
    bad = procs.write_config(tmp_path / "bad.yaml", "redis://127.0.0.1:1/0",
                             {"q": {"handler": "tests.support.handlers:nope"}, "r": {"handler": "no_mod:f"}})
    r = procs.run("check", "-c", str(bad))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and "queues.q.handler" in lines[0] and "queues.r.handler" in lines[1], lines


def test_a_handler_exiting_with_status_0_mid_message_still_costs_an_attempt(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """A clean exit status in the middle of a message is no reason to redeliver it for free forever."""
    supervise({"q": {"handler": "tests.support.handlers:exit0", "retry_threshold": 1}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as p:
        p.publish("q", "poison")
    wait_for(lambda: redis_client.llen(Q.dead) == 1, timeout_s=15)
    assert sorted(e["attempts"] for e in _events(out_dir, "start")) == [0, 1]


@pytest.mark.parametrize("preload", [True, False])
def test_preload_imports_handlers_in_the_supervisor_before_forking(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, redis_url: str,
        preload: bool) -> None:
    """preload: true imports the handler once, in the supervisor; otherwise each consumer imports it."""
    sup = supervise({"q": {"handler": "tests.support.import_probe:handle", "consumers": 2}}, notify, preload=preload)
    notify.wait("READY=1")
    importers = [int(line) for line in (out_dir / "imported-by.txt").read_text().split()]
    consumers = sup.processes()
    if preload:
        assert importers == [sup.pid]
    else:
        assert sorted(importers) == sorted(consumers) and sup.pid not in importers
    with Producer(redis_url) as p:
        mid = p.publish("q", "x")
    [done] = wait_for(lambda: _events(out_dir, "done"))
    assert done["id"] == mid and done["pid"] in consumers


@pytest.mark.single_node("Redis absent at start: the topology is not what it tests")
def test_unreachable_redis_at_start_backs_off_until_it_appears(
        supervise: Callable[..., procs.Supervisor], notify: NotifySocket, out_dir: Path, tmp_path: Path) -> None:
    """Redis down at start: the supervisor keeps running, consumers exit 4 and back off; once it is up, READY=1."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2}}, notify, url=url)
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
