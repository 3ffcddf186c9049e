-- Move chosen dead letters back to pending with their attempts reset to 0
-- and their expiry dropped (an expired message requeued by an operator is
-- meant to run); the priority stays.
--
-- KEYS[1]  dead-letter list of the queue
-- KEYS[2]  pending list of the queue
-- KEYS[3]  counters hash of the queue ("dlq_requeued" counts the moves)
-- KEYS[4]  priority set of the queue (a requeued priority message is made
--          ready as includes/ready.lua says)
-- KEYS[5]  priority sequence counter of the queue
-- KEYS[6]  tracking hash of the queue, KEYS[7] its expiry set (includes/track.lua:
--          a tracked message requeued is "waiting" again, its end forgotten),
--          KEYS[8] its event stream ("requeued")
-- KEYS[9..14] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
--          (a grouped message goes back to its group)
-- ARGV[i]  dead-letter entries, the exact bytes read from KEYS[1]
--
-- Returns the number of entries moved. An entry no longer in KEYS[1] (another
-- operator requeued or purged it meanwhile) is skipped, so a message is never
-- requeued twice by two concurrent requeues.
-- A key of the wrong type among KEYS[1, 2, 4] is an error reply "WRONGTYPE ..."
-- before anything is written (includes/wrong_type.lua).
-- Counters use redis.pcall: a counters hash that holds garbage costs its
-- statistics, never the move of a message.
local dead, pending, counters, prio_set, prio_seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local T = {hash = KEYS[6], expiry = KEYS[7], events = KEYS[8]}
--- @include "wrong_type"
--- @include "ready"
--- @include "track"
groups_use(9, pending, prio_seq)

local refused = wrong_type({{dead, 'list'}, {pending, 'list'}, {prio_set, 'zset'}})
if refused then return refused end
local moved, ready = 0, {}
for _, entry in ipairs(ARGV) do
  if redis.call('LREM', dead, 1, entry) == 1 then
    local nl = string.find(entry, '\n', 1, true)
    local frame = nl and string.sub(entry, nl + 1) or entry
    local attempts, priority, _, _, kept_s, events_max, _, group_len = head_of(frame)
    if attempts then
      frame = head_for(priority, 0, kept_s, events_max, nil, group_len) .. string.sub(frame, string.find(frame, '|', 1, true) + 1)
      local id = tracked_of(frame)
      if id then redis.pcall('ZREM', T.expiry, id) end
    end
    ready[#ready + 1] = frame
    moved = moved + 1
  end
end
make_ready_all(pending, prio_set, prio_seq, ready)
track_all(T, ready, 'waiting', 'requeued')
if moved > 0 then
  redis.pcall('HINCRBY', counters, 'dlq_requeued', moved)
end
return moved
