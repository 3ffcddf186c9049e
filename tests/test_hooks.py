"""Hooks: a producer's before_publish (headers added, a raise refusing the
publish whole), a queue's before_process and after_process as a stack
around its handler (inline, threads, tasks), their failure rules, a hook
that hangs bounded by message_timeout, and bad hooks refused in one line
by the config, ``smqsup check`` and a supervisor's consumers."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup import HookFailed, deadletter
from smqsup.client.aio_producer import AsyncProducer
from smqsup.client.producer import Producer
from smqsup.config.model import load
from smqsup.errors import ConfigError, MessageError
from smqsup.keys import QueueKeys
from tests.support import hook_mods, procs
from tests.support.helpers import wait_for
from tests.support.hook_mods import EVENTS
from tests.support.inproc import NS, Running

K = QueueKeys(NS, "q")
BOTH = ("tests.support.hook_mods:First", "tests.support.hook_mods:Second")


@pytest.fixture(autouse=True)
def events() -> Iterator[list[tuple[str, str, Any]]]:
    """EVENTS emptied before and after each test; hanging hooks held until the test ends."""
    EVENTS.clear()
    hook_mods.RELEASE.clear()
    yield EVENTS
    hook_mods.RELEASE.set()
    EVENTS.clear()


class AddTenant:
    """A publish hook: the tenant header, from the body."""

    def before_publish(self, queue: str, body: Any, headers: dict[str, Any]) -> None:
        headers["tenant"] = f"t-{body}" if isinstance(body, int) else "none"
        headers["queue_seen"] = queue


class AddTrace:
    """A second publish hook: sees what the first added."""

    def before_publish(self, queue: str, body: Any, headers: dict[str, Any]) -> None:
        headers["trace"] = f"after-{headers.get('tenant')}"


class RefuseSeven:
    def before_publish(self, queue: str, body: Any, headers: dict[str, Any]) -> None:
        if body == 7:
            raise ValueError("seven is not allowed")


def _handle(msg: Any) -> Any:
    EVENTS.append(("handler", "run", msg.body))
    if msg.body == "fail":
        raise KeyError("the handler fails")
    return {"body": msg.body, "headers": dict(msg.headers)}


async def _handle_async(msg: Any) -> Any:
    await asyncio.sleep(0)
    return _handle(msg)


HANDLERS = {"inline": (_handle, 1), "threads": (_handle, 4), "tasks": (_handle_async, 4)}


def _settled(redis_client: redis.Redis, count: int) -> Callable[[], bool]:
    def done() -> bool:
        acked = int(redis_client.hget(K.counters, "acked") or 0)
        return acked + redis_client.llen(K.dead) >= count
    return done


# --- publish hooks ----------------------------------------------------------------------------


@pytest.mark.both_clients
def test_publish_hooks_add_headers_in_order_that_the_handler_reads(new_producer: Callable[..., Producer],
        start: Callable[..., Running], redis_url: str, redis_client: redis.Redis) -> None:
    """Two publish hooks in order (the second reads what the first added) on publish, publish_many
    (headers differing per body, plain and with options) and a caller's own headers, left unchanged."""
    seen: list[Any] = []
    start(lambda msg: seen.append((msg.body, dict(msg.headers))))
    mine = {"from": "caller"}
    with new_producer(redis_url, hooks=[AddTenant(), AddTrace()]) as p:
        p.publish("q", 1, mine)
        p.publish_many("q", [2, 3, "x"])
        p.publish_many("q", [4, 5], priority=5)
        p.publish("q", 6, delay=0.01)
    assert mine == {"from": "caller"}
    wait_for(lambda: len(seen) == 7, timeout_s=10)
    got = {body: headers for body, headers in seen}
    assert got[1] == {"from": "caller", "tenant": "t-1", "queue_seen": "q", "trace": "after-t-1"}
    for body in (2, 3, 4, 5, 6):
        assert got[body] == {"tenant": f"t-{body}", "queue_seen": "q", "trace": f"after-t-{body}"}
    assert got["x"]["tenant"] == "none"


@pytest.mark.both_clients
def test_a_publish_hook_that_raises_refuses_the_whole_call(new_producer: Callable[..., Producer], redis_url: str, redis_client: redis.Redis) -> None:
    """before_publish raising: HookFailed naming the queue, the hook and its error, the error as its
    cause; nothing queued, for publish and for a publish_many whose 7th body is refused."""
    with new_producer(redis_url, hooks=[AddTenant(), RefuseSeven()]) as p:
        with pytest.raises(HookFailed) as raised:
            p.publish("q", 7)
        assert "queue 'q': before_publish of hook RefuseSeven raised (ValueError: seven is not allowed)" in str(
            raised.value) and "nothing was published" in str(raised.value)
        assert isinstance(raised.value.__cause__, ValueError)
        with pytest.raises(HookFailed):
            p.publish_many("q", list(range(10)))
        with pytest.raises(HookFailed):
            p.publish_many("q", list(range(10)), priority=3)
        assert p.publish("q", 8)
    assert redis_client.llen(K.pending) == 1 and redis_client.zcard(K.delayed) == 0


class BadHeader:
    """A publish hook that adds what JSON cannot carry."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def before_publish(self, queue: str, body: Any, headers: dict[str, Any]) -> None:
        headers["bad"] = self.value


@pytest.mark.both_clients
@pytest.mark.parametrize("value", [object(), float("nan"), "\udcff", {"deep": [[[[[]]]]] * 2}],
                         ids=["object", "nan", "surrogate", "ok-nested"])
def test_a_hook_adding_a_header_json_cannot_carry_refuses_the_publish(new_producer: Callable[..., Producer], value: Any, redis_url: str,
                                                                     redis_client: redis.Redis) -> None:
    """A before_publish adding an object, NaN or a lone surrogate: MessageError, nothing queued (publish
    and publish_many alike); a nested but valid header goes through."""
    with new_producer(redis_url, hooks=[BadHeader(value)]) as p:
        if isinstance(value, dict):
            p.publish("q", 1)
            assert redis_client.llen(K.pending) == 1
            return
        for send in (lambda: p.publish("q", 1), lambda: p.publish_many("q", [1, 2]),
                     lambda: p.publish("q", 1, priority=3)):
            with pytest.raises(MessageError):
                send()
    assert redis_client.llen(K.pending) == 0 and redis_client.zcard(K.priority) == 0


def test_bad_hooks_under_defaults_name_the_defaults_key(tmp_path: Path) -> None:
    """defaults.hooks not a list, or an entry not a spec: one line naming defaults.hooks."""
    path = tmp_path / "queues.yaml"
    for hooks, key in (("5", "defaults.hooks"), ("[nocolon]", "defaults.hooks[0]")):
        path.write_text(f"defaults: {{hooks: {hooks}}}\nqueues:\n  q: {{handler: 'tests.support.handlers:record'}}\n")
        with pytest.raises(ConfigError) as bad:
            load(path)
        assert str(bad.value).startswith(f"{path}: {key}: ") and "\n" not in str(bad.value)


@pytest.mark.both_clients
def test_a_chain_runs_each_steps_publish_hooks_once(new_producer: Callable[..., Producer], start: Callable[..., Running], redis_url: str) -> None:
    """chain() checks every step before the first is sent, then publishes each: the hooks run once a
    step, on the step actually sent."""
    class Count:
        calls: list[Any] = []

        def before_publish(self, queue: str, body: Any, headers: dict[str, Any]) -> None:
            self.calls.append(body)
    seen: list[Any] = []
    start(lambda msg: seen.append(msg.body) or msg.body)
    with new_producer(redis_url, hooks=[Count()]) as p:
        p.chain([("q", 1, {"result_ttl": 60}), ("q", 2)])
    assert Count.calls == [1, 2]


@pytest.mark.both_clients
def test_headers_that_are_not_a_mapping_are_refused_as_ever_with_hooks(new_producer: Callable[..., Producer], redis_url: str) -> None:
    """A str or a list of pairs as headers: MessageError before any hook runs, as without hooks."""
    with new_producer(redis_url, hooks=[AddTenant()]) as p:
        for bad in ("x", [("a", 1)]):
            with pytest.raises(MessageError, match="headers must be a mapping"):
                p.publish("q", 1, bad)  # type: ignore[arg-type]
            with pytest.raises(MessageError, match="headers must be a mapping"):
                p.publish_many("q", [1], bad)  # type: ignore[arg-type]


def test_the_async_producer_runs_publish_hooks(start: Callable[..., Running], redis_url: str) -> None:
    """AsyncProducer(hooks=...): headers added on publish and publish_many; a raise is HookFailed."""
    seen: list[Any] = []
    start(lambda msg: seen.append((msg.body, dict(msg.headers))))

    async def main() -> None:
        async with AsyncProducer(redis_url, hooks=[AddTenant(), RefuseSeven()]) as p:
            await p.publish("q", 1)
            await p.publish_many("q", [2, 3])
            with pytest.raises(HookFailed):
                await p.publish("q", 7)
    asyncio.run(main())
    wait_for(lambda: len(seen) == 3, timeout_s=10)
    assert sorted((b, h["tenant"]) for b, h in seen) == [(1, "t-1"), (2, "t-2"), (3, "t-3")]


@pytest.mark.parametrize(("hooks", "problem"), [
    ("not a list", "hooks: expected a list of hook objects, got str"),
    ([object()], "hooks[0]: object defines none of before_publish, before_process, after_process"),
    ([AddTenant], "hooks[0]: AddTenant is a class: pass an instance of it"),
    ([hook_mods.NotCallable()], "hooks[0]: NotCallable its before_process is not callable"),
    ([AddTenant()] * 33, "hooks: at most 32 hooks, got 33"),
])
def test_a_producer_refuses_bad_hooks_at_once(hooks: Any, problem: str) -> None:
    """Hooks that are not a list, define nothing, are a class, have a method that is not callable, or are
    too many: ConfigError naming the position, before any connection."""
    with pytest.raises(ConfigError) as raised:
        Producer("redis://127.0.0.1:1/0", hooks=hooks)
    assert str(raised.value) == problem


def test_an_async_before_publish_is_refused() -> None:
    """A publish hook is a plain function, in either producer."""
    class Async:
        async def before_publish(self, queue: str, body: Any, headers: dict[str, Any]) -> None:
            """(never awaited)"""
    with pytest.raises(ConfigError, match="its before_publish is async def"):
        AsyncProducer("redis://127.0.0.1:1/0", hooks=[Async()])


# --- process hooks, in process ------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_process_hooks_run_as_a_stack_around_the_handler(
        kind: str, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """before First, before Second, the handler, after Second, after First, for each message; the afters
    see the result; a header the first before adds is read by the handler."""
    handler, concurrency = HANDLERS[kind]
    start(handler, concurrency=concurrency, hooks=BOTH)
    mid = producer.publish("q", "one", result_ttl=60)
    assert producer.result("q", mid, timeout=10) == {"body": "one", "headers": {"first": True}}
    wait_for(lambda: len(EVENTS) == 5, timeout_s=5)
    result = {"body": "one", "headers": {"first": True}}
    assert EVENTS == [("First", "before", "one"), ("Second", "before", "one"), ("handler", "run", "one"),
                      ("Second", "after", (result, None)), ("First", "after", (result, None))]


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_a_before_process_that_raises_is_a_failed_attempt(
        kind: str, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """Second's before raising: the handler does not run, only First's after runs (with the error), the
    attempt fails and is retried; at retry_threshold the dead letter's reason is the hook's error."""
    handler, concurrency = HANDLERS[kind]
    start(handler, concurrency=concurrency, hooks=BOTH, retry_threshold=1, retry_delay_s=0.05)
    producer.publish("q", "refuse")
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=10)
    one = [("First", "before", "refuse"), ("Second", "before", "refuse"),
           ("First", "after", (None, "PermissionError"))]
    wait_for(lambda: len(EVENTS) == 6, timeout_s=5)
    assert EVENTS == one + one
    reason = deadletter.DeadLetter(redis_client.lindex(K.dead, 0) or b"").reason
    assert reason.startswith("PermissionError: Second refuses this message"), reason


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_a_handler_error_reaches_every_after_process(
        kind: str, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis) -> None:
    """The handler raising: both afters run, in reverse, with its error; the attempt fails as it would."""
    handler, concurrency = HANDLERS[kind]
    start(handler, concurrency=concurrency, hooks=BOTH, retry_threshold=0)
    producer.publish("q", "fail")
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=10)
    wait_for(lambda: len(EVENTS) == 5, timeout_s=5)
    assert EVENTS[3:] == [("Second", "after", (None, "KeyError")), ("First", "after", (None, "KeyError"))]
    assert deadletter.DeadLetter(redis_client.lindex(K.dead, 0) or b"").reason.startswith("KeyError")


@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_an_after_process_that_raises_is_logged_and_changes_nothing(
        kind: str, start: Callable[..., Running], producer: Producer, redis_client: redis.Redis,
        caplog: pytest.LogCaptureFixture) -> None:
    """AfterOnly's after raising (it runs first, the last hook): logged naming the queue, message and
    hook; First's after still runs; the message is acked with the handler's result."""
    handler, concurrency = HANDLERS[kind]
    caplog.set_level(logging.ERROR, logger="smqsup.worker.process_hooks")
    start(handler, concurrency=concurrency, hooks=("tests.support.hook_mods:First", "tests.support.hook_mods:AfterOnly"),
          retry_threshold=0)
    mid = producer.publish("q", "break-after", result_ttl=60)
    assert producer.result("q", mid, timeout=10) == {"body": "break-after", "headers": {"first": True}}
    wait_for(lambda: ("First", "after", ({"body": "break-after", "headers": {"first": True}}, None)) in EVENTS,
             timeout_s=5)
    assert redis_client.llen(K.dead) == 0
    [record] = [r for r in caplog.records if r.name == "smqsup.worker.process_hooks"]
    assert record.getMessage() == (f"queue q: message {mid}: after_process of hook AfterOnly raised "
                                   "(RuntimeError: AfterOnly breaks after); the attempt's end is unchanged")


class _Exits:
    """A consumer (hooks ``RaisesAfter``, or its async twin for a task) run in a thread that keeps what
    ``run()`` raised or returned."""

    def __init__(self, url: str, kind: str) -> None:
        from smqsup.config.model import QueueConfig
        from smqsup.store.broker import Broker
        from smqsup.worker.consumer import Consumer
        from smqsup.worker.process_hooks import with_hooks

        handler, concurrency = HANDLERS[kind]
        hook = "tests.support.hook_mods:AsyncRaisesAfter" if kind == "tasks" else "tests.support.hook_mods:RaisesAfter"
        qcfg = QueueConfig(name="q", handler="tests.support.handlers:record", concurrency=concurrency, hooks=(hook,))
        self.consumer = Consumer(Broker(url, NS), qcfg, with_hooks(handler, qcfg), fetch_block_s=0.2)
        self.ended: list[object] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.ended.append(self.consumer.run())
        except BaseException as exc:  # noqa: BLE001 - what the test reads
            self.ended.append(exc)


@pytest.mark.parametrize("raised", ["SystemExit", "KeyboardInterrupt", "GeneratorExit"])
@pytest.mark.parametrize("kind", sorted(HANDLERS))
def test_an_after_process_raising_a_base_exception_changes_nothing_about_the_attempt(
        kind: str, raised: str, redis_url: str, producer: Producer, redis_client: redis.Redis) -> None:
    """An after_process raising SystemExit, KeyboardInterrupt or GeneratorExit after a successful
    handler: the handler ran once, the message is acked once with its result, nothing is retried or
    dead-lettered; SystemExit and KeyboardInterrupt then stop the consumer, whose run() raises them
    once settled; GeneratorExit is only logged, and the consumer goes on."""
    running = _Exits(redis_url, kind)
    try:
        mid = producer.publish("q", raised, result_ttl=60)
        assert producer.result("q", mid, timeout=10) == {"body": raised, "headers": {}}
        wait_for(_settled(redis_client, 1), timeout_s=5)
        if raised == "GeneratorExit":
            second = producer.publish("q", raised, result_ttl=60)
            assert producer.result("q", second, timeout=10) == {"body": raised, "headers": {}}
            assert running.thread.is_alive()
        else:
            running.thread.join(10)
            assert [type(e).__name__ for e in running.ended] == [raised]
        runs = [e for e in EVENTS if e[:2] == ("handler", "run")]
        assert len(runs) == (2 if raised == "GeneratorExit" else 1)
        assert int(redis_client.hget(K.counters, "acked") or 0) == len(runs)
        assert redis_client.llen(K.dead) == 0 and redis_client.zcard(K.delayed) == 0
    finally:
        running.consumer.request_stop()
        running.thread.join(10)


def test_async_hook_methods_are_awaited_around_an_async_handler(
        start: Callable[..., Running], producer: Producer) -> None:
    """async def before_process and after_process around an async handler, awaited in stack order."""
    start(_handle_async, concurrency=4, hooks=("tests.support.hook_mods:AsyncHook", "tests.support.hook_mods:First"))
    mid = producer.publish("q", "a", result_ttl=60)
    producer.result("q", mid, timeout=10)
    wait_for(lambda: len(EVENTS) == 5, timeout_s=5)
    assert [(who, what) for who, what, _ in EVENTS] == [
        ("AsyncHook", "before"), ("First", "before"), ("handler", "run"), ("First", "after"),
        ("AsyncHook", "after")]


@pytest.mark.parametrize(("hook", "handler"), [("Hangs", _handle), ("AsyncHangs", _handle_async)],
                         ids=["thread", "task"])
def test_a_hook_that_hangs_is_bounded_by_message_timeout(
        hook: str, handler: Callable[..., Any], start: Callable[..., Running], producer: Producer,
        redis_client: redis.Redis) -> None:
    """A before_process that never returns (a thread waiting, a task awaiting): given up at
    message_timeout as a handler would be, dead-lettered "timeout", and the consumer goes on."""
    start(handler, concurrency=2, hooks=(f"tests.support.hook_mods:{hook}",), message_timeout_s=0.5, retry_threshold=0)
    producer.publish("q", f"stuck-{hook}")
    wait_for(lambda: redis_client.llen(K.dead) == 1, timeout_s=10)
    assert deadletter.DeadLetter(redis_client.lindex(K.dead, 0) or b"").reason == "timeout"
    assert (hook, "before", f"stuck-{hook}") in EVENTS and ("handler", "run", f"stuck-{hook}") not in EVENTS


def test_a_queue_without_hooks_gets_its_handler_itself() -> None:
    """No hooks, or hooks with no process method: the handler is not wrapped (nothing paid per message)."""
    from smqsup.config.model import QueueConfig
    from smqsup.worker.process_hooks import with_hooks
    assert with_hooks(_handle, QueueConfig(name="q", handler="x:y")) is _handle
    only_publish = QueueConfig(name="q", handler="x:y", hooks=("tests.test_hooks:PUBLISH_ONLY",))
    assert with_hooks(_handle, only_publish) is _handle


PUBLISH_ONLY = AddTenant()


# --- bad hooks, in one line ------------------------------------------------------------------------


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("hooks", "problem"), [
    ("tests.support.hook_mods:First", "queues.q.hooks: expected a list of 'module:Class' hooks, got 'tests.support.hook_mods:First'"),
    ("{a: 1}", "queues.q.hooks: expected a list of 'module:Class' hooks, got a mapping"),
    ("[42]", "queues.q.hooks[0]: expected 'module:Class', got 42"),
    ("[nocolon]", "queues.q.hooks[0]: expected 'module:Class' (no ':' found), got 'nocolon'"),
    ("[[[[[]]]]]", "queues.q.hooks[0]: expected 'module:Class', got a list"),
    (str([f"m:C{i}" for i in range(33)]), "queues.q.hooks: at most 32 hooks, got 33"),
    ("['" + "a" * 100_000 + ":B']", "queues.q.hooks[0]: a 'module:Class' is at most 1000 characters"),
    ("['m:\\udcff']", "queues.q.hooks[0]: expected 'module:Class'"),
    ("[null]", "queues.q.hooks[0]: expected 'module:Class', got None"),
])
def test_bad_hooks_in_the_config_are_one_line_naming_the_key(tmp_path: Path, hooks: str, problem: str) -> None:
    """hooks: not a list, a mapping, a number, no colon, nested lists, 33 entries, a 100,000-character
    module, a lone surrogate, null: one ConfigError line naming queues.q.hooks (and the index)."""
    path = _config(tmp_path, f"queues:\n  q:\n    handler: tests.support.handlers:record\n    hooks: {hooks}\n")
    with pytest.raises(ConfigError) as raised:
        load(path)
    text = str(raised.value)
    assert "\n" not in text and text.startswith(f"{path}: ") and problem in text, text
    assert len(text) < 400


def test_a_queue_hooks_replace_the_defaults_and_an_empty_list_means_none(tmp_path: Path) -> None:
    """defaults.hooks apply to every queue; a queue's own list replaces them; [] leaves it none."""
    path = _config(tmp_path, "defaults:\n  hooks: [tests.support.hook_mods:First]\nqueues:\n"
                             "  a: {handler: 'tests.support.handlers:record'}\n"
                             "  b: {handler: 'tests.support.handlers:record', hooks: ['tests.support.hook_mods:Second', 'm:C']}\n"
                             "  c: {handler: 'tests.support.handlers:record', hooks: []}\n")
    cfg = load(path)
    assert cfg.queues["a"].hooks == ("tests.support.hook_mods:First",)
    assert cfg.queues["b"].hooks == ("tests.support.hook_mods:Second", "m:C")
    assert cfg.queues["c"].hooks == ()


@pytest.mark.parametrize(("spec", "problem"), [
    ("smqt_missing_mod:Hook", "queues.q.hooks[1]: cannot import module 'smqt_missing_mod'"),
    ("tests.support.hook_mods:Nope", "queues.q.hooks[1]: module 'tests.support.hook_mods' has no attribute 'Nope'"),
    ("tests.support.hook_mods:NoMethods", "queues.q.hooks[1]: defines none of before_publish, before_process, "
                                  "after_process, got 'tests.support.hook_mods:NoMethods'"),
    ("tests.support.hook_mods:BadInit", "queues.q.hooks[1]: could not be made without arguments "
                                "(ValueError: BadInit needs a database), got 'tests.support.hook_mods:BadInit'"),
    ("tests.support.hook_mods:NotCallable", "queues.q.hooks[1]: its before_process is not callable"),
    ("tests.support.hook_mods:AsyncHook", "queues.q.hooks[1]: before_process is async def and the handler is not"),
])
def test_check_imports_hooks_and_names_a_bad_one_in_one_line(tmp_path: Path, spec: str, problem: str) -> None:
    """smqsup check imports each queue's hooks: one not importable, missing, defining nothing, failing to
    be made, with a method that is not callable, or async around a plain handler: exit 2, one line."""
    cfg = procs.write_config(tmp_path / "queues.yaml", "redis://127.0.0.1:1/0",
                             {"q": {"handler": "tests.support.handlers:record",
                                    "hooks": ["tests.support.hook_mods:INSTANCE", spec]}})
    done = subprocess.run([sys.executable, "-m", "smqsup", "check", "-c", str(cfg)], cwd=procs.REPO,
                          env=procs.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0], lines
    assert "Traceback" not in done.stderr


def test_check_passes_good_hooks(tmp_path: Path) -> None:
    """A class, an instance and an after-only hook: check says ok."""
    cfg = procs.write_config(tmp_path / "queues.yaml", "redis://127.0.0.1:1/0",
                             {"q": {"handler": "tests.support.handlers:record",
                                    "hooks": ["tests.support.hook_mods:First", "tests.support.hook_mods:INSTANCE",
                                              "tests.support.hook_mods:AfterOnly"]}})
    done = subprocess.run([sys.executable, "-m", "smqsup", "check", "-c", str(cfg)], cwd=procs.REPO,
                          env=procs.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and ": ok (1 queue(s)" in done.stdout, done.stderr


# --- supervised -------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_supervised_consumer_runs_its_hooks_and_refuses_a_bad_one_at_start(new_producer: Callable[..., Producer],
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """Real supervisor: a producer's hook adds a header, the consumer's before_process stamps its pid, the
    handler returns both, the after_process logs the result; a queue whose hook cannot be imported says
    so in one line and never starts a consumer, while the others run; an inline consumer whose hook
    hangs is killed at message_timeout, its message dead-lettered "timeout"."""
    s = supervise({"q": {"handler": "tests.support.hook_mods:headers_of", "hooks": ["tests.support.hook_mods:Stamp"],
                         },
                   "bad": {"handler": "tests.support.handlers:record", "hooks": ["smqt_missing_mod:Hook"]},
                   "hang": {"handler": "tests.support.handlers:record", "hooks": ["tests.support.hook_mods:Hangs"],
                            "message_timeout": "1s", "retry_threshold": 0}})
    with new_producer(redis_url, hooks=[AddTenant()]) as p:
        mid = p.publish("q", 5, result_ttl=60)
        got = p.result("q", mid, timeout=30)
    assert got["tenant"] == "t-5" and got["queue_seen"] == "q"
    assert isinstance(got["stamped_by"], int) and got["stamped_by"] != os.getpid()
    wait_for(lambda: f"hook-after {mid} result=" in s.log(), timeout_s=10)
    wait_for(lambda: "queues.bad.hooks[0]: cannot import module 'smqt_missing_mod'" in s.log(), timeout_s=20)
    assert "Traceback" not in s.log()
    hang = QueueKeys(NS, "hang")
    with new_producer(redis_url) as p:
        p.publish("hang", "stuck")
    wait_for(lambda: redis_client.llen(hang.dead) == 1, timeout_s=20)
    assert deadletter.DeadLetter(redis_client.lindex(hang.dead, 0) or b"").reason == "timeout after 1 s"


def _other_child(s: procs.Supervisor, old: int) -> int | None:
    """The pid of the one consumer when it is not ``old``."""
    pid = s.only_child()
    return pid if pid != old else None


@pytest.mark.timeout(90)
def test_a_supervised_consumer_whose_after_process_exits_acks_once_then_is_replaced(
        supervise: Callable[..., procs.Supervisor], redis_url: str, redis_client: redis.Redis) -> None:
    """Real supervisor: an after_process raising SystemExit, then KeyboardInterrupt, after the handler
    returned: each message is handled once and acked once (never retried, never dead-lettered), the
    consumer process exits once it is settled and the supervisor starts another."""
    s = supervise({"q": {"handler": "tests.support.handlers:record", "hooks": ["tests.support.hook_mods:RaisesAfter"],
                         "retry_threshold": 2, "retry_delay": "0s"}})
    first = wait_for(s.only_child, timeout_s=30)
    with Producer(redis_url) as p:
        for n, raised in enumerate(("SystemExit", "KeyboardInterrupt"), start=1):
            p.publish("q", raised)
            wait_for(lambda n=n: int(redis_client.hget(K.counters, "acked") or 0) == n, timeout_s=30)
            assert sorted(e["body"] for e in s.events("done")) == sorted(["SystemExit", "KeyboardInterrupt"][:n])
            first = wait_for(lambda old=first: _other_child(s, old), timeout_s=30)
    assert redis_client.llen(K.dead) == 0 and redis_client.zcard(K.delayed) == 0
    assert s.log().count("; the consumer stops once its messages are settled") == 2
