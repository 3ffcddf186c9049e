"""A mutation pass over the Lua scripts and the settling code: small slips a
developer could write, applied one at a time, each run against the tests of
its area; prints the score (mutants the tests caught / mutants that load)
and the survivors.

    python tests/bench/mutate.py                          # a fixed sample of 60
    python tests/bench/mutate.py --sample 0               # every mutant (hours)
    python tests/bench/mutate.py --files ack.lua nack.lua --sample 20 --seed 3
    python tests/bench/mutate.py --list                   # the mutants, not run
    python tests/bench/mutate.py --rerun before.txt       # the survivors of an earlier run, judged again

The slips (one per mutant):

- ``cmp``: a comparison turned (``<`` and ``<=``, ``>`` and ``>=``, ``==``
  and ``~=``/``!=``, ``in`` and ``not in``);
- ``off``: an integer literal one more (KEYS[i] and ARGV[i] left alone);
- ``call``: a statement that is only a call removed (a settle helper not
  called, a counter not counted, a key not written);
- ``swap``: LPUSH/RPUSH, LPOP/RPOP, LEFT/RIGHT exchanged;
- ``logic``: ``and`` and ``or`` exchanged.

Each mutant is written into a private copy of this checkout (the files git
tracks and the untracked ones it does not ignore, as they are now), so the
work tree is never touched; a Lua mutant must load (SCRIPT LOAD of every
script that includes the file, on a private redis-server) and a Python one
compile, or it is not counted. Then ``pytest -x`` runs the test modules of
the file's area (``AREAS``) on one process; a failure or a time-out kills the
mutant. The sample is drawn with ``--seed`` from every mutant of the files,
so two runs with the same seed and files try the same mutants: run it before
and after a change to the tests to compare scores. Tests only added kill at
least what they killed before, so ``--rerun`` (the survivors an earlier run
printed, judged again) gives the new score at a fraction of the time.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

SCRIPTS = Path("smqsup/store/scripts")
#: The Python code that decides and records a message's outcome.
SETTLING = ["smqsup/worker/settling.py", "smqsup/worker/outcomes.py", "smqsup/store/ops/messages.py",
            "smqsup/store/scripts/message_calls.py"]

_CORE = ["tests/test_queue.py", "tests/test_prefetch.py", "tests/test_publish_options.py"]
_GROUPS = ["tests/test_groups.py", "tests/test_group_turns.py", "tests/test_groups_hostile.py"]
_FLOWS = ["tests/test_dependencies.py", "tests/test_batches.py", "tests/test_unique.py"]
_TRACK = ["tests/test_cancel.py", "tests/test_results.py", "tests/test_events.py"]
_LIVE = ["tests/test_queue.py", "tests/test_gc.py"]
_MODEL = ["tests/test_model.py"]
#: The test modules of each area, by the stem of a Lua file (or a Python
#: file's path): the first pattern that matches names the area. The model-based
#: test (when present) runs for every Lua file: it covers every script.
AREAS: list[tuple[str, list[str]]] = [
    (r"^group|^groups$", _GROUPS + _CORE),
    (r"^(hold|depend|unblock|batch_settle|deps|release)$", _FLOWS),
    (r"^(cancel|progress|track)$", _TRACK + _CORE),
    (r"^(reclaim|reclaim_stale|stale|heartbeat|move_frames|unregister|return_free|lock.*)$", _LIVE),
    (r"^(rate)$", ["tests/test_rate_limit.py"]),
    (r"^(lag)$", ["tests/test_lag.py"]),
    (r"^(peek_range|remove|dlq_.*|partitions)$", ["tests/test_cli_queue.py", "tests/test_partitions.py",
                                                  "tests/test_listing_bounds.py"]),
    (r"^schedule", ["tests/test_schedules_hostile.py", "tests/test_schedules.py"]),
    (r"outcomes\.py$", _CORE + ["tests/test_hostile_handlers.py", "tests/test_concurrency.py"]),
    (r".", _CORE + _TRACK + ["tests/test_concurrency.py"]),
]

_LUA_CMP = [("<=", "<"), (">=", ">"), ("~=", "=="), ("==", "~="), ("<", "<="), (">", ">=")]
_LUA_SWAP = [("LPUSH", "RPUSH"), ("RPUSH", "LPUSH"), ("LPOP", "RPOP"), ("RPOP", "LPOP"),
             ("'LEFT'", "'RIGHT'"), ("'RIGHT'", "'LEFT'")]
_LUA_CALL = re.compile(r"^(\s*)(?!local\b|return\b|if\b|elseif\b|while\b|for\b|until\b)"
                       r"([A-Za-z_][\w.:]*\(.*\))\s*$")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_INDEXED = re.compile(r"(KEYS|ARGV)\[\d+\]")
_INCLUDE = re.compile(r'^--- @include "(\w+)"$', re.MULTILINE)


@dataclass(frozen=True)
class Mutant:
    """One slip: ``path`` (relative to the checkout) with line ``line`` (1-based)
    replaced, or the whole text replaced (``text``, Python)."""

    path: str
    line: int
    kind: str
    before: str
    after: str
    text: str = ""

    def describe(self) -> str:
        return f"{self.path}:{self.line} [{self.kind}] {self.before.strip()!r} -> {self.after.strip()!r}"


def _code_part(line: str) -> tuple[str, str]:
    """A Lua line split into its code and its comment (strings kept in the code)."""
    masked = _STRING.sub(lambda m: "\0" * len(m[0]), line)
    cut = masked.find("--")
    return (line, "") if cut < 0 else (line[:cut], line[cut:])


def _at(code: str, old: str) -> Iterator[int]:
    """Where ``old`` stands in ``code`` outside strings and not inside a longer
    operator (``<`` in ``<=``, ``=`` in ``==``)."""
    masked = _STRING.sub(lambda m: "\0" * len(m[0]), code)
    ops = "<>=~"
    for m in re.finditer(re.escape(old), masked):
        i, j = m.start(), m.end()
        if old in ("<", ">") and (j < len(masked) and masked[j] in ops or i > 0 and masked[i - 1] in ops):
            continue
        if old[0] in "<>=~" and i > 0 and masked[i - 1] in ops:
            continue
        yield i


def _code_slips(code: str) -> Iterator[tuple[str, str]]:
    """(kind, new code) of each slip one line's code offers."""
    for old, new in _LUA_CMP:
        for i in _at(code, old):
            yield "cmp", code[:i] + new + code[i + len(old):]
    for old, new in _LUA_SWAP:
        for m in re.finditer(re.escape(old), code):
            yield "swap", code[:m.start()] + new + code[m.end():]
    masked = _INDEXED.sub(lambda m: "\0" * len(m[0]), _STRING.sub(lambda m: "\0" * len(m[0]), code))
    for m in re.finditer(r"(?<![\w.])\d+(?![\w.])", masked):
        yield "off", code[:m.start()] + str(int(m[0]) + 1) + code[m.end():]
    for m in re.finditer(r"\b(and|or)\b", masked):
        yield "logic", code[:m.start()] + ("or" if m[0] == "and" else "and") + code[m.end():]
    call = _LUA_CALL.match(code)
    if call and call[2].count("(") == call[2].count(")"):
        yield "call", call[1] + "do end"


def lua_mutants(path: str, text: str) -> Iterator[Mutant]:
    """Every slip of one Lua file, line by line (comments left alone)."""
    for n, line in enumerate(text.splitlines(), 1):
        code, comment = _code_part(line)
        if code.strip() and not code.lstrip().startswith("--"):
            for kind, new_code in _code_slips(code):
                yield Mutant(path, n, kind, line, new_code + comment)


_PY_CMP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


def _py_sites(tree: ast.AST) -> Iterator[tuple[str, ast.AST, int]]:
    """(kind, node, index) of each slip a Python tree offers, in a fixed order."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _PY_CMP:
                    yield "cmp", node, i
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            yield "off", node, 0
        elif isinstance(node, ast.BoolOp):
            yield "logic", node, 0
        elif isinstance(node, ast.Expr) and isinstance(node.value, (ast.Call, ast.Await)):
            yield "call", node, 0


def _py_apply(kind: str, node: ast.AST, i: int) -> None:
    if kind == "cmp":
        assert isinstance(node, ast.Compare)
        node.ops[i] = _PY_CMP[type(node.ops[i])]()
    elif kind == "off":
        assert isinstance(node, ast.Constant)
        node.value += 1
    elif kind == "logic":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    else:
        node.__class__ = ast.Pass
        for field in ("value",):
            delattr(node, field)


def py_mutants(path: str, text: str) -> Iterator[Mutant]:
    """Every slip of one Python file; the mutant's whole text is unparsed from its tree."""
    lines = text.splitlines()
    count = sum(1 for _ in _py_sites(ast.parse(text)))
    for k in range(count):
        tree = ast.parse(text)
        kind, node, i = list(_py_sites(tree))[k]
        line = getattr(node, "lineno", 1)
        before = lines[line - 1] if line <= len(lines) else ""
        _py_apply(kind, node, i)
        shown = ast.unparse(node).splitlines()[0] if not isinstance(node, ast.Pass) else "pass"
        yield Mutant(path, line, kind, before, shown, text=ast.unparse(tree) + "\n")


def area_of(path: str, has_model: bool) -> list[str]:
    """The test modules that decider a mutant of ``path``."""
    stem = Path(path).stem if path.endswith(".lua") else path
    for pattern, modules in AREAS:
        if re.search(pattern, stem):
            extra = _MODEL if has_model and path.endswith(".lua") else []
            return list(dict.fromkeys(modules + extra))
    raise AssertionError("the last area matches everything")


def _copy_checkout(into: Path) -> None:
    """This checkout's tracked and untracked, not ignored, files as they are now, into ``into``."""
    listed = subprocess.run(["git", "-C", str(common.REPO_ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = common.REPO_ROOT / rel
        if src.is_file() and not src.is_symlink():
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, into / rel)


def _lua_users(root: Path) -> dict[str, set[str]]:
    """For each Lua file stem: the top-level scripts whose text includes it (itself included)."""
    direct = {p.stem: set(_INCLUDE.findall(p.read_text())) for p in (root / SCRIPTS).glob("**/*.lua")}

    def closure(stem: str, seen: set[str]) -> set[str]:
        for inc in direct.get(stem, ()):
            if inc not in seen:
                seen.add(inc)
                closure(inc, seen)
        return seen
    users: dict[str, set[str]] = {}
    for top in (root / SCRIPTS).glob("*.lua"):
        for stem in closure(top.stem, {top.stem}):
            users.setdefault(stem, set()).add(top.stem)
    return users


def _resolved(root: Path, name: str) -> str:
    seen: set[str] = set()

    def inline(m: re.Match[str]) -> str:
        if m[1] in seen:
            return ""
        seen.add(m[1])
        return _INCLUDE.sub(inline, (root / SCRIPTS / "includes" / f"{m[1]}.lua").read_text()).rstrip("\n")
    return _INCLUDE.sub(inline, (root / SCRIPTS / f"{name}.lua").read_text())


def loads(client: "redis.Redis[bytes]", root: Path, mutant: Mutant, users: dict[str, set[str]]) -> bool:
    """Whether the mutant is code at all: its Lua scripts load, its Python compiles."""
    if mutant.path.endswith(".py"):
        try:
            compile((root / mutant.path).read_text(), mutant.path, "exec")
            return True
        except SyntaxError:
            return False
    try:
        for name in sorted(users.get(Path(mutant.path).stem, ())):
            client.script_load(_resolved(root, name))
        return True
    except redis.ResponseError:
        return False


def apply(root: Path, mutant: Mutant, original: str) -> None:
    if mutant.text:
        (root / mutant.path).write_text(mutant.text)
        return
    lines = original.splitlines(keepends=True)
    end = "\n" if lines[mutant.line - 1].endswith("\n") else ""
    lines[mutant.line - 1] = mutant.after + end
    (root / mutant.path).write_text("".join(lines))


def decider(root: Path, tests: list[str], timeout_s: float, workers: int = 0) -> str:
    """'killed' (a test failed, or the run timed out), or 'survived'."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", str(workers), "-p", "no:cacheprovider",
           "-p", "no:randomly", "-o", "addopts=", "--timeout", "60", *(["--dist", "loadfile"] if workers else []),
           *tests]
    try:
        done = subprocess.run(cmd, cwd=root, capture_output=True, timeout=timeout_s,
                              env={**os.environ, "PYTHONPATH": str(root)})
    except subprocess.TimeoutExpired:
        return "killed"
    return "survived" if done.returncode == 0 else "killed"


def all_mutants(root: Path, files: list[str]) -> list[Mutant]:
    found: list[Mutant] = []
    for rel in files:
        text = (root / rel).read_text()
        found.extend(lua_mutants(rel, text) if rel.endswith(".lua") else py_mutants(rel, text))
    return found


def _files(root: Path, names: list[str]) -> list[str]:
    every = sorted(str(p.relative_to(root)) for p in (root / SCRIPTS).glob("**/*.lua")) + SETTLING
    if not names:
        return every
    chosen = [f for f in every if any(f.endswith("/" + n) or f == n for n in names)]
    if not chosen:
        sys.exit(f"mutate.py: --files: none of {names!r} is a Lua script or a settling module")
    return chosen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="*", default=[], help="Lua files or settling modules (default: all)")
    ap.add_argument("--sample", type=int, default=60, help="mutants drawn (0: every one)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", nargs="*", default=["cmp", "off", "call", "swap", "logic"])
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one mutant's tests may take")
    ap.add_argument("--list", action="store_true", help="print the mutants drawn; run nothing")
    ap.add_argument("--rerun", type=Path, help="an earlier run's output: decider its survivors again")
    ap.add_argument("--workers", type=int, default=0, help="pytest-xdist workers per mutant's run (0: one process)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="smqmutate-") as tmp:
        root = Path(tmp)
        _copy_checkout(root)
        mutants = [m for m in all_mutants(root, _files(root, args.files)) if m.kind in args.kinds]
        total = len(mutants)
        if args.rerun:
            mutants = _survivors_of(args.rerun, mutants)
        elif args.sample and args.sample < total:
            mutants = random.Random(args.seed).sample(mutants, args.sample)
        print(f"{total} mutants in all; trying {len(mutants)} (seed {args.seed})", flush=True)
        if args.list:
            for m in mutants:
                print(" ", m.describe())
            return
        run(root, mutants, args.timeout, args.workers)


def _survivors_of(output: Path, mutants: list[Mutant]) -> list[Mutant]:
    """The mutants an earlier run's output lists as survivors, found by file, slip and text (the line
    may have moved since); those no longer in the code are said."""
    def key(text: str) -> str:
        return re.sub(r":\d+ \[", " [", text, count=1)
    listed = [line.split("survived: ", 1)[1] for line in output.read_text().splitlines()
              if line.startswith("  survived: ")]
    by_key: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_key.setdefault(key(m.describe()), []).append(m)
    found = []
    for text in listed:
        if by_key.get(key(text)):
            found.append(by_key[key(text)].pop(0))
        else:
            print(f"no longer a mutant of this checkout (its line changed): {text}")
    return found


def run(root: Path, mutants: list[Mutant], timeout_s: float, workers: int) -> None:
    has_model = (root / _MODEL[0]).exists()
    users = _lua_users(root)
    tally = {"killed": 0, "survived": 0, "invalid": 0}
    survivors: list[Mutant] = []
    started = time.monotonic()
    with common.bench_server() as server:
        client = redis.Redis.from_url(server.url)
        for k, m in enumerate(mutants, 1):
            original = (root / m.path).read_text()
            apply(root, m, original)
            try:
                tests = [t for t in area_of(m.path, has_model) if (root / t).exists()]
                verdict = decider(root, tests, timeout_s, workers) if loads(client, root, m, users) else "invalid"
            finally:
                (root / m.path).write_text(original)
            tally[verdict] += 1
            if verdict == "survived":
                survivors.append(m)
            print(f"[{k}/{len(mutants)}] {verdict:8} {m.describe()}", flush=True)
    judged = tally["killed"] + tally["survived"]
    print(f"\nscore: {tally['killed']}/{judged} killed ({100 * tally['killed'] / max(judged, 1):.0f} %), "
          f"{tally['invalid']} not loadable, {time.monotonic() - started:.0f} s")
    for m in survivors:
        print("  survived:", m.describe())


if __name__ == "__main__":
    main()
