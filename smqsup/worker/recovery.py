"""What a consumer does after a failed round trip to Redis: back off, then
compare its own processing list with what it holds before it takes anything
more."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

from smqsup import defaults, framing
from smqsup.errors import BrokerError
from smqsup.store.broker import Broker
from smqsup.worker.consumer_state import Identity
from smqsup.worker.fetching import Fetcher, Taken
from smqsup.worker.settling import Settler

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Recovery:
    """Owns ``needed`` (a recovery must run before the next take: at start
    too, our list may hold what a lost reply moved there) and the backoff
    between tries, which only a round trip that worked resets."""

    broker: Broker
    identity: Identity
    fetcher: Fetcher
    settler: Settler
    needed: bool = field(default=True, init=False)
    failures: int = field(default=0, init=False)  # in a row, since a round trip last worked
    _backoff: float = field(default=defaults.RECONNECT_BACKOFF_MIN_S, init=False)
    _retry_at: float = field(default=0.0, init=False)  # monotonic: the next try

    def failed(self, exc: BrokerError) -> float:
        """Connection lost, or Redis refusing (LOADING, READONLY after a
        failover, OOM): how long to back off before the recovery."""
        self.needed = True
        self.failures += 1
        self.fetcher.found_empty = False
        wait_s = self._backoff
        log.warning("queue %s: consumer %s: %s; retrying in %.2fs", self.fetcher.name, self.identity.consumer_id,
                    exc, wait_s)
        self._retry_at = time.monotonic() + wait_s
        self._backoff = min(wait_s * 2, defaults.RECONNECT_BACKOFF_MAX_S)
        return wait_s

    def worked(self) -> None:
        """A round trip worked: the next failure backs off from the start."""
        self.failures = 0
        self._backoff = defaults.RECONNECT_BACKOFF_MIN_S

    def wait_s(self) -> float:
        """What is left of the backoff (0: try now)."""
        return max(0.0, self._retry_at - time.monotonic())

    def recover(self, in_flight: Iterable[bytes], taking: bool) -> list[Taken]:
        """Once Redis answers: give back what the other partitions hold of
        ours, keep for the next round every finished outcome Redis did not
        take, and (``taking``) return the frames our list holds that nobody
        runs (a fetch whose reply was lost), screened as the fetch would
        have (paused, expired, rate limit), for the caller to start.
        ``in_flight``: the frames running or booked; they stay ours. Raises
        BrokerError while Redis does not answer."""
        self.broker.ping()
        self.fetcher.return_elsewhere()
        held = collections.Counter(self.broker.messages.processing(self.fetcher.name, self.identity.consumer_id))
        held.subtract(in_flight)
        self.settler.recovered(held)
        self.needed = False
        self.fetcher.found_empty = False
        found = [frame for frame, count in held.items() for _ in range(count)] if taking else []
        return [taken for taken in map(self._screen, found) if taken is not None]

    def _screen(self, frame: bytes) -> Optional[Taken]:
        taken = self.fetcher.screen(frame)
        if taken is not None:
            log.info("queue %s: consumer %s handles message %s found in its list",
                     self.fetcher.name, self.identity.consumer_id, framing.peek_id(taken[0]))
        return taken
