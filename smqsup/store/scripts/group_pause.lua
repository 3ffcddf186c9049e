-- Pause or resume one message group of a queue (smqsup pause --group).
-- Paused, the group keeps its ready messages and gets no turn: its ticket
-- leaves the pending list here (LREM: O(N) in that list's length, once a
-- pause), because ack.lua redeems a turn it rotated without reading the
-- group's state; a ticket a blocking fetch holds in a consumer's list is
-- dropped when that consumer's take redeems it (it reads the state).
-- Resumed, the group gets its turn back at once if it has ready messages
-- (includes/groups.lua).
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
  if redis.call('HSETNX', GROUPS.state, 'p:' .. g, info) == 0 then return 0 end
  group_turn_out(g)
  return 1
end
if redis.call('HDEL', GROUPS.state, 'p:' .. g) == 0 then return 0 end
if group_first(g) then group_ticket(g, false) end
return 1
