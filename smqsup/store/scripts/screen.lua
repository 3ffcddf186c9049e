-- Look again at a frame a blocking fetch (BLMOVE) just moved into the
-- consumer's list, when the queue turned out paused, the frame carries an
-- expiry or the queue has a rate limit: give it back, dead-letter it, or let
-- the consumer handle it (at the start the limit books for it).
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  dead-letter list of the queue
-- KEYS[4]  counters hash of the queue ("expired", "dead_lettered")
-- KEYS[5]  paused flag of the queue
-- KEYS[6]  rate key of the queue (includes/rate.lua)
-- KEYS[7]  partition count of the queue, this partition's copy (includes/rate.lua)
-- KEYS[8]  tracking hash of the queue, KEYS[9] its expiry set, KEYS[10] its
--          event stream
--          (includes/track.lua: a tracked frame to handle is "active")
-- KEYS[11] its dependencies (includes/deps.lua: an end tells the children)
-- KEYS[12..17] its group keys (includes/groups.lua)
-- KEYS[18] its cancel set (includes/track.lua): a frame whose cancel was
--          asked is dead-lettered "cancelled" where it would go back or
--          expire (verdicts 1, 3 and 2 say the same: it left KEYS[1])
-- ARGV[1]  the frame, the exact bytes fetched; or a group's ticket: it is
--          redeemed for the group's next frame, which then takes its place
--          and is the frame looked at (the reply's third element)
-- ARGV[2]  the queue's rate limit: µs between handler starts across the
--          whole queue, "0" for none
-- ARGV[3]  its burst (>= 1)
-- ARGV[4]  partitions the consumer works (rate_of's ``known``)
-- ARGV[5..7] the queue's group limits (take.lua's ARGV[6..8])
--
-- Returns {verdict, wait[, frame]} (frame: what a ticket was redeemed for).
-- verdict 0: handle it, ``wait`` µs from now (its
-- start is booked; 0 without a rate limit); 1: the queue is paused, the
-- frame is back at the consuming end of pending, free of cost (it never
-- reached a handler); 2: its expiry had passed, it is dead-lettered as
-- "expired"; 3: the rate limit allows no start within RATE_HORIZON_US: the
-- frame is back at the consuming end of pending, free, and the consumer
-- looks again ``wait`` µs from now; -1: it is not in KEYS[1] any more
-- (reclaimed meanwhile), nothing done; 4: a ticket whose group had no frame
-- to give (gone from KEYS[1]; ``wait``: µs until a group's rate allows a
-- start, 0: none waits).
-- A key of the wrong type among KEYS[1, 2] (and KEYS[3] for an expired
-- frame) is an error reply "WRONGTYPE ..." before anything is written
-- (includes/wrong_type.lua).
local processing, pending, dead, counters, paused = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local frame = ARGV[1]
--- @include "wrong_type"
--- @include "now_ms"
--- @include "attempts"
--- @include "dead_letter"
--- @include "rate"
--- @include "groups"
local rate = rate_of(KEYS[6], KEYS[7], ARGV[2], ARGV[3], ARGV[4])
groups_use(12, pending, nil, ARGV[5], ARGV[6], ARGV[7])
local T = {hash = KEYS[8], expiry = KEYS[9], events = KEYS[10], deps = KEYS[11], cancel = KEYS[18]}

local refused = wrong_type({{processing, 'list'}, {pending, 'list'}})
if refused then return refused end
-- Back to where it was taken from, free: a ticket or an ungrouped frame to
-- the consuming end of pending, a grouped frame to the front of its group.
local function put_back()
  if redis.call('LREM', processing, 1, frame) == 0 then return false end
  if is_ticket(frame) then
    group_turn_back(frame, pending)
    return true
  end
  group_settled(frame)
  if end_if_cancelled(dead, counters, now_ms(), frame, T) then return true end
  if not group_ready(frame, true) then redis.call('RPUSH', pending, frame) end
  return true
end
if redis.call('EXISTS', paused) == 1 then
  if not put_back() then return {-1, 0} end
  return {1, 0}
end
local redeemed = nil
if is_ticket(frame) then
  if redis.call('LREM', processing, 1, frame) == 0 then return {-1, 0} end
  group_wake()
  local taken, _, not_ticket = group_take(string.sub(frame, 2))
  redeemed = not_ticket and frame or taken
  if not redeemed then return {4, group_next_wake() or 0} end
  redis.call('LPUSH', processing, redeemed)
  frame = redeemed
end
local _, _, expires = head_of(frame)
local at_ms = now_ms()
if not expires or expires == 0 or expires > at_ms then
  if not rate then
    track(T, frame, 'active', 'started', at_ms)
    return {0, GROUPS.last_wait, redeemed}
  end
  local wait, tat, now = rate_wait(rate)
  if wait > RATE_HORIZON_US then
    if not put_back() then return {-1, 0} end
    return {3, wait}
  end
  if redis.call('LINDEX', processing, 0) ~= frame and redis.call('LPOS', processing, frame) == false then
    return {-1, 0}
  end
  rate_book(rate, tat, now)
  track(T, frame, 'active', 'started', at_ms)
  return {0, math.max(wait, GROUPS.last_wait), redeemed}
end
refused = wrong_type({{dead, 'list'}})
if refused then return refused end
if redis.call('LREM', processing, 1, frame) == 0 then return {-1, 0} end
group_settled(frame)
if end_if_cancelled(dead, counters, at_ms, frame, T) then return {2, 0} end
dead_letter(dead, '{"reason":"expired"}', at_ms, frame, T)
redis.pcall('HINCRBY', counters, 'expired', 1)
redis.pcall('HINCRBY', counters, 'dead_lettered', 1)
return {2, 0}
