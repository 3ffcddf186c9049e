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
local producers, seen = KEYS[1], KEYS[2]
local producer_id, stats, forget_after_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
--- @include "now_ms"

local at_ms = now_ms()
local stamped = '{"seen_at_ms":' .. string.format('%d', at_ms) .. ',' .. string.sub(stats, 2)
redis.call('HSET', producers, producer_id, stamped)
redis.call('ZADD', seen, at_ms, producer_id)
local old = redis.call('ZRANGEBYSCORE', seen, '-inf', at_ms - forget_after_ms)
-- Dated more than a day ahead: written by no flush (anyone may ZADD +inf), forgotten too.
for _, id in ipairs(redis.call('ZRANGEBYSCORE', seen, '(' .. (at_ms + 86400000), '+inf')) do old[#old + 1] = id end
for _, id in ipairs(old) do
  redis.call('HDEL', producers, id)
  redis.call('ZREM', seen, id)
end
return #old
