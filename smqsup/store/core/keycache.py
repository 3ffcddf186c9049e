"""KeyCache: each queue's QueueKeys made once per store (Session, AsyncBroker)
and kept: a key name is built on every operation's hot path otherwise."""

from __future__ import annotations

from smqsup.keys import QueueKeys


class KeyCache:
    """``keys(queue)``: the QueueKeys of ``queue`` in ``namespace``, made at
    its first use. Queue names are bounded by the config and the publish
    checks, so the cache is too."""

    __slots__ = ("namespace", "_made")

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._made: dict[str, QueueKeys] = {}

    def __call__(self, queue: str) -> QueueKeys:
        k = self._made.get(queue)
        if k is None:
            k = self._made[queue] = QueueKeys(self.namespace, queue)
        return k
