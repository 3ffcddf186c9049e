"""smqsup.store: the one way to Redis. Nothing outside this package imports
redis-py or touches a client; everything else holds a Broker and calls the
operation classes it exposes (``broker.messages.fetch(...)``), which turn
redis-py's errors into smqsup's.

    Broker ─┬─ messages, registry, queues, contents, statistics, schedules
            └─ link.Link ─ connection (client, pool) ─ hotline (held per thread)
                         └ cluster (slot routing) ─ scripts/ (the Lua, wrapped)

- broker.py: Broker, the handle every process makes; its operation classes.
- link.py: Link, what the operation classes share (client, keys, replication).
- messages.py: Messages: publish, fetch, take, screen, ack, nack, promote.
- registry.py: Registry: consumers, heartbeats, reclaims, the leader lock.
- queues.py: Queues: known queues, pause and resume, partitions.
- groups.py: Groups: a queue's message groups: their partition, pause and resume one, the collector's repair.
- contents.py: Contents: listings, removal by id, dead letters.
- control.py: Control: requests to a running supervisor that a signal cannot carry (smqsup roll).
- statistics.py: Statistics: sizes, counters, history, read_queues.
- lag.py: Lags: the lag of queues (their oldest ready message's age, Redis clock), QueueLag.
- supervisors.py: Supervisors, SupervisorInfo: what each supervisor says of its consumers of a queue.
- schedules.py: Schedules in Redis, and reading their definitions back.
- tracking.py: Tracking: tracked messages' records read, waits for their end, progress; run(), the plans' sync driver.
- records.py: Record, a tracked message's record as readers see it (parse, found_in); no I/O.
- plans.py: where a message is, its record, a cancel's answer, when a wait stops: decided once, no I/O, for both drivers.
- events.py: Events: queues' event streams read, one Event per entry, partitions merged.
- outbox.py: the outboxes in queues' deps sets: read by kind, grouped by target, one script a target, cleared.
- keytypes.py: which of a queue's keys hold another type than the scripts need (one line a key).
- parked.py: outbox entries Redis refused, set aside with a backoff (never first in line), and status's view of them.
- batches.py: Batches: batches opened, grown, their members' ends counted, callbacks fired once, read.
- workflows.py: Workflows: dependencies, children held, registered with their parents, told, released.
- waiters.py: Subscriber, the one pub/sub connection a process's waits share.
- subscriptions.py: Channels, that shared subscription's protocol (what to send, what a reply means); no I/O.
- consumer_info.py: ConsumerInfo, what a heartbeat says; RateMeter, its rate.
- connection.py: connect(), check_server(), wrapped(), a batch's round trip.
- hotline.py: HotLine, the connection held per thread for the hot path.
- cluster.py: Redis Cluster routing of batches and of the held connection.
- aio.py: AsyncBroker, the publish and tracking operations on redis.asyncio (the AsyncProducer's).
- aio_cluster.py: Redis Cluster routing of those on redis.asyncio; one round trip on a connection.
- aio_tracking.py: AsyncTracking: the plans' driver on redis.asyncio (records read, cancels, ends awaited).
- aio_events.py: AsyncEvents: queues' event streams read on redis.asyncio.
- aio_waiters.py: AsyncSubscriber, the one pub/sub connection and reading task an AsyncBroker's waits share.
- scripts/: the Lua scripts and their typed wrappers (its own map).
"""
