"""The one exception tree of smqsup: everything we raise derives from SmqsupError.

Redis errors are wrapped at the broker boundary (see broker.py), so no module
above it imports ``redis.exceptions``.
"""

from __future__ import annotations


class SmqsupError(Exception):
    """Base of every error smqsup raises on purpose."""

    #: Process exit status the CLI uses when this error ends a command.
    exit_code: int = 1


class ConfigError(SmqsupError):
    """The configuration file or a command-line value is invalid.

    ``str(error)`` is one line for people: ``FILE: key.path: problem, got VALUE``.
    """

    exit_code = 2

    def __init__(self, message: str, *, path: str = "", key: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.key = key


class UsageError(ConfigError):
    """A command was called wrongly (bad argument, unknown queue)."""


class HandlerImportError(ConfigError):
    """A handler path (``module:function``) cannot be imported or is not callable."""


class MessageError(SmqsupError):
    """A message cannot be published as given (too large, not JSON, bad queue name)."""

    exit_code = 2


class HookFailed(MessageError):
    """A producer's before_publish hook raised: nothing was published. The
    hook's exception is the ``__cause__``."""


class MalformedMessage(SmqsupError):
    """Bytes read from a queue are not a message frame this version understands."""


class BrokerError(SmqsupError):
    """Redis answered with an error or an unexpected reply."""


class BrokerConnectionError(BrokerError):
    """Redis could not be reached, or the connection broke mid-command.

    The command may or may not have been executed by the server: callers that
    move messages must find out from Redis state, never by retrying blindly.
    """


class NotLeader(BrokerError):
    """A collector script was refused: the caller's lock token is not the one
    in Redis (it was paused past the lock's TTL, or deposed). It must stop
    acting as the collector at once."""


class BrokerNotSent(BrokerConnectionError):
    """Redis could not be reached before the command was sent: it certainly
    did not run."""


class PublishNotSent(BrokerNotSent):
    """A publish failed before anything was sent: none of ``message_ids`` is
    queued, so publishing them again creates no duplicate."""

    def __init__(self, message: str, message_ids: list[str]) -> None:
        super().__init__(message)
        self.message_ids = message_ids


class PushRefused(BrokerError):
    """Redis refused some publish-script calls (OOM under noeviction, READONLY
    after a failover); ``queued`` says, per frame, whether it was queued."""

    def __init__(self, message: str, queued: list[bool]) -> None:
        super().__init__(message)
        self.queued = queued


class PublishRefused(BrokerError):
    """Redis refused a publish, in whole or in part: ``queued_ids`` are in the
    queue, ``not_queued_ids`` certainly are not (publishing those again is safe)."""

    exit_code = 1

    def __init__(self, message: str, queued_ids: list[str], not_queued_ids: list[str]) -> None:
        super().__init__(message)
        self.queued_ids = queued_ids
        self.not_queued_ids = not_queued_ids


class PublishUncertain(BrokerConnectionError):
    """A publish was sent but its reply was lost: the message may be in the queue.

    ``message_ids`` names the messages concerned so the caller can look for
    them or publish them again knowingly (a second copy is then a duplicate).
    """

    def __init__(self, message: str, message_ids: list[str]) -> None:
        super().__init__(message)
        self.message_ids = message_ids


class NotReplicated(BrokerConnectionError):
    """A write ran on the master, but fewer replicas than ``redis.wait_replicas``
    confirmed it within ``redis.wait_timeout``: it is lost if the master is
    lost before it replicates. ``result`` is what the write itself returned."""

    def __init__(self, message: str, replicas: int, result: object = None) -> None:
        super().__init__(message)
        self.replicas = replicas
        self.result = result


class PublishNotReplicated(PublishUncertain):
    """The messages are queued on the master, but only ``replicas`` replicas
    confirmed them within ``wait_timeout``: a failover now could lose them.
    Publishing them again may create duplicates (as PublishUncertain says)."""

    def __init__(self, message: str, message_ids: list[str], replicas: int) -> None:
        super().__init__(message, message_ids)
        self.replicas = replicas


class RedisServerError(SmqsupError):
    """A private redis-server could not be found, started or stopped."""

    exit_code = 2


class MessageFailed(SmqsupError):
    """A tracked message ended in the dead letters: ``reason`` (failed:
    the exception's text, "rejected: ...", "expired", "cancelled",
    "removed", "consumer lost"...), after ``attempts`` failed attempts."""

    def __init__(self, message: str, *, queue: str, message_id: str, reason: str, attempts: int) -> None:
        super().__init__(message)
        self.queue = queue
        self.message_id = message_id
        self.reason = reason
        self.attempts = attempts


class ResultUnknown(SmqsupError):
    """Nothing is known of a message: it was never tracked (no result_ttl),
    its result_ttl passed, or the id names no message of the queue."""
