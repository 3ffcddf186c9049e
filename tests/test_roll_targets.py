"""What ``smqsup roll`` signals and what a roll runs, with real supervisors,
signals and a second local user (``nobody``): a consumer still importing
is never taken for a supervisor, a process of another user titled as one is
never signalled, a stale request in Redis never widens a roll; a symlink
switch deploy rolls onto the new release and the log says from where; a new
generation that dies just past its probation marks the roll failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import redis

from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

Supervise = Callable[..., procs.Supervisor]


def _code(tmp_path: Path, **modules: str) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    for name, text in modules.items():
        (code / f"{name}.py").write_text(text)
    return code


def _env(*paths: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([*map(str, paths), str(procs.REPO)]), "PYTHONDONTWRITEBYTECODE": "1"}


_SLOW_IMPORT = "import time\ntime.sleep(4)\nfrom tests.support.handlers import record as handle\n"


def test_a_consumer_still_importing_is_titled_as_one_and_roll_asks_only_the_supervisor(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path) -> None:
    """A handler importing for 4 s: its process is titled 'consumer' from the fork; roll meanwhile succeeds."""
    code = _code(tmp_path, slow_h=_SLOW_IMPORT)
    sup = supervise({"q": {"handler": "slow_h:handle", "consumers": 1}}, notify, extra_env=_env(code))
    wait_for(lambda: sup.processes(), message="no child forked")
    [kid] = sup.processes()
    # (A look in the moment between the fork and the child's first steps sees the title it inherited.)
    wait_for(lambda: " ".join(psutil.Process(kid).cmdline()).startswith("smqsup: consumer q #1 [starting"),
             timeout_s=2, message="not titled as a consumer while its handler imports (4 s)")
    done = procs.run("roll", "-c", str(sup.cfg), env=procs.env(None, **_env(code)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"supervisor {sup.pid}: rolling every queue")
    assert f"supervisor {kid}" not in done.stdout


def _fake_supervisor(cfg: Path) -> "subprocess.Popen[bytes]":
    """A process of user nobody whose whole command line is a supervisor's title
    for ``cfg`` (``exec -a``; cat waits on its stdin, and SIGUSR1 ends it)."""
    fake = subprocess.Popen(["bash", "-c", f'exec -a "smqsup: supervisor -c {cfg}" cat'], stdin=subprocess.PIPE,
                            user="nobody", group="nogroup", cwd="/", start_new_session=True)
    wait_for(lambda: " ".join(psutil.Process(fake.pid).cmdline()) == f"smqsup: supervisor -c {cfg}")
    return fake


def test_a_process_of_another_user_titled_as_the_supervisor_is_never_signalled(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path) -> None:
    """nobody runs `exec -a 'smqsup: supervisor -c FILE' cat`: roll signals only the real supervisor; cat lives."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    fake = _fake_supervisor(sup.cfg)
    try:
        done = procs.run("roll", "-c", str(sup.cfg))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"supervisor {sup.pid}: rolling") and str(fake.pid) not in done.stdout
        assert fake.poll() is None
        wait_for(lambda: "a roll was asked for (smqsup roll)" in sup.log())
    finally:
        fake.kill()
        fake.wait()


def test_a_stale_roll_request_in_redis_does_not_widen_an_operators_roll(
        supervise: Supervise, notify: NotifySocket, redis_client: "redis.Redis") -> None:
    """A request for every queue left in Redis (its command died): `roll a` rolls a only; b keeps its consumers."""
    sup = supervise({"a": {"handler": "tests.support.handlers:record"}, "b": {"handler": "tests.support.handlers:record"}}, notify)
    notify.wait("READY=1")
    wait_for(lambda: len(sup.consumers_by_queue()) == 2)
    before = sup.consumers_by_queue()
    key = f"smq:{{smq}}:roll:{os.uname().nodename}:{sup.pid}"
    redis_client.rpush(key, json.dumps({"token": "00", "queues": None}))
    now_ms = int(redis_client.time()[0]) * 1000
    redis_client.rpush(key, json.dumps({"token": "01", "queues": None, "at_ms": now_ms - 30_000}))
    done = procs.run("roll", "-c", str(sup.cfg), "a")
    assert done.returncode == 0, done.stderr
    wait_for(lambda: "queue a: rolled in" in sup.log(), timeout_s=20)
    after = sup.consumers_by_queue()
    assert after["b"] == before["b"] and not after["a"] & before["a"]
    assert "queue b:" not in sup.log().split("SIGUSR1", 1)[1]


def test_roll_never_signals_when_it_finds_only_another_users_process(tmp_path: Path, redis_url: str) -> None:
    """Only nobody's fake supervisor runs the file: roll says so in one line and signals nothing."""
    cfg = procs.write_config(tmp_path / "queues.yaml", redis_url, {"q": {"handler": "m:f"}})
    fake = _fake_supervisor(cfg)
    try:
        done = procs.run("roll", "-c", str(cfg))
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert "no smqsup supervisor runs" in done.stderr and f"process {fake.pid} of user nobody" in done.stderr
        assert fake.poll() is None
    finally:
        os.kill(fake.pid, signal.SIGKILL)
        fake.wait()


def test_as_root_another_users_supervisor_is_taken_only_when_redis_names_it_live(
        supervise: Supervise, notify: NotifySocket, redis_url: str) -> None:
    """The shipped unit runs the service as its own user with a root-owned config: root's roll takes a process of
    another user only when the queues' supervisors hashes name it a live supervisor of this host (the service
    writes them through Redis; a local user without Redis cannot): nobody's look-alike, unnamed, is refused."""
    from smqsup.cli.roll_cmd import supervisors
    from smqsup.store.broker import Broker
    from smqsup.store.ops.supervisors import SupervisorInfo

    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 1}}, notify)
    notify.wait("READY=1")
    fake = _fake_supervisor(sup.cfg)
    broker = Broker(redis_url)
    host = os.uname().nodename
    try:
        wait_for(lambda: sup.pid in broker.supervisors.live_pids(["q"], host), message="supervisor not in Redis")
        assert fake.pid not in broker.supervisors.live_pids(["q"], host)
        taken, refused = supervisors(str(sup.cfg), broker.supervisors.live_pids(["q"], host))
        assert taken == [sup.pid] and refused == [f"process {fake.pid} of user nobody"]
        now = broker.supervisors.write({"q": SupervisorInfo(host, fake.pid, 1, 1, 1, 1, False, False, None, None,
                                                            60.0, 0)}, f"{host}:{fake.pid}", 60)
        assert now is not None
        broker.supervisors.write({"q": SupervisorInfo(host, fake.pid, 1, 1, 1, 1, False, False, None, None, 60.0,
                                                      now)}, f"{host}:{fake.pid}", 60)
        vouched = broker.supervisors.live_pids(["q"], host)
        assert vouched >= {sup.pid, fake.pid}
        assert supervisors(str(sup.cfg), vouched) == (sorted([sup.pid, fake.pid]), [])
    finally:
        broker.close()
        fake.kill()
        fake.wait()


_RELEASE = "from tests.support.handlers import _record\n\ndef handle(msg):\n    _record('done', msg, version={n})\n"


def _release(tmp_path: Path, n: int, redis_url: str) -> Path:
    """releases/rN: a handler module saying version N and the queues.yaml beside it, as a deploy unpacks them."""
    d = tmp_path / "releases" / f"r{n}"
    d.mkdir(parents=True)
    (d / "release_h.py").write_text(_RELEASE.format(n=n))
    procs.write_config(d / "queues.yaml", redis_url, {"q": {"handler": "release_h:handle", "consumers": 2}})
    return d


def _switch(current: Path, target: Path) -> None:
    """Point ``current`` at ``target`` at once (a new link renamed over the old), as deploy tools do."""
    new = current.with_name("current.new")
    new.symlink_to(target)
    os.replace(new, current)


@pytest.mark.parametrize("named_by", ["$PWD", "the config path"])
def test_a_symlink_switch_deploy_rolls_onto_the_new_release_and_says_from_where(
        named_by: str, notify: NotifySocket, tmp_path: Path, out_dir: Path, redis_url: str) -> None:
    """Started in current -> r1: after the switch to r2, `roll -c current/queues.yaml` runs r2 (log names it); r3 by
    SIGHUP. The link is known from $PWD (a shell), or from `-c /abs/current/queues.yaml` when $PWD names the physical
    directory or nothing (systemd's WorkingDirectory= sets no $PWD)."""
    from smqsup.client.producer import Producer

    releases = [_release(tmp_path, n, redis_url) for n in (1, 2, 3)]
    current = tmp_path / "current"
    current.symlink_to(releases[0])
    if named_by == "$PWD":
        env, cfg = {"PWD": str(current), "PYTHONDONTWRITEBYTECODE": "1"}, Path("queues.yaml")
    else:
        env, cfg = {"PWD": str(releases[0]), "PYTHONDONTWRITEBYTECODE": "1"}, current / "queues.yaml"
    sup = procs.Supervisor(cfg, out_dir, notify.path, extra_env=env, cwd=current)
    try:
        notify.wait("READY=1")
        with Producer(redis_url) as p:
            def version(body: str) -> int:
                mid = p.publish("q", body)
                return int(wait_for(lambda: next((e["version"] for e in sup.events("done") if e["id"] == mid),
                                                 None), timeout_s=15))

            assert version("first") == 1
            _switch(current, releases[1])
            done = procs.run("roll", "-c", "current/queues.yaml", cwd=str(tmp_path))
            assert done.returncode == 0, done.stderr
            wait_for(lambda: sup.log().count("rolled in") == 1, timeout_s=30)
            assert f"code from {current} -> {releases[1]}" in sup.log()
            assert version("second") == 2
            _switch(current, releases[2])
            mark = len(notify.poll())
            sup.signal(signal.SIGHUP)
            notify.wait("RELOADING=1", mark)
            wait_for(lambda: sup.log().count("rolled in") == 2, timeout_s=30)
            assert f"code from {current} -> {releases[2]}" in sup.log()
            assert version("third") == 3
    finally:
        sup.discard()


def test_a_pwd_that_names_another_directory_or_is_relative_is_not_the_code_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """$PWD counts only when it is the working directory: another dir, a relative or missing one: the physical dir."""
    from smqsup.supervisor.codedir import CodeDir

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    monkeypatch.chdir(tmp_path / "a")
    for pwd in (str(tmp_path / "b"), "link", str(tmp_path / "gone"), ""):
        monkeypatch.setenv("PWD", pwd)
        code = CodeDir()
        assert code.logical == code.physical == str(tmp_path / "a") and code.follow() is None
    monkeypatch.setenv("PWD", str(tmp_path / "link"))
    code = CodeDir()
    assert code.describe() == f"{tmp_path / 'link'} -> {tmp_path / 'a'}" and code.follow() is None


_DIES_LATE = """\
import os, threading
from tests.support.handlers import _record

# The new generation dies {after} s after its fork: just past the roll's probation.
if {dies}:
    threading.Timer({after}, os._exit, (5,)).start()

def handle(msg):
    _record("done", msg, version={version})
"""


def test_a_new_generation_dying_just_past_its_probation_marks_the_roll_failed(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path) -> None:
    """New consumers die 2.7 s after their fork, past the 2 s probation: the roll is marked failed, status says so."""
    code = _code(tmp_path, late_h=_DIES_LATE.format(dies=False, after=2.7, version=1))
    sup = supervise({"q": {"handler": "late_h:handle", "consumers": 2}}, notify, extra_env=_env(code))
    notify.wait("READY=1")
    wait_for(lambda: len(sup.consumers_by_queue().get("q", ())) == 2)
    (code / "late_h.py").write_text(_DIES_LATE.format(dies=True, after=2.7, version=2))
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    notify.wait("RELOADING=1", mark)
    wait_for(lambda: "roll failed" in sup.log(), timeout_s=40, message="the crash loop never failed the roll")
    assert "new consumers died within" in sup.log()

    def said() -> bool:
        snap = json.loads(procs.run("status", "-c", str(sup.cfg), "--json").stdout)
        [info] = snap["queues"]["q"]["supervisors"]
        return bool(info["roll_failed"]) and "died within" in info["roll_failed"]

    wait_for(said, timeout_s=15, interval_s=0.3)


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"not json", b"[1]", b"[" * 10_000, b'{"at_ms": NaN, "queues": null}',
                                 b'{"at_ms": true, "queues": null}', b'{"at_ms": 1e300, "queues": null}',
                                 b'{"queues": null}', b'{"at_ms": %d, "queues": [1]}', b'{"at_ms": %d, "queues": "a"}',
                                 b'{"at_ms": %d, "queues": ["a"], "x": 1}'])
def test_roll_requests_left_in_redis_are_read_safely(raw: bytes) -> None:
    """A request list anyone with Redis may write: undecodable, not an object, deeply nested, a NaN or boolean
    or far date, no date, queues that are not names: no request (never an error, never every queue); only a
    well-formed fresh one counts."""
    from smqsup.store.ops.control import _request

    now = 1_700_000_000_000
    text = raw.replace(b"%d", str(now).encode())
    request = _request(text, now)
    if raw.endswith(b', "x": 1}'):
        assert request is not None and request.queues == ("a",)
    else:
        assert request is None
