-- Read what the lag of one queue partition is made of: how many messages
-- consumers could take, the heads of the frames next in line, and the
-- Redis clock. Reads only. A frame is copied into Lua whole (no command
-- reads part of a list element), but only its first ARGV[1] bytes go into
-- the reply: a frame of megabytes never crosses the network.
--
-- KEYS[1]  ns:{Q}:pending   LIST, consumers take from the right (oldest first)
-- KEYS[2]  ns:{Q}:priority  ZSET, the lowest score is taken first
-- KEYS[3]  ns:{Q}:paused    STR, present while the queue is paused
-- KEYS[4]  ns:{Q}:groups:ready ZSET, the groups' ready frames (includes/groups.lua)
-- KEYS[5]  ns:{Q}:groups:count ZSET, the groups with ready frames
-- KEYS[6]  ns:{Q}:groups:state HASH, a group's turn ("s:G") and pause ("p:G")
-- KEYS[7]  ns:{Q}:ready_at  ZSET, message id -> when it became ready (ms), for
--          those made ready late (promote.lua)
-- ARGV[1]  bytes of each frame to send back (>= 1)
-- ARGV[2]  most groups read one by one (>= 0)
--
-- Returns {ready, ZCARD of KEYS[2], the first ARGV[1] bytes of the
-- rightmost frame of the pending list that is no group's turn (looked for
-- among its last TAIL_LOOK elements) or false, the same of the priority
-- set's first member or false, the Redis clock in ms, 1 if paused else 0,
-- the same of the group's next frame published first (of the groups read,
-- not paused) or false, and for each of these three frames its ready time
-- in KEYS[7] (ms) or false}. ready counts the pending list's frames, its
-- groups' turns left out, and the ready frames of the groups not paused.
-- Up to ARGV[2] groups (the largest counts) are read exactly: their turns,
-- pauses and frames; past that many, each other group is taken to have a
-- turn and the rest of the ready set to be its frames (a paused one's,
-- or garbage in the set, included). Members of the ready set in no
-- group's count (garbage) are not counted while the groups are read
-- exactly. A key of another type reads as empty.
local pending, priority, grouped, counts, state = KEYS[1], KEYS[2], KEYS[4], KEYS[5], KEYS[6]
local head = tonumber(ARGV[1])
local groups_max = math.max(0, tonumber(ARGV[2]) or 0)
local TAIL_LOOK = 64
--- @include "now_ms"
--- @include "frame_id"

-- When the message of ``frame`` became ready, if it was made ready late.
local function ready_time(frame)
  local id = type(frame) == 'string' and frame_id(frame)
  if not id then return false end
  local at = redis.pcall('ZSCORE', KEYS[7], id)
  return type(at) == 'string' and at or false
end

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

-- The rightmost element of the pending list that is a frame, not a turn ('*').
local function plain_tail()
  local last = redis.pcall('LRANGE', pending, -TAIL_LOOK, -1)
  if type(last) ~= 'table' then return false end
  for i = #last, 1, -1 do
    if string.byte(last[i], 1) ~= 42 then return last[i] end
  end
  return false
end

-- The groups: {their ready frames not paused, turns in the pending list,
-- the member published first among the read groups' next ones}.
local function groups()
  local all = size('ZCARD', counts)
  if all == 0 then return 0, 0, false end
  local names = groups_max > 0 and redis.pcall('ZREVRANGE', counts, 0, groups_max - 1)
  if type(names) ~= 'table' then names = {} end
  local ready, turns, read, first, first_seq = 0, 0, 0, false, nil
  for _, g in ipairs(names) do
    local p = #g .. ':' .. g .. '\t'
    local from, to = '[' .. p, '(' .. string.sub(p, 1, -2) .. '\n'
    local n = tonumber(redis.pcall('ZLEXCOUNT', grouped, from, to)) or 0
    local said = redis.pcall('HMGET', state, 's:' .. g, 'p:' .. g)
    if type(said) ~= 'table' then said = {} end
    read = read + n
    if said[1] == 't' then turns = turns + 1 end
    if not said[2] and n > 0 then
      ready = ready + n
      local m = redis.pcall('ZRANGEBYLEX', grouped, from, to, 'LIMIT', 0, 1)[1]
      -- "PSEQ": the publish order across the queue's groups (0: a frame gone back, first)
      local seq = m and string.sub(m, #p + 2, #p + 16)
      if seq and (first_seq == nil or seq < first_seq) then
        local nl = string.find(m, '\n', 1, true)
        first, first_seq = nl and string.sub(m, nl + 1), seq
      end
    end
  end
  if all > #names then  -- not read one by one: each has a turn, the rest of the set is theirs
    turns = turns + all - #names
    ready = ready + math.max(0, size('ZCARD', grouped) - read)
  end
  return ready, turns, first
end

local listed, prioritised = size('LLEN', pending), size('ZCARD', priority)
local tail, best = false, false
if listed > 0 then tail = plain_tail() end
local grouped_ready, turns, first = groups()
if prioritised > 0 then best = redis.call('ZRANGE', priority, 0, 0)[1] end
return {listed - math.min(listed, turns) + grouped_ready, prioritised, cut(tail), cut(best), now_ms(),
        redis.call('EXISTS', KEYS[3]), cut(first), ready_time(tail), ready_time(best), ready_time(first)}
