"""smqsup.store.core: what the sync and the asyncio drivers decide alike,
written once, with no I/O (sans-I/O: each function takes replies and gives
commands or answers; the drivers in sync/ and aio/ only send and await).

- records.py: Record, a tracked message's record as readers see it (parse, found_in).
- plans.py: where a message is, its record, a cancel's answer, when a wait stops.
- subscriptions.py: Channels, the shared pub/sub subscription's protocol (what to send, what a reply means).
- consumer_info.py: ConsumerInfo, what a heartbeat says; RateMeter, its rate.
"""
