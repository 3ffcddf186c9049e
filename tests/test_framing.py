"""Frame heads (framing.py): each form read as the grammar says, the fast
paths (plain, grouped, no expiry) agreeing with it, and bytes that are no
frame refused; pure logic, no Redis."""

from __future__ import annotations

import pytest

from smqsup import framing
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
