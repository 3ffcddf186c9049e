-- Resume a paused schedule: drop its paused flag and start it afresh, so
-- that the slots it skipped while paused are not caught up.
--
-- KEYS[1]  the schedule's paused flag
-- KEYS[2]  the schedule's state hash
--
-- Returns 1 when it was paused, 0 otherwise (nothing changed). A state hash
-- of the wrong type is an error reply before anything is written.
local paused, state = KEYS[1], KEYS[2]
--- @include "wrong_type"
--- @include "now_ms"

local refused = wrong_type({{state, 'hash'}})
if refused then return refused end
if redis.call('DEL', paused) == 0 then return 0 end
redis.call('HSET', state, 'since_ms', now_ms())
return 1
