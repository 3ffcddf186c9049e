--- @include "attempts"
-- make_ready(pending, prio_set, prio_seq, frame): put a frame where
-- consumers take from: the pending list (priority 0, or any priority when
-- nothing else is ready), else the priority set.
--
-- take_ready(call, processing, pending, prio_set): move the ready frame a
-- consumer must take next into its processing list; the frame, or false.
--
-- Invariant (why a priority frame may sit in the pending list): a consumer
-- blocks only in BLMOVE on the pending list, and only after a script saw
-- both the list and the set empty. A frame of priority > 0 goes to the set
-- only while one of them is not empty, so a blocked consumer is always woken
-- by the list; every script that takes (take_ready) looks at the set first.
-- take_ready compares the set's best with the frame at the consuming end of
-- the list (it may be a priority frame that found everything empty, or a
-- reclaimed one): the higher priority goes first, the list on a tie.
-- Members of the set are frames: two byte-identical copies of one message
-- (the same attempts) are one member, so such a duplicate is delivered once.
local PRIORITY_SPAN = 17592186044416  -- 2^44: sequence numbers per priority

local function make_ready(pending, prio_set, prio_seq, frame)
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

local function take_ready(call, processing, pending, prio_set)
  local best = call('ZRANGE', prio_set, 0, 0, 'WITHSCORES')
  if type(best) == 'table' and best[1] then
    local tail = call('LINDEX', pending, -1)
    local _, tail_prio = 0, -1
    if type(tail) == 'string' then _, tail_prio = head_of(tail) end
    if (tail_prio or 0) < 9 - math.floor(tonumber(best[2]) / PRIORITY_SPAN) then
      redis.call('ZREM', prio_set, best[1])
      redis.call('LPUSH', processing, best[1])
      return best[1]
    end
  end
  local nxt = call('LMOVE', pending, processing, 'RIGHT', 'LEFT')
  if type(nxt) ~= 'string' then return false end
  return nxt
end
