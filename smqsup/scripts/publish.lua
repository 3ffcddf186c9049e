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
local n = #ARGV - 1
for i = 2, #ARGV, 1000 do
  redis.call('LPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if ARGV[1] == '1' then
  redis.pcall('HINCRBY', KEYS[2], 'published', n)
end
return n
