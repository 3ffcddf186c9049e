"""The only place a Redis key name is formed.

Key schema. ``ns`` is the namespace (default ``smq``). Every key starts with
``ns:``, so a Redis ACL user limited to the pattern ``~ns:*`` can do all smqsup
does. Every key of queue ``Q`` carries the hash tag ``{Q}``, and the
namespace-wide producer keys the tag ``{ns}``, so all keys one script touches
live in one Redis Cluster slot::

    ns:{Q}:pending           LIST  frames waiting; producers LPUSH, consumers
                                   take from the right (oldest first)
    ns:{Q}:priority          ZSET  ready frames of priority 1-9 (when the pending
                                   list is not empty); score = (9 - priority)
                                   * 2^44 + a sequence number: the lowest score
                                   is the highest priority, oldest first
    ns:{Q}:priority:seq      STR   INCR counter giving that sequence number
    ns:{Q}:processing:CID    LIST  frames held by consumer CID (0 or 1 normally)
    ns:{Q}:scheduled         ZSET  frames published with a delay or a due time;
                                   score = due time in ms since the epoch,
                                   Redis clock
    ns:{Q}:delayed           ZSET  frames waiting to be retried; score = due
                                   time in ms since the epoch, Redis clock
    ns:{Q}:ready_at          ZSET  ID -> when a message made ready after its
                                   publish (a due delay, a retry, a reclaim, a
                                   release) became ready (ms, Redis clock): its
                                   lag counts from there (includes/ready_at.lua;
                                   the newest kept)
    ns:{Q}:paused            STR   present while the queue is paused: JSON
                                   {"at_ms", "by"}; consumers take nothing
    ns:{Q}:rate              STR   the queue's rate limit state: the GCRA
                                   theoretical arrival time of the next handler
                                   start, µs since the epoch, Redis clock;
                                   expires once past (includes/rate.lua)
    ns:{Q}:groups:ready      ZSET  ready frames of every message group, score 0,
                                   member "LEN:GROUP\tPSEQ\nFRAME": one group's
                                   frames are one lexicographic range, in the
                                   order they go (scripts/includes/groups.lua)
    ns:{Q}:groups:count      ZSET  GROUP -> its ready frames (the largest backlogs)
    ns:{Q}:groups:state      HASH  s:GROUP -> t (its ticket "*GROUP" is in the
                                   pending list), b (blocked at its
                                   group_concurrency) or w (waiting for its
                                   rate); p:GROUP -> paused (JSON {"at_ms", "by"})
    ns:{Q}:groups:running    HASH  GROUP -> its frames in consumers' lists
    ns:{Q}:groups:rate       ZSET  GROUP -> its GCRA theoretical arrival time (µs)
    ns:{Q}:groups:wait       ZSET  GROUP -> when its rate lets it start again (µs)
    ns:{Q}:dedup:KEY         STR   id of the message published with dedup key
                                   KEY; expires after the queue's dedup_ttl
    ns:{Q}:tracked           HASH  tracked messages (result_ttl): ID -> state
                                   record JSON, ID:r -> result JSON, ID:p ->
                                   progress JSON (scripts/includes/track.lua);
                                   its end published on channel
                                   ns:{Q}:tracked:ID
    ns:{Q}:tracked:expiry    ZSET  ID of an ended tracked message, score = when
                                   its fields go (ms, Redis clock)
    ns:{Q}:cancel            ZSET  ids of messages whose cancel was asked, score
                                   = when (ms, Redis clock); their consumers stop
                                   them; an id goes when its message ends
                                   (scripts/includes/track.lua)
    ns:{Q}:options           HASH  what the queue's consumers declared for
                                   producers: result_ttl (s, 0: not tracked),
                                   events_max (0: no events)
    ns:{Q}:events            STREAM the lifecycle of each message whose head
                                   has events_max: entries {event, id,
                                   attempts[, data]}, capped at about
                                   events_max (scripts/includes/track.lua)
    ns:{Q}:deps              ZSET  the queue's dependencies, all of score 0
                                   (lexicographic ranges): children waiting
                                   for its messages, the outbox of their
                                   release, its own children's waits and
                                   parents' outcomes (scripts/includes/deps.lua)
    ns:{Q}:outbox:parked     ZSET  outbox entries of the deps set whose target
                                   Redis refused, set aside (store/ops/parked.py):
                                   score = when to try again (ms, Redis clock)
    ns:{Q}:outbox:failures   HASH  "KIND\tQUEUE\tID" (a target of parked
                                   entries) -> JSON {failures, since_ms,
                                   retry_ms, entries, parked, reason}
    ns:{Q}:blocked           HASH  ID -> "D:T:F|frame" of a message held until
                                   its parents are done (store/ops/workflows.py)
    ns:{Q}:batch:BID         HASH  batch BID, whose home is queue Q (its callback's
                                   queue): closed, fired, done, failed, its
                                   callbacks' frames (scripts/batch_settle.lua)
    ns:{Q}:batch:BID:members SET   its members' ids; :ended SET those that ended;
                                   :failures LIST the first 100 failed ones
    ns:{Q}:batches           ZSET  open batches whose home is Q, score = when
                                   opened (ms)
    ns:{Q}:dead              LIST  dead letters: one meta JSON line, "\\n", the
                                   frame (newest on the left)
    ns:{Q}:dead:purging:TOK  LIST  a whole dead-letter list set aside by a purge
                                   while it frees the dedup keys of its
                                   messages; deleted after, expires in an hour
    ns:{Q}:consumers         HASH  consumer id -> registration JSON (pid, host,
                                   started_at, cpu, memory); how a collector
                                   finds processing lists without scanning keys
    ns:{Q}:heartbeats        ZSET  consumer id, score = time of its last
                                   heartbeat in ms, Redis clock
    ns:{Q}:retired           ZSET  consumer ids unregistered by a reclaim, score =
                                   when (ms, Redis clock); the collector watches
                                   their lists for RETIRED_WATCH_S afterwards
    ns:{Q}:gc:lock           STR   owner token of the queue's elected garbage
                                   collector (SET NX PX; token = host:pid:rand)
    ns:{Q}:gc                HASH  collector facts: reclaims, orphans,
                                   leader_since_ms, leader changes
    ns:{Q}:counters          HASH  queue-wide event counts (late_acks,
                                   reclaimed, dead_lettered, ...)
    ns:{Q}:series            LIST  per-second history points (JSON), newest on
                                   the left, trimmed to 900 by the collector
    ns:{Q}:slots             HASH  "host:#index" -> restarts and last exit cause
                                   of that consumer slot (its supervisor writes)
    ns:{Q}:supervisors       HASH  "HOST:PID" of a supervisor running consumers
                                   of Q -> what it says of them: target count,
                                   bounds, running, roll, last scale event
                                   (JSON, store/ops/supervisors.py), rewritten
                                   every few seconds; each write sets the
                                   hash's expiry, readers drop stale fields
    ns:{Q}:schedules         HASH  schedule name -> its definition (canonical JSON,
                                   schedule.py), upserted by the supervisors
                                   whose config declares a schedule on queue Q
    ns:{Q}:schedule:NAME     HASH  schedule NAME's state: since_ms (no slot up to
                                   it fires), last_fire_ms (the slot last fired:
                                   the fire id with NAME), fired_at_ms, last_id,
                                   fires
    ns:{Q}:schedule:NAME:declarers
                             ZSET  supervisor id, score = until when its
                                   declaration holds (ms, Redis clock)
    ns:{Q}:schedule:NAME:paused
                             STR   present while the schedule is paused: JSON
                                   {"at_ms", "by"}; its slots are skipped
    ns:{Q}:partitions        STR   how many partitions queue Q has (absent: 1):
                                   the most any supervisor declared (they never
                                   shrink); producers read it. Partition i > 0
                                   of Q is the queue named "Q~i" (keys {Q~i}:
                                   a hash tag, so a Cluster slot, of its own),
                                   whose own ns:{Q~i}:partitions is a copy of
                                   the count, written before a raise: what the
                                   rate scripts of that slot divide the
                                   queue's limit by (includes/rate.lua)
    ns:{Q}:partition:seq     STR   INCR counter: each consumer's ticket, which
                                   names the partition it prefers
    ns:queues                SET   names of the queues ever published to or
                                   consumed from (not hash-tagged: global)
    ns:{ns}:producers        HASH  producer id -> {host, pid, published, rate,
                                   seen_at_ms}, flushed about once a second
    ns:{ns}:producers:seen   ZSET  producer id, score = last flush in ms; entries
                                   older than 10 minutes are dropped
    ns:{ns}:roll:HOST:PID    LIST  ``smqsup roll``'s requests to one supervisor:
                                   the queues to roll (JSON), taken on SIGUSR1

A frame is ``head + b"|" + payload``, the head ``<attempts>``,
``<attempts>:<priority>:<expires_ms>`` or, tracked, that and
``:<result_ttl_s>``, and with events ``:<events_max>`` too (framing.py): the attempt count and
what the scripts route by travel beside the payload bytes, and scripts
rewrite only the head, never the payload (DESIGN section 8: no JSON
re-encoding inside Lua).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: The keys of a queue that take no argument: the QueueKeys attribute, and
#: what follows the queue's prefix ``ns:{Q}:`` (the schema above says what each holds).
_NAMED = {
    "pending": "pending", "delayed": "delayed", "scheduled": "scheduled", "priority": "priority",
    "rate": "rate", "priority_seq": "priority:seq", "ready_at": "ready_at", "paused": "paused",
    "tracked": "tracked", "tracked_expiry": "tracked:expiry", "cancel": "cancel", "events": "events",
    "deps": "deps", "outbox_parked": "outbox:parked", "outbox_failures": "outbox:failures",
    "blocked": "blocked", "batches": "batches", "options": "options", "dead": "dead",
    "consumers": "consumers", "heartbeats": "heartbeats", "retired": "retired", "gc_lock": "gc:lock",
    "gc": "gc", "counters": "counters", "partitions": "partitions", "partition_seq": "partition:seq",
    "series": "series", "slots": "slots", "supervisors": "supervisors", "schedules": "schedules",
}
#: The keys of a queue formed with an argument: the QueueKeys attribute (a
#: function of that argument), and what follows the prefix, the argument in
#: place of ``{}``. Any text may be the argument: it follows the hash tag, so
#: it cannot change the slot (schedule names are queue-name-like: no ':').
_OF = {
    "processing": "processing:{}",  # the processing list of consumer {}
    "dedup": "dedup:{}",  # the id of the message published with dedup key {}
    "dead_aside": "dead:purging:{}",  # where the purge of token {} sets the whole dead-letter list aside
    "tracked_channel": "tracked:{}",  # where each new state of tracked message {} is published
    # batch {}, whose home is this queue: its hash and its sets
    "batch": "batch:{}", "batch_members": "batch:{}:members", "batch_ended": "batch:{}:ended",
    "batch_failures": "batch:{}:failures",
    # schedule {}: its state hash, its declarers, its paused flag
    "schedule": "schedule:{}", "schedule_declarers": "schedule:{}:declarers", "schedule_paused": "schedule:{}:paused",
}


class _Keys:
    """The types of the keys in _NAMED and _OF (QueueKeys sets them; a plain
    class, so that the dataclass does not take them for fields)."""

    pending: str
    delayed: str
    scheduled: str
    priority: str
    rate: str
    priority_seq: str
    ready_at: str
    paused: str
    tracked: str
    tracked_expiry: str
    cancel: str
    events: str
    deps: str
    outbox_parked: str
    outbox_failures: str
    blocked: str
    batches: str
    options: str
    dead: str
    consumers: str
    heartbeats: str
    retired: str
    gc_lock: str
    gc: str
    counters: str
    partitions: str
    partition_seq: str
    series: str
    slots: str
    supervisors: str
    schedules: str
    #: The group keys, in the order the scripts take them (includes/groups.lua):
    #: ready, count, state, rate, wait, running.
    groups: tuple[str, str, str, str, str, str]
    processing: Callable[[str], str]
    dedup: Callable[[str], str]
    dead_aside: Callable[[str], str]
    tracked_channel: Callable[[str], str]
    batch: Callable[[str], str]
    batch_members: Callable[[str], str]
    batch_ended: Callable[[str], str]
    batch_failures: Callable[[str], str]
    schedule: Callable[[str], str]
    schedule_declarers: Callable[[str], str]
    schedule_paused: Callable[[str], str]


@dataclass(frozen=True)
class QueueKeys(_Keys):
    """The keys of one queue in one namespace, each name (each template of
    one with an argument) formed once, when the instance is made (the
    consumer's hot path asks for several per message); the Broker keeps one
    instance per queue."""

    namespace: str
    queue: str

    def __post_init__(self) -> None:
        prefix = f"{self.namespace}:{{{self.queue}}}"
        p = f"{prefix}:groups"
        groups = (f"{p}:ready", f"{p}:count", f"{p}:state", f"{p}:rate", f"{p}:wait", f"{p}:running")
        keys = {"groups": groups, **{name: f"{prefix}:{suffix}" for name, suffix in _NAMED.items()},
                **{name: _former(prefix, template) for name, template in _OF.items()}}
        for name, value in keys.items():
            object.__setattr__(self, name, value)  # (frozen: set once, here)


def _former(prefix: str, template: str) -> Callable[[str], str]:
    """The key ``template`` (of _OF) names after ``prefix``, its argument in place of ``{}``."""
    head, _, tail = template.partition("{}")
    head = f"{prefix}:{head}"
    return lambda arg: f"{head}{arg}{tail}"


#: Between a queue's name and its partition's number ("orders~2"): a
#: character no queue name may hold (config.names.queue_or_namespace).
PARTITION_SEP = "~"


def partition_name(queue: str, index: int) -> str:
    """The queue holding partition ``index`` of ``queue``: partition 0 is the
    queue itself, so a queue given partitions later keeps its messages."""
    return queue if index == 0 else f"{queue}{PARTITION_SEP}{index}"


def partition_names(queue: str, count: int) -> list[str]:
    return [partition_name(queue, i) for i in range(max(1, count))]


def logical_name(name: str) -> str:
    """The queue a partition belongs to (a queue's own name unchanged)."""
    return name.partition(PARTITION_SEP)[0]


def queues_set(namespace: str) -> str:
    """The global set naming every known queue of ``namespace``."""
    return f"{namespace}:queues"


def producers_hash(namespace: str) -> str:
    """Per-producer statistics of ``namespace`` (tagged {namespace} so that it
    shares a Cluster slot with producers_seen)."""
    return f"{namespace}:{{{namespace}}}:producers"


def producers_seen(namespace: str) -> str:
    """When each producer last flushed its statistics (same slot as producers_hash)."""
    return f"{namespace}:{{{namespace}}}:producers:seen"


def roll_request(namespace: str, host: str, pid: int) -> str:
    """``smqsup roll``'s requests to the supervisor ``pid`` of ``host``: a
    LIST of JSON {token, queues: names or null for every queue}, taken by
    that supervisor on SIGUSR1, gone after a minute otherwise."""
    return f"{namespace}:{{{namespace}}}:roll:{host}:{pid}"
