"""smqsup.worker: what runs in a consumer process, a line per module.

- consumer.py: Consumer, the one engine (its loop and the parts it composes), any concurrency.
- fetching.py: Fetcher, the current partition, paused flag and rate limit; the take, BLMOVE and screen calls.
- starting.py: Starter, the frames taken started in take order: at once, or prefetched, waiting for a slot.
- stopping.py: Stopper, messages stopped before their handlers end: past message_timeout, or cancelled.
- settling.py: Settler, the outcomes not yet recorded and the round trip that records them (ack.lua, nack.lua).
- in_flight.py: InFlight, the attempts running (with their deadlines), the frames booked for later and prefetched.
- runners.py: InlineRunner (concurrency 1) and LoopRunner (tasks or threads beside an event loop).
- outcomes.py: OutcomeDecider, the Outcome of a frame and of its handler's end (Reject, Retry, failure, timeout).
- recovery.py: Recovery, the backoff after a Redis error and the look at our own list after it.
- registration.py: Registration, entering, renewing and leaving the queue's consumer registry.
- consumer_state.py: the records the parts share (Identity, ConsumerStats, Outcome, Attempt) and the hook types.
- partitions.py: Partitions, which partition of a queue a consumer works on.
- verdicts.py: Reject and Retry, what a handler may raise.
- handlers.py: importing a handler and a queue's hooks, and ``smqsup check``.
- process_hooks.py: Stack, a queue's hooks around its handler (before_process, after_process).
- sources.py: Sources, the files a handler's import loaded, and whether they changed on disk since.
- standalone.py: ``smqsup consume``, one consumer without a supervisor.
- heartbeat.py: LivenessThread, the heartbeats (and a collector) of a standalone consumer.
"""
