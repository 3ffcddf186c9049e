"""The connection held per thread for the hot path (HeldConnection): the
per-message commands (BLMOVE, the ack and nack scripts, a single publish)
go on it without redis-py's pool checkout and command machinery.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

import redis
import redis.exceptions as rexc

from smqsup.store.core.failures import NotSent

_pack_one: Optional[Callable[[tuple[Any, ...]], bytes]]
try:
    from hiredis import pack_command as _pack_one
except ImportError:  # hiredis is a dependency; a build without it still works, slower
    _pack_one = None


def _closed(conn: Any) -> bool:
    """Whether an idle connection has anything to read: with no request in
    flight that can only be the server's close (or an error)."""
    try:
        return bool(conn.can_read(0))
    except (rexc.ConnectionError, rexc.TimeoutError, OSError):
        return True


def _packed(args: tuple[Any, ...]) -> bytes:
    """``args`` as one RESP command; DataError (as redis-py raises) for an
    argument hiredis cannot encode."""
    assert _pack_one is not None
    try:
        return _pack_one(args)
    except TypeError as exc:
        raise rexc.DataError(str(exc)) from exc


class ScriptCalls:
    """The two methods scripts.Script calls (EVALSHA, then EVAL on NOSCRIPT),
    for a held connection of one server or of a cluster: both on ``execute``."""

    def execute(self, *args: Any) -> Any:
        raise NotImplementedError

    def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute("EVALSHA", sha, numkeys, *keys_and_args)

    def eval(self, text: str, numkeys: int, *keys_and_args: Any) -> Any:
        return self.execute("EVAL", text, numkeys, *keys_and_args)


class HeldConnection(ScriptCalls):
    """A connection held per thread for the per-message commands (BLMOVE, the
    ack/nack scripts, a single publish). It bypasses the pool checkout and
    redis-py's command machinery on every call, which cost more CPU than
    Redis itself here, and like every client made here it never retries.
    redis-py disconnects it on any error; the next call connects again. Each
    thread gets its own (thread-safe without a lock); never used across fork."""

    def __init__(self, client: "redis.Redis") -> None:
        self._pool = client.connection_pool
        self._local = threading.local()

    def execute(self, *args: Any) -> Any:
        """Send one command and read its reply. Raises NotSent if Redis could
        not be reached before sending (the command certainly did not run)."""
        conn = self._connection()
        if _pack_one is None:
            conn.send_command(*args)
        else:
            # hiredis packs our arguments (str, bytes, int) as redis-py would,
            # without its per-argument Python pass: the hot path's largest cost.
            conn.send_packed_command([_packed(args)])
        return conn.read_response()

    def execute_many(self, *commands: Sequence[Any], raise_error: bool = True) -> list[Any]:
        """Send several commands in one write and read every reply. The
        connection stays in step when one is an error reply: all replies are
        read, then the first error is raised (``raise_error``) or every error
        reply is left in its place. NotSent as execute() says."""
        conn = self._connection()
        if _pack_one is None:
            conn.send_packed_command(conn.pack_commands(commands))
        else:
            conn.send_packed_command([b"".join([_packed(tuple(c)) for c in commands])])
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except rexc.ResponseError as exc:
                replies.append(exc)
        error = next((r for r in replies if isinstance(r, rexc.ResponseError)), None)
        if error is not None and raise_error:
            raise error
        return replies

    def _connection(self) -> Any:
        """This thread's connection, connected; NotSent if it cannot be."""
        local = self._local
        conn: Any = None
        try:
            conn = getattr(local, "conn", None)
            if conn is None or local.pid != os.getpid():
                conn = local.conn = self._pool.get_connection()
                local.pid = os.getpid()
            elif _closed(conn):
                # The server closed this idle connection (a restart): reconnect
                # now rather than send into it and be left not knowing whether
                # the command ran.
                conn.disconnect()
            if getattr(conn, "_sock", None) is None:
                # (redis-py's connect() returns at once when connected, through
                # four calls: skipped. Were ``_sock`` renamed, it runs each time.)
                conn.connect()
        except (rexc.ConnectionError, rexc.TimeoutError, OSError) as exc:
            if conn is not None:
                conn.disconnect()
            raise NotSent(str(exc)) from exc
        return conn

    def wait(self, key: Any, replicas: int, timeout_ms: int) -> int:
        """WAIT on this thread's connection: how many replicas have the writes
        it sent so far (``key``, the one a cluster routes by, is unused here)."""
        return int(self.execute("WAIT", replicas, timeout_ms))

    def close(self) -> None:
        """Return this thread's connection (client.close() closes the others)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.disconnect()
            self._pool.release(conn)
        self._local.conn = None
