"""What every script wrapper is made of: ``Script`` (one Lua file, its
includes resolved, called by SHA with a fallback to its text), ``Call`` (one
call: KEYS, ARGV and the reader of its reply), ``Batch`` (calls and plain
commands in one pipelined round trip), and the readers and argument helpers
several wrappers share.

A call goes by EVALSHA, and by EVAL once if the server does not know the
script yet: a NOSCRIPT reply means the script did not run, so that one
re-send can never apply an operation twice. Errors are left as redis-py
raises them; the store's operation classes wrap them (core/failures.py: wrapped).

A line ``--- @include "name"`` in a script is replaced by ``includes/name.lua``
when the script is loaded (bullmq's convention): a helper several scripts
need is written once. Includes may include others; each is inlined once per
script, where it is first named (a Lua ``local function`` must come before
its callers).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, Generic, Optional, TypeVar, cast

import redis
from redis.exceptions import NoScriptError, ResponseError

from smqsup.keys import QueueKeys

#: What a script is sent through: a redis-py client, or anything with the same
#: evalsha() and eval() (the broker's held connection for the hot path).
ScriptClient = Any
#: (lock key, owner token) of the garbage-collector lock a script must check.
Lock = tuple[str, str]
T = TypeVar("T")

#: The package that holds the Lua files (this module's).
_PACKAGE = __package__ or "smqsup.store.scripts"
_INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.MULTILINE)


def _source(name: str) -> str:
    """The text of ``name.lua`` with its includes resolved."""
    here = resources.files(_PACKAGE)
    return _resolve(here.joinpath(f"{name}.lua").read_text("utf-8"), set())


def _resolve(text: str, seen: set[str]) -> str:
    """``text`` with each include line replaced by that include (resolved in
    turn), or by nothing if an earlier line of the script included it."""
    def inline(match: re.Match[str]) -> str:
        if match[1] in seen:
            return ""
        seen.add(match[1])
        path = resources.files(_PACKAGE).joinpath("includes", f"{match[1]}.lua")
        return _resolve(path.read_text("utf-8"), seen).rstrip("\n")
    return _INCLUDE.sub(inline, text)


class Script:
    """One Lua file, called by SHA with a fallback to its text."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.text = _source(name)
        self.sha = hashlib.sha1(self.text.encode("utf-8")).hexdigest()

    def __call__(self, client: ScriptClient, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.text, len(keys), *keys, *args)


def scripts(*names: str) -> tuple[Script, ...]:
    """A Script for each name, in order: the scripts of one wrapper module."""
    return tuple(Script(name) for name in names)


class Call(Generic[T]):
    """One call of a script: its KEYS and ARGV, and the reader of its reply."""

    __slots__ = ("script", "keys", "args", "read")

    def __init__(self, script: Script, keys: Sequence[Any], args: Sequence[Any], read: Callable[[Any], T]) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.read = read

    def run(self, client: ScriptClient) -> T:
        """Send the call alone (one round trip) and read its reply."""
        return self.read(self.script(client, self.keys, self.args))


class Batch:
    """Script calls and plain commands sent in one round trip (a pipeline, no
    transaction). A script the server does not know (NOSCRIPT: it did not
    run) is sent again alone by its text after the round trip; nothing that
    ran is ever sent twice. Replies come back in order, each script's read by
    its call; an error reply is left in its place as the exception."""

    def __init__(self, client: "redis.Redis") -> None:
        self._client = client
        self._commands: list[tuple[Any, ...]] = []
        self._calls: list[Optional[Call[Any]]] = []
        #: Index -> the key a keyless command (WAIT) is routed by.
        self._routes: dict[int, Any] = {}
        #: It may wait on the server (XREAD BLOCK): a bound on round trips in flight does not count it.
        self.blocking = False

    def __len__(self) -> int:
        return len(self._calls)

    def command(self, *args: Any, route: Any = None) -> None:
        """Add a plain command; ``route``: the key a cluster sends a keyless
        one (WAIT) by, to the master of the commands before it."""
        if route is not None:
            self._routes[len(self._calls)] = route
        self._commands.append(args)
        self._calls.append(None)

    def add(self, call: Call[Any]) -> None:
        self._commands.append(("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args))
        self._calls.append(call)

    def args(self, i: int) -> tuple[Any, ...]:
        """Command ``i`` as it is sent (a script call by EVALSHA)."""
        return self._commands[i]

    def call(self, i: int) -> Optional[Call[Any]]:
        """The script call at ``i``, None for a plain command."""
        return self._calls[i]

    def is_wait(self, i: int) -> bool:
        return self._calls[i] is None and str(self._commands[i][0]).upper() == "WAIT"

    def key(self, i: int) -> Any:
        """The first key of command ``i`` (what a cluster routes it by)."""
        call = self._calls[i]
        if call is not None:
            return call.keys[0]
        return self._routes[i] if i in self._routes else self._commands[i][1]

    def execute(self, connection: Any) -> list[Any]:
        """Send everything on ``connection`` (taken from the client's pool by
        the caller, which so learns whether anything could be sent; it goes
        back to the pool after) and return the replies."""
        return self.deliver(self._client, connection, range(len(self)))

    def deliver(self, client: "redis.Redis", connection: Any, indexes: Sequence[int]) -> list[Any]:
        """Send the commands at ``indexes`` on ``connection``, one of
        ``client``'s (a cluster's master, for the commands of its slots)."""
        pipe = client.pipeline(transaction=False)
        for i in indexes:
            pipe.execute_command(*self._commands[i])  # type: ignore[no-untyped-call]
        pipe.connection = connection
        replies: list[Any] = pipe.execute(raise_on_error=False)
        unknown = [n for n, (i, reply) in enumerate(zip(indexes, replies))
                   if self._calls[i] is not None and isinstance(reply, NoScriptError)]
        if unknown:
            self._again_by_text(client, indexes, replies, unknown)
        return [self.read(i, reply) for i, reply in zip(indexes, replies)]

    def _again_by_text(self, client: "redis.Redis", indexes: Sequence[int], replies: list[Any],
                       unknown: Sequence[int]) -> None:
        """Send again by their text (EVAL) the script calls at positions
        ``unknown`` of ``replies`` that NOSCRIPT refused (they did not run),
        in order, on one connection of ``client``; then the batch's WAITs
        again on it. A WAIT that ran in the pipeline came before these
        writes and so confirmed none of them; one sent after them on the
        same master confirms them and everything before (the replication
        stream is one). Their replies replace the refusals in ``replies``."""
        conn = client.connection_pool.get_connection()
        try:
            for n in unknown:
                call = cast(Call[Any], self._calls[indexes[n]])
                replies[n] = _reply(conn, "EVAL", call.script.text, len(call.keys), *call.keys, *call.args)
            for n, i in enumerate(indexes):
                if self.is_wait(i):
                    replies[n] = _reply(conn, *self._commands[i])
        finally:
            client.connection_pool.release(conn)

    def run_one(self, client: Any, i: int) -> Any:
        """Command ``i`` sent alone on ``client`` (its error raised)."""
        call = self._calls[i]
        return client.execute_command(*self._commands[i]) if call is None else call.run(client)

    def read(self, i: int, reply: Any) -> Any:
        """Reply ``i`` as its call reads it (an error reply left as it is)."""
        call = self._calls[i]
        return reply if call is None or isinstance(reply, Exception) else call.read(reply)


def _reply(conn: Any, *args: Any) -> Any:
    """Send one command on a connection held by the caller; its reply, or
    the error Redis answered with (a lost connection raises)."""
    conn.send_command(*args)
    try:
        return conn.read_response()
    except ResponseError as exc:
        return exc


def bytes_or_none(reply: Any) -> Optional[bytes]:
    """Bytes, or None for Lua's false: a fetched frame (an empty frame is a
    frame: hostile bytes are still bytes to dead-letter, never "nothing
    fetched"), a peeked element's part."""
    return None if reply is None or reply is False else bytes(reply)


def meta_json(reason: str, **fields: Any) -> str:
    """Dead-letter metadata text for the scripts: a JSON object with a reason.

    ASCII-escaped, so that any text a handler's exception carries (lone
    surrogates, newlines) makes valid UTF-8 and one line; the scripts rely on
    the metadata holding no raw newline (a dead-letter entry is
    ``meta "\\n" frame``)."""
    return json.dumps({"reason": reason, **fields}, separators=(",", ":"), ensure_ascii=True, default=str)


def with_lock(keys: list[str], args: list[Any], lock: Optional[Lock]) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of a script whose last key and argument are an optional
    lock and its token."""
    return (keys, args) if lock is None else ([*keys, lock[0]], [*args, lock[1]])


def dedup_index(key_list: list[str], keys: QueueKeys, dedup_key: Optional[str]) -> int:
    """The 1-based KEYS index of ``dedup_key``'s key, appended to ``key_list``
    (0 for none)."""
    if dedup_key is None:
        return 0
    key_list.append(keys.dedup(dedup_key))
    return len(key_list)


def texts(items: Sequence[Any]) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in items]


def escaped_texts(items: Sequence[Any]) -> list[str]:
    """Texts, bytes that are not UTF-8 kept as escapes."""
    return [x.decode("utf-8", "backslashreplace") if isinstance(x, bytes) else str(x) for x in items]

