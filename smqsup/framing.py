"""A message's frame: what the Redis lists and sets hold, ``head + b"|" +
payload`` (the payload: smqsup.message). The head is what the scripts may
read and rewrite without touching the payload (DESIGN section 8); the
scripts' includes/attempts.lua reads the same grammar:

    A        attempts (1 to 9 digits): priority 0, no expiry. Every plain
             publish, and every frame written before priorities existed.
    A:P:E    attempts, priority (one digit, 0-9), expiry in ms since the
             epoch by the Redis clock (1 to 15 digits, 0: none). Written by
             publish_options.lua for a message with a priority or a ttl.
    A:P:E:R  the same, tracked: its state and outcome are kept until R
             seconds (1 to 8 digits) after it ended (store/ops/tracking.py).
    A:P:E:R:V  the same (R may be 0: not tracked), with events: each step
             of its life is added to its queue's event stream, which is
             capped at about V entries (1 to 7 digits; store/ops/events.py).
    A:P:E:R:V:L  the same (R and V may be 0), linked: L (1 to 7) says
             what the message has in its queue's deps set to see to when it
             starts or ends, the sum of LINK_PARENTS (1), LINK_HOLD (2) and
             LINK_BATCH (4) (scripts/includes/deps.lua).
    A:P:E:R:V:L:G  the same (L may be 0), grouped: the last G bytes (1 to
             3 digits, at most GROUP_NAME_MAX_BYTES) of the frame, after the
             payload, are the name of its group (UTF-8;
             scripts/includes/groups.lua).

Acks remove by value (LREM), so whoever fetched a frame keeps its exact bytes.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from smqsup.errors import MalformedMessage

#: The parts of a head's link field, L (summed): a dependency's child (its parents' outcomes), a dedup key
#: held until its message ends or starts, a batch's member.
LINK_PARENTS, LINK_HOLD, LINK_BATCH = 1, 2, 4

#: What ends a frame's head.
SEP = b"|"


def frame(payload: bytes, attempts: int = 0) -> bytes:
    """The bytes a queue list holds for ``payload`` after ``attempts`` failures."""
    return b"%d|%b" % (attempts, payload)


def new_frame(payload: bytes, result_ttl_s: int = 0, events_max: int = 0) -> bytes:
    """The frame of a new message without priority or expiry, tracked for
    ``result_ttl_s`` and with events capped at ``events_max`` (0: neither,
    the plain head): what includes/attempts.lua's head_for writes."""
    if events_max:
        return b"0:0:0:%d:%d|%b" % (result_ttl_s, events_max, payload)
    if result_ttl_s:
        return b"0:0:0:%d|%b" % (result_ttl_s, payload)
    return b"0|" + payload


#: A frame head: ``A``, ``A:P:E``, ``A:P:E:R``, ``A:P:E:R:V`` or
#: ``A:P:E:R:V:L`` (module docstring). The scripts' includes/attempts.lua
#: reads the same grammar.
_HEAD = re.compile(rb"([0-9]{1,9})(?::([0-9]):([0-9]{1,15})"
                   rb"(?::([1-9][0-9]{0,7})|:([0-9]{1,8}):([1-9][0-9]{0,6})"
                   rb"|:([0-9]{1,8}):([0-9]{1,7}):([1-7])"
                   rb"|:([0-9]{1,8}):([0-9]{1,7}):([0-7]):([1-9][0-9]{0,2}))?)?")
#: The head of a grouped frame with no other option but a priority
#: ("A:P:0:0:0:0:G", a subset of _HEAD), with its bar, at a frame's start:
#: read without _HEAD's alternatives (group_only_head).
_GROUP_ONLY = re.compile(rb"([0-9]{1,9}):([0-9]):0:0:0:0:([1-9][0-9]{0,2})\|")
#: The start of a head that says no expiry ("A:P:0" and more, or its end):
#: has_expiry's answer without reading the rest.
_NO_EXPIRY = re.compile(rb"[0-9]{1,9}:[0-9]:0[:|]")
#: Longest head: 9 + 1 + 1 + 1 + 15 + 1 + 8 + 1 + 7 + 1 + 1 + 1 + 3 bytes.
_HEAD_MAX = 50
#: The longest group name, in bytes (UTF-8); scripts/includes/attempts.lua's GROUP_NAME_MAX.
GROUP_NAME_MAX_BYTES = 256


class FrameHead(NamedTuple):
    """What a frame's head says, and its payload."""

    attempts: int
    priority: int
    expires_ms: Optional[int]  # ms since the epoch, Redis clock; None: never
    payload: bytes
    result_ttl_s: int = 0  # tracked for this long after it ends; 0: not tracked
    events_max: int = 0  # its lifecycle goes to its queue's event stream, capped at this; 0: no events
    linked: int = 0  # what it has in its queue's deps set: LINK_PARENTS | LINK_HOLD | LINK_BATCH; 0: nothing
    group: Optional[str] = None  # its group's name (undecodable bytes replaced); None: no group


def frame_head(data: bytes) -> FrameHead:
    """The head of a frame; MalformedMessage if the bytes are not a frame."""
    bar = data.find(SEP, 0, _HEAD_MAX + 1)
    head = data[:bar]
    if 0 < bar <= 9 and head.isdigit():  # "A|": the plain head, every message without options
        return FrameHead(int(head), 0, None, data[bar + 1:])
    grouped = group_only_head(data)
    if grouped is not None:  # the group and perhaps a priority: every grouped message without other options
        return _grouped(data[grouped[2]:], grouped[0], grouped[1], grouped[3])
    match = _HEAD.fullmatch(head) if bar >= 0 else None
    if match is None:
        raise MalformedMessage("not a smqsup frame (no '<attempts>|' prefix)")
    (attempts, priority, expires, result_ttl, kept_too, events_max, kept_l, events_l, linked,
     kept_g, events_g, linked_g, group_len) = match.groups()
    payload, group = data[len(head) + 1:], None
    if group_len is not None:
        grouped_head = _grouped(payload, 0, 0, int(group_len))
        payload, group = grouped_head.payload, grouped_head.group
    return FrameHead(int(attempts), int(priority or 0), int(expires or 0) or None, payload,
                     int(result_ttl or kept_too or kept_l or kept_g or 0),
                     int(events_max or events_l or events_g or 0), int(linked or linked_g or 0), group)


def _grouped(rest: bytes, attempts: int, priority: int, size: int) -> FrameHead:
    """The head of a group-only frame whose bytes after the '|' are ``rest``."""
    if size > GROUP_NAME_MAX_BYTES or size > len(rest):
        raise MalformedMessage("not a smqsup frame (its group is longer than the frame)")
    return FrameHead(attempts, priority, None, rest[:-size], group=rest[-size:].decode("utf-8", "replace"))


def group_only_head(data: bytes) -> Optional[tuple[int, int, int, int]]:
    """(attempts, priority, where the payload starts, the group's size in
    bytes) of a frame whose head says its group alone and perhaps a priority
    ("A:P:0:0:0:0:G|": every grouped message without other options); None
    for any other head, and for a group longer than GROUP_NAME_MAX_BYTES or
    than the frame (frame_head says what those are)."""
    match = _GROUP_ONLY.match(data)
    if match is None:
        return None
    start, size = match.end(), int(match[3])
    if size > GROUP_NAME_MAX_BYTES or size > len(data) - start:
        return None
    return int(match[1]), int(match[2]), start, size


def split_frame(data: bytes) -> tuple[int, bytes]:
    """``(attempts, payload)`` of a frame; MalformedMessage if it is not one."""
    head = frame_head(data)
    return head.attempts, head.payload


def _options_head(data: bytes) -> Optional[FrameHead]:
    """The head of a frame that has options (cheap: no payload is read);
    None for a plain one ("A|") or bytes that are no frame."""
    if data[1:2] == SEP:  # "N|": a plain frame, the usual one
        return None
    bar = data.find(SEP, 0, _HEAD_MAX + 1)
    if bar < 0 or data.find(b":", 0, bar) < 0:  # "A|" with more digits (or no frame): no copy of the payload
        return None
    try:
        return frame_head(data)
    except MalformedMessage:
        return None


def has_expiry(data: bytes) -> bool:
    """Whether a frame's head carries an expiry."""
    if _NO_EXPIRY.match(data):  # (a head that is no frame's says None below: no expiry either)
        return False
    head = _options_head(data)
    return head is not None and head.expires_ms is not None


#: What starts a group's ticket in the pending list: ``*`` + the group's name
#: (scripts/includes/groups.lua). No frame starts with it.
TICKET = b"*"


def is_ticket(data: bytes) -> bool:
    """Whether bytes taken from the pending list are a group's ticket (its
    turn), not a frame."""
    return data[:1] == TICKET


def member_frame(member: bytes) -> bytes:
    """The frame of a member of a queue's groups' ready set
    (``LEN:GROUP\tPSEQ\nFRAME``: keys.py)."""
    return member.split(b"\n", 1)[-1]


def must_screen(data: bytes) -> bool:
    """Whether a frame a blocking fetch took is screened (screen.lua) before
    it starts: its head carries an expiry, or it is tracked, has events or
    holds a dedup key until it starts (the screen records it "active",
    "started", and frees the key); or it is a group's ticket (the screen
    redeems it for the group's next frame)."""
    if data[:1] == TICKET:
        return True
    head = _options_head(data)
    return head is not None and (head.expires_ms is not None or head.result_ttl_s > 0 or head.events_max > 0
                                 or head.linked & LINK_HOLD > 0)


#: The start of every payload a Producer writes: its id is readable without
#: decoding the rest (which may be too deep or broken to decode).
_PEEK_ID = re.compile(rb'[0-9]{1,9}(?::[0-9]:[0-9]{1,15}(?::[0-9]{1,8}(?::[0-9]{1,7}(?::[0-7](?::[0-9]{1,3})?)?)?)?)?'
                      rb'\|\{"id":"([A-Za-z0-9_.:-]{1,128})"')


def peek_id(data: bytes) -> Optional[str]:
    """The id at the start of a frame, or None when there is none (for logs,
    and to name a dead letter whose body cannot be decoded)."""
    match = _PEEK_ID.match(data)
    return match[1].decode() if match else None
