"""What a publish with ``depends_on`` adds to a plain one, and the steps of a
chain: the checks of the parents and the failure rule, and the bytes a hold
keeps (store/ops/workflows.py has the protocol). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from smqsup import defaults, framing, message, safe
from smqsup.client.checks import valid_name
from smqsup.client.outgoing import Outgoing
from smqsup.errors import (
    BrokerConnectionError,
    BrokerError,
    BrokerNotSent,
    MessageError,
    PublishNotSent,
    PublishUncertain,
)

#: The keywords a chain's step may give (publish()'s, but those the chain sets).
STEP_OPTIONS = frozenset({"headers", "delay", "priority", "dedup_key", "dedup_ttl", "ttl", "message_id",
                          "partition_key", "result_ttl", "on_parent_failure", "group"})


def parents(depends_on: object, limit: int = defaults.MAX_PARENTS) -> list[tuple[str, str]]:
    """``depends_on`` as a list of (queue, message id) pairs, each once, in
    order; MessageError (one bounded line) for anything else."""
    if isinstance(depends_on, (str, bytes, Mapping)) or not isinstance(depends_on, Sequence):
        raise MessageError(f"depends_on: expected a list of (queue, message_id) pairs, got a value of type "
                           f"{type(depends_on).__name__}")
    if not depends_on:
        raise MessageError("depends_on: empty (give at least one (queue, message_id) pair, or leave it out)")
    if len(depends_on) > limit:
        raise MessageError(f"depends_on: {len(depends_on)} parents, more than {limit} (a fan-in that large is a "
                           "batch's job: producer.batch)")
    pairs: dict[tuple[str, str], None] = {}
    for i, pair in enumerate(depends_on):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise MessageError(f"depends_on[{i}]: expected a (queue, message_id) pair, got "
                               f"{safe.escape(repr(pair), 80)}")
        queue = valid_name(pair[0], f"depends_on[{i}]: queue")
        try:
            mid = message.check_message_id(pair[1])
        except MessageError as exc:
            raise MessageError(f"depends_on[{i}]: {exc}") from None
        pairs[(queue, mid)] = None
    return list(pairs)


def known(wanted: list[tuple[str, str]], found: Mapping[tuple[str, str], Optional[str]]) -> list[tuple[str, str]]:
    """``wanted``, once every parent was found; MessageError naming the
    first one that was not (and how many more)."""
    unknown = [p for p in wanted if found.get(p) is None]
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise MessageError(f"depends_on: message {unknown[0][1]} of queue {unknown[0][0]} is not known{more}: never "
                           "published, not tracked (its queue keeps no result: result_ttl), or past its result_ttl; "
                           "nothing was published")
    return wanted


def failure_rule(value: object) -> bool:
    """Whether a child runs when a parent failed: "fail" (the default: it
    is dead-lettered) or "run"."""
    if value not in ("fail", "run"):
        raise MessageError(f"on_parent_failure: expected \"fail\" or \"run\", got {safe.escape(repr(value), 40)}")
    return value == "run"


def kept(out: Outgoing, run: bool) -> tuple[str, bytes, Optional[str], int]:
    """(id, what hold.lua keeps, dedup key, dedup ttl in ms) of the one
    message of ``out``: "D:T:F|" and its frame, linked, without expiry (the
    delay and ttl count from its release), with every other option it was
    published with (priority, tracking, events, its group after the payload:
    unblock.lua writes them into the frame it releases)."""
    opts = out.options
    item = out.frames[0]
    group = b""
    if opts is None:  # a plain frame: "0|" + payload
        assert isinstance(item, bytes)
        mid, payload, key = out.ids[0], item[2:], None
        priority = delay_ms = ttl_ms = kept_s = events_max = dedup_ttl_ms = 0
    else:
        assert isinstance(item, tuple)
        mid, payload, key = item
        if opts.dedup_until:
            raise MessageError("dedup_until: not with depends_on (a held message's dedup key holds for dedup_ttl)")
        if opts.at_ms >= 0:
            raise MessageError("at: not with depends_on (a child enters its queue when its parents are done; "
                               "give a delay from then instead)")
        priority, delay_ms, ttl_ms = opts.priority, max(0, opts.delay_ms), opts.ttl_ms
        kept_s, events_max, dedup_ttl_ms = opts.result_ttl_s, opts.events_max, opts.dedup_ttl_ms
        group = opts.group
    head = b"%d:%d:%d|0:%d:0:%d:%d:%d" % (delay_ms, ttl_ms, int(run), priority, kept_s, events_max,
                                          framing.LINK_PARENTS)
    if group:
        return mid, b"%b:%d|%b%b" % (head, len(group), payload, group), key, dedup_ttl_ms
    return mid, head + b"|" + payload, key, dedup_ttl_ms


def publish_error(exc: BrokerError, message_id: str) -> BrokerError:
    """The publish error for the store's error ``exc`` while holding ``message_id``."""
    if isinstance(exc, BrokerNotSent):
        return PublishNotSent(f"{exc} (message {message_id} is not queued)", [message_id])
    if isinstance(exc, BrokerConnectionError):
        return PublishUncertain(f"{exc} (message {message_id} may or may not be queued)", [message_id])
    return exc


def steps(chain: object) -> list[tuple[str, Any, dict[str, Any]]]:
    """A chain's steps as (queue, body, options); MessageError for a step
    that is not (queue, body) or (queue, body, {options}) with publish()'s
    keywords."""
    if isinstance(chain, (str, bytes, Mapping)) or not isinstance(chain, Sequence) or not chain:
        raise MessageError("chain: expected a non-empty list of (queue, body) or (queue, body, {options}) steps")
    out = []
    for i, step in enumerate(chain):
        if isinstance(step, (str, bytes)) or not isinstance(step, Sequence) or len(step) not in (2, 3):
            raise MessageError(f"chain[{i}]: expected (queue, body) or (queue, body, {{options}}), got "
                               f"{safe.escape(repr(step), 80)}")
        opts = step[2] if len(step) == 3 else {}
        if not isinstance(opts, Mapping):
            raise MessageError(f"chain[{i}]: options must be a mapping, got {type(opts).__name__}")
        wrong = sorted(str(k) for k in opts if k not in STEP_OPTIONS)
        if wrong:
            raise MessageError(f"chain[{i}]: unknown option {safe.escape(wrong[0], 40)} (one of "
                               f"{', '.join(sorted(STEP_OPTIONS))})")
        out.append((valid_name(step[0], f"chain[{i}]: queue"), step[1], dict(opts)))
    return out
