"""Reading a queues.yaml within bounds: a regular file (never a FIFO or a
device), at most 256KiB, YAML bounded in depth, nodes and merge-key expansion,
so that no file, however built, can stall or crash a supervisor re-reading it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Hashable
from typing import Any, BinaryIO

# types-PyYAML is optional: without it yaml is Any, with it the ignore is unused.
import yaml  # type: ignore[import-untyped, unused-ignore]

from smqsup.config.problems import error, show

#: Largest queues.yaml read, in bytes: a real one is a few kilobytes (1,024
#: queues with every option spelled out take about 230 KiB). PyYAML parses
#: in pure Python, about a second per 300 KiB of newlines: this and the node
#: bound below keep what a SIGHUP may stall the supervisor's loop to about a
#: second, well inside any heartbeat_timeout.
_FILE_MAX_BYTES = 256 * 1024
_FILE_TOO_LARGE = "larger than 256KiB (a queues.yaml is a few kilobytes)"
#: Deepest nesting of YAML nodes (a queues.yaml needs 4: file, queues, queue,
#: value). Also bounds chains of merge keys. PyYAML composes recursively, so
#: without it a 5,000-deep ``[[[...]]]`` is a RecursionError.
_MAX_YAML_DEPTH = 20
#: Most YAML nodes in a file, and most mapping entries built once merge keys
#: (``<<``) are expanded. 1,024 queues with every option spelled out take
#: about 20,500 nodes.
_MAX_YAML_NODES = 25_000


# --- the loader --------------------------------------------------------------------


class _Loader(yaml.SafeLoader):  # type: ignore[misc, unused-ignore]
    """SafeLoader with YAML 1.2 booleans that refuses duplicate keys, and
    bounds depth, size and merge-key expansion so any text fails in one line."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._merge_depth = 0
        self._nodes = 0
        self._entries = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        self._nodes += 1
        if self._nodes > _MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None, None, f"more than {_MAX_YAML_NODES} YAML nodes (not a queues.yaml)",
                self.peek_event().start_mark)  # type: ignore[no-untyped-call, unused-ignore]
        if self._depth >= _MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {_MAX_YAML_DEPTH} levels",
                self.peek_event().start_mark)  # type: ignore[no-untyped-call, unused-ignore]
        self._depth += 1
        try:
            node: yaml.Node = super().compose_node(parent, index)  # type: ignore[arg-type, assignment, unused-ignore]
            return node
        finally:
            self._depth -= 1

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # Merging copies the source's entries: '<<: [*a, *a, ...]' or a chain of
        # mappings each merging the previous one builds far more entries than
        # the file has nodes. PyYAML flattens merge sources recursively.
        if self._merge_depth >= _MAX_YAML_DEPTH:
            raise yaml.constructor.ConstructorError(
                None, None, f"merge keys (<<) chained more than {_MAX_YAML_DEPTH} deep", node.start_mark)
        self._merge_depth += 1
        try:
            super().flatten_mapping(node)
        finally:
            self._merge_depth -= 1
        self._entries += len(node.value)
        if self._entries > _MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"more than {_MAX_YAML_NODES} mapping entries once merge keys (<<) are expanded",
                node.start_mark)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's object for ``node``; a scalar it fails to build (``2001-02-30``,
        ``!!int foo``, an int of more than 4300 digits) is a YAML error at its mark."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            kind = str(node.tag).rsplit(":", 1)[-1]
            # Python's own hint ('use sys.set_int_max_str_digits()') is not for users.
            reason = str(exc).split(";")[0] if isinstance(exc, ValueError) else ""
            problem = f"invalid {kind} {show(node.value)}" + (f": {reason}" if reason else "")
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None

    def construct_mapping(
        self, node: yaml.MappingNode, deep: bool = False
    ) -> dict[Hashable, Any]:
        # Checked before the merge keys (<<) are flattened in: a key that
        # overrides a merged one is intended, a key written twice is not.
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and not key_node.tag.endswith(":merge"):
                if (key_node.tag, key_node.value) in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add((key_node.tag, key_node.value))
        mapping: dict[Hashable, Any] = super().construct_mapping(node, deep)
        return mapping


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def parse(text: str, path: str) -> object:
    """The YAML document in ``text`` (YAML 1.2 booleans, no duplicate keys);
    ConfigError naming ``path`` and the line when it is too large or no YAML."""
    if len(text) > _FILE_MAX_BYTES:  # characters: at most as many as bytes
        raise error(_FILE_TOO_LARGE, path=path)
    try:
        return yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        raise error(f"invalid YAML{_where(exc.problem_mark)}: {_yaml_problem(exc)}",
                    path=path) from None
    except yaml.YAMLError as exc:
        raise error(f"invalid YAML: {exc}", path=path) from None


def _where(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}:{mark.column + 1}" if mark else ""


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's problem, with where the construct it was reading began."""
    problem = exc.problem or exc.context or "unreadable"
    if exc.problem and exc.context:
        problem += f" ({exc.context}{_where(exc.context_mark).replace(' at', ' started at')})"
    return str(problem)


class NotRegularFile(OSError):
    """A path names a FIFO, a socket or a device where a file was expected."""


def open_regular_file(path: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; NotRegularFile
    (or another OSError) otherwise.

    Opened without blocking: a FIFO with no writer would stall the caller (a
    supervisor re-reading its config on SIGHUP) for ever, and a device such
    as /dev/zero is no file anyone means.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"not a regular file (a {_file_kind(mode)})", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"))
    return next((kind for test, kind in kinds if test(mode)), "special file")


def read(path: str) -> str:
    """The text of the file at ``path``; any fault is one ConfigError line."""
    try:
        with open_regular_file(path) as stream:
            data = stream.read(_FILE_MAX_BYTES + 1)
        if len(data) > _FILE_MAX_BYTES:
            raise error(_FILE_TOO_LARGE, path=path)
        return data.decode("utf-8")
    except FileNotFoundError:
        raise error("no such file", path=path) from None
    except IsADirectoryError:
        raise error("is a directory, not a file", path=path) from None
    except PermissionError:
        raise error("permission denied", path=path) from None
    except NotRegularFile as exc:
        raise error(str(exc.strerror), path=path) from None
    except OSError as exc:
        raise error(f"cannot read the file ({exc.strerror or exc})", path=path) from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})",
                    path=path) from None
