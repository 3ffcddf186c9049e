-- Publish frames to a queue and count them.
--
-- KEYS[1]  pending list of the queue
-- KEYS[2]  counters hash of the queue
-- ARGV[1]  "1": count the frames in KEYS[2] "published" (statistics on)
-- ARGV[2..n]  frames, oldest first (each "<attempts>|payload")
--
-- Returns the number of frames pushed. One script, so the
-- count can never disagree with what was queued.
-- Counters use redis.pcall: a counters hash that holds garbage costs its
-- statistics, never the move of a message.
local pending, counters = KEYS[1], KEYS[2]
local count = ARGV[1] == '1'
-- The frames are ARGV[2..n], pushed in slices of 1000: unpack() is bounded
-- by the Lua C stack (8000 values).

local n = #ARGV - 1
for i = 2, #ARGV, 1000 do
  redis.call('LPUSH', pending, unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if count then
  redis.pcall('HINCRBY', counters, 'published', n)
end
return n
