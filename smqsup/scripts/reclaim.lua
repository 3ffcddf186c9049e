-- Return the messages held in one consumer's processing list to its queue:
-- the supervisor's fast path after reaping a child, the garbage collector's
-- path for a consumer whose heartbeat is stale, and a graceful stop.
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  dead-letter list of the queue
-- KEYS[4]  counters hash of the queue
-- KEYS[5]  consumers registry hash of the queue
-- KEYS[6]  heartbeats sorted set of the queue
-- KEYS[7]  retired consumers sorted set (score: ms when unregistered); the
--          collector keeps watching their lists for a while, in case a
--          consumer that does not know it was declared dead moves one more
--          message into its list before it dies
-- KEYS[8]  (optional) garbage-collector lock key
-- ARGV[1]  "1": each message costs an attempt (the consumer died or hung);
--          "0": it does not (graceful stop, scale-down)
-- ARGV[2]  retry_threshold: past it a message is dead-lettered
-- ARGV[3]  dead-letter metadata: a JSON object text with at least "reason"
-- ARGV[4]  most messages to move in this call (integer > 0)
-- ARGV[5]  consumer id, removed from KEYS[5] and KEYS[6] once its list is
--          empty ("" leaves the registry alone)
-- ARGV[6]  heartbeat_timeout in ms, or "0": when > 0 the script acts only if
--          the consumer's heartbeat is missing or older than this (it may
--          have come back since the collector listed it as stale)
-- ARGV[7]  (with KEYS[8]) the caller's lock token: the script refuses to act
--          unless KEYS[8] holds exactly this token
--
-- Returns {requeued, dead_lettered, remaining}; remaining > 0 means call
-- again; remaining -1 means the consumer is alive after all (nothing done).
-- With KEYS[8] given and the token not matching, returns an error reply
-- "NOTLEADER".
--
-- Order: frames are taken from the left (newest) and pushed on the right of
-- pending (its consuming end), so the oldest reclaimed frame is consumed first.
-- A key of the wrong type among KEYS[1, 2, 3, 5, 6, 7] is an error reply "WRONGTYPE ..."
-- before anything is written (includes/wrong_type.lua).
-- Counters use redis.pcall: a counters hash that holds garbage costs its
-- statistics, never the move of a message.
if KEYS[8] and redis.call('GET', KEYS[8]) ~= ARGV[7] then
  return redis.error_reply('NOTLEADER lock is not held by this token')
end
--- @include "wrong_type"
local refused = wrong_type({{KEYS[1], 'list'}, {KEYS[2], 'list'}, {KEYS[3], 'list'},
                           {KEYS[5], 'hash'}, {KEYS[6], 'zset'}, {KEYS[7], 'zset'}})
if refused then return refused end
local costs = ARGV[1] == '1'
local threshold = tonumber(ARGV[2])
local limit = tonumber(ARGV[4])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local timeout = tonumber(ARGV[6]) or 0
if timeout > 0 then
  local beat = redis.call('ZSCORE', KEYS[6], ARGV[5])
  if beat and tonumber(beat) >= now_ms - timeout then
    return {0, 0, -1}
  end
end
local meta = '{"at_ms":' .. string.format('%d', now_ms) .. ',' .. string.sub(ARGV[3], 2)
local requeued, dead = 0, 0
for _ = 1, limit do
  local frame = redis.call('LPOP', KEYS[1])
  if not frame then break end
  local sep = string.find(frame, '|', 1, true)
  local head = sep and string.sub(frame, 1, sep - 1)
  local attempts = head and #head <= 9 and string.match(head, '^%d+$') and tonumber(head) or nil
  local to_dead = attempts == nil
  if attempts ~= nil and costs then
    attempts = math.min(attempts + 1, 999999999)
    frame = string.format('%d', attempts) .. string.sub(frame, sep)
    to_dead = attempts > threshold
  end
  if to_dead then
    redis.call('LPUSH', KEYS[3], meta .. '\n' .. frame)
    dead = dead + 1
  else
    redis.call('RPUSH', KEYS[2], frame)
    requeued = requeued + 1
  end
end
local remaining = redis.call('LLEN', KEYS[1])
if requeued + dead > 0 then
  redis.pcall('HINCRBY', KEYS[4], 'reclaimed', requeued + dead)
  if dead > 0 then redis.pcall('HINCRBY', KEYS[4], 'dead_lettered', dead) end
end
if remaining == 0 and ARGV[5] ~= '' then
  redis.call('HDEL', KEYS[5], ARGV[5])
  redis.call('ZREM', KEYS[6], ARGV[5])
  redis.call('ZADD', KEYS[7], now_ms, ARGV[5])
end
return {requeued, dead, remaining}
