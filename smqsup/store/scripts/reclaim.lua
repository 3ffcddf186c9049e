-- Return the messages of a consumer that is gone to its queue, then
-- unregister it: a dead child's list (each message costs an attempt), or a
-- stop that was asked for (free of cost).
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  dead-letter list of the queue
-- KEYS[4]  counters hash of the queue ("reclaimed", "dead_lettered")
-- KEYS[5]  consumers registry hash of the queue
-- KEYS[6]  heartbeats sorted set of the queue
-- KEYS[7]  retired consumers sorted set (score: ms when unregistered, Redis clock)
-- KEYS[8]  tracking hash of the queue, KEYS[9] its expiry set, KEYS[10] its cancel set,
--          KEYS[11] its event stream
-- KEYS[12] its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[13..18] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
--          (includes/track.lua: a message whose cancel was asked is dead-lettered "cancelled")
-- KEYS[19] its ready times (includes/ready_at.lua: a started message back
--          from a dead consumer counts its lag from now)
-- ARGV[1]  "1": each message costs an attempt (the consumer died);
--          "0": it does not (a stop asked for, a consumer re-registering)
-- ARGV[2]  retry_threshold: past it a costly reclaim dead-letters a message
-- ARGV[3]  dead-letter metadata: a JSON object text with at least "reason"
-- ARGV[4]  most messages to move in this call (integer > 0)
-- ARGV[5]  the consumer's id
-- ARGV[6]  (optional) with ARGV[1] "1": how many frames its consumer had
--          started, as its supervisor last read it: only that many, at the
--          list's right end, cost an attempt; the rest (prefetched, never
--          started) go back free. "-1" or absent: every frame costs
-- ARGV[7]  (optional, with ARGV[6]) of those, how many at the right end
--          ended by their handler returning: they go back free too (handled
--          again, never charged for a death that came after them)
--
-- Returns {requeued, dead_lettered, remaining}; remaining > 0 means call
-- again. Once KEYS[1] is empty the consumer leaves KEYS[5] and KEYS[6] and is
-- dated in KEYS[7]; until then it stays registered, so a reclaim cut short
-- (Redis gone between two calls) is found again.
-- A key of the wrong type among KEYS[1, 2, 3, 5, 6, 7] is an error reply
-- "WRONGTYPE ..." before anything is written (includes/wrong_type.lua).
local processing, pending, dead, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local consumers, heartbeats, retired = KEYS[5], KEYS[6], KEYS[7]
local T = {hash = KEYS[8], expiry = KEYS[9], cancel = KEYS[10], events = KEYS[11], deps = KEYS[12],
           ready_at = KEYS[19]}
local costs, threshold, meta = ARGV[1] == '1', tonumber(ARGV[2]), ARGV[3]
local limit, consumer_id = tonumber(ARGV[4]), ARGV[5]
local started = tonumber(ARGV[6] or '-1')
if not started or started < 0 then started = nil end
local returned = started and math.max(0, math.min(tonumber(ARGV[7] or '0') or 0, started)) or 0
--- @include "wrong_type"
--- @include "now_ms"
--- @include "move_frames"
groups_use(13, pending)
--- @include "unregister"

local refused = wrong_type({{processing, 'list'}, {pending, 'list'}, {dead, 'list'},
                           {consumers, 'hash'}, {heartbeats, 'zset'}, {retired, 'zset'}})
if refused then return refused end
local at_ms = now_ms()
local requeued, dead_lettered, remaining = move_frames(processing, pending, dead, counters, costs, threshold,
                                                       meta, limit, at_ms, started, returned, T)
if remaining == 0 then unregister(consumers, heartbeats, retired, consumer_id, at_ms) end
return {requeued, dead_lettered, remaining}
