"""The testing kit (smqsup.testing, a pytest11 plugin): a sample project in
a temp dir tested with plain ``pytest`` (passing, then failing with its
broken handler's own error); and the Worker through the plugin's fixtures:
delays and retries with time moved, Reject and Retry, expiry, hooks,
partitions, groups, and bad input in one line."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup import Producer, Reject, Retry
from smqsup.errors import HandlerImportError, UsageError
from smqsup.testing import Worker
from tests.support import procs
from tests.support.helpers import wait_for

pytestmark = pytest.mark.topologies  # (the tests that take redis_url run on a Redis Cluster too)

SEEN: list[Any] = []


def charge(message: Any) -> Any:
    """tests.test_testing_kit:charge: what a body asks for."""
    SEEN.append(message.body)
    body = message.body if isinstance(message.body, dict) else {}
    if body.get("reject"):
        raise Reject("card blocked")
    if body.get("retry_in"):
        raise Retry(delay=body["retry_in"], reason="bank busy")
    if body.get("set"):
        return {1, 2}
    if message.attempts < body.get("fail", 0):
        raise TimeoutError(f"bank timed out on attempt {message.attempts + 1}")
    return {"charged": body.get("amount", 0), "attempt": message.attempts + 1,
            "hooked": message.headers.get("hooked", False)}


class Hooked:
    """A hook the kit's worker must run too."""

    def before_process(self, message: Any) -> None:
        message.headers["hooked"] = True


@pytest.fixture
def smqsup_config(tmp_path: Path) -> Path:
    """A config of this test's own (the plugin's smqsup_config fixture, overridden)."""
    path = tmp_path / "queues.yaml"
    path.write_text(textwrap.dedent("""\
        queues:
          pay: {handler: 'tests.test_testing_kit:charge', retry_threshold: 2, retry_delay: 10s, retry_backoff: 1}
          hooked: {handler: 'tests.test_testing_kit:charge', hooks: ['tests.test_testing_kit:Hooked']}
          spread: {handler: 'tests.test_testing_kit:charge', partitions: 3}
          missing: {handler: 'smqt_no_such_module:charge'}
        """))
    SEEN.clear()
    return path


def test_a_sample_project_passes_with_plain_pytest_and_fails_with_its_handlers_error(tmp_path: Path) -> None:
    """A project of a handler module, a queues.yaml and a test file using the fixtures: ``pytest`` passes;
    with the handler broken, the test fails with the handler's own error and traceback."""
    project = tmp_path / "shop"
    project.mkdir()
    (project / "shop.py").write_text("def charge(message):\n    return {'charged': message.body['amount']}\n")
    (project / "queues.yaml").write_text("queues:\n  payments:\n    handler: shop:charge\n")
    (project / "test_shop.py").write_text(textwrap.dedent("""\
        def test_a_payment_is_charged(smqsup_producer, smqsup_worker):
            smqsup_producer.publish("payments", {"amount": 30})
            [handled] = smqsup_worker.drain("payments", fail_fast=True)
            assert handled.state == "acked" and handled.result == {"charged": 30}
        """))
    env = {k: v for k, v in procs.env().items() if k != "PYTHONPATH"}  # (smqsup as installed, not this checkout)

    def pytest_in_project() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=project,
                              env=env, capture_output=True, text=True, timeout=120)
    passed = pytest_in_project()
    assert passed.returncode == 0 and "1 passed" in passed.stdout, passed.stdout + passed.stderr
    (project / "shop.py").write_text("def charge(message):\n    raise ValueError('card declined: a broken handler')\n")
    failed = pytest_in_project()
    assert failed.returncode == 1 and "1 failed" in failed.stdout, failed.stdout + failed.stderr
    assert "ValueError: card declined: a broken handler" in failed.stdout
    assert "shop.py:2: ValueError" in failed.stdout or "shop.py\", line 2" in failed.stdout, failed.stdout


def test_a_sample_project_without_a_config_is_told_where_to_set_it(tmp_path: Path) -> None:
    """No queues.yaml: the test errs saying which file was looked for and how to name another."""
    (tmp_path / "test_x.py").write_text("def test_x(smqsup_worker):\n    pass\n")
    env = {k: v for k, v in procs.env().items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    assert f"smqsup_worker: no config at {tmp_path / 'queues.yaml'} (set smqsup_config" in done.stdout


def test_results_and_attempts_of_a_drain(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """Three messages: acked with their results, in publish order, each once."""
    ids = smqsup_producer.publish_many("pay", [{"amount": n} for n in (10, 20, 30)])
    handled = smqsup_worker.drain("pay")
    assert [h.id for h in handled] == ids
    assert [(h.state, h.result["charged"], h.attempts) for h in handled] == [("acked", n, 1) for n in (10, 20, 30)]
    assert smqsup_worker.drain("pay") == []


def test_retries_wait_until_time_moves(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """retry_delay 10s: a failed attempt waits (retried); moving time 5 s is not enough, 11 s is; moving
    it all the way ends the message dead after retry_threshold 2 (three attempts), its reason the error."""
    smqsup_producer.publish("pay", {"fail": 9})
    [first] = smqsup_worker.drain("pay")
    assert first.state == "retried" and isinstance(first.error, TimeoutError)
    assert smqsup_worker.drain("pay", move_time=5) == []
    [second] = smqsup_worker.drain("pay", move_time=11)
    assert second.state == "retried" and second.attempts == 2
    [last] = smqsup_worker.drain("pay", move_time=True)
    assert last.state == "dead" and last.reason.startswith("TimeoutError: bank timed out on attempt 3")


def test_a_message_published_for_later_runs_when_time_moves(smqsup_producer: Producer,
                                                            smqsup_worker: Worker) -> None:
    """delay 1h: not handled by a plain drain, handled once time moves past it."""
    smqsup_producer.publish("pay", {"amount": 5}, delay=3600)
    assert smqsup_worker.drain("pay") == []
    assert smqsup_worker.drain("pay", move_time=60) == []
    [handled] = smqsup_worker.drain("pay", move_time=True)
    assert handled.state == "acked" and handled.result["charged"] == 5


def test_reject_retry_and_fail_fast(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """Reject: dead at once, its reason; Retry(delay): retried, then acked once time moves;
    fail_fast raises a handler's error that was not acked, the exception itself."""
    smqsup_producer.publish("pay", {"reject": True})
    [rejected] = smqsup_worker.drain("pay")
    assert rejected.state == "dead" and "card blocked" in rejected.reason
    smqsup_producer.publish("pay", {"retry_in": 30, "amount": 1})
    [later] = smqsup_worker.drain("pay")
    assert later.state == "retried" and isinstance(later.error, Retry)
    smqsup_producer.publish("pay", {"fail": 1, "amount": 2})
    with pytest.raises(TimeoutError, match="bank timed out on attempt 1"):
        smqsup_worker.drain("pay", fail_fast=True)


def test_a_tracked_result_the_queue_cannot_keep_is_a_failed_attempt(smqsup_producer: Producer,
                                                                     smqsup_worker: Worker) -> None:
    """A tracked message whose handler returns what is not JSON: not "acked" (the consumer fails the
    attempt, as a supervisor's would), retried with the error saying why."""
    smqsup_producer.publish("pay", {"set": True}, result_ttl=60)
    [handled] = smqsup_worker.drain("pay")
    assert handled.state == "retried" and "the handler's result" in str(handled.error)


def test_an_expired_message_is_dead_without_running(smqsup_producer: Producer, smqsup_worker: Worker,
                                                    smqsup_redis_url: str) -> None:
    """ttl passed before a drain: dead-lettered "expired", its handler never ran (attempts 0)."""
    clock = redis.Redis.from_url(smqsup_redis_url)

    def now_ms() -> int:
        seconds, micros = clock.time()
        return seconds * 1000 + micros // 1000
    smqsup_producer.publish("pay", {"amount": 1}, ttl=0.05)
    published = now_ms()  # (after the publish's reply: its ttl counts from no later than this)
    wait_for(lambda: now_ms() > published + 60, timeout_s=5)  # (the ttl passed, by the Redis clock)
    clock.close()
    [expired] = smqsup_worker.drain("pay")
    assert expired.state == "dead" and expired.attempts == 0 and expired.reason == "expired"
    assert SEEN == []


def test_hooks_partitions_and_groups_run_as_configured(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """The queue's hooks wrap the handler; a queue of 3 partitions is drained whole; grouped messages
    are handled with the others."""
    smqsup_producer.publish("hooked", {"amount": 1})
    [hooked] = smqsup_worker.drain("hooked")
    assert hooked.result["hooked"] is True
    smqsup_producer.publish_many("spread", [{"amount": n} for n in range(9)])
    smqsup_producer.publish_many("spread", [{"amount": 100}], group="tenant-1")
    handled = smqsup_worker.drain("spread")
    assert sorted(h.result["charged"] for h in handled) == [*range(9), 100]


def test_bad_queue_and_handler_are_one_line(smqsup_worker: Worker, smqsup_config: Path) -> None:
    """An unknown queue: UsageError naming the known ones; a handler that cannot be imported: the
    supervisor's one-line error naming its key."""
    with pytest.raises(UsageError) as unknown:
        smqsup_worker.drain("nope")
    assert str(unknown.value) == f"{smqsup_config}: no queue 'nope' (queues: hooked, missing, pay, spread)"
    with pytest.raises(HandlerImportError, match=r"queues\.missing\.handler: cannot import module"):
        smqsup_worker.drain("missing")


@pytest.mark.parametrize("move_time", [float("nan"), -1, float("inf"), 1e300, "soon", None, [5]])
def test_a_bad_move_time_is_one_line_and_nothing_is_handled(move_time: Any, smqsup_producer: Producer,
                                                             smqsup_worker: Worker) -> None:
    """move_time NaN, negative, infinite, huge, text, None, a list: UsageError in one line, before
    anything runs; the message is still there for a drain after."""
    smqsup_producer.publish("pay", {"amount": 3})
    with pytest.raises(UsageError) as bad:
        smqsup_worker.drain("pay", move_time=move_time)
    assert str(bad.value).startswith("move_time: expected True, False or seconds") and "\n" not in str(bad.value)
    assert SEEN == []
    [handled] = smqsup_worker.drain("pay")
    assert handled.state == "acked"


def test_each_test_has_a_namespace_of_its_own(smqsup_namespace: str, smqsup_producer: Producer) -> None:
    """The namespace is the test's: a valid name, and the producer uses it."""
    assert smqsup_producer.namespace == smqsup_namespace and smqsup_namespace.startswith(f"test-{os.getpid()}-")


def test_a_worker_on_any_redis_moves_time_through_the_scripts(smqsup_config: Path, redis_url: str) -> None:
    """The Worker on the test suite's own Redis (one server, and a Redis Cluster): a message for later and
    a retry are brought forward by advance.lua and handled through promote.lua and the take."""
    worker = Worker(smqsup_config, redis_url, "kit")
    try:
        with Producer(redis_url, "kit") as producer:
            later = producer.publish("pay", {"amount": 7}, delay=600)
            failing = producer.publish("pay", {"fail": 1, "amount": 8})
        [first] = worker.drain("pay")
        assert (first.id, first.state) == (failing, "retried")
        handled = {h.id: h for h in worker.drain("pay", move_time=True)}
        assert handled[later].result["charged"] == 7 and handled[failing].result["charged"] == 8
    finally:
        worker.close()


def _kit_args() -> list[str]:
    """pytest's arguments to load the kit: none where smqsup is installed (its pytest11 entry point)."""
    from importlib.metadata import entry_points

    installed = any(ep.name == "smqsup" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "smqsup.testing"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_kits_redis_server_dies_with_its_pytest(sig: int, tmp_path: Path) -> None:
    """A real pytest run using the kit's session redis-server, ended by SIGTERM (a CI time limit) or
    SIGKILL while a test runs: its redis-server is gone within seconds, not left running with PPID 1."""
    import psutil

    (tmp_path / "test_hold.py").write_text(textwrap.dedent("""\
        import os, threading
        import redis

        def test_held_until_the_run_is_killed(smqsup_redis_url):
            pid = redis.Redis.from_url(smqsup_redis_url).info()["process_id"]
            with open("redis.pid.tmp", "w") as f:
                f.write(str(pid))
            os.replace("redis.pid.tmp", "redis.pid")
            threading.Event().wait(600)  # (the test's work: the run is killed meanwhile)
        """))
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *_kit_args()],
                           cwd=tmp_path, env=procs.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    server: Any = None
    try:
        pid = int(wait_for(lambda: (tmp_path / "redis.pid").exists() and (tmp_path / "redis.pid").read_text(),
                           timeout_s=60))
        server = psutil.Process(pid)
        assert "redis" in server.name() and server.ppid() == run.pid
        os.kill(run.pid, sig)
        run.wait(30)

        def gone() -> bool:
            try:
                return server.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True
        wait_for(gone, timeout_s=10, message=f"redis-server {pid} outlived its pytest ({signal.Signals(sig).name})")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if server is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                server.kill()


def test_a_worker_leaves_sys_path_as_it_found_it(tmp_path: Path, redis_url: str) -> None:
    """A Worker whose config sits in a directory of its own: its handler imports from there (at import and
    while it runs), and after each import and drain sys.path is what it was: later tests import as before."""
    (tmp_path / "kit_shop.py").write_text(textwrap.dedent("""\
        def charge(message):
            import kit_shop_rates  # (imported as it runs, from the config's directory)
            return message.body * kit_shop_rates.RATE
        """))
    (tmp_path / "kit_shop_rates.py").write_text("RATE = 3\n")
    (tmp_path / "queues.yaml").write_text("queues:\n  pay: {handler: 'kit_shop:charge'}\n")
    before = list(sys.path)
    worker = Worker(tmp_path / "queues.yaml", redis_url, "kit-path")
    try:
        worker.handler("pay")
        assert sys.path == before
        with Producer(redis_url, "kit-path") as producer:
            producer.publish("pay", 5, result_ttl=60)
        [handled] = worker.drain("pay")
        assert handled.state == "acked" and handled.result == 15
        assert sys.path == before
    finally:
        worker.close()
        for name in ("kit_shop", "kit_shop_rates"):
            sys.modules.pop(name, None)


def test_a_drain_follows_a_chain_to_its_end(smqsup_producer: Producer, smqsup_worker: Worker) -> None:
    """A chain of three steps on one queue: one drain handles all three, each after the one before (each
    ack releases the next step after the consumer's last look at the queue); a chain through another
    queue runs a step per drain of its queue."""
    ids = smqsup_producer.chain([("pay", {"amount": 1}), ("pay", {"amount": 2}), ("pay", {"amount": 3})])
    handled = smqsup_worker.drain("pay")
    assert [(h.id, h.state, h.result["charged"]) for h in handled] == [
        (ids[0], "acked", 1), (ids[1], "acked", 2), (ids[2], "acked", 3)]
    smqsup_producer.chain([("pay", {"amount": 4}), ("hooked", {"amount": 5}), ("pay", {"amount": 6})])
    assert [h.result["charged"] for h in smqsup_worker.drain("pay")] == [4]
    assert [h.result["charged"] for h in smqsup_worker.drain("hooked")] == [5]
    assert [h.result["charged"] for h in smqsup_worker.drain("pay")] == [6]
