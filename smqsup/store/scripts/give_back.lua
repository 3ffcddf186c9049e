-- Give back, free of cost, frames a consumer took and never started: what
-- it prefetched, at a stop (graceful, scale-down, max_messages, a roll) or
-- when the queue turned out paused. Each leaves the consumer's list for the
-- consuming end of pending, so the queue's consumers take them next, ahead
-- of newer messages and in the order they were first taken.
--
-- KEYS[1]  processing list of the consumer
-- KEYS[2]  pending list of the queue
-- KEYS[3]  tracking hash of the queue, KEYS[4] its expiry set, KEYS[5] its
--          event stream
--          (includes/track.lua: a tracked frame given back is "waiting")
-- KEYS[6..11] its group keys: ready, count, state, rate, wait, running
--          (includes/groups.lua)
--          (a grouped frame frees its group's slot and goes back to the front
--          of its group; a ticket goes back as it is, unless its group was
--          paused since: group_turn_back)
-- KEYS[12] its cancel set, KEYS[13] its dead-letter list, KEYS[14] its
--          counters hash, KEYS[15] its dependencies (includes/track.lua,
--          includes/deps.lua): a frame whose cancel was asked is
--          dead-lettered "cancelled" instead, its attempts unchanged
-- ARGV[1..n] the frames, the exact bytes taken, in the order they were taken
--
-- Returns how many went back: a frame no longer in KEYS[1] (reclaimed
-- meanwhile, the consumer declared dead) is left alone, so another copy of
-- the message is never pushed twice.
-- A key of the wrong type among KEYS[1, 2, 13] is an error reply "WRONGTYPE ..."
-- before anything is written (includes/wrong_type.lua): the frames then
-- stay in KEYS[1], where a reclaim finds them.
local processing, pending = KEYS[1], KEYS[2]
local T = {hash = KEYS[3], expiry = KEYS[4], events = KEYS[5], cancel = KEYS[12], deps = KEYS[15]}
local dead, counters = KEYS[13], KEYS[14]
--- @include "wrong_type"
--- @include "now_ms"
--- @include "dead_letter"
--- @include "groups"
groups_use(6, pending)

local refused = wrong_type({{processing, 'list'}, {pending, 'list'}, {dead, 'list'}})
if refused then return refused end
local given = 0
local cancels = redis.pcall('EXISTS', T.cancel) == 1
local at_ms = cancels and now_ms()
-- The newest first: the oldest lands last at the consuming end, so goes first.
for i = #ARGV, 1, -1 do
  local frame = ARGV[i]
  if redis.call('LREM', processing, 1, frame) > 0 then
    group_settled(frame)
    if not (cancels and end_if_cancelled(dead, counters, at_ms, frame, T)) then  -- (a cancelled one never runs)
      if is_ticket(frame) then
        group_turn_back(frame, pending)
      elseif not group_ready(frame, true) then
        redis.call('RPUSH', pending, frame)
      end
      track(T, frame, 'waiting', 'returned')
    end
    given = given + 1
  end
end
return given
