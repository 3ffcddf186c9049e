"""smqsup.store.sync: the redis-py driver: what sends commands and scripts
and waits for their replies, in a blocking call.

- session.py: Session, what the operation classes share (client, keys, replication, the held connection).
- connection.py: connect(), check_server(), wrapped(), a batch's round trip.
- held.py: HeldConnection, the connection held per thread for the hot path.
- cluster.py: Redis Cluster routing of batches and of the held connection.
- subscriber.py: Subscriber, the one pub/sub connection a process's waits share.
"""
