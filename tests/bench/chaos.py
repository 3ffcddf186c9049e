"""DESIGN section 7's chaos figure: 100,000 messages while consumers are
SIGKILLed at random every 200 ms, the supervisor is SIGKILLed and restarted,
and redis-server (AOF, appendfsync always) is killed and restarted.

    python tests/bench/chaos.py [--messages 100000] [--rate 2000] [--poison]
        [--rate-limit 2500/s] [--concurrency 4] [--partitions 2] [--prefetch 16]

Prints what was published, handled, dead-lettered, lost (must be 0) and
duplicated, and how many of each kill happened. Duplicates must not exceed
kills x (concurrency + prefetch - 1): the frames a consumer can have started
and not yet settled when it is killed (with the defaults, 1 per kill), plus,
per death of a poison message, those frames but the poison itself.
With --poison, 1 % of the messages raise, 0.5 % end their process and 0.5 %
hang past message_timeout: each must be dead-lettered after retry_threshold
+ 1 deliveries, and the run must end within a bound computed from the work.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from smqsup.config import model  # noqa: E402

#: The largest prefetch (1 on a commit before prefetch: these scripts run there too, for ABBA).
PREFETCH_MAX: int = getattr(model, "PREFETCH_MAX", 1)
from smqsup.launch.process import RedisServer  # noqa: E402
from tests.support.chaos import POISON, POISON_THRESHOLD, ChaosResult, report, run_chaos  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages published per second")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--poison", action="store_true", help="mix in raising, exiting and hanging messages")
    parser.add_argument("--rate-limit", help="the queue's rate_limit (e.g. 2500/s; default none)")
    parser.add_argument("--concurrency", type=int, default=1, help="the queue's concurrency (default 1)")
    parser.add_argument("--partitions", type=int, default=1, help="the queue's partitions (default 1)")
    parser.add_argument("--prefetch", type=int, default=1, help=f"the queue's prefetch (1-{PREFETCH_MAX}; default 1)")
    args = parser.parse_args()
    if not 1 <= args.prefetch <= PREFETCH_MAX:
        parser.error(f"--prefetch takes a value from 1 to {PREFETCH_MAX}")
    return args


def verdict(r: ChaosResult, args: argparse.Namespace) -> bool:
    """Print the run's figures against their targets; whether it passed."""
    ok = not r.lost and r.duplicates <= r.duplicate_bound
    print(f"lost {len(r.lost)} of {r.published} (target 0); duplicates {r.duplicates} for {r.kills} kills and "
          f"{r.poison_deaths} poison deaths (target <= {r.duplicate_bound}: {r.in_flight} = concurrency "
          f"{args.concurrency} + prefetch {args.prefetch} - 1 per kill, {r.in_flight - 1} per poison death); "
          f"good messages dead-lettered: {r.good_dead}")
    if args.poison:
        poison = sum(r.poison.values())
        bounded = r.poison_dead == poison and max(r.poison_deliveries, default=0) <= POISON_THRESHOLD + 1
        timely = r.seconds <= r.time_bound_s
        ok = ok and bounded and timely
        print(f"poison {dict(r.poison)}: {r.poison_dead} of {poison} dead-lettered, deliveries "
              f"{dict(sorted(r.poison_deliveries.items()))} (target <= {POISON_THRESHOLD + 1}); "
              f"{r.seconds:.1f} s against a bound of {r.time_bound_s:.1f} s from the work")
    print("PASS" if ok else "FAIL")
    return ok


def main() -> int:
    args = parse_args()
    options: dict[str, object] = {"concurrency": args.concurrency, "partitions": args.partitions,
                                  "prefetch": args.prefetch}
    if args.rate_limit:
        options["rate_limit"] = args.rate_limit
    root = Path(tempfile.mkdtemp(prefix="smqchaos-"))
    server = RedisServer(root / "redis", appendfsync="always")
    server.start()
    try:
        r = run_chaos(server, root, messages=args.messages, rate=args.rate, batch=200,
                      rng=random.Random(args.seed), deadline_s=900, poison=POISON if args.poison else None,
                      options=options)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({**report(r), "options": options}))
    return 0 if verdict(r, args) else 1


if __name__ == "__main__":
    sys.exit(main())
