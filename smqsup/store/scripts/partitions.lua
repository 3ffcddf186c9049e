-- Declare how many partitions a queue has: the count only grows (a
-- partition dropped could strand its messages), so the larger of what is
-- stored and what the caller declares is kept.
--
-- KEYS[1]  ns:{Q}:partitions
-- ARGV[1]  the caller's count (1..ARGV[2], checked by the caller)
-- ARGV[2]  the most partitions a queue may have
--
-- Returns the count now stored. Anything there that is not a whole number
-- from 1 up (written by someone else) counts as 1, one above the most as
-- the most.
local key = KEYS[1]
local declared = tonumber(ARGV[1])
local most = tonumber(ARGV[2])

local stored = tonumber(redis.call('GET', key))
if stored == nil or stored < 1 or stored ~= math.floor(stored) then
  stored = 1
elseif stored > most then
  stored = most
end
if declared > stored then
  redis.call('SET', key, declared)
  return declared
end
return stored
