-- List the consumers of a queue that a garbage collector must reclaim.
--
-- KEYS[1]  heartbeats sorted set of the queue (score: ms, Redis clock)
-- KEYS[2]  consumers registry hash of the queue
-- ARGV[1]  heartbeat_timeout in ms: a consumer silent longer is dead
-- ARGV[2]  most ids to return (integer > 0)
--
-- Returns {stale, orphans}: ids whose heartbeat is older than the timeout,
-- and registered ids with no heartbeat at all. Reads only; the reclaim that
-- follows re-checks staleness and the lock token atomically.
local heartbeats, consumers = KEYS[1], KEYS[2]
local timeout_ms, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
--- @include "now_ms"

local stale = redis.call('ZRANGEBYSCORE', heartbeats, '-inf', '(' .. (now_ms() - timeout_ms), 'LIMIT', 0, limit)
local orphans = {}
for _, consumer_id in ipairs(redis.call('HKEYS', consumers)) do
  if #orphans >= limit then break end
  if not redis.call('ZSCORE', heartbeats, consumer_id) then
    orphans[#orphans + 1] = consumer_id
  end
end
return {stale, orphans}
