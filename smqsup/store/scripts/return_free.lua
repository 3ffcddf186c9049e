-- Return the messages of a consumer's list to its queue free of cost, the
-- registry untouched: the collector's sweep of a retired consumer's list (it
-- moved one more message there before it learnt it had been declared dead),
-- under the collector's lock; and a supervised consumer's own stop, whose
-- supervisor unregisters it when it reaps it (so that the supervisor's
-- heartbeat never takes a consumer that merely stopped for one declared dead).
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  dead-letter list of the queue (bytes that are not a frame)
-- KEYS[4]  counters hash of the queue ("reclaimed", "dead_lettered")
-- KEYS[5]  tracking hash of the queue, KEYS[6] its expiry set, KEYS[7] its cancel set,
--          KEYS[8] its event stream
--          (includes/track.lua: a message whose cancel was asked is dead-lettered "cancelled")
-- KEYS[9]  its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[10..15] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
-- KEYS[16] (optional) garbage-collector lock key
-- ARGV[1]  dead-letter metadata: a JSON object text with at least "reason"
-- ARGV[2]  most messages to move in this call (integer > 0)
-- ARGV[3]  (with KEYS[16]) the caller's lock token: the script refuses to act
--          unless KEYS[16] holds exactly this token
--
-- Returns {requeued, dead_lettered, remaining}; remaining > 0 means call
-- again. With KEYS[16] given and the token not matching, an error reply
-- "NOTLEADER".
-- A key of the wrong type among KEYS[1, 2, 3] is an error reply
-- "WRONGTYPE ..." before anything is written (includes/wrong_type.lua).
local processing, pending, dead, counters = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local lock_key = KEYS[16]
local T = {hash = KEYS[5], expiry = KEYS[6], cancel = KEYS[7], events = KEYS[8], deps = KEYS[9]}
local meta, limit, token = ARGV[1], tonumber(ARGV[2]), ARGV[3]
--- @include "lock"
--- @include "wrong_type"
--- @include "now_ms"
--- @include "move_frames"
groups_use(10, pending)

local refused = not_leader(lock_key, token)
  or wrong_type({{processing, 'list'}, {pending, 'list'}, {dead, 'list'}})
if refused then return refused end
local requeued, dead_lettered, remaining = move_frames(processing, pending, dead, counters, false, 0,
                                                       meta, limit, now_ms(), nil, nil, T)
return {requeued, dead_lettered, remaining}
