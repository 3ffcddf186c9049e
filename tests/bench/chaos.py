"""DESIGN section 7's chaos figure: 100,000 messages while consumers are
SIGKILLed at random every 200 ms, the supervisor is SIGKILLed and restarted,
and redis-server (AOF, appendfsync always) is killed and restarted.

    python tests/bench/chaos.py [--messages 100000] [--rate 2000]

Prints what was published, handled, dead-lettered, lost (must be 0) and
duplicated (must not exceed the kills), and how many of each kill happened.
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

from smqsup.redis_server import RedisServer  # noqa: E402
from tests.chaos import report, run_chaos  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=2000.0, help="messages published per second")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="smqchaos-"))
    server = RedisServer(root / "redis", appendfsync="always")
    server.start()
    try:
        r = run_chaos(server, root, messages=args.messages, rate=args.rate, batch=200,
                      rng=random.Random(args.seed), deadline_s=900)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    summary = report(r)
    print(json.dumps(summary))
    ok = not r.lost and r.duplicates <= r.kills
    print(f"lost {len(r.lost)} of {r.published} (target 0); duplicates {r.duplicates} for {r.kills} kills "
          f"(target <= 1 per kill): {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
