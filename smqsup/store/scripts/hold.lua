-- Hold a new message until its parents are done (store/ops/workflows.py has the
-- protocol): it is kept aside, invisible to consumers, with one wait per
-- parent and a mark saying its parents are not all told yet.
--
-- KEYS[1]  blocked hash of the queue: ID -> "D:T:F|frame"
-- KEYS[2]  deps set of the queue (includes/deps.lua: its "w" and "h" entries)
-- KEYS[3]  counters hash of the queue ("published")
-- KEYS[4]  tracking hash of the queue, KEYS[5] its expiry set, KEYS[6] its
--          event stream (includes/track.lua: "blocked", "published")
-- KEYS[7]  (optional) the message's dedup key (ns:{Q}:dedup:KEY)
-- ARGV[1]  the message's id
-- ARGV[2]  what the hold keeps: "D:T:F|" then the frame, linked, without
--          expiry, with its other options (priority, tracking, events, its
--          group: includes/attempts.lua): D its delay in ms once released,
--          T its ttl in ms once released (0: none), F "1" to run it even when
--          a parent failed, "0" to dead-letter it then
-- ARGV[3]  "1": count it in KEYS[3] "published"
-- ARGV[4]  the dedup ttl in ms (with KEYS[7])
-- ARGV[5]  now, ms since the epoch (Redis clock) as the caller read it, or
--          -1: read it here (the "h" mark's time)
-- ARGV[6..] its parents, "PQ\tPID" each (queue partition, message id)
--
-- Returns {1, id, MS} held (its "h" mark is "h\tID\tMS"); {0, holder} when KEYS[7] names another message
-- (deduplicated: nothing held); {-1, id} when the id is in use in this queue
-- (held already, or a tracked record has it): nothing held, so no message
-- can come to wait for itself or for a message that waits for it.
local blocked, deps, counters = KEYS[1], KEYS[2], KEYS[3]
local id, kept, count, dedup_ttl_ms = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4]
local T = {hash = KEYS[4], expiry = KEYS[5], events = KEYS[6]}
--- @include "now_ms"
--- @include "track"

if redis.call('HEXISTS', blocked, id) == 1 or redis.pcall('HEXISTS', T.hash, id) == 1 then return {-1, id} end
if KEYS[7] then
  -- Its holder: one holding it until its end or start (a "k" entry, as
  -- publish_options.lua writes it), else one within the dedup ttl.
  local k = 'k\t' .. #KEYS[7] .. ':' .. KEYS[7] .. '\t'
  local held = redis.call('ZRANGEBYLEX', deps, '[' .. k, '(' .. string.sub(k, 1, -2) .. '\n', 'LIMIT', 0, 1)
  if #held > 0 then return {0, string.sub(held[1], #k + 1)} end
  if not redis.call('SET', KEYS[7], id, 'NX', 'PX', dedup_ttl_ms) then return {0, redis.call('GET', KEYS[7])} end
end
local at_ms = tonumber(ARGV[5])
if at_ms < 0 then at_ms = now_ms() end
redis.call('HSET', blocked, id, kept)
local waits = {}
for i = 6, #ARGV do
  waits[#waits + 1] = 0
  waits[#waits + 1] = 'w\t' .. id .. '\t' .. ARGV[i]
  if #waits >= 2000 or i == #ARGV then
    redis.call('ZADD', deps, unpack(waits))
    waits = {}
  end
end
redis.call('ZADD', deps, 0, 'h\t' .. id .. '\t' .. string.format('%d', at_ms))
track(T, string.sub(kept, string.find(kept, '|', 1, true) + 1), 'blocked', 'published', at_ms)
if count then redis.pcall('HINCRBY', counters, 'published', 1) end
return {1, id, string.format('%d', at_ms)}
