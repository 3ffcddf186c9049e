"""The publishing side, what application programs import (``from smqsup import Producer``).

    your program ─▶ Producer.publish ─▶ options (checked) ─▶ message frame ─▶ store (publish*.lua)

- producer.py: ``Producer``, the public API: publish one or many messages, with options, to a queue.
- options.py: the publish options (delay, at, priority, dedup_key, dedup_ttl, ttl) checked into what
  the publish scripts take; also how a frame's head carries them.
"""
