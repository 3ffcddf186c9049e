"""The package's shape, read from its source: the maps, the import graph, the one way to Redis, the sizes.

Nothing here runs smqsup; each test parses the files under smqsup/ (imports inside functions included),
so a change that breaks the house fails here rather than in a reviewer's head.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "smqsup"
TESTS = PACKAGE.parent / "tests"

#: Layers, lowest first: a module may import its own subpackage and anything on a lower layer, never one
#: beside it or above. The top-level leaves are everyone's; smqsup/__init__ (the public face) and
#: __main__ stand above all.
LAYERS: dict[str, int] = {
    "": 0,  # errors, defaults, keys, message, safe, logs
    "config": 1,
    "store": 2,
    "launch": 3,  # (its adopted server's SHUTDOWN goes through a Broker; client finds the embedded url)
    "client": 4, "collector": 4,
    "worker": 5, "views": 5,
    "web": 6, "testing": 6,
    "supervisor": 7,
    "cli": 8,
}
FACE = {"smqsup", "smqsup.__main__"}
#: The rooms of smqsup.store, lowest first, as LAYERS are: the Lua and its wrappers; what both drivers
#: decide (no I/O); the two drivers, beside each other and never importing one another; the operation
#: classes; the facade (store/*.py).
STORE_ROOMS: dict[str, int] = {"scripts": 0, "core": 1, "sync": 2, "aio": 2, "ops": 3, "": 4}
MAX_FOLDER_MODULES = 20
MAX_TOP_LEVEL_FILES = 12
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    imports: dict[str, set[str]] = field(default_factory=dict)  # module imported -> names taken from it


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(mod: Module, node: ast.Import | ast.ImportFrom, known: set[str]) -> Iterator[tuple[str, str]]:
    """(module, name taken) for each name an import statement brings in, resolved to a known module."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, ""
        return
    base = node.module or ""
    if node.level:
        here = mod.name.split(".") if mod.path.name == "__init__.py" else mod.name.split(".")[:-1]
        base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        yield (sub, "") if sub in known else (base, alias.name)


@cache
def modules() -> dict[str, Module]:
    found = {_module_name(p): Module(_module_name(p), p, ast.parse(p.read_text(), str(p)))
             for p in sorted(PACKAGE.rglob("*.py"))}
    known = set(found)
    for mod in found.values():
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target, name in _imported(mod, node, known):
                    mod.imports.setdefault(target, set()).add(name)
    return found


def _internal_edges(mod: Module) -> Iterator[tuple[str, set[str]]]:
    known = modules()
    for target, names in mod.imports.items():
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != mod.name:
            yield target, names


def _role(name: str) -> str:
    """The subpackage a module belongs to ('' for the top-level leaves)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""


def _docstring_names(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_every_module_and_subpackage_has_its_line_in_its_package_map() -> None:
    """Each package's __init__ docstring names each of its modules (name.py) and subpackages (name/)."""
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        text = _docstring_names(init)
        for entry in sorted(init.parent.iterdir()):
            if entry.name.startswith(("_", ".")) and entry.name != "__main__.py":
                continue
            if entry.suffix == ".py":
                wanted = entry.name
            elif entry.is_dir() and (entry / "__init__.py").exists():
                wanted = entry.name + "/"
            else:
                continue
            if not re.search(rf"(?<![\w/.]){re.escape(wanted)}", text):
                missing.append(f"{init.relative_to(PACKAGE.parent)}: no line for {wanted}")
    assert missing == []


def test_the_tests_folder_holds_tests_and_its_support_is_mapped() -> None:
    """tests/ holds test modules (test_*.py), conftest and __init__; what they share is in tests/support/,
    whose __init__ names each of its modules (a newcomer finds a helper there, not among 100 test files)."""
    stray = sorted(p.name for p in TESTS.glob("*.py")
                   if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py"))
    assert stray == [], "support modules belong in tests/support/"
    support = TESTS / "support"
    text = (support / "__init__.py").read_text()
    unmapped = [p.name for p in sorted(support.glob("*.py"))
                if p.name != "__init__.py" and not re.search(rf"(?<![\w/.]){re.escape(p.name)}", text)]
    assert unmapped == [], "tests/support/__init__.py: no line for these"


def test_the_top_level_holds_only_the_public_face_and_the_shared_leaves() -> None:
    """At most twelve modules directly under smqsup/; everything else lives in a subpackage named for its role."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_FILES, top
    subpackages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert set(subpackages) == set(LAYERS) - {""}, subpackages


def test_no_import_circles_counting_imports_inside_functions() -> None:
    """No module imports, at top level or inside a function, a module that leads back to it."""
    graph = {name: {t for t, _ in _internal_edges(mod)} for name, mod in modules().items()}
    circles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert circles == []


def test_imports_run_down_the_layers_never_up_or_across() -> None:
    """A module imports its own subpackage or a lower layer (config < store < client, collector < worker,
    views < web, testing < supervisor < cli); never a subpackage beside it or above it."""
    wrong = [f"{name} -> {target}"
             for name, mod in modules().items() if name not in FACE
             for target, _ in _internal_edges(mod)
             if _role(target) != _role(name) and LAYERS[_role(target)] >= LAYERS[_role(name)]]
    assert wrong == []


def test_no_private_name_crosses_a_module_boundary() -> None:
    """Names starting with one underscore stay in their module: nothing imports them from elsewhere."""
    crossing = [f"{name} takes {taken} from {target}"
                for name, mod in modules().items()
                for target, names in _internal_edges(mod)
                for taken in sorted(names) if taken.startswith("_") and not taken.startswith("__")]
    assert crossing == []


def test_only_the_store_imports_redis_py() -> None:
    """redis-py (and hiredis) are imported by smqsup.store's modules and by no other module."""
    outside = sorted(name for name, mod in modules().items()
                     if not name.startswith("smqsup.store")
                     and any(t.split(".")[0] in ("redis", "hiredis") for t in mod.imports))
    assert outside == []


def test_no_module_outside_the_store_touches_a_redis_client() -> None:
    """Outside smqsup.store no code reads an attribute named client, pipeline or execute_command off anything."""
    touching = []
    for name, mod in modules().items():
        if name.startswith("smqsup.store"):
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Attribute) and node.attr in ("client", "pipeline", "execute_command"):
                touching.append(f"{name}:{node.lineno} .{node.attr}")
    assert touching == []


@pytest.mark.parametrize("limit", [MAX_MODULE_LINES])
def test_no_module_passes_four_hundred_lines(limit: int) -> None:
    """Every module of the package is at most 400 lines."""
    long = {name: n for name, mod in modules().items() if (n := len(mod.path.read_text().splitlines())) > limit}
    assert long == {}


def test_no_function_passes_forty_lines() -> None:
    """Every function and method, decorators and docstring included, is at most 40 lines."""
    long = []
    for name, mod in modules().items():
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (n := (node.end_lineno or node.lineno) - first + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {n} lines")
    assert long == []


def test_each_module_opens_with_a_sentence_saying_what_it_is_for() -> None:
    """Every module has a docstring; its first line is not empty."""
    bare = [name for name, mod in modules().items() if not (ast.get_docstring(mod.tree) or "").strip()]
    assert bare == []


def _store_room(name: str) -> str:
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[2] in STORE_ROOMS else ""


def test_the_store_rooms_import_down_never_up_or_across() -> None:
    """Inside smqsup.store: ops/ may use the drivers, core/ and scripts/; a driver (sync/, aio/) core/ and
    scripts/, never the other driver nor ops/; core/ only scripts/: what decides has no I/O to reach for."""
    store = {name: mod for name, mod in modules().items() if name.startswith("smqsup.store.")}
    wrong = [f"{name} -> {target}"
             for name, mod in store.items()
             for target, _ in _internal_edges(mod)
             if target.startswith("smqsup.store.") and _store_room(target) != _store_room(name)
             and STORE_ROOMS[_store_room(target)] >= STORE_ROOMS[_store_room(name)]]
    assert wrong == []


def test_the_store_core_does_no_io() -> None:
    """smqsup.store.core imports no network or thread module and no redis client (redis-py's exception
    classes only), and never sleeps (it may read the monotonic clock): both drivers call it, so it must
    neither block nor await."""
    io = ("socket", "threading", "asyncio", "select", "redis.asyncio", "redis.client", "redis.cluster")
    found = [f"{name} imports {target}" for name, mod in modules().items() if name.startswith("smqsup.store.core")
             for target in mod.imports if target in io or (target == "redis" and "" in mod.imports[target])]
    found += [f"{name}:{node.lineno} sleeps" for name, mod in modules().items() if name.startswith("smqsup.store.core")
              for node in ast.walk(mod.tree) if isinstance(node, ast.Attribute) and node.attr == "sleep"]
    assert found == []


def test_no_folder_holds_more_than_twenty_modules() -> None:
    """A room with more than twenty modules is two rooms: each package folder holds at most twenty."""
    crowded = {str(init.parent.relative_to(PACKAGE.parent)): n for init in PACKAGE.rglob("__init__.py")
               if (n := len([p for p in init.parent.glob("*.py") if p.name != "__init__.py"])) > MAX_FOLDER_MODULES}
    assert crowded == {}


def test_a_file_name_holds_one_role() -> None:
    """No two modules share a file name, but an asyncio driver's module named for the one it mirrors
    (store/aio/X.py beside store/ops/X.py, store/sync/X.py or store/X.py): a name found in a traceback or
    a map says which module it is."""
    by_name: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py") and path.parent.name != "aio":
            by_name.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    shared = {name: where for name, where in by_name.items() if len(where) > 1}
    assert shared == {}
    mirrors = [p.name for p in (PACKAGE / "store" / "aio").glob("*.py")
               if p.name != "__init__.py" and p.name not in by_name]
    assert mirrors == [], "a module of store/aio/ is named for the sync module it mirrors"
