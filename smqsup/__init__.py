"""smqsup: a Redis-backed message queue (RedisSMQ design) and the supervisor
that runs its consumers as a service. This docstring is the map.

    queues.yaml ─▶ config ─▶ supervisor/arbiter ─fork─▶ supervisor/child ─▶ consumer ─▶ broker ─▶ scripts/*.lua
    producer ─▶ broker                 gc (one elected per queue, lock) ─▶ broker ─▶ scripts/*.lua
    stats, status, web, cli read what the others write

The path of one message, as a newcomer would follow it:

1. ``Producer.publish`` (producer.py) builds the envelope and its frame
   ``attempts|json`` (message.py) and calls ``Broker.push`` (broker.py), which
   runs publish.lua: LPUSH on the queue's pending list (key names: keys.py).
   With options (delay or at, priority, dedup_key, ttl: options.py checks
   them) it is ``Broker.push_with`` and publish_options.lua: the scheduled
   set for later, the priority set for urgent, a dedup key set in the same
   step, an expiry in the frame's head.
2. The supervisor (supervisor/arbiter.py) has forked a consumer process per
   configured consumer (supervisor/consumers.py); it runs supervisor/child.py,
   which imports the handler (handlers.py) and runs ``Consumer.run``
   (consumer.py).
3. ``Broker.fetch`` moves the frame with BLMOVE from pending to this
   consumer's own processing list, so that it is never only in memory
   (take.lua first, without blocking, when a priority message may be ready;
   nothing while the queue is paused).
4. The handler returns: ack.lua removes the frame and fetches the next one in
   the same round trip. It raises: nack.lua puts it back with one more attempt
   (delayed, in a sorted set the collector promotes with the scheduled
   messages: promote.lua) or, past retry_threshold, in the dead-letter list
   (deadletters.py shows them). ``Reject`` and ``Retry`` (verdicts.py) choose
   the dead letter now, or the retry's delay.
5. The process dies holding it: the arbiter reaps it and returns its list at
   once (supervisor/reclaims.py, ``Broker.reclaim_dead``, reclaim.lua). The
   whole host dies: its heartbeats (supervisor/beats.py) lapse and the
   collector elected among all supervisors (gc.py, lock.py) returns the list
   (``Broker.reclaim_stale``, reclaim_stale.lua), under its lock.

The modules:

- config.py: queues.yaml as frozen dataclasses; validate.py checks each value,
  yamlfile.py reads the file within bounds; defaults.py holds every default.
- producer.py: the public publishing API; options.py: its options checked;
  message.py: the envelope, its frame and ids; keys.py: every Redis key
  name, the key schema at its top; verdicts.py: Reject and Retry.
- broker.py: every Redis operation smqsup does, typed; connection.py: the
  redis-py client, its checks, the error boundary; scripts/: one Lua file per
  operation (shared fragments in scripts/includes/) and its Python wrapper.
- consumer.py: the consumer loop (no fork, no signals); handlers.py: importing
  a handler and ``smqsup check``; standalone.py: ``smqsup consume``, one
  consumer without a supervisor; heartbeat.py: its heartbeat thread.
- supervisor/: the parent (arbiter.py, the loop; states.py, the states and the
  restart policy; decide.py, the pure decisions; consumers.py, beats.py,
  reclaims.py, resources.py, web_child.py, the I/O; plan.py, the SIGHUP diff;
  systemd.py) and the child (child.py, protocol.py the slot they share).
- gc.py: the per-queue garbage collector; lock.py: its leader lock.
- info.py: the schema of a consumer's registry entry; readings.py: what the
  statistics read of a queue; stats.py: history and snapshots; status.py:
  ``smqsup status``; deadletters.py: the dead-letter rows and actions of
  ``smqsup dlq`` and the web UI; browse.py: listing and removing waiting
  messages (``smqsup messages`` / ``remove``, the web UI).
- web/: the web UI, JSON API and /metrics (server.py, args.py, source.py,
  security.py, metrics.py, jsonout.py; the page in static/).
- embedded.py and redis_server.py: the embedded redis-server; cli.py: the
  ``smqsup`` command; errors.py: the exception tree; safe.py and logs.py:
  text made safe to show, and log setup.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Producer", "Message", "Reject", "Retry", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so `import smqsup` in the supervisor parent stays light.
    if name == "Producer":
        from smqsup.client.producer import Producer

        return Producer
    if name == "Message":
        from smqsup.message import Message

        return Message
    if name in ("Reject", "Retry"):
        from smqsup.worker import verdicts

        return getattr(verdicts, name)
    raise AttributeError(name)
