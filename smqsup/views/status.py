"""``smqsup status``: the statistics snapshot as a table for people, or JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional, TextIO

from smqsup import safe
from smqsup.collector import stats
from smqsup.store.broker import Broker
from smqsup.views.schedule_table import render as render_schedules
from smqsup.views.text import cell


def _num(value: Any, digits: int = 1) -> str:
    number = stats.finite_number(value)
    return "-" if number is None else f"{number:.{digits}f}"


def _mb(value: Any) -> str:
    number = stats.finite_number(value)
    return "-" if not number else f"{number / 1048576:.1f}"


def _flight(in_flight: Any, concurrency: Any) -> str:
    """Messages in flight of the most at once, as ``37/50``; ``-`` for an
    unknown part, and for both."""
    if in_flight is None and concurrency is None:
        return "-"
    return f"{_num(in_flight, 0)}/{_num(concurrency, 0)}"


def _summed_flight(part: dict[str, Any]) -> str:
    """A queue's or the totals' ``_flight``; ``-`` when no consumer reports its
    concurrency (none registered, or only entries that predate it)."""
    return _flight(part.get("in_flight"), part["concurrency"]) if part.get("concurrency") else "-"


#: Size columns of the queue table: (snapshot key, heading). "delayed" holds
#: retries waiting, hence its heading.
_SIZE_COLUMNS = (("pending", "pending"), ("processing", "processing"), ("scheduled", "scheduled"),
                 ("delayed", "retrying"), ("dead", "dead"))
#: Counters shown under the queue table when not zero.
_EVENT_NOTES = ("expired", "deduplicated", "rejected", "removed")
#: Longest free text (a roll failure, why a queue was scaled) shown in a supervisor's line, in characters.
_NOTE_CHARS = 200


def render(snap: dict[str, Any]) -> str:
    """The snapshot as aligned text tables."""
    out = [_queue_table(snap)]
    for notes in (_supervisor_lines(snap), _group_lines(snap), _trouble_lines(snap), _event_notes(snap)):
        if notes:
            out.append(notes)
    if snap.get("schedules"):
        out.append(render_schedules(snap["schedules"]))
    for name, q in sorted(snap["queues"].items()):
        out += _consumer_tables(name, q)
    if snap["producers"]:
        prow = [("producer", "published", "msg/s", "seen")]
        for p in snap["producers"]:
            seen = stats.finite_number(p.get("seen_at_ms"))
            age = "-" if seen is None else f"{(snap['t'] - seen) / 1000.0:.0f}s ago"
            prow.append((cell(p.get("id")), _num(p.get("published"), 0), _num(p.get("rate")), age))
        out.append(_table(prow))
    return "\n\n".join(out)


def _queue_table(snap: dict[str, Any]) -> str:
    """One row per queue (its name marked ``(paused)`` while paused), then the
    totals; "lag" is how long its oldest ready message has waited (the
    totals': the largest), "in flight" the messages its consumers run now of
    the most they may run at once."""
    rows = [("queue", *(heading for _, heading in _SIZE_COLUMNS), "lag", "published/s", "acked/s", "retried/s",
             "dead/s", "consumers", "in flight", "collector")]
    for name, q in sorted(snap["queues"].items()):
        s, r = q["sizes"], q["rates"]
        parts = q.get("partitions") or 1
        label = cell(name) + (f" ({parts} partitions)" if parts > 1 else "") + (" (paused)" if q.get("paused") else "")
        rows.append((label, *(str(s.get(key, 0)) for key, _ in _SIZE_COLUMNS), _lag(q.get("lag_s")),
                     _num(r["published"]), _num(r["acked"]), _num(r["retried"]), _num(r["dead_lettered"]),
                     str(len(q["consumers"])), _summed_flight(q), cell((q["leader"] or "-").rsplit(":", 1)[0])))
    t = snap["totals"]
    rows.append(("TOTAL", *(str(t.get(key, 0)) for key, _ in _SIZE_COLUMNS), _lag(t.get("lag_s")),
                 _num(t["rates"]["published"]), _num(t["rates"]["acked"]), _num(t["rates"]["retried"]),
                 _num(t["rates"]["dead_lettered"]), str(t["consumers"]), _summed_flight(t), ""))
    return _table(rows)


def _lag(seconds: Any) -> str:
    """A lag as ``12.3s``; ``-`` when unknown."""
    number = stats.finite_number(seconds)
    return "-" if number is None else f"{number:.1f}s"


def _supervisor_lines(snap: dict[str, Any]) -> str:
    """A line per supervisor of each queue: the consumers it aims at (of
    min..max when autoscaled) and runs, its last scale event, its roll."""
    lines = []
    for name, q in sorted(snap["queues"].items()):
        for sup in q.get("supervisors") or []:
            lines.append(f"  {cell(name)}: {_supervisor(sup, snap['t'])}")
    return "\n".join(lines)


def _supervisor(sup: dict[str, Any], now_ms: int) -> str:
    """One supervisor's line (after the queue's name); its fields are
    store.supervisors.SupervisorInfo's, checked when read."""
    bounds = f" of {sup['min']}..{sup['max']}" if sup["autoscaled"] else ""
    parts = [f"target {sup['target']}{bounds} on {cell(sup['host'])}:{sup['pid']} ({sup['running']} running)"]
    scaled = sup.get("scaled")
    if scaled:
        way = "up " if scaled["to"] > scaled["from"] else "down " if scaled["to"] < scaled["from"] else ""
        why = f" ({safe.escape(scaled['why'], _NOTE_CHARS)})" if scaled["why"] else ""
        age = max(0.0, (now_ms - scaled["at_ms"]) / 1000.0)
        parts.append(f"scaled {way}{scaled['from']}->{scaled['to']} {age:.0f}s ago{why}")
    if sup.get("roll_failed") is not None:
        parts.append(f"roll failed: {safe.escape(sup['roll_failed'], _NOTE_CHARS)}")
    elif sup.get("rolling"):
        parts.append("rolling")
    return ", ".join(parts)


def _group_lines(snap: dict[str, Any]) -> str:
    """A line per queue with message groups waiting: how many, and the
    largest backlogs."""
    lines = []
    for name, q in sorted(snap["queues"].items()):
        groups = q.get("groups") or {}
        if groups.get("waiting"):
            busiest = ", ".join(f"{cell(g['group'])} {g['ready']}" + (f" ({g['running']} running)" if g["running"] else "")
                                for g in groups.get("busiest") or [])
            lines.append(f"  {cell(name)}: {groups['waiting']} groups waiting; largest backlogs: {busiest}")
    return "\n".join(lines)


def _trouble_lines(snap: dict[str, Any]) -> str:
    """A line per key of the wrong type, and per record of outbox
    entries set aside (store/ops/parked.py): what waits, why, the key named."""
    lines = []
    for name, q in sorted(snap["queues"].items()):
        for key in q.get("wrong_type_keys") or []:
            lines.append(f"  {cell(name)}: {safe.escape(key, _NOTE_CHARS)} (what needs it waits until it is "
                         "deleted or repaired)")
        for p in q.get("outbox_parked") or []:
            state = "parked" if p["parked"] else "backing off"
            lines.append(f"  {cell(name)}: outbox: {p['entries']} {p['kind']} entr(ies) for {cell(p['target_queue'])} "
                         f"{state} after {p['failures']} failure(s): {safe.escape(p['reason'], _NOTE_CHARS)}")
        more = (q.get("outbox_parked_records") or 0) - len(q.get("outbox_parked") or [])
        if more > 0:
            lines.append(f"  {cell(name)}: outbox: {more} more record(s) of entries set aside")
    return "\n".join(lines)


def _event_notes(snap: dict[str, Any]) -> str:
    """A line per queue that has expired, deduplicated, rejected or removed messages
    (counts since the queue was created)."""
    lines = []
    for name, q in sorted(snap["queues"].items()):
        counts = [f"{n} {event}" for event in _EVENT_NOTES if (n := q["counters"].get(event, 0))]
        if counts:
            lines.append(f"  {cell(name)}: " + ", ".join(counts) + " (since the queue was created)")
    return "\n".join(lines)


def _consumer_tables(name: str, q: dict[str, Any]) -> list[str]:
    """The queue's consumers as a table, then its restarted slots; nothing without consumers."""
    if not q["consumers"]:
        return []
    crow = [("consumer", "host", "pid", "#", "state", "in flight", "msgs", "acked", "msg/s", "cpu%", "rss MB",
             "uss MB", "heartbeat")]
    for c in q["consumers"]:
        crow.append((cell(f"{name} #{c.get('index', '?')}"), cell(c.get("host")), cell(c.get("pid")),
                     cell(c.get("index")), "busy" if c.get("busy") is True else "idle",
                     _flight(c.get("in_flight"), c.get("concurrency")), _num(c.get("received"), 0),
                     _num(c.get("acked"), 0), _num(c.get("rate")), _num(c.get("cpu")), _mb(c.get("rss")),
                     _mb(c.get("uss")),
                     f"{_num(c.get('heartbeat_age_s'))}s ago"))
    out = [_table(crow)]
    restarted = {k: v for k, v in q["slots"].items() if stats.finite_number(v.get("restarts"))}
    if restarted:
        out.append("\n".join(f"  {cell(name)} {cell(slot)}: {_num(v.get('restarts'), 0)} restart(s), "
                             f"last exit: {cell(v.get('last_exit', '?'))}"
                             for slot, v in sorted(restarted.items())))
    return out


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(r, widths))).rstrip() for r in rows)


def run(broker: Broker, queues: list[str], *, as_json: bool, watch: Optional[float],
        out: TextIO = sys.stdout) -> int:
    """Print the status once, or every ``watch`` seconds until interrupted."""
    while True:
        names = sorted(set(queues) | set(broker.queues.known_queues()))
        snap = stats.snapshot(broker, names)
        if as_json:
            out.write(json.dumps(snap, sort_keys=True) + "\n")
        else:
            if watch:
                out.write("\x1b[H\x1b[2J")  # clear the screen between refreshes
            out.write(render(snap) + "\n")
        out.flush()
        if not watch:
            return 0
        time.sleep(watch)
