"""The README is run, not only read: its Python examples against a private redis-server (a
block after a ``<!-- fragment -->`` line is not run), its queues.yaml blocks through the
config loader, its ``smqsup`` command lines through the CLI's parser, its links to their
targets; the contributors' map against the package; smqsup/store/scripts/README.md against
the Lua files it describes."""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from smqsup.cli.main import build_parser
from smqsup.client.producer import Producer
from smqsup.config.model import loads
from smqsup.errors import UsageError
from smqsup.launch.process import RedisServer
from smqsup.testing.worker import Worker

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PACKAGE = REPO / "smqsup"
SCRIPTS = PACKAGE / "store" / "scripts"
#: The line before a code block that the tests must not run (it is a piece of something larger).
FRAGMENT = "<!-- fragment -->"
LANGUAGES = {"python", "sh", "yaml", "json", "text"}
MAX_LINES = 1200
#: The commands CI runs (.ci/run: "the README's test command"): the README opens with them, as written.
OPENING_COMMANDS = """\
# install, and run the example queues on an embedded redis-server (no Redis needed)
python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[embedded]' && smqsup -c examples/queues.yaml

# install, and run the tests
python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest
"""
#: The queue whose messages the examples wait for (result, gather): a Worker drains it while they run.
DRAINED = "resize"
#: Its handler, in the examples' directory.
DRAINED_HANDLER = '''\
def resize(message):
    message.progress({"rows": 1, "of": 1})
    return {"thumbnail": message.body}
'''


@dataclass(frozen=True)
class Block:
    """One fenced code block of a markdown file."""

    lang: str
    text: str
    line: int  # of its opening fence, 1-based
    section: str  # the heading it is under
    fragment: bool

    @property
    def module(self) -> Optional[str]:
        """The file a Python block is (its first line ``# path/to/module.py``), or None: an example to run."""
        match = re.fullmatch(r"# ([\w/]+\.py)", self.text.split("\n", 1)[0])
        return match[1] if match else None

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.section})"


def read_blocks(text: str) -> list[Block]:
    """The fenced blocks of markdown ``text``, in order."""
    found: list[Block] = []
    lines = text.split("\n")
    section, i = "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section = line.lstrip("#").strip()
        if line.startswith("```"):
            end = lines.index("```", i + 1)
            before = next((s for s in reversed(lines[:i]) if s.strip()), "")
            found.append(Block(line[3:].strip(), "\n".join(lines[i + 1:end]) + "\n", i + 1, section,
                               before.strip() == FRAGMENT))
            i = end
        i += 1
    return found


BLOCKS = read_blocks(README.read_text())
PYTHON = [b for b in BLOCKS if b.lang == "python" and not b.fragment]
MODULES = [b for b in PYTHON if b.module]
EXAMPLES = [b for b in PYTHON if not b.module]
YAML = [b for b in BLOCKS if b.lang == "yaml" and not b.fragment]


def ids(blocks: list[Block]) -> list[str]:
    return [f"line{b.line}" for b in blocks]


# --- the shape ------------------------------------------------------------------------------


def test_the_readme_is_a_guide_of_at_most_1200_lines() -> None:
    """A user's guide: benchmark logs live in tests/bench/README.md, the Lua's internals beside the scripts."""
    count = len(README.read_text().splitlines())
    assert count <= MAX_LINES, f"README.md has {count} lines (at most {MAX_LINES})"


def test_the_readme_opens_with_the_commands_ci_runs() -> None:
    """The first block is the install-and-run and the install-and-test commands, exactly."""
    first = BLOCKS[0]
    assert (first.lang, first.text) == ("sh", OPENING_COMMANDS), first


def test_every_block_says_its_language_and_every_python_one_compiles() -> None:
    """A block without a language would be checked by nothing; a Python block that is no fragment compiles."""
    assert BLOCKS and {b.lang for b in BLOCKS} <= LANGUAGES, [str(b) for b in BLOCKS if b.lang not in LANGUAGES]
    for block in PYTHON:
        compile(block.text, str(block), "exec")


def test_fragments_are_few() -> None:
    """Most examples run: at most a handful are fragments."""
    fragments = [str(b) for b in BLOCKS if b.fragment]
    assert len(fragments) <= 3, fragments
    assert len(EXAMPLES) >= 15 and len(MODULES) >= 4, (len(EXAMPLES), len(MODULES))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_reaches_its_file_or_heading() -> None:
    """Links to files of the repository name files that exist; links to #anchors name headings."""
    text = README.read_text()
    anchors = {slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        if path:
            assert (REPO / path).exists(), f"README.md links to {path}, which does not exist"
        elif anchor:
            assert anchor in anchors, f"README.md links to #{anchor}, which no heading is"


# --- Python: modules import, examples run ------------------------------------------------------------


def write_modules(root: Path) -> None:
    """Every module block of the README, at its path under ``root`` (a later block of one path wins)."""
    for block in MODULES:
        assert block.module is not None
        path = root / block.module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)


@pytest.fixture
def importable(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path`` first on sys.path while the test runs; the modules imported from it forgotten after."""
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)) or (
                    getattr(module, "__path__", None) and any(str(p).startswith(str(tmp_path))
                                                              for p in module.__path__)):
                del sys.modules[name]
        importlib.invalidate_caches()


@pytest.mark.parametrize("block", MODULES, ids=ids(MODULES))
def test_a_module_of_the_readme_imports(block: Block, importable: Path) -> None:
    """A handler, hook or test module the README shows imports, and defines what it says it does."""
    assert block.module is not None
    path = importable / block.module
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.text)
    module = importlib.import_module(block.module[:-3].replace("/", "."))
    assert [n for n, v in vars(module).items() if callable(v) and getattr(v, "__module__", "") == module.__name__]


def run_while_draining(code: Any, namespace: dict[str, Any], worker: Worker, timeout_s: float = 60) -> None:
    """Run ``code`` on a thread while ``worker`` drains the DRAINED queue on this one (the
    examples that wait for a result get it); re-raise what the code raised."""
    failed: list[BaseException] = []

    def target() -> None:
        try:
            exec(code, namespace)
        except BaseException as exc:  # noqa: B036 - handed to the test's thread
            failed.append(exc)

    thread = threading.Thread(target=target, name="readme-example", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while thread.is_alive() and time.monotonic() < deadline:
        worker.drain(DRAINED)
        thread.join(0.05)
    assert not thread.is_alive(), f"the example did not end within {timeout_s} s"
    if failed:
        raise failed[0]


@pytest.mark.parametrize("block", EXAMPLES, ids=ids(EXAMPLES))
def test_an_example_of_the_readme_runs(block: Block, importable: Path, redis_server: RedisServer,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Python example runs as written, in a directory whose queues.yaml names a private
    redis-server (also in $REDIS_URL), with ``producer`` made as the README says
    (``Producer.from_config("queues.yaml")``) and the README's modules beside it."""
    write_modules(importable)
    (importable / "readme_resize.py").write_text(DRAINED_HANDLER)
    (importable / "queues.yaml").write_text(
        f"redis:\n  url: {redis_server.url}\nqueues:\n  {DRAINED}:\n    handler: readme_resize:resize\n")
    monkeypatch.chdir(importable)
    monkeypatch.setenv("REDIS_URL", redis_server.url)
    worker = Worker(importable / "queues.yaml", redis_server.url, "smq")
    producer = Producer.from_config("queues.yaml")
    try:
        namespace = {"__name__": "readme_example", "producer": producer}
        run_while_draining(compile(block.text, str(block), "exec"), namespace, worker)
    finally:
        producer.close()
        worker.close()


def test_the_tour_runs_end_to_end(importable: Path, redis_server: RedisServer,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The ten-minute tour, with its Redis url added: its handler handles what its producer publishes
    (ten orders acked, the one without an id rejected)."""
    tour = [b for b in BLOCKS if b.section == "A ten-minute tour"]
    [handlers] = [b for b in tour if b.module == "myapp/handlers.py"]
    [config] = [b for b in tour if b.lang == "yaml"]
    [publish] = [b for b in tour if b.lang == "python" and not b.module]
    (importable / "myapp").mkdir()
    (importable / "myapp" / "handlers.py").write_text(handlers.text)
    data = yaml.safe_load(config.text)
    data["redis"] = {"url": redis_server.url}
    (importable / "queues.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(importable)
    exec(compile(publish.text, str(publish), "exec"), {"__name__": "readme_tour"})
    worker = Worker(importable / "queues.yaml", redis_server.url, "smq")
    try:
        handled = worker.drain("orders")
    finally:
        worker.close()
    assert sorted(h.state for h in handled) == ["acked"] * 10 + ["dead"], handled
    [dead] = [h for h in handled if h.state == "dead"]
    assert dead.reason == "rejected: an order needs an id" and dead.attempts == 1, dead
    assert sorted(h.result["handled"] for h in handled if h.state == "acked") == list(range(10))


def test_the_testing_kit_example_passes(tmp_path: Path) -> None:
    """The "Testing your handlers" files (queues.yaml, shop.py, test_shop.py) pass under pytest with
    the smqsup plugin, as a project of its own would run them."""
    for block in (b for b in BLOCKS if b.section == "Testing your handlers"):
        name = block.text.split("\n", 1)[0].removeprefix("# ")
        if block.lang in ("python", "yaml") and name in ("queues.yaml", "shop.py", "test_shop.py"):
            (tmp_path / name).write_text(block.text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queues.yaml", "shop.py", "test_shop.py"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "smqsup.testing", "-p", "no:cacheprovider", "-q",
                           f"--rootdir={tmp_path}", "test_shop.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


# --- queues.yaml, JSON and the command line -------------------------------------------------------


def as_whole_config(text: str) -> str:
    """A yaml block as a whole queues.yaml: one that names no queues gets those its schedules
    name (or one), each with a handler."""
    data = yaml.safe_load(text)
    assert isinstance(data, dict), "a yaml block of the README is a queues.yaml, or part of one"
    if "queues" in data:
        return text
    wanted = sorted({s["queue"] for s in (data.get("schedules") or {}).values()}) or ["orders"]
    return text + "queues:\n" + "".join(f"  {q}:\n    handler: myapp.handlers:handle\n" for q in wanted)


@pytest.mark.parametrize("block", YAML, ids=ids(YAML))
def test_a_queues_yaml_of_the_readme_loads(block: Block) -> None:
    """Each yaml block is a queues.yaml (or a part of one, completed with its queues) that smqsup's
    config loader takes: no unknown key, no bad value."""
    config = loads(as_whole_config(block.text), str(block))
    assert config.queues


def test_the_json_blocks_parse() -> None:
    """A JSON block (a log line) is JSON, a line each."""
    for block in (b for b in BLOCKS if b.lang == "json"):
        for line in block.text.splitlines():
            json.loads(line)


def command_lines(text: str) -> Iterator[list[str]]:
    """The argument lists of the ``smqsup`` commands of a shell block (continued lines joined,
    pipelines and ``&&`` split, comments, redirections and ``sudo`` left out; after ``xargs``,
    one message id as xargs would give it)."""
    for line in text.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)  # (quotes kept together, "#" starts a comment, | && ; < apart)
        segments: list[list[str]] = [[]]
        for token in tokens:
            if token in ("|", "||", "&&", ";"):
                segments.append([])
            else:
                segments[-1].append(token)
        for words in segments:
            while words and (re.fullmatch(r"\w+=.*", words[0]) or words[0] in ("sudo", "$")):
                words = words[1:]
            fed = bool(words) and words[0] == "xargs"
            if fed:
                words = [w for w in words[1:] if not w.startswith("-")]
            if words and words[0] == "smqsup":
                words = words[1:words.index("<")] if "<" in words else words[1:]
                yield words + ["01a230b7b913faca1002000000"] if fed else words


def test_every_smqsup_command_line_parses() -> None:
    """Each ``smqsup ...`` line of the shell blocks is one the command's parser takes: its
    subcommands and options exist."""
    parser = build_parser()
    seen = 0
    for block in (b for b in BLOCKS if b.lang == "sh"):
        for words in command_lines(block.text):
            seen += 1
            try:
                parser.parse_args(words)
            except (UsageError, SystemExit) as exc:
                pytest.fail(f"{block}: smqsup {' '.join(words)}: {exc}")
    assert seen >= 20, seen


# --- the contributors' map -------------------------------------------------------------------------------


def map_rows() -> dict[str, str]:
    """The table of "The code, for contributors": folder (relative to smqsup/, "" for smqsup/ itself) -> what it holds."""
    text = README.read_text().split("## The code, for contributors", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for match in re.finditer(r"^\| `([\w/]+/)` \| (.*) \|$", text, re.MULTILINE):
        folder = "" if match[1] == "smqsup/" else match[1]
        rows[folder] = match[2]
    assert rows, "no map table under 'The code, for contributors'"
    return rows


def subpackages() -> list[str]:
    """Every package under smqsup/ (a folder with an __init__.py, at any depth), as "store/ops/"."""
    return sorted(f"{p.parent.relative_to(PACKAGE).as_posix()}/" for p in PACKAGE.rglob("__init__.py")
                  if p.parent != PACKAGE)


def test_the_contributors_map_names_every_subpackage() -> None:
    """A subpackage the map does not name is one a newcomer cannot find."""
    rows = map_rows()
    missing = [p for p in subpackages() if p not in rows]
    assert missing == [], f"README.md's map has no row for {missing}"


def test_every_path_the_contributors_map_names_exists() -> None:
    """Each folder of the map is a package, and each file it names (``x.py``, ``README.md``,
    ``includes/``) is in that folder."""
    missing = []
    for folder, holds in map_rows().items():
        if not (PACKAGE / folder / "__init__.py").is_file():
            missing.append(f"smqsup/{folder} (not a package)")
        for span in re.findall(r"`([\w./]+)`", holds):
            if span.endswith((".py", ".md", "/")) and not (PACKAGE / folder / span).exists():
                missing.append(f"smqsup/{folder}{span}")
    assert missing == [], f"README.md's map names what is not there: {missing}"


# --- the scripts' README ---------------------------------------------------------------------------------


def test_the_scripts_readme_names_every_lua_file_and_only_those() -> None:
    """smqsup/store/scripts/README.md names each script (``name.lua``) and each include
    (``includes/name.lua``) there is, and none that is not."""
    text = (SCRIPTS / "README.md").read_text()
    on_disk = {p.name for p in SCRIPTS.glob("*.lua")} | {f"includes/{p.name}" for p in SCRIPTS.glob("includes/*.lua")}
    assert len(on_disk) > 40, sorted(on_disk)
    named = set(re.findall(r"`((?:includes/)?\w+\.lua)`", text))
    assert sorted(on_disk - named) == [], "smqsup/store/scripts/README.md: no line for these"
    assert sorted(named - on_disk) == [], "smqsup/store/scripts/README.md names scripts that do not exist"
