--- @include "frame_id"
-- ready_at_mark(key, frames, ats, now): write when each of ``frames``
-- became ready (ms, Redis clock: ``ats[i]``, or one number for all; ``now``
-- the clock of the call) into the queue's ready times ``key`` (ID -> ms),
-- so that its lag counts from then, not from its publish (lag.lua). Written wherever a message becomes ready later
-- than its publish: a due retry or delayed publish (promote.lua), a retry
-- without delay (nack.lua), a started message back from a dead consumer
-- (move_frames.lua), a child its parents released (unblock.lua).
--
-- Only the newest READY_AT_KEPT entries are kept: an entry goes once newer
-- ones push it out, not when its message ends, and a message with no entry
-- counts from its publish (the older reading, never a lost message).
-- Writes use redis.pcall: a key of another type costs the lag reading,
-- never the move of a message. An ``at`` that is not a time (NaN, negative,
-- ahead of ``now``) is written as ``now``.
local READY_AT_KEPT = 10000

local function ready_at_mark(key, frames, ats, now)
  local written = 0
  for i, frame in ipairs(frames) do
    local id = type(frame) == 'string' and frame_id(frame)
    local at = tonumber(type(ats) == 'table' and ats[i] or ats)
    if id then
      if not at or at ~= at or at < 0 or at > now then at = now end
      if type(redis.pcall('ZADD', key, string.format('%d', at), id)) == 'number' then written = written + 1 end
    end
  end
  if written > 0 then redis.pcall('ZREMRANGEBYRANK', key, 0, -READY_AT_KEPT - 1) end
end
