"""smqsup.store.ops: the Broker's operation classes, one concern each, on a
Session (sync/session.py).

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
- events.py: Events: queues' event streams read, one Event per entry, partitions merged.
- outbox.py: the outboxes in queues' deps sets: read by kind, grouped by target, one script a target, cleared.
- keytypes.py: which of a queue's keys hold another type than the scripts need (one line a key).
- parked.py: outbox entries Redis refused, set aside with a backoff (never first in line), and status's view of them.
- batches.py: Batches: batches opened, grown, their members' ends counted, callbacks fired once, read.
- workflows.py: Workflows: dependencies, children held, registered with their parents, told, released.
"""
