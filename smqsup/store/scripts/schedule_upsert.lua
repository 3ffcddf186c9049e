-- Upsert one schedule's definition and declare the calling supervisor (at
-- its start and on SIGHUP, for each schedule its config has).
--
-- KEYS[1]  definitions hash of the queue (ns:{Q}:schedules)
-- KEYS[2]  the schedule's state hash
-- KEYS[3]  the schedule's declarers set
-- ARGV[1]  schedule name
-- ARGV[2]  its definition (canonical JSON, schedule.py to_json)
-- ARGV[3]  the supervisor's declarer id
-- ARGV[4]  how long the declaration holds without a renewal, in ms (> 0)
--
-- Returns 0 when the stored definition was this one already, 1 when there
-- was none, 2 when another one was replaced.
-- A new or replaced definition starts at now (since_ms): no slot before its
-- declaration fires, not even with catch_up; last_fire_ms is kept, so a slot
-- already fired never fires again under the new definition either.
-- A key of the wrong type is an error reply before anything is written.
local defs, state, declarers = KEYS[1], KEYS[2], KEYS[3]
local name, def, id, hold_ms = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
--- @include "wrong_type"
--- @include "now_ms"
--- @include "schedule"

local refused = wrong_type({{defs, 'hash'}, {state, 'hash'}, {declarers, 'zset'}})
if refused then return refused end
local now = now_ms()
local old = redis.call('HGET', defs, name)
local outcome = 0
if old ~= def then
  redis.call('HSET', defs, name, def)
  redis.call('HSET', state, 'since_ms', now)
  outcome = old and 2 or 1
elseif not ms_field(redis.call('HGET', state, 'since_ms')) then
  redis.call('HSET', state, 'since_ms', now)
end
declare(declarers, id, now, hold_ms)
return outcome
