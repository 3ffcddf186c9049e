"""Statistics: the per-second history that each queue's elected collector
writes, and the snapshot that ``smqsup status``, the web UI and /metrics read.

Where the numbers come from (none costs a round trip per message):
  - queue counters (published, acked, retried, dead_lettered, reclaimed,
    late_acks): counted inside the scripts that move the messages, so they are
    exact at every moment;
  - per-consumer counters, CPU and memory: in each consumer's heartbeat, which
    its supervisor renews about once a second;
  - per-producer counts: flushed by each producer about once a second, in the
    round trip of a publish;
  - history: once a second the queue's collector appends one point (counters
    and sizes, Redis clock) to a list trimmed to SERIES_POINTS, so memory is
    bounded and a dashboard opened now shows the last 15 minutes;
  - lag (the age of the oldest ready message): read with each snapshot, one
    round trip for all queues (store/ops/lag.py);
  - supervisors (target, bounds, rolls, last scale event): what each
    supervisor rewrites every few seconds, stale entries dropped
    (store/ops/supervisors.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Optional

from smqsup.keys import logical_name
from smqsup.store.broker import Broker
from smqsup.store.core.consumer_info import ConsumerInfo
from smqsup.store.ops import supervisors
from smqsup.store.ops.lag import QueueLag
from smqsup.store.ops.statistics import QueueReading, redis_int

#: Points kept per queue: one a second, 15 minutes.
SERIES_POINTS = 900
#: Queue counters a point carries (cumulative; rates are their differences).
COUNTERS = ("published", "acked", "retried", "dead_lettered", "reclaimed", "late_acks", "dlq_requeued", "expired",
            "deduplicated", "removed", "rejected")
#: Queue sizes a point carries.
SIZES = ("pending", "processing", "scheduled", "delayed", "dead")
#: What a queue's consumers run (sums of theirs, in a snapshot's queue and totals).
FLIGHT = ("in_flight", "concurrency")
#: Fields of a slot's and a producer's record that hold numbers (None in a
#: snapshot when Redis holds anything else there; consumers: info.ConsumerInfo).
_SLOT_NUMBERS = ("supervisor", "index", "restarts", "last_exit_at")
_PRODUCER_NUMBERS = ("seen_at_ms", "published", "rate")


def sample(broker: Broker, queue: str) -> dict[str, Any]:
    """Append one point to the queue's history (the collector calls this once a
    second) and return it. A queue with partitions has one history, its
    sums, written by partition 0's collector (the others' write none: {})."""
    if queue != logical_name(queue):
        return {}
    now_ms, readings = broker.statistics.read_queues([queue])
    r = readings[queue]
    infos = [ConsumerInfo.from_json(v) for v in r.consumers.values()]
    point: dict[str, Any] = {"t": now_ms}
    point.update({name: redis_int(r.counters.get(name.encode())) or 0 for name in COUNTERS})
    point.update({name: r.sizes[name] for name in SIZES}, consumers=len(infos), cpu=round(sum(i.cpu or 0.0 for i in infos), 1),
                 rss=sum(i.rss or 0 for i in infos))
    broker.statistics.append_point(queue, json.dumps(point, separators=(",", ":")), SERIES_POINTS)
    return point


def history(broker: Broker, queue: str, seconds: int = SERIES_POINTS) -> list[dict[str, Any]]:
    """The queue's points of the last ``seconds``, oldest first."""
    return _points(broker.statistics.series(queue, seconds))


def rates(points: Sequence[dict[str, Any]], window_s: float = 10.0) -> dict[str, Optional[float]]:
    """Per-second rate of each counter over the last ``window_s`` of points
    (None when fewer than two points cover it)."""
    if len(points) < 2:
        return {name: None for name in COUNTERS}
    last = points[-1]
    first = next((p for p in points if last["t"] - p["t"] <= window_s * 1000), points[-2])
    if first is last:
        first = points[-2]
    dt = (last["t"] - first["t"]) / 1000.0
    return {name: round(max(0, last.get(name, 0) - first.get(name, 0)) / dt, 2) if dt > 0 else None
            for name in COUNTERS}


def snapshot(broker: Broker, queues: Sequence[str], *, window_s: float = 10.0) -> dict[str, Any]:
    """Everything an operator looks at, for ``queues``: sizes, lag, counters,
    rates, consumers (with CPU, memory, messages in flight, heartbeat age)
    and the messages in flight and concurrency summed over them
    (``flight``), collector leader and facts, consumer slots (restarts, last
    exit), supervisors, producers, the outbox entries set aside
    (``outbox_parked``: store/ops/parked.py's rows, of ``outbox_parked_records``
    records), the keys of the wrong type (``wrong_type_keys``: one line
    each), and totals (the lag: the largest)."""
    out: dict[str, Any] = {"queues": {}, "producers": producers(broker)}
    # The points of the last window_s and one before it, for rates().
    now_ms, readings = broker.statistics.read_queues(queues, recent=int(window_s) + 2)
    lags = broker.lags.read({name: readings[name].partitions for name in queues})
    out["t"] = now_ms
    parked = broker.workflows.parked(queues)
    parts = {name: broker.queues.partition_names(name) for name in queues}
    wrong = broker.statistics.wrong_types([p for names in parts.values() for p in names])
    for name in queues:
        q = out["queues"][name] = _queue_snapshot(readings[name], lags[name], now_ms, window_s)
        q["outbox_parked_records"], q["outbox_parked"] = parked[name]
        q["wrong_type_keys"] = [line for p in parts[name] for line in wrong[p]]
    totals: dict[str, Any] = {key: 0 for key in (*SIZES, *COUNTERS, "consumers", *FLIGHT)}
    total_rates: dict[str, Optional[float]] = {name: None for name in COUNTERS}
    for q in out["queues"].values():
        for key in totals:
            totals[key] += _total_part(q, key)
        for name, value in q["rates"].items():
            if value is not None:
                total_rates[name] = round((total_rates[name] or 0) + value, 2)
    totals["rates"] = total_rates
    totals["lag_s"] = max((q["lag_s"] for q in out["queues"].values() if q["lag_s"] is not None), default=None)
    out["totals"] = totals
    out["schedules"] = schedules(broker, queues)
    return out


def schedules(broker: Broker, queues: Sequence[str]) -> list[dict[str, Any]]:
    """The schedules stored for ``queues`` (schedule_store.row: last and next
    fire, paused, live declarers), by queue and name."""

    return broker.schedules.rows(queues)


def _total_part(q: dict[str, Any], key: str) -> int:
    """What the queue snapshot ``q`` adds to the total ``key``."""
    if key in SIZES:
        return int(q["sizes"].get(key, 0))
    if key == "consumers":
        return len(q["consumers"])
    if key in FLIGHT:
        return int(q[key])
    return int(q["counters"].get(key, 0))


def flight(consumers: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Messages the ``consumers`` (snapshot rows) run now (``in_flight``) and
    the most they may run at once (``concurrency``): each the sum over the
    consumers that report it; an entry that does not (written before
    consumers reported it, or unreadable) adds nothing."""
    return {key: sum(c.get(key) or 0 for c in consumers) for key in FLIGHT}


def _queue_snapshot(r: QueueReading, lag: QueueLag, now_ms: int, window_s: float) -> dict[str, Any]:
    beat_at = {_text(m): at for m, s in r.heartbeats if (at := finite_number(float(s))) is not None}  # ZADD takes +inf
    rows = []
    for (cid, info), held in zip(r.consumers.items(), r.held):
        row = {**ConsumerInfo.from_json(info).to_dict(), "id": _text(cid), "processing": held}
        at = beat_at.get(row["id"])
        row["heartbeat_age_s"] = None if at is None else round((now_ms - at) / 1000.0, 3)
        rows.append(row)
    rows.sort(key=lambda r: (str(r.get("host")), r.get("index") or 0, r.get("pid") or 0))
    return {
        "sizes": {name: r.sizes[name] for name in SIZES},
        "groups": {"waiting": r.groups,
                   "busiest": [{"group": g, "ready": n, "running": m} for g, n, m in r.busiest]},
        "lag_s": None if lag.lag_s is None else round(lag.lag_s, 3),
        "paused": r.paused,
        "partitions": r.partitions,
        "counters": {c: redis_int(r.counters.get(c.encode())) or 0 for c in COUNTERS},
        "rates": rates(_points(r.recent), window_s),
        "consumers": rows,
        **flight(rows),
        "leader": None if r.leader is None else _text(r.leader),
        "gc": {_text(f): n for f, v in r.gc.items() if (n := redis_int(v)) is not None},
        "slots": {_text(f): _record(v, _SLOT_NUMBERS) for f, v in r.slots.items()},
        "supervisors": [info.to_dict() for info in supervisors.live(r.supervisors, now_ms)],
    }


def producers(broker: Broker) -> list[dict[str, Any]]:
    """Producers seen in the last 10 minutes, with their published counts."""
    rows = [{**_record(v, _PRODUCER_NUMBERS), "id": _text(k)} for k, v in broker.statistics.producers().items()]
    return sorted(rows, key=lambda r: str(r["id"]))


# Reading what Redis holds: any client with access may have written anything
# there, so each reader below returns something usable or nothing, never raises.


def _text(value: "bytes | str") -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _json(value: "bytes | str") -> dict[str, Any]:
    """A JSON object, or {} for anything else (not JSON, not an object, too deep)."""
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return {}
    return data if isinstance(data, dict) else {}


def finite_number(value: Any) -> Optional[float]:
    """A JSON number that is finite and within 64 bits, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value if -(2**63) <= value < 2**63 else None


def _record(value: "bytes | str", numbers: Sequence[str]) -> dict[str, Any]:
    """A JSON object's flat fields: strings, booleans, null and numbers (NaN,
    infinities and numbers past 64 bits as None); nested values are dropped,
    and ``numbers`` fields that hold anything but a number are None."""
    out: dict[str, Any] = {}
    for key, item in _json(value).items():
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            out[key] = finite_number(item)
        elif isinstance(item, (str, bool)) or item is None:
            out[key] = None if key in numbers else item
    return out


def _points(raw: Sequence[bytes]) -> list[dict[str, Any]]:
    """History points, oldest first (``raw`` is newest first): those with a
    number ``t``, each keeping only its fields that are numbers."""
    points = []
    for r in reversed(raw):
        point = {k: n for k, v in _json(r).items() if (n := finite_number(v)) is not None}
        if "t" in point:
            points.append(point)
    return points
