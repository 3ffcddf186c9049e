"""Which partition of a queue a consumer works on."""

from __future__ import annotations

from smqsup.keys import partition_names

#: Messages handled in a row from one partition before a look at the others.
ROTATE_EVERY = 64


class Partitions:
    """The partitions of one queue as one consumer sees them.

    A queue with ``partitions: N`` is N queues in Redis ("q", "q~1", ...), each
    under a hash tag of its own (keys.partition_name). Every consumer of the
    queue is registered in all N, so the collector of each finds the lists it
    may hold there, but works on one at a time, its *current* partition:

    - it *prefers* one, its home, drawn at start (a shared INCR, so N consumers
      prefer N different partitions), and blocks (BLMOVE) only there;
    - when the current partition is found empty it takes (take.lua, without
      blocking) from each of the others in turn and moves to the first that
      had a message, staying while it has more; a whole turn found empty, it
      goes home and blocks. An idle consumer so asks each other partition once
      per blocking fetch (FETCH_BLOCK_S), never in a tight loop;
    - so that no partition waits for ever behind busy homes, a consumer also
      looks at the others after ROTATE_EVERY messages in a row from one
      partition (with concurrency N: ROTATE_EVERY per slot, once the messages
      in hand have finished).

    It changes partition only with nothing in hand, so an ack always goes to
    the partition its message came from."""

    def __init__(self, queue: str, count: int) -> None:
        self.names = partition_names(queue, count)
        self.home = self.names[0]
        self.current = self.home
        self.streak = 0  # messages handled in a row from the current partition
        self.drawn = False
        self.many = len(self.names) > 1  # (the names are fixed for the consumer's life)

    def draw(self, ticket: int) -> None:
        """Take home the partition ``ticket`` names (once: a renewed identity keeps it)."""
        if not self.drawn:
            self.home = self.current = self.names[ticket % len(self.names)]
            self.drawn = True

    def others(self) -> list[str]:
        """Every partition but the current one, in turn after it."""
        i = self.names.index(self.current)
        return self.names[i + 1:] + self.names[:i]

    def move(self, name: str) -> None:
        self.current = name
        self.streak = 0

    def handled(self, every: int = ROTATE_EVERY) -> bool:
        """Count one message handled from the current partition; True when
        it is time (``every`` in a row) to look at the others."""
        self.streak += 1
        if self.many and self.streak >= every:
            self.streak = 0  # a look now; the next after as many again
            return True
        return False
