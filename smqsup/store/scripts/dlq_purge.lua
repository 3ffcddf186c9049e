-- Delete chosen dead letters, freeing the dedup keys of their messages.
--
-- KEYS[1]  dead-letter list of the queue, or a list renamed from it for a
--          whole purge (Broker.dlq_purge)
-- KEYS[2..]  dedup keys of the chosen messages that have one
-- ARGV[1..]  three per entry: the entry (exact bytes read from KEYS[1]), its
--          message id, the index in KEYS of its dedup key (0: none)
--
-- Returns how many entries were deleted. An entry no longer in KEYS[1]
-- (requeued or deleted by someone else meanwhile) is skipped, and its dedup
-- key kept: a requeued message waits again under it.
local dead = KEYS[1]
--- @include "release"

local deleted = 0
for i = 1, #ARGV - 2, 3 do
  local n = redis.call('LREM', dead, 1, ARGV[i])
  local dk = tonumber(ARGV[i + 2])
  if n > 0 and dk > 0 then release(KEYS[dk], ARGV[i + 1]) end
  deleted = deleted + n
end
return deleted
