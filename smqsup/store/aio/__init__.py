"""smqsup.store.aio: the redis.asyncio driver, and the operations the
AsyncProducer needs on it. A module here is named for the sync module it
mirrors; what both decide lives once in core/.

- broker.py: AsyncBroker, the publish and tracking operations on redis.asyncio.
- cluster.py: Redis Cluster routing on redis.asyncio; one round trip on a connection.
- tracking.py: AsyncTracking: the plans' driver on redis.asyncio (records read, cancels, ends awaited).
- events.py: AsyncEvents: queues' event streams read on redis.asyncio.
- subscriber.py: AsyncSubscriber, the one pub/sub connection and reading task an AsyncBroker's waits share.
"""
