"""OpenTelemetry traces: a producer process's PRODUCER span and a supervised
consumer's CONSUMER span of each attempt in one trace (the SDK exporting to
a file from each process), through retries, dead letters and timeouts;
hostile traceparent headers never trusted beyond the W3C grammar; the
asyncio producer; tracing: true refused in one line without OpenTelemetry."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup.client.aio_producer import AsyncProducer
from smqsup.client.producer import Producer
from smqsup.config.model import load
from smqsup.errors import ConfigError, PublishNotSent
from smqsup.keys import QueueKeys
from tests.support import otel_setup, procs
from tests.support.helpers import wait_for
from tests.support.inproc import NS, Running

K = QueueKeys(NS, "q")


@pytest.fixture
def memory() -> Iterator[Any]:
    """This process's spans, in memory, emptied for the test."""
    exporter = otel_setup.in_memory()
    exporter.clear()
    yield exporter
    exporter.clear()


def _hex(value: int) -> str:
    return f"0x{value:032x}"


def _by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


def _produce(url: str, queue: str, spans_dir: Path, *bodies: str) -> list[str]:
    """Publish ``bodies`` from a producer process of its own (tests/support/otel_producer.py); the ids."""
    done = subprocess.run([sys.executable, "-m", "tests.support.otel_producer", url, queue, *bodies], cwd=procs.REPO,
                          env={**procs.env(), "SMQSUP_TEST_SPANS": str(spans_dir)}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.timeout(90)
def test_a_trace_runs_from_a_producer_process_through_a_consumer_process_and_its_retries(
        supervise: Callable[..., procs.Supervisor], redis_url: str, tmp_path: Path) -> None:
    """Real processes, each exporting its spans to a file: the producer's "send q" is the child of its
    "request"; each attempt's "process q" (a CONSUMER span in the consumer's process) is the child of
    "send q" in the same trace, with the messaging attributes; the handler's own span is the attempt's
    child; a message failing once has two attempts, the first "retried" (an error, a retry event), the
    second acked; one failing past retry_threshold ends "dead_lettered" with its reason."""
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    s = supervise({"q": {"handler": "tests.support.otel_handlers:work", "tracing": True, "retry_threshold": 1,
                         "retry_delay": "100ms"}}, extra_env={"SMQSUP_TEST_SPANS": str(spans_dir)}, log_format="json")
    ok, retried, dead = _produce(redis_url, "q", spans_dir, "{}", '{"fail": 1}', '{"fail": 5}')

    def processed() -> list[dict[str, Any]]:
        return _by_name(otel_setup.read_spans(spans_dir), "process q")
    wait_for(lambda: len(processed()) == 5, timeout_s=30, message="five attempts' spans")
    spans = otel_setup.read_spans(spans_dir)
    [request] = _by_name(spans, "request")
    sends = _by_name(spans, "send q")
    assert len(sends) == 3 and all(s["parent_id"] == request["context"]["span_id"] for s in sends)
    trace_id = request["context"]["trace_id"]
    send_of = {s["attributes"]["messaging.message.id"]: s for s in sends}
    assert sends[0]["kind"] == "SpanKind.PRODUCER" and sends[0]["pid"] == request["pid"]
    attempts: dict[str, list[dict[str, Any]]] = {}
    for span in sorted(processed(), key=lambda s: s["start_time"]):
        attempts.setdefault(span["attributes"]["messaging.message.id"], []).append(span)
    for mid, spans_of in attempts.items():
        for n, span in enumerate(spans_of, 1):
            assert span["kind"] == "SpanKind.CONSUMER" and span["pid"] != request["pid"]
            assert span["context"]["trace_id"] == trace_id
            assert span["parent_id"] == send_of[mid]["context"]["span_id"]
            attrs = span["attributes"]
            assert attrs["messaging.system"] == "smqsup" and attrs["messaging.destination.name"] == "q"
            assert attrs["messaging.operation.type"] == "process" and attrs["smqsup.message.attempt"] == n
    [acked] = attempts[ok]
    assert acked["attributes"]["smqsup.outcome"] == "acked" and acked["status"]["status_code"] == "UNSET"
    [work] = [s for s in _by_name(spans, "work") if s["parent_id"] == acked["context"]["span_id"]]
    assert work["context"]["trace_id"] == trace_id
    first, second = attempts[retried]
    assert first["attributes"]["smqsup.outcome"] == "retried" and first["status"]["status_code"] == "ERROR"
    assert [e["name"] for e in first["events"]] == ["exception", "retry"]
    assert second["attributes"]["smqsup.outcome"] == "acked"
    assert [s["attributes"]["smqsup.outcome"] for s in attempts[dead]] == ["retried", "dead_lettered"]
    last = attempts[dead][-1]
    assert last["events"][-1]["name"] == "dead_lettered"
    assert last["events"][-1]["attributes"]["smqsup.reason"].startswith("RuntimeError: failing attempt 2")
    lines = [json.loads(line) for line in s.log().splitlines() if line.startswith("{")]
    [working] = [r for r in lines if r["msg"] == f"working on {ok}"]
    assert working["trace_id"] == trace_id.removeprefix("0x") and working["message_id"] == ok
    parent = [r for r in lines if r["role"] != "consumer"]
    assert parent and all("trace_id" not in r for r in parent)  # (no span current there)


@pytest.mark.timeout(90)
def test_a_dependencys_child_links_to_its_parents_send_spans(
        supervise: Callable[..., procs.Supervisor], redis_url: str, tmp_path: Path) -> None:
    """Two tracked parents and a child depending on both, from one producer process: the child's
    "process q" span, in the consumer's process, links to the two parents' "send q" spans (their trace
    and span ids), and is the child of its own send span."""
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    supervise({"q": {"handler": "tests.support.otel_handlers:work", "tracing": True}},
              extra_env={"SMQSUP_TEST_SPANS": str(spans_dir)})
    first, second, child = _produce(redis_url, "q", spans_dir, "flow")

    def processed() -> dict[str, dict[str, Any]]:
        return {s["attributes"]["messaging.message.id"]: s
                for s in _by_name(otel_setup.read_spans(spans_dir), "process q")}
    wait_for(lambda: len(processed()) == 3, timeout_s=30, message="three messages' spans")
    sends = {s["attributes"]["messaging.message.id"]: s for s in _by_name(otel_setup.read_spans(spans_dir), "send q")}
    span = processed()[child]
    assert span["parent_id"] == sends[child]["context"]["span_id"]
    linked = {(link["context"]["trace_id"], link["context"]["span_id"]) for link in span["links"]}
    assert linked == {(sends[mid]["context"]["trace_id"], sends[mid]["context"]["span_id"]) for mid in (first, second)}
    assert processed()[first]["links"] == []


@pytest.mark.parametrize(("concurrency", "asynchronous"), [(2, False), (2, True)], ids=["thread", "task"])
def test_a_timeout_ends_the_span_as_dead_lettered_timeout(
        concurrency: int, asynchronous: bool, memory: Any, start: Callable[..., Running], producer: Producer,
        redis_client: redis.Redis) -> None:
    """A handler past message_timeout (a thread given up, a task cancelled): its span ends when the
    outcome is drawn, "dead_lettered", its event's reason "timeout"."""
    import threading
    release = threading.Event()

    def stuck(msg: Any) -> None:
        release.wait(30)

    async def stuck_async(msg: Any) -> None:
        await asyncio.sleep(30)
    start(stuck_async if asynchronous else stuck, concurrency=concurrency, tracing=True, message_timeout_s=0.5,
          retry_threshold=0)
    try:
        mid = producer.publish("q", "x")
        wait_for(lambda: [s for s in memory.get_finished_spans() if s.name == "process q"], timeout_s=10)
    finally:
        release.set()
    [span] = [s for s in memory.get_finished_spans() if s.name == "process q"]
    assert span.attributes["messaging.message.id"] == mid and span.attributes["smqsup.outcome"] == "dead_lettered"
    assert span.events[-1].name == "dead_lettered" and span.events[-1].attributes["smqsup.reason"] == "timeout"
    assert span.parent is None  # (published without tracing: a trace of its own)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_an_exception_whose_text_raises_is_traced_without_harm(memory: Any, start: Callable[..., Running],
                                                               producer: Producer, redis_client: redis.Redis) -> None:
    """A traced handler raising an exception whose __str__ raises: dead-lettered as ever, its span ended
    with an "exception" event saying so, and the consumer goes on with the next message."""
    def handle(msg: Any) -> None:
        if msg.body == "bad":
            raise Unprintable()
    start(handle, tracing=True, retry_threshold=0)
    producer.publish("q", "bad")
    producer.publish("q", "good")
    wait_for(lambda: len([s for s in memory.get_finished_spans() if s.name == "process q"]) == 2, timeout_s=10)
    assert redis_client.llen(K.dead) == 1
    bad, good = sorted((s for s in memory.get_finished_spans() if s.name == "process q"),
                       key=lambda s: s.start_time)
    assert bad.attributes["smqsup.outcome"] == "dead_lettered" and good.attributes["smqsup.outcome"] == "acked"
    assert bad.events[0].attributes["exception.message"] == "(its text could not be read)"


@pytest.mark.both_clients
def test_a_traced_producer_refuses_headers_that_are_not_a_mapping(new_producer: Callable[..., Producer], redis_url: str) -> None:
    """Tracing on, headers a str or a list of pairs: MessageError, as with tracing off; a depends_on
    that is not a list: MessageError as ever (the links read nothing of it)."""
    from smqsup.errors import MessageError
    with new_producer(redis_url, tracing=True) as p:
        for bad in ("x", [("a", 1)]):
            with pytest.raises(MessageError, match="headers must be a mapping"):
                p.publish("q", 1, bad)  # type: ignore[arg-type]
        with pytest.raises(MessageError):
            p.publish("q", 1, depends_on=5)  # type: ignore[arg-type]


def test_a_cancelled_message_ends_its_span_as_cancelled(memory: Any, start: Callable[..., Running],
                                                        producer: Producer) -> None:
    """A running task cancelled by Producer.cancel: its span ends "dead_lettered", reason "cancelled"."""
    started: list[str] = []

    async def waits(msg: Any) -> None:
        started.append(msg.id)
        await asyncio.sleep(30)
    run = start(waits, concurrency=2, tracing=True)
    mid = producer.publish("q", "x", result_ttl=60)
    wait_for(lambda: started, timeout_s=10)
    producer.cancel("q", mid)
    run.consumer.request_cancels()  # (what the supervisor's SIGUSR2 does: test_cancel.py sends it for real)
    wait_for(lambda: [s for s in memory.get_finished_spans() if s.name == "process q"], timeout_s=10)
    [span] = [s for s in memory.get_finished_spans() if s.name == "process q"]
    assert span.attributes["smqsup.outcome"] == "dead_lettered"
    assert span.events[-1].attributes["smqsup.reason"] == "cancelled"


_HOSTILE: dict[str, dict[str, Any]] = {
    "malformed": {"traceparent": "00-zz-yy-01"},
    "huge": {"traceparent": "00-" + "a" * 1_000_000},
    "not-text": {"traceparent": ["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]},
    "nested": {"traceparent": {"a": {"b": {"c": []}}}},
    "uppercase": {"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"},
    "zero-trace": {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
    "zero-span": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"},
    "version-ff": {"traceparent": "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    "newline": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n"},
    "huge-state": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                   "tracestate": "k=" + "v" * 1_000_000},
    "bad-state": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                  "tracestate": "k=v,\x1b[2J=\nforged,k=w"},
    "forged-links": {"smqsup-links": ["00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"] * 40},
    "valid": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"},
}


def test_hostile_traceparents_are_never_trusted_beyond_the_w3c_grammar(
        memory: Any, start: Callable[..., Running], producer: Producer) -> None:
    """traceparent headers malformed, 1 MB, a list, nested, uppercase, with an all-zero trace or span id,
    version ff, a trailing newline: each message is handled and its span starts a trace of its own; a
    1 MB tracestate, or one with a member out of the grammar, is dropped (the traceparent kept); a valid
    pair makes the span its child."""
    seen: list[Any] = []
    start(lambda msg: seen.append(msg.body), tracing=True)
    ids = {name: producer.publish("q", name, headers) for name, headers in _HOSTILE.items()}
    wait_for(lambda: len([s for s in memory.get_finished_spans() if s.name == "process q"]) == len(ids),
             timeout_s=20)
    spans = {s.attributes["messaging.message.id"]: s for s in memory.get_finished_spans() if s.name == "process q"}
    assert sorted(seen) == sorted(_HOSTILE)
    trusted = 0x0af7651916cd43dd8448eb211c80319c
    for name, mid in ids.items():
        span = spans[mid]
        assert span.attributes["smqsup.outcome"] == "acked", name
        if name in ("huge-state", "bad-state", "valid"):
            assert span.parent is not None and span.parent.trace_id == trusted and span.context.trace_id == trusted
            assert span.parent.span_id == 0xb7ad6b7169203331
            assert dict(span.parent.trace_state) == ({"k": "v"} if name == "valid" else {}), name
        else:
            assert span.parent is None and span.context.trace_id != trusted, name
        assert not span.links, name  # (links only for a dependency's child, and within bounds)


def test_links_read_only_what_the_grammar_allows() -> None:
    """A child's links header: more than 32 entries, not a list: none; entries not of the W3C grammar
    (text, numbers, uppercase, nested) are left out, the others kept."""
    from smqsup import tracing
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert tracing.links({"smqsup-links": [good] * 33}) is None
    assert tracing.links({"smqsup-links": good}) is None
    kept = tracing.links({"smqsup-links": [good, "x", 5, good.upper(), [good], {"a": good}]})
    assert kept is not None and [link.context.span_id for link in kept] == [0xb7ad6b7169203331]


def test_the_async_producer_sends_its_span_and_traceparent(memory: Any, start: Callable[..., Running],
                                                           redis_url: str) -> None:
    """AsyncProducer(tracing=True): a PRODUCER span per call (publish_many: one, with the message count),
    the parent of each message's CONSUMER span; the task's current span is the send's parent."""
    from opentelemetry import trace
    start(lambda msg: None, tracing=True)

    async def main() -> None:
        with trace.get_tracer("tests").start_as_current_span("outer"):
            async with AsyncProducer(redis_url, tracing=True) as p:
                await p.publish("q", 1)
                await p.publish_many("q", [2, 3])
    asyncio.run(main())
    wait_for(lambda: len([s for s in memory.get_finished_spans() if s.name == "process q"]) == 3, timeout_s=10)
    spans = memory.get_finished_spans()
    [outer] = [s for s in spans if s.name == "outer"]
    sends = [s for s in spans if s.name == "send q"]
    assert len(sends) == 2 and all(s.parent.span_id == outer.context.span_id for s in sends)
    assert sends[1].attributes["messaging.batch.message_count"] == 2
    send_ids = {s.context.span_id for s in sends}
    assert all(s.parent.span_id in send_ids for s in spans if s.name == "process q")


def test_an_async_producers_held_child_keeps_its_trace_and_links(memory: Any, start: Callable[..., Running],
                                                                  redis_url: str) -> None:
    """AsyncProducer(tracing=True), a grouped child with depends_on (the Producer's code on a thread): its
    process span, after the hold, is the child of its own send span and links to its parent's send span."""
    start(lambda msg: None, tracing=True)

    async def main() -> tuple[str, str]:
        async with AsyncProducer(redis_url, tracing=True) as p:
            parent = await p.publish("q", 1, result_ttl=60)
            return parent, await p.publish("q", 2, group="g", depends_on=[("q", parent)])
    parent, child = asyncio.run(main())
    wait_for(lambda: len([s for s in memory.get_finished_spans() if s.name == "process q"]) == 2, timeout_s=10)
    spans = memory.get_finished_spans()
    sends = {s.attributes["messaging.message.id"]: s for s in spans if s.name == "send q"}
    [processed] = [s for s in spans if s.name == "process q" and s.attributes["messaging.message.id"] == child]
    assert processed.parent.span_id == sends[child].context.span_id
    assert [link.context.span_id for link in processed.links] == [sends[parent].context.span_id]


@pytest.mark.both_clients
def test_a_batchs_members_are_sent_in_spans_too(new_producer: Callable[..., Producer], memory: Any, start: Callable[..., Running],
                                                 redis_url: str) -> None:
    """Batch.publish and publish_many with tracing on: a send span each, the parent of the members'
    process spans."""
    start(lambda msg: None, tracing=True)
    with new_producer(redis_url, tracing=True) as p:
        with p.batch(on_complete=("q", "all done")) as batch:
            batch.publish("q", 1)
            batch.publish_many("q", [2, 3])
    wait_for(lambda: len([s for s in memory.get_finished_spans() if s.name == "process q"]) == 4, timeout_s=10)
    spans = memory.get_finished_spans()
    sends = {s.context.span_id for s in spans if s.name == "send q"}
    members = [s for s in spans if s.name == "process q" and s.parent is not None]
    assert len(sends) == 2 and len(members) == 3 and all(s.parent.span_id in sends for s in members)


@pytest.mark.both_clients
def test_a_failed_publish_ends_its_span_as_an_error(new_producer: Callable[..., Producer], memory: Any) -> None:
    """No Redis to reach: the send span ends with the error recorded."""
    with new_producer("redis://127.0.0.1:1/0", tracing=True) as p, pytest.raises(PublishNotSent):
        p.publish("q", 1)
    [send] = [s for s in memory.get_finished_spans() if s.name == "send q"]
    assert send.status.status_code.name == "ERROR" and send.events[0].name == "exception"


def test_tracing_without_opentelemetry_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tracing: true where OpenTelemetry is not installed, or tracing: "yes": one line naming the key;
    Producer(tracing=True) there: ConfigError saying what to install."""
    path = tmp_path / "queues.yaml"
    path.write_text("queues:\n  q: {handler: 'tests.support.handlers:record', tracing: yes-please}\n")
    with pytest.raises(ConfigError, match=r"queues\.q\.tracing: expected true or false"):
        load(path)
    monkeypatch.setattr("smqsup.config.scalars.otel_installed", lambda: False)
    path.write_text("defaults: {tracing: true}\nqueues:\n  q: {handler: 'tests.support.handlers:record'}\n")
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert str(raised.value) == (f"{path}: defaults.tracing: tracing needs OpenTelemetry: "
                                 "pip install 'smqsup[otel]', got True")
    with pytest.raises(ConfigError, match=r"pip install 'smqsup\[otel\]'"):
        Producer("redis://127.0.0.1:1/0", tracing=True)


@pytest.mark.parametrize("tracing", ["no", 1, None, [True]])
def test_a_producer_tracing_that_is_not_a_bool_is_refused(tracing: Any) -> None:
    """Producer(tracing="no") must not switch tracing on: anything but True or False is a ConfigError."""
    with pytest.raises(ConfigError, match=r"^tracing: expected True or False, got "):
        Producer("redis://127.0.0.1:1/0", tracing=tracing)


@pytest.mark.parametrize("value", ["null", "1", "'on'", "[true]", "{a: 1}"])
def test_a_bad_tracing_key_is_one_line(tmp_path: Path, value: str) -> None:
    """tracing: null, 1, 'on', a list, a mapping (per queue and under defaults): one line naming the key."""
    path = tmp_path / "queues.yaml"
    for text, key in ((f"queues:\n  q: {{handler: 'tests.support.handlers:record', tracing: {value}}}\n", "queues.q.tracing"),
                      (f"defaults: {{tracing: {value}}}\nqueues:\n  q: {{handler: 'tests.support.handlers:record'}}\n",
                       "defaults.tracing")):
        path.write_text(text)
        with pytest.raises(ConfigError) as bad:
            load(path)
        assert str(bad.value).startswith(f"{path}: {key}: ") and "\n" not in str(bad.value)


def test_without_tracing_smqsup_tracing_is_never_imported() -> None:
    """A producer and a consumer without tracing, in a fresh process: smqsup.tracing (and through it
    OpenTelemetry's trace API) is not loaded. (redis-py 8 imports OpenTelemetry's metrics by itself
    where they are installed: not ours to count.)"""
    code = ("import sys\nfrom smqsup import Producer\nfrom smqsup.worker.consumer import Consumer\n"
            "Producer('redis://127.0.0.1:1/0')\n"
            "print(sorted(m for m in sys.modules if m.startswith('smqsup.tracing')))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=procs.REPO, env=procs.env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr
