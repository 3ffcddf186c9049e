"""smqsup.store.core: what the sync and the asyncio drivers decide alike,
written once, with no I/O (sans-I/O: each function takes replies and gives
commands or answers; the drivers in sync/ and aio/ only send and await).

- records.py: Record, a tracked message's record as readers see it (parse, found_in).
- plans.py: where a message is, its record, a cancel's answer, when a wait stops.
- subscriptions.py: Channels, the shared pub/sub subscription's protocol (what to send, what a reply means).
- replies.py: replies read alike (TIME, text, WAIT's count against the wanted), the one logger name.
- failures.py: wrapped()/translated(): redis-py's errors as smqsup's; NotSent, REDIRECTIONS.
- urls.py: Redis urls read without I/O: cluster seeds, Sentinel parts, option bounds, the url's ConfigError.
- routing.py: Redis Cluster's rules: the key a command routes by, redirect patience, a batch per master put back.
- publish_plan.py: a publish's script calls, its batch (chunks, registration, WAIT) and its replies read.
- declared.py: Declared, what a queue declares for its producers (result_ttl, events_max), its partitions.
- event_entries.py: Event, a stream entry read; cursors; the partitions' replies merged.
- keycache.py: KeyCache, each queue's QueueKeys made once per store.
- consumer_info.py: ConsumerInfo, what a heartbeat says; RateMeter, its rate.
"""
