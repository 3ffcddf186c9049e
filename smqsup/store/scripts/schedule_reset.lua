-- Settle a schedule up to now (`smqsup schedules reset NAME`): for a state
-- written by a clock that was ahead (since_ms or last_fire_ms past the Redis
-- clock), under which no slot fires until the clock gets there.
--
-- KEYS[1]  definitions hash of the queue (ns:{Q}:schedules)
-- KEYS[2]  the schedule's state hash
-- ARGV[1]  schedule name
--
-- Returns {stored, now_ms, ahead_ms}: stored 1 when the queue holds a
-- definition of the schedule, and then since_ms is now and last_fire_ms and
-- fired_at_ms are dropped if they lie after now; 0 when it holds none, and
-- nothing is written. ahead_ms: how far (ms) its state was ahead of now, 0
-- if it was not. A key of the wrong type is an error reply before any write.
-- No slot up to now fires after this step and none after now is skipped:
-- the collector fires from the first slot after since_ms, as after a resume
-- (schedule_fire.lua refuses a slot at or before it).
local defs, state = KEYS[1], KEYS[2]
local name = ARGV[1]
--- @include "wrong_type"
--- @include "now_ms"
--- @include "schedule"

local refused = wrong_type({{defs, 'hash'}, {state, 'hash'}})
if refused then return refused end
local now = now_ms()
if redis.call('HEXISTS', defs, name) == 0 then return {0, now, 0} end
local since = ms_field(redis.call('HGET', state, 'since_ms'))
local base = math.max(since or now, now)
for _, field in ipairs({'last_fire_ms', 'fired_at_ms'}) do
  local t = ms_field(redis.call('HGET', state, field))
  if t and t > now then
    if field == 'last_fire_ms' then base = math.max(base, t) end
    redis.call('HDEL', state, field)
  end
end
redis.call('HSET', state, 'since_ms', now)
return {1, now, base - now}
