-- Read what the lag of one queue partition is made of: how many messages
-- are ready, the heads of the two frames next in line, and the Redis clock.
-- Reads only. A frame is copied into Lua whole (no command reads part of a
-- list element), but only its first ARGV[1] bytes go into the reply: a
-- frame of megabytes never crosses the network.
--
-- KEYS[1]  ns:{Q}:pending   LIST, consumers take from the right (oldest first)
-- KEYS[2]  ns:{Q}:priority  ZSET, the lowest score is taken first
-- KEYS[3]  ns:{Q}:paused    STR, present while the queue is paused
-- KEYS[4]  ns:{Q}:groups:ready ZSET, the groups' ready frames (includes/groups.lua)
-- KEYS[5]  ns:{Q}:groups:count ZSET, the groups with ready frames
-- ARGV[1]  bytes of each frame to send back (>= 1)
--
-- Returns {LLEN of KEYS[1] + ZCARD of KEYS[4] - ZCARD of KEYS[5] (the
-- groups' turns, about), ZCARD of KEYS[2], the first
-- ARGV[1] bytes of the list's rightmost frame (when that is a group's turn:
-- of that group's next frame) or false, the first ARGV[1] bytes of the
-- set's first member or false, the Redis clock in ms, 1 if paused else 0}.
-- A key of another type (anyone with access may write anything there)
-- reads as empty.
local pending, priority, grouped = KEYS[1], KEYS[2], KEYS[4]
local head = tonumber(ARGV[1])
--- @include "now_ms"

-- A size, 0 for a key of another type (pcall: its error is a table).
local function size(command, key)
  local n = redis.pcall(command, key)
  if type(n) ~= 'number' then return 0 end
  return n
end

local function cut(element)
  if type(element) ~= 'string' then return false end
  return string.sub(element, 1, head)
end

local ready, prioritised = size('LLEN', pending), size('ZCARD', priority)
local tail, best = false, false
if ready > 0 then tail = redis.call('LINDEX', pending, -1) end
if type(tail) == 'string' and string.byte(tail, 1) == 42 then  -- '*': a group's turn
  local g = string.sub(tail, 2)
  local p = #g .. ':' .. g .. '\t'
  local first = redis.pcall('ZRANGEBYLEX', grouped, '[' .. p, '(' .. string.sub(p, 1, -2) .. '\n', 'LIMIT', 0, 1)
  tail = false
  if type(first) == 'table' and first[1] then
    local nl = string.find(first[1], '\n', 1, true)
    tail = nl and string.sub(first[1], nl + 1)
  end
end
local grouped_ready = size('ZCARD', grouped)
if grouped_ready > 0 then  -- the groups' turns are no messages: one per group with ready ones, about
  ready = ready - math.min(ready, size('ZCARD', KEYS[5])) + grouped_ready
end
if prioritised > 0 then best = redis.call('ZRANGE', priority, 0, 0)[1] end
return {ready, prioritised, cut(tail), cut(best), now_ms(), redis.call('EXISTS', KEYS[3])}
