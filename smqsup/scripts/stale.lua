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
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[2])
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now_ms - tonumber(ARGV[1])), 'LIMIT', 0, limit)
local orphans = {}
local ids = redis.call('HKEYS', KEYS[2])
for _, cid in ipairs(ids) do
  if #orphans >= limit then break end
  if not redis.call('ZSCORE', KEYS[1], cid) then
    orphans[#orphans + 1] = cid
  end
end
return {stale, orphans}
