"""What a publish call becomes before and while it is sent, shared by both
producers: Outgoing, its messages checked and encoded; Sending, one round
trip of them to one partition. Plain values, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from smqsup.store import scripts

#: Frames to send: plain frames, or (id, payload, dedup key) items sent with options.
Frames = Union[list[bytes], list[tuple[str, bytes, Optional[str]]]]


@dataclass
class Outgoing:
    """The messages of one publish call, checked and encoded, before a byte is sent."""

    queue: str
    ids: list[str]
    frames: Frames
    #: None: plain frames (publish.lua, or LPUSH); else the options of every item.
    options: Optional[scripts.Options]
    #: The partition key, if one was given.
    by: Optional[str]
    #: With options: each message's dedup key (None: none).
    keys: list[Optional[str]]


@dataclass
class Sending:
    """One round trip of an Outgoing: its messages bound for one partition."""

    queue: str
    target: str
    frames: Frames
    ids: list[str]
    options: Optional[scripts.Options]
    #: Whether the queue is to be added to the registry in the same round trip.
    register: bool
    #: The producer's statistics (id, JSON) riding along, or None.
    stats: Optional[tuple[str, str]]
    #: The monotonic time the statistics were read at.
    now: float
    #: The positions of its messages in the Outgoing.
    where: list[int]
