-- Register consumers, or renew the heartbeats of registered ones.
--
-- KEYS[1]  consumers registry hash of the queue
-- KEYS[2]  heartbeats sorted set of the queue (score: ms, Redis clock)
-- ARGV[1]  "1": register (create the entries); "0": renew only
-- ARGV[2k], ARGV[2k+1]  consumer id, registration JSON (pid, host, cpu...)
--
-- Returns the list of consumer ids that were NOT renewed because they are no
-- longer registered: the garbage collector declared them dead and reclaimed
-- their messages. Such a consumer must not go on under that identity (its
-- supervisor replaces it; a standalone consumer re-registers under a new id).
-- Renewing never re-creates a reclaimed consumer, so a paused process cannot
-- come back to life under an identity whose messages were already requeued.
local consumers, heartbeats = KEYS[1], KEYS[2]
local register = ARGV[1] == '1'
--- @include "now_ms"

local at_ms = now_ms()
local unknown = {}
for i = 2, #ARGV - 1, 2 do
  local consumer_id = ARGV[i]
  if register or redis.call('HEXISTS', consumers, consumer_id) == 1 then
    redis.call('HSET', consumers, consumer_id, ARGV[i + 1])
    redis.call('ZADD', heartbeats, at_ms, consumer_id)
  else
    unknown[#unknown + 1] = consumer_id
  end
end
return unknown
