"""``GET /metrics``: a statistics snapshot in the Prometheus text exposition
format, version 0.0.4 (HELP and TYPE lines, escaped label values).

Every series comes from one ``stats.snapshot``: queue sizes and counters are
exact (the scripts count them), per-consumer values are those of each
consumer's last heartbeat (about a second old). Consumer series carry the
consumer id, so a replaced consumer starts new series rather than resetting
an old counter; supervisor series carry its HOST:PID the same way. A queue's
lag comes with the snapshot too (a round trip of its own, store/ops/lag.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from smqsup.collector.stats import COUNTERS, SIZES

#: The Content-Type of the text format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Sample = tuple[Mapping[str, str], float]

_SURROGATE = re.compile(r"[\ud800-\udfff]")


def escape_label(value: str) -> str:
    """A label value escaped per the text format: backslash, double quote,
    newline; lone surrogates (not UTF-8) become U+FFFD."""
    value = _SURROGATE.sub("\ufffd", value)
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text escaped per the text format: backslash and newline."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if value != value:  # NaN
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def family(name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> list[str]:
    """The lines of one metric family: HELP, TYPE, then one line per sample.

    ``name`` is the family name; a counter's samples are written with the
    ``_total`` suffix that the format expects (``name`` must not carry it).
    """
    sample_name = f"{name}_total" if kind == "counter" else name
    lines = [f"# HELP {sample_name} {escape_help(help_text)}", f"# TYPE {sample_name} {kind}"]
    for labels, value in samples:
        text = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
        lines.append(f"{sample_name}{{{text}}} {_number(value)}" if text else f"{sample_name} {_number(value)}")
    return lines


def _float(value: Any) -> Optional[float]:
    """``value`` as a sample value, or None when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an int past the float range
        return None


def _label(value: Any) -> str:
    return "" if value is None else str(value)


def _consumer_labels(queue: str, c: Mapping[str, Any]) -> dict[str, str]:
    return {"queue": queue, "consumer": _label(c.get("id")), "host": _label(c.get("host")),
            "pid": _label(c.get("pid"))}


def _consumer_samples(queues: Mapping[str, Any], field: str) -> list[Sample]:
    """One sample per consumer that reports a number in ``field``."""
    out: list[Sample] = []
    for name, q in queues.items():
        for c in q["consumers"]:
            value = _float(c.get(field))
            if value is not None:
                out.append((_consumer_labels(name, c), value))
    return out


def _queue_samples(queues: Mapping[str, Any], field: str) -> list[Sample]:
    """One sample per queue whose snapshot holds a number in ``field``."""
    return [({"queue": name}, value) for name, q in queues.items() if (value := _float(q.get(field))) is not None]


def render(snap: Mapping[str, Any]) -> str:
    """The whole exposition for one ``stats.snapshot`` (ends with a newline)."""
    queues: Mapping[str, Any] = dict(sorted(snap["queues"].items()))
    lines = _queue_families(queues) + _supervisor_families(queues) + _consumer_families(queues)
    lines += family("smqsup_gc_leader", "gauge", "1 for the process currently elected garbage collector of the queue.",
                    [({"queue": n, "owner": q["leader"]}, 1) for n, q in queues.items() if q["leader"]])
    lines += family("smqsup_consumer_slot_restarts", "counter", "Restarts of a consumer slot (host:#index).",
                    [({"queue": n, "slot": slot}, restarts) for n, q in queues.items()
                     for slot, v in sorted(q["slots"].items()) if (restarts := _float(v.get("restarts"))) is not None])
    lines += family("smqsup_producer_messages", "counter", "Messages published by a producer seen in the last "
                    "10 minutes.", [({"producer": str(p["id"])}, published) for p in snap.get("producers", [])
                                    if (published := _float(p.get("published"))) is not None])
    lines += _schedule_families(snap.get("schedules", []))
    lines += family("smqsup_outbox_parked_entries", "gauge", "Outbox entries Redis refused, set aside and tried "
                    "again with a backoff (children to tell, batch ends, batch callbacks), of the records status shows.",
                    [({"queue": n}, sum(_float(p.get("entries")) or 0 for p in q.get("outbox_parked") or []))
                     for n, q in queues.items()])
    lines += family("smqsup_wrong_type_keys", "gauge", "Keys of the queue that hold another type than smqsup needs "
                    "(what needs them waits until they are repaired).",
                    [({"queue": n}, len(q.get("wrong_type_keys") or [])) for n, q in queues.items()])
    return "\n".join(lines) + "\n"


def _queue_families(queues: Mapping[str, Any]) -> list[str]:
    """Each queue's sizes, partitions, paused flag, event counters, consumers and messages in flight."""
    lines = family("smqsup_queue_messages", "gauge",
                   "Messages in the queue by state: pending (ready), processing (held by a consumer), "
                   "scheduled (published for later), delayed (retries waiting), dead (dead letters).",
                   [({"queue": n, "state": s}, q["sizes"][s]) for n, q in queues.items() for s in SIZES])
    lines += family("smqsup_queue_partitions", "gauge", "Partitions (hash tags) the queue spreads over; every "
                    "other figure of the queue is their sum.",
                    [({"queue": n}, q.get("partitions") or 1) for n, q in queues.items()])
    lines += family("smqsup_queue_lag_seconds", "gauge", "Age of the queue's oldest ready message (the next in "
                    "line), by the Redis clock; 0 when none is ready, no sample when its id holds no time.",
                    _queue_samples(queues, "lag_s"))
    lines += family("smqsup_queue_paused", "gauge", "1 while the queue is paused (its consumers take nothing), "
                    "else 0.", [({"queue": n}, 1 if q.get("paused") else 0) for n, q in queues.items()])
    lines += family("smqsup_messages", "counter",
                    f"Queue events since the queue was created, by event ({', '.join(COUNTERS)}).",
                    [({"queue": n, "event": e}, q["counters"][e]) for n, q in queues.items() for e in COUNTERS])
    lines += family("smqsup_consumers", "gauge", "Registered consumers of the queue.",
                    [({"queue": n}, len(q["consumers"])) for n, q in queues.items()])
    lines += family("smqsup_queue_in_flight", "gauge", "Messages the queue's consumers run now (the sum over those "
                    "that report it).", _queue_samples(queues, "in_flight"))
    lines += family("smqsup_queue_concurrency", "gauge", "Messages the queue's consumers may run at once (the sum of "
                    "their concurrency).", _queue_samples(queues, "concurrency"))
    return lines


def _supervisor_families(queues: Mapping[str, Any]) -> list[str]:
    """What each supervisor of each queue aims at, and whether its last roll failed."""
    supervisors = [({"queue": n, "supervisor": f"{s['host']}:{s['pid']}"}, s) for n, q in queues.items()
                   for s in q.get("supervisors") or []]
    lines = family("smqsup_consumers_target", "gauge", "Consumers of the queue the supervisor aims at now (its "
                   "autoscaler's choice, else its fixed count).",
                   [(labels, target) for labels, s in supervisors if (target := _float(s.get("target"))) is not None])
    lines += family("smqsup_roll_failed", "gauge", "1 while the supervisor's last roll of the queue's consumers "
                    "failed, else 0.", [(labels, 0 if s.get("roll_failed") is None else 1) for labels, s in supervisors])
    return lines


def _consumer_families(queues: Mapping[str, Any]) -> list[str]:
    """Each consumer's CPU, memory, messages, busy flag, messages in flight and heartbeat age."""
    lines = family("smqsup_consumer_cpu_percent", "gauge", "CPU use of the consumer process, percent of one core.",
                   _consumer_samples(queues, "cpu"))
    lines += family("smqsup_consumer_rss_bytes", "gauge", "Resident memory of the consumer process.",
                    _consumer_samples(queues, "rss"))
    lines += family("smqsup_consumer_uss_bytes", "gauge", "Memory unique to the consumer process.",
                    _consumer_samples(queues, "uss"))
    lines += family("smqsup_consumer_messages", "counter", "Messages the consumer process received.",
                    _consumer_samples(queues, "received"))
    lines += family("smqsup_consumer_busy", "gauge", "1 while the consumer handles a message, else 0.",
                    [(_consumer_labels(n, c), 1.0 if c.get("busy") else 0.0)
                     for n, q in queues.items() for c in q["consumers"]])
    lines += family("smqsup_consumer_in_flight", "gauge", "Messages the consumer process runs now.",
                    _consumer_samples(queues, "in_flight"))
    lines += family("smqsup_consumer_concurrency", "gauge", "Messages the consumer process may run at once "
                    "(the queue's concurrency).", _consumer_samples(queues, "concurrency"))
    lines += family("smqsup_consumer_heartbeat_age_seconds", "gauge",
                    "Age of the consumer's last heartbeat, by the Redis clock.",
                    _consumer_samples(queues, "heartbeat_age_s"))
    return lines


def _schedule_families(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Each schedule's last and next fire, paused flag, live declarations and fires."""
    rows = list(rows)

    def samples(field: str) -> list[Sample]:
        return [({"schedule": str(r["name"]), "queue": str(r["queue"])}, value) for r in rows
                if (value := _float(r.get(field))) is not None]

    lines = family("smqsup_schedule_last_fire_seconds", "gauge", "Slot of the schedule's last fire, unix seconds "
                   "(the Redis clock).", samples("last_fire"))
    lines += family("smqsup_schedule_next_fire_seconds", "gauge", "Slot the schedule fires next, unix seconds (in "
                    "the past: due, not fired yet).", samples("next_fire"))
    lines += family("smqsup_schedule_paused", "gauge", "1 while the schedule is paused, else 0.",
                    [({"schedule": str(r["name"]), "queue": str(r["queue"])}, 1 if r.get("paused") else 0)
                     for r in rows])
    lines += family("smqsup_schedule_declarers", "gauge", "Supervisors whose config declares the schedule now "
                    "(0: it is not fired).", samples("declarers"))
    lines += family("smqsup_schedule_fires", "counter", "Messages the schedule has fired.", samples("fires"))
    return lines
