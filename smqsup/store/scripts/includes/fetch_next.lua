--- @include "plain"
--- @include "ready"
--- @include "now_ms"
--- @include "dead_letter"
--- @include "rate"
-- fetch_next(call, q, consumer_id, wanted, taken): the tail of an ack, a
-- nack or a take: whether the consumer is still registered, the next frame
-- for it, and whether the queue is paused.
--
-- call         redis.pcall: a failing read or move means nothing fetched
--              (ack.lua pays no type check; the consumer's next BLMOVE
--              reports the key); redis.call: it is the caller's error reply
-- q            the queue's keys: processing, pending, priority, paused,
--              dead, counters, consumers; rate: nil, or the queue's
--              rate limit (includes/rate.lua); track: nil, or its tracking
--              keys (includes/track.lua: a tracked frame taken is "active")
-- wanted       true: take the next ready frame (take_ready) into processing
-- taken        nil, or a frame the caller already moved from pending into
--              processing (ack.lua's hot path), on a queue with neither a
--              paused flag nor a priority set: it is screened for expiry
--              like a frame taken here
--
-- Returns registered (1 or 0), next (a frame or false), paused (1 or 0),
-- wait (µs): with a rate limit, how long the consumer must wait before it
-- starts ``next`` (its start is booked), or, with no ``next`` because the
-- limit allows no start within RATE_HORIZON_US, before it looks again
-- (nothing taken, nothing booked), or, with no ``next`` while a group
-- waits for its rate, until that wait ends (includes/groups.lua); 0
-- otherwise. A
-- consumer no longer in ``consumers`` (declared dead and reclaimed) gets
-- nothing: a frame moved into a list no collector watches would wait there
-- for ever. A paused queue gives nothing. A frame whose expiry has passed is
-- dead-lettered ("expired", counted) and the next one taken, up to
-- EXPIRED_PER_FETCH of them: an expired message never reaches a handler.
-- Cost on a queue with no paused flag and no priority set: one EXISTS of
-- both keys, then LMOVE (ack.lua runs that much itself, before this
-- include's helpers exist, and calls here only for a frame that is not
-- plain).
local EXPIRED_PER_FETCH = 1000

local function fetch_next(call, q, consumer_id, wanted, taken)
  -- Given ``taken``, a frame taken after it (the first was expired) looks
  -- at the priority set too: the caller may not know it empty.
  local either = taken ~= nil
  if not taken then
    local registered = redis.call('HEXISTS', q.consumers, consumer_id)
    if registered == 0 then return 0, false, 0, 0 end
    either = redis.call('EXISTS', q.paused, q.priority) > 0
    if either and redis.call('EXISTS', q.paused) == 1 then return 1, false, 1, 0 end
    if not wanted then return 1, false, 0, 0 end
  end
  local wait, tat, now = 0, nil, nil
  if q.rate and not taken then
    wait, tat, now = rate_wait(q.rate)
    if wait > RATE_HORIZON_US then return 1, false, 0, wait end
  end
  if wanted and GROUPS.interval and GROUPS.interval > 0 then group_wake() end
  local function booked(nxt)
    if tat then rate_book(q.rate, tat, now) end
    wait = math.max(wait, GROUPS.last_wait or 0)
    if q.track and not plain(nxt) then track(q.track, nxt, 'active', 'started') end
    return 1, nxt, 0, wait
  end
  local at_ms = nil
  for _ = 1, EXPIRED_PER_FETCH do
    local nxt = taken or take_ready(call, q.processing, q.pending, q.priority, either)
    if taken and is_ticket(taken) then nxt = take_pending(call, q.processing, q.pending, taken) end
    taken = nil
    if not nxt then return 1, false, 0, group_next_wake() or 0 end
    if plain(nxt) then return booked(nxt) end
    local _, _, expires = head_of(nxt)
    if not expires or expires == 0 then return booked(nxt) end
    at_ms = at_ms or now_ms()
    if expires > at_ms then return booked(nxt) end
    -- Dead-lettered before it leaves the list: a dead-letter list of the
    -- wrong type fails the script with the frame still in ours (handled).
    -- (one whose cancel is pending ends "cancelled": includes/dead_letter.lua)
    if not end_if_cancelled(q.dead, q.counters, at_ms, nxt, q.track) then
      dead_letter(q.dead, '{"reason":"expired"}', at_ms, nxt, q.track)
      redis.pcall('HINCRBY', q.counters, 'expired', 1)
      redis.pcall('HINCRBY', q.counters, 'dead_lettered', 1)
    end
    redis.call('LREM', q.processing, 1, nxt)
    group_settled(nxt)
  end
  return 1, false, 0, 0
end
