"""One message listing (``browse.listing``, ``deadletters.newest``) reads a
bounded number of bytes from Redis whatever it holds, and still lists every
row: large frames from their heads (``cut``), hostile ones without raising."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
import redis

from smqsup import defaults
from smqsup.deadletter import DeadLetter
from smqsup.framing import peek_id
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.broker import Broker
from smqsup.views import browse, deadletters
from tests.support.helpers import node_of

pytestmark = pytest.mark.topologies

K = QueueKeys("smq", "q")
#: What one listing may read: its heads and its whole frames, and room for the
#: replies' framing (some 40 bytes an element) and the INFO replies measuring it.
BOUND = defaults.LISTING_HEADS_BYTES + defaults.LISTING_WHOLE_BYTES + 256 * 1024
#: Body bytes of each of the 1000 frames: 1 MiB on one server, less on a
#: cluster (each master's replica copies them too), still far past BOUND.
BODY_BYTES = {"single": 1 << 20, "cluster": 64 << 10}
META = b'{"at_ms":1000,"reason":"boom","error_type":"ValueError"}\n'

# Writes ``count`` frames m<start>..m<start+count-1> of ``n`` body bytes each
# into KEYS[1] server-side (a gigabyte need not cross the socket to be read).
_FILL = """
local push, count, n, meta, start = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local body = string.rep('x', n)
for i = start, start + count - 1 do
  local frame = meta .. string.format('0|{"id":"m%05d","queue":"q","body":"', i) .. body
    .. '","created_at":1,"headers":{}}'
  if push == 'ZADD' then redis.call('ZADD', KEYS[1], i, frame) else redis.call(push, KEYS[1], frame) end
end
"""


def fill(client: Any, key: str, push: str, count: int, body_bytes: int, *, meta: bytes = b"",
         start: int = 0) -> list[tuple[str, int]]:
    """Write frames m<start>... of ``body_bytes`` each into ``key`` (by LPUSH,
    RPUSH or ZADD with score i); (id, size) of each, in the order written."""
    for first in range(start, start + count, 100):  # (a call a hundred frames: well within a socket timeout)
        client.eval(_FILL, 1, key, push, min(100, start + count - first), body_bytes, meta, first)
    size = len(meta) + len(b'0|{"id":"m00000","queue":"q","body":"","created_at":1,"headers":{}}') + body_bytes
    return [(f"m{i:05d}", size) for i in range(start, start + count)]


def sent(client: Any, key: str) -> int:
    """Bytes the server holding ``key`` has sent its clients so far, once
    its replicas have all it wrote (INFO counts what it sends them too)."""
    node = node_of(client, key)
    replicas = int(node.info("replication")["connected_slaves"])
    if replicas:
        assert node.execute_command("WAIT", replicas, 60_000) == replicas
    return int(node.info("stats")["total_net_output_bytes"])


def strict(rows: list[dict[str, Any]]) -> None:
    """Each row encodes as strict JSON."""
    for r in rows:
        json.dumps(r, allow_nan=False)


def seed(client: Any, state: str, body_bytes: int) -> list[tuple[str, int]]:
    """1000 frames of ``body_bytes`` in ``state``; (id, size) in listing order
    (processing: 600 held by c1, 600 by c2, of which a listing of 1000 shows 400)."""
    client.sadd("smq:queues", "q")
    if state == "pending":
        return fill(client, K.pending, "LPUSH", 1000, body_bytes)  # m00000 at the consuming end
    if state == "scheduled":
        return fill(client, K.scheduled, "ZADD", 1000, body_bytes)
    if state == "dead":
        return fill(client, K.dead, "RPUSH", 1000, body_bytes, meta=META)
    client.hset(K.consumers, mapping={"c1": b"{}", "c2": b"{}"})
    held = fill(client, K.processing("c1"), "RPUSH", 600, body_bytes)
    return held + fill(client, K.processing("c2"), "RPUSH", 600, body_bytes, start=600)[:400]


@pytest.mark.parametrize("state", ["pending", "scheduled", "processing", "dead"])
def test_a_listing_of_1000_large_frames_reads_under_the_bound_and_lists_each_with_its_id_and_size(
        redis_url: str, redis_client: redis.Redis, topology: str, state: str) -> None:
    """limit=1000 over 1000 frames of 1 MiB (64 KiB on a cluster): under 8.25 MiB read, every row, id and real size."""
    if topology == "single":
        redis_client.config_set("appendonly", "no")  # a gigabyte need not reach the disk
    expected = seed(redis_client, state, BODY_BYTES[topology])
    broker = Broker(redis_url)
    try:
        broker.queues.partition_names("q")  # (read once, so the measure holds the listing alone)
        before = sent(redis_client, K.pending)
        rows = browse.listing(broker, "q", state, 1000)
        read = sent(redis_client, K.pending) - before
    finally:
        broker.close()
    assert read < BOUND, f"{state}: {read} bytes read"
    assert [(r["id"], r["size"]) for r in rows] == expected
    assert all(r["attempts"] == 0 and not r["malformed"] for r in rows)
    assert all(r["priority"] == (None if state == "dead" else 0) for r in rows)
    assert all(r["preview"].startswith("xxxx") for r in rows)
    assert any(r["cut"] for r in rows) and not rows[0]["cut"]  # whole while the budget lasts, then heads
    strict(rows)


def test_the_dead_letter_rows_of_the_api_and_dlq_list_are_bounded_too(
        redis_url: str, redis_client: redis.Redis, topology: str) -> None:
    """deadletters.newest + row over 1000 large entries: under the bound, each with its id, reason, time, body head."""
    if topology == "single":
        redis_client.config_set("appendonly", "no")
    expected = seed(redis_client, "dead", BODY_BYTES[topology])
    broker = Broker(redis_url)
    try:
        broker.queues.partition_names("q")
        before = sent(redis_client, K.dead)
        rows = [deadletters.row(entry) for entry in deadletters.newest(broker, "q", 1000)]
        read = sent(redis_client, K.dead) - before
    finally:
        broker.close()
    assert read < BOUND, f"{read} bytes read"
    assert [r["id"] for r in rows] == [mid for mid, _ in expected]
    assert all((r["reason"], r["dead_at"], r["error_type"], r["attempts"]) == ("boom", 1.0, "ValueError", 0)
               for r in rows)
    cut = [r for r in rows if r["cut"]]
    assert cut and all(r["truncated"] and r["body"].startswith("xxxx") and not r["malformed"] for r in cut)
    strict(rows)


def frame(mid: str, body: bytes, head: bytes = b"0") -> bytes:
    """A frame as a producer writes it, of a string body's JSON text ``body``."""
    return head + b'|{"id":"' + mid.encode() + b'","queue":"q","body":"' + body + b'","created_at":1,"headers":{}}'


BIG = 5 << 20  # past LISTING_WHOLE_BYTES: never read whole


HOSTILE = [
    b"",
    b"garbage",
    b"g" * BIG,  # not a frame
    b"\xff\xfe" * (BIG // 2),  # not UTF-8
    frame("i" * BIG, b"x"),  # an id far longer than an id may be
    b"9" * BIG + b"|{}",  # a head of five million digits
    frame("q5", b"\\u00e9\\\"" + b"\xc3\xa9" * BIG),  # a string body of escapes and two-byte characters
    frame("q7", b"y" * BIG, head=b"0:7:0"),  # a priority in the head
]


def test_hostile_elements_are_listed_from_their_heads_by_the_reference_remove_takes(
        redis_url: str, redis_client: redis.Redis) -> None:
    """0 bytes, junk, undecodable bytes, a huge id or head, large frames: each row there, its ref and size right."""
    redis_client.rpush(K.pending, *HOSTILE)
    redis_client.sadd("smq:queues", "q")
    broker = Broker(redis_url)
    try:
        before = sent(redis_client, K.pending)
        rows = browse.listing(broker, "q", "pending", 1000)
        assert sent(redis_client, K.pending) - before < BOUND
        strict(rows)
        by_id = {r["id"]: r for r in rows}
        assert [(r["id"], r["size"]) for r in rows] == [(browse.ref(f), len(f)) for f in reversed(HOSTILE)]
        assert [r["cut"] for r in rows] == [len(f) > 1 << 20 for f in reversed(HOSTILE)]
        assert by_id["q7"]["priority"] == 7 and by_id["q7"]["preview"].startswith("yyyy")
        assert by_id["q5"]["preview"].startswith('é"éé') and not by_id["q5"]["malformed"]
        assert by_id[browse.ref(HOSTILE[3])]["malformed"] and by_id[browse.ref(HOSTILE[5])]["malformed"]
        undecodable, huge_id = browse.ref(HOSTILE[3]), browse.ref(HOSTILE[4])
        assert huge_id.startswith("raw-") and by_id[huge_id]["attempts"] == 0
        assert browse.remove(broker, "q", [undecodable, huge_id]) == {undecodable: True, huge_id: True}
        assert redis_client.llen(K.pending) == len(HOSTILE) - 2
    finally:
        broker.close()


def test_large_frames_in_the_priority_set_and_the_schedules_keep_their_order(
        redis_url: str, redis_client: redis.Redis) -> None:
    """Cut frames still merge by priority (pending) and by due time (scheduled, retries marked)."""
    redis_client.rpush(K.pending, frame("p0", b"a" * BIG))
    redis_client.zadd(K.priority, {frame("p9", b"b" * BIG, head=b"0:9:0"): 0})
    redis_client.zadd(K.scheduled, {frame("later", b"c" * BIG): 2_000_000_000_000, b"\xff" * BIG: float("inf")})
    redis_client.zadd(K.delayed, {frame("retry", b"d" * BIG, head=b"2"): 1_900_000_000_000})
    broker = Broker(redis_url)
    try:
        pending = browse.listing(broker, "q", "pending", 10)
        scheduled = browse.listing(broker, "q", "scheduled", 10)
    finally:
        broker.close()
    assert [(r["id"], r["where"], r["priority"], r["cut"]) for r in pending] == [
        ("p9", "priority", 9, True), ("p0", "pending", 0, True)]
    assert [(r["id"], r["due_at"], r["retry"], r["attempts"]) for r in scheduled[:2]] == [
        ("retry", 1_900_000_000, True, 2), ("later", 2_000_000_000, False, 0)]
    assert scheduled[2]["malformed"] and scheduled[2]["due_at"] is None and scheduled[2]["size"] == BIG


DEAD = [
    META + frame("d1", b"x" * BIG),  # a large message
    b'{"at_ms":5000,"reason":"' + b"r" * BIG + b'"}\n' + frame("d2", b"x"),  # metadata longer than a head
    META + b"\xff" * BIG,  # a frame that is no frame
    b"\xff" * BIG,  # no metadata at all
    META + frame("i" * BIG, b"x"),  # an id far longer than an id may be
    b"",
]
#: Their references: the message id, or ``raw-`` and a hash of the bytes (also for the id no
#: head can hold, which DeadLetter.ref of the whole entry would give).
DEAD_REFS = ["d1", "d2", DeadLetter(DEAD[2]).ref, DeadLetter(DEAD[3]).ref,
             "raw-" + hashlib.sha1(DEAD[4]).hexdigest()[:16], DeadLetter(b"").ref]


def test_hostile_dead_letters_are_listed_by_the_reference_purge_takes(
        redis_url: str, redis_client: redis.Redis) -> None:
    """Large or junk dead letters: each row there with the reference requeue and purge take, the reason it holds."""
    redis_client.rpush(K.dead, *DEAD)
    broker = Broker(redis_url)
    try:
        before = sent(redis_client, K.dead)
        rows = [deadletters.row(entry) for entry in deadletters.newest(broker, "q", 1000)]
        assert sent(redis_client, K.dead) - before < BOUND
        strict(rows)
        assert [r["id"] for r in rows] == DEAD_REFS
        assert [r["cut"] for r in rows] == [True] * 5 + [False]
        assert rows[0]["reason"] == "boom" and rows[0]["body"].startswith("xxxx") and rows[0]["attempts"] == 0
        assert rows[1]["reason"].startswith("rrrr") and rows[1]["dead_at"] == 5.0 and rows[1]["id"] == "d2"
        assert rows[2]["malformed"] and rows[3]["malformed"] and rows[3]["reason"] == "unknown"
        listed = browse.listing(broker, "q", "dead", 1000)
        assert [(r["id"], r["size"]) for r in listed] == [(ref, len(raw)) for ref, raw in zip(DEAD_REFS, DEAD)]
        assert deadletters.purge(broker, "q", [r["id"] for r in rows[2:5]]) == 3
        assert redis_client.llen(K.dead) == 3
    finally:
        broker.close()


@pytest.mark.parametrize("state", browse.STATES)
def test_a_key_of_the_wrong_type_lists_nothing_of_it_and_the_rest(redis_url: str, redis_client: redis.Redis,
                                                                   state: str) -> None:
    """A string where a list or set should be: that structure lists nothing, the others list, nothing raises."""
    redis_client.zadd(K.priority, {frame("p", b"x", head=b"0:5:0"): 0})
    redis_client.zadd(K.delayed, {frame("r", b"x", head=b"1"): 1})
    redis_client.hset(K.consumers, mapping={"c1": b"{}", "c2": b"{}"})
    redis_client.rpush(K.processing("c2"), frame("h", b"x"))
    for key in (K.pending, K.scheduled, K.processing("c1"), K.dead):
        redis_client.set(key, b"not a list")
    broker = Broker(redis_url)
    try:
        rows = browse.listing(broker, "q", state, 100)
    finally:
        broker.close()
    assert [r["id"] for r in rows] == {"pending": ["p"], "scheduled": ["r"], "processing": ["h"], "dead": []}[state]


HEADS = [b'1|{"id":"a"', b'123456789|{"id":"a"', b'1234567890|{"id":"a"', b'0:7:0|{"id":"a"', b'0:77:0|{"id":"a"',
         b'0:7:' + b"1" * 15 + b'|{"id":"a"', b'0:7:' + b"1" * 16 + b'|{"id":"a"', b'0:7|{"id":"a"',
         b'1|{"id":"' + b"i" * 128 + b'"', b'1|{"id":"' + b"i" * 129 + b'"', b'1|{"id":""', b'1|{"id":"a b"',
         b'1|{"id":"a-b.c:d_E9"', b'1|{"id":"a', b' 1|{"id":"a"', b'1|{ "id":"a"', b'|{"id":"a"', b'1{"id":"a"',
         b'\xff1|{"id":"a"', b'1|{"id":"\xc3\xa9"', b'0:0:0:60|{"id":"a"', b'0:0:0:0:100|{"id":"a"',
         b'0:0:0:123456789|{"id":"a"', b'0:0:0:1:12345678|{"id":"a"', b'0:0:0:1:1:1|{"id":"a"', b'0:0:0:|{"id":"a"',
         b'0:0:0:1:1234567|{"id":"a"']


def test_the_script_sends_a_digest_exactly_when_the_head_holds_no_id_message_py_reads(
        redis_url: str, redis_client: redis.Redis) -> None:
    """peek_range.lua's id grammar is peek_id's: a cut element without an id gets the digest remove and purge use."""
    elements = [head + b"," + b"x" * 400 for head in HEADS]
    redis_client.rpush(K.pending, *elements)
    call = scripts.peek_range(K.pending, "list", 0, 1, 100, scripts.ReadBudget(256, 0))
    found, whole, seen = call.run(redis_client)
    assert (found, whole, len(seen)) == ("list", 0, len(HEADS)) and all(s.cut for s in seen)
    assert [s.digest is None for s in seen] == [peek_id(e) is not None for e in elements]
    assert [deadletters.cut_ref(s.data, s) for s in seen] == [browse.ref(e) for e in elements]
