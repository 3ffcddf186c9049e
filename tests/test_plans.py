"""The decisions both stores share (store/core/plans.py), driven here by hand
with the replies Redis would give: where a message is (the groups' ready
set too), how a cancel is answered, when a wait for an end stops. The
real drivers are tested against real servers by test_cancel.py and
test_results.py, for both clients."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Optional

from smqsup import framing
from smqsup.keys import QueueKeys
from smqsup.store import scripts
from smqsup.store.core import plans
from smqsup.store.core.plans import Command

K = QueueKeys("ns", "q")


def _frame(mid: str) -> bytes:
    return framing.frame(json.dumps({"id": mid, "queue": "q", "body": 1}, separators=(",", ":")).encode())


def _drive(plan: Any, answer: Callable[[Any], Any]) -> tuple[Any, list[Any]]:
    """Run ``plan`` to its end, each step answered by ``answer``; (its value, the steps it took)."""
    steps: list[Any] = []
    reply: Any = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return done.value, steps
        steps.append(step)
        reply = answer(step)


def _holding(places: dict[str, list[bytes]], consumers: Optional[dict[str, list[bytes]]] = None) -> Callable[[Any], Any]:
    """Replies of a partition whose keys hold ``places`` (key -> entries) and consumers' lists."""
    consumers = consumers or {}

    def answer(step: Any) -> list[Any]:
        replies = []
        for command in step:
            name, key, *args = command.args
            if name in ("ZRANGE", "LRANGE"):
                held = places.get(key) or consumers.get(key.rsplit(":", 1)[-1], [])
                start, stop = args
                replies.append(held[start:None if stop == -1 else stop + 1])
            elif name == "HKEYS":
                replies.append([cid.encode() for cid in consumers])
        return replies
    return answer


def test_a_waiting_grouped_message_is_found_as_its_member_in_the_groups_ready_set() -> None:
    """The groups' ready set holds members (LEN:GROUP, a sequence, the frame): locate answers "group" and
    the member itself (what cancel.lua takes out of the group); a pending ticket is never taken for a frame."""
    member = b"1:g\t7\n" + _frame("m1")
    found, steps = _drive(plans.locate(K, "m1"), _holding({K.groups[0]: [member], K.pending: [b"*1:g"]}))
    assert found == ("group", member, "")
    assert [s[0].args[1] for s in steps] == [K.priority, K.scheduled, K.delayed, K.groups[0]]


def test_locate_pages_through_a_long_list_and_then_the_consumers_lists() -> None:
    """A pending list longer than a page is read page by page; a message a consumer holds is "processing",
    with the consumer holding it, every consumer's list read in one round trip; nowhere is ("", b"", "")."""
    pending = [_frame(f"p{i}") for i in range(plans.PAGE + 5)]
    found, steps = _drive(plans.locate(K, f"p{plans.PAGE + 2}"), _holding({K.pending: pending}))
    assert found == ("pending", pending[-3], "") and sum(1 for s in steps if s[0].args[1] == K.pending) == 2
    held = {"c1": [_frame("x")], "c2": [_frame("m2")]}
    found, steps = _drive(plans.locate(K, "m2"), _holding({}, held))
    assert found == ("processing", held["c2"][0], "c2") and len(steps[-1]) == 2
    assert _drive(plans.locate(K, "none"), _holding({}, held))[0] == ("", b"", "")


def test_a_cancel_looks_again_when_the_message_moved_and_the_last_look_is_nowhere() -> None:
    """cancel.lua answers "moved" (taken or settled between the look and the script): the plan looks again,
    CANCEL_LOOKS times at most, the last as seen nowhere."""
    from smqsup import defaults
    calls: list[Any] = []

    def answer(step: list[Any]) -> list[Any]:
        if isinstance(step[0], scripts.Call):
            calls.append(step[0].args[1])
            return ["moved" if len(calls) < defaults.CANCEL_LOOKS else "unknown"]
        return _holding({K.pending: [_frame("m")]})(step)
    got, _ = _drive(plans.cancel(lambda n: K, ["q"], "m"), answer)
    assert got == "unknown" and calls == ["pending"] * (defaults.CANCEL_LOOKS - 1) + [""]


def test_a_cancel_asks_each_partition_until_one_knows_the_message() -> None:
    """Two partitions: the first answers "unknown", the second "cancelled": that is the answer."""
    answers = iter(["unknown", "cancelled"])

    def answer(step: list[Any]) -> list[Any]:
        if isinstance(step[0], scripts.Call):
            return [next(answers)]
        return _holding({})(step)
    names = ["q", "q~1"]
    got, steps = _drive(plans.cancel(lambda n: QueueKeys("ns", n), names, "m"), answer)
    assert got == "cancelled" and sum(isinstance(s[0], scripts.Call) for s in steps) == 2


class _Watch:
    def __init__(self) -> None:
        self.lost, self.refused = False, None


def _record_replies(raw: Optional[bytes]) -> list[Any]:
    return [[1700000000, 0], [raw, None, None], None]


def test_a_wait_on_a_garbage_record_stops_at_once_and_a_waiting_one_pauses() -> None:
    """end(): a record that is garbage is final (no Pause, unsubscribed); a waiting one pauses until the
    deadline, then is returned as it is."""
    def answer_with(raw: bytes) -> Callable[[Any], Any]:
        def answer(step: Any) -> Any:
            if isinstance(step, plans.Subscribe):
                return _Watch()
            if isinstance(step, list):
                return _record_replies(raw)
            return None
        return answer
    record, steps = _drive(plans.end(lambda n: K, "q", "m", 3600), answer_with(b'{"state":"done"'))
    assert record is not None and record.state == "unknown"
    assert not any(isinstance(s, plans.Pause) for s in steps) and steps[-1] == plans.UNSUBSCRIBE
    began = time.monotonic()
    record, steps = _drive(plans.end(lambda n: K, "q", "m", 0.05), answer_with(b'{"state":"waiting"}'))
    assert record is not None and record.state == "waiting" and time.monotonic() - began < 2
    assert any(isinstance(s, plans.Pause) for s in steps)


def test_a_lost_subscription_is_watched_again_and_a_refused_one_raises() -> None:
    """end(): the first watch is lost mid-wait: a second Subscribe, then the end; a refusal: BrokerError."""
    watches: list[_Watch] = []
    reads = iter([b'{"state":"waiting"}', b'{"state":"waiting"}', b'{"state":"done"}'])

    def answer(step: Any) -> Any:
        if isinstance(step, plans.Subscribe):
            watches.append(_Watch())
            return watches[-1]
        if isinstance(step, plans.Pause):
            watches[-1].lost = True
            return None
        return None if step == plans.UNSUBSCRIBE else _record_replies(next(reads))
    record, steps = _drive(plans.end(lambda n: K, "q", "m", 60), answer)
    assert record is not None and record.state == "done" and len(watches) == 2

    def refused(step: Any) -> Any:
        if isinstance(step, plans.Subscribe):
            w = _Watch()
            w.lost, w.refused = True, ValueError("NOPERM")  # (not Redis's: raised as it is)
            return w
        return None if step == plans.UNSUBSCRIBE else _record_replies(b'{"state":"waiting"}')
    try:
        _drive(plans.end(lambda n: K, "q", "m", 60), refused)
    except ValueError as exc:
        assert "NOPERM" in str(exc)
    else:
        raise AssertionError("a refused subscription must raise")


def test_fill_puts_commands_and_script_calls_in_order() -> None:
    """fill(): plain commands (their route kept) and script calls, in the order given."""
    batch = plans.fill(scripts.Batch(None), [Command(("TIME",), route="k"), scripts.cancel(K, "m", "", b"")])
    assert len(batch) == 2 and batch.key(0) == "k" and batch.call(1) is not None
