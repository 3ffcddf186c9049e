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
if KEYS[3] and redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return redis.error_reply('NOTLEADER lock is not held by this token')
end
--- @include "wrong_type"
local refused = wrong_type({{KEYS[1], 'zset'}, {KEYS[2], 'list'}})
if refused then return refused end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[1]))
for _, frame in ipairs(due) do
  redis.call('ZREM', KEYS[1], frame)
  redis.call('LPUSH', KEYS[2], frame)
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local wait_ms = -1
if head[2] then
  wait_ms = math.max(0, tonumber(head[2]) - now_ms)
end
return {#due, wait_ms}
