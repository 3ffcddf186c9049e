--- @include "groups"
--- @include "dead_letter"
--- @include "ready_at"
-- move_frames(list, pending, dead, counters, costs, threshold, meta, limit, at_ms, started, returned, T):
-- return up to ``limit`` frames of a consumer's processing list to its queue.
--
-- list      the consumer's processing list
-- pending   the queue's pending list
-- dead      the queue's dead-letter list
-- counters  the queue's counters hash ("reclaimed", "dead_lettered")
-- costs     true: each frame gets one more attempt, and one past ``threshold``
--           is dead-lettered; false: frames go back unchanged
-- threshold retry_threshold of the queue (used only when ``costs``)
-- meta      dead-letter metadata (a JSON object text with "reason")
-- limit     most frames to move (integer > 0)
-- at_ms     the time to date dead letters with, ms, Redis clock
-- started   nil: with ``costs``, every frame costs; a number S: only the S
--           frames at the list's right end (its oldest: those its consumer
--           had started, which it starts in the order it took them) cost,
--           the others (taken, never started) go back free
-- returned  with ``started``: the first that many of those, from the right
--           end, go back free too (their handlers returned); nil: none
-- T         the queue's tracking keys, or nil (includes/track.lua): a
--           tracked frame requeued is "waiting", one dead-lettered "dead";
--           a message whose cancel was asked (T.cancel) is dead-lettered
--           "cancelled", cost or not, never requeued; with T.ready_at (the
--           queue's ready times), a frame its consumer had started (every
--           one with ``costs`` and no ``started``) is requeued with now as
--           its ready time (includes/ready_at.lua): its lag counts from its
--           return, while one that was never started keeps its own
--
-- Returns requeued, dead_lettered, remaining (the length of ``list`` after).
-- Bytes that are not a frame are dead-lettered as they are, cost or not. A
-- group's ticket goes back to pending as it is (unless its group was paused
-- since: group_turn_back); a grouped frame frees its
-- group's slot and goes back to the front of its group (includes/groups.lua,
-- where the script has the group keys).
--
-- Order: frames are taken from the left (newest) and pushed on the right of
-- pending (its consuming end), so the oldest reclaimed frame is consumed first.
-- The caller has checked the types of list, pending and dead (wrong_type):
-- a frame popped is always pushed somewhere. Counters use redis.pcall: a
-- counters hash that holds garbage costs its statistics, never a message.
local function move_frames(list, pending, dead, counters, costs, threshold, meta, limit, at_ms, started, returned, T)
  local requeued, dead_lettered, cancelled = 0, 0, 0
  local left = started and redis.call('LLEN', list)  -- frames from the right end to the next popped
  local cancels = T and T.cancel and redis.pcall('EXISTS', T.cancel) == 1
  for _ = 1, limit do
    local frame = redis.call('LPOP', list)
    if not frame then break end
    local begun = costs and (not started or left <= started)
    local cost = begun and (not started or left > (returned or 0))
    if left then left = left - 1 end
    if is_ticket(frame) then  -- a group's turn, taken and not yet redeemed: back as it is
      group_turn_back(frame, pending)
    else
      group_settled(frame)
      local attempts, sep = attempts_of(frame)
      local to_dead = attempts == nil
      if attempts ~= nil and cost then
        attempts, frame = add_attempt(frame, attempts, sep)
        to_dead = attempts > threshold
      end
      if cancels and end_if_cancelled(dead, nil, at_ms, frame, T) then
        dead_lettered, cancelled = dead_lettered + 1, cancelled + 1
      elseif to_dead then
        dead_letter(dead, meta, at_ms, frame, T)
        dead_lettered = dead_lettered + 1
      else
        if not group_ready(frame, true) then redis.call('RPUSH', pending, frame) end
        if begun and T and T.ready_at then ready_at_mark(T.ready_at, {frame}, at_ms, at_ms) end
        track(T, frame, 'waiting', 'reclaimed', at_ms)
        requeued = requeued + 1
      end
    end
  end
  local remaining = redis.call('LLEN', list)
  if requeued + dead_lettered > 0 then
    redis.pcall('HINCRBY', counters, 'reclaimed', requeued + dead_lettered)
    if dead_lettered > 0 then redis.pcall('HINCRBY', counters, 'dead_lettered', dead_lettered) end
    if cancelled > 0 then redis.pcall('HINCRBY', counters, 'cancelled', cancelled) end
  end
  return requeued, dead_lettered, remaining
end
