"""The invariants: the model against what Redis holds, after every step.

- each message is in exactly one place, the one the model says (a
  duplicate, a loss or a stray place fails);
- each ends once, in the outcome the model predicts: its dead letter's
  reason, its record's state, and a done one's result its own;
- a held child whose parents all ended leaves its hold in the way the
  model says, and once the collector drained the outboxes it has left it
  (unless its own queue is broken);
- nothing is in Redis that the model did not publish;
- each message is in one partition of its queue, always the same one, the
  one its key picks (model.partition_of) when it has a key;
- in the events queue (driver.EVENTS_QUEUE), each message's events open
  with "published", and an ended one's close with the one end event its
  end says (done, dead, expired, cancelled, removed), a live one has none.

The store may choose when a child is told between two collector rounds (a
consumer tells its children at once, a cancel leaves that to the
collector): ``sync`` moves the model along where Redis shows it happened."""

from __future__ import annotations

import json
from typing import Optional

from smqsup import framing, message
from tests.model.driver import EVENTS_QUEUE, Seen
from tests.model.model import WAITING, Model, Msg, Violation

_RECORD_STATES = {"done": ("done",), "dead": ("dead", "cancelled"), "removed": ("dead",)}


def expected_places(m: Msg) -> list[str]:
    if m.place == "processing":
        return [f"processing:{m.holder}"]
    if m.place in ("done", "removed"):
        return []
    return [m.place]


def sync(model: Model, seen: Seen, drained: bool) -> None:
    """Move held children the store has told to where it put them, checking
    it is where the model says they must go; after a drain (``drained``),
    every due child of a healthy queue must have been told."""
    for m in model.msgs.values():
        if m.place != "held" or m.lost:
            continue
        due = model.due(m)
        now = seen.places.get(m.id, [])
        if due is None or now == ["held"]:
            if due is not None and drained and m.queue not in model.broken:
                raise Violation(f"{m.id} is still held after the collector's drain, though its parents "
                                f"{list(m.parents)} ended (it must be {due[0]} {due[1]})")
            continue
        _told(m, due, now, seen.frames.get(m.id))


def adopt_callbacks(model: Model, seen: Seen, drained: bool) -> None:
    """Take in the batches' callbacks Redis shows (each must be due, and
    fire once); after a drain, every callback due must have fired."""
    for mid in sorted(set(seen.places) - set(model.msgs)):
        frame = seen.frames.get(mid)
        if frame is not None and seen.places[mid] == ["ready"]:
            msg = message.decode(frame)
            model.fired(mid, msg.queue, msg.body)
    for b in model.batches.values() if drained else ():
        if b.fired != model.callbacks_due(b):
            raise Violation(f"batch {b.tag} fired {b.fired} after the collector's drain; the model says "
                            f"{model.callbacks_due(b)} (members: {[(m, model.msgs[m].place) for m in b.members]})")


def _told(m: Msg, due: tuple[str, str], now: list[str], frame: Optional[bytes]) -> None:
    place, reason = due
    if m.cancel_asked and now in (["ready"], ["delayed"]):
        place, reason = now[0], ""  # (a cancel remembered: it is stopped when it is taken)
    if now != ([place] if place != "done" else []):
        raise Violation(f"{m.id} left its hold for {now}, the model says {place} {reason}".rstrip())
    if m.ttl == "short" and place in WAITING:
        expires = framing.frame_head(frame).expires_ms if frame else None
        if expires is None or expires <= m.after_ms:
            raise Violation(f"{m.id} was released with expiry {expires}, not counted from its release "
                            f"(its ttl from its publish had passed at {m.after_ms})")
    m.place, m.reason = place, reason


def expire(model: Model, seen: Seen) -> None:
    """Take in the ripe waiting messages Redis shows dead-lettered (a take
    or promote met them): each ends as Model.expire says (check() reads its reason)."""
    for m in model.msgs.values():
        if m.ripe and m.place in WAITING and not m.lost and seen.places.get(m.id) == ["dead"]:
            model.expire(m)


def check(model: Model, seen: Seen) -> None:
    """Every invariant of the module docstring but the held children's (sync's)."""
    for m in model.msgs.values():
        if m.lost:
            continue
        now = seen.places.get(m.id, [])
        _check_partition(m, seen.partitions.get(m.id, set()))
        if now != expected_places(m):
            raise Violation(f"{m.id} is in {now or 'no place'} in Redis; the model says {m.place} "
                            f"{m.holder or ''}".rstrip())
        if m.id in seen.frames and m.place in ("ready", "delayed", "held"):
            _check_frame(m, seen.frames[m.id])
        if m.place == "dead":
            _check_reason(m, seen.dead_reasons.get(m.id, []))
        if m.ended and m.tracked:
            _check_record(m, seen.records.get(m.id))
        if m.queue == EVENTS_QUEUE and m.tracked:
            _check_events(m, seen.events.get(m.id, []))
    lost = {m.id for m in model.msgs.values() if m.lost}
    strays = sorted(set(seen.places) - set(model.msgs) - lost)
    if strays:
        raise Violation(f"Redis holds messages the model never published: {strays}")


def _check_partition(m: Msg, parts: set[str]) -> None:
    """``m`` is in the one partition the model knows (learning it at its first sight when it had no key)."""
    if len(parts) > 1 or (parts and m.partition is not None and parts != {m.partition}):
        raise Violation(f"{m.id} is in partitions {sorted(parts)}; the model says {m.partition}")
    if parts and m.partition is None:
        m.partition = next(iter(parts))


def _check_frame(m: Msg, frame: bytes) -> None:
    """A waiting or held message's frame keeps the group it was published with."""
    try:
        group = message.decode(frame).group
    except Exception as exc:  # noqa: BLE001 - a frame that does not decode is the finding
        raise Violation(f"{m.id} ({m.place}) has a frame that does not decode: {exc}") from None
    if group != m.group:
        raise Violation(f"{m.id} was published in group {m.group!r} but is {m.place} in group {group!r}")


def _check_reason(m: Msg, reasons: list[str]) -> None:
    ok = len(reasons) == 1 and (reasons[0] == m.reason or (
        m.reason == "dependency failed" and reasons[0].startswith("dependency failed: ")))
    if not ok:
        raise Violation(f"{m.id} is dead-lettered with reasons {reasons}; the model says {m.reason!r}")


_END_EVENTS = ("done", "dead", "expired", "cancelled", "removed")


def end_event(m: Msg) -> str:
    """The event that must close an ended message's lifecycle."""
    if m.place in ("done", "removed"):
        return m.place
    return m.reason if m.reason in ("expired", "cancelled") else "dead"


def _check_events(m: Msg, names: list[str]) -> None:
    """A message of the events queue: its stream opens with "published";
    an ended one's closes with the one end event its end says, a live one's has none."""
    ends = [n for n in names if n in _END_EVENTS]
    want = [end_event(m)] if m.ended else []
    if names[:1] != ["published"] or ends != want or (want and names[-1] != want[0]):
        raise Violation(f"{m.id} ({m.place} {m.reason}) has events {names}; the model says "
                        f"published ... {want[0] if want else '(no end yet)'}")


def _check_record(m: Msg, record: Optional[object]) -> None:
    state = getattr(record, "state", None)
    if state not in _RECORD_STATES[m.place]:
        raise Violation(f"{m.id} ended {m.place} {m.reason} but its record says {state}")
    if m.place == "done":
        result = json.loads(getattr(record, "result", None) or "null")
        if result != {"id": m.id}:
            raise Violation(f"{m.id} is done with result {result!r}, not its own")
    if m.place != "done" and getattr(record, "reason", None) != m.reason and not m.reason.startswith("dependency"):
        raise Violation(f"{m.id}'s record says reason {getattr(record, 'reason', None)!r}, the model {m.reason!r}")


def view(model: Model) -> str:
    """The model's view in one line a message: for note() on a failure."""
    parts = []
    for m in model.msgs.values():
        opts = "".join(f" {k}={v}" for k, v in (("part", m.partition), ("group", m.group),
                                                ("pkey", m.partition_key), ("prio", m.priority or None),
                                                ("parents", ",".join(m.parents) or None),
                                                ("run", m.run_anyway or None), ("cancel", m.cancel_asked or None),
                                                ("ttl", m.ttl), ("ripe", m.ripe or None)) if v)
        where = m.holder if m.place == "processing" else m.reason or ""
        parts.append(f"{m.id}@{m.queue}: {m.place} {where} att={m.attempts}{opts}{' LOST' if m.lost else ''}")
    paused = f" paused={sorted(model.paused)} groups={sorted(model.paused_groups)} broken={sorted(model.broken)}"
    return "model: " + "; ".join(parts) + paused
