-- Move a queue's clock forward for its waiting messages (the testing kit,
-- smqsup/testing: "time moved forward"): every retry waiting in the delayed
-- set and every message published for later in the scheduled set that is
-- due within ARGV[1] ms from now comes ARGV[1] ms earlier, so that a
-- promote (promote.lua, which moves them as it always does) finds it due.
-- Their order is kept (every score moves by the same amount); those due
-- later stay where they are. Nothing moves between keys here.
--
-- KEYS[1]  delayed set of the queue (score: due time, ms, Redis clock)
-- KEYS[2]  scheduled set of the queue (score: due time, ms, Redis clock)
-- ARGV[1]  ms to move forward (integer >= 0), or "all": as far as the last
--          due time of either set
--
-- Returns how many entries came earlier.
--- @include "now_ms"
local now = now_ms()
local ahead = tonumber(ARGV[1])
if ARGV[1] == 'all' then
  ahead = 0
  for _, key in ipairs(KEYS) do
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if last[2] then ahead = math.max(ahead, tonumber(last[2]) - now) end
  end
end
if not ahead or ahead <= 0 then return 0 end
local moved = 0
for _, key in ipairs(KEYS) do
  local due = redis.call('ZRANGEBYSCORE', key, '-inf', now + ahead, 'WITHSCORES')
  local args = {}
  for i = 1, #due, 2 do
    args[#args + 1] = tonumber(due[i + 1]) - ahead
    args[#args + 1] = due[i]
  end
  for i = 1, #args, 1000 do
    redis.call('ZADD', key, 'XX', unpack(args, i, math.min(i + 999, #args)))
  end
  moved = moved + #due / 2
end
return moved
