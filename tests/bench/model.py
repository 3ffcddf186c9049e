"""Run the model-based test of the store longer than the suite does:

    python tests/bench/model.py --examples 2000 [--steps 80] [--seed N] [--url redis://...]

Prints the examples run and the failures found (each shrunk to a short
sequence of rules, the model's view noted). A private redis-server is
started unless --url names one (never the machine's shared server)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hypothesis import seed as with_seed  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

from tests.model import runner  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="sequences to run (default 1000)")
    parser.add_argument("--steps", type=int, default=runner_steps(), help="most rules in a sequence")
    parser.add_argument("--seed", type=int, default=None, help="a seed (default: a random one)")
    parser.add_argument("--url", default="", help="a Redis to use (flushed!); default: a private one")
    parser.add_argument("--shrink-seconds", type=float, default=600, help="most time shrinking the failures")
    args = parser.parse_args()
    started = time.monotonic()
    with runner.store(args.url) as driver:
        machine = runner.machine_for(driver)
        if args.seed is not None:
            machine = with_seed(args.seed)(machine)
        config = runner.suite_settings(args.examples, args.steps, derandomize=False, every_bug=True)
        try:
            with runner.shrinking_for(args.shrink_seconds):
                run_state_machine_as_test(machine, settings=config)
        except Exception as exc:  # noqa: BLE001 - the shrunk failures: each printed, counted
            failures = list(getattr(exc, "exceptions", [exc]))
            for n, failure in enumerate(failures, 1):
                print(f"--- failure {n}: {type(failure).__name__}: {failure}")
                print("\n".join(getattr(failure, "__notes__", [])))
            print(f"examples asked: {args.examples}; failures found: {len(failures)} "
                  f"({time.monotonic() - started:.0f} s)")
            return 1
    print(f"examples run: {args.examples}; failures found: 0 ({time.monotonic() - started:.0f} s)")
    return 0


def runner_steps() -> int:
    from tests.test_model import STEPS

    return STEPS


if __name__ == "__main__":
    sys.exit(main())
