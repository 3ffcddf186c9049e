-- Move delayed messages whose due time has come to the pending list.
--
-- KEYS[1]  delayed sorted set of the queue (score: due time, ms, Redis clock)
-- KEYS[2]  pending list of the queue
-- KEYS[3]  (optional) garbage-collector lock key
-- ARGV[1]  most messages to move in this call (integer > 0)
-- ARGV[2]  (with KEYS[3]) the caller's lock token; the script refuses to act
--          unless KEYS[3] holds exactly this token
--
-- Returns {moved, wait_ms}: wait_ms is the time until the next delayed message
-- is due (0 if more are due now, -1 if the set is empty). Error reply
-- "NOTLEADER" when the token check fails.
-- A key of the wrong type among KEYS[1, 2] is an error reply "WRONGTYPE ..."
-- before anything is written (includes/wrong_type.lua).
local delayed, pending, lock_key = KEYS[1], KEYS[2], KEYS[3]
local limit, token = tonumber(ARGV[1]), ARGV[2]
--- @include "lock"
--- @include "wrong_type"
--- @include "now_ms"

local refused = not_leader(lock_key, token) or wrong_type({{delayed, 'zset'}, {pending, 'list'}})
if refused then return refused end
local at_ms = now_ms()
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', at_ms, 'LIMIT', 0, limit)
for _, frame in ipairs(due) do
  redis.call('ZREM', delayed, frame)
  redis.call('LPUSH', pending, frame)
end
local head = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
local wait_ms = -1
if head[2] then
  wait_ms = math.max(0, tonumber(head[2]) - at_ms)
end
return {#due, wait_ms}
