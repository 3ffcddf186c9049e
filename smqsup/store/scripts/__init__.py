"""Typed Python wrappers of the Lua scripts in this directory, one per operation.

Each wrapper returns a ``Call``: the script, its KEYS and ARGV in the order
the script's header gives (written there once), and the reader of its reply.
``call.run(client)`` sends it alone; ``Batch`` sends several calls and plain
commands in one pipelined round trip. Every name below is also a name of
this package (``from smqsup.store import scripts``; ``scripts.ack(...)``,
``scripts.Rate``), but the schedules' wrappers, imported as a module.

- calls.py: Script (a Lua file, includes resolved, EVALSHA then EVAL),
  Call, Batch, and the readers and argument helpers the wrappers share.
- message_calls.py: publish, publish_options, take, give_back, screen, ack, nack, promote, advance,
  producer_stats; their results, the rate limit (Rate), the outcomes.
- registry_calls.py: heartbeat, stale, the reclaims (reclaim, reclaim_stale,
  return_free), the leader lock (lock_*, compare_and_delete).
- content_calls.py: peek_range (bounded listings), remove, dlq_requeue,
  dlq_purge, partitions, group_pause and group_repair (message groups:
  includes/groups.lua has their design).
- schedule_calls.py: the schedule_*.lua scripts (declare, fire, pause...).
- tracking_calls.py: progress, cancel (the scripts about what becomes of a message after publish).
- workflow_calls.py: hold, depend, unblock (dependencies between messages), batch_settle,
  outbox_park and outbox_unpark (outbox entries set aside: store/ops/parked.py).
- lag.lua (a partition's ready count and next frames' heads): ``LAG`` here;
  its one caller, which reads its reply, is store/ops/lag.py.
- *.lua, includes/*.lua: the scripts, each opening with its KEYS and ARGV.
- README.md: the key layout, the frame heads and what each script does (the start of a wire format).
"""

from __future__ import annotations

from smqsup.store.scripts import content_calls, message_calls, registry_calls, tracking_calls, workflow_calls
from smqsup.store.scripts.calls import Batch, Call, Lock, Script, ScriptClient, meta_json
from smqsup.store.scripts.content_calls import (
    Peeked,
    ReadBudget,
    dlq_purge,
    dlq_requeue,
    group_pause,
    group_repair,
    partitions,
    peek_range,
    remove,
)
from smqsup.store.scripts.message_calls import (
    DEAD,
    DELAYED,
    EXPIRED,
    GIVEN_BACK,
    GONE,
    HANDLE,
    LATE,
    NO_RATE,
    NO_TURN,
    RATE_LIMITED,
    RETRIED,
    TAKE_MAX,
    AckResult,
    NackResult,
    Options,
    PromoteResult,
    Rate,
    TakeResult,
    ack,
    advance,
    give_back,
    nack,
    producer_stats,
    promote,
    publish,
    publish_options,
    screen,
    take,
)
from smqsup.store.scripts.registry_calls import (
    Cancel,
    ReclaimResult,
    compare_and_delete,
    heartbeat,
    lock_acquire,
    lock_release,
    lock_renew,
    reclaim,
    reclaim_stale,
    return_free,
    stale,
)
from smqsup.store.scripts.tracking_calls import cancel, progress
from smqsup.store.scripts.workflow_calls import batch_settle, depend, hold, outbox_park, outbox_unpark, unblock

#: lag.lua: reads only; store/ops/lag.py (Lags) calls it and reads its reply.
LAG = Script("lag")

#: Every script but the schedules' (schedules.ALL).
ALL = (*message_calls.SCRIPTS, *registry_calls.SCRIPTS, *content_calls.SCRIPTS, *tracking_calls.SCRIPTS, *workflow_calls.SCRIPTS, LAG)

__all__ = [
    "ALL", "LAG", "Cancel", "DEAD", "DELAYED", "EXPIRED", "GIVEN_BACK", "GONE", "HANDLE", "LATE", "NO_RATE",
    "NO_TURN", "RATE_LIMITED", "RETRIED", "TAKE_MAX", "AckResult", "Batch", "Call", "Lock", "NackResult", "Options", "Peeked",
    "PromoteResult", "Rate", "ReadBudget", "ReclaimResult", "Script", "ScriptClient", "TakeResult", "ack", "advance",
    "compare_and_delete", "dlq_purge", "dlq_requeue", "give_back", "group_pause", "heartbeat", "lock_acquire", "lock_release", "lock_renew",
    "meta_json", "nack", "partitions", "group_repair", "peek_range", "producer_stats", "progress", "cancel", "promote", "publish",
    "publish_options", "batch_settle", "depend", "hold", "outbox_park", "outbox_unpark", "unblock",
    "reclaim", "reclaim_stale", "remove", "return_free", "screen", "stale", "take",
]
