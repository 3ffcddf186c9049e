"""Any benchmark of this folder on two checkouts, in ABBA order: the other
checkout's copy first and last, this one's twice in the middle, so a drift
of the machine during the run (a warming CPU, a neighbour) weighs on both
alike. Each run is the benchmark's own process in its checkout (its own
smqsup, its own copy of the script), with its own baseline; this prints
each line the four runs print alike (the same words, other numbers) with
the numbers of A (the mean of its two runs) and of B, and B/A for each.

    python tests/bench/abba.py ../old-checkout -- throughput.py --messages 20000
    SMQSUP_BENCH_TCP=1 python tests/bench/abba.py /tmp/before -- latency.py --rate 500

The other checkout is a directory: ``git worktree add --detach /tmp/before
REV`` makes one of a commit.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, interruptible  # noqa: E402

#: A number as the benchmarks print them: thousands with commas (20,000), decimals with a point.
NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replay", type=Path, metavar="LOG",
                        help="print the comparison of a saved run's output (this script's) again, running nothing")
    parser.add_argument("other", type=Path, nargs="?", help="the other checkout (A): a directory holding smqsup/ and "
                        "tests/bench/")
    parser.add_argument("bench", nargs=argparse.REMAINDER,
                        help="-- SCRIPT [ARGS...]: a script of tests/bench and its arguments")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return args
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        parser.error("name a benchmark after --, e.g. -- throughput.py --messages 20000")
    if args.other is None or not (args.other / "smqsup").is_dir() or not (args.other / "tests" / "bench" / bench[0]).is_file():
        parser.error(f"{args.other}: not a checkout holding smqsup/ and tests/bench/{bench[0]}")
    args.bench = bench
    return args


def run(checkout: Path, bench: Sequence[str]) -> list[str]:
    """The lines one run of ``bench`` in ``checkout`` prints (its stderr passed through); its failure raised."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, str(checkout / "tests" / "bench" / bench[0]), *bench[1:]], cwd=checkout,
                          env=env, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: {bench[0]} failed with status {done.returncode}")
    return done.stdout.splitlines()


def compared(runs: dict[str, list[list[str]]]) -> list[str]:
    """Each line the runs print alike (the same text once numbers are
    blanked, in the same order), with A's mean, B's mean and B/A per number."""
    shapes = {label: [(NUMBER.sub("#", line), line) for line in lines if NUMBER.search(line)]
              for label, outputs in runs.items() for lines in outputs[:1]}
    out = []
    for i, (shape, line) in enumerate(shapes.get("B", [])):
        a_lines = [_line_at(lines, i, shape) for lines in runs["A"]]
        b_lines = [_line_at(lines, i, shape) for lines in runs["B"]]
        if None in a_lines or None in b_lines:
            continue
        a = _means([NUMBER.findall(x or "") for x in a_lines])
        b = _means([NUMBER.findall(x or "") for x in b_lines])
        ratios = " ".join(f"{y / x:.3f}" if x else "-" for x, y in zip(a, b))
        out.append(f"{line.strip()[:70]:70}  A {_shown(a)}  B {_shown(b)}  B/A {ratios}")
    return out


def _line_at(lines: list[str], i: int, shape: str) -> "str | None":
    numbered = [line for line in lines if NUMBER.search(line)]
    return numbered[i] if i < len(numbered) and NUMBER.sub("#", numbered[i]) == shape else None


def _means(rows: list[list[str]]) -> list[float]:
    width = min(len(row) for row in rows)
    return [sum(float(row[k].replace(",", "")) for row in rows) / len(rows) for k in range(width)]


def _shown(values: list[float]) -> str:
    return "[" + " ".join(f"{v:g}" for v in values) + "]"


def replayed(log: Path) -> dict[str, list[list[str]]]:
    """The four runs' lines of a saved output of this script (its "--- A:" and "--- B:" headers split them)."""
    runs: dict[str, list[list[str]]] = {"A": [], "B": []}
    current: "list[str] | None" = None
    for line in log.read_text().splitlines():
        if line.startswith(("--- A: ", "--- B: ")):
            current = []
            runs[line[4]].append(current)
        elif line.startswith("=== ABBA"):
            current = None
        elif current is not None:
            current.append(line)
    return runs


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.replay is not None:
        print("\n".join(compared(replayed(args.replay))))
        return 0
    other, here = args.other.resolve(), REPO_ROOT
    runs: dict[str, list[list[str]]] = {"A": [], "B": []}
    with interruptible(f"the ABBA run of {args.bench[0]}"):
        for label, checkout in (("A", other), ("B", here), ("B", here), ("A", other)):
            print(f"--- {label}: {checkout} {' '.join(args.bench)}", flush=True)
            lines = run(checkout, args.bench)
            print("\n".join(lines), flush=True)
            runs[label].append(lines)
    print(f"\n=== ABBA: A = {other}, B = {here} (means of two runs each)")
    print("\n".join(compared(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
