"""The publishes that take more than one step, each step through the
Producer's store: a message held until its parents are done (depends_on),
a chain, a batch and its members. The checks and the bytes are
dependencies.py's and batching.py's; the protocols store/ops/workflows.py's and
store/ops/batches.py's."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional, Protocol

from smqsup import defaults
from smqsup.client import batching, dependencies
from smqsup.client.outgoing import Outgoing
from smqsup.client.publish_options import PublishOptions
from smqsup.client.publishing import Publishing, log
from smqsup.errors import BrokerError, MessageError
from smqsup.ids import new_id
from smqsup.store.broker import Broker
from smqsup.store.core.declared import Declared
from smqsup.store.ops.batches import public_id
from smqsup.store.ops.workflows import DEDUPLICATED, IN_USE


class Producer(Protocol):
    """The Producer, as these steps use it."""

    _core: Publishing
    _broker: Broker

    def _declared(self, queue: str) -> "tuple[int | BrokerError, Declared]":
        ...

    def _deliver(self, out: Outgoing, count: "int | BrokerError") -> list[str]:
        ...

    @property
    def publish(self) -> Callable[..., str]:
        ...

    def publish_members(self, batch: batching.Batch, queue: str, bodies: Iterable[Any],
                        headers: Optional[Mapping[str, Any]], options: dict[str, Any], *, many: bool) -> list[str]:
        ...

    def close_batch(self, batch: batching.Batch) -> bool:
        ...


def chain(producer: Producer, steps: Sequence[Any]) -> list[str]:
    """Publish ``steps``, each (queue, body) or (queue, body, {options})
    with publish()'s keywords, so that each waits for the one before
    (depends_on) and reads its result (message.parents); their ids, in
    order. Every step but the last is tracked: its ``result_ttl``, else
    its queue's, else CHAIN_RESULT_TTL_S. A step whose parent failed is
    dead-lettered, and with it each after it, but one with
    ``on_parent_failure="run"``. Every step is checked before the
    first is sent (MessageError)."""
    plan = dependencies.steps(steps)
    for i, (queue, body, opts) in enumerate(plan):
        if i < len(plan) - 1 and opts.get("result_ttl") is None:
            opts["result_ttl"] = producer._declared(queue)[1].result_ttl_s or defaults.CHAIN_RESULT_TTL_S
        if i < len(plan) - 1 and opts["result_ttl"] == 0:
            raise MessageError(f"chain[{i}]: result_ttl 0, but the next step reads its result")
        dependencies.failure_rule(opts.get("on_parent_failure", "fail"))
        checked = {k: v for k, v in opts.items() if k not in ("headers", "on_parent_failure")}
        producer._core.one(queue, body, opts.get("headers"), PublishOptions(**checked),
                           hooked=False)  # (a check: publish() below runs the hooks, once)
    ids: list[str] = []
    for i, (queue, body, opts) in enumerate(plan):
        after: dict[str, Any] = {"depends_on": [(plan[i - 1][0], ids[-1])]} if i else {}
        if not i:
            opts.pop("on_parent_failure", None)
        ids.append(producer.publish(queue, body, **opts, **after))
    return ids


def held(producer: Producer, out: Outgoing, count: "int | BrokerError", depends_on: object,
         on_parent_failure: object) -> str:
    """publish() of a message with ``depends_on`` (store/ops/workflows.py)."""
    wanted, run = dependencies.parents(depends_on), dependencies.failure_rule(on_parent_failure)
    core, flows = producer._core, producer._broker.workflows
    mid, kept, key, dedup_ttl_ms = dependencies.kept(out, run)
    if (out.queue, mid) in wanted:
        raise MessageError(f"depends_on: message {mid} of queue {out.queue} cannot depend on itself")
    if isinstance(count, BrokerError):
        count = core.uncounted(out.queue, out.ids, count)
    target = core.route(out, count)[0][0]
    try:
        found = flows.locate(wanted)
        waits = [(found[p] or "", p[1]) for p in dependencies.known(wanted, found)]
        status, holder, mark = flows.hold(target, mid, kept, waits, key, dedup_ttl_ms)
    except BrokerError as exc:
        raise dependencies.publish_error(exc, mid) from exc
    if status == IN_USE:
        raise MessageError(f"message_id {mid}: in use in queue {out.queue} (a message held or tracked there "
                           "has it); nothing was published")
    if status == DEDUPLICATED:
        return holder
    core.published += 1
    try:
        flows.register(target, mid, waits, mark)
    except BrokerError as exc:
        log.warning("queue %s: message %s is held, but telling its parents failed (%s); the queue's collector "
                    "does it within %.0f s", out.queue, mid, exc, defaults.HOLD_REPAIR_S)
    return mid


def open_batch(producer: Producer, on_complete: Optional[tuple[str, Any]],
               on_success: Optional[tuple[str, Any]]) -> batching.Batch:
    """A new batch (client/batching.py): once it is closed and every one
    of its messages ended, one message goes to ``on_complete`` (queue,
    body), and one to ``on_success`` when none failed, exactly once;
    their body: {"batch", "body" (the given one), "done", "failed",
    "failures" (the first 100: {"id", "queue", "reason"})}. At least
    one callback (MessageError)."""
    given = batching.callbacks(on_complete, on_success, producer._core.max_message_size)
    home = given[0][1]
    bid = new_id()
    fields: dict[str, Any] = {"created_ms": int(time.time() * 1000), "success_queue": ""}
    for name, queue, body_json in given:
        said = producer._declared(queue)[1]
        head = batching.frame_head_of(said.result_ttl_s, said.events_max)
        fields[name], fields["tail"] = batching.callback_frame(queue, body_json, public_id(home, bid), head)
        if name == "success" and queue != home:
            fields["success_queue"] = queue
    producer._broker.batches.open(home, bid, fields)
    return batching.Batch(producer, home, bid)


def members(producer: Producer, batch: batching.Batch, queue: str, bodies: Iterable[Any],
            headers: Optional[Mapping[str, Any]], options: dict[str, Any], *, many: bool) -> list[str]:
    """Batch.publish / publish_many: the messages, linked to ``batch``,
    then counted as its members on its home."""
    batch.check_open()
    with producer._core.send_span(queue) as send:
        headers = send.headers(headers)  # (tracing on: its traceparent)
        count, said = producer._declared(queue)
        given = PublishOptions(**options, link=batch.link)
        if many:
            out = producer._core.many(queue, bodies, headers, given, said)
        else:
            out = producer._core.one(queue, next(iter(bodies)), headers, given, said)
        ids = producer._deliver(out, count)
        send.done(ids, many=many)
    producer._broker.batches.add(batch.home, batch.batch_id, ids)
    return ids
