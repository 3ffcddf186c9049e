-- Unack one message: its handler failed. Count the attempt, then retry it
-- (at once or after a delay) or dead-letter it; optionally take the next one.
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  delayed sorted set of the queue (score: due time, ms, Redis clock)
-- KEYS[4]  dead-letter list of the queue
-- KEYS[5]  counters hash of the queue
-- KEYS[6]  consumers registry hash of the queue
-- KEYS[7]  priority set of the queue (a retry of priority > 0 may go there)
-- KEYS[8]  priority sequence counter of the queue
-- KEYS[9]  paused flag of the queue
-- KEYS[10] rate key of the queue (includes/rate.lua)
-- KEYS[11] partition count of the queue, this partition's copy (includes/rate.lua)
-- KEYS[12] tracking hash of the queue, KEYS[13] its expiry set, KEYS[14] its
--          event stream
--          (includes/track.lua: "retrying" when delayed, else "waiting", or "dead";
--          a "retried" event's data says why: reason, error_type, delay_ms)
-- KEYS[15] its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[16..21] its group keys (includes/groups.lua: a grouped frame frees its
--          group's slot, and a retry ready at once goes back to its group)
-- KEYS[22] its cancel set (includes/track.lua): a message whose cancel was
--          asked is dead-lettered "cancelled" (counted "cancelled"), never
--          retried, whatever ARGV[2..4] say
-- KEYS[23] its ready times (includes/ready_at.lua): a retry ready at once
--          is written with now, so that its lag counts from its retry
-- ARGV[1]  the frame: the exact bytes the consumer fetched
-- ARGV[2]  retry_threshold: a message whose attempts would exceed it is
--          dead-lettered; -1 dead-letters at once (malformed messages); -2
--          too, without counting an attempt (a frame its consumer never
--          started: a prefetched message cancelled)
-- ARGV[3]  retry delay in ms (integer, >= 0; 0 = ready again at once: the
--          pending list, or the priority set, as includes/ready.lua says)
-- ARGV[4]  dead-letter metadata: a JSON object text with at least "reason"
-- ARGV[5]  "1": also move the oldest pending frame into KEYS[1]
-- ARGV[6]  the consumer's id
-- ARGV[7]  one more counter of KEYS[5] to add 1 to when the frame is
--          dead-lettered ("rejected" for a handler's Reject), or ""
-- ARGV[8]  the queue's rate limit: µs between handler starts across the
--          whole queue, "0" for none
-- ARGV[9]  its burst (>= 1)
-- ARGV[10] partitions the consumer works (rate_of's ``known``)
-- ARGV[11..13] the queue's group limits (take.lua's ARGV[6..8])
--
-- Counts in KEYS[5]: "retried" (back to pending or delayed), "dead_lettered",
-- "late_acks".
-- Returns {outcome, next, registered, paused, wait}
--   outcome  0 late (the frame was not in KEYS[1]: reclaimed; nothing done),
--            1 ready again, 2 delayed, 3 dead-lettered
--   next     the frame taken for the consumer, or false
--   registered  0 if the consumer is no longer in KEYS[6] (see ack.lua)
--   paused   1 if the queue is paused (nothing is taken)
--   wait     as ack.lua says
--
-- Attempts are read and counted as includes/attempts.lua says (the payload
-- is copied, never decoded; the count stops at nine digits).
-- A key of the wrong type among KEYS[1, 2, 3, 4, 6, 7] is an error reply
-- "WRONGTYPE ..." before anything is written (includes/wrong_type.lua).
-- Counters use redis.pcall: a counters hash that holds garbage costs its
-- statistics, never the move of a message.
local processing, pending, delayed, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local counters, consumers, prio_set, prio_seq, paused = KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local fetched, threshold, delay_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local meta, wanted, consumer_id, dead_event = ARGV[4], ARGV[5] == '1', ARGV[6], ARGV[7]
--- @include "wrong_type"
--- @include "fetch_next"
local q = {processing = processing, pending = pending, counters = counters, consumers = consumers,
           priority = prio_set, paused = paused, dead = dead,
           rate = rate_of(KEYS[10], KEYS[11], ARGV[8], ARGV[9], ARGV[10])}
q.track = {hash = KEYS[12], expiry = KEYS[13], events = KEYS[14], deps = KEYS[15], cancel = KEYS[22]}
--- @include "ready_at"
groups_use(16, pending, prio_seq, ARGV[11], ARGV[12], ARGV[13])

-- One more attempt for the frame in hand, ready again (1) or delayed (2),
-- or to be dead-lettered (3); returns the outcome and the frame as it now
-- reads.
local function retry(frame, at_ms)
  local attempts, sep = attempts_of(frame)
  if attempts == nil or threshold == -2 then
    return 3, frame  -- not a frame at all (dead-letter the bytes as they are), or never started
  end
  attempts, frame = add_attempt(frame, attempts, sep)
  if threshold < 0 or attempts > threshold then
    return 3, frame
  elseif delay_ms > 0 then
    redis.call('ZADD', delayed, at_ms + delay_ms, frame)
    return 2, frame
  end
  make_ready(pending, prio_set, prio_seq, frame)
  ready_at_mark(KEYS[23], {frame}, at_ms, at_ms)
  return 1, frame
end

-- The "retried" event of a frame that has events (includes/track.lua),
-- saying why: its data {"reason", "error_type", "delay_ms"} (delay_ms 0:
-- ready again at once), from ARGV[4]; metadata that is not a JSON object
-- leaves only delay_ms (it still costs nothing but the event's data).
local function retried_event(T, frame)
  local id, _, attempts, events_max = tracked_of(frame)
  if not id or events_max == 0 then return end
  local ok, why = pcall(cjson.decode, meta)
  if not ok or type(why) ~= 'table' then why = {} end
  local data = {delay_ms = delay_ms}
  if type(why.reason) == 'string' then data.reason = why.reason end
  if type(why.error_type) == 'string' then data.error_type = why.error_type end
  add_event(T, events_max, 'retried', id, attempts, cjson.encode(data))
end

local refused = wrong_type({{processing, 'list'}, {pending, 'list'}, {delayed, 'zset'},
                           {dead, 'list'}, {consumers, 'hash'}, {prio_set, 'zset'}})
if refused then return refused end
local outcome = 0
if redis.call('LREM', processing, 1, fetched) == 0 then
  redis.pcall('HINCRBY', counters, 'late_acks', 1)
else
  group_settled(fetched)
  local at_ms = now_ms()
  local frame
  if cancel_asked(q.track, fetched) then
    -- (it ran, unless its consumer says not: an attempt, as a failure costs)
    if threshold ~= -2 then threshold = -1 end
    outcome, frame = retry(fetched, at_ms)
    meta = dead_event == 'cancelled' and meta or '{"reason":"cancelled"}'
    dead_event = 'cancelled'
  else
    outcome, frame = retry(fetched, at_ms)
  end
  if outcome == 3 then
    dead_letter(dead, meta, at_ms, frame, q.track)
    redis.pcall('HINCRBY', counters, 'dead_lettered', 1)
    if dead_event and dead_event ~= '' then redis.pcall('HINCRBY', counters, dead_event, 1) end
  else
    track(q.track, frame, outcome == 2 and 'retrying' or 'waiting', nil, at_ms)
    retried_event(q.track, frame)
    redis.pcall('HINCRBY', counters, 'retried', 1)
  end
end
local registered, nxt, is_paused, wait = fetch_next(redis.call, q, consumer_id, wanted)
return {outcome, nxt, registered, is_paused, wait, DEPS.told, DEPS.ended}
