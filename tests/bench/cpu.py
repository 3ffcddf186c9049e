"""CPU per message of one consumer, counted, not timed (DESIGN section 7).

    python tests/bench/cpu.py [--messages 2500 6500] [--prefetch 1]

One consumer (``Consumer(...).run()`` with ``max_messages``, in a process
of its own, no-op handler) drains messages already published to a private
redis-server; ``valgrind --tool=callgrind`` counts the instructions of that
process alone (the server runs outside valgrind). Run twice, with the two
``--messages`` counts: the difference divided by the difference in messages
is the cost of one message, without the process's start and end. Counts do
not depend on what else the machine does, and with one hash seed they vary by
about 1 % from run to run (seen here), far less than any timed figure: run it
twice in each of two checkouts to compare the commits. ``--prefetch N``: the
consumer's queue option ``prefetch`` (frames taken in one round trip; default
1), said in the header.

Needs valgrind on PATH. SMQSUP_BENCH_TCP=1 runs the server on TCP loopback.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as common  # noqa: E402  (puts the repo root on sys.path too)

from smqsup.client.producer import Producer  # noqa: E402
from smqsup.config import model  # noqa: E402

#: The largest prefetch (1 on a commit before prefetch: these scripts run there too, for ABBA).
PREFETCH_MAX: int = getattr(model, "PREFETCH_MAX", 1)

_TOTAL = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def consume(url: str, count: int, prefetch: int) -> None:
    """The measured process: one consumer at this prefetch over ``count`` no-op messages."""
    consumer = common.run_consumer(url, "bench", noop, max_messages=count, prefetch=prefetch)
    if consumer.stats.received != count:
        raise SystemExit(f"the consumer stopped after {consumer.stats.received} of {count} messages")


def noop(message: object) -> None:
    """The benchmark handler: does nothing."""


def instructions(url: str, count: int, prefetch: int, out_dir: str) -> int:
    """Instructions the consumer process (at this prefetch) ran over ``count`` messages (callgrind's total)."""
    with Producer(url, common.NAMESPACE) as producer:
        producer.publish_many("bench", list(range(count)))
    out = os.path.join(out_dir, f"callgrind.{count}")
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                    "--child", url, str(count), str(prefetch)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONHASHSEED": "0"})  # one hash seed: set and dict layouts alike
    match = _TOTAL.search(Path(out).read_bytes())
    if match is None:
        raise SystemExit(f"no total in {out}")
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, nargs=2, default=(2500, 6500), metavar=("FEW", "MANY"))
    parser.add_argument("--prefetch", type=int, default=1,
                        help=f"the consumer's prefetch (frames per take, 1-{PREFETCH_MAX}; default 1)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        consume(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    if not 1 <= args.prefetch <= PREFETCH_MAX:
        parser.error(f"--prefetch takes a value from 1 to {PREFETCH_MAX}")
    if shutil.which("valgrind") is None:
        print("valgrind is not on PATH (apt-get install valgrind)", file=sys.stderr)
        return 2
    few, many = sorted(args.messages)
    if few <= 0 or few == many:
        parser.error("--messages needs two different positive counts")
    print(f"smqsup CPU per message: {common.machine()}")
    with common.bench_server() as server, tempfile.TemporaryDirectory(prefix="smqcpu-") as out_dir:
        print(f"one consumer, no-op handler, prefetch {args.prefetch}, {common.transport(server)}; "
              f"callgrind over {few} and {many} messages")
        low = instructions(server.url, few, args.prefetch, out_dir)
        high = instructions(server.url, many, args.prefetch, out_dir)
    print(f"  {few:>6} messages: {low:>14,} instructions")
    print(f"  {many:>6} messages: {high:>14,} instructions")
    print(f"per message: {(high - low) / (many - few):,.0f} instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
