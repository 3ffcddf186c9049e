-- The elected collector's repair of a queue's message groups
-- (includes/groups.lua), every GROUP_REPAIR_S: each step of a group is one
-- script, but bytes nobody planned for (a key deleted or overwritten by
-- hand, a consumer's list deleted) can leave a count that is wrong or a
-- group without its turn. This sets them right:
--
--   1. the running counts, recounted from the lists of the registered
--      consumers (when the lists given are exactly those: else nothing);
--   2. a group blocked at its limit whose running count is below it now,
--      or waiting for its rate with no wait entry, gets its ticket;
--   3. a slice of the groups with ready messages (GROUPS.count, by ZSCAN
--      cursor): one with no state (or a turn the pending list does not
--      hold, looked for while that list is short), not paused and a ready
--      frame gets its ticket; an entry with no ready frame left goes; a
--      paused group's ticket left in the pending list goes (paused by an
--      earlier version, or bytes written by hand: group_turn_out);
--   4. the counts of that slice and the GROUP_RECOUNT_TOP largest set to
--      their groups' ready frames (the takes do not lower them: routine,
--      not counted as set right);
--   5. a slice of GROUPS.ready (by its own ZSCAN cursor): a member in no
--      group's layout ("LEN:NAME\t") is no group's message and nobody
--      would ever take it: it goes to the dead letters whole, "malformed";
--      one of a group with no count entry (a key deleted by hand) gives
--      its group a count and, as in 3, a turn.
--
-- KEYS[1]  pending list of the queue (partition)
-- KEYS[2..7] its group keys: ready, count, state, rate, wait, running
-- KEYS[8]  its consumers registry hash
-- KEYS[9]  garbage-collector lock key
-- KEYS[10] its dead-letter list
-- KEYS[11..] the processing lists of the consumers in ARGV[5..], same order
-- ARGV[1]  the caller's lock token
-- ARGV[2]  the queue's group_concurrency (0: none)
-- ARGV[3]  the repair's place: "C R", ZSCAN cursors of GROUPS.count and
--          GROUPS.ready ("0", or anything else unreadable: from the start)
-- ARGV[4]  most entries to look at in each slice
-- ARGV[5..] the registered consumers' ids
-- ARGV[5 + consumers] the dead-letter metadata of garbage (JSON)
--
-- Returns {the next place ("0" once both slices are back at the start),
-- counts set right, tickets given, members dead-lettered}; error
-- "NOTLEADER" when the token check fails.
--- @include "lock"
--- @include "groups"
--- @include "now_ms"
--- @include "dead_letter"
groups_use(2, KEYS[1])
local refused = not_leader(KEYS[9], ARGV[1])
if refused then return refused end
local limit = math.max(0, tonumber(ARGV[2]) or 0)
local garbage_meta = table.remove(ARGV)
local count_cursor, ready_cursor = string.match(ARGV[3], '^(%d+) (%d+)$')
if not count_cursor then count_cursor, ready_cursor = ARGV[3], '0' end
local FIRST_LIST = 11
-- Frames one list is read for at most: a consumer holds concurrency +
-- prefetch - 1 (at most 1999); a longer list is garbage, not counted.
local LIST_READ_MAX = 4096
local fixed, tickets = 0, 0
-- The largest counts set right at each repair (status names the largest
-- backlogs among them: store/ops/statistics.py's BUSIEST_READ).
local GROUP_RECOUNT_TOP = 20
-- A turn said to wait in the pending list is looked for there only while
-- the list is this short (LPOS reads it whole).
local PENDING_LOOKED_MAX = 1000
local pending_short = (tonumber(redis.pcall('LLEN', KEYS[1])) or math.huge) <= PENDING_LOOKED_MAX

-- 1. The running counts, when the lists are the registered consumers'.
local function same_consumers()
  if redis.pcall('HLEN', KEYS[8]) ~= #ARGV - 4 then return false end
  for i = 5, #ARGV do
    if redis.pcall('HEXISTS', KEYS[8], ARGV[i]) ~= 1 then return false end
  end
  return true
end
local seen, lowered = {}, {}
if same_consumers() then
  for i = FIRST_LIST, #KEYS do
    local items = redis.pcall('LRANGE', KEYS[i], 0, LIST_READ_MAX)
    if type(items) == 'table' and #items <= LIST_READ_MAX then
      for _, item in ipairs(items) do
        local g = group_of(item)
        if g then seen[g] = (seen[g] or 0) + 1 end
      end
    end
  end
  local stored = redis.pcall('HGETALL', GROUPS.running)
  if type(stored) == 'table' then
    local had = {}
    for i = 1, #stored, 2 do
      local g, n = stored[i], seen[stored[i]]
      had[g] = true
      if not n then
        redis.pcall('HDEL', GROUPS.running, g)
        fixed, lowered[g] = fixed + 1, true
      elseif tonumber(stored[i + 1]) ~= n then
        if (tonumber(stored[i + 1]) or 0) > n then lowered[g] = true end
        redis.pcall('HSET', GROUPS.running, g, string.format('%d', n))
        fixed = fixed + 1
      end
    end
    for g, n in pairs(seen) do
      if not had[g] then
        redis.pcall('HSET', GROUPS.running, g, string.format('%d', n))
        fixed = fixed + 1
      end
    end
  end
end

-- Whether group ``g``'s turn is in the pending list or in a consumer's list
-- (taken by a blocking fetch, not yet redeemed): only asked while the
-- pending list is short; a long one is taken for holding it.
local function turn_held(g)
  if not pending_short then return true end
  local ticket = '*' .. g
  if redis.pcall('LPOS', KEYS[1], ticket) ~= false then return true end
  for i = FIRST_LIST, #KEYS do
    if redis.pcall('LPOS', KEYS[i], ticket) ~= false then return true end
  end
  return false
end

-- Whether group ``g`` should have a turn and has none: then it gets one.
local function needs_turn(g)
  local state = redis.pcall('HGET', GROUPS.state, 's:' .. g)
  if redis.pcall('HEXISTS', GROUPS.state, 'p:' .. g) == 1 then
    if state == 't' then group_turn_out(g) end  -- (paused with its turn left waiting)
    return
  end
  if state == 't' and turn_held(g) then return end
  if state == 'b' and limit > 0 and group_running(g) >= limit then return end
  if state == 'w' and redis.pcall('ZSCORE', GROUPS.wait, g) then return end
  if not group_first(g) then
    if state then redis.pcall('HDEL', GROUPS.state, 's:' .. g) end
    redis.pcall('ZREM', GROUPS.count, g)
    return
  end
  if state then redis.pcall('HDEL', GROUPS.state, 's:' .. g) end
  group_ticket(g, false)
  if redis.pcall('HGET', GROUPS.state, 's:' .. g) == 't' then tickets = tickets + 1 end
end

-- 2. Blocked groups that were running, or counted too many.
for _, groups in ipairs({seen, lowered}) do
  for g in pairs(groups) do
    if redis.pcall('HGET', GROUPS.state, 's:' .. g) == 'b' then needs_turn(g) end
  end
end
-- 4. A count's score set to its group's ready frames (the takes do not
-- lower it: includes/groups.lua), when it is there and says otherwise.
local function recount(g, score)
  local n = group_ready_count(g)
  if n > 0 and tonumber(score) ~= n then redis.pcall('ZADD', GROUPS.count, 'XX', string.format('%d', n), g) end
end

-- 3 and 4. A slice of the groups with ready messages, then the largest.
local slice = tonumber(ARGV[4]) or 100
local scanned = redis.pcall('ZSCAN', GROUPS.count, count_cursor, 'COUNT', slice)
if type(scanned) ~= 'table' then scanned = {'0', {}} end
for i = 1, #scanned[2], 2 do
  local g = scanned[2][i]
  if not seen[g] or redis.pcall('HGET', GROUPS.state, 's:' .. g) ~= 'b' then needs_turn(g) end
  recount(g, scanned[2][i + 1])
end
local largest = redis.pcall('ZREVRANGE', GROUPS.count, 0, GROUP_RECOUNT_TOP - 1, 'WITHSCORES')
if type(largest) == 'table' then
  for i = 1, #largest, 2 do recount(largest[i], largest[i + 1]) end
end

-- 5. A slice of the ready set: members no group owns, groups no count names.
local dead = 0
local function group_of_member(m)
  local len, at = string.match(m, '^(%d+):()')
  len = tonumber(len)
  if not len or string.sub(m, at + len, at + len) ~= '\t' then return nil end
  return string.sub(m, at, at + len - 1)
end
local members = redis.pcall('ZSCAN', GROUPS.ready, ready_cursor, 'COUNT', slice)
if type(members) ~= 'table' then members = {'0', {}} end
local counted = {}
for i = 1, #members[2], 2 do
  local m = members[2][i]
  local g = group_of_member(m)
  if not g then
    if redis.pcall('ZREM', GROUPS.ready, m) == 1 then
      dead_letter(KEYS[10], garbage_meta, now_ms(), m, nil)
      dead = dead + 1
    end
  elseif counted[g] == nil then
    counted[g] = redis.pcall('ZSCORE', GROUPS.count, g) ~= false
    if not counted[g] then
      redis.pcall('ZADD', GROUPS.count, string.format('%d', group_ready_count(g)), g)
      fixed = fixed + 1
      needs_turn(g)
    end
  end
end
local place = scanned[1] .. ' ' .. members[1]
if scanned[1] == '0' and members[1] == '0' then place = '0' end
return {place, fixed, tickets, dead}
