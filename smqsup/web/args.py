"""What a request of the JSON API asks, read and checked: the queue in the
path, query arguments, the JSON body and the message ids it names. Each
reader returns the value or raises ConfigError (a 400) or NotFound (a 404)
with one line naming the argument."""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn, Optional

from aiohttp import web

from smqsup import defaults, message, safe
from smqsup.config.names import validate_queue_name
from smqsup.errors import ConfigError, MessageError
from smqsup.views import browse

#: One pair of the events endpoint's ``after``: a partition's index (0: the
#: queue itself) and the entry id ("ms-seq") of its last event the client was given.
_AFTER_PAIR = re.compile(r"([0-9]{1,2})=([0-9]{1,20})-([0-9]{1,20})")
#: Longest ``after`` read, in characters (a pair for each of the most partitions).
AFTER_CHARS = defaults.PARTITIONS_MAX * 48


class NotFound(Exception):
    """A 404: what the request names does not exist (one line, for people)."""


def queue(request: web.Request) -> str:
    """The queue named in the path (ConfigError unless it is a valid queue name:
    never ``.`` or ``..``, which would read as steps of a path)."""
    return validate_queue_name(request.match_info["queue"], key="queue")


def int_arg(request: web.Request, name: str, default: int, high: int) -> int:
    """The query argument ``name``: ``default`` when absent, else ASCII digits
    giving 1 to ``high`` (ConfigError otherwise: ``str.isdigit`` alone would
    let through "²", which ``int`` refuses)."""
    text = request.query.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 20 and 1 <= int(text) <= high):
        raise ConfigError(f"{name}: expected an integer from 1 to {high}, got {text[:40]!r}")
    return int(text)


def events_after(request: web.Request) -> Optional[dict[int, str]]:
    """The query argument ``after``: None when absent, else the cursors the
    last answer's ``after`` gave ("I=MS-SEQ,...": partition index, entry id;
    each index once, each number below 2**64). Whether the queue has each
    partition is for the reader to say (that takes Redis)."""
    text = request.query.get("after")
    if text is None:
        return None
    if len(text) > AFTER_CHARS:
        raise ConfigError(f"after: longer than {AFTER_CHARS} characters (expected what the last answer's after gave)")
    cursors: dict[int, str] = {}
    for pair in text.split(","):
        match = _AFTER_PAIR.fullmatch(pair)
        if (match is None or int(match[1]) in cursors or int(match[1]) >= defaults.PARTITIONS_MAX
                or int(match[2]) >= 2**64 or int(match[3]) >= 2**64):
            raise ConfigError(f"after: expected INDEX=MS-SEQ pairs, as the last answer's after gave, "
                              f"got {safe.escape(repr(pair), 60)}")
        cursors[int(match[1])] = f"{match[2]}-{match[3]}"
    return cursors


def state_arg(request: web.Request) -> str:
    """The query argument ``state``: one of browse.STATES, pending when absent."""
    text = request.query.get("state", "pending")
    if text not in browse.STATES:
        raise ConfigError(f"state: expected one of {', '.join(browse.STATES)}, got {text[:40]!r}")
    return text


async def selection(request: web.Request, high: int) -> Optional[list[str]]:
    """The 1 to ``high`` message ids a POST names, or None for ``{"all": true}``."""
    if request.content_type != "application/json":
        raise ConfigError("expected a JSON body (Content-Type: application/json)")
    body = parse_json(await request.read())
    if isinstance(body, dict) and body.get("all") is True and "ids" not in body:
        return None
    ids = body.get("ids") if isinstance(body, dict) else None
    if (not isinstance(ids, list) or not 1 <= len(ids) <= high
            or not all(isinstance(i, str) and i for i in ids)):
        raise ConfigError(f'expected {{"ids": [1 to {high} message ids]}} or {{"all": true}}')
    return ids


def parse_json(data: bytes) -> Any:
    """The JSON document ``data``: UTF-8, standard JSON (no NaN or Infinity),
    nested no deeper than the parser copes with; ConfigError otherwise."""
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise ConfigError("the body is not valid JSON (standard JSON in UTF-8)") from None


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not standard JSON")


async def json_object(request: web.Request, *, empty_ok: bool = False) -> dict[str, Any]:
    """The POST's JSON object (``{}`` for an empty body when ``empty_ok``)."""
    if request.content_type != "application/json":
        raise ConfigError("expected a JSON body (Content-Type: application/json)")
    data = await request.read()
    if empty_ok and not data.strip():
        return {}
    body = parse_json(data)
    if not isinstance(body, dict):
        raise ConfigError("expected a JSON object as the body")
    return body


def message_ids(body: dict[str, Any], high: int) -> list[str]:
    """``body["ids"]``: 1 to ``high`` message ids (or ``raw-...`` references)."""
    ids = body.get("ids")
    if not isinstance(ids, list) or not 1 <= len(ids) <= high:
        got = f"{len(ids)} ids" if isinstance(ids, list) else "nothing" if ids is None else type(ids).__name__
        raise ConfigError(f"ids: expected a list of 1 to {high} message ids, got {got}")
    for mid in ids:
        try:
            message.check_message_id(mid)
        except MessageError:
            raise ConfigError(f"ids: expected message ids (1 to 128 of A-Z a-z 0-9 _ . : -), "
                              f"got {safe.escape(repr(mid), 60)}") from None
    return ids
