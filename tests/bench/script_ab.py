"""Redis's time in the fetch scripts of two checkouts, A/B in one server (grouped or plain messages).

    python tests/bench/script_ab.py REV_A [REV_B]     (REV_B: this checkout; a rev: a temp worktree)
    python tests/bench/script_ab.py HEAD~1 --script take --count 32
    python tests/bench/script_ab.py HEAD~1 --plain

``groups.py`` measures what users see (consumer processes, msg/s), but on a
2-core machine whose speed drifts by 10-15 % between runs a change of a few
µs in a script is lost in it. This measures the script alone, exactly: one
redis-server (a private one, as every bench here), ``--groups`` x
``--per-group`` messages published to one queue per side (grouped, or
``--plain``), then drained through A's and B's text of the script in turns of
``--chunk`` calls each, from this process (no consumer process, no handler):

- ``ack`` (default): ack.lua acking the frame it took last and taking the
  next, one call a message (a consumer at prefetch 1);
- ``take``: take.lua acking the ``--count`` frames it took last and taking
  the next ``--count`` (a consumer at prefetch ``--count``);
- ``nack``: nack.lua failing the frame it took last (retry_threshold 1, no
  delay: its first failure makes it ready again, its second dead-letters it)
  and taking the next, one call a failure (a handler that always raises).

Reported: the µs Redis spent in EVALSHA per message on each side (INFO
commandstats, read around each turn, so the turns of one side are summed
and the drift of the machine falls on both) and B - A. Each side's Lua text
is read from its checkout (its includes resolved), run by EVALSHA with the
KEYS and ARGV this checkout's scripts module builds: the two texts must take
the same KEYS and ARGV (or B a superset: A's script leaves the rest unread).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)
import redis  # noqa: E402

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.keys import QueueKeys  # noqa: E402
from smqsup.store import scripts  # noqa: E402

#: A take's fixed ARGV before its acks (take.lua's ARGV[1..9]).
TAKE_FIXED_ARGS = 9
_SOURCE = ("import sys; sys.path.insert(0, sys.argv[1]); from smqsup.store.scripts.calls import _source; "
           "sys.stdout.write(_source(sys.argv[2]))")


def script_text(checkout: str, name: str) -> str:
    """Lua script ``name`` of the checkout at ``checkout``, its includes resolved (read by that checkout's code)."""
    return subprocess.run([sys.executable, "-c", _SOURCE, checkout, name], capture_output=True, text=True,
                          check=True).stdout


def checkout_of(rev: str, tmp: str) -> str:
    """A directory holding ``rev`` of this repository: a detached worktree in ``tmp`` (removed by ``drop``)."""
    path = str(Path(tmp) / rev.replace("/", "_").replace("~", "_"))
    subprocess.run(["git", "-C", str(common.REPO_ROOT), "worktree", "add", "--detach", "-q", path, rev], check=True)
    return path


def drop(path: str) -> None:
    """Remove a worktree checkout_of made."""
    subprocess.run(["git", "-C", str(common.REPO_ROOT), "worktree", "remove", "--force", path], check=False)


class Side:
    """One side's queue, script and tally: the calls of a consumer draining it."""

    def __init__(self, client: Any, sha: str, url: str, queue: str, args: argparse.Namespace) -> None:
        self.client, self.sha, self.args = client, sha, args
        with Producer(url, common.NAMESPACE) as producer:
            for g in range(args.groups):
                bodies = [{"i": g * args.per_group + j} for j in range(args.per_group)]
                producer.publish_many(queue, bodies, group=None if args.plain else f"g{g}")
        keys = QueueKeys(common.NAMESPACE, queue)
        client.hset(keys.consumers, "c1", "{}")
        if args.script == "take":
            call: Any = scripts.take(keys, "c1", args.count)
            self.held: list[bytes] = []
        elif args.script == "nack":
            self.held = list(scripts.take(keys, "c1", 1).run(client).frames)
            call = scripts.nack(keys, "c1", self.held[0], retry_threshold=1, delay_ms=0,
                                meta='{"reason":"bench"}', fetch_next=True)
        else:
            self.held = list(scripts.take(keys, "c1", 1).run(client).frames)
            call = scripts.ack(keys, "c1", self.held[0], True)
        self.keys, self.argv = list(call.keys), list(call.args)
        self.us = self.messages = 0
        self.done = False

    def turn(self, chunk: int) -> None:
        """``chunk`` calls (fewer once the queue is drained), their EVALSHA µs added to the tally."""
        before = evalsha_us(self.client)
        for _ in range(chunk):
            if self.args.script == "take":
                reply = self.client.evalsha(self.sha, len(self.keys), *self.keys,
                                            *self.argv[:TAKE_FIXED_ARGS], *self.held)
                self.held = list(reply[6::2])
            else:
                self.argv[0] = self.held[0]
                nxt = self.client.evalsha(self.sha, len(self.keys), *self.keys, *self.argv)[1]
                self.held = [nxt] if nxt else []
            self.messages += len(self.held)
            if not self.held:
                self.done = True
                break
        self.us += evalsha_us(self.client) - before


def evalsha_us(client: Any) -> int:
    """µs Redis has spent in EVALSHA since its start."""
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))


def measure(a: str, b: str, args: argparse.Namespace) -> tuple[Side, Side]:
    """Both sides drained in turns on one private redis-server."""
    with common.bench_server() as server:
        client = redis.Redis.from_url(server.url)
        texts = [script_text(path, args.script) for path in (a, b)]
        sides = [Side(client, client.script_load(text), server.url, f"ab{i}", args) for i, text in enumerate(texts)]
        while not all(side.done for side in sides):
            for side in sides:
                if not side.done:
                    side.turn(args.chunk)
        return sides[0], sides[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="A: a git revision of this repository, or a checkout's directory")
    parser.add_argument("b", nargs="?", default=str(common.REPO_ROOT), help="B (default: this checkout)")
    parser.add_argument("--script", choices=("ack", "take", "nack"), default="ack")
    parser.add_argument("--count", type=int, default=32, help="frames per take (--script take)")
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--per-group", type=int, default=10)
    parser.add_argument("--plain", action="store_true", help="publish without groups")
    parser.add_argument("--chunk", type=int, default=500, help="calls per turn of a side")
    parser.add_argument("--repeats", type=int, default=1)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    kind = "plain" if args.plain else f"{args.groups:,} groups x {args.per_group}"
    what = {"take": f"take of {args.count}", "nack": "fail and take the next"}.get(args.script, "ack and take the next")
    print(f"smqsup script A/B: {common.machine()}\n{args.script}.lua ({what}), {kind}, A = {args.a}, B = {args.b}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [rev if Path(rev).is_dir() else checkout_of(rev, tmp) for rev in (args.a, args.b)]
        made = [path for path, rev in zip(paths, (args.a, args.b)) if path != rev]
        try:
            for _ in range(args.repeats):
                a, b = measure(paths[0], paths[1], args)
                ua, ub = a.us / max(1, a.messages), b.us / max(1, b.messages)
                print(f"  A {ua:6.2f} µs/msg   B {ub:6.2f} µs/msg   B - A {ub - ua:+6.2f} µs ({ub / ua - 1:+.1%})"
                      f"   [{a.messages:,} and {b.messages:,} messages]", flush=True)
        finally:
            for path in made:
                drop(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
