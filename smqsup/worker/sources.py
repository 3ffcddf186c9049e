"""The source files a handler's import loaded, and whether any changed on disk since.

What counts as a handler's code: every module that importing the handler
loaded into a process that had not loaded it before, and that has a file
outside Python's standard library: the handler's module, the project modules
it imports, and the installed packages it imports for the first time (so a
``git pull`` and a ``pip install`` of a new version both count). Not counted:
the standard library, smqsup itself and what it imports (redis, yaml,
psutil), which the supervisor loaded before the fork, and modules imported
later, inside a handler call.

A file is taken as changed when its size or modification time (ns) differ,
or it is gone: rewriting a file with the same bytes counts as a change, and
costs one roll that changes nothing.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Optional

#: Files a snapshot keeps at most: a handler importing more is still
#: watched, through the first ones (its own module comes first).
MAX_FILES = 20_000


def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {os.path.realpath(paths[name]) for name in ("stdlib", "platstdlib") if paths.get(name)}
    return tuple(sorted(d.rstrip(os.sep) + os.sep for d in dirs))


_STDLIB = _stdlib_dirs()
#: site-packages lives inside the standard library's directory on most
#: installs (lib/python3.X/site-packages): those files are not the stdlib.
_SITE = ("site-packages", "dist-packages")


def counted(path: str) -> bool:
    """Whether the file of a module is handler code (see the module docstring)."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return False
    if any(part in real.split(os.sep) for part in _SITE):
        return True
    return not real.startswith(_STDLIB)


@dataclass(frozen=True)
class Sources:
    """What a handler's code was on disk when a process imported it: path,
    modification time (ns) and size of each file."""

    files: tuple[tuple[str, int, int], ...]

    def changed(self) -> Optional[str]:
        """The first file that differs on disk now (or is gone), None if none does."""
        for path, mtime_ns, size in self.files:
            try:
                st = os.stat(path)
            except (OSError, ValueError):  # gone, or no path at all (a NUL in it)
                return path
            if st.st_mtime_ns != mtime_ns or st.st_size != size:
                return path
        return None

    def to_json(self) -> str:
        return json.dumps({"files": [list(f) for f in self.files]})

    @classmethod
    def from_report(cls, report: object) -> Optional["Sources"]:
        """The snapshot in a child's report ``{"files": [[path, mtime_ns, size], ...]}``;
        None for anything else (never raises)."""
        try:
            files = report["files"]  # type: ignore[index]
            return cls(tuple((str(p), int(m), int(s)) for p, m, s in files[:MAX_FILES]))
        except (ValueError, TypeError, KeyError, IndexError, OverflowError):
            return None

    @classmethod
    def from_json(cls, text: str) -> Optional["Sources"]:
        """``from_report`` of JSON text."""
        try:
            return cls.from_report(json.loads(text))
        except ValueError:
            return None


def module_files(names: Iterable[str]) -> list[str]:
    """The files of the named loaded modules that count, first seen first, each once."""
    out: dict[str, None] = {}
    for name in names:
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path and counted(path):
            out.setdefault(path, None)
    return list(out)


def snapshot(paths: Iterable[str]) -> Sources:
    """The state on disk now of ``paths`` (a file that cannot be read is left out)."""
    files: list[tuple[str, int, int]] = []
    for path in paths:
        if len(files) >= MAX_FILES:
            break
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            continue
        files.append((path, st.st_mtime_ns, st.st_size))
    return Sources(tuple(files))


def loaded_since(before: "set[str]", handler_module: str) -> Sources:
    """The snapshot of the handler's code: ``handler_module`` first, then
    every module loaded since ``before`` (the names ``sys.modules`` had)."""
    new = [name for name in list(sys.modules) if name not in before]
    return snapshot(module_files([handler_module, *new]))
