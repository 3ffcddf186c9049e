"""Every default value of smqsup, one line each, with its unit in its name."""

from __future__ import annotations

#: Prefix of every Redis key smqsup writes (Producer, YAML and CLI agree).
NAMESPACE = "smq"
#: Largest payload (envelope JSON) a publish accepts, in bytes (1 MiB).
MAX_MESSAGE_SIZE_BYTES = 1024 * 1024
#: Largest result a tracked message's handler may return, as JSON (more: a failed attempt).
RESULT_MAX_BYTES = 1024 * 1024
#: Largest progress value a handler may report, as JSON (more: refused with MessageError).
PROGRESS_MAX_BYTES = 16 * 1024
#: Longest result_ttl, s: what a frame's head holds (8 digits, about three years).
RESULT_TTL_MAX_S = 99_999_999
#: Entries a queue's event stream keeps (about: it is trimmed with MAXLEN ~), unless events_max says.
EVENTS_MAX = 10_000
#: The largest events_max: what a frame's head holds (7 digits).
EVENTS_MAX_MAX = 1_000_000
#: Most events one read of an event stream returns (Producer.events, the web UI).
EVENTS_READ_COUNT = 500
#: How many times a failing message is retried before it is dead-lettered.
RETRY_THRESHOLD = 3
#: Wait before a failed message returns to pending, in seconds (0: at once).
RETRY_DELAY_S = 0.0
#: Multiply retry_delay by this for each further attempt (1.0: no backoff).
RETRY_BACKOFF = 1.0
#: Upper bound of a backed-off retry delay, in seconds.
RETRY_DELAY_MAX_S = 3600.0
#: How long a published dedup key keeps refusing its duplicates, in seconds (24 h).
DEDUP_TTL_S = 86400.0
#: Consumers per queue the supervisor starts.
CONSUMERS = 1
#: A consumer's heartbeat period, in seconds.
HEARTBEAT_INTERVAL_S = 1.0
#: A consumer whose heartbeat is older than this is dead, in seconds.
HEARTBEAT_TIMEOUT_S = 10.0
#: Time a graceful stop gives an in-flight message, in seconds.
SHUTDOWN_TIMEOUT_S = 30.0
#: Longest a single message may run before its consumer is killed (0: no limit).
MESSAGE_TIMEOUT_S = 0.0
#: Messages a consumer handles before it is replaced (0: no limit).
MAX_MESSAGES = 0
#: Messages one consumer runs at once (queues.<name>.concurrency).
CONCURRENCY = 1
#: Frames a consumer takes in one round trip (queues.<name>.prefetch; 1: one).
PREFETCH = 1
#: Longest a finished message waits for its settle while others wait to
#: start (prefetch > 1), in s; an idle consumer settles at once.
SETTLE_WITHIN_S = 0.005
#: A consumer that runs messages concurrently cancels each one past
#: message_timeout itself; its supervisor kills it only when the oldest is
#: this much later still (its event loop is stuck).
STUCK_LOOP_GRACE_S = 2.0
#: Resident memory above which a consumer is replaced, in bytes (0: no limit).
MAX_MEMORY_BYTES = 0
#: How long one blocking fetch (BLMOVE) waits before the loop looks around, in s.
FETCH_BLOCK_S = 1.0
#: Longest the collector waits between looks for due delayed or scheduled messages, in s.
PROMOTE_POLL_S = 0.1
#: Most delayed messages promoted by one script call.
PROMOTE_BATCH = 500
#: Most promote calls for one queue in one collector tick (the rest waits a tick).
PROMOTE_BATCHES_PER_TICK = 10
#: Most messages one reclaim script call moves.
RECLAIM_BATCH = 1000
#: Socket timeout for Redis commands, in seconds (must exceed FETCH_BLOCK_S).
SOCKET_TIMEOUT_S = 10.0
#: redis.wait_replicas: most replicas a write may wait for; redis.wait_timeout:
#: how long it waits for them by default and at most (seconds; under
#: SOCKET_TIMEOUT_S, so WAIT's reply always comes before the socket gives up).
WAIT_REPLICAS_MAX = 100
WAIT_TIMEOUT_S = 1.0
WAIT_TIMEOUT_MAX_S = 5.0
#: After an ack or nack found fewer replicas than redis.wait_replicas, how
#: long the following ones do not wait for them, in seconds.
SETTLE_WAIT_PAUSE_S = 10.0
#: Socket connect timeout, in seconds.
CONNECT_TIMEOUT_S = 5.0
#: First wait before reconnecting after Redis went away, in seconds.
RECONNECT_BACKOFF_MIN_S = 0.05
#: Longest wait between reconnect attempts, in seconds.
RECONNECT_BACKOFF_MAX_S = 2.0
#: appendfsync of an embedded or test redis-server: always, everysec or no.
APPENDFSYNC = "everysec"
#: Seconds to wait for a private redis-server to answer PING after start.
REDIS_START_TIMEOUT_S = 10.0
#: Listen address of the web UI.
WEB_LISTEN = "127.0.0.1:8087"
#: How long a new consumer child waits for Redis before it exits (EXIT_REDIS).
CHILD_BOOT_REDIS_TIMEOUT_S = 10.0
#: First delay before restarting a consumer that crashed at start, in seconds.
RESTART_BACKOFF_MIN_S = 0.5
#: Longest delay between restarts of a crash-looping consumer, in seconds.
RESTART_BACKOFF_MAX_S = 30.0
#: A consumer up this long resets its queue's restart backoff, in seconds.
RESTART_BACKOFF_RESET_S = 60.0
#: Consecutive failed starts after which a queue goes FATAL.
RESTART_LIMIT = 10
#: New consumers of a roll that die at start, in a row, before the roll fails (the old ones keep running).
ROLL_START_FAILURES = 3
#: A roll request (smqsup roll) older than this by the Redis clock is stale: its command gave up
#: (it waits 5 s for the take) or died; the supervisor leaves it out, s.
ROLL_REQUEST_FRESH_S = 10.0
#: A rolled queue is watched this long after its roll ended: ROLL_START_FAILURES deaths of its new
#: consumers within it (a crash loop just past the probation) mark the roll failed, s.
ROLL_WATCH_S = 30.0
#: A new consumer of a roll not ready this long after its fork fails the roll (an import that hangs), s.
ROLL_READY_TIMEOUT_S = 60.0
#: How often a supervisor reads the lag and backlog of its autoscaled queues, in seconds (one round trip).
SCALE_LOOK_S = 0.5
#: An autoscaled queue sits idle while one consumer fewer would be busy at most this share of the time.
SCALE_DOWN_BUSY = 0.75
#: Bytes a consumer's report to its supervisor (its handler's files, or why its import failed) may hold.
CHILD_REPORT_MAX_BYTES = 4 * 1024 * 1024
#: A ready consumer that dies sooner than this without handling a message is a crash, s.
MIN_UPTIME_S = 2.0
#: How often the supervisor loop wakes when nothing happens, in seconds.
ARBITER_TICK_S = 0.1
#: How often a supervisor looks for a cancel asked since its last heartbeat (then beats at once), in seconds.
CANCEL_LOOK_S = 0.2
#: Looks for a message a cancel makes, when it moved between a look and the cancel script (the last is "nowhere").
CANCEL_LOOKS = 3
#: Socket timeout of the supervisor's own Redis client, in seconds.
SUPERVISOR_SOCKET_TIMEOUT_S = 2.0
#: How often the supervisor reads each child's USS (smaps_rollup is costly), s.
USS_SAMPLE_S = 10.0
#: How long the web UI child gets to stop before it is killed, in seconds.
WEB_STOP_TIMEOUT_S = 5.0
#: How long the collector watches the list of an unregistered consumer, in s.
RETIRED_WATCH_S = 600.0
#: Most retired consumers (the latest) whose lists one look examines.
RETIRED_SWEEP_MAX = 1000
#: How often the collector looks at retired consumers' lists, in seconds.
RETIRED_SCAN_S = 2.0
#: How often the supervisor retries the reclaims of dead children that Redis could not take, in s.
RECLAIM_RETRY_S = 1.0
#: How often the collector repeats a step's failure while it lasts (a refusal by Redis, an unexpected error), s.
COLLECTOR_TROUBLE_REPEAT_S = 60.0
#: How often a consumer of a paused queue looks whether it was resumed, in s.
PAUSED_POLL_S = 0.25
#: Longest a consumer that a rate limit gave no start waits before it asks
#: again, in s: a raised limit, or a rate key deleted or repaired, is
#: followed within this (a slow limit costs one fetch script a second).
RATE_LOOK_MAX_S = 1.0
#: Most partitions of one queue (each is a queue of its own in Redis: its
#: collector lock, its keys; every consumer of the queue registers in each).
PARTITIONS_MAX = 64
#: How long a process trusts the partition count of a queue it read from
#: Redis (a supervisor that raises it is followed within this), in seconds.
PARTITIONS_READ_S = 10.0
#: Most round trips an AsyncProducer has in flight at once, each on a connection of its own
#: (per master on a cluster); more publishes awaited together wait their turn.
AIO_ROUND_TRIPS = 16
#: Longest the collector waits between looks at a queue's schedules (changed definitions, resumes), in s.
SCHEDULE_POLL_S = 1.0
#: Longest one look at a queue's schedules holds the supervisor's loop, in s (the round goes on next tick).
SCHEDULE_LOOK_BUDGET_S = 0.02
#: Longest the looks at every queue's schedules hold the loop in one collector tick, in s: many
#: queues' rounds go on in later ticks rather than add up in one.
SCHEDULE_TICK_BUDGET_S = 0.05
#: Schedules one look reads at once (one HSCAN step, one round trip of their states).
SCHEDULE_BATCH = 100
#: A schedule state further ahead of the Redis clock than this is warned about (no slot fires), in ms.
SCHEDULE_AHEAD_MS = 86_400_000
#: First slots remembered per (definition, settled-up-to time), so a rare cron is not searched every look.
SCHEDULE_SLOTS_KEPT = 4096
#: Bytes one message listing (smqsup messages, dlq list, the web UI) may read whole beyond the heads of what it reads.
LISTING_WHOLE_BYTES = 4 * 1024 * 1024
#: Bytes of heads one listing reads in all: each element it cannot read whole shows its first share of these.
LISTING_HEADS_BYTES = 4 * 1024 * 1024
#: Most bytes of one element's head a listing reads (enough for its frame head, id, queue, dedup key, 200 chars).
LISTING_HEAD_MAX_BYTES = 2048
#: Fewest bytes of one element's head a listing reads, however many rows (its frame head and a 128-char id fit).
LISTING_HEAD_MIN_BYTES = 256
#: Most elements one listing script call reads (Redis is busy with one call at a time).
LISTING_CHUNK = 1000
#: Most parents one message may depend on (a fan-in of more is a batch's job: it has no such bound).
MAX_PARENTS = 10_000
#: How often the collector drains a queue's outbox (children of ended parents to tell), in s: the
#: consumer that acked a parent tells its children at once; this repairs a consumer that died first.
OUTBOX_LOOK_S = 0.5
#: A held child whose producer has not told all its parents after this long (it died between the
#: steps) is registered by the collector, in s.
HOLD_REPAIR_S = 10.0
#: An outbox entry whose target Redis refuses (a key of the wrong type) is set aside, not left first in
#: line: tried again after this long, doubled at each failure up to OUTBOX_RETRY_MAX_S, in s.
OUTBOX_RETRY_BASE_S = 1.0
#: The longest an outbox entry set aside waits between tries, in s: a parked entry completes at most this
#: long after its key is repaired.
OUTBOX_RETRY_MAX_S = 30.0
#: Failures after which an outbox entry set aside counts as parked (status shows it either way).
OUTBOX_PARK_AFTER = 5
#: Rounds one drain makes at most: down a cascade (children dead-lettered with children of their own), and
#: again on a partition whose read was full (500 entries a read).
DRAIN_ROUNDS = 16
#: How long the steps of a chain keep their results for the next step when neither the step nor its
#: queue says (result_ttl), in s.
CHAIN_RESULT_TTL_S = 86_400
#: How long a batch's keys (its status) last once its callbacks fired, in s; also how long the dedup key
#: of an on_success callback for another queue holds (so a repeated drain publishes it once).
BATCH_KEEP_S = 86_400
#: How often a consumer counts its batch members' ends on their batches (in bulk), at most, in s; at
#: once when it is about to wait for work.
BATCH_ENDS_S = 0.05

# --- lag and supervisor info
#: Bytes of a ready frame lag.lua sends back: its head (46 at most), '|{"id":"' and a 26-character id fit,
#: so a frame of megabytes is never sent whole.
LAG_HEAD_BYTES = 120
#: Message groups of a partition lag.lua reads one by one (the largest): their pauses, turns and next
#: frames; past that many, the others are taken as not paused (their count an estimate, garbage included).
#: About 5 us of Redis each (1,000 groups of 10: 160 us a read at 32, 1.2 ms at 200; 20 us with none).
LAG_GROUPS_READ = 32
#: A message id dated further back than this gives no lag (its id does not hold smqsup's time), in s.
LAG_MAX_AGE_S = 10 * 365 * 86_400
#: A supervisor's info not rewritten for this many of its own intervals (its every_s) is stale: its
#: supervisor is gone, and readers drop it ...
SUPERVISOR_INFO_STALE_EVERIES = 3
#: ... never sooner than this, in s.
SUPERVISOR_INFO_STALE_MIN_S = 3.0
#: How long a queue's supervisors hash outlasts its last write (PEXPIRE), in the writer's intervals
#: (heartbeat_interval): a supervisor SIGKILLed leaves its field until then (readers drop it sooner, as stale).
SUPERVISOR_INFO_KEEP_EVERIES = 10
#: Longest text a supervisor's info keeps when read (host, roll failure, scale reason), in characters.
SUPERVISOR_INFO_TEXT_CHARS = 300

# --- autoscaling
#: An autoscaled queue adds a consumer when its lag (the age of its oldest ready message) passes this, in s.
SCALE_UP_LAG_S = 5.0
#: An autoscaled queue adds a consumer when its ready messages per running consumer (per unit of
#: concurrency) pass this.
SCALE_UP_BACKLOG = 20
#: An autoscaled queue removes a consumer once its consumers sat idle this long, in s.
SCALE_DOWN_AFTER_S = 60.0
#: The least time between two scale steps of an autoscaled queue, in s.
SCALE_COOLDOWN_S = 1.0

#: How often the elected collector recounts the message groups' running counts and gives back lost turns, s.
GROUP_REPAIR_S = 5.0
