"""Publish example messages to the queues of examples/queues.yaml.

    python examples/producer.py                 # 10 orders, 3 emails, 10 flaky jobs
    python examples/producer.py --orders 10000  # more
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from smqsup import Producer
from smqsup.errors import SmqsupError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (run as a script: examples is a package)
from examples.hooks import Origin  # noqa: E402

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default=str(HERE / "queues.yaml"))
    parser.add_argument("--orders", type=int, default=10)
    parser.add_argument("--emails", type=int, default=3)
    parser.add_argument("--flaky", type=int, default=10)
    args = parser.parse_args()
    try:
        return publish(args)
    except SmqsupError as exc:  # no supervisor running, Redis unreachable, a bad config: one line, as the CLI
        print(f"Error: {exc}", file=sys.stderr)
        return exc.exit_code


def publish(args: argparse.Namespace) -> int:
    # from_config: the same Redis (or embedded server) and namespace as the consumers.
    # Origin: a hook that names this host and pid in each message's headers (examples/hooks.py).
    with Producer.from_config(args.config, hooks=[Origin()]) as producer:
        ids = producer.publish_many("orders", ({"id": n, "item": "widget", "qty": n % 5 + 1}
                                               for n in range(args.orders)))
        producer.publish("orders", {"item": "no id"})  # fails: ends in the dead-letter list
        # Each email in its tenant's group: the consumers take from the tenants in
        # turn (a big tenant does not hold up the others), at most 5 of one at once.
        for n in range(args.emails):
            producer.publish("emails", {"to": f"user{n}@example.com"}, headers={"template": "welcome"},
                             group=f"tenant-{n % 3}")
        producer.publish_many("flaky", range(args.flaky))
        # Options: an order handled in 5 s, an urgent one ahead of the queue, one
        # published twice under a dedup key (queued once), an email that is
        # dead-lettered as "expired" unless a consumer takes it within 10 minutes.
        producer.publish("orders", {"id": "later", "item": "gift"}, delay=5)
        producer.publish("orders", {"id": "urgent", "item": "spare part"}, priority=9)
        for _ in range(2):
            producer.publish("orders", {"id": "once", "item": "ticket"}, dedup_key="order-once")
        producer.publish("emails", {"to": "soon@example.com"}, ttl=600)
    print(f"published {len(ids) + 4} orders, {args.emails + 1} emails, {args.flaky} flaky jobs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
