--- @include "groups"
-- make_ready(pending, prio_set, prio_seq, frame): put a frame where
-- consumers take from: the pending list (priority 0, or any priority when
-- nothing else is ready), else the priority set.
--
-- make_ready_all(pending, prio_set, prio_seq, frames): make_ready for each of
-- ``frames`` (in their order), except into an empty queue: then all go to
-- the pending list, highest priority first (in their order within one), so
-- that a burst wakes as many blocked consumers as it has frames.
--
-- take_ready(call, processing, pending, prio_set, check_set): move the ready
-- frame a consumer must take next into its processing list; the frame, or
-- false. ``check_set`` false: the caller knows the priority set is empty.
-- A group's ticket met on the way is redeemed (includes/groups.lua).
-- A grouped frame is made ready in its group (where the script has the
-- group keys; elsewhere, as any frame).
--
-- Invariant (why a priority frame may sit in the pending list): a consumer
-- blocks only in BLMOVE on the pending list, and only after a script saw
-- both the list and the set empty. A frame of priority > 0 goes to the set
-- only while one of them is not empty, so a blocked consumer is always woken
-- by the list; every script that takes (take_ready) looks at the set first.
-- take_ready compares the set's best with the frame at the consuming end of
-- the list: the higher priority goes first, the list on a tie. That is exact
-- while the list, from its consuming end, never rises in priority: priority
-- frames enter it only into an empty queue (highest first), priority 0 at its
-- far end. A reclaimed frame (pushed at the consuming end) goes first.
-- Members of the set are frames: two byte-identical copies of one message
-- (the same attempts) are one member, so such a duplicate is delivered once.
local PRIORITY_SPAN = 17592186044416  -- 2^44: sequence numbers per priority

local function make_ready(pending, prio_set, prio_seq, frame)
  if group_ready(frame) then return end
  local _, prio = head_of(frame)
  if prio and prio > 0 and (redis.call('LLEN', pending) > 0 or redis.call('ZCARD', prio_set) > 0) then
    -- pcall: a counter holding garbage costs FIFO order, never the message.
    local seq = redis.pcall('INCR', prio_seq)
    if type(seq) ~= 'number' then seq = 0 end
    redis.call('ZADD', prio_set, (9 - prio) * PRIORITY_SPAN + seq % PRIORITY_SPAN, frame)
  else
    redis.call('LPUSH', pending, frame)
  end
end

local function make_ready_all(pending, prio_set, prio_seq, frames)
  if GROUPS.ready then
    local ungrouped = {}
    for _, frame in ipairs(frames) do
      if not group_ready(frame) then ungrouped[#ungrouped + 1] = frame end
    end
    frames = ungrouped
  end
  if #frames > 1 and redis.call('LLEN', pending) == 0 and redis.call('ZCARD', prio_set) == 0 then
    local order = {}
    for i, frame in ipairs(frames) do
      local _, prio = head_of(frame)
      order[i] = {prio or 0, i, frame}
    end
    table.sort(order, function(a, b)
      if a[1] ~= b[1] then return a[1] > b[1] end
      return a[2] < b[2]
    end)
    for _, o in ipairs(order) do redis.call('LPUSH', pending, o[3]) end
  else
    for _, frame in ipairs(frames) do make_ready(pending, prio_set, prio_seq, frame) end
  end
end

-- The priority of the set's best member, from its score; a score no script
-- wrote (anyone may ZADD anything, +inf included) counts as 0 to 9, so the
-- member is still taken.
local function set_priority(score)
  local prio = 9 - math.floor(tonumber(score) / PRIORITY_SPAN)
  if prio ~= prio or prio < 0 then return 0 end
  return math.min(prio, 9)
end

local function take_ready(call, processing, pending, prio_set, check_set)
  local best = check_set and call('ZRANGE', prio_set, 0, 0, 'WITHSCORES')
  if type(best) == 'table' and best[1] then
    local tail = call('LINDEX', pending, -1)
    local _, tail_prio = 0, -1
    if type(tail) == 'string' then _, tail_prio = head_of(tail) end
    if (tail_prio or 0) < set_priority(best[2]) then
      redis.call('ZREM', prio_set, best[1])
      redis.call('LPUSH', processing, best[1])
      return best[1]
    end
  end
  return take_pending(call, processing, pending)
end
