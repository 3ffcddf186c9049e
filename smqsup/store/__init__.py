"""smqsup.store: the one way to Redis. Nothing outside this package imports
redis-py or touches a client; everything else holds a Broker (or, in
asyncio, an AsyncBroker) and calls the operation classes it exposes
(``broker.messages.fetch(...)``), which turn redis-py's errors into smqsup's.

    Broker ─ ops/ (the operation classes) ─┬─ sync/ (redis-py: session, connections, cluster routing)
    AsyncBroker (aio/) ────────────────────┴─ aio/  (redis.asyncio: the same, awaited)
                 both call core/ (what to send, how to read the reply, no I/O)
                 and scripts/ (the Lua, wrapped; what each script does: scripts/README.md)

Rooms, lowest first (tests/test_layout.py holds the order): scripts/, core/,
then the drivers sync/ and aio/, then ops/, then this facade.

- broker.py: Broker, the handle every process makes; its operation classes.
- ops/: the operation classes, by concern (messages, registry, queues, ...), on the sync driver.
- core/: what both drivers decide alike, with no I/O: where a message is, records, reply parsing.
- sync/: the redis-py driver: connections, the held connection, cluster routing, pub/sub, Session.
- aio/: the redis.asyncio driver and the AsyncBroker (the AsyncProducer's publish and tracking).
- scripts/: the Lua scripts, their includes and their typed wrappers (its own map).
"""
