"""Frame heads (framing.py): each form read as the grammar says, the fast
paths (plain, grouped, no expiry) agreeing with it, and bytes that are no
frame refused; pure logic, no Redis."""

from __future__ import annotations

import pytest

from smqsup import framing, message
from smqsup.errors import MalformedMessage


@pytest.mark.parametrize(("data", "want"), [
    (b"4|{}", (4, 0, None, b"{}", 0, 0, 0, None)),
    (b"3:2:0:0:0:0:6|{}tenant", (3, 2, None, b"{}", 0, 0, 0, "tenant")),
    (b"0:0:0:0:0:0:1|{}\xff", (0, 0, None, b"{}", 0, 0, 0, "\ufffd")),
    (b"1:0:5:0:0:0:1|{}g", (1, 0, 5, b"{}", 0, 0, 0, "g")),
    (b"0:9:0:60:0:0:1|{}g", (0, 9, None, b"{}", 60, 0, 0, "g")),
    (b"0:0:0:0:0:4:2|{}gg", (0, 0, None, b"{}", 0, 0, 4, "gg")),
    (b"0:0:7:30|{}", (0, 0, 7, b"{}", 30, 0, 0, None)),
], ids=["plain", "grouped", "odd-bytes group", "grouped with expiry", "grouped tracked", "grouped batch member",
        "tracked"])
def test_each_head_reads_as_the_grammar_says(data: bytes, want: tuple[object, ...]) -> None:
    """Plain, grouped (with a priority, odd bytes), grouped with other options and ungrouped options."""
    assert tuple(framing.frame_head(data)) == want


@pytest.mark.parametrize("data", [b"0:0:0:0:0:0:3|{}", b"0:0:0:0:0:0:300|" + b"x" * 400, b"0:0:0:0:0:0:0|{}",
                                  b"0:0:0:0:0:0:1", b"0:0:0:0:0:0:1:1|{}g", b"*tenant", b""],
                         ids=["group longer than frame", "group name too long", "group of 0 bytes", "no bar",
                              "one field too many", "a ticket", "empty"])
def test_bytes_that_are_no_frame_are_refused(data: bytes) -> None:
    """A group longer than the frame or than GROUP_NAME_MAX_BYTES, a head without its bar or with a field too
    many: MalformedMessage, never a wrong message."""
    with pytest.raises(MalformedMessage):
        framing.frame_head(data)


@pytest.mark.parametrize(("data", "want"), [
    (b"0|{}", False), (b"0:0:0|{}", False), (b"0:0:7|{}", True), (b"0:0:0:0:0:0:1|{}g", False),
    (b"0:0:9:0:0:0:1|{}g", True), (b"garbage", False), (b"0:0:0" + b"9" * 60 + b"|", False),
    (b"0:0:12:x|{}", False),
])
def test_has_expiry_agrees_with_the_whole_head(data: bytes, want: bool) -> None:
    """has_expiry's early answer (the expiry field is 0) is the one the whole head gives; bytes that are no
    frame have none."""
    assert framing.has_expiry(data) is want


_ENVELOPE = b'{"id":"m1","queue":"q","body":{"i":1},"created_at":1.5,"headers":{}}'


@pytest.mark.parametrize("data", [
    b"0:0:0:0:0:0:2|" + _ENVELOPE + b"g1",
    b"7:9:0:0:0:0:5|" + _ENVELOPE.replace(b'{"i":1}', '"\u00e9\u4e2d\U0001f600"'.encode()) + "t\u00e9\u4e2d".encode(),
    b"0:0:0:0:0:0:1|" + _ENVELOPE + b"\xff",
    b"0:0:0:0:0:0:2|" + _ENVELOPE + b"\xa9g",
    b"0:0:0:0:0:0:2|" + _ENVELOPE + b" g",
    b"0:0:0:0:0:0:2|" + b" " + _ENVELOPE + b"gg",
    b"0:0:0:0:0:0:4|" + _ENVELOPE + _ENVELOPE + b"gggg",
    b"0:0:0:0:0:0:2|" + _ENVELOPE[:-1] + b"gg",
    b"0:0:0:0:0:0:2|[1]gg",
    b"0:0:0:0:0:0:2|" + b'{"a":' * 5000 + b"gg",
    b"0:0:0:0:0:0:2|" + _ENVELOPE.replace(b"1.5", b"NaN") + b"gg",
    b"0:0:0:0:0:0:300|" + _ENVELOPE + b"g" * 300,
    b"0:0:0:0:0:0:999|" + _ENVELOPE,
    b"0:0:0:0:0:0:01|" + _ENVELOPE + b"g",
], ids=["plain group", "non-ASCII body and group", "undecodable group", "group starting mid-character",
        "space before the group", "space before the payload", "two objects", "cut object", "not an object",
        "nested 5000 deep", "NaN", "group name too long", "group longer than frame", "size with a leading 0"])
def test_the_grouped_fast_path_decodes_as_the_whole_head_does(data: bytes) -> None:
    """message.decode's reading of a group-only head (group_only_head, the envelope scanned in place) gives
    the Message, or the MalformedMessage, that frame_head and strict_loads give, for odd groups and payloads."""
    def slow() -> object:
        head = framing.frame_head(data)
        env = message.strict_loads(head.payload)
        if not isinstance(env, dict):
            raise MalformedMessage("payload is not a JSON object")
        return (head.attempts, head.priority, head.group, env)
    try:
        want: object = slow()
    except MalformedMessage:
        want = MalformedMessage
    try:
        got = message.decode(data)
        seen: object = (got.attempts, got.priority, got.group, {"id": got.id, "queue": got.queue, "body": got.body,
                                                                "created_at": got.created_at, "headers": got.headers})
    except MalformedMessage:
        seen = MalformedMessage
    assert seen == want
