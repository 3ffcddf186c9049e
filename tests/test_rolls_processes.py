"""Code rolls with real supervisors and signals: handler code edited on disk
rolls on SIGHUP, one consumer at a time, losing and doubling nothing; a new
generation that cannot start never replaces the old one; ``smqsup roll``
finds the supervisor without its pid; a file that keeps changing never rolls
two generations at once."""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from smqsup.client.producer import Producer
from tests.support import procs
from tests.support.helpers import wait_for
from tests.support.procs import NotifySocket

Supervise = Callable[..., procs.Supervisor]

#: The handler module: it takes VERSION from a project module it imports, so
#: that editing either one is a change of the handler's code.
_HANDLER = """\
import deploy_util
from tests.support.handlers import _record
{extra}

def handle(msg):
    _record("done", msg, version=deploy_util.VERSION)
"""


def _write(path: Path, text: str) -> None:
    """Replace the file at once, as a deploy tool does (never half written)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _project(tmp_path: Path, version: int = 1, extra: str = "") -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    _write(code / "deploy_util.py", f"VERSION = {version}\n")
    _write(code / "deploy_h.py", _HANDLER.format(extra=extra))
    return code


def _env(code: Path) -> dict[str, str]:
    # No .pyc: a rewrite within the same second and of the same size would
    # otherwise be served from a stale cache (Python checks seconds and size).
    return {"PYTHONPATH": os.pathsep.join([str(code), str(procs.REPO)]), "PYTHONDONTWRITEBYTECODE": "1"}


def _start(supervise: Supervise, notify: NotifySocket, code: Path, consumers: int) -> procs.Supervisor:
    sup = supervise({"q": {"handler": "deploy_h:handle", "consumers": consumers}}, notify, extra_env=_env(code))
    notify.wait("READY=1")
    wait_for(lambda: len(sup.consumers_by_queue().get("q", ())) == consumers)
    return sup


def _hup(sup: procs.Supervisor, notify: NotifySocket) -> None:
    mark = len(notify.poll())
    sup.signal(signal.SIGHUP)
    notify.wait("RELOADING=1", mark)


def _handled_by(sup: procs.Supervisor, p: Producer, body: Any) -> dict[str, Any]:
    """Publish one message and return the event of its handling."""
    mid = p.publish("q", body)
    return wait_for(lambda: next((e for e in sup.events("done") if e["id"] == mid), None), timeout_s=10)


def _rolled(sup: procs.Supervisor, old: set[int], n: int) -> bool:
    now = sup.consumers_by_queue().get("q", set())
    return len(now) == n and not now & old and "rolled in" in sup.log()


def test_a_project_module_edited_on_disk_rolls_every_consumer_on_sighup_while_5000_flow(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path, redis_url: str) -> None:
    """Edit a module the handler imports, SIGHUP: 3 consumers replaced one at a time, 5,000 messages each once."""
    code = _project(tmp_path)
    sup = _start(supervise, notify, code, 3)
    old = sup.consumers_by_queue()["q"]
    published: list[str] = []
    samples: list[int] = []
    with Producer(redis_url) as p:
        def flow() -> None:
            for i in range(0, 5000, 25):
                published.extend(p.publish_many("q", [{"n": n} for n in range(i, i + 25)]))
                time.sleep(0.008)  # the load's pace, not a synchronisation

        flowing = threading.Thread(target=flow)
        flowing.start()
        wait_for(lambda: len(published) >= 500)
        _write(code / "deploy_util.py", "VERSION = 2\n")
        _hup(sup, notify)
        wait_for(lambda: samples.append(len(sup.children())) or _rolled(sup, old, 3), timeout_s=20,
                 interval_s=0.02, message="the roll did not end")
        flowing.join()
        after = _handled_by(sup, p, {"after": True})
    wait_for(lambda: len(sup.events("done")) >= len(published) + 1, timeout_s=30)
    done = sup.events("done")
    assert collections.Counter(e["id"] for e in done if e["body"] != {"after": True}) == \
        collections.Counter(published)
    assert after["version"] == 2 and after["pid"] not in old
    assert {e["version"] for e in done if e["pid"] in old} == {1}
    assert {e["version"] for e in done if e["pid"] not in old} == {2}
    assert max(samples) <= 4, samples
    log = sup.log()
    assert "deploy_util.py changed on disk" in log and log.count("stopped (roll)") == 3


def test_a_broken_deploy_keeps_the_old_consumers_until_a_fixed_one_rolls(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path, redis_url: str) -> None:
    """ImportError, exit at import, death at start: roll failed, old consumers handle; a fix then rolls."""
    code = _project(tmp_path)
    sup = _start(supervise, notify, code, 2)
    old = sup.consumers_by_queue()["q"]
    broken = {
        "import": "import no_such_module_here",
        "exit": "import os\nos._exit(1)",
        "dies": "import os, threading\nthreading.Timer(0.3, os._exit, (5,)).start()",
    }
    with Producer(redis_url) as p:
        for n, (kind, extra) in enumerate(broken.items(), 1):
            _write(code / "deploy_h.py", _HANDLER.format(extra=extra))
            _write(code / "deploy_util.py", f"VERSION = {10 + n}\n")
            _hup(sup, notify)
            wait_for(lambda n=n: sup.log().count("queue q: roll failed") >= n, timeout_s=20, message=f"{kind}: no roll failed")
            wait_for(lambda: any("(roll failed: " in d for d in notify.poll()), message=f"{kind}: STATUS")
            assert sup.consumers_by_queue()["q"] == old, kind
            assert _handled_by(sup, p, {"kind": kind})["version"] == 1
            if kind == "import":
                _status_says_roll_failed(sup)
        log = sup.log()
        assert "roll failed: the new code cannot be imported" in log
        assert "roll failed: 3 new consumers died at start" in log
        _write(code / "deploy_h.py", _HANDLER.format(extra=""))
        _write(code / "deploy_util.py", "VERSION = 3\n")
        _hup(sup, notify)
        wait_for(lambda: _rolled(sup, old, 2), timeout_s=20)
        assert _handled_by(sup, p, {"fixed": True})["version"] == 3
    assert "FATAL" not in sup.log()


def _status_says_roll_failed(sup: procs.Supervisor) -> None:
    """``smqsup status`` (text and JSON) says the roll failed, and why, in one line."""
    def said() -> bool:
        text = procs.run("status", "-c", str(sup.cfg)).stdout
        return "roll failed: the new code cannot be imported: module 'deploy_h' raised on import" in text

    wait_for(said, timeout_s=15, interval_s=0.2)
    snap = json.loads(procs.run("status", "-c", str(sup.cfg), "--json").stdout)
    [info] = snap["queues"]["q"]["supervisors"]
    assert info["pid"] == sup.pid and info["roll_failed"].startswith("the new code cannot be imported")
    assert "\n" not in info["roll_failed"] and not info["rolling"]


def test_smqsup_roll_finds_the_supervisor_by_its_config_file(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path) -> None:
    """``smqsup roll -c FILE`` (a relative path too) rolls without a pid; a bad queue or no supervisor: one line."""
    code = _project(tmp_path)
    sup = _start(supervise, notify, code, 2)
    old = sup.consumers_by_queue()["q"]
    env = procs.env(None, **_env(code))
    done = procs.run("roll", "-c", "queues.yaml", cwd=str(tmp_path), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"supervisor {sup.pid}: rolling every queue (one consumer at a time; " \
                                  "see its log or smqsup status)"
    wait_for(lambda: _rolled(sup, old, 2), timeout_s=20)
    assert "a roll was asked for (smqsup roll)" in sup.log()

    bad = procs.run("roll", "-c", str(sup.cfg), "nosuch", env=env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no queue 'nosuch'" in bad.stderr
    sup.stop()
    none = procs.run("roll", "-c", str(sup.cfg), env=env)
    assert none.returncode == 1 and none.stderr.count("\n") == 1, none.stderr
    assert "no smqsup supervisor runs" in none.stderr


def test_a_file_changing_every_100ms_never_rolls_two_generations_at_once(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path, redis_url: str) -> None:
    """Edits and SIGHUPs every 100 ms for 4 s: at most one consumer more than the count, rolls one after another."""
    code = _project(tmp_path)
    sup = _start(supervise, notify, code, 2)
    samples: list[int] = []
    version = 1
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        version += 1
        _write(code / "deploy_util.py", f"VERSION = {version}\n")
        sup.signal(signal.SIGHUP)
        samples.append(len(sup.children()))
        time.sleep(0.1)  # the pace of the edits the test makes, not a synchronisation
    _hup(sup, notify)
    with Producer(redis_url) as p:
        wait_for(lambda: _handled_by(sup, p, {"last": True})["version"] == version, timeout_s=30)
    assert max(samples) <= 3, samples
    begins = [line for line in sup.log().splitlines() if "rolling its" in line or "rolled in" in line]
    # Each roll begun ends before the next one begins.
    assert all(("rolling its" in a) != ("rolling its" in b) for a, b in zip(begins, begins[1:])), begins
    assert "roll failed" not in sup.log() and "still rolling" not in sup.log()


@pytest.mark.parametrize("queues", [[], ["q", "q"]])
def test_smqsup_roll_without_a_running_supervisor_says_so_in_one_line(tmp_path: Path, queues: list[str]) -> None:
    """No supervisor runs the file: exit 1, one line, nothing else."""
    cfg = procs.write_config(tmp_path / "queues.yaml", "redis://127.0.0.1:1", {"q": {"handler": "m:f"}})
    done = procs.run("roll", "-c", str(cfg), *queues)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"Error: no smqsup supervisor runs {cfg} on this host (is it started?)\n"
    missing = procs.run("roll", "-c", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1


def test_with_preload_a_code_change_is_logged_and_rolls_nothing(
        supervise: Supervise, notify: NotifySocket, tmp_path: Path) -> None:
    """preload: true imported the handler in the supervisor: an edit and SIGHUP say a restart is needed, roll nothing."""
    code = _project(tmp_path)
    sup = supervise({"q": {"handler": "deploy_h:handle", "consumers": 2}}, notify, extra_env=_env(code),
                    preload=True)
    notify.wait("READY=1")
    wait_for(lambda: len(sup.consumers_by_queue().get("q", ())) == 2)
    old = sup.consumers_by_queue()["q"]
    _write(code / "deploy_util.py", "VERSION = 2\n")
    _hup(sup, notify)
    wait_for(lambda: "but preload imported its handler in the supervisor: restart smqsup" in sup.log())
    assert "deploy_util.py changed on disk" in sup.log() and "rolling its" not in sup.log()
    assert sup.consumers_by_queue()["q"] == old
