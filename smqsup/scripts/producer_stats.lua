-- Record one producer's statistics and forget producers silent for too long.
--
-- KEYS[1]  producers hash of the namespace (id -> JSON)
-- KEYS[2]  producers "seen" sorted set (score: ms of the last flush, Redis clock)
-- ARGV[1]  producer id
-- ARGV[2]  its statistics, a JSON object text without the time
-- ARGV[3]  forget producers not seen for this many ms
--
-- Returns the number of producers forgotten. (Not tagged by queue: these keys
-- are namespace-wide; on Redis Cluster both share the tag {namespace}.)
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], '{"seen_at_ms":' .. string.format('%d', now_ms) .. ',' .. string.sub(ARGV[2], 2))
redis.call('ZADD', KEYS[2], now_ms, ARGV[1])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms - tonumber(ARGV[3]))
for _, id in ipairs(old) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return #old
