-- Register consumers, or renew the heartbeats of registered ones.
--
-- KEYS[1]  consumers registry hash of the queue
-- KEYS[2]  heartbeats sorted set of the queue (score: ms, Redis clock)
-- KEYS[3]  (renewals) the queue's cancel set (includes/track.lua), then
-- KEYS[4..] the processing list of each consumer, in ARGV's order
-- ARGV[1]  "1": register (create the entries); "0": renew only
-- ARGV[2k], ARGV[2k+1]  consumer id, registration JSON (pid, host, cpu...)
--
-- Returns {unknown, cancels}. unknown: the consumer ids that were NOT
-- renewed because they are no longer registered: the garbage collector declared them dead and reclaimed
-- their messages. Such a consumer must not go on under that identity (its
-- supervisor replaces it; a standalone consumer re-registers under a new id).
-- Renewing never re-creates a reclaimed consumer, so a paused process cannot
-- come back to life under an identity whose messages were already requeued.
-- cancels: with a cancel set that exists (one EXISTS otherwise), three per
-- message of a consumer's list whose cancel was asked: the consumer id,
-- the message id, and its place from the list's right end (0: the oldest,
-- the one a consumer running one at a time is running).
local consumers, heartbeats = KEYS[1], KEYS[2]
local register = ARGV[1] == '1'
--- @include "now_ms"
--- @include "frame_id"

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
local cancels = {}
if KEYS[3] and redis.pcall('EXISTS', KEYS[3]) == 1 then
  for i = 2, #ARGV - 1, 2 do
    local frames = redis.pcall('LRANGE', KEYS[3 + i / 2], 0, -1)
    if type(frames) == 'table' then
      for j, frame in ipairs(frames) do
        local id = frame_id(frame)
        if id and redis.pcall('ZSCORE', KEYS[3], id) then
          cancels[#cancels + 1] = ARGV[i]
          cancels[#cancels + 1] = id
          cancels[#cancels + 1] = #frames - j
        end
      end
    end
  end
end
return {unknown, cancels}
