-- Reclaim the messages of a consumer whose heartbeat is stale (the
-- collector's path, and a supervisor's for its own host's orphans at start):
-- each message costs an attempt; the consumer is unregistered once its list
-- is empty. Nothing is done if the heartbeat came back meanwhile.
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  dead-letter list of the queue
-- KEYS[4]  counters hash of the queue ("reclaimed", "dead_lettered")
-- KEYS[5]  consumers registry hash of the queue
-- KEYS[6]  heartbeats sorted set of the queue (score: ms, Redis clock)
-- KEYS[7]  retired consumers sorted set (score: ms when unregistered, Redis clock)
-- KEYS[8]  tracking hash of the queue, KEYS[9] its expiry set, KEYS[10] its cancel set,
--          KEYS[11] its event stream
--          (includes/track.lua: a message whose cancel was asked is dead-lettered "cancelled")
-- KEYS[12] its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[13..18] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
-- KEYS[19] its ready times (includes/ready_at.lua: a message back from the
--          consumer counts its lag from now)
-- KEYS[20] (optional) garbage-collector lock key
-- ARGV[1]  retry_threshold: past it a message is dead-lettered
-- ARGV[2]  dead-letter metadata: a JSON object text with at least "reason"
-- ARGV[3]  most messages to move in this call (integer > 0)
-- ARGV[4]  the consumer's id
-- ARGV[5]  stale_after in ms: act only if the consumer's heartbeat in KEYS[6]
--          is missing, older than this, or a day or more ahead (no heartbeat
--          wrote it: stale.lua); it may have come back since the caller
--          listed it as stale
-- ARGV[6]  (with KEYS[20]) the caller's lock token: the script refuses to act
--          unless KEYS[20] holds exactly this token
--
-- Returns {requeued, dead_lettered, remaining}; remaining > 0 means call
-- again; remaining -1 means the consumer is alive after all (nothing done).
-- With KEYS[20] given and the token not matching, an error reply "NOTLEADER".
-- A key of the wrong type among KEYS[1, 2, 3, 5, 6, 7] is an error reply
-- "WRONGTYPE ..." before anything is written (includes/wrong_type.lua).
local processing, pending, dead, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local consumers, heartbeats, retired, lock_key = KEYS[5], KEYS[6], KEYS[7], KEYS[20]
local T = {hash = KEYS[8], expiry = KEYS[9], cancel = KEYS[10], events = KEYS[11], deps = KEYS[12],
           ready_at = KEYS[19]}
local threshold, meta, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local consumer_id, stale_after_ms, token = ARGV[4], tonumber(ARGV[5]), ARGV[6]
--- @include "lock"
--- @include "wrong_type"
--- @include "now_ms"
--- @include "move_frames"
groups_use(13, pending)
--- @include "unregister"

local refused = not_leader(lock_key, token)
  or wrong_type({{processing, 'list'}, {pending, 'list'}, {dead, 'list'},
                 {consumers, 'hash'}, {heartbeats, 'zset'}, {retired, 'zset'}})
if refused then return refused end
local at_ms = now_ms()
local beat = tonumber(redis.call('ZSCORE', heartbeats, consumer_id))
-- A beat a day or more ahead was written by no heartbeat (stale.lua).
if beat and beat >= at_ms - stale_after_ms and beat <= at_ms + 86400000 then
  return {0, 0, -1}
end
local requeued, dead_lettered, remaining = move_frames(processing, pending, dead, counters, true, threshold,
                                                       meta, limit, at_ms, nil, nil, T)
if remaining == 0 then unregister(consumers, heartbeats, retired, consumer_id, at_ms) end
return {requeued, dead_lettered, remaining}
