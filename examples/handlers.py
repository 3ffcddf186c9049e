"""Example handlers: what a user of smqsup writes.

A handler takes one message and returns to ack it or raises to unack it
(the message is then retried, and dead-lettered past retry_threshold).
``raise Reject(why)`` dead-letters it at once; ``raise Retry(delay=s)``
retries it after that delay instead of the queue's retry_delay.
"""

from __future__ import annotations

import asyncio
import logging
import random

from smqsup import Message, Reject, Retry

log = logging.getLogger(__name__)


def process_order(message: Message) -> None:
    """Ack every order; an order without an "id" can never succeed: rejected
    (dead-lettered at once, no retries)."""
    order = message.body
    if not isinstance(order, dict) or "id" not in order:
        raise Reject(f"order without an id: {order!r}")
    log.info("order %s: %s x %s (message %s, attempt %d, priority %d)", order["id"], order.get("qty", 1),
             order.get("item", "?"), message.id, message.attempts + 1, message.priority)


async def send_email(message: Message) -> None:
    """An async handler: a task on the consumer's event loop, up to the queue's
    concurrency at once (examples/queues.yaml runs 20)."""
    await asyncio.sleep(0.01)  # stands for an HTTP call to a mail service
    log.info("email to %s sent (message %s)", message.body.get("to"), message.id)


def flaky(message: Message) -> None:
    """Fails one time in three: shows retries, retry_delay and the dead-letter
    list; one time in ten the upstream says when to come back (Retry)."""
    roll = random.random()
    if roll < 0.1:
        raise Retry(delay=2.0, reason="upstream busy: come back in 2 s")
    if roll < 1 / 3:
        raise ConnectionError("upstream timed out")
    log.info("flaky job %s done on attempt %d", message.id, message.attempts + 1)


def report(message: Message) -> None:
    """What a schedule fired (examples/queues.yaml's schedules: section): the
    headers say which schedule and which slot, so a handler can tell a late
    fire, or a catch-up after an outage, from an on-time one."""
    log.info("report %s for slot %s%s: %s", message.headers.get("smqsup-schedule"),
             message.headers.get("smqsup-fire-time"),
             " (standing for missed slots too)" if message.headers.get("smqsup-catch-up") else "", message.body)
