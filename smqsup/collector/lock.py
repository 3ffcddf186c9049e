"""A leader lock in Redis: SET NX PX with an owner token, renewed and
released by compare-and-set scripts.

Invariant: ``held`` is True only between a successful acquire or renew and
the end of that TTL's first third, as seen by this process's monotonic
clock. A renew that fails, or cannot reach Redis, drops leadership at once;
Redis's own expiry (its clock) decides when another process may take over.
Scripts that act as the leader carry the token and are checked in Redis, so
even a process that was paused past the TTL and still believes it leads
cannot act.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from smqsup.errors import BrokerError
from smqsup.store.broker import Broker

log = logging.getLogger(__name__)


@dataclass(eq=False)
class LeaderLock:
    """One process's claim on one lock key."""

    broker: Broker
    key: str
    token: str
    ttl_ms: int
    held: bool = field(default=False, init=False)
    _valid_until: float = field(default=0.0, init=False)  # monotonic: trust our hold no longer than this

    @property
    def renew_interval_s(self) -> float:
        return self.ttl_ms / 3000.0

    def step(self) -> bool:
        """Acquire or renew; return whether we hold the lock now. Never raises
        for Redis trouble: unreachable Redis means "not the leader"."""
        started = time.monotonic()
        try:
            if self.held:
                self.held = self.broker.registry.lock_renew(self.key, self.token, self.ttl_ms)
                if not self.held:
                    log.warning("lost the lock %s (taken over or expired)", self.key)
            else:
                self.held = self.broker.registry.lock_acquire(self.key, self.token, self.ttl_ms)
                if not self.held and self.broker.registry.lock_holder(self.key) == self.token:
                    # Our own token survived a connection error: still ours.
                    self.held = self.broker.registry.lock_renew(self.key, self.token, self.ttl_ms)
        except BrokerError as exc:
            if self.held:
                log.warning("lock %s: Redis unreachable (%s); stepping down", self.key, exc)
            self.held = False
        if self.held:
            # Measured from before the call: the TTL started no earlier.
            self._valid_until = started + self.renew_interval_s * 2
        return self.held

    def valid(self) -> bool:
        """still_valid() without its effect: a look that leaves the step
        (step(), in its turn) to find out and say that the lock was lost."""
        return self.held and time.monotonic() <= self._valid_until

    def still_valid(self) -> bool:
        """Whether this process may still act as the leader (locally judged;
        every leader script re-checks the token in Redis anyway)."""
        if self.held and time.monotonic() > self._valid_until:
            self.held = False
            # Said here, as step() says a failed renew: a leader paused past its
            # window (SIGSTOP, a VM frozen) may look here first when it wakes, and
            # step() then only tries to acquire, which says nothing.
            log.warning("lock %s: not renewed within %.1fs (this process was paused or too slow); stepping down",
                        self.key, self.renew_interval_s * 2)
        return self.held

    def drop(self) -> None:
        """Stop acting as leader without touching Redis (a script was refused)."""
        self.held = False

    def release(self) -> None:
        """Give the lock up at once (compare-and-delete), so another process
        takes over without waiting for the TTL."""
        if not self.held:
            return
        self.held = False
        try:
            self.broker.registry.lock_release(self.key, self.token)
        except BrokerError as exc:
            log.warning("lock %s: release failed (%s); it expires by itself", self.key, exc)
