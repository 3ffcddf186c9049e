-- Pause or resume one message group of a queue (smqsup pause --group).
-- Paused, the group keeps its ready messages and gets no turn (its ticket,
-- if one waits, is dropped when it comes up); resumed, it gets its turn
-- back at once if it has ready messages (includes/groups.lua).
--
-- KEYS[1]  pending list of the queue (partition)
-- KEYS[2..7] its group keys: ready, count, state, rate, wait, running
-- ARGV[1]  the group's name
-- ARGV[2]  "" to resume, or the pause's record (JSON {"at_ms", "by"}) to pause
--
-- Returns 1 when that changed something (paused a group that was not, or
-- resumed one that was), else 0.
--- @include "groups"
groups_use(2, KEYS[1])
local g, info = ARGV[1], ARGV[2]
if info ~= '' then
  return redis.call('HSETNX', GROUPS.state, 'p:' .. g, info)
end
if redis.call('HDEL', GROUPS.state, 'p:' .. g) == 0 then return 0 end
if group_first(g) then group_ticket(g, false) end
return 1
