-- List the consumers of a queue that a garbage collector must reclaim.
--
-- KEYS[1]  heartbeats sorted set of the queue (score: ms, Redis clock)
-- KEYS[2]  consumers registry hash of the queue
-- ARGV[1]  heartbeat_timeout in ms: a consumer silent longer is dead
-- ARGV[2]  most ids to return (integer > 0)
--
-- Returns {stale, orphans}: ids whose heartbeat is older than the timeout,
-- or dated more than BEAT_AHEAD_MS ahead, and registered ids with no
-- heartbeat at all. Reads only; the reclaim that follows re-checks
-- staleness and the lock token atomically.
-- A heartbeat is dated by the Redis clock (heartbeat.lua), so one a day or
-- more ahead was written by no heartbeat (anyone may ZADD +inf): read as
-- stale, it cannot make its consumer immortal. (A Redis clock stepped back
-- by more than a day would reclaim the live consumers once; their
-- supervisors replace them.)
local heartbeats, consumers = KEYS[1], KEYS[2]
local timeout_ms, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local BEAT_AHEAD_MS = 86400000
--- @include "now_ms"

local at_ms = now_ms()
local stale = redis.call('ZRANGEBYSCORE', heartbeats, '-inf', '(' .. (at_ms - timeout_ms), 'LIMIT', 0, limit)
if #stale < limit then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', heartbeats, '(' .. (at_ms + BEAT_AHEAD_MS), '+inf', 'LIMIT', 0,
                                 limit - #stale)) do
    stale[#stale + 1] = id
  end
end
local orphans = {}
for _, consumer_id in ipairs(redis.call('HKEYS', consumers)) do
  if #orphans >= limit then break end
  if not redis.call('ZSCORE', heartbeats, consumer_id) then
    orphans[#orphans + 1] = consumer_id
  end
end
return {stale, orphans}
