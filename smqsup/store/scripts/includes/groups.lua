--- @include "attempts"
--- @include "group_turn"
-- Message groups: a frame whose head has the group field G (framing.py)
-- belongs to the group named by its last G bytes. Its queue's consumers
-- take from the groups in turn, at most ``limit`` of one group's frames in
-- consumers' lists at once, and a group's starts at most at its rate.
--
-- Keys (all of one queue, or partition; GROUPS holds their names, set by
-- groups_use, and nil where a script has none):
--
--   GROUPS.ready  ZSET  every ready frame of every group, score 0, member
--                       "LEN:NAME\tPSEQ\nFRAME": LEN:NAME its group (length
--                       first, so no name is the prefix of another's
--                       range), P 9 - priority, SEQ 15 digits (publish
--                       order; 0 for a frame going back: first of its
--                       priority). A lexicographic range is one group's
--                       frames in the order they go
--   GROUPS.count  ZSET  NAME -> a bound of its ready frames: an entry
--                       while it has any (it goes with its last), its score
--                       raised by each frame made ready in it and lowered
--                       by an operator's remove, not by the takes (a write
--                       a message saved: about 4 us of Redis time on the
--                       hot path), so it can only be too high; the
--                       collector's repair sets the largest and a slice of
--                       the others to their ZLEXCOUNT, and status counts
--                       the groups it names exactly. Kept with redis.pcall,
--                       read by nothing that moves a frame
--   GROUPS.state  HASH  "s:NAME" -> "t" (its ticket is in the pending list),
--                       "b" (blocked: as many of its frames in consumers'
--                       lists as its limit allows; the next settle gives it a
--                       ticket) or "w" (waiting for its rate: in
--                       GROUPS.wait); absent: no ready frame, or paused.
--                       "p:NAME" -> paused (by whom, JSON)
--   GROUPS.running HASH NAME -> its frames in consumers' lists (taken here,
--                       not yet settled): as many fields as groups have
--                       frames in flight. The scripts count them only on a
--                       queue with group_concurrency; the collector's
--                       repair recounts them every GROUP_REPAIR_S (for
--                       status, and for a limit set since)
--   GROUPS.rate   ZSET  NAME -> its GCRA theoretical arrival time (µs,
--                       Redis clock); entries past go at each booking
--   GROUPS.wait   ZSET  NAME -> when (µs) its rate allows its next start:
--                       it gets its ticket then (group_wake)
--
-- The ring is the pending list: a ticket, "*" .. NAME, stands for a group's
-- turn among the ungrouped frames and the other groups' tickets. Invariant:
-- a group has at most one ticket, and has one exactly while its state is
-- "t"; a paused group's is not in the pending list (group_turn_out); a
-- script that takes a ticket from the pending list redeems it (group_take)
-- in the same run, or puts it back. So one group with 100,000
-- ready frames delays another group by at most one frame per turn.
-- Bytes in these keys that are garbage cost the group its order or its
-- limits, never a frame: a frame is in GROUPS.ready, or in a list.
local GROUPS = {}
-- µs a frame may be taken ahead of its group's rate (its consumer waits
-- that long before it starts it); a longer wait parks the group.
local GROUP_RATE_AHEAD_US = 20000
-- Groups whose wait ended that one look gives their tickets back.
local GROUP_WAKE_MAX = 100

-- groups_use(first, pending, seq, limit, interval, burst): the script's
-- group keys, KEYS[first..first + 5] (ready, count, state, rate, wait,
-- running), its pending list, ``seq`` the sequence counter of publish order
-- (where the script makes frames ready) and, where it takes frames, the
-- queue's limits as ARGV text: group_concurrency (0: none), µs between one
-- group's starts (0: no group rate) and its burst.
local function groups_use(first, pending, seq, limit, interval, burst)
  GROUPS = {ready = KEYS[first], count = KEYS[first + 1], state = KEYS[first + 2], rate = KEYS[first + 3],
            wait = KEYS[first + 4], running = KEYS[first + 5], pending = pending, seq = seq,
            limit = math.max(0, tonumber(limit) or 0), interval = math.max(0, tonumber(interval) or 0),
            burst = math.max(1, tonumber(burst) or 1), last_wait = 0, limits_known = limit ~= nil}
end

-- groups_use_ready(ready, count): only the ready set and the counts (an
-- operator's remove or cancel of a waiting grouped message).
local function groups_use_ready(ready, count)
  GROUPS = {ready = ready, count = count, limit = 0, interval = 0, burst = 1, last_wait = 0}
end

-- The group of a frame, or nil (no group field, or no bytes for it).
local function group_of(frame)
  if string.byte(frame, 2) == 124 then return nil end  -- "A|": plain
  local g = select(8, head_of(frame))
  if not g then return nil end
  return string.sub(frame, #frame - g + 1)
end

local function group_prefix(g)
  return #g .. ':' .. g .. '\t'
end

-- Give group ``g`` its ticket unless it has one, is blocked, waits for its
-- rate or is paused: at the far end of the pending list (its turn after
-- every one waiting now), or at the consuming end (``front``: a wait over).
local function group_ticket(g, front)
  local state = redis.pcall('HGET', GROUPS.state, 's:' .. g)
  if state == 't' or state == 'b' or state == 'w' then return end
  if redis.pcall('HEXISTS', GROUPS.state, 'p:' .. g) == 1 then return end
  -- (a state hash that is garbage gives no ticket: one it could never
  -- redeem; the collector says so)
  if type(redis.pcall('HSET', GROUPS.state, 's:' .. g, 't')) ~= 'number' then return end
  redis.call(front and 'RPUSH' or 'LPUSH', GROUPS.pending, '*' .. g)
end

-- Paused groups have no ticket in the pending list: ack.lua redeems a turn
-- it rotated there without reading its group's state (a read a message
-- saved). group_turn_out(g) takes paused group ``g``'s ticket out of the
-- pending list (LREM: O(N) in its length; once a pause, and at a repair
-- that finds one there), its state "t" going with it; a ticket a blocking
-- fetch holds in a consumer's list ends when that consumer's take redeems
-- it (group_take reads the state), or when it would go back
-- (group_turn_back).
local function group_turn_out(g)
  local removed = redis.pcall('LREM', GROUPS.pending, '0', '*' .. g)
  if type(removed) == 'number' and removed > 0 and redis.pcall('HGET', GROUPS.state, 's:' .. g) == 't' then
    redis.pcall('HDEL', GROUPS.state, 's:' .. g)
  end
end

-- A group's turn a consumer's list held, taken and not redeemed (given
-- back, reclaimed, or put back from a paused queue), back to the consuming
-- end of ``pending``; the turn of a group paused since ends instead.
local function group_turn_back(ticket, pending)
  local g = string.sub(ticket, 2)
  local said = GROUPS.state and redis.pcall('HMGET', GROUPS.state, 's:' .. g, 'p:' .. g)
  if type(said) == 'table' and said[1] == 't' and said[2] then
    redis.pcall('HDEL', GROUPS.state, 's:' .. g)
    return
  end
  redis.call('RPUSH', pending, ticket)
end

-- Make a grouped frame ready in its group (``front``: it goes back, before
-- the others of its priority); false when the frame has no group or the
-- script no group keys (the caller makes it ready as any frame).
local function group_ready(frame, front)
  if not GROUPS.ready then return false end
  local g = group_of(frame)
  if not g then return false end
  local _, prio = head_of(frame)
  local seq = 0
  if not front then
    seq = redis.pcall('INCR', GROUPS.seq)
    if type(seq) ~= 'number' then seq = 0 end
  end
  local added = redis.pcall('ZADD', GROUPS.ready, 0,
                            group_prefix(g) .. string.format('%d%015d', 9 - prio, seq % 1e15) .. '\n' .. frame)
  if type(added) ~= 'number' then return false end  -- a ready set that is garbage: the frame goes as any
  redis.pcall('ZINCRBY', GROUPS.count, 1, g)
  group_ticket(g, false)
  return true
end

-- Group ``g``'s ready frames, counted in GROUPS.ready (0 where it is garbage).
local function group_ready_count(g)
  local p = group_prefix(g)
  return tonumber(redis.pcall('ZLEXCOUNT', GROUPS.ready, '[' .. p, '(' .. string.sub(p, 1, -2) .. '\n')) or 0
end

-- Take ``member`` (of GROUPS.ready: an operator removes or cancels a
-- waiting grouped message) out of its group; its frame, or nil when it was
-- not there (taken meanwhile). Its group's ticket, if any, finds out.
local function group_unready(member)
  if redis.pcall('ZREM', GROUPS.ready, member) ~= 1 then return nil end
  local len, at = string.match(member, '^(%d+):()')
  if len then
    local g = string.sub(member, at, at + tonumber(len) - 1)
    if group_ready_count(g) == 0 then
      redis.pcall('ZREM', GROUPS.count, g)
    else
      redis.pcall('ZINCRBY', GROUPS.count, -1, g)
    end
  end
  local nl = string.find(member, '\n', 1, true)
  return nl and string.sub(member, nl + 1) or member
end

-- The first ready frame of group ``g`` in GROUPS.ready (its member), or nil.
local function group_first(g)
  local p = group_prefix(g)
  local first = redis.pcall('ZRANGEBYLEX', GROUPS.ready, '[' .. p, '(' .. string.sub(p, 1, -2) .. '\n', 'LIMIT', 0, 1)
  if type(first) ~= 'table' then return nil, #p end
  return first[1], #p
end

local function group_now()
  if not GROUPS.now then
    local t = redis.call('TIME')
    GROUPS.now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return GROUPS.now
end

-- Group ``g``'s GCRA (includes/rate.lua says how; per group, its whole
-- limit): the wait before its next start, and the tat to book for it.
-- A stored tat that is no number counts as none; one beyond the furthest
-- this limit can book is read, and stored again, as that bound.
local function group_rate_wait(g)
  local now = group_now()
  local tat = tonumber(redis.pcall('ZSCORE', GROUPS.rate, g))
  if not tat or tat ~= tat or tat < now then tat = now end
  local most = now + 1000000 + GROUPS.burst * GROUPS.interval
  if tat > most then
    -- Stored as the bound, so that time moves it closer (includes/rate.lua).
    tat = most
    redis.pcall('ZADD', GROUPS.rate, tat, g)
  end
  local start = math.max(now, tat - (GROUPS.burst - 1) * GROUPS.interval)
  return start - now, math.max(tat, start) + GROUPS.interval
end

local function group_rate_book(g, tat)
  redis.pcall('ZREMRANGEBYSCORE', GROUPS.rate, '-inf', '(' .. string.format('%d', group_now()))
  redis.pcall('ZADD', GROUPS.rate, tat, g)
end

-- Tickets back to the groups whose rate wait is over (at the consuming
-- end: they waited their turn); how many.
local function group_wake()
  if not GROUPS.wait then return 0 end
  local first = redis.pcall('ZRANGE', GROUPS.wait, 0, 0, 'WITHSCORES')
  if type(first) ~= 'table' or not first[1] then return 0 end
  local now = group_now()
  if (tonumber(first[2]) or 0) > now then return 0 end
  local due = redis.pcall('ZRANGEBYSCORE', GROUPS.wait, '-inf', now, 'LIMIT', 0, GROUP_WAKE_MAX)
  if type(due) ~= 'table' then return 0 end
  for _, g in ipairs(due) do
    redis.pcall('ZREM', GROUPS.wait, g)
    if redis.pcall('HGET', GROUPS.state, 's:' .. g) == 'w' then redis.pcall('HDEL', GROUPS.state, 's:' .. g) end
    if group_first(g) then group_ticket(g, true) end
  end
  return #due
end

-- The µs until the first parked group's wait is over (nil: none parked).
local function group_next_wake()
  if not GROUPS.wait then return nil end
  local first = redis.pcall('ZRANGE', GROUPS.wait, 0, 0, 'WITHSCORES')
  if type(first) ~= 'table' or not first[1] then return nil end
  return math.max(0, (tonumber(first[2]) or 0) - group_now())
end

local function group_running(g)
  local n = tonumber(redis.pcall('HGET', GROUPS.running, g))
  if not n or n ~= n or n < 0 then return 0 end
  return n
end

-- Redeem the ticket of group ``g``, already taken out of the pending list:
-- its next frame (to go into a consumer's list: counted as running there,
-- its start booked under the group's rate) and the µs its start waits; or
-- nil when the group has none to give now (no frame, paused, at its limit,
-- or its rate parks it in GROUPS.wait). GROUPS.last_wait: that wait (µs).
-- The ticket goes back to the far end while frames are left to take.
-- A third value true: no group gave out this ticket (its state is not
-- "t"): the bytes are someone else's (anyone may LPUSH anything), and the
-- caller hands them on as a frame (a consumer dead-letters them as
-- malformed), so they are never silently dropped.
local function group_take(g)
  if not GROUPS.ready then return nil end
  local said = redis.pcall('HMGET', GROUPS.state, 's:' .. g, 'p:' .. g)
  if type(said) ~= 'table' or said[1] ~= 't' then return nil, 0, true end
  if said[2] then
    redis.pcall('HDEL', GROUPS.state, 's:' .. g)
    return nil
  end
  local running = 0
  if GROUPS.limit > 0 then
    running = group_running(g)
    if running >= GROUPS.limit then
      redis.pcall('HSET', GROUPS.state, 's:' .. g, 'b')
      return nil
    end
  end
  local wait, tat = 0, nil
  if GROUPS.interval > 0 then
    wait, tat = group_rate_wait(g)
    -- Parked until its time; a wait set that is garbage parks nothing:
    -- the frame is taken, its consumer waits (the rate holds either way).
    if wait > GROUP_RATE_AHEAD_US and type(redis.pcall('ZADD', GROUPS.wait, group_now() + wait, g)) == 'number' then
      redis.pcall('HSET', GROUPS.state, 's:' .. g, 'w')
      return nil
    end
  end
  local frame, more = group_pop(GROUPS, g)
  if not frame then return nil end
  -- Counted only under a limit (HINCRBY: a count that is garbage is left
  -- as it is, until the repair); without one the collector's repair counts
  -- them for status, and a limit set later holds once it has (GROUP_REPAIR_S).
  local now_running = 0
  if GROUPS.limit > 0 then now_running = tonumber(redis.pcall('HINCRBY', GROUPS.running, g, 1)) or running + 1 end
  if tat then group_rate_book(g, tat) end
  if more and GROUPS.limit > 0 and now_running >= GROUPS.limit then
    redis.pcall('HSET', GROUPS.state, 's:' .. g, 'b')
  elseif more then
    redis.call('LPUSH', GROUPS.pending, '*' .. g)
  end
  GROUPS.last_wait = wait
  return frame, wait
end

-- A frame taken from its group left a consumer's list (settled, retried,
-- dead-lettered, reclaimed or given back): one fewer running (not counted
-- where the script knows the queue has no group_concurrency); a blocked
-- group gets its ticket again (looked at unless the script knows the
-- queue's limits and they have none: a group blocked under an older,
-- lower limit then gets its turn from the collector's repair). Nothing for
-- a frame without a group.
local function group_settled(frame)
  if not GROUPS.state then return end
  local g = group_of(frame)
  if not g then return end
  if GROUPS.limits_known and GROUPS.limit == 0 then return end  -- (nothing counted: group_take)
  local running = redis.pcall('HINCRBY', GROUPS.running, g, -1)
  if type(running) ~= 'number' or running <= 0 then redis.pcall('HDEL', GROUPS.running, g) end
  if redis.pcall('HGET', GROUPS.state, 's:' .. g) == 'b' then
    redis.pcall('HDEL', GROUPS.state, 's:' .. g)
    if group_first(g) then group_ticket(g, false) end
  end
end

-- Take the next frame for a consumer from the consuming end of the pending
-- list into ``processing``, redeeming tickets on the way (at most
-- GROUP_TICKETS_PER_TAKE of them, then nothing): the frame, or false.
-- ``moved``: what the caller already moved from there to the left end of
-- ``processing`` (nil: nothing).
local GROUP_TICKETS_PER_TAKE = 100
local function take_pending(call, processing, pending, moved)
  GROUPS.last_wait = 0
  for _ = 1, GROUP_TICKETS_PER_TAKE do
    local nxt = moved or call('LMOVE', pending, processing, 'RIGHT', 'LEFT')
    moved = nil
    if type(nxt) ~= 'string' then return false end
    if not is_ticket(nxt) then return nxt end
    redis.call('LPOP', processing)
    if not GROUPS.ready then  -- (a script without group keys takes none)
      redis.call('RPUSH', pending, nxt)
      return false
    end
    local frame, _, not_ticket = group_take(string.sub(nxt, 2))
    if not_ticket then frame = nxt end
    if frame then
      redis.call('LPUSH', processing, frame)
      return frame
    end
  end
  return false
end
