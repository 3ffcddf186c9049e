-- Remove waiting messages chosen by an operator (smqsup remove, the web UI).
--
-- KEYS[1]  pending list of the queue
-- KEYS[2]  priority set of the queue
-- KEYS[3]  scheduled set of the queue
-- KEYS[4]  delayed set of the queue (retries)
-- KEYS[5]  counters hash of the queue ("removed")
-- KEYS[6]  tracking hash of the queue, KEYS[7] its expiry set
--          (includes/track.lua: a tracked message removed is "dead", reason "removed")
-- KEYS[8]  its event stream (a message removed: "removed")
-- KEYS[9]  its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[10], KEYS[11] its groups' ready set and counts (includes/groups.lua)
-- KEYS[12..]  dedup keys of the chosen messages that have one
-- ARGV[1..]  four per message: where it was seen ("pending", "priority",
--          "scheduled", "delayed" or "group"), its frame (the exact bytes
--          read there; for "group" its member of KEYS[10]), its id, the
--          index in KEYS of its dedup key (0: none)
--
-- Returns one integer per message: 1 removed; 0 it was not there any more
-- (taken by a consumer, promoted, or removed by someone else meanwhile), so
-- a message in flight is never touched. A removed message's dedup key is
-- freed if it still names that message (includes/release.lua).
local where = {pending = KEYS[1], priority = KEYS[2], scheduled = KEYS[3], delayed = KEYS[4]}
local counters = KEYS[5]
local T = {hash = KEYS[6], expiry = KEYS[7], events = KEYS[8], deps = KEYS[9]}
--- @include "release"
--- @include "track"
--- @include "groups"
--- @include "withdraw"
groups_use_ready(KEYS[10], KEYS[11])

local out, removed = {}, 0
for i = 1, #ARGV - 3, 4 do
  local id, dk = ARGV[i + 2], tonumber(ARGV[i + 3])
  local n, frame = withdraw(where, ARGV[i], ARGV[i + 1])
  if n > 0 and dk > 0 then release(KEYS[dk], id) end
  if n > 0 then track(T, frame, 'dead', 'removed', nil, '{"reason":"removed"}') end
  removed = removed + n
  out[#out + 1] = n
end
if removed > 0 then redis.pcall('HINCRBY', counters, 'removed', removed) end
return out
