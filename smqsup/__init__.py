"""smqsup: a Redis-backed message queue (RedisSMQ design) and the supervisor
that runs its consumers as a service. This docstring is the map.

    queues.yaml ─▶ config/ ─▶ supervisor/ ─fork─▶ worker/ (the consumer engine, handlers) ─▶ store/ ─▶ scripts/*.lua
    client/ (Producer, AsyncProducer) ─▶ store/          collector/ (elected: reclaim, promote, schedules, stats) ─▶ store/
    views/, cli/, web/ read what the others write, through store/

Each subpackage's ``__init__`` maps its own modules, a line each. Imports run
down this list, never up or across: the top-level leaves, config/, store/,
launch/, client/ and collector/, worker/ and views/, web/, supervisor/, cli/
(tests/test_layout.py checks it, and that only store/ talks to Redis).

The path of one message, as a newcomer would follow it:

1. ``Producer.publish`` (client/producer.py) builds the envelope and its
   frame ``attempts|json`` (framing.py) and calls ``broker.messages.push``
   (store/ops/messages.py), which runs publish.lua: LPUSH on the queue's pending
   list (key names: keys.py). With options (delay or at, priority, dedup_key,
   ttl: client/options.py checks them) it is ``push_with`` and
   publish_options.lua.
2. The supervisor (supervisor/arbiter.py) has forked a consumer process per
   configured consumer (supervisor/consumers.py); it runs supervisor/child.py,
   which imports the handler (worker/handlers.py) and runs the consumer
   engine (worker/consumer.py).
3. The engine takes the next frame (worker/fetching.py: BLMOVE from pending
   to this consumer's own processing list, so that it is never only in
   memory; take.lua when a priority message may be ready; nothing while the
   queue is paused) and runs the handler (worker/runners.py: inline, on
   threads or as asyncio tasks).
4. The handler returns: ack.lua removes the frame and fetches the next one in
   the same round trip (worker/settling.py). It raises: nack.lua puts it back
   with one more attempt (delayed, in a sorted set the collector promotes) or,
   past retry_threshold, in the dead-letter list (views/deadletters.py shows
   them). ``Reject`` and ``Retry`` (worker/verdicts.py) choose the dead letter
   now, or the retry's delay.
5. The process dies holding it: the arbiter reaps it and returns its list at
   once (supervisor/reclaims.py, reclaim.lua). The whole host dies: its
   heartbeats (supervisor/beats.py) lapse and the collector elected among all
   supervisors (collector/collector.py, collector/lock.py) returns the list
   (reclaim_stale.lua), under its lock.

The subpackages:

- config/: queues.yaml read within bounds and validated into frozen dataclasses.
- store/: the one way to Redis: the Broker, its operation classes by concern,
  cluster routing, the Lua scripts (store/scripts/).
- launch/: redis-server processes smqsup starts itself: the embedded default, private ones for tests.
- client/: what programs publish with: the Producer, the AsyncProducer (asyncio) and their options.
- worker/: the consumer engine (one, at any concurrency), handlers, verdicts.
- collector/: per queue, the elected housekeeper: reclaim, promote, schedules, stats.
- views/: what operators read: status, listings, dead letters, schedules.
- web/: the web UI, its JSON API and /metrics.
- testing/: the testing kit, a pytest plugin: a queue's handler run in the test's process, on the real scripts.
- supervisor/: the parent process (arbiter, states, decisions) and the child's start.
- cli/: the ``smqsup`` command, one module per family of subcommands.

The leaves everyone uses, and the public face:

- __init__.py: this map, and the public names (Producer, AsyncProducer, Message, Reject, Retry, HookFailed,
  MessageFailed, ResultUnknown).
- __main__.py: ``python -m smqsup``, the same as the ``smqsup`` command.
- errors.py: the one exception tree, rooted at SmqsupError.
- defaults.py: every default value, one line each, its unit in its name.
- keys.py: the only place a Redis key name is formed; the key schema at its top.
- message.py: the message envelope, and Message, what a handler receives.
- framing.py: a message's frame on the wire: the head the scripts read and rewrite, then the payload.
- deadletter.py: one dead-letter entry (metadata and frame), read through one schema.
- ids.py: message ids, unique across processes and sorted by creation time.
- safe.py: text made safe to show: credentials masked, control characters escaped.
- logs.py: log setup for the command line (journald priorities under systemd).
- tracing.py: OpenTelemetry spans of publishes and attempts (imported only where tracing is on).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Producer", "AsyncProducer", "Message", "Event", "Reject", "Retry", "MessageFailed", "ResultUnknown",
           "HookFailed", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so `import smqsup` in the supervisor parent stays light.
    if name == "Producer":
        from smqsup.client.producer import Producer

        return Producer
    if name == "AsyncProducer":
        from smqsup.client.aio_producer import AsyncProducer

        return AsyncProducer
    if name == "Message":
        from smqsup.message import Message

        return Message
    if name == "Event":
        from smqsup.store.core.event_entries import Event

        return Event
    if name in ("Reject", "Retry"):
        from smqsup.worker import verdicts

        return getattr(verdicts, name)
    if name in ("MessageFailed", "ResultUnknown", "HookFailed"):
        from smqsup import errors

        return getattr(errors, name)
    raise AttributeError(name)
