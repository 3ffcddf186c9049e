"""No message stalls a queue: hostile bodies are refused at publish, hostile
frames already in Redis end as dead letters, and poison that kills its
consumer costs attempts, never a crash-loop backoff."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from smqsup import deadletter, framing, message
from smqsup.client.producer import Producer
from smqsup.errors import MessageError
from smqsup.keys import QueueKeys
from tests.support import procs
from tests.support.handlers import read_events
from tests.support.helpers import wait_for

pytestmark = pytest.mark.topologies

Q = QueueKeys("smq", "q")


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("body, problem", [
    (_nested(990), "nested deeper than 100"),
    (float("nan"), "not JSON-serialisable"),
    ({"x": float("inf")}, "not JSON-serialisable"),
    ("\udcff lone surrogate", "lone surrogate"),
    ({"\ud800": 1}, "lone surrogate"),
])
def test_publish_refuses_what_a_consumer_could_not_decode(redis_url: str, redis_client: "redis.Redis",
                                                          body: Any, problem: str) -> None:
    """Deep nesting, NaN/Infinity and lone surrogates raise MessageError and queue nothing."""
    with Producer(redis_url) as producer:
        with pytest.raises(MessageError, match=problem):
            producer.publish("q", body)
        with pytest.raises(MessageError, match=problem):
            producer.publish_many("q", [1, body])
        with pytest.raises(MessageError, match="lone surrogate"):
            producer.publish("q", 1, headers={"h": "\udcff"})
        for bad_id in ("x\nforged", "", "a" * 129, 5, None.__class__, "id\udcff"):
            with pytest.raises(MessageError, match="message_id"):
                producer.publish("q", 1, message_id=bad_id)  # type: ignore[arg-type]
    assert redis_client.llen(Q.pending) == 0


def test_publish_accepts_nesting_up_to_the_limit(redis_url: str) -> None:
    """A body exactly 100 levels deep, and brackets inside strings, are fine."""
    with Producer(redis_url) as producer:
        producer.publish("q", _nested(99))
        producer.publish("q", {"text": "[" * 5000})


def test_a_single_publish_writes_the_envelope_publish_many_would_and_keeps_bounded_writers(
        redis_url: str, redis_client: "redis.Redis") -> None:
    """A single publish without headers (its envelope's fixed parts kept per queue) writes the bytes
    encode_payload writes, with its own created_at, still refuses an over-size body after a good one,
    and a producer publishing to ever new queue names keeps at most 1,024 such writers."""
    with Producer(redis_url, max_message_size=200) as producer:
        producer.publish("q", {"x": [1, "é"]})
        producer.publish("q", None)
        with pytest.raises(MessageError, match="exceeds the limit of 200 bytes"):
            producer.publish("q", "y" * 300)
        first, second = reversed(redis_client.lrange(Q.pending, 0, -1))
        for frame, body in ((first, {"x": [1, "é"]}), (second, None)):
            msg = message.decode(frame)
            _, payload = message.encode_payload("q", body, message_id=msg.id, created_at=msg.created_at,
                                                max_size_bytes=200)
            assert frame == framing.frame(payload)
        assert message.decode(second).created_at >= message.decode(first).created_at
        for n in range(1_100):
            producer.publish(f"q{n}", n)
        assert len(producer._writers) <= 1_024


#: Frames an attacker (or a bug) can LPUSH straight into a pending list.
HOSTILE_FRAMES = [
    b"0|" + b"[" * 990 + b"1" + b"]" * 990,  # decodes at the top of a stack, not in a consumer
    b"0|" + b"[" * 50_000 + b"]" * 50_000,
    b'0|{"id":"nan","queue":"q","body":NaN,"created_at":1,"headers":{}}',
    b'0|{"id":"inf","queue":"q","body":[Infinity],"created_at":1,"headers":{}}',
    b'0|{"id":"sur","queue":"q","body":"\\udcff","created_at":1,"headers":{}}',  # valid JSON: delivered
    b'0|{"id":"big","queue":"q","body":1' + b"0" * 5000 + b',"created_at":1,"headers":{}}',
    b'0|{"id":"hdr","queue":"q","body":1,"created_at":1,"headers":[1]}',
    b'0|{"id":"t","queue":"q","body":1,"created_at":"soon","headers":{}}',
    b"0|\xff\xfe\xfd",
    b'0|\xef\xbb\xbf{"id":"bom","queue":"q","body":1,"created_at":1,"headers":{}}',  # a UTF-8 BOM first
    b"0|",
    b"|x",
    b"-1|{}",
    b"9999999999|{}",
    b"\x00\x01\x02",
    b"",
    b"0|" + b'{"a":' * 3000,
    b"0|[]",
    b"0|null",
    b'0:0:0:0:0|{"id":"v0","queue":"q","body":1,"created_at":1,"headers":{}}',  # events_max 0 is no head
    b'0:0:0:1:12345678|{"id":"v8","queue":"q","body":1,"created_at":1,"headers":{}}',  # 8 digits: too long
    b'0:0:0:0:1:8|{"id":"v6","queue":"q","body":1,"created_at":1,"headers":{}}',  # a link field past 7
    b'0:0:0:0:1:1:1|{"id":"v7","queue":"q","body":1,"created_at":1,"headers":{}}',  # seven fields
]


@pytest.mark.parametrize("prefetch", [1, 32])
def test_hostile_frames_become_dead_letters_while_good_messages_flow(
        prefetch: int, supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, out_dir: Path,
        redis_url: str, redis_client: "redis.Redis") -> None:
    """Every undecodable frame is a "malformed" dead letter, taken one by one or 32 to a take; the queue
    never stalls or goes FATAL."""
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 2, "retry_threshold": 1,
                           "prefetch": prefetch}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as producer:
        good = producer.publish_many("q", range(50))
        for frame in HOSTILE_FRAMES:
            redis_client.lpush(Q.pending, frame)
        good += producer.publish_many("q", range(50, 100))
    delivered = {b"sur"}
    wait_for(lambda: {e["id"] for e in read_events(str(out_dir))} >= set(good) | {"sur"}, 30,
             message="good messages not all handled behind the hostile frames")
    wait_for(lambda: redis_client.llen(Q.dead) == len(HOSTILE_FRAMES) - len(delivered), 30,
             message="hostile frames not all dead-lettered")
    reasons = Counter(deadletter.DeadLetter(e).reason for e in redis_client.lrange(Q.dead, 0, -1))
    assert reasons == {"malformed": len(HOSTILE_FRAMES) - len(delivered)}
    assert sup.proc.poll() is None and len(sup.children()) == 2
    assert "FATAL" not in sup.log() and "Traceback" not in sup.log()


@pytest.mark.parametrize("prefetch", [1, 32])
def test_random_frames_fuzz_never_stops_the_queue(
        prefetch: int, supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, out_dir: Path,
        redis_url: str, redis_client: "redis.Redis") -> None:
    """Hundreds of random and mutated frames mixed with good messages (taken one by one, or 32 to a
    take): every good one handled, every frame accounted for (handled or dead-lettered), the
    supervisor up, no traceback."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    sup = supervise({"q": {"handler": "tests.support.handlers:record", "consumers": 3, "retry_threshold": 0,
                           "prefetch": prefetch}}, notify)
    notify.wait("READY=1")
    good: list[str] = []
    hostile = 0
    with Producer(redis_url) as producer:
        for _ in range(20):
            good += producer.publish_many("q", [{"n": rng.random()} for _ in range(10)])
            frames = [_random_frame(rng) for _ in range(20)]
            redis_client.lpush(Q.pending, *frames)
            hostile += len(frames)

    def settled() -> bool:
        handled = {e["id"] for e in read_events(str(out_dir))}
        busy = redis_client.llen(Q.pending) + sum(redis_client.llen(Q.processing(c.decode()))
                                                  for c in redis_client.hkeys(Q.consumers))
        return set(good) <= handled and busy == 0

    wait_for(settled, 60, message=f"queue did not settle (seed {seed})")
    handled_events = len(read_events(str(out_dir)))
    # Good messages handled once each (no kill happened); every other frame
    # was handled (a random frame can be a valid message) or dead-lettered.
    assert handled_events + redis_client.llen(Q.dead) == len(good) + hostile, f"seed {seed}"
    assert sup.proc.poll() is None and len(sup.children()) == 3, f"seed {seed}"
    assert "Traceback" not in sup.log(), f"seed {seed}"


def _random_frame(rng: random.Random) -> bytes:
    """A random frame: garbage, a mutated good frame, or a good frame made deep."""
    _, payload = message.encode_payload("q", {"n": rng.random()}, max_size_bytes=1 << 20)
    good = framing.frame(payload, rng.choice([0, 1, 999999999]))
    roll = rng.random()
    if roll < 0.25:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
    if roll < 0.5:
        data = bytearray(good)
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if roll < 0.75:
        depth = rng.choice([200, 990, 5000, 100_000])
        return b"0|" + b"[" * depth + b"]" * depth
    token = rng.choice([b"NaN", b"-Infinity", b"1e999", b'"\\udc80"', b"9" * 5000, b"{}", b"[]", b"null"])
    return good.replace(b"}", b',"x":' + token + b"}", 1)


def test_a_forged_attempts_prefix_stays_a_frame_with_its_id(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket,
        redis_client: "redis.Redis") -> None:
    """A frame claiming 999999999 failed attempts is dead-lettered with its id, not as malformed."""
    supervise({"q": {"handler": "tests.support.handlers:fail", "consumers": 1, "retry_threshold": 3}}, notify)
    notify.wait("READY=1")
    mid, payload = message.encode_payload("q", "forged", max_size_bytes=1 << 20)
    redis_client.lpush(Q.pending, framing.frame(payload, 999999999))
    wait_for(lambda: redis_client.llen(Q.dead) == 1, 15)
    dead = deadletter.DeadLetter(redis_client.lindex(Q.dead, 0))
    msg = dead.message()
    assert msg is not None and msg.id == mid and msg.attempts == 999999999
    assert dead.reason.startswith("ValueError: boom")


def test_poison_that_ends_its_process_costs_attempts_and_never_a_backoff(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, out_dir: Path,
        redis_url: str, redis_client: "redis.Redis") -> None:
    """Messages that os._exit their consumer (even before it was seen ready) are dead-lettered
    after retry_threshold + 1 deliveries; no consumer is counted as dying at start."""
    sup = supervise({"q": {"handler": "tests.support.handlers:chaos", "consumers": 4, "retry_threshold": 2}}, notify)
    notify.wait("READY=1")
    bodies = [{"n": n, "kind": "exit" if n % 10 == 0 else None} for n in range(200)]
    with Producer(redis_url) as producer:
        ids = producer.publish_many("q", bodies)
    poison = {mid for mid, b in zip(ids, bodies) if b["kind"]}
    wait_for(lambda: redis_client.llen(Q.dead) == len(poison), 60, message="poison not all dead-lettered")
    wait_for(lambda: {e["id"] for e in read_events(str(out_dir)) if e["event"] == "done"} == set(ids) - poison,
             30, message="good messages not all handled")
    events = read_events(str(out_dir))
    deliveries = Counter(e["id"] for e in events if e["event"] == "attempt")
    assert set(deliveries) == poison and set(deliveries.values()) == {3}
    reasons = {deadletter.DeadLetter(e).reason for e in redis_client.lrange(Q.dead, 0, -1)}
    assert reasons == {"exited with status 139"}
    assert "died at start" not in sup.log() and "FATAL" not in sup.log()


def test_a_handler_exception_cannot_forge_or_flood_log_lines(
        supervise: Callable[..., procs.Supervisor], notify: procs.NotifySocket, redis_url: str,
        redis_client: "redis.Redis") -> None:
    """Newlines and terminal escapes in exception texts are escaped; a 1 MiB text makes a bounded line."""
    sup = supervise({"q": {"handler": "tests.support.handlers:fail", "consumers": 1, "retry_threshold": 0}}, notify)
    notify.wait("READY=1")
    with Producer(redis_url) as producer:
        producer.publish("q", "x\n2026-01-01 00:00:00,000 CRITICAL [1] smqsup: forged\x1b[2J")
        producer.publish("q", "y" * (1 << 19))
    wait_for(lambda: redis_client.llen(Q.dead) == 2, 15)
    lines = sup.log().splitlines()
    assert not any(line.startswith("2026-01-01 00:00:00,000 CRITICAL") for line in lines)
    assert not any("\x1b" in line for line in lines)
    assert max(len(line) for line in lines) < 10_000
    assert any("\\n2026-01-01" in line for line in lines)
    # The dead letter keeps the text (cut to a bounded size), as valid JSON metadata.
    for entry in redis_client.lrange(Q.dead, 0, -1):
        meta = json.loads(entry.split(b"\n", 1)[0])
        assert len(meta["error"]) <= 4000
