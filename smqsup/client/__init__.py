"""The publishing side, what application programs import (``from smqsup import Producer, AsyncProducer``).

    your program ─▶ Producer.publish ─▶ options (checked) ─▶ message frame ─▶ store (publish*.lua)

- producer_base.py: ``ProducerBase``, what both producers are, written once: their settings, from_config,
  and publish() / publish_many(), which gather the options into a PublishOptions for the producer's sending.
- producer.py: ``Producer``, the public API: publish one or many messages, with options, to a queue.
- aio_producer.py: ``AsyncProducer``, the same API as coroutines for asyncio programs (sent through store/aio/broker.py),
  results, state and progress of tracked messages too.
- publish_options.py: ``PublishOptions``, the options of one publish call in one frozen value.
- outgoing.py: Outgoing (a publish call's messages, encoded) and Sending (one round trip of them).
- publishing.py: what every producer shares, without I/O: argument checks, envelopes, the partition
  a message goes to, the errors of a failed send, the statistics a send carries.
- batching.py: ``Batch``, a batch's handle (publish, publish_many, close) and its callbacks' frames.
- aio_flows.py: the AsyncProducer's depends_on, chain and batches: the Producer's, on a thread; AsyncBatch.
- flows.py: the publishes of more than one step: a held child, a chain, a batch opened and its members.
- publish_hooks.py: what a hook object is (before_publish, before_process, after_process) and PublishHooks,
  the before_publish calls of a producer.
- spans.py: the send span of a publish call: smqsup.tracing's where the producer traces, else UNTRACED.
- checks.py: the checks of a publish's arguments (names, url, size, bodies, dedup keys) and a failed
  publish_many's one error.
- dependencies.py: what depends_on adds to a publish (parents checked, what a hold keeps) and a chain's steps.
- event_cursor.py: Reading, where a reading of a queue's event stream is (Producer.events, AsyncProducer.events).
- since.py: what ``since`` means where a reading of events starts (the producers' and ``smqsup events``').
- results.py: what a producer makes of a tracked message's record: its result, state, progress,
  or MessageFailed / ResultUnknown / TimeoutError.
- options.py: the publish options (delay, at, priority, dedup_key, dedup_ttl, ttl,
  result_ttl) checked into what
  the publish scripts take; also how a frame's head carries them.
"""
