-- Withdraw one supervisor's declaration of a schedule: at its clean exit,
-- and on SIGHUP when its config no longer has the schedule.
--
-- KEYS[1]  definitions hash of the queue (ns:{Q}:schedules)
-- KEYS[2]  the schedule's state hash
-- KEYS[3]  the schedule's declarers set
-- KEYS[4]  the schedule's paused flag
-- ARGV[1]  schedule name
-- ARGV[2]  the supervisor's declarer id
-- ARGV[3]  "1": the config dropped the schedule; forget it (definition,
--          state, declarations, paused flag) if no other declaration holds
--
-- Returns 1 when the schedule was forgotten, 0 otherwise.
-- A schedule no declaration holds is not fired (the collector checks it in
-- schedule_fire.lua); forgetting it also drops its last fire, and a later
-- declaration starts it afresh (since_ms = then), so nothing fires twice.
local defs, state, declarers, paused = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local name, id, forget = ARGV[1], ARGV[2], ARGV[3] == '1'
--- @include "wrong_type"
--- @include "now_ms"
--- @include "schedule"

local refused = wrong_type({{defs, 'hash'}, {declarers, 'zset'}})
if refused then return refused end
redis.call('ZREM', declarers, id)
if not forget or live_declarers(declarers, now_ms()) > 0 then return 0 end
redis.call('HDEL', defs, name)
redis.call('DEL', state, declarers, paused)
return 1
