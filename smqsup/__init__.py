"""smqsup: a Redis-backed message queue (RedisSMQ design) and the supervisor
that runs its consumers as a service."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["Producer", "Message", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so `import smqsup` in the supervisor parent stays light.
    if name == "Producer":
        from smqsup.producer import Producer

        return Producer
    if name == "Message":
        from smqsup.message import Message

        return Message
    raise AttributeError(name)
